"""What filtering saves inside TRL's GRPOTrainer, through the adapter, in TRL's own micro-batches.

    python -m benchmarks.bench_trl_filtering [--quick] [--sizes 4x8,8x8] [--per-device 8] [--repeats 5]

The companion of ``benchmarks.bench_filtering`` (which times this package's loss): here the timed code is TRL's.
One generation batch of P x G rows is sampled by ``trl.GRPOTrainer`` (the tiny model, Sokoban prompts from
``single_turn_dataset`` with the env's system prompt, ``max_completion_length`` 32) and reused by every variant.
One timed step = what TRL runs after generation for one optimiser step: the variant's batch handling, TRL's
shuffle and split of the generation batch into ``steps_per_generation = P x G / per_device`` micro-batches
(``_prepare_inputs``), and ``training_step`` (TRL's ``compute_loss`` + ``backward``) on each. Variants,
interleaved round-robin after one warm-up round:

- ``none``: no filter, every row trained on;
- ``top_p0.9_masked``: dropped groups stay in the batch with their ``completion_mask`` zeroed (what a filter that
  only masks does, as TRL pull request #7242): same gradient as removing them, the compute of every row;
- ``top_p0.9_removed``: the adapter's ``RagenGRPOTrainer._filter`` removes the dropped groups' rows (and padding
  columns) before the split, so each of the ``steps_per_generation`` micro-batches is smaller.

Groups to keep come from the seeded synthetic rewards of ``bench_filtering.synthetic_rewards`` (the untrained
model's answers all get the format penalty: zero variance everywhere). Per variant: median time, IQR, kept loss
tokens, the ideal ``t_none x kept fraction`` and the efficiency ``(t_none - t) / (t_none - t_ideal)`` (of the
medians, and paired per round). Results: ``benchmarks/results/trl_filtering.json``.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.bench_filtering import parse_sizes, summarize, synthetic_rewards, time_interleaved  # noqa: E402
from benchmarks.machine import describe_machine  # noqa: E402
from benchmarks.readme_tables import write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ENV_ID = "ragen/Sokoban-v0"
VARIANTS = ("none", "top_p0.9_masked", "top_p0.9_removed")


def build_trainer(p: int, g: int, per_device: int, max_new_tokens: int, output_dir: Path) -> Any:
    """A ``RagenGRPOTrainer`` (top-p 0.9) on the tiny model with P Sokoban prompts of G generations each."""
    from ragen_core.integrations.trl import EnvReward, RagenGRPOConfig, RagenGRPOTrainer, single_turn_dataset
    from ragen_core.policy import load_policy
    from ragen_core.rollout import RolloutSettings

    n = p * g
    if n % per_device:
        raise ValueError(f"P x G = {n} must be a multiple of --per-device {per_device}")
    policy = load_policy("tiny", device=torch.device("cpu"))
    tokenizer = copy.copy(policy.tokenizer)
    tokenizer.padding_side = "left"
    settings = RolloutSettings(max_turns=1, max_new_tokens=max_new_tokens)
    dataset = single_turn_dataset(ENV_ID, range(10000, 10000 + p), settings=settings)
    args = RagenGRPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=0, per_device_train_batch_size=per_device, gradient_accumulation_steps=n // per_device,
        num_generations=g, max_completion_length=max_new_tokens, gradient_checkpointing=False, beta=0.0,
        entropy_coef=0.001, rv_filter="top_p", rv_filter_value=0.9, shuffle_dataset=False,
    )
    return RagenGRPOTrainer(model=policy.model, reward_funcs=EnvReward(ENV_ID), args=args,
                            processing_class=tokenizer, train_dataset=dataset), dataset


def sample_batch(trainer: Any, dataset: Any, g: int) -> dict[str, Any]:
    """One unfiltered generation batch, scored by TRL (rows in TRL's order: each prompt G times)."""
    from trl import GRPOTrainer

    rows = [dataset[i] for i in range(len(dataset)) for _ in range(g)]
    trainer.model.train()
    with torch.no_grad():
        return GRPOTrainer._generate_and_score_completions(trainer, rows)


def variant_batches(trainer: Any, output: dict[str, Any], rewards: torch.Tensor) -> dict[str, Any]:
    """Per variant a zero-argument function giving the batch TRL splits into micro-batches (filtering is part of
    the timed step, as in training), and the loss tokens it keeps."""
    from ragen_core.math.filtering import filter_groups

    g = rewards.shape[1]
    trainer._rv_rewards_per_func = rewards.reshape(-1, 1)  # the adapter ranks groups on these
    # TRL's group-scaled advantages of the same rewards, so that the loss has the gradient training would have.
    advantages = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    output = {**output, "advantages": advantages.reshape(-1).to(output["advantages"].dtype)}
    keep = filter_groups(rewards, strategy="top_p", value=0.9).mask.repeat_interleave(g)  # [N]

    def masked() -> dict[str, Any]:
        out = dict(output)
        out["completion_mask"] = output["completion_mask"] * keep[:, None].to(output["completion_mask"].dtype)
        out["num_items_in_batch"] = out["completion_mask"].sum()
        return out

    makers = {"none": lambda: dict(output), "top_p0.9_masked": masked,
              "top_p0.9_removed": lambda: trainer._filter(dict(output))}
    total = float(output["completion_mask"].sum())
    infos = {}
    for name, make in makers.items():
        batch = make()
        kept = float(batch["completion_mask"].sum())
        infos[name] = {"rows": int(batch["completion_ids"].shape[0]), "tokens_kept_fraction": kept / total,
                       "columns": int(batch["completion_ids"].shape[1])}
    return {"makers": makers, "infos": infos}


def trl_step(trainer: Any, make_batch: Any, keep_grad: bool = False) -> None:
    """TRL's work for one optimiser step after generation: ``_prepare_inputs`` (shuffle, split into
    ``steps_per_generation`` micro-batches) and ``training_step`` on each (loss + backward); the accumulated
    gradients are dropped unless ``keep_grad``."""
    trainer._rv_skip_update = False
    trainer._generate_and_score_completions = lambda _batch: make_batch()  # instance attribute: this step's batch
    trainer._step, trainer._buffered_inputs = 0, None
    # Set by Trainer.train() at the start of each optimiser step; this step is driven by hand.
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    for _ in range(trainer.args.steps_per_generation):
        trainer.training_step(trainer.model, {}, None)
    if not keep_grad:
        trainer.model.zero_grad(set_to_none=True)


def markdown(sets: list[dict[str, Any]]) -> str:
    lines = ["| P x G | micro-batches | variant | rows | kept loss tokens | step time (median [IQR]) | ideal | "
             "efficiency | paired per round (median [IQR]) |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in sets:
        for r in s["variants"]:
            eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.2f}"
            pr = "-" if r["efficiency_per_round_median"] is None else (
                f"{r['efficiency_per_round_median']:.2f} [{r['efficiency_per_round_iqr'][0]:.2f}, "
                f"{r['efficiency_per_round_iqr'][1]:.2f}]")
            lines.append(
                f"| {s['P']} x {s['G']} | {s['steps_per_generation']} of {s['per_device']} rows | {r['variant']} | "
                f"{r['rows']} | {100 * r['tokens_kept_fraction']:.0f}% | {r['time_median_s']:.3f} s "
                f"[{r['time_q1_s']:.3f}, {r['time_q3_s']:.3f}] | {r['ideal_s']:.3f} s | {eff} | {pr} |")
    lines += ["", "TRL's `training_step` (its GRPO loss, token-mean `dapo`, + backward) over TRL's micro-batches; the "
              "removed variant's micro-batches hold the kept rows only (the count stays `steps_per_generation`), "
              "optimizer step not timed."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    import trl

    from benchmarks.machine import check_output_path, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_trl_filtering",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 x 4, 2 rounds")
    parser.add_argument("--sizes", default=None, help="P x G list (default 4x8,8x8)")
    parser.add_argument("--per-device", type=positive_int, default=8, help="TRL's per_device_train_batch_size (rows)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=32)
    parser.add_argument("--repeats", type=positive_int, default=None, help="timed rounds (default 5, quick 2)")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    torch.set_num_threads(args.threads)
    sizes = parse_sizes(args.sizes or ("4x4" if args.quick else "4x8,8x8"))
    bad = [f"{p}x{g}" for p, g in sizes if (p * g) % min(args.per_device, p * g)]
    if bad:
        parser.error(f"P x G of {bad} is not a multiple of --per-device {args.per_device} (TRL's micro-batch rows)")
    repeats = args.repeats or (2 if args.quick else 5)
    t0 = time.perf_counter()
    sets = []
    with tempfile.TemporaryDirectory() as tmp:
        for p, g in sizes:
            per_device = min(args.per_device, p * g)
            trainer, dataset = build_trainer(p, g, per_device, args.max_new_tokens, Path(tmp))
            output = sample_batch(trainer, dataset, g)
            rewards = synthetic_rewards(p, g, seed=0)
            v = variant_batches(trainer, output, rewards)
            print(f"[trl-filtering] {p}x{g}: {int(output['completion_mask'].sum())} loss tokens, "
                  f"{trainer.args.steps_per_generation} micro-batches of {per_device} rows", flush=True)
            times = time_interleaved(lambda name, t=trainer, makers=v["makers"]: trl_step(t, makers[name]),
                                     list(VARIANTS), warmup=1, repeats=repeats)
            rows = summarize(times, v["infos"])
            for r in rows:
                print(f"    {r['variant']:<22} {r['time_median_s']:.3f} s  kept {100 * r['tokens_kept_fraction']:.0f}%"
                      f"  eff {'-' if r['efficiency'] is None else format(r['efficiency'], '.2f')}", flush=True)
            sets.append({"P": p, "G": g, "per_device": per_device,
                         "steps_per_generation": int(trainer.args.steps_per_generation), "variants": rows})
    result = {"benchmark": "trl_filtering", "quick": args.quick, "trl": trl.__version__, "repeats": repeats,
              "threads": args.threads, "sets": sets, "wall_s": time.perf_counter() - t0,
              "machine": describe_machine(), "markdown": markdown(sets)}
    write_result(result, args.out or RESULTS / f"trl_filtering{'_quick' if args.quick else ''}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
