"""`make bench` / `ragen bench`: run every benchmark of the project, then regenerate the README tables.

Each benchmark is a module with `main(argv) -> int` that writes `benchmarks/results/NAME.json`
(with a `markdown` table and a `machine` description). A benchmark whose module is missing or that
fails is reported and the others still run; the exit status is 1 if any failed.

    python -m benchmarks.run_all [--quick] [--only envs,mi]
"""

from __future__ import annotations

import argparse
import importlib
import time
import traceback

from benchmarks import readme_tables

#: (result name, module) in the order they run.
BENCHMARKS: tuple[tuple[str, str], ...] = (
    ("envs", "benchmarks.bench_envs"),
    ("tasks", "benchmarks.bench_tasks"),
    ("mi", "benchmarks.bench_mi"),
    ("filtering", "benchmarks.bench_filtering"),
    ("rollout", "benchmarks.bench_rollout"),
    ("micro", "benchmarks.micro.run"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", default="", help="comma-separated result names to run")
    args = parser.parse_args(argv)
    only = {name for name in args.only.split(",") if name}
    failed: list[str] = []
    for name, module_name in BENCHMARKS:
        if only and name not in only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                print(f"[{name}] skipped: {module_name} does not exist")
                continue
            raise
        print(f"[{name}] running {module_name} ...", flush=True)
        start = time.perf_counter()
        try:
            status = module.main(["--quick"] if args.quick else [])
        except Exception:
            traceback.print_exc()
            status = 1
        print(f"[{name}] finished in {time.perf_counter() - start:.0f} s (status {status})", flush=True)
        if status:
            failed.append(name)
    readme_tables.main([])
    if failed:
        print(f"failed benchmarks: {', '.join(failed)}")
    return int(bool(failed))


if __name__ == "__main__":
    raise SystemExit(main())
