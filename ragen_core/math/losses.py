"""Policy and value losses (docs/science.md section 3: task gradient vs input-agnostic regularisers).

- :func:`ppo_policy_loss`: PPO clipped surrogate with asymmetric clip (clip-higher, eps_low 0.2 /
  eps_high 0.28, the official defaults of docs/science.md section 6) and dual clip (c = 3).
- :func:`kl_penalty`: KL estimators k1, k2, k3 (k3 = "low-var-kl", clamped as in verl).
- :func:`value_loss`: clipped value loss.

The entropy bonus is ``aggregate_loss(H, mask, "token-mean")`` of the policy's per-token entropies H
(:func:`ragen_core.math.metrics.token_entropy`, fp32); the trainer subtracts ``algo.entropy_coef`` times it.
The KL and entropy terms are the input-agnostic regularisers of docs/science.md section 3: when reward variance
vanishes they dominate the update (T5), which is what filtering guards against.

As in :mod:`ragen_core.math.advantages`, tensor arguments may be ndarrays or nested lists of numbers, and 16-bit
floats are computed in float32 (float32 and float64 inputs are computed in their own dtype, bit for bit as before).
"""

from __future__ import annotations

import torch

from ragen_core.math._args import as_number, as_tensor, number_or_none
from ragen_core.math.advantages import (
    LOSS_AGG_MODES,
    _accumulation_dtype,
    aggregate_loss,
    check_same_shape,
    masked_mean,
    zero_outside,
)

__all__ = [
    "KL_ESTIMATORS",
    "ppo_policy_loss",
    "kl_penalty",
    "value_loss",
]

KL_ESTIMATORS = ("k1", "k2", "k3", "low-var-kl", "low_var_kl")
# Bound on log-ratios before exp (verl clamps to +-20) so a stale batch cannot overflow to inf.
_LOG_RATIO_CLAMP = 20.0
# verl clamps the k3 estimate to [-10, 10] ("low_var_kl").
_K3_CLAMP = 10.0


def _widened(**tensors: object) -> list[torch.Tensor]:
    """The named tensors (or arrays, or nested lists: :func:`as_tensor`), the floating ones in one dtype: their
    promoted dtype, float32 for 16-bit floats (exp(20) and a squared difference of 300 overflow float16). Float32
    and float64 inputs are returned as they are, so their results are unchanged. Integer ones keep their dtype.
    A bool tensor raises ValueError naming it: a log-prob, value or advantage is a number, and a mask passed in its
    place (``True - True``) was torch's RuntimeError about subtracting bools."""
    out = [as_tensor(name, t, "[B, T]") for name, t in tensors.items()]
    for name, t in zip(tensors, out):
        if t.dtype == torch.bool:
            raise ValueError(f"{name} must be real numbers, not bools (a mask?); got dtype torch.bool")
    floats = [t.dtype for t in out if t.is_floating_point()]
    if not floats:
        return out
    dtype = floats[0]
    for other in floats[1:]:
        dtype = torch.promote_types(dtype, other)
    dtype = _accumulation_dtype(dtype)
    return [t.to(dtype) if t.is_floating_point() and t.dtype in (torch.float16, torch.bfloat16) else t for t in out]


