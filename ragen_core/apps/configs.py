"""`ragen configs [NAME]`: the shipped configs (presets) with their first comment line, or one preset's TOML."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

PROG = "ragen configs"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """`ragen configs [NAME]`."""
    parser = argparse.ArgumentParser(
        prog=prog, description="List the shipped configs (presets) with their first comment line, or print one "
        "preset's TOML. Train one with `ragen train NAME [key=value ...]`.")
    parser.add_argument("name", nargs="?", default=None, help="print this preset's TOML instead")
    return parser


def closest_preset(name: str, names: list[str]) -> str:
    """" (did you mean 'X'?)" for the preset closest to `name` (a path such as ``configs/X.toml``, case and ``-``
    for ``_`` ignored), or "" when none is close."""
    import difflib
    from pathlib import PurePath

    key = PurePath(name.replace("\\", "/")).name.lower().removesuffix(".toml").replace("-", "_")
    keyed = {n.lower(): n for n in names}
    close = difflib.get_close_matches(key, list(keyed), n=1, cutoff=0.6)
    return f" (did you mean {keyed[close[0]]!r}?)" if close else ""


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """The listing (or NAME's TOML); 2 with one `config error:` line for an unknown NAME or no presets at all."""
    args = build_parser(prog).parse_args(argv)
    from ragen_core.training.presets import list_presets, preset_path, presets_dir

    if args.name is not None:  # (`ragen configs ''` is an unknown name, not the listing)
        path = preset_path(args.name)
        if path is None:
            names = [n for n, _, _ in list_presets()]
            print(f"config error: no shipped preset {args.name!r}{closest_preset(args.name, names)}; presets: "
                  f"{', '.join(names)}", file=sys.stderr)
            return 2
        print(path.read_text(encoding="utf-8"), end="")
        return 0
    presets = list_presets()
    if not presets:
        print("no shipped configs found (neither the wheel's ragen_core/_configs nor a checkout's configs/)",
              file=sys.stderr)
        return 2
    width = max(len(name) for name, _, _ in presets)
    for name, _, text in presets:
        print(f"{name:<{width}}  {text}")
    # The footer is a note for a person reading a terminal, not a row: piped or redirected, the output is the rows
    # alone (`ragen configs | cut -d' ' -f1` gave an empty name and the count among the names).
    if sys.stdout.isatty():
        print(f"\n{len(presets)} presets in {presets_dir()}; train one with `ragen train NAME [key=value ...]`, "
              "print one with `ragen configs NAME`")
    return 0


if __name__ == "__main__":
    # a closed stdout pipe (`| head`) ends it quietly, as `ragen configs` does
    from ragen_core.apps.cli import run_command

    raise SystemExit(run_command("configs", sys.argv[1:]))
