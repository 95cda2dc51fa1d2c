"""Collapse metrics: token entropy, RV heterogeneity and the four regimes (docs/science.md sections 1 and 4).

Entropy alone cannot see template collapse: ``H(Z) = I(X; Z) + H(Z | X)`` and entropy dashboards show only
``H(Z|X)``. :func:`classify_regime` places a batch in the 2x2 table of docs/science.md section 1 from an estimate of
``H(Z|X)`` and an MI proxy (from :func:`ragen_core.math.mi.mi_proxies`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ragen_core.math._args import as_integer, as_number, as_tensor
from ragen_core.math.advantages import masked_mean
from ragen_core.math.filtering import reward_variance, rv_statistics

__all__ = [
    "REGIMES",
    "DEFAULT_ENTROPY_THRESHOLD",
    "DEFAULT_MI_THRESHOLD",
    "token_entropy",
    "masked_token_entropy",
    "rv_heterogeneity",
    "classify_regime",
    "regime_from_proxies",
    "regime_resolution",
    "NOISE_ENTROPY_SHARE",
    "noise_note",
]

#: The four regimes of docs/science.md section 1, in the order (high H, high I), (high H, low I), (low H, high I),
#: (low H, low I).
REGIMES = ("diverse_reasoning", "template_collapse", "compressed_reasoning", "low_entropy_collapse")
#: H(Z|X) threshold in nats per token. 0.1 nats/token is roughly a top-token probability above 0.98 at every
#: step, i.e. near-greedy decoding: below it the reasoning has "low" within-input diversity.
DEFAULT_ENTROPY_THRESHOLD = 0.1
#: MI threshold as a fraction of the proxy's ceiling log P (MI-Seq-Est / log P). Below 10% of the ceiling the
#: traces barely identify their prompt (Retrieval-Acc near chance): "low" cross-input dependence.
DEFAULT_MI_THRESHOLD = 0.1


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at every position (docs/science.md section 1, the H(Z|X) dashboards).

        H_t = -sum_v softmax(l_t)_v * log softmax(l_t)_v

    Computed from ``log_softmax`` in fp32 (fp64 inputs stay fp64), so fp16/bf16 logits of any magnitude give a
    finite result; ``-inf`` logits (banned tokens) contribute 0.

    Args:
        logits: ``[..., V]`` (e.g. ``[B, T, V]``).

    Returns:
        ``[...]`` entropies in nats, fp32 (or fp64), differentiable.
    """
    logits = as_tensor("logits", logits, "[..., V]")
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a vocabulary dimension [..., V] with V >= 1; got {tuple(logits.shape)}")
    x = logits if logits.dtype == torch.float64 else logits.float()
    logp = torch.log_softmax(x, dim=-1)
    p = logp.exp()
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(dim=-1)


