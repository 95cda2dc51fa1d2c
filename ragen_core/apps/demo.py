"""`make demo` (`python -m ragen_core.apps.demo`): the whole pipeline on a CPU in under 10 minutes, under 4 GB.

1. build (or reuse) the default tiny offline model (0.62 M parameters: hidden 128, 2 layers; no download) and
   measure its validation success untrained;
2. warm-start it on 1500 Sokoban episodes of a noisy demonstrator: its reasoning is the solver's plan ("Player
   (2, 1), box (3, 2), target (3, 3). Push Right from (3, 1). Go Down."), but 60% of its answers are its habit,
   "Up", whatever the level; the warm-started model reasons correctly and answers "Up" (greedy) everywhere;
3. validate on 128 held-out seeds (validation seed 123): the "before RL" number;
4. train with GRPO + top-p SNR-aware filtering (rho = 0.9), printing one table row per step, with MI diagnostics:
   RL has to make the answer follow the reasoning;
5. validate again ("after RL") on the same seeds and print a summary: success untrained / before / after RL, the
   gain with its 95% confidence interval (paired over the 128 episodes), format validity, entropy and MI at start
   and end, the plots, the run folder, time per phase, wall time and peak memory (RSS).

The settings are those of `configs/sokoban_tiny.toml` (`DEMO_OVERRIDES` repeats them; a test keeps the two in
step), and a time limit that keeps it within 10 minutes. The numbers are what they are: the summary prints the gain and
its interval whatever they come out as.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from ragen_core.training.metrics import STEP, Collapse, Filter, Perf, Rollout, Sft, Val

#: The demo's settings as overrides of the defaults: configs/sokoban_tiny.toml, except `DEMO_ONLY`.
DEMO_OVERRIDES = [
    'run.name="demo-sokoban"',
    'run.device="cpu"',
    "run.steps=60",
    "run.max_minutes=8.5",
    "run.progress=false",
    'model.path="tiny"',
    "model.critic_lr=1e-4",
    'env.id="ragen/Sokoban-v0"',
    # The env's own knobs: optimal solutions of at most 2 moves, one move per turn, the coordinate observation.
    'env.kwargs={max_solution_len = 2, max_actions_per_turn = 1, obs_format = "coord"}',
    "rollout.groups=8",
    "rollout.group_size=4",
    "rollout.max_turns=2",
    'rollout.context="single_turn"',
    "rollout.max_new_tokens=64",
    "rollout.temperature=1.0",
    "rollout.system_prompt=false",
    'algo.name="grpo"',
    "algo.lr=2e-4",
    'algo.lr_schedule="linear"',
    "algo.mini_batch_size=64",
    "algo.micro_batch_size=32",
    'filter.strategy="top_p"',
    "filter.value=0.9",
    "mi.every=5",
    "eval.every=10",
    "eval.episodes=128",
    "warm_start.sft_episodes=1500",
    'warm_start.policy="oracle"',
    'warm_start.reasoning="plan"',
    "warm_start.action_noise=0.6",
    'warm_start.noise_action="first"',
    "warm_start.epochs=2",
    "warm_start.lr=1e-3",
    'warm_start.schedule="linear"',
    "warm_start.batch_size=4",
]
#: Keys where the demo departs from configs/sokoban_tiny.toml (its name, its time limit, no progress bar).
DEMO_ONLY = ("run.name", "run.max_minutes", "run.progress")

#: (metric, column title, number format); every column is _WIDTH characters wide.
_COLUMNS = (
    (STEP, "step", "{:d}"),
    (Rollout.SUCCESS, "succ", "{:.2f}"),
    (Rollout.RETURN, "return", "{:.2f}"),
    (Rollout.FORMAT_VALID, "format", "{:.2f}"),
    (Filter.KEPT_FRACTION, "kept", "{:.2f}"),
    (Filter.RV_HETEROGENEITY, "RVhet", "{:.2f}"),
    (Collapse.TOKEN_ENTROPY, "H_tok", "{:.2f}"),
    (Collapse.MI_SEQ_EST, "MIseq", "{:.2f}"),
    (Collapse.RETRIEVAL_ACC, "R-acc", "{:.2f}"),
    (Val.SUCCESS, "val", "{:.2f}"),
    (Perf.STEP_S, "sec", "{:.1f}"),
)
_WIDTH = 6
#: What each column means, printed once above the table.
COLUMN_LEGEND = (
    "columns: succ = success of the step's sampled training episodes, return = their mean return, format = share "
    "of well-formed turns, kept = share of groups the filter kept, RVhet = reward-variance heterogeneity (std/mean "
    "of the groups' reward variances; above 1: filtering separates signal from noise), H_tok = token entropy "
    "(nats), MIseq = in-batch MI-Seq estimate (nats, at most log 8 = 2.08), R-acc = in-batch retrieval accuracy "
    "(chance 1/8), val = validation success (held out, greedy), sec = seconds per step"
)


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024.0 if sys.platform != "darwin" else peak / 2**20


def _cell(metrics: dict[str, Any], key: str, fmt: str) -> str:
    v = metrics.get(key)
    if v is None or isinstance(v, str):
        return f"{'-':>{_WIDTH}}"
    return f"{fmt.format(v):>{_WIDTH}}"


def _header() -> str:
    return " | ".join(f"{label:>{_WIDTH}}" for _, label, _ in _COLUMNS)


def table_row(metrics: dict[str, Any]) -> str | None:
    """One line of the live table (None for records without a training step, e.g. the warm start)."""
    if Rollout.SUCCESS not in metrics and Val.SUCCESS not in metrics:
        return None
    return " | ".join(_cell(metrics, key, fmt) for key, _, fmt in _COLUMNS)


def _first_last(history: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    ys = [r[key] for r in history if isinstance(r.get(key), (int, float)) and r.get(key) is not None]
    return (ys[0], ys[-1]) if ys else (None, None)


def _f(v: float | None, d: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{d}f}"


def _task_words(cfg: Any) -> str:
    """The demo's task in words, from the env kwargs (so the summary says how easy the levels are)."""
    kw = cfg.env.kwargs
    dim = kw.get("dim_room", (6, 6))
    boxes = kw.get("num_boxes", 1)
    longest = kw.get("max_solution_len")
    longest = f"at most {longest}" if longest else f"at most {kw.get('max_actions', 10)} (the action budget)"
    per_turn = kw.get("max_actions_per_turn", 2)
    return (f"Sokoban {dim[0]}x{dim[1]}, {boxes} box{'es' if boxes != 1 else ''}, optimal solutions of {longest} "
            f"steps; {per_turn} action{'s' if per_turn != 1 else ''} per turn, {cfg.rollout.max_turns} turns")


