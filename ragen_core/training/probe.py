"""A fixed held-out MI probe: input dependence measured off the batch, on the same prompts every time.

The in-batch proxies (`collapse/*`, :func:`ragen_core.math.mi.mi_proxies` on the training batch) have two blind spots
at small scale: with P = 8 prompts their ceiling is log 8 = 2.08 nats and retrieval saturates at 1.0 as soon as
the reasoning names anything of the state, and each batch holds different prompts (sometimes the same level
twice), so a value moves with the batch as much as with the policy. The probe fixes both:

- N distinct first-turn prompts (``mi.probe_prompts``, default 32: ceiling log 32 = 3.47 nats, retrieval chance
  1/32) drawn once from their own seed stream (``mi.probe_seed``), disjoint from the train, validation and
  warm-start seeds; a level whose observation equals an earlier one is skipped, so no prompt is duplicated (an env
  that shows images is refused: the prompts are cross-scored as token ids, without their pictures);
- every ``mi.probe_every`` steps, and once before the first RL step (step 0): G samples per prompt
  (``mi.probe_group_size``) at the training temperature, from a sampler seeded by (run.seed, step) and
  independent of the training streams (switching the probe on or off leaves the training run unchanged);
- every trace cross-scored under every prompt with the KV-reuse path (:func:`ragen_core.math.mi.cross_score`), and the
  policy's mean next-token entropy over the probe's reasoning tokens (the within-input diversity the paper says
  dashboards watch).

Logged under ``probe/`` with the chance level and the ceiling beside every value:

    probe/retrieval_acc, probe/retrieval_chance (1/N)          probe/recall_at_{2,4,8} and their _chance (k/N)
    probe/retrieval_margin = (acc - chance) / (1 - chance)     (0 = chance, 1 = perfect retrieval)
    probe/mi_seq_est, probe/mi_upper_bound (log N)             probe/mi_seq_norm = mi_seq_est / log N
    probe/cond_entropy_seq_est (H(Z|X), nats per trace)        probe/cond_entropy_est (nats per token)
    probe/token_entropy (policy entropy per reasoning token)   probe/mi_est, probe/mi_zscore ...
    probe/success, probe/return (first turn)                   probe/pmi_return_cov, probe/pmi_return_corr
    probe/reasoning_tokens (mean |Z|, the scored span)         probe/modal_share (share of the most common Z)
    probe/template_share (share of Z that is the warm start's template, when the demonstrator has one)
    probe/token_entropy_template, probe/token_entropy_state (the entropy per reasoning token of the template
        traces and of the others: the input-agnostic and the state-derived modes)
    perf/probe_s (seconds spent on the probe)

The last pair says which way the task gradient pushes input dependence (:func:`pmi_return_association`): the
within-prompt covariance between a trace's return and its pointwise input dependence. Positive: the traces that
depend more on their input earn more, and the task gradient raises the MI; negative: a template pays, and it
lowers it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ragen_core.episode import per_rollout_options, rollout_option
from ragen_core.math.mi import cross_score, flatten_proxies, mi_proxies
from ragen_core.rollout import RolloutBatch, RolloutSettings, make_envs, pad_token_id, rollout
from ragen_envs.contract import vision

__all__ = ["ProbeSet", "build_probe", "entropy_by_mode", "scripted_mode_entropies", "pmi_return_association",
           "cadence_due", "probe_due", "probe_metrics", "probe_seed_range", "reasoning_text", "template_match_share",
           "modal_share"]

#: At most this many candidate seeds per probe prompt are tried when skipping duplicated levels.
_CANDIDATES_PER_PROMPT = 4


def cadence_due(step: int, every: int, until: int = 0) -> bool:
    """Whether a measurement taken at step 0 and every `every` steps (0: never) up to step `until` (0: no limit)
    is due after `step` updates (the in-batch MI's and validation's cadence; the run's end is the caller's)."""
    if every <= 0 or (until and step > until):
        return False
    return step % every == 0


def probe_due(step: int, steps: int, every: int, until: int = 0) -> bool:
    """Whether the probe measures after `step` updates of a `steps`-step run: at step 0 and every `every` steps
    up to `until` (0: no limit) and, when `until` is set, at the run's last step (its end margin) too."""
    if until and step == steps:
        return True
    return cadence_due(step, max(every, 1), until)


