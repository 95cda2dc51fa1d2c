"""One profiled run of a config, for :mod:`benchmarks.bench_profile`: where a run's time goes, part by part.

    python benchmarks/profile_driver.py CONFIG OUT.json [key=value ...]

Run as a script in a fresh process whose ``PYTHONPATH`` names the code to profile (this checkout, or a checkout of
an older commit): it uses only the trainer API that both have (``load_config``, ``Trainer``, ``sft.warm_start``,
``Trainer.train_step``, ``Trainer.mi_diagnostics``, ``Trainer.evaluate``, ``Trainer.probe_diagnostics``). The
phases:

1. warm start (``warm_start.sft_episodes`` demonstrations, then SFT), split into demonstration collection and SFT
   steps by the trainer's own ``perf/sft_collect_s``;
2. ``STEPS`` RL steps after one unmeasured step (the first step pays one-off costs: allocator, caches);
3. the in-batch MI diagnostics once (``mi``), one validation, one held-out probe (configs that have one).

Inside every phase, exclusive timers (a call's time minus that of the timed calls nested in it) split the time
into: ``generate`` (the policy's generation, token loop and sampling), ``tokenizer`` (chat template, encode,
decode), ``env`` (the envs' reset and step), ``score`` (the trainer's old-log-prob and reference passes),
``update`` (the update's forward, backward and optimiser steps), ``cross_score`` (MI cross-scoring) and ``other``
(in the warm start: the SFT steps and the demonstrator's scripts; elsewhere: bookkeeping, the probe's entropy pass).

Besides the seconds, the driver counts the tokens each phase pushed through the model, for the arithmetic floors
computed by the benchmark. For the **dense floor**: prompt and generated tokens of every rollout, and the trace
positions cross-scored (every trace under every prompt). For the **lean floor**, the work the phase's calls need,
counted from the calls themselves (``lean``, per pass kind: ``forward`` without gradient, ``train`` forward and
backward, by ``torch.is_grad_enabled()`` at the call), as :func:`scoring_work` defines it:

- ``HFPolicy.generate``: each distinct prompt's first ``len - 1`` tokens once per call (the G rollouts of a group
  share their prompt: ``FastQwen2.start_decoding``), then one read position per sampled token (the last prompt
  token and every generated token but the last are fed; the end-of-sequence token is sampled, not kept), the
  reads of each decoding step under the kind ``decode@B`` of its row count (:func:`decode_work`: a step's matrix
  products have as many rows as rows still decoding, and are priced at that shape's rate);
- ``HFPolicy.forward_logprobs`` (SFT, the update, the old-log-prob pass, the probe's entropy pass): per row the
  positions whose next-token log-prob is read (``score_mask``, else every real position), each distinct prefix
  before the first of them once per call (``split_rows``), the unread positions between the first and the last
  read one as key/value positions, nothing after the last;
- ``cross_score`` (in-batch MI, probe): each prompt's first ``len - 1`` tokens once, each *distinct* trace once
  under every prompt (``FastQwen2.cross_score``).

The phase ``mi`` is the in-batch MI diagnostics (``Trainer.mi_diagnostics``: cross-scoring the first turn of the
last measured step's batch) timed on its own: the RL steps measured (2-4) hold none for the shipped configs
(``mi.every`` >= 5), and a study's runs do one every ``mi.every`` steps. The result (one JSON file) is read by
:mod:`benchmarks.bench_profile`.
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
#: The lean-floor work of the phase being measured, per pass kind ("forward", "train"): :data:`WORK_KEYS`.
_lean: dict[str, dict[str, float]] = {}
#: The last rollout batch built (the in-batch MI phase measures its diagnostics on it).
_last_batch: list[Any] = []

#: The counts of lean work: ``kv_tokens`` positions whose keys and values are needed but not their output (a
#: distinct prefix's tokens, unread positions between read ones), ``read_tokens`` positions whose output is read
#: (one log-prob each), and for each the keys their queries attend to, summed (``kv_ctx``, ``read_ctx``: a position
#: p attends to p + 1 keys).
WORK_KEYS = ("kv_tokens", "kv_ctx", "read_tokens", "read_ctx")


def _empty_work() -> dict[str, float]:
    return dict.fromkeys(WORK_KEYS, 0.0)


def row_work(rows: list[tuple[tuple[int, ...], int, int, int, int]]) -> dict[str, float]:
    """Lean work of one call from per-row summaries ``(prefix, first, last, n_read, sum_read)``: the row's read
    log-prob positions run from ``first`` to ``last`` (``n_read`` of them, positions summed in ``sum_read``), and
    ``prefix`` is its tokens before position ``first - 1``. Equal prefixes count once (the call computes them once);
    the hidden state at ``t - 1`` gives the log-prob of token ``t``, so the read positions are ``t - 1`` (attending
    to ``t`` keys) and the other positions from ``first - 1`` to ``last - 1`` need only keys and values."""
    out = _empty_work()
    seen: set[tuple[int, ...]] = set()
    for prefix, first, last, n_read, sum_read in rows:
        if n_read <= 0:
            continue
        if prefix not in seen:
            seen.add(prefix)
            m = len(prefix)
            out["kv_tokens"] += m
            out["kv_ctx"] += m * (m + 1) / 2
        span = last - first + 1  # positions first - 1 .. last - 1, attending to first .. last keys
        out["read_tokens"] += n_read
        out["read_ctx"] += sum_read
        out["kv_tokens"] += span - n_read
        out["kv_ctx"] += (first + last) * span / 2 - sum_read
    return out


def scoring_work(rows: list[list[int]], wanted: list[list[int]]) -> dict[str, float]:
    """Lean work of reading the log-probs of tokens ``wanted[b]`` (positions >= 1) of ``rows[b]`` in one call
    (:func:`row_work`)."""
    summaries = []
    for row, want in zip(rows, wanted):
        ts = sorted({int(t) for t in want if 1 <= t < len(row)})
        if ts:
            summaries.append((tuple(row[: ts[0] - 1]), ts[0], ts[-1], len(ts), sum(ts)))
    return row_work(summaries)


def generation_work(prompts: list[list[int]], sampled: list[int]) -> dict[str, float]:
    """Lean work of one generation call: prompt b followed by ``sampled[b]`` sampled tokens is a row whose read
    positions are its last prompt token and every sampled token but the last (:func:`scoring_work`)."""
    rows = [list(p) + [0] * s for p, s in zip(prompts, sampled)]
    return scoring_work(rows, [list(range(len(p), len(p) + s)) for p, s in zip(prompts, sampled)])


def decode_bucket(rows: int) -> int:
    """The power of two at or above `rows`: the row count whose matrix rates price a decoding step of `rows` rows
    (rates rise with the row count, so the bucket's rate is at least the step's own: the floor stays a lower
    bound)."""
    b = 1
    while b < rows:
        b *= 2
    return b


def decode_work(prompts: list[list[int]], sampled: list[int]) -> dict[str, dict[str, float]]:
    """:func:`generation_work` split by what shapes its matrix products have: the prefill (each distinct prompt's
    first ``len - 1`` tokens, one pass of many rows: kind ``forward``) and the decoding steps, one token per row
    still decoding, each step's read positions under the kind ``decode@B`` of its row count's bucket
    (:func:`decode_bucket`). Step s (0-based) feeds every row b with ``sampled[b] > s``: its read position is
    ``len(p_b) - 1 + s``, attending to ``len(p_b) + s`` keys. The kinds' works add up to :func:`generation_work`."""
    out: dict[str, dict[str, float]] = {}
    prefill = _empty_work()
    for prefix in {tuple(p[:-1]) for p, n in zip(prompts, sampled) if n > 0}:  # what start_decoding shares
        m = len(prefix)
        if m > 0:
            prefill["kv_tokens"] += m
            prefill["kv_ctx"] += m * (m + 1) / 2
    if any(prefill.values()):
        out["forward"] = prefill
    for s in range(max(sampled, default=0)):
        live = [len(p) + s for p, n in zip(prompts, sampled) if n > s]
        work = out.setdefault(f"decode@{decode_bucket(len(live))}", _empty_work())
        work["read_tokens"] += len(live)
        work["read_ctx"] += sum(live)
    return out


