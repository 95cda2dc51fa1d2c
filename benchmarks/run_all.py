"""`make bench` / `ragen bench`: run every benchmark of the project, then regenerate the README tables.

Each benchmark is a module with `main(argv) -> int` that writes `benchmarks/results/NAME.json`
(with a `markdown` table and a `machine` description). A benchmark whose module is missing or that
fails is reported and the others still run; the exit status is 1 if any failed.

    python -m benchmarks.run_all [--quick] [--only envs,mi] [--full learning]

The learning-curve benchmark always runs its quick form here (one seed, top-p only, a third of the RL steps,
about 10 minutes on 2 cores); its full form (`--full learning`, or `python -m benchmarks.bench_learning`) takes
hours and produced the committed `benchmarks/results/learning.json`. So does the TRL cross-check (`--full
trl_crosscheck`, about 40 minutes on 2 cores, `benchmarks/results/trl_crosscheck.json`) and the lean forward's
A/B (`--full fast_forward`: 3 seeds x 2 settings of a 20-step collapse run, `benchmarks/results/fast_forward.json`)
and the end-to-end run beside 43a82f3 (`--full end_to_end`: 2 seeds of the 20-step collapse run, about 11 minutes,
`benchmarks/results/end_to_end.json`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
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
    ("profile", "benchmarks.bench_profile"),
    ("micro", "benchmarks.micro.run"),
    ("cross_score", "benchmarks.bench_cross_score"),
    ("fast_forward", "benchmarks.bench_fast_forward"),
    ("end_to_end", "benchmarks.bench_end_to_end"),
    ("speed_candidates", "benchmarks.bench_speed_candidates"),
    ("learning", "benchmarks.bench_learning"),
    ("trl_filtering", "benchmarks.bench_trl_filtering"),
    ("trl_crosscheck", "benchmarks.bench_trl"),
    ("eval", "benchmarks.bench_eval"),
)
#: Benchmarks whose full form takes long: `make bench` runs their quick form unless --full names them.
QUICK_ALWAYS = {"learning", "trl_crosscheck", "fast_forward", "end_to_end"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", default="", help="comma-separated result names to run")
    parser.add_argument("--full", default="", help="comma-separated names of QUICK_ALWAYS to run in full "
                                                   "(e.g. learning: 4 configs x 3 seeds x 2 variants, hours)")
    args = parser.parse_args(argv)
    # A stray comma, an empty list or an unknown name is a usage error (exit 2): `--only typo` used to run nothing and
    # then rewrite the README tables, `--only ''` to run every benchmark (hours). The rule of `ragen bench`.
    from ragen_core.apps.bench import list_problem

    problem = list_problem(sys.argv[1:] if argv is None else argv, [name for name, _ in BENCHMARKS],
                           sorted(QUICK_ALWAYS))
    if problem is not None:
        parser.error(problem)
    full = {name for name in args.full.split(",") if name}
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
            quick = args.quick or (name in QUICK_ALWAYS and name not in full)
            status = module.main(["--quick"] if quick else [])
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
