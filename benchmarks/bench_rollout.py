"""Rollout throughput of the tiny policy on Sokoban: generated tokens per second of ``ragen_core.rollout.rollout``.

    python -m benchmarks.bench_rollout [--quick] [--device cpu|cuda] [--threads 1]

One measurement = one ``rollout()`` call of P groups x G episodes on ``ragen/Sokoban-v0`` (lock-step turns, one
batched KV-cached ``HFPolicy.generate`` per turn, env steps, prompt bookkeeping, the padded training batch). Reported:
generated tokens/s (the headline), prompt tokens/s (each turn's full prompt, counted once per episode: the lean
forward prefills a group's shared prompt once, so this counts tokens served, not tokens computed), episodes/s and
seconds per rollout, median and IQR over the repeats after one small warm-up call. ``--quick`` runs a smaller batch
through the same path, two turns included (the second turn's prompt building is part of what is timed). The
untrained tiny model rarely stops early, so responses run close to ``max_new_tokens``. Results:
``benchmarks/results/rollout.json`` (quick: ``rollout_quick.json``) with the machine, versions, date, torch threads
and a Markdown table.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.machine import setup_torch, torch_result_header  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ENV_ID = "ragen/Sokoban-v0"
#: `--configs` defaults (PxG:turns:new_tokens). The quick one keeps the full one's two turns: with one turn it skipped
#: the multi-turn path (the second turn's prompt from the first one's history) that the full table times.
FULL_CONFIG, QUICK_CONFIG = "4x8:2:32", "2x2:2:16"


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q1, med, q3 = np.percentile(np.asarray(xs, dtype=float), [25, 50, 75])
    return float(q1), float(med), float(q3)


def measure(policy: Any, p: int, g: int, turns: int, max_new_tokens: int, repeats: int, device: torch.device
            ) -> dict[str, Any]:
    """Time ``repeats`` rollouts of p x g episodes (distinct seeds each time) after a 1 x 2 warm-up."""
    from ragen_core.rollout import RolloutSettings, make_envs, rollout

    envs = make_envs(ENV_ID, p * g)
    settings = RolloutSettings(max_turns=turns, context="full", max_new_tokens=max_new_tokens)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        rollout(policy, envs[:2], [0], 2, RolloutSettings(max_turns=1, max_new_tokens=4), generator=gen)
        runs = []
        for r in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            batch = rollout(policy, envs, [1000 + r * p + i for i in range(p)], g, settings, generator=gen)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            generated = int(batch.response_length.sum())
            prompt_tokens = sum(len(t.prompt_ids) for traj in batch.trajectories for t in traj.turns)
            runs.append({"seconds": dt, "generated_tokens": generated, "prompt_tokens": prompt_tokens,
                         "episodes": p * g, "turns": int(batch.num_turns.sum())})
    secs = [x["seconds"] for x in runs]
    tok_s = [x["generated_tokens"] / x["seconds"] for x in runs]
    pre_s = [x["prompt_tokens"] / x["seconds"] for x in runs]
    eps = [x["episodes"] / x["seconds"] for x in runs]
    return {
        "P": p, "G": g, "max_turns": turns, "max_new_tokens": max_new_tokens, "repeats": repeats, "runs": runs,
        "seconds": _quartiles(secs), "generated_tokens_per_s": _quartiles(tok_s),
        "prompt_tokens_per_s": _quartiles(pre_s), "episodes_per_s": _quartiles(eps),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = ["| env | P x G | turns x new tokens | generated tokens/s (median [IQR]) | prompt tokens/s | "
             "episodes/s | s / rollout |", "|---|---|---|---:|---:|---:|---:|"]
    for c in result["configs"]:
        q1, med, q3 = c["generated_tokens_per_s"]
        lines.append(f"| {ENV_ID} | {c['P']} x {c['G']} | {c['max_turns']} x {c['max_new_tokens']} | "
                     f"{med:,.0f} [{q1:,.0f}, {q3:,.0f}] | {c['prompt_tokens_per_s'][1]:,.0f} | "
                     f"{c['episodes_per_s'][1]:.2f} | {c['seconds'][1]:.2f} |")
    lines.append("")
    lines.append(f"Tiny policy ({result['parameters'] / 1e6:.1f}M parameters, untrained, fp32) on {result['device']}, "
                 f"{result['torch_threads']} torch thread(s); one batched KV-cached generate call per turn, env steps "
                 f"and batch building included; prompt tokens/s counts each turn's full prompt.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_rollout", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small configuration, 2 repeats")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--repeats", type=positive_int, default=None, help="default 3 (quick 2)")
    parser.add_argument("--configs", default=None,
                        help=f"semicolon list of PxG:turns:new_tokens (default {FULL_CONFIG!r}, "
                             f"quick {QUICK_CONFIG!r})")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    device = setup_torch(parser, args)
    configs = []
    for part in (args.configs or (QUICK_CONFIG if args.quick else FULL_CONFIG)).split(";"):
        try:
            size, turns, new = part.split(":")
            p, g = (int(x) for x in size.lower().split("x"))
            configs.append((p, g, int(turns), int(new)))
        except ValueError:
            parser.error(f"--configs entries look like 4x8:2:32 (PxG:turns:new_tokens); got {part!r}")
    repeats = args.repeats or (2 if args.quick else 3)

    from benchmarks.readme_tables import write_result
    from ragen_core.policy import load_policy

    t_start = time.perf_counter()
    policy = load_policy("tiny", device=device)
    result: dict[str, Any] = {
        **torch_result_header("bench_rollout", args.quick, device),
        "parameters": sum(p.numel() for p in policy.model.parameters()),
        "configs": [],
    }
    for p, g, turns, new in configs:
        print(f"[rollout] {ENV_ID} {p}x{g}, {turns} turn(s) x {new} tokens ...", flush=True)
        result["configs"].append(measure(policy, p, g, turns, new, repeats, device))
    result["wall_s"] = time.perf_counter() - t_start
    result["markdown"] = markdown(result)
    write_result(result, args.out or RESULTS / ("rollout_quick.json" if args.quick else "rollout.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