def masked_token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean token entropy over valid positions: ``sum_t H_t m_t / sum_t m_t``.

    Args:
        logits: ``[B, T, V]``.
        mask: ``[B, T]`` (non-zero = a generated token).

    Returns:
        scalar fp32 tensor (NaN when the mask is empty).
    """
    logits = as_tensor("logits", logits, "[B, T, V]")
    mask = as_tensor("mask", mask, "[B, T]")
    if logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(mask.shape):
        raise ValueError(f"logits must be [B, T, V] matching mask [B, T]; got {tuple(logits.shape)} and "
                         f"{tuple(mask.shape)}")
    return masked_mean(token_entropy(logits), mask)  # padding's logits never reach it (NaN included)


def rv_heterogeneity(rewards_or_variances: torch.Tensor, ddof: int = 1) -> float:
    """RV heterogeneity = Std(RV) / Mean(RV) over one rollout batch (docs/science.md section 4, the pre-check).

    High values (Sokoban 1.16-1.29) mean bimodal variance, where filtering helps; low values (FrozenLake GRPO
    0.33) mean uniform variance, where it only throws data away. Std is the population std over groups;
    NaN groups are ignored; the result is NaN when Mean(RV) = 0.

    Args:
        rewards_or_variances: rewards ``[P, G]`` (variance taken with ``ddof``) or variances ``[P]``.
        ddof: for rewards, 1 (paper) or 0.

    Returns:
        float.
    """
    # a None in a list raised torch's "Could not infer dtype of NoneType"
    t = as_tensor("rewards_or_variances", rewards_or_variances, "[P, G] or [P]", " (NaN for a missing value)")
    if t.dim() == 2:
        t = reward_variance(t, ddof=ddof)
    elif t.dim() != 1:
        raise ValueError(f"rewards_or_variances must be rewards [P, G] or variances [P]; got {tuple(t.shape)}")
    return rv_statistics(t)["rv_heterogeneity"]


def _finite(name: str, value: float) -> float:
    """``value`` as a finite float; a bool or a string raises (``classify_regime("0.5", ...)`` compared a string)."""
    return as_number(name, value)


def classify_regime(
    cond_entropy: float,
    mi: float,
    entropy_threshold: float = DEFAULT_ENTROPY_THRESHOLD,
    mi_threshold: float = DEFAULT_MI_THRESHOLD,
) -> str:
    """Place a batch in one of the four regimes of docs/science.md section 1.

    | regime                 | H(Z|X) | I(X;Z) |
    |------------------------|--------|--------|
    | diverse_reasoning      | high   | high   |
    | template_collapse      | high   | low    |
    | compressed_reasoning   | low    | high   |
    | low_entropy_collapse   | low    | low    |

    "High" means ``>=`` the threshold. Default thresholds (documented choices, not from the paper):

    - ``cond_entropy``: H_hat(Z|X) in nats per token (``mi_proxies(...)["cond_entropy_est"]`` or the mean token
      entropy); ``entropy_threshold = 0.1`` nats/token.
    - ``mi``: the MI proxy as a fraction of its ceiling, ``mi_seq_est / log P`` (in [<=0, 1]);
      ``mi_threshold = 0.1``. Pass any other scale together with a matching threshold.

    Returns:
        one of ``REGIMES``.
    """
    h = _finite("cond_entropy", cond_entropy)
    i = _finite("mi", mi)
    et = _finite("entropy_threshold", entropy_threshold)
    mt = _finite("mi_threshold", mi_threshold)
    if et < 0:
        raise ValueError(f"entropy_threshold must be >= 0 (nats per token); got {entropy_threshold!r}")
    high_h = h >= et
    high_i = i >= mt
    if high_h:
        return REGIMES[0] if high_i else REGIMES[1]
    return REGIMES[2] if high_i else REGIMES[3]


#: H(Z|X) at or above this share of log V (a uniform next-token distribution over the vocabulary) reads as noise,
#: not reasoning: an untrained model or an entropy bonus far too strong. Trained language models' reasoning sits
#: far below it (about 0.5-2 nats/token against log V = 11.9 for a 150k vocabulary).
NOISE_ENTROPY_SHARE = 0.5


def noise_note(cond_entropy: float, vocab_size: int, share: float = NOISE_ENTROPY_SHARE) -> str | None:
    """A note for the 2x2's high-entropy row when ``cond_entropy`` (nats/token) is at least `share` of
    ``log(vocab_size)``: the text is near noise, which :func:`classify_regime` places by its entropy and MI alone
    (an untrained model lands in "template_collapse" although it repeats no template). None below the share.

    Raises:
        ValueError: `vocab_size` not an integer >= 2, `share` not a finite number > 0, or a non-finite entropy.
    """
    h = _finite("cond_entropy", cond_entropy)
    vocab_size = as_integer("vocab_size", vocab_size, 2)  # 2.5 or "100" raise instead of being truncated or parsed
    share = as_number("share", share, 0.0, low_open=True)
    ceiling = math.log(vocab_size)
    if h < share * ceiling:
        return None
    return (f"H(Z|X) = {h:.2f} nats/token is {h / ceiling:.0%} of a uniform next-token distribution (log V = "
            f"{ceiling:.2f}): the text is near noise (an untrained model, or an entropy bonus far too strong); the "
            "regime table places it by entropy and MI alone, so read its label as noise, not as a repeated template")


def regime_from_proxies(
    stats: Mapping[str, float],
    entropy_threshold: float = DEFAULT_ENTROPY_THRESHOLD,
    mi_threshold: float = DEFAULT_MI_THRESHOLD,
) -> str:
    """:func:`classify_regime` on the output of :func:`ragen_core.math.mi.mi_proxies`.

    Uses ``cond_entropy_est`` (nats/token) and ``mi_seq_est / mi_upper_bound``.
    """
    for key in ("cond_entropy_est", "mi_seq_est", "mi_upper_bound"):
        if key not in stats:
            raise ValueError(f"stats must contain {key!r} (the output of mi_proxies); got keys {sorted(stats)}")
    ub = float(stats["mi_upper_bound"])
    if not ub > 0:
        raise ValueError(f"stats['mi_upper_bound'] must be > 0 (needs P >= 2 prompts); got {ub!r}")
    return classify_regime(stats["cond_entropy_est"], float(stats["mi_seq_est"]) / ub,
                           entropy_threshold=entropy_threshold, mi_threshold=mi_threshold)


def regime_resolution(null: Mapping[str, Any], mi_upper_bound: float, n_prompts: int, group_size: int,
                      mi_threshold: float = DEFAULT_MI_THRESHOLD) -> tuple[bool, str | None]:
    """Whether a batch can tell the regime's MI side from chance, from the batch's own null distribution of
    MI-Seq-Est (:func:`ragen_core.math.mi.mi_seq_null`). Resolved when both hold:

    - the relabellings can reject chance at all: with every permutation used, the smallest p-value is 1 / P!, so
      fewer than 4 prompts (2! = 2, 3! = 6 relabellings) can never reach p <= 1 - level;
    - a policy that ignores its input would read below the MI threshold: ``null_quantile / log P < mi_threshold``.

    Otherwise a "high I(X;Z)" reading could be chance (a 2-prompt batch of an untrained model read 0.12 of log P,
    "diverse reasoning"), and the note says so and what to do. A resolved "low" reading says the estimate is below
    the threshold; how precisely is what the null's spread shows.

    Returns:
        ``(resolved, note)``; the note is None when resolved.
    """
    ub = _finite("mi_upper_bound", mi_upper_bound)
    if not ub > 0:
        raise ValueError(f"mi_upper_bound must be > 0 (log P with P >= 2); got {mi_upper_bound!r}")
    q = float(null["null_quantile"])
    if math.isnan(q) or q == math.inf:
        raise ValueError(f"null_quantile must be a number or -inf; got {q!r}")
    level = float(null["level"])
    perms = int(null["permutations"])
    if null.get("exact") and 1.0 / perms > 1.0 - level + 1e-12:
        return False, (f"the regime's MI side is not resolved by {n_prompts} prompts x {group_size} traces: "
                       f"{n_prompts} prompts allow only {perms} relabellings, so no MI reading can be told from "
                       f"chance (the smallest permutation p-value is 1/{perms}). Score at least 4 prompts (and "
                       "more for a precise reading) before reading the regime")
    if q / ub < mi_threshold:
        return True, None
    return False, (f"the regime's MI side is not resolved by {n_prompts} prompts x {group_size} traces: with the "
                   f"prompts relabelled (no input dependence), this batch reads MI-Seq-Est up to {q:.3f} nats "
                   f"({float(null['level']):.0%} of {int(null['permutations'])} relabellings), {q / ub:.2f} of "
                   f"log P, not below the regime's threshold {mi_threshold:g}; the observed MI-Seq-Est has "
                   f"permutation p = {float(null['p_value']):.3g}. Score more prompts before reading the regime")