def ppo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.28,
    dual_clip_c: float | None = 3.0,
    loss_agg_mode: str = "token-mean",
    norm_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped policy loss with clip-higher and dual clip (Schulman et al. 2017; DAPO; Ye et al. 2020).

    Per token, with r = exp(log_probs - old_log_probs) (log-ratio clamped to +-20):

        l1 = -A * r
        l2 = -A * clip(r, 1 - eps_low, 1 + eps_high)
        l  = max(l1, l2)                                   (the clipped surrogate, negated)
        l  = min(l, -c * A)   where A < 0                  (dual clip, c > 1; off with dual_clip_c=None)

    then aggregated over the mask with :func:`ragen_core.math.advantages.aggregate_loss`.

    Args:
        log_probs: ``[B, T]`` log pi_theta(token), differentiable.
        old_log_probs: ``[B, T]`` log pi_old(token) from the rollout policy.
        advantages: ``[B, T]`` token advantages.
        mask: ``[B, T]`` response mask.
        clip_eps_low: lower clip epsilon in [0, 1).
        clip_eps_high: upper clip epsilon, finite and >= 0.
        dual_clip_c: dual-clip constant, finite and > 1 (None disables).
        A bool, a string or a non-finite value for these raises ValueError naming it.
        loss_agg_mode: one of ``LOSS_AGG_MODES``.
        norm_constant: Dr.GRPO's constant C for ``seq-mean-token-sum-norm`` (see ``aggregate_loss``).

    Returns:
        ``(loss, stats)`` with scalar ``loss`` and floats ``clipfrac`` (share of valid tokens where the clip
        is active), ``dual_clipfrac``, ``approx_kl`` (mean of old - new log-prob, k1).
    """
    log_probs, old_log_probs, advantages = _widened(log_probs=log_probs, old_log_probs=old_log_probs,
                                                    advantages=advantages)
    mask = as_tensor("mask", mask, "[B, T]")
    check_same_shape(log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, mask=mask)
    # Bools, strings and infinities raise (clip_eps_high=inf silently turned clipping off; None is the way to turn
    # the dual clip off). The checked values are Python floats, equal to the numbers given.
    clip_eps_low = as_number("clip_eps_low", clip_eps_low, 0.0, 1.0, high_open=True)
    clip_eps_high = as_number("clip_eps_high", clip_eps_high, 0.0)
    dual_clip_c = number_or_none("dual_clip_c", dual_clip_c, 1.0, low_open=True, what="disable")
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {LOSS_AGG_MODES}; got {loss_agg_mode!r}")
    # Padding may hold anything (a -inf log-prob, a NaN advantage): read only valid tokens, so the masked ones
    # give neither a NaN loss nor, through the exp below, a NaN gradient.
    m = mask != 0
    log_probs, old_log_probs, advantages = (zero_outside(t, m) for t in (log_probs, old_log_probs, advantages))
    log_ratio = torch.clamp(log_probs - old_log_probs, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    clipped = torch.maximum(pg1, pg2)
    loss_mat = clipped
    dual_active = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip_c is not None:
        pg3 = -advantages * dual_clip_c
        neg = advantages < 0
        loss_mat = torch.where(neg, torch.minimum(clipped, pg3), clipped)
        dual_active = neg & (pg3 < clipped)
    loss = aggregate_loss(loss_mat, mask, loss_agg_mode, norm_constant=norm_constant)
    with torch.no_grad():
        n = max(int(m.sum()), 1)
        stats = {
            "clipfrac": float(((pg2 > pg1) & m).sum()) / n,
            "dual_clipfrac": float((dual_active & m).sum()) / n,
            "approx_kl": float(masked_mean(-log_ratio, m)) if int(m.sum()) else 0.0,
        }
    return loss, stats


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman's k1/k2/k3).

    With d = log_probs - ref_log_probs (log pi_theta - log pi_ref) at the sampled token:

        k1 = d                              (unbiased, high variance)
        k2 = d^2 / 2                        (biased, low variance)
        k3 = exp(-d) - 1 + d                (unbiased, >= 0; "low-var-kl": -d clamped to +-20 before exp
                                             and the result clamped to [-10, 10], as in verl)

    Args:
        log_probs, ref_log_probs: ``[B, T]`` (or any equal shapes).
        kind: ``"k1"``, ``"k2"``, ``"k3"`` (aliases ``"low-var-kl"``, ``"low_var_kl"``).

    Returns:
        per-token KL estimate, same shape as the inputs; aggregate with ``aggregate_loss``. Float32 for 16-bit
        inputs (computed in float32), else the inputs' promoted dtype.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"kind must be one of {', '.join(repr(k) for k in KL_ESTIMATORS)}; got {kind!r}")
    log_probs, ref_log_probs = _widened(log_probs=log_probs, ref_log_probs=ref_log_probs)
    check_same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs)
    d = log_probs - ref_log_probs
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d * d
    neg = torch.clamp(-d, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(neg) - 1.0 - neg, -_K3_CLAMP, _K3_CLAMP)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None = 0.5,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (PPO; verl's ``cliprange_value``, default 0.5).

        v_clip = old_values + clip(values - old_values, -c, c)
        l      = 1/2 * max((values - returns)^2, (v_clip - returns)^2)       (c = None: no clipping)

    Args:
        values: ``[B, T]`` current value predictions, differentiable.
        old_values: ``[B, T]`` values at rollout time.
        returns: ``[B, T]`` targets (e.g. from :func:`ragen_core.math.advantages.gae`).
        mask: ``[B, T]`` response mask.
        clip_range: finite c > 0, or None (a bool, a string or inf raises ValueError).
        loss_agg_mode: one of ``LOSS_AGG_MODES``.

    Returns:
        ``(loss, stats)`` with ``vf_clipfrac`` (share of valid tokens where the clipped term is larger).
    """
    values, old_values, returns = _widened(values=values, old_values=old_values, returns=returns)
    mask = as_tensor("mask", mask, "[B, T]")
    check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    clip_range = number_or_none("clip_range", clip_range, 0.0, low_open=True, what="disable")
    valid = mask != 0  # padding may hold anything: only valid tokens are read (no NaN loss or gradient from it)
    values, old_values, returns = (zero_outside(t, valid) for t in (values, old_values, returns))
    unclipped = (values - returns) ** 2
    if clip_range is None:
        loss_mat = 0.5 * unclipped
        frac = 0.0
    else:
        v_clip = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        clipped = (v_clip - returns) ** 2
        loss_mat = 0.5 * torch.maximum(unclipped, clipped)
        frac = float(((clipped > unclipped) & valid).sum()) / max(int(valid.sum()), 1)
    return aggregate_loss(loss_mat, mask, loss_agg_mode), {"vf_clipfrac": frac}