def cross_work(prompts: list[list[int]], traces: list[list[list[int]]]) -> dict[str, float]:
    """Lean work of cross-scoring: each prompt's first ``len - 1`` tokens once, and each distinct trace once under
    every prompt (a trace of n tokens after a prompt of L: n read positions attending to L .. L + n - 1 keys)."""
    out = _empty_work()
    distinct = {tuple(z) for group in traces for z in group}
    for x in prompts:
        n_prompt = len(x)
        if not n_prompt:
            continue
        m = n_prompt - 1
        out["kv_tokens"] += m
        out["kv_ctx"] += m * (m + 1) / 2
        for z in distinct:
            n = len(z)
            out["read_tokens"] += n
            out["read_ctx"] += n * n_prompt + n * (n - 1) / 2
    return out


def _add_lean(kind: str, work: dict[str, float]) -> None:
    into = _lean.setdefault(kind, _empty_work())
    for k, v in work.items():
        into[k] += v


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
        _add_lean("forward", cross_work([list(x) for x in prompts], [[list(z) for z in g] for g in traces]))
        return fn(*args, **kwargs)

    return wrapper


def _counted_generate(fn):
    """`fn` (``Policy.generate``) that also adds the lean work of the call (:func:`generation_work`)."""

    @functools.wraps(fn)
    def wrapper(self, prompts, *args, **kwargs):
        out = fn(self, prompts, *args, **kwargs)
        stop = kwargs.get("stop", ("</answer>",))
        stop = tuple(s for s in ((stop,) if isinstance(stop, str) else stop) if s)
        # An end-of-sequence token was sampled (and dropped) when a row stopped without a stop string.
        sampled = [len(g.response_ids) + int(g.finish_reason == "stop" and not any(s in g.text for s in stop))
                   for g in out]
        for kind, work in decode_work([list(p) for p in prompts], sampled).items():
            _add_lean(kind, work)
        return out

    return wrapper