def probe_seed_range(probe_seed: int, n_prompts: int) -> range:
    """The seeds a probe of `n_prompts` prompts may draw from (checked against the other seed streams)."""
    return range(probe_seed, probe_seed + _CANDIDATES_PER_PROMPT * n_prompts)


@dataclass
class ProbeSet:
    """N distinct probe levels (their seeds) and the envs that replay them (N * G envs)."""

    seeds: list[int]
    envs: list[Any]
    group_size: int
    settings: RolloutSettings
    reset_options: list[dict[str, Any]] | None


def build_probe(env_id: str, env_kwargs: dict[str, Any], n_prompts: int, group_size: int, probe_seed: int,
                settings: RolloutSettings, per_rollout_option: str = "") -> ProbeSet:
    """Draw `n_prompts` levels with pairwise distinct first observations from seeds ``probe_seed, probe_seed+1,..``.

    Raises ValueError when fewer than `n_prompts` distinct levels exist among the candidate seeds (an env with
    very few distinct levels: lower ``mi.probe_prompts``), and for an env whose observations show images
    (:func:`_refuse_images`).
    """
    if _not_count(n_prompts, 2) or _not_count(group_size, 1):
        raise ValueError(f"a probe needs >= 2 prompts and >= 1 sample each; got {n_prompts!r} x {group_size!r}")
    env = make_envs(env_id, 1, env_kwargs)[0]
    _refuse_images(env, env_id)
    seen: set[str] = set()
    seeds: list[int] = []
    for s in probe_seed_range(probe_seed, n_prompts):
        opts = rollout_option(per_rollout_option, s, 0, group_size)
        obs, _ = env.reset(seed=s, options=opts)
        key = obs if isinstance(obs, str) else repr(obs)
        if key in seen:
            continue
        seen.add(key)
        seeds.append(s)
        if len(seeds) == n_prompts:
            break
    if len(seeds) < n_prompts:
        raise ValueError(f"only {len(seeds)} distinct levels among seeds {probe_seed}.."
                         f"{probe_seed + _CANDIDATES_PER_PROMPT * n_prompts - 1} of {env_id}; "
                         f"lower mi.probe_prompts (asked for {n_prompts})")
    reset_options = per_rollout_options(per_rollout_option, seeds, group_size)
    return ProbeSet(seeds=seeds, envs=make_envs(env_id, n_prompts * group_size, env_kwargs),
                    group_size=group_size, settings=replace(settings, max_turns=1, greedy=False),
                    reset_options=reset_options)


def _not_count(value: Any, low: int) -> bool:
    """Whether `value` is not an integer >= `low` (a bool or a float is not a count)."""
    return isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low


def _refuse_images(env: Any, env_id: str) -> None:
    """ValueError for an env that shows images: the probe cross-scores its prompts as token ids alone
    (:func:`policy_cross_score` takes no images), so it would score the traces of a vision policy without the
    pictures they were sampled from (scorer and sampler disagree), and its next-token entropy pass has no images to
    put behind the prompts' image tokens. The in-batch MI diagnostics skip such batches
    (``collapse/mi_skipped_vision``); the probe is asked for by name, so it is refused before anything runs."""
    if vision(env):
        raise ValueError(f"{env_id} shows images (vision=True): the probe cross-scores its prompts as token ids "
                         "without their images, so it cannot measure a vision env's input dependence; "
                         "set mi.probe_prompts = 0")


