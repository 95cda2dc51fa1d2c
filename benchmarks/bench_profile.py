"""Where a training run's time goes, part by part, against the arithmetic floor and against an older commit.

    python -m benchmarks.bench_profile [--quick] [--baseline COMMIT] [--configs a,b] [--no-threads]

For every shipped CPU config (``configs/*_tiny.toml`` and the collapse testbed's), one profiled run
(:mod:`benchmarks.profile_driver`: a shortened warm start, ``STEPS`` RL steps, one validation, one probe) in a fresh
process on one torch thread, first with the code of ``--baseline`` (default 43a82f3, the commit before the lean
forward; checked out once into a git worktree under ``benchmarks/.baseline-COMMIT``), then with this checkout's
code, one after the other on the same machine: the ratios are side by side.

Per phase and part it reports the seconds (and their share of the phase) and the **arithmetic floor**: the dense
floating-point work of that phase divided by the core's measured matrix-product rate. Dense work is what a plain
forward computes for the tokens that phase had to process:

    forward MACs per token = layers * (h*(h + 2*kv*d) + h*h + 3*h*i + 2*h*ctx) + V*h

(h hidden size, kv*d the key/value width, i the MLP width, ctx the mean number of earlier positions a token
attends to, V the vocabulary), times 2 FLOPs per MAC, and times 3 for a forward and backward. Generation: prompt
and generated tokens, forward; the update and the SFT steps: the trained rows' real tokens, forward and backward;
the probe: its generation plus every trace position under every prompt (forward). A time at 1.0x the floor computes
dense arithmetic at the full matrix rate; the lean forward can go below it (it skips work the floor counts).

The matrix rate is measured in this process: the best of 5 timings of a float32 ``[800, 128] x [128, 512]``
product, the tiny model's typical MLP shape, on one thread.

``threads``: SFT steps per second with 1 and 2 torch threads, on a quiet machine and beside one other busy process
(what ``ragen reproduce`` runs: two single-thread runs on two cores): the measurement behind ``run.threads = 0``
(auto: one thread for the tiny model).

Writes ``benchmarks/results/profile.json`` (quick: ``profile_quick.json``) with a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
DRIVER = Path(__file__).resolve().parent / "profile_driver.py"
BASELINE = "43a82f3"
CONFIGS = ("bandit_tiny", "countdown_tiny", "pocketcube_tiny", "sokoban_tiny", "frozenlake_tiny", "collapse_sokoban",
           "collapse_frozenlake")
#: Warm-start demonstrations per profiled run (the configs' own numbers are 1500-4000: the per-step cost is what is
#: measured, and the study's time is rebuilt from it).
WARM_EPISODES = {"full": 256, "quick": 64}
PHASE_LABELS = {"warm_start": "warm start", "rl_steps": "RL step", "validation": "validation", "probe": "probe"}


# ---------------------------------------------------------------------------------------------- the floor
def matmul_gflops(repeats: int = 5) -> float:
    """The core's float32 matrix-product rate (GFLOP/s) at the tiny model's MLP shape, one thread (best of
    `repeats`)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(800, 128), torch.randn(128, 512)
    for _ in range(20):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(200):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 200)
    return 2 * 800 * 128 * 512 / best / 1e9


def macs_per_token(model: dict[str, int], ctx: float) -> float:
    """Dense forward multiply-adds per token (module docstring)."""
    h, layers, inter, vocab = model["hidden"], model["layers"], model["intermediate"], model["vocab"]
    d = h // model["heads"]
    kv = model["kv_heads"] * d
    per_layer = h * (h + 2 * kv) + h * h + 3 * h * inter + 2 * h * ctx
    return layers * per_layer + vocab * h


def phase_gflop(phase: dict[str, Any], model: dict[str, int]) -> float:
    """Dense GFLOP of one profiled phase (module docstring), from the tokens the driver counted."""
    c, extra = phase["counts"], phase["extra"]
    prompt, generated = c.get("prompt_tokens", 0.0), c.get("generated_tokens", 0.0)
    rows = max(prompt + generated, 1.0)
    ctx = 0.5 * (prompt + generated) / max(c.get("turns", 1.0), 1.0) if c.get("turns") else 80.0
    per_token = 2 * macs_per_token(model, ctx)
    name = phase["phase"]
    if name == "warm_start":  # the collected rows, trained for `epochs`: forward and backward
        return 3 * per_token * rows * extra.get("epochs", 2) / 1e9
    gen = per_token * rows
    if name == "rl_steps":
        kept = extra.get("filter/tokens_kept_fraction") or [1.0]
        kept_mean = sum(k if k is not None else 1.0 for k in kept) / len(kept)
        return (gen + 3 * per_token * rows * kept_mean) / 1e9
    if name == "probe":
        return (gen + per_token * (c.get("cross_positions", 0.0) + c.get("cross_prompt_tokens", 0.0))) / 1e9
    return gen / 1e9


