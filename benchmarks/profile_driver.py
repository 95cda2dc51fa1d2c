"""One profiled run of a config, for :mod:`benchmarks.bench_profile`: where a run's time goes, part by part.

    python benchmarks/profile_driver.py CONFIG OUT.json [key=value ...]

Run as a script in a fresh process whose ``PYTHONPATH`` names the code to profile (this checkout, or a checkout of
an older commit): it uses only the trainer API that both have (``load_config``, ``Trainer``, ``sft.warm_start``,
``Trainer.train_step``, ``Trainer.evaluate``, ``Trainer.probe_diagnostics``). The phases:

1. warm start (``warm_start.sft_episodes`` demonstrations, then SFT), split into demonstration collection and SFT
   steps by the trainer's own ``perf/sft_collect_s``;
2. ``STEPS`` RL steps after one unmeasured step (the first step pays one-off costs: allocator, caches);
3. one validation, one held-out probe (configs that have one).

Inside every phase, exclusive timers (a call's time minus that of the timed calls nested in it) split the time
into: ``generate`` (the policy's generation, token loop and sampling), ``tokenizer`` (chat template, encode,
decode), ``env`` (the envs' reset and step), ``score`` (the trainer's old-log-prob and reference passes),
``update`` (the update's forward, backward and optimiser steps), ``cross_score`` (MI cross-scoring) and ``other``
(in the warm start: the SFT steps and the demonstrator's scripts; elsewhere: bookkeeping, the probe's entropy pass).

Besides the seconds, the driver counts the tokens each phase pushed through the model, for the arithmetic floor
computed by the benchmark: prompt and generated tokens of every rollout, the real tokens of the rows trained on,
and the trace positions cross-scored. The result (one JSON file) is read by :mod:`benchmarks.bench_profile`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Any

STEPS = 3

_stack: list[list[float]] = []
_totals: dict[str, float] = {}
_counts: dict[str, float] = {}


def _timed(category: str, fn):
    """`fn` wrapped so that its exclusive time (minus nested timed calls) is added to `category`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _stack.append([0.0])
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - t0
            nested = _stack.pop()[0]
            _totals[category] = _totals.get(category, 0.0) + spent - nested
            if _stack:
                _stack[-1][0] += spent

    return wrapper


def _patch(owner: Any, name: str, category: str) -> None:
    fn = getattr(owner, name, None)
    if fn is not None:
        setattr(owner, name, _timed(category, fn))


def _count_rollout(batch: Any) -> None:
    """Prompt and generated tokens of a rollout batch (the work of its generation)."""
    for traj in batch.trajectories:
        _counts["turns"] = _counts.get("turns", 0.0) + len(traj.turns)
        for turn in traj.turns:
            _counts["prompt_tokens"] = _counts.get("prompt_tokens", 0.0) + len(turn.prompt_ids)
            _counts["generated_tokens"] = _counts.get("generated_tokens", 0.0) + len(turn.response_ids)


