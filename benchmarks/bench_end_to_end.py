"""One whole run at two commits, side by side: the collapse run of the faster-runs target, end to end.

    python -m benchmarks.bench_end_to_end [--baseline 43a82f3] [--config collapse_sokoban] [--steps 20]
                                          [--seeds 13,14] [--quick]

Per seed, the same ``ragen train`` run (``configs/CONFIG.toml``, ``run.steps=STEPS``, ``filter.enabled=false``, no
warm-start cache, one torch thread, each commit's own code and config file) is started at the same moment with
the code of ``--baseline`` (a git worktree under ``benchmarks/.baseline-COMMIT``, as ``bench_profile`` makes it)
and with this checkout's, one process per core of a 2-core machine, so both run under the same conditions. Each
run's wall time is measured from its process start to its exit (model loading, warm start, RL steps, validations,
probes, the final checkpoint and files: everything a user waits for), and split into the phases its own
``metrics.jsonl`` logs (``perf/sft_s``, the sum of ``perf/step_s``, of ``perf/eval_s`` and of ``perf/probe_s``;
the rest is start-up and writing).

The target (docs/performance.md): this run >= 3x faster than at 43a82f3. Writes
``benchmarks/results/end_to_end.json`` (``--quick``: 2 RL steps and 64 demonstrations, ``end_to_end_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.bench_profile import BASELINE, baseline_checkout
from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import RESULTS, write_result

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("warm start", "RL steps", "validations", "probes", "start-up and files")


def run_one(code_root: Path, config: str, seed: int, steps: int, out: Path, extra: list[str]) -> dict[str, Any]:
    """``ragen train`` with the code and config file of `code_root`; wall seconds and the phases' seconds."""
    run_dir = out / "run"
    cmd = [sys.executable, "-m", "ragen_core.apps.train", str(code_root / "configs" / f"{config}.toml"),
           f"run.seed={seed}", f"run.steps={steps}", "filter.enabled=false", 'warm_start.cache_dir=""',
           "run.progress=false", "run.threads=1", "run.max_minutes=0", *extra, "--run-dir", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(code_root), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    with open(out / "log.txt", "w", encoding="utf-8") as log:
        status = subprocess.run(cmd, cwd=code_root, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if status:
        raise RuntimeError(f"the run with {code_root} exited {status}: see {out / 'log.txt'}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]

    def total(key: str) -> float:
        return float(sum(r[key] for r in rows if isinstance(r.get(key), (int, float))))

    phases = {"warm start": total("perf/sft_s"), "RL steps": total("perf/step_s"),
              "validations": total("perf/eval_s"), "probes": total("perf/probe_s")}
    phases["start-up and files"] = wall - sum(phases.values())
    return {"wall_s": wall, "phases": phases, "steps": max(r.get("step", 0) for r in rows)}


def run_pair(base_root: Path, config: str, seed: int, steps: int, extra: list[str]) -> dict[str, Any]:
    """The baseline's and this checkout's run of `seed`, started together (one core each)."""
    with tempfile.TemporaryDirectory(prefix="e2e-") as tmp:
        outs = {side: Path(tmp) / side for side in ("baseline", "now")}
        for p in outs.values():
            p.mkdir()
        load = load_average()
        with ThreadPoolExecutor(2) as pool:
            futures = {side: pool.submit(run_one, root, config, seed, steps, outs[side], extra)
                       for side, root in (("baseline", base_root), ("now", ROOT))}
            result = {side: f.result() for side, f in futures.items()}
    return {"seed": seed, "load_before": load, **result,
            "speedup": result["baseline"]["wall_s"] / result["now"]["wall_s"]}


def markdown(result: dict[str, Any]) -> str:
    base = result["baseline"]
    lines = [f"`configs/{result['config']}.toml`, {result['steps']} RL steps, filter off, no warm-start cache, one "
             f"torch thread; the run at {base} and at this checkout started together, one per core:", "",
             f"| seed | {base} s | now s | speed-up | " + " | ".join(f"{p} ({base} -> now, s)" for p in PHASES) + " |",
             "|---:|---:|---:|---:|" + "---|" * len(PHASES)]
    for pair in result["pairs"]:
        b, n = pair["baseline"], pair["now"]
        cells = " | ".join(f"{b['phases'][p]:.1f} -> {n['phases'][p]:.1f}" for p in PHASES)
        lines.append(f"| {pair['seed']} | {b['wall_s']:.0f} | {n['wall_s']:.0f} | {pair['speedup']:.2f}x | {cells} |")
    s = result["summary"]
    lines += ["", f"Speed-up over the seeds: {s['speedup_total']:.2f}x on the summed wall time "
                  f"(per seed {s['speedup_min']:.2f}x-{s['speedup_max']:.2f}x); the target is 3x."]
    return "\n".join(lines)


def _seed_list(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """--seeds as integers >= 0 (a usage error for an empty list, a stray comma or a non-integer, before the
    baseline checkout is prepared)."""
    from ragen_core.apps.arguments import comma_list

    try:
        seeds = [int(s) for s in comma_list("--seeds", text, "seed")]
    except ValueError as e:
        parser.error(str(e) if str(e).startswith("--seeds") else f"--seeds {text!r}: give integers, e.g. 13,14")
    if any(s < 0 for s in seeds):
        parser.error(f"--seeds {text!r}: seeds are integers >= 0")
    return seeds


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import positive_int

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--config", default="collapse_sokoban")
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--seeds", default="13,14", help="comma-separated seeds (default 13,14)")
    p.add_argument("--quick", action="store_true", help="2 RL steps and 64 demonstrations (a smoke run)")
    a = p.parse_args(argv)
    seeds = _seed_list(p, a.seeds)
    steps = 2 if a.quick else a.steps
    extra = ["warm_start.sft_episodes=64"] if a.quick else []
    try:
        base_root = baseline_checkout(a.baseline)
    except ValueError as e:
        p.error(str(e))
    t0 = time.perf_counter()
    pairs = []
    for seed in seeds:
        print(f"[end_to_end] seed {seed}: {a.baseline} and now, side by side ...", flush=True)
        pairs.append(run_pair(base_root, a.config, seed, steps, extra))
    speedups = [pr["speedup"] for pr in pairs]
    result = {"benchmark": "end_to_end", "quick": a.quick, "baseline": a.baseline, "config": a.config,
              "steps": steps, "pairs": pairs,
              "summary": {"speedup_total": sum(pr["baseline"]["wall_s"] for pr in pairs)
                          / sum(pr["now"]["wall_s"] for pr in pairs),
                          "speedup_min": min(speedups), "speedup_max": max(speedups)},
              "wall_s": time.perf_counter() - t0, "machine": describe_machine()}
    result["markdown"] = markdown(result)
    write_result(result, RESULTS / ("end_to_end_quick.json" if a.quick else "end_to_end.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
