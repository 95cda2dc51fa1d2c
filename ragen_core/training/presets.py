"""The shipped configs ("presets"): `ragen configs`, `ragen train NAME`, `ragen reproduce` from an installed wheel.

The repository keeps its configs in ``configs/*.toml`` (the docs and tests name them by that path); the wheel ships
the same files as package data in ``ragen_core/_configs/`` (setup.py maps the folder at build time). This module
finds them in either place and imports nothing beyond the standard library, so `ragen configs` works without the
`train` extra.

A preset's name is its file name without ``.toml`` (``bandit_tiny``); its description is the first comment line of
the file.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["presets_dir", "list_presets", "preset_path", "resolve_config", "describe"]

_PACKAGE = Path(__file__).resolve().parents[1]  # ragen_core/
#: Where an installed wheel keeps the configs (package data).
PACKAGED = _PACKAGE / "_configs"
#: Where a source checkout (or an editable install) keeps them.
CHECKOUT = _PACKAGE.parent / "configs"


def presets_dir() -> Path | None:
    """The folder of the shipped configs: the wheel's package data, else the checkout's ``configs/``; None when
    neither holds a ``*.toml`` file."""
    for folder in (PACKAGED, CHECKOUT):
        if folder.is_dir() and any(folder.glob("*.toml")):
            return folder
    return None


def describe(path: Path) -> str:
    """The first comment line of a config file, without its ``#`` ("" when the file opens with no comment)."""
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line.strip()
            if not text:
                continue
            return text.lstrip("#").strip() if text.startswith("#") else ""
    except OSError:
        return ""
    return ""


def list_presets() -> list[tuple[str, Path, str]]:
    """Every shipped config as ``(name, path, first comment line)``, sorted by name."""
    folder = presets_dir()
    if folder is None:
        return []
    return [(p.stem, p, describe(p)) for p in sorted(folder.glob("*.toml"))]


def preset_path(name: str) -> Path | None:
    """The shipped config called `name` (``bandit_tiny``, or ``bandit_tiny.toml``), or None."""
    folder = presets_dir()
    if folder is None:
        return None
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    path = folder / f"{stem}.toml"
    return path if stem and "/" not in stem and "\\" not in stem and path.is_file() else None


def _is_bare_name(text: str) -> bool:
    return "/" not in text and "\\" not in text and not text.endswith(".toml")


def resolve_config(arg: str) -> tuple[Path, str]:
    """The config file meant by `arg`, and a note for the user ("" when `arg` is simply an existing file).

    - an existing file: itself;
    - a bare name (no path separator, no ``.toml``): the shipped preset of that name (``bandit_tiny``);
    - ``configs/NAME.toml`` that does not exist here (an installed wheel, run outside a checkout): the shipped
      preset NAME, with a note saying so.

    Raises:
        ValueError: naming the argument and listing the presets.
    """
    path = Path(arg).expanduser()
    if path.is_file():
        return path, ""
    if _is_bare_name(arg):
        found = preset_path(arg)
        if found is not None:
            return found, ""
    elif path.parent.name == "configs" and path.suffix == ".toml":
        found = preset_path(path.name)
        if found is not None:
            return found, f"{arg} does not exist here; using the shipped preset {found.stem} ({found})"
    names = ", ".join(name for name, _, _ in list_presets()) or "none found"
    what = "no such preset or file" if _is_bare_name(arg) else "no such file"
    raise ValueError(f"config {arg!r}: {what}; shipped presets (`ragen configs`): {names}")
