"""Cross-check against TRL: the same tiny model, env and batch trained by this package's trainer and by TRL.

    python -m benchmarks.bench_trl [--quick] [--envs bandit,sokoban] [--seeds 0 1 2] [--workers 2] [--runs-dir DIR]

For each (env, seed) one process (one torch thread) does, side by side:

1. the config's warm start, once (``warm_start.cache_dir``: both engines start from the same weights);
2. ``ragen_core.training.trainer.Trainer`` for ``run.steps`` steps ("ragen");
3. ``trl.GRPOTrainer`` through this package's adapter (``RagenGRPOTrainer`` with the same top-p filter,
   ``single_turn_dataset`` for the prompts, ``EnvReward`` for the env) for the same steps ("trl").

Both engines see the same prompts in the same order (the trainer's train seeds, P per step), G samples per prompt
at temperature 1 that end at ``</answer>`` (``rollout.stop``; TRL through ``stop_at``), one optimiser step per
batch of P x G rows in micro-batches of ``algo.micro_batch_size`` rows,
GRPO advantages, the clipped token-mean loss with the config's entropy bonus, no KL, AdamW with the same learning
rate, schedule, epsilon and gradient clip. Both are validated by the same function
(``ragen_core.training.trainer.validation_rollout``: greedy, the config's held-out seeds) every ``eval.every`` steps,
so the
step-0 numbers of the two engines must be equal (same weights, same greedy episodes) and the curves compare
learning, not measurement.

The episodes are single-turn: TRL's multi-turn path is tool calling (``environment_factory``), whose loop always
generates once more after the last env action, so a multi-turn run would not play the episodes ``ragen train``
plays (docs/scale_out.md). So the Sokoban config is played on levels
solved by one push, in one turn (``env.kwargs.max_solution_len=1``, ``rollout.max_turns=1``; the warm start's
"Up" habit is right on about a quarter of them), the Bandit config as shipped (it is single-turn). Both run fewer
steps than shipped (Bandit 60, Sokoban 30) and are validated every 5 steps.

Step time: wall time of one training step (rollout, filter, scoring, update; validation excluded), summed over
the run and divided by the tokens it trained (the loss tokens of the kept rows), per 1,000 tokens.

Results: ``benchmarks/results/trl_crosscheck.json`` (per run the validation curve, train success and timing; per
env and engine the mean curve, final success with its seed range, seconds per 1,000 tokens; Markdown for the
README) and ``trl_crosscheck.png``. ``--quick`` (one seed, 4 steps, tiny warm start) checks the plumbing in
about two minutes.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from benchmarks.machine import describe_machine  # noqa: E402
from benchmarks.readme_tables import write_result  # noqa: E402

#: name -> (config file, overrides that make it the cross-check's single-turn task).
ENVS: dict[str, tuple[str, list[str]]] = {
    "bandit": ("configs/bandit_tiny.toml", ["run.steps=60", "eval.every=5"]),
    "sokoban": ("configs/sokoban_tiny.toml",
                ["run.steps=30", "eval.every=5", "rollout.max_turns=1", "env.kwargs.max_solution_len=1"]),
}
QUICK = ["run.steps=4", "eval.every=2", "eval.episodes=32", "warm_start.sft_episodes=400"]
COMMON = ["mi.every=0", "run.progress=false", "run.max_minutes=0", "run.save_every=0", "run.device=cpu"]
ENGINES = ("ragen", "trl")


# ------------------------------------------------------------------------------------------------ one pair
def make_config(name: str, seed: int, quick: bool, cache_dir: Path, extra: list[str] | None = None) -> Any:
    """The cross-check config of env `name` for `seed` (see the module docstring)."""
    from ragen_core.training.config import load_config

    path, overrides = ENVS[name]
    return load_config(ROOT / path, [*overrides, *COMMON, *(QUICK if quick else []), *(extra or []),
                                     f"run.seed={seed}", f"warm_start.cache_dir={json.dumps(str(cache_dir))}"])


def run_ragen(cfg: Any, run_dir: Path) -> dict[str, Any]:
    """Train with ``ragen_core.training.trainer.Trainer``; the per-step record of the run."""
    from ragen_core.training.trainer import Trainer

    history = Trainer(cfg, run_dir).fit()
    steps = [h for h in history if h.get("step", 0) >= 1 and "perf/step_s" in h]
    return {
        "curve": [[h["step"], h["val/success"]] for h in history if "val/success" in h],
        "train_success": [h.get("rollout/success", float("nan")) for h in steps],
        "step_s": [h["perf/step_s"] for h in steps],
        "tokens": [h.get("perf/tokens_trained", 0.0) for h in steps],
        "kept_groups": [h.get("filter/kept_groups", float("nan")) for h in steps],
        "score_s": [h.get("perf/score_s", 0.0) for h in steps],
    }


def trl_arguments(cfg: Any, output_dir: Path) -> Any:
    """``RagenGRPOConfig`` equal to `cfg` where the two engines share a setting (module docstring)."""
    from ragen_core.integrations.trl import RagenGRPOConfig, rv_filter_arguments

    a, r, f = cfg.algo, cfg.rollout, cfg.filter
    if a.name != "grpo" or a.epochs != 1 or a.kl_coef or cfg.algo.dynamic_sampling:
        raise ValueError("the cross-check compares GRPO, one epoch, no KL, no dynamic sampling")
    rows = r.groups * r.group_size
    if a.mini_batch_size < rows:
        raise ValueError(f"one optimiser step per batch needs algo.mini_batch_size >= P x G = {rows}")
    micro = min(a.micro_batch_size, rows)
    if rows % micro:
        raise ValueError(f"P x G = {rows} must be a multiple of algo.micro_batch_size = {micro}")
    return RagenGRPOConfig(
        output_dir=str(output_dir), seed=cfg.run.seed, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, shuffle_dataset=False,
        max_steps=cfg.run.steps, per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro,
        num_generations=r.group_size, max_completion_length=r.max_new_tokens, temperature=r.temperature,
        top_p=r.top_p, top_k=0, learning_rate=a.lr, lr_scheduler_type=a.lr_schedule, warmup_steps=0,
        weight_decay=a.weight_decay, adam_epsilon=a.adam_eps, max_grad_norm=a.grad_clip, beta=0.0,
        epsilon=a.clip_low, epsilon_high=a.clip_high, entropy_coef=a.entropy_coef, loss_type="dapo",
        scale_rewards="group", num_iterations=1,
        # TRL turns activation checkpointing on by default; the package's trainer only when asked.
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        **rv_filter_arguments(f.spec if f.enabled else None),
    )


def run_trl(cfg: Any, run_dir: Path) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer through the adapter, from the same warm start; the per-step record."""
    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from ragen_core.integrations.trl import EnvReward, RagenGRPOTrainer, single_turn_dataset, stop_at
    from ragen_core.policy import load_policy
    from ragen_core.rollout import RolloutSettings, make_envs
    from ragen_core.training.trainer import validation_rollout
    from ragen_core.training.warm_cache import cached_warm_start

    policy = load_policy(cfg.model.path, device=torch.device("cpu"), dtype=cfg.model.dtype)
    if cfg.warm_start.sft_episodes > 0:
        cached_warm_start(policy, cfg)
    tokenizer = copy.copy(policy.tokenizer)
    tokenizer.padding_side = "left"  # TRL's generation batches are left-padded
    p, g = cfg.rollout.groups, cfg.rollout.group_size
    settings = RolloutSettings.from_config(cfg.rollout)
    stop_at(policy.model, tokenizer, settings.stop)  # ragen train stops at </answer>; so must TRL
    dataset = single_turn_dataset(cfg.env.id, [cfg.env.train_seed + i for i in range(cfg.run.steps * p)],
                                  cfg.env.kwargs, settings=settings)
    reward = EnvReward(cfg.env.id, cfg.env.kwargs, group_size=g, per_rollout_option=cfg.env.per_rollout_option)
    val_envs = make_envs(cfg.env.id, cfg.eval.episodes, cfg.env.kwargs)
    val_settings = RolloutSettings.from_config(cfg.rollout, greedy=cfg.eval.greedy)
    record: dict[str, Any] = {"curve": [], "train_success": [], "step_s": []}

    def validate(step: int) -> None:
        batch = validation_rollout(policy, val_envs, cfg, val_settings, step)
        record["curve"].append([step, batch.summary()["rollout/success"]])

    class Measure(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            record["step_s"].append(time.perf_counter() - self.t0)
            record["train_success"].append(sum(reward.last_success) / max(len(reward.last_success), 1))
            if cfg.eval.every and (state.global_step % cfg.eval.every == 0 or state.global_step == args.max_steps):
                validate(state.global_step)
                policy.model.train()

    if cfg.eval.at_start:
        validate(0)
    trainer = RagenGRPOTrainer(model=policy.model, reward_funcs=reward, args=trl_arguments(cfg, run_dir),
                               processing_class=tokenizer, train_dataset=dataset, callbacks=[Measure()])
    trainer.remove_callback(PrinterCallback)  # TRL prints every log dict when tqdm is off; the record has them
    trainer.train()
    logs = [e for e in trainer.state.log_history if "filter/kept_groups" in e or "reward" in e]
    record["tokens"] = [float(e.get("filter/kept_tokens", 0.0)) for e in logs]
    record["kept_groups"] = [float(e.get("filter/kept_groups", float("nan"))) for e in logs]
    return record


def run_pair(name: str, seed: int, quick: bool, runs_dir: Path, extra: list[str] | None = None) -> dict[str, Any]:
    """Both engines on (env, seed), ragen first (it writes the warm-start cache); resumable per engine."""
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    out: dict[str, Any] = {"env": name, "seed": seed}
    cfg = make_config(name, seed, quick, runs_dir / "warm_cache", extra)
    for engine in ENGINES:
        run_dir = runs_dir / f"{name}-s{seed}-{engine}"
        done = run_dir / "done.json"
        if done.is_file():
            out[engine] = json.loads(done.read_text())
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        record = run_ragen(cfg, run_dir) if engine == "ragen" else run_trl(cfg, run_dir)
        record["wall_s"] = time.perf_counter() - start
        done.write_text(json.dumps(record))
        out[engine] = record
    return out


# ------------------------------------------------------------------------------------------------ summary
def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _measured(x: float | None) -> bool:
    """False for a time that was not measured: NaN in memory, null once written as strict JSON."""
    return x is not None and x == x


def steps_to(curve: list[list[float]], level: float) -> int | None:
    """The first validation step whose success is at least `level` (None: never reached)."""
    return next((int(step) for step, value in curve if value >= level), None)


def summarize(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per env and engine: mean curve, final success (mean, min, max over seeds), s per 1,000 trained tokens."""
    summary: dict[str, Any] = {}
    for name in ENVS:
        runs = [p for p in pairs if p["env"] == name]
        if not runs:
            continue
        env_sum: dict[str, Any] = {"seeds": sorted(p["seed"] for p in runs)}
        for engine in ENGINES:
            recs = [p[engine] for p in runs]
            steps = sorted({s for r in recs for s, _ in r["curve"]})
            curve = [[s, _mean([v for r in recs for t, v in r["curve"] if t == s])] for s in steps]
            finals = [r["curve"][-1][1] for r in recs]
            starts = [r["curve"][0][1] for r in recs]
            step_s = sum(sum(r["step_s"]) for r in recs)
            tokens = sum(sum(r["tokens"]) for r in recs)
            n_steps = sum(len(r["step_s"]) for r in recs)
            to_90 = [steps_to(r["curve"], 0.9) for r in recs]
            env_sum[engine] = {
                "curve": curve, "start": _mean(starts), "final": _mean(finals), "final_min": min(finals),
                "steps_to_90": to_90,
                "score_s_per_step": _mean([t for r in recs for t in r.get("score_s", [])]),
                "final_max": max(finals), "peak": _mean([max(v for _, v in r["curve"]) for r in recs]),
                "s_per_step": step_s / max(n_steps, 1), "tokens_per_step": tokens / max(n_steps, 1),
                "s_per_1k_tokens": 1000.0 * step_s / tokens if tokens else float("nan"),
                "kept_groups_mean": _mean([k for r in recs for k in r["kept_groups"]]),
                "train_success_last10": _mean([_mean(r["train_success"][-10:]) for r in recs]),
            }
        r, t = env_sum["ragen"], env_sum["trl"]
        env_sum["time_ratio_trl_over_ragen"] = t["s_per_1k_tokens"] / r["s_per_1k_tokens"]
        summary[name] = env_sum
    return summary


def markdown(summary: dict[str, Any], steps: dict[str, int], episodes: int = 128) -> str:
    lines = ["| env (steps) | engine | val. success: start -> final (min-max) | peak | first step >= 90% (per seed) "
             "| kept groups / step | s / step | trained tokens / step | s / 1,000 tokens |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        for engine in ENGINES:
            e = s[engine]
            reach = ", ".join("never" if x is None else str(x) for x in e["steps_to_90"])
            lines.append(
                f"| {name} ({steps[name]}) | {engine} | {100 * e['start']:.1f}% -> {100 * e['final']:.1f}% "
                f"({100 * e['final_min']:.1f}-{100 * e['final_max']:.1f}) | {100 * e['peak']:.1f}% | {reach} | "
                f"{e['kept_groups_mean']:.2f} | {e['s_per_step']:.2f} | {e['tokens_per_step']:.0f} | "
                f"{e['s_per_1k_tokens']:.3f} |")
    ratios = ", ".join(f"{n} {s['time_ratio_trl_over_ragen']:.2f}" for n, s in summary.items())
    scoring = ", ".join(f"{n} {s['ragen']['score_s_per_step']:.2f} s" for n, s in summary.items()
                        if _measured(s["ragen"]["score_s_per_step"]))
    lines += ["", f"Time per 1,000 trained tokens, TRL / ragen: {ratios}. Of ragen's step, the teacher-forced pass "
                  f"that recomputes the old log-probs (`algo.recompute_old_logprobs`, TRL skips it when "
                  f"`num_iterations=1`) takes {scoring} per step. Validation: greedy, "
                  f"{episodes} held-out seeds, the same function for both engines; step time excludes it."]
    return "\n".join(lines)


def _mean_curve(curves: list[list[list[float]]]) -> tuple[list[int], list[float]]:
    """The mean over seeds of `curves` (each [[step, success], ...]) at the steps every seed reached: a step only
    some seeds reached would average fewer seeds there and read as a jump of the mean."""
    common = sorted(set.intersection(*(set(int(s) for s, _ in c) for c in curves))) if curves else []
    by_seed = [dict((int(s), v) for s, v in c) for c in curves]
    return common, [sum(c[s] for c in by_seed) / len(by_seed) for s in common]


def plot(summary: dict[str, Any], pairs: list[dict[str, Any]], path: Path) -> Path | None:
    """Per env, validation success (%) of both engines: each seed's curve (thin) and their mean at the steps every
    seed reached (thick, a dot per validation). One legend, beside the last panel."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:  # plotting is optional
        return None
    fig, axes = plt.subplots(1, len(summary), figsize=(5.2 * len(summary) + 1.6, 3.6), squeeze=False)
    colours = {"ragen": "tab:blue", "trl": "tab:orange"}
    for ax, (name, s) in zip(axes[0], summary.items()):
        for engine in ENGINES:
            curves = [p[engine]["curve"] for p in pairs if p["env"] == name]
            for i, curve in enumerate(curves):
                xs, ys = zip(*curve)
                ax.plot(xs, [100 * y for y in ys], color=colours[engine], alpha=0.25, lw=1,
                        label=f"{engine}: each seed" if i == 0 else None)
            xs, ys = _mean_curve(curves)
            ax.plot(xs, [100 * y for y in ys], color=colours[engine], lw=2.2, marker="o", ms=3,
                    label=f"{engine}: mean over seeds")
        ax.set_title(f"{name}: validation success, {len(s['seeds'])} seeds")
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # validation steps are whole
        ax.set_ylabel("success (%)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)  # not over data
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, non_negative_int, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_trl", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 4 steps, a tiny warm start")
    parser.add_argument("--envs", default=",".join(ENVS), help=f"comma list of {', '.join(ENVS)}")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=None, help="default 0 1 2 (quick: 0)")
    parser.add_argument("--workers", type=positive_int, default=2,
                        help="(env, seed) pairs run at once (one thread each)")
    parser.add_argument("--runs-dir", type=Path, default=None, help="default runs/bench_trl[-quick]")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    names = [n.strip() for n in args.envs.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENVS]
    if unknown:
        parser.error(f"unknown env(s) {unknown}; choose from {list(ENVS)}")
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    runs_dir = args.runs_dir or ROOT / "runs" / ("bench_trl-quick" if args.quick else "bench_trl")
    suffix = "_quick" if args.quick else ""
    out = args.out or RESULTS / f"trl_crosscheck{suffix}.json"

    t0 = time.perf_counter()
    tasks = [(n, s) for s in seeds for n in names]
    pairs, failures = [], []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        futures = {pool.submit(run_pair, n, s, args.quick, runs_dir): (n, s) for n, s in tasks}
        for fut in as_completed(futures):
            n, s = futures[fut]
            try:
                pairs.append(fut.result())
                print(f"[trl-crosscheck] {n} seed {s} done ({time.perf_counter() - t0:.0f} s)", flush=True)
            except Exception:  # one failed pair is reported, the others still count
                failures.append({"env": n, "seed": s, "error": traceback.format_exc(limit=3)})
                print(f"[trl-crosscheck] {n} seed {s} FAILED:\n{failures[-1]['error']}", flush=True)
    pairs.sort(key=lambda p: (list(ENVS).index(p["env"]), p["seed"]))
    summary = summarize(pairs)
    configs = {n: make_config(n, 0, args.quick, runs_dir / "warm_cache") for n in names}
    steps = {n: c.run.steps for n, c in configs.items()}
    episodes = configs[names[0]].eval.episodes
    result = {
        "benchmark": "trl_crosscheck", "quick": args.quick, "seeds": seeds, "steps": steps,
        "trl": __import__("trl").__version__, "pairs": pairs, "summary": summary, "failures": failures,
        "wall_s": time.perf_counter() - t0,
        # Training time of every engine run (a resumed invocation reads finished runs back in seconds).
        "run_minutes_total": sum(p[e]["wall_s"] for p in pairs for e in ENGINES) / 60.0,
        "machine": describe_machine(),
        "markdown": markdown(summary, steps, episodes) if summary else "no finished pair",
    }
    png = plot(summary, pairs, out.with_suffix(".png")) if summary else None
    if png:
        result["plot"] = str(png.relative_to(ROOT)) if png.is_relative_to(ROOT) else str(png)
    write_result(result, out)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