def policy_cross_score(policy: Any, prompts: list[list[int]], traces: list[list[list[int]]],
                       batch_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L, lengths)`` by the policy's own cross-scoring when it has one (:meth:`HFPolicy.cross_score`, the lean
    forward), else :func:`ragen_core.math.mi.cross_score` on its model."""
    own = getattr(policy, "cross_score", None)
    if callable(own):
        return own(prompts, traces, batch_tokens=batch_tokens)
    return cross_score(policy.model, prompts, traces, batch_tokens=batch_tokens, return_lengths=True)


def _token_entropy(policy: Any, batch: RolloutBatch, lengths: torch.Tensor,
                   temperature: float) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Mean next-token entropy of the policy over the scored reasoning tokens of every probe trace (nats), and per
    trajectory (index i * G + k) the sum of those entropies and the number of tokens: ``(mean, sums, counts)``."""
    kw = {} if temperature == 1.0 else {"temperature": temperature}
    flat_len = lengths.flatten().tolist()  # trajectory i * G + k
    span = torch.zeros_like(batch.loss_mask, dtype=torch.bool)
    for row in range(batch.input_ids.shape[0]):
        pos = (batch.loss_mask[row] != 0).nonzero().flatten()  # the first (only) turn's response tokens
        span[row, pos[: int(flat_len[int(batch.row_traj[row])])]] = True  # its reasoning span
    out = policy.forward_logprobs(batch.input_ids.to(policy.device), batch.attention_mask.to(policy.device),
                                  with_entropy=True, score_mask=span.to(policy.device), **kw)
    ent = out.entropy.float().cpu()
    n_traj = len(flat_len)
    traj = batch.row_traj.long()
    sums = torch.zeros(n_traj, dtype=torch.float64).index_add_(0, traj, (ent * span).double().sum(dim=1))
    counts = torch.zeros(n_traj, dtype=torch.float64).index_add_(0, traj, span.double().sum(dim=1))
    return float(ent[span].sum()) / max(int(span.sum()), 1), sums, counts


def entropy_by_mode(sums: torch.Tensor, counts: torch.Tensor, is_template: Sequence[bool],
                    has_reasoning: Sequence[bool]) -> tuple[float, float]:
    """Token-weighted mean entropy of the template traces and of the other traces with a reasoning (state-derived):
    ``(sum of the entropies over the traces' tokens) / (their number of tokens)``, per mode; NaN for a mode with no
    token. `sums`, `counts`: per trace, from :func:`_token_entropy`."""
    tmpl = torch.as_tensor(list(is_template), dtype=torch.bool)
    state = torch.as_tensor(list(has_reasoning), dtype=torch.bool) & ~tmpl

    def mean(sel: torch.Tensor) -> float:
        n = float(counts[sel].sum())
        return float(sums[sel].sum()) / n if n > 0 else math.nan

    return mean(tmpl), mean(state)


def pmi_return_association(L: torch.Tensor, returns: torch.Tensor,
                           groups: torch.Tensor | None = None) -> tuple[float, float]:
    """Within-prompt association between a trace's return and its pointwise input dependence.

    Args:
        L: ``[P, G, P]`` cross-scores, ``L[i, k, j] = log p(z_ik | x_j)`` (:func:`ragen_core.math.mi.cross_score`).
        returns: ``[P, G]`` (or ``[P * G]``, group-major) returns of the traces.

    With the pointwise MI ``pmi_ik = L[i,k,i] - log((1/P) sum_j exp L[i,k,j])`` (the trace's share of MI-Seq)
    and both series centred within each prompt group (``c_ik = v_ik - mean_k v_ik``, as GRPO centres rewards),
    returns ``(cov, corr)``:

        cov  = mean_ik pmi_c[i,k] * r_c[i,k]
        corr = sum pmi_c r_c / sqrt(sum pmi_c^2 * sum r_c^2)      (0.0 when either sum of squares is 0)

    `groups` (``[P]`` bool, optional): only these prompt groups enter the sums and means (the PMI of their traces
    is still measured against all P prompts); ``(nan, nan)`` when it selects none. The trainer uses it to compare
    the groups the filter kept with those it dropped.

    Why it tells the task gradient's direction: for a policy that is a softmax over whole traces (one logit per
    trace and prompt), one natural-gradient step on the advantages ``A = r_c`` changes ``pi(z|x)`` by ``eta
    pi(z|x) A(z)``, so the expected PMI of the prompt's traces moves by ``eta * Cov_z(pmi, A)``: positive,
    the task gradient favours the input-dependent traces; negative, it favours the template.
    """
    if L.dim() != 3 or L.shape[0] != L.shape[2]:
        raise ValueError(f"L must be [P, G, P]; got {tuple(L.shape)}")
    P, G = int(L.shape[0]), int(L.shape[1])
    r = torch.as_tensor(returns, dtype=torch.float64).reshape(P, G)
    L = L.to(torch.float64)
    own = L[torch.arange(P), :, torch.arange(P)]  # [P, G]: L[i, k, i]
    pmi = own - (torch.logsumexp(L, dim=2) - math.log(P))
    if groups is not None:
        sel = torch.as_tensor(groups, dtype=torch.bool).reshape(P)
        if not bool(sel.any()):
            return math.nan, math.nan
        pmi, r = pmi[sel], r[sel]
    pmi_c = pmi - pmi.mean(dim=1, keepdim=True)
    r_c = r - r.mean(dim=1, keepdim=True)
    cov = float((pmi_c * r_c).mean())
    denom = float((pmi_c.square().sum() * r_c.square().sum()).sqrt())
    corr = float((pmi_c * r_c).sum()) / denom if denom > 0 else 0.0
    return cov, corr