# ---------------------------------------------------------------------------------------------- running
def baseline_checkout(commit: str) -> Path:
    """A git worktree of `commit` under benchmarks/.baseline-COMMIT (made once, reused)."""
    where = Path(__file__).resolve().parent / f".baseline-{commit}"
    if not (where / "ragen_core").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(where), commit],
                       check=True, capture_output=True)
    return where


def profile(code_root: Path, config: str, episodes: int, epochs_override: str | None = None) -> dict[str, Any]:
    """Run the driver on `config` with the code of `code_root` in a fresh single-threaded process."""
    env = {**os.environ, "PYTHONPATH": str(code_root), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.json"
        cfg_path = ROOT / "configs" / f"{config}.toml"
        overrides = [f"warm_start.sft_episodes={episodes}"]
        proc = subprocess.run([sys.executable, str(DRIVER), str(cfg_path), str(out), *overrides], env=env,
                              cwd=str(code_root), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"profile of {config} with {code_root} failed:\n{proc.stderr[-3000:]}")
        result = json.loads(out.read_text())
    epochs = _config_epochs(cfg_path)
    for phase in result["phases"]:
        if phase["phase"] == "warm_start":
            phase["extra"]["epochs"] = epochs
    return result


def _config_epochs(cfg_path: Path) -> int:
    import tomllib

    return int(tomllib.loads(cfg_path.read_text()).get("warm_start", {}).get("epochs", 2))


def threads_measurement(quick: bool) -> list[dict[str, Any]]:
    """SFT steps/s of the collapse Sokoban warm start with 1 and 2 threads, quiet and beside one busy process."""
    code = (
        "import sys, time, torch\n"
        "torch.set_num_threads(int(sys.argv[1]))\n"
        "from ragen_core.training.config import load_config\n"
        "from ragen_core.training.trainer import Trainer\n"
        "from ragen_core.training import sft\n"
        "import tempfile\n"
        "cfg = load_config('configs/collapse_sokoban.toml', ['run.progress=false', 'warm_start.cache_dir=',"
        " f'run.threads={sys.argv[1]}', f'warm_start.sft_episodes={sys.argv[2]}'])\n"
        "tr = Trainer(cfg, tempfile.mkdtemp())\n"
        "torch.set_num_threads(int(sys.argv[1]))\n"
        "m = sft.warm_start(tr.policy, cfg)\n"
        "steps = cfg.warm_start.epochs * ((int(m['sft/episodes']) * 2 + 3) // 4)\n"
        "print(steps / (m['perf/sft_s'] - m['perf/sft_collect_s']))\n"
    )
    episodes = 32 if quick else 128
    rows = []
    for load in (False, True):
        busy = None
        if load:  # one other single-threaded training-like process: a busy loop of matrix products
            busy = subprocess.Popen([sys.executable, "-c", "import torch\ntorch.set_num_threads(1)\n"
                                     "a=torch.randn(800,128); b=torch.randn(128,512)\nwhile True: a@b\n"])
            time.sleep(1.0)
        try:
            for threads in (1, 2):
                env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
                       "OMP_NUM_THREADS": str(threads)}
                proc = subprocess.run([sys.executable, "-c", code, str(threads), str(episodes)], env=env,
                                      cwd=str(ROOT), capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr[-2000:])
                rate = float(proc.stdout.strip().splitlines()[-1])
                rows.append({"threads": threads, "other_busy_process": load, "sft_steps_per_s": rate})
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    return rows


# ---------------------------------------------------------------------------------------------- report
def _phase_row(phase: dict[str, Any], steps: int) -> dict[str, Any]:
    per = steps if phase["phase"] == "rl_steps" else 1
    return {"wall_s": phase["wall_s"] / per, "parts": {k: v / per for k, v in phase["parts"].items()}}


