"""Regenerate the results tables of the README and the docs from `benchmarks/results/*.json`.

Each benchmark writes `benchmarks/results/NAME.json` with at least a `"markdown"` field (its
results table, Markdown) and a `"machine"` field. The README and the pages of `docs/` hold one block per benchmark
between `<!-- results:NAME:start -->` and `<!-- results:NAME:end -->`; this script replaces the
inside of every block whose JSON exists, so no number on those pages is typed by hand.

    python -m benchmarks.readme_tables [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from ragen_core.jsonio import strict_dumps as strict_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
#: Every page whose results blocks are filled.
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))
_BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+):start -->\n)(?P<body>.*?)(<!-- results:(?P=name):end -->)", re.S)


def machine_line(machine: dict) -> str:
    """One line describing the machine a result was measured on."""
    keys = ("cpu", "cpu_arithmetic", "cores", "platform", "python", "torch", "date", "commit")
    parts = [f"{k}: {machine[k]}" for k in keys if machine.get(k) not in (None, "")]
    return "Measured on " + "; ".join(parts) + "." if parts else ""


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it and a rename: an interrupted run (Ctrl-C, a full
    disk) leaves the previous file whole, never a truncated one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_result(result: dict, path: Path, *, show: str | None = None) -> Path:
    """Write one benchmark's result JSON to `path` (the format of the module docstring) and report it.

    Prints `show` (default: the result's `markdown` table), then `wrote PATH`, with the run's duration when the
    result has a `wall_s`. The JSON is strict (:func:`ragen_core.jsonio.strict_dumps`) and written atomically
    (:func:`write_text_atomic`).
    """
    write_text_atomic(Path(path), strict_json(result, indent=2) + "\n")
    print(result["markdown"] if show is None else show)
    wall = result.get("wall_s")
    print(f"wrote {path}" + ("" if wall is None else f" ({wall:.0f} s)"))
    return path


def render_block(name: str) -> str | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    body = data.get("markdown", "").rstrip() + "\n"
    machine = data.get("machine")
    if isinstance(machine, dict):
        body += "\n" + machine_line(machine) + f" Source: `benchmarks/results/{name}.json`.\n"
    return body


def update(text: str) -> tuple[str, list[str]]:
    """Returns the new README text and the names of the blocks that were filled."""
    filled: list[str] = []

    def replace(match: re.Match) -> str:
        body = render_block(match.group("name"))
        if body is None:
            return match.group(0)
        filled.append(match.group("name"))
        return match.group(1) + body + match.group(4)

    return _BLOCK.sub(replace, text), filled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale, filled = [], []
    for page in PAGES:
        old = page.read_text()
        new, names = update(old)
        filled += names
        if new != old:
            stale.append(page)
            if not args.check:
                page.write_text(new)
    if args.check:
        return int(bool(stale))
    print(f"results tables regenerated: {', '.join(filled) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