_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def reasoning_text(response: str, filler_words: Sequence[str] = (), n_filler: int = 0) -> str | None:
    """The reasoning of a response: the text of its ``<think>`` block with whitespace runs made single spaces,
    and, with ``n_filler`` > 0, its first ``n_filler`` words dropped when all of them are in `filler_words` (the
    warm start's input-independent opening). None when the response has no ``<think>...</think>``."""
    m = _THINK.search(response)
    if m is None:
        return None
    words = m.group(1).split()
    if n_filler and len(words) >= n_filler and all(w in filler_words for w in words[:n_filler]):
        words = words[n_filler:]
    return " ".join(words)


def template_match_share(reasonings: Sequence[str | None], templates: Sequence[str]) -> float:
    """Share of `reasonings` (from :func:`reasoning_text`) equal to one of `templates` (whitespace-normalised);
    a missing reasoning (None) counts as no match. NaN for no reasonings."""
    if not reasonings:
        return math.nan
    return sum(template_matches(reasonings, templates)) / len(reasonings)


def template_matches(reasonings: Sequence[str | None], templates: Sequence[str]) -> list[bool]:
    """Per reasoning, whether it equals one of `templates` (whitespace-normalised); None never matches."""
    wanted = {" ".join(t.split()) for t in templates}
    return [r is not None and " ".join(r.split()) in wanted for r in reasonings]


def modal_share(reasonings: Sequence[str | None]) -> float:
    """Share of `reasonings` equal (whitespace-normalised) to the most common one (None values count in the total,
    never as the mode):
    1/N when every trace differs, 1 when all are one text, whatever that text is. NaN for no reasonings."""
    if not reasonings:
        return math.nan
    counts = Counter(" ".join(r.split()) for r in reasonings if r is not None)
    return (counts.most_common(1)[0][1] if counts else 0) / len(reasonings)


