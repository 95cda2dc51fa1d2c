"""Throughput of the task envs: oracle episodes/s per env, BM25 query latency, sandbox runs/s.

No absolute goals: these numbers are recorded so that regressions show.

- episodes/s: every registered env played by its own oracle (`ragen_core.apps.env_demo.oracle_answer`),
  fresh seed per episode, so generation/verification of each item is included;
- BM25: build an index over 10,000 generated passages and time `top_k` queries of entity names;
- sandbox: `run_program` of a trivial correct program, end to end (namespaces, minimal root, uid drop,
  seccomp, rlimits, a cgroup per run).

    python -m benchmarks.bench_tasks [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
TRIVIAL_PROGRAM = "print(sum(map(int, input().split())))"


def bench_episodes(seconds: float) -> list[dict]:
    import gymnasium as gym

    import ragen_envs
    from ragen_core.apps.env_demo import oracle_answer, run_episode

    rows = []
    for env_id in ragen_envs.env_ids():
        env = gym.make(env_id)
        run_episode(env, oracle_answer, seed=0)  # warm-up: builds indexes, catalogues, caches
        episodes, successes, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds or episodes < 3:
            success, _ = run_episode(env, oracle_answer, seed=1000 + episodes)
            episodes += 1
            successes += success
        elapsed = time.perf_counter() - start
        rows.append(
            {
                "env": env_id,
                "episodes_per_s": episodes / elapsed,
                "episodes": episodes,
                "oracle_success": successes / episodes,
            }
        )
        env.close()
    return rows


def bench_bm25(n_passages: int, n_queries: int) -> dict:
    from ragen_envs.searchqa.retriever import BM25Index

    rng = np.random.default_rng(0)
    syllables = ["ka", "lo", "mi", "ren", "tor", "vi", "sel", "dan", "pe", "quo", "ra", "zu", "bel", "cor"]
    words = ["".join(rng.choice(syllables, size=int(rng.integers(2, 4)))) for _ in range(5000)]
    docs = [" ".join(rng.choice(words, size=40)) for _ in range(n_passages)]
    start = time.perf_counter()
    index = BM25Index(docs)
    build = time.perf_counter() - start
    queries = [" ".join(rng.choice(words, size=2)) for _ in range(n_queries)]
    times = []
    for q in queries:
        t0 = time.perf_counter()
        index.top_k(q, 5)
        times.append(time.perf_counter() - t0)
    return {
        "passages": n_passages,
        "build_s": build,
        "query_ms_median": 1000 * statistics.median(times),
        "query_ms_p90": 1000 * float(np.quantile(times, 0.9)),
        "queries": n_queries,
    }


def bench_sandbox(runs: int) -> dict:
    from ragen_envs.code.sandbox import run_program, sandbox_isolation

    isolation = sandbox_isolation()
    run_program(TRIVIAL_PROGRAM, "1 2 3\n")  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = run_program(TRIVIAL_PROGRAM, "1 2 3\n")
        times.append(time.perf_counter() - t0)
        if result.stdout.strip() != "6":
            raise RuntimeError(f"sandbox returned {result.stdout!r} for a trivial program ({result.verdict})")
    return {
        "mode": isolation.mode,
        "runs": runs,
        "runs_per_s": runs / sum(times),
        "ms_median": 1000 * statistics.median(times),
    }


def markdown(episodes: list[dict], bm25: dict, sandbox: dict) -> str:
    lines = ["| Env (oracle agent) | episodes/s | oracle success |", "| --- | ---: | ---: |"]
    for row in episodes:
        lines.append(f"| `{row['env']}` | {row['episodes_per_s']:,.1f} | {row['oracle_success']:.0%} |")
    lines += [
        "",
        "| Component | Result |",
        "| --- | --- |",
        f"| BM25 index build, {bm25['passages']:,} passages | {bm25['build_s']:.2f} s |",
        f"| BM25 top-5 query, {bm25['passages']:,} passages | {bm25['query_ms_median']:.2f} ms median, "
        f"{bm25['query_ms_p90']:.2f} ms p90 |",
        f"| Sandbox run of a trivial correct program ({sandbox['mode']}) | {sandbox['runs_per_s']:.1f} runs/s "
        f"({sandbox['ms_median']:.0f} ms median) |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short measurements")
    parser.add_argument("--out", type=Path, default=None,
                        help="the result JSON (default benchmarks/results/tasks.json; --quick: tasks_quick.json)")
    args = parser.parse_args(argv)
    from benchmarks.machine import check_output_path, describe_machine

    check_output_path(parser, args.out)
    from benchmarks.readme_tables import write_result

    seconds, queries, runs = (0.5, 50, 5) if args.quick else (3.0, 500, 30)
    episodes = bench_episodes(seconds)
    bm25 = bench_bm25(10_000, queries)
    sandbox = bench_sandbox(runs)
    table = markdown(episodes, bm25, sandbox)
    result = {
        "benchmark": "tasks",
        "mode": "quick" if args.quick else "full",
        "machine": describe_machine(),
        "episodes": episodes,
        "bm25": bm25,
        "sandbox": sandbox,
        "markdown": table,
    }
    # The quick form writes tasks_quick.json (ignored by git), not the committed full-mode tasks.json.
    write_result(result, args.out or RESULTS / ("tasks_quick.json" if args.quick else "tasks.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