def paired_gain(run_dir: Path) -> tuple[int, int, float, float, float] | None:
    """(n episodes, last step, gain, CI low, CI high) of validation success: the last validation against the one
    after the warm start (step 0), paired episode by episode (ragen_core.math.stats.paired_ci); None without both."""
    from ragen_core.math.stats import paired_ci
    from ragen_core.training.report import VAL_OUTCOMES

    path = Path(run_dir) / VAL_OUTCOMES
    if not path.is_file():
        return None
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    first = next((r for r in records if r["step"] == 0), None)
    last = records[-1] if records else None
    if first is None or last is None or last["step"] == 0 or first["seeds"] != last["seeds"]:
        return None
    gain, lo, hi = paired_ci(first["success"], last["success"])
    return len(first["success"]), int(last["step"]), gain, lo, hi


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragen_core.apps.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs", help="parent folder of the run folder (default: runs)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: a model this small runs fastest on one thread)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. run.steps=6")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(max(1, args.threads))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    from ragen_core.apps.train import claim_new_run_dir, preflight
    from ragen_core.policy import HFPolicy, default_tiny_model_dir
    from ragen_core.training.config import ConfigError, load_config
    from ragen_core.training.trainer import Trainer

    t = time.perf_counter()
    model_dir = default_tiny_model_dir()
    try:  # what `ragen train` checks, before anything is made: a mistaken override is one line
        cfg = load_config(None, [*DEMO_OVERRIDES, f'run.out_dir="{args.out}"', f'model.path="{model_dir}"',
                                 *args.overrides])
        preflight(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    run_dir = claim_new_run_dir(cfg)  # made now: demos started together get a folder each
    print("RAGEN-2 demo: tiny offline model -> Sokoban warm start (a noisy demonstrator) -> GRPO + top-p filtering "
          f"(rho = {cfg.filter.spec.value}) on CPU")
    policy = HFPolicy.from_pretrained(model_dir)
    from ragen_core.policy.tiny import count_parameters

    t_build = time.perf_counter() - t
    print(f"[1/4] tiny model ({count_parameters(policy.model) / 1e6:.2f} M parameters) ready in {t_build:.1f} s: "
          f"{model_dir}")
    print(f"      task: {_task_words(cfg)}")

    header_printed = False
    phase: dict[str, float] = {"build": t_build}

    def on_step(m: dict[str, Any]) -> None:
        nonlocal header_printed
        if Sft.LOSS_LAST in m:
            phase["warm start"] = m[Perf.SFT_S]
            ws = cfg.warm_start
            print(f"[2/4] warm start: {int(m[Sft.EPISODES])} episodes of a demonstrator that reasons like the solver "
                  f"but answers its habit ({ws.noise_action} action) {ws.action_noise:.0%} of the time, "
                  f"x {ws.epochs} epochs: NLL {m[Sft.LOSS_FIRST]:.2f} -> {m[Sft.LOSS_LAST]:.2f} in "
                  f"{m[Perf.SFT_S]:.0f} s")
            return
        if m.get(STEP) == 0 and Val.SUCCESS in m:
            phase["validation"] = phase.get("validation", 0.0) + m.get(Perf.EVAL_S, 0.0)
            print(f"      validation after the warm start (greedy, {cfg.eval.episodes} held-out seeds): success "
                  f"{m[Val.SUCCESS]:.1%}, format-valid turns {m[Val.FORMAT_VALID]:.1%}", flush=True)
            return
        row = table_row(m)
        if row is None:
            return
        if not header_printed:
            print("[3/4] RL (one row per step)")
            print(textwrap.fill(COLUMN_LEGEND, width=110, subsequent_indent="  "))
            print(_header())
            header_printed = True
        print(row, flush=True)

    trainer = Trainer(cfg, run_dir, policy=policy, on_step=on_step)
    t = time.perf_counter()
    untrained = trainer.evaluate(record=False)  # the same held-out seeds, before any training
    phase["validation"] = time.perf_counter() - t
    print(f"      untrained model (greedy, {cfg.eval.episodes} held-out seeds): success "
          f"{untrained[Val.SUCCESS]:.1%}, format-valid turns {untrained[Val.FORMAT_VALID]:.1%} "
          f"({phase['validation']:.0f} s)", flush=True)
    history = trainer.fit()
    wall = time.perf_counter() - t0
    phase["validation"] += sum(r.get(Perf.EVAL_S, 0.0) or 0.0 for r in history if r.get(STEP, 0) > 0)
    phase["RL steps"] = sum(r.get(Perf.STEP_S, 0.0) or 0.0 for r in history)
    phase["other"] = wall - sum(phase.values())

    val = [(r[STEP], r[Val.SUCCESS]) for r in history if r.get(Val.SUCCESS) is not None]
    before = val[0] if val else None
    after = val[-1] if val else None
    h0, h1 = _first_last(history, Collapse.TOKEN_ENTROPY)
    m0, m1 = _first_last(history, Collapse.MI_SEQ_EST)
    a0, a1 = _first_last(history, Collapse.RETRIEVAL_ACC)
    c0, c1 = _first_last(history, Collapse.COND_ENTROPY_EST)
    k0, k1 = _first_last(history, Filter.KEPT_FRACTION)
    steps = max((r[STEP] for r in history), default=0)
    print("[4/4] summary")
    print(f"  RL steps: {steps} ({cfg.rollout.groups} groups x {cfg.rollout.group_size} rollouts, "
          f"up to {cfg.rollout.max_turns} turns); empty (skipped) steps: "
          f"{int(sum(r.get(Filter.SKIPPED, 0) or 0 for r in history))}")
    n = cfg.eval.episodes
    print(f"  task: {_task_words(cfg)}")
    gain_line = "  gain: n/a (no validation after RL)"
    if before and after:
        print(f"  validation success on {n} held-out seeds (seed {cfg.env.val_seed}+, greedy): untrained "
              f"{untrained[Val.SUCCESS]:.1%} -> after the warm start (before RL) {before[1]:.1%} -> "
              f"after RL (step {after[0]}) {after[1]:.1%}")
        paired = paired_gain(run_dir)
        if paired is not None:
            n_ep, _, gain, lo, hi = paired
            verdict = ("RL improved on the warm start" if lo > 0 else
                       "RL made validation success worse" if hi < 0 else
                       "no significant change from RL")
            gain_line = (f"  gain from RL: {100 * gain:+.1f} points, 95% CI [{100 * lo:+.1f}, {100 * hi:+.1f}] "
                         f"(paired over the same {n_ep} episodes): {verdict}")
        print(gain_line)
    f0, f1 = _first_last(history, Rollout.FORMAT_VALID)
    v0, v1 = _first_last(history, Val.FORMAT_VALID)
    s0, s1 = _first_last(history, Rollout.SUCCESS)
    print(f"  train (sampled, T = {cfg.rollout.temperature:g}) success {_f(s0, 2)} -> {_f(s1, 2)} (first -> last step)")
    print(f"  format-valid turns: untrained {untrained[Val.FORMAT_VALID]:.2f}; train {_f(f0, 2)} -> {_f(f1, 2)}, "
          f"validation {_f(v0, 2)} -> {_f(v1, 2)}")
    print(f"  token entropy (nats/token): {_f(h0)} -> {_f(h1)};  H(Z|X) estimate: {_f(c0)} -> {_f(c1)}")
    print(f"  MI-Seq-Est of the reasoning (nats, ceiling log P = {math.log(cfg.rollout.groups):.2f}): "
          f"{_f(m0)} -> {_f(m1)};  Retrieval-Acc (chance {1 / cfg.rollout.groups:.2f}): {_f(a0)} -> {_f(a1)}")
    print(f"  kept fraction after filtering: {_f(k0, 2)} -> {_f(k1, 2)}")
    print(f"  plots: {run_dir / 'success.png'}, {run_dir / 'entropy_mi.png'}, {run_dir / 'filter.png'}")
    print(f"  run folder: {run_dir} (config.toml, metrics.jsonl, val_outcomes.jsonl, summary.md, checkpoints/)")
    times = ", ".join(f"{k} {v:.0f} s" for k, v in phase.items())
    print(f"  wall time {wall / 60:.1f} min ({times}), peak memory (RSS) {peak_rss_mb():.0f} MB, "
          f"torch threads {torch.get_num_threads()}")
    with open(Path(run_dir) / "summary.md", "a", encoding="utf-8") as f:
        f.write(f"\nDemo: {_task_words(cfg)}. Validation success (greedy, {n} held-out seeds): untrained "
                f"{untrained[Val.SUCCESS]:.3f}, after the warm start {_f(before[1] if before else None)}, "
                f"after RL {_f(after[1] if after else None)}.\n{gain_line.strip()}\n"
                f"Demo wall time {wall / 60:.1f} min ({times}), peak RSS {peak_rss_mb():.0f} MB.\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