@torch.no_grad()
def probe_metrics(policy: Any, probe: ProbeSet, sample_seed: int, span: str = "reasoning",
                  batch_tokens: int = 8192, prefix: str = "probe/", templates: Sequence[str] | None = None,
                  filler_words: Sequence[str] = (), n_filler: int = 0) -> dict[str, float]:
    """Sample G traces per probe prompt, cross-score them and return the ``probe/`` metrics (see the module doc).

    Args:
        policy: the Policy being trained (put in eval mode; no gradient).
        probe: from :func:`build_probe`.
        sample_seed: seed of the probe's own sampler (the trainer derives it from run.seed and the step).
        span: ``"reasoning"`` (through ``</think>``) or ``"response"``, as ``mi.span``.
        templates: the warm start's template reasoning(s), for ``probe/template_share`` (None: not logged).
        filler_words, n_filler: the warm start's input-independent opening words, dropped before comparing.
    """
    if probe.envs:
        _refuse_images(probe.envs[0], type(getattr(probe.envs[0], "unwrapped", probe.envs[0])).__name__)
    gen = torch.Generator().manual_seed(int(sample_seed))
    policy.model.eval()
    batch = rollout(policy, probe.envs, probe.seeds, probe.group_size, probe.settings, generator=gen,
                    reset_options=probe.reset_options)
    prompts, traces = batch.mi_inputs(span=span)
    stand_in = int(pad_token_id(policy.tokenizer))
    empty = 0
    for row in traces:
        for k, z in enumerate(row):
            if not z:  # nothing to score: stand in one token (counted), as the in-batch diagnostics do
                row[k] = [stand_in]
                empty += 1
    L, lengths = policy_cross_score(policy, prompts, traces, batch_tokens)
    stats = mi_proxies(L, lengths, prompt_ids=[tuple(p) for p in prompts])
    out = flatten_proxies(stats, prefix=prefix)
    chance = stats["retrieval_chance"]
    out[prefix + "retrieval_margin"] = (stats["retrieval_acc"] - chance) / (1.0 - chance)
    out[prefix + "mi_seq_norm"] = stats["mi_seq_est"] / stats["mi_upper_bound"]
    out[prefix + "token_entropy"], ent_sums, ent_counts = _token_entropy(policy, batch, lengths,
                                                                         probe.settings.temperature)
    out[prefix + "empty_traces"] = float(empty)
    out[prefix + "success"] = float(batch.success.float().mean())
    out[prefix + "return"] = float(batch.returns.float().mean())
    cov, corr = pmi_return_association(L, batch.returns)
    out[prefix + "pmi_return_cov"] = cov
    out[prefix + "pmi_return_corr"] = corr
    out[prefix + "reasoning_tokens"] = float(lengths.double().mean())
    reasonings = [reasoning_text(t.turns[0].response_text, filler_words, n_filler) if t.turns else None
                  for t in batch.trajectories]
    out[prefix + "modal_share"] = modal_share(reasonings)
    if templates:
        out[prefix + "template_share"] = template_match_share(reasonings, templates)
        out[prefix + "token_entropy_template"], out[prefix + "token_entropy_state"] = entropy_by_mode(
            ent_sums, ent_counts, template_matches(reasonings, templates), [r is not None for r in reasonings])
    return out


@torch.no_grad()
def scripted_mode_entropies(policy: Any, cfg: Any, n_prompts: int = 32, seed: int = 0) -> dict[str, float]:
    """The policy's per-token entropy along each mode of the warm start's demonstrator, teacher-forced.

    For the first-turn prompts of `n_prompts` probe levels (seeds ``mi.probe_seed + i``), the demonstrator writes
    (1) its state-derived reasoning and (2) a template of its family (drawn uniformly, ``warm_start.template_levels``),
    each with its filler words and its answer; the policy scores both (:func:`_token_entropy` over the reasoning
    span). Returns ``{"state": H_state, "template": H_template, "templates": distinct template texts}``, nats per
    reasoning token: whether the input-agnostic mode is the policy's lowest-entropy mode (docs/collapse.md,
    section 3). Sampling plays no part, so traces that copy a template imperfectly do not blur the two modes.
    """
    from ragen_core.training.sft import demonstrator_template_parts, scripted_responder

    ws = cfg.warm_start
    parts = demonstrator_template_parts(cfg)
    if parts is None:
        raise ValueError("the warm start has no template (warm_start.reasoning_dependence = 1)")
    texts, actions = [t for t, _ in parts], [a for _, a in parts]
    settings = replace(RolloutSettings.from_config(cfg.rollout), max_turns=1)
    envs = make_envs(cfg.env.id, n_prompts, cfg.env.kwargs)
    seeds = [cfg.mi.probe_seed + i for i in range(n_prompts)]
    out: dict[str, float] = {"templates": float(len(set(texts)))}
    for mode, dependence in (("state", 1.0), ("template", 0.0)):
        responder = scripted_responder("oracle", np.random.default_rng(seed), ws.reasoning, 0.0, ws.noise_action,
                                       dependence, texts, ws.template_answer, ws.filler_words, actions)
        batch = rollout(policy, envs, seeds, 1, settings, responder=responder)
        _, traces = batch.mi_inputs(span=cfg.mi.span)
        lengths = torch.tensor([[len(z) for z in row] for row in traces])
        out[mode] = _token_entropy(policy, batch, lengths, settings.temperature)[0]
    return out