def _counted_forward_logprobs(fn):
    """`fn` (``Policy.forward_logprobs``) that also adds the lean work of the call: the positions it reads
    (``score_mask``, else every real position after the first), as ``train`` work when it runs with gradient."""

    @functools.wraps(fn)
    def wrapper(self, input_ids, attention_mask, *args, **kwargs):
        import torch

        kind = "train" if torch.is_grad_enabled() else "forward"
        am = attention_mask.detach().to("cpu").bool()
        want = am.clone()
        want[:, 1:] &= am[:, :-1]
        want[:, 0] = False
        score = kwargs.get("score_mask")
        if score is not None:
            want &= score.detach().to("cpu").bool()
        ids = input_ids.detach().to("cpu")
        pos = torch.arange(want.shape[1])
        n_read = want.sum(dim=1)
        first = torch.where(want, pos, want.shape[1]).min(dim=1).values
        last = torch.where(want, pos, -1).max(dim=1).values
        total = (want * pos).sum(dim=1)
        rows = []
        for b in n_read.nonzero().flatten().tolist():
            real = am[b].nonzero().flatten()
            start = int(real[0]) if real.numel() else 0  # left padding: the row starts here
            f, la = int(first[b]) - start, int(last[b]) - start
            rows.append((tuple(ids[b, start: start + f - 1].tolist()), f, la, int(n_read[b]),
                         int(total[b]) - start * int(n_read[b])))
        _add_lean(kind, row_work(rows))
        return fn(self, input_ids, attention_mask, *args, **kwargs)

    return wrapper


def install_timers() -> None:
    import transformers

    import ragen_core.episode as episode
    import ragen_core.rollout as rollout_mod
    import ragen_core.training.trainer as trainer_mod
    from ragen_core.policy import hf

    _patch(hf.HFPolicy, "generate", "generate")
    hf.HFPolicy.generate = _counted_generate(hf.HFPolicy.generate)
    hf.HFPolicy.forward_logprobs = _counted_forward_logprobs(hf.HFPolicy.forward_logprobs)
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
        _last_batch[:] = [batch]
        return batch

    rollout_mod.build_batch = counting_build_batch


def _phase(name: str, fn) -> dict[str, Any]:
    _totals.clear()
    _counts.clear()
    _lean.clear()
    t0 = time.perf_counter()
    c0 = time.process_time()
    out = fn()
    wall = time.perf_counter() - t0
    parts = dict(_totals)
    parts["other"] = max(wall - sum(parts.values()), 0.0)
    return {"phase": name, "wall_s": wall, "cpu_s": time.process_time() - c0, "parts": parts,
            "counts": dict(_counts), "lean": {k: dict(v) for k, v in _lean.items()},
            "extra": out if isinstance(out, dict) else {}}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):  # not `config, out = argv`'s ValueError traceback
        print("usage: python benchmarks/profile_driver.py CONFIG OUT.json [key=value ...]", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
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
    if cfg.mi.every and _last_batch:
        batch = _last_batch[0]
        phases.append(_phase("mi", lambda: trainer.mi_diagnostics(batch)))
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
                  "head_dim": int(getattr(cfg_m, "head_dim", None) or cfg_m.hidden_size // cfg_m.num_attention_heads),
                  "parameters": sum(p.numel() for p in model.parameters())},
        "probe": {"prompts": cfg.mi.probe_prompts, "group_size": cfg.mi.probe_group_size},
        "phases": phases,
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
