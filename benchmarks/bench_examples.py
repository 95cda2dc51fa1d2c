"""The runnable examples with their defaults: wall time, CPU time and the summary line each prints.

    python -m benchmarks.bench_examples

Runs every ``examples/trl_*.py`` in a fresh process (one torch thread, as their headers say), one after the other,
and records the wall time, the CPU time of the process and its children, and the example's last line (its result:
success before and after, sampled reward, non-empty steps). Writes ``benchmarks/results/examples.json``; the table
goes into docs/scale_out.md (``results:examples``), which the examples' headers point to, so the times a user reads
are those of the current code.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = ("trl_countdown.py", "trl_frozenlake_tools.py")


def run_example(name: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name)], cwd=str(ROOT), env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [x for x in proc.stdout.strip().splitlines() if x.strip()]
    return {"example": name, "status": proc.returncode, "wall_s": wall, "cpu_s": cpu,
            "summary": lines[-1] if lines else proc.stderr.strip().splitlines()[-1:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    load_start = load_average()
    rows = [run_example(name) for name in EXAMPLES]
    lines = ["| example (defaults) | wall time | CPU time | what it printed last |", "|---|---:|---:|---|"]
    for r in rows:
        status = "" if r["status"] == 0 else f" (exit {r['status']})"
        lines.append(f"| `python examples/{r['example']}` | {r['wall_s']:.0f} s{status} | {r['cpu_s']:.0f} s | "
                     f"{r['summary']} |")
    if load_start is not None:
        # Wall time grows with other work on the machine; CPU time much less: say how busy it was.
        lines += ["", f"Load average of the machine before the examples started: {load_start:.1f} on "
                      f"{os.cpu_count()} cores (0 = idle); the CPU time is the figure to compare across machines."]
    result = {"benchmark": "examples", "rows": rows, "load_average_start": load_start, "machine": describe_machine(),
              "markdown": "\n".join(lines) + "\n"}
    write_result(result, RESULTS / "examples.json")
    return int(any(r["status"] for r in rows))


if __name__ == "__main__":
    raise SystemExit(main())