def _counted_cross_score(fn, prompts_at: int):
    """`fn` (a cross-scoring function: prompts, then traces) that also counts the positions it scores: every
    trace token under every prompt (``cross_positions``) and the prompts' own tokens (``cross_prompt_tokens``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        prompts, traces = args[prompts_at], args[prompts_at + 1]
        n_prompts = len(prompts)
        trace_tokens = sum(len(z) for group in traces for z in group)
        _counts["cross_positions"] = _counts.get("cross_positions", 0.0) + n_prompts * trace_tokens
        _counts["cross_prompt_tokens"] = _counts.get("cross_prompt_tokens", 0.0) + sum(len(x) for x in prompts)
        return fn(*args, **kwargs)

    return wrapper


def install_timers() -> None:
    import transformers

    import ragen_core.episode as episode
    import ragen_core.rollout as rollout_mod
    import ragen_core.training.trainer as trainer_mod
    from ragen_core.policy import hf

    _patch(hf.HFPolicy, "generate", "generate")
    _patch(hf.HFPolicy, "encode_chat", "tokenizer")
    _patch(hf.HFPolicy, "cross_score", "cross_score")
    for cls in (transformers.PreTrainedTokenizerBase,):
        for name in ("__call__", "decode", "batch_decode", "apply_chat_template"):
            _patch(cls, name, "tokenizer")
    _patch(episode.ChatEpisode, "step", "env")
    _patch(episode.ChatEpisode, "reset", "env")
    _patch(trainer_mod.Trainer, "_score", "score")
    _patch(trainer_mod.Trainer, "update", "update")
    import ragen_core.math.mi as mi

    mi.cross_score = _counted_cross_score(_timed("cross_score", mi.cross_score), prompts_at=1)
    for mod in (trainer_mod, sys.modules.get("ragen_core.training.probe")):
        if mod is not None and hasattr(mod, "cross_score"):
            mod.cross_score = mi.cross_score
    if hasattr(hf.HFPolicy, "cross_score"):
        hf.HFPolicy.cross_score = _counted_cross_score(hf.HFPolicy.cross_score, prompts_at=1)
    original = rollout_mod.build_batch

    def counting_build_batch(*args, **kwargs):
        batch = original(*args, **kwargs)
        _count_rollout(batch)
        return batch

    rollout_mod.build_batch = counting_build_batch


def _phase(name: str, fn) -> dict[str, Any]:
    _totals.clear()
    _counts.clear()
    t0 = time.perf_counter()
    c0 = time.process_time()
    out = fn()
    wall = time.perf_counter() - t0
    parts = dict(_totals)
    parts["other"] = max(wall - sum(parts.values()), 0.0)
    return {"phase": name, "wall_s": wall, "cpu_s": time.process_time() - c0, "parts": parts,
            "counts": dict(_counts), "extra": out if isinstance(out, dict) else {}}


def main(argv: list[str]) -> int:
    config, out_path, *overrides = argv
    import torch

    torch.set_num_threads(1)
    import ragen_core.training.probe  # noqa: F401  (so its cross_score name is patched too)
    from ragen_core.training import sft
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    install_timers()
    import tempfile

    cfg = load_config(config, ["run.progress=false", "run.threads=1", "warm_start.cache_dir=", *overrides])
    trainer = Trainer(cfg, tempfile.mkdtemp(prefix="ragen-profile-"))
    phases = []

    def warm() -> dict[str, Any]:
        m = sft.warm_start(trainer.policy, cfg, device=trainer.device)
        rows = int(m.get("sft/episodes", 0))
        return {"collect_s": m.get("perf/sft_collect_s"), "sft_s": m.get("perf/sft_s"), "episodes": rows,
                "sft_tokens_trained": m.get("sft/tokens")}

    if cfg.warm_start.sft_episodes > 0:
        phases.append(_phase("warm_start", warm))
    trainer.train_step()  # one unmeasured step
    step_metrics: list[dict[str, Any]] = []

    def steps() -> dict[str, Any]:
        for _ in range(STEPS):
            step_metrics.append(trainer.train_step())
        keys = ("perf/step_s", "perf/rollout_s", "perf/score_s", "perf/update_s", "perf/mi_s",
                "filter/tokens_kept_fraction", "rollout/rows", "rollout/seq_len", "perf/tokens_trained")
        return {k: [m.get(k) for m in step_metrics] for k in keys} | {"steps": STEPS}

    phases.append(_phase("rl_steps", steps))
    phases.append(_phase("validation", lambda: trainer.evaluate(record=False)))
    if getattr(trainer, "probe", None) is not None:
        phases.append(_phase("probe", lambda: trainer.probe_diagnostics(trainer.state.step)))
    model = trainer.policy.model
    cfg_m = model.config
    result = {
        "config": config, "overrides": overrides, "pythonpath": os.environ.get("PYTHONPATH", ""),
        "model": {"hidden": cfg_m.hidden_size, "layers": cfg_m.num_hidden_layers,
                  "intermediate": cfg_m.intermediate_size, "heads": cfg_m.num_attention_heads,
                  "kv_heads": cfg_m.num_key_value_heads, "vocab": cfg_m.vocab_size,
                  "parameters": sum(p.numel() for p in model.parameters())},
        "probe": {"prompts": cfg.mi.probe_prompts, "group_size": cfg.mi.probe_group_size},
        "phases": phases,
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
