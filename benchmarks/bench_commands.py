"""What the README's two commands cost: `make demo` and `make test` timed in a fresh clone of this checkout.

    python -m benchmarks.bench_commands [--skip-demo] [--skip-test]

Clones the current commit into a temporary folder (nothing of this checkout's `.venv` or caches is reused),
then times ``make demo`` (which creates ``.venv`` and installs torch and the project first) and ``make test`` (the
linter and the whole suite, on the existing ``.venv``), and measures the size of ``.venv`` and the number of tests
that ran. Writes ``benchmarks/results/commands.json`` (its table goes into the README, ``results:commands``) and
``demo.json`` (the demo's printed summary, into docs/train.md, ``results:demo``).
The numbers are of this machine at that commit: a busier or slower machine takes longer.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


def _folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def demo_summary(output: str) -> str:
    """The demo's closing summary: the ``[4/4] summary`` line and its indented lines after it (pip's and the build
    backend's warnings, interleaved on stderr, are left out); the output's last 3000 characters if it has none."""
    if "[4/4] summary" not in output:
        return output.strip()[-3000:]
    lines = output[output.find("[4/4] summary"):].splitlines()
    kept = [lines[0]]
    for line in lines[1:]:
        if not line.startswith("  ") or line.lstrip().startswith(("/", "!!", "*")):
            break
        kept.append(line)
    return "\n".join(kept)


def _timed(cmd: list[str], cwd: Path) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=str(cwd), capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-test", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="ragen-commands-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        # The commit measured is the clone's (this checkout may move on while the commands run).
        cloned = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        if not args.skip_demo:
            seconds, status, out = _timed(["make", "demo"], clone)
            rows.append({"command": "make demo", "seconds": seconds, "status": status,
                         "what": "create .venv, install torch and the project, train the Sokoban demo"})
            summary = demo_summary(out)
            demo = {"benchmark": "demo", "machine": {**describe_machine(), "commit": cloned}, "wall_s": seconds,
                    "markdown": "What `make demo` printed at the end (a fresh clone, this machine):\n\n```text\n"
                                + summary + "\n```\n"}
            write_result(demo, RESULTS / "demo.json", show="")
        else:
            subprocess.run(["make", ".venv/.installed"], cwd=str(clone), check=True, capture_output=True)
        venv_mib = _folder_mib(clone / ".venv")
        if not args.skip_test:
            seconds, status, out = _timed(["make", "test"], clone)
            counts = re.findall(r"(\d+) (passed|skipped|failed)", out)
            rows.append({"command": "make test", "seconds": seconds, "status": status,
                         "what": "the linter, then the whole suite on the existing .venv",
                         "tests": {kind: int(n) for n, kind in counts}})
    lines = ["| command | what it does here | wall time | result |", "|---|---|---:|---|"]
    for r in rows:
        result = "ok" if r["status"] == 0 else f"exit {r['status']}"
        if "tests" in r:
            result += ", " + ", ".join(f"{n} {k}" for k, n in r["tests"].items())
        lines.append(f"| `{r['command']}` | {r['what']} | {r['seconds'] / 60:.1f} min | {result} |")
    lines += ["", f"The `.venv` they install: {venv_mib / 1024:.2f} GiB (the CPU build of torch is most of it)."]
    if load_start is not None:
        # The times scale with what else runs: say how busy the cores were before these commands started.
        lines.append(f"Load average of the machine before the commands started: {load_start:.1f} on "
                     f"{os.cpu_count()} cores (0 = idle; {os.cpu_count()} = every core busy with other work).")
    result = {"benchmark": "commands", "rows": rows, "venv_mib": venv_mib, "load_average_start": load_start,
              "machine": {**describe_machine(), "commit": cloned},
              "markdown": "\n".join(lines) + "\n"}
    write_result(result, RESULTS / "commands.json")
    return int(any(r["status"] for r in rows))


if __name__ == "__main__":
    raise SystemExit(main())