def summarise(config: str, base: dict[str, Any], now: dict[str, Any], gflops: float) -> dict[str, Any]:
    """Per phase: baseline and current seconds (RL: per step), speed-up, the dense floor and the parts."""
    out: dict[str, Any] = {"config": config, "phases": []}
    base_phases = {p["phase"]: p for p in base["phases"]}
    for phase in now["phases"]:
        name = phase["phase"]
        steps = phase["extra"].get("steps", 1) if name == "rl_steps" else 1
        floor = phase_gflop(phase, now["model"]) / gflops / steps
        cur = _phase_row(phase, steps)
        row = {"phase": name, "now_s": cur["wall_s"], "parts_now": cur["parts"], "floor_s": floor,
               "now_over_floor": cur["wall_s"] / floor if floor else None}
        if name in base_phases:
            b = _phase_row(base_phases[name], steps)
            row.update(base_s=b["wall_s"], parts_base=b["parts"], speedup=b["wall_s"] / cur["wall_s"])
        if name == "warm_start":
            row["episodes"] = phase["extra"].get("episodes")
            for src, key in ((phase, "now"), (base_phases.get(name), "base")):
                if src:
                    ex = src["extra"]
                    row[f"collect_s_{key}"] = ex.get("collect_s")
                    row[f"sft_steps_s_{key}"] = (ex.get("sft_s") or 0.0) - (ex.get("collect_s") or 0.0)
        out["phases"].append(row)
    return out


def _parts_text(parts: dict[str, float]) -> str:
    total = sum(parts.values()) or 1.0
    top = sorted(parts.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.2f} s ({100 * v / total:.0f}%)" for k, v in top if v / total >= 0.05)


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Side by side, one process per run, one torch thread: the code of {result['baseline']} and this "
             f"checkout, {result['warm_episodes']} warm-start demonstrations and {result['steps']} RL steps per "
             f"run. Matrix rate of the core: {result['gflops']:.1f} GFLOP/s (float32). Floor: the phase's dense "
             "arithmetic at that rate (below 1.0x: the lean forward skips work the floor counts).", "",
             f"| config | phase | {result['baseline']} s | now s | speed-up | floor s | now / floor | "
             "where the time goes now |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for c in result["configs"]:
        for p in c["phases"]:
            label = PHASE_LABELS[p["phase"]]
            if p["phase"] == "warm_start":
                label += f" ({p['episodes']} episodes)"
            base = f"{p['base_s']:.2f}" if "base_s" in p else "-"
            speed = f"{p['speedup']:.1f}x" if "speedup" in p else "-"
            parts = _parts_text(p["parts_now"])
            if p["phase"] == "warm_start":
                parts = (f"demonstrations {p['collect_s_now']:.2f} s, SFT steps {p['sft_steps_s_now']:.2f} s; "
                         + parts)
            lines.append(f"| {c['config']} | {label} | {base} | {p['now_s']:.2f} | {speed} | {p['floor_s']:.2f} | "
                         f"{p['now_over_floor']:.1f}x | {parts} |")
    if result.get("threads"):
        lines += ["", "| torch threads | another busy process | SFT steps/s |", "|---:|---|---:|"]
        for r in result["threads"]:
            lines.append(f"| {r['threads']} | {'yes' if r['other_busy_process'] else 'no'} | "
                         f"{r['sft_steps_per_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two configs, fewer demonstrations")
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit to compare with (default {BASELINE})")
    parser.add_argument("--configs", default="", help="comma-separated config names (default: every CPU config)")
    parser.add_argument("--no-threads", action="store_true", help="skip the threads measurement")
    args = parser.parse_args(argv)
    from benchmarks.machine import describe_machine
    from benchmarks.readme_tables import write_result

    configs = [c for c in args.configs.split(",") if c] or (
        ["bandit_tiny", "collapse_sokoban"] if args.quick else list(CONFIGS))
    episodes = WARM_EPISODES["quick" if args.quick else "full"]
    start = time.perf_counter()
    gflops = matmul_gflops()
    base_root = baseline_checkout(args.baseline)
    summaries = []
    for config in configs:
        print(f"[profile] {config}: {args.baseline} ...", flush=True)
        base = profile(base_root, config, episodes)
        print(f"[profile] {config}: this checkout ...", flush=True)
        now = profile(ROOT, config, episodes)
        summaries.append({**summarise(config, base, now, gflops), "raw": {"baseline": base, "now": now}})
    threads = [] if args.no_threads else threads_measurement(args.quick)
    result = {"benchmark": "profile", "quick": args.quick, "baseline": args.baseline, "gflops": gflops,
              "warm_episodes": episodes, "steps": 3, "configs": summaries, "threads": threads,
              "machine": describe_machine(), "wall_s": time.perf_counter() - start}
    result["markdown"] = markdown(result)
    write_result(result, RESULTS / ("profile_quick.json" if args.quick else "profile.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
