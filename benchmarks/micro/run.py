"""Run the pytest-benchmark micro-benchmarks and compare with the saved baseline.

    python -m benchmarks.micro.run [--quick] [--save-baseline]

The baseline lives in ``benchmarks/micro/baseline`` (``--benchmark-storage``; pytest-benchmark keeps one folder
per machine/Python id). Without ``--save-baseline`` the run is compared with the latest saved run of this machine
id (``--benchmark-compare``) when there is one, and saved as a new numbered run otherwise. Writes
``benchmarks/results/micro.json`` (with a ``markdown`` table and the machine) so ``run_all`` can include it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BASELINE = HERE / "baseline"
RESULTS = ROOT / "benchmarks" / "results"


def _has_baseline() -> bool:
    return any(BASELINE.glob("*/*.json"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter measuring time per benchmark")
    parser.add_argument("--save-baseline", action="store_true", help="store this run as the new baseline")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "micro.json"
        cmd = [sys.executable, "-m", "pytest", str(HERE / "bench_micro.py"), "-q", "-p", "no:cacheprovider",
               "-p", "no:xdist", "-o", "python_files=bench_*.py", "-o", "addopts=", "--rootdir", str(ROOT),
               f"--benchmark-storage=file://{BASELINE}", f"--benchmark-json={out_json}",
               "--benchmark-columns=min,median,iqr,ops,rounds", "--benchmark-sort=name",
               f"--benchmark-max-time={0.2 if args.quick else 1.0}", "--benchmark-warmup=on"]
        if args.save_baseline:
            cmd.append("--benchmark-save=baseline")
        elif _has_baseline():
            cmd.append("--benchmark-compare")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # one thread, as stated
        status = subprocess.run(cmd, cwd=str(ROOT), env=env).returncode
        if not out_json.exists():
            return status or 1
        data = json.loads(out_json.read_text())
    from benchmarks.machine import describe_machine
    from benchmarks.readme_tables import write_result

    # pytest-benchmark's ops is 1 / mean, not 1 / median: the header says so (a skewed benchmark's two differ).
    lines = ["| micro-benchmark | median | IQR | ops/s (1 / mean) |", "|---|---:|---:|---:|"]
    for b in data["benchmarks"]:
        s = b["stats"]
        lines.append(f"| {b['name'].removeprefix('test_')} | {s['median'] * 1e6:,.1f} us | {s['iqr'] * 1e6:,.1f} us "
                     f"| {s['ops']:,.0f} |")
    lines.append("")
    lines.append("pytest-benchmark, one thread; compare a change with `python -m benchmarks.micro.run` "
                 "(baseline in `benchmarks/micro/baseline`).")
    result = {"benchmark": "micro", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "quick": args.quick, "machine": describe_machine(),
              "benchmarks": [{"name": b["name"], **{k: b["stats"][k] for k in ("min", "median", "iqr", "ops",
                                                                              "rounds")}}
                             for b in data["benchmarks"]],
              "markdown": "\n".join(lines)}
    write_result(result, RESULTS / ("micro_quick.json" if args.quick else "micro.json"))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
