"""T7: filtering groups by reward variance and the MSE of the kept batch's mean gradient.

E||gbar_hat_S - gbar_S||^2 = (1/n^2) sum_S sigma_i^2 (by enumeration, every subset S); "filtering reduces
MSE" is false (equal sigma, and at the paper's setting: RV 0.34 / 0.11, sigma = 0.3, G = 8, top-p rho = 0.9,
P = 8); the batch SNR strictly increases when dropping D with sum_D g = 0 (sanity).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np

from . import reference
from .inputs import MAX_OUTCOMES, require_array, require_int, require_real, require_rng
from .magnitudes import norm, scales
from .records import Check, bound, counterexample, identity, strict
from .testbed import SoftmaxTestbed, enumerate_outcomes, require_testbed

__all__ = [
    "T7_PAPER_SETTING",
    "check_t7_identity",
    "check_t7_subsets",
    "check_t7_counterexample",
    "check_t7_paper_setting",
    "check_t7_snr",
    "t7_paper_prompt",
    "top_p_by_score",
]


def top_p_by_score(scores: np.ndarray, rho: float) -> list[int]:
    """The paper's top-p rule (:func:`theory_checks.reference.top_p_by_score`, which documents it) on checked
    arguments: ``scores`` a non-empty ``[P]`` vector of finite non-negative numbers, ``rho`` in (0, 1]
    (``ValueError``/``TypeError`` otherwise: rho = 0 or an empty batch would keep one group or none, rho > 1
    every group, silently).  Returns the kept group indices in ranking order."""
    scores = require_array("scores", scores, 1, nonneg=True)
    rho = require_real("rho", rho, 0.0, 1.0, low_open=True)
    return reference.top_p_by_score(scores, rho)


def _group_errors(tb: SoftmaxTestbed, x: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """All outcomes of g_hat_x - g_x over (2Z)^G tuples: (errors [n, d], probabilities [n])."""
    pi, s, mu, sig = tb.probs()[x], tb.score()[x], tb.mu[x], np.sqrt(tb.noise_variance()[x])
    r = np.concatenate([mu - sig, mu + sig])
    sc = np.concatenate([s, s])
    pr = np.concatenate([pi / 2, pi / 2])
    idx, w = enumerate_outcomes(pr, G)
    ghat = np.mean((r[idx] - tb.baseline()[x])[:, :, None] * sc[idx], axis=1)
    return ghat - tb.task_gradient()[x], w


def check_t7_identity(tb: SoftmaxTestbed, S: Iterable[int], G: int,
                      errors: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> list[Check]:
    """T7 identity by enumerating the joint outcomes of the groups in S (independent of the noise):

        E||(1/n) sum_{i in S} (g_hat_i - g_i)||^2 = (1/n^2) sum_{i in S} sigma_i^2,  sigma_i^2 = MSE_G(i).

    ``errors`` caches :func:`_group_errors` per prompt (used when every subset S is enumerated).  S lists distinct
    prompts (integers in [0, X)), at least one; G is an integer >= 1; the (2Z)^(G |S|) joint outcomes are at most
    :data:`~theory_checks.inputs.MAX_OUTCOMES`.
    """
    tb, G = require_testbed("tb", tb), require_int("G", G, 1)
    S = _subset(S, tb.X)
    n = len(S)
    if (2 * tb.Z) ** (G * n) > MAX_OUTCOMES:
        raise ValueError(f"enumerating (2Z)^(G |S|) = {2 * tb.Z}^{G * n} joint outcomes is more than the "
                         f"{MAX_OUTCOMES} allowed (Z = {tb.Z}, G = {G}, |S| = {n}): use a smaller G or S")
    cache = {} if errors is None else errors
    for x in S:
        if x not in cache:
            cache[x] = _group_errors(tb, x, G)
    total = np.zeros((1, tb.d))
    weight = np.ones(1)
    for x in S:
        e, w = cache[x]
        total = (total[:, None, :] + e[None, :, :]).reshape(-1, tb.d)
        weight = (weight[:, None] * w[None, :]).ravel()
    lhs = float(np.sum(weight * np.sum((total / n) ** 2, axis=1)))
    sig2 = float(np.sum(tb.estimator_mse(G)[S]))
    rhs = sig2 / n**2
    ms, ps = scales(tb)
    return [identity("t7_identity", lhs, rhs,
                     atol=1e-12 * (ms * ps) ** 2, variants={"1/n instead of 1/n^2": (lhs, sig2 / n)},
                     note=f"S = {S} of {tb.X} prompts")]


def _subset(S: object, X: int) -> list[int]:
    """S as a list of distinct prompt indices in [0, X), not empty."""
    try:
        items = list(S)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"S must be an iterable of prompt indices, got {S!r} ({type(S).__name__})") from None
    if not items:
        raise ValueError("S must hold at least one prompt (the mean over an empty subset is undefined)")
    out = [require_int("each prompt of S", x, 0, X - 1) for x in items]
    if len(set(out)) != len(out):
        raise ValueError(f"S must list distinct prompts, got {out}")
    return out


def check_t7_subsets(tb: SoftmaxTestbed, G: int) -> list[Check]:
    """The T7 identity for every non-empty subset S of the prompts (proper subsets included)."""
    tb, G = require_testbed("tb", tb), require_int("G", G, 1)
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    out: list[Check] = []
    for n in range(1, tb.X + 1):
        for S in itertools.combinations(range(tb.X), n):
            out += check_t7_identity(tb, S, G, cache)
    return out


def check_t7_counterexample(G: int = 8, P: int = 8, n: int = 4) -> list[Check]:
    """"Filtering reduces the MSE" is false: P copies of one prompt (equal sigma_i), keep n < P groups.

    MSE_S = sigma^2 / n = (P / n) MSE_all > MSE_all.  Integers G >= 1, P >= 2 and 1 <= n < P (keeping every
    group is no filtering).
    """
    G, P = require_int("G", G, 1), require_int("P", P, 2)
    n = require_int("n", n, 1, P - 1)
    base = SoftmaxTestbed.two_action(0.3, 0.5)
    tb = SoftmaxTestbed(
        np.repeat(base.features, P, axis=0), base.theta, np.repeat(base.mu, P, axis=0), np.repeat(base.sigma, P)
    )
    sig2 = tb.estimator_mse(G)
    mse_all = float(np.sum(sig2) / P**2)
    mse_s = float(np.sum(sig2[:n]) / n**2)
    return [
        counterexample("t7_filtering_false", mse_s, mse_all,
                       variants={"1/n instead of 1/n^2": (float(np.sum(sig2[:n]) / n), float(np.sum(sig2) / P))}),
        identity("t7_equal_sigma_ratio", mse_s / mse_all, P / n),
    ]


#: The sharper T7 counterexample at the paper's setting (issue 12): two kinds of 2-action prompts with
#: population reward variance 0.34 (p = 1/2) and 0.11, noise sigma = 0.3, G = 8 rollouts, top-p rho = 0.9.
T7_PAPER_SETTING = {"rv_high": 0.34, "rv_low": 0.11, "sigma": 0.3, "G": 8, "rho": 0.9, "P": 8}


def t7_paper_prompt(rv: float, sigma: float) -> SoftmaxTestbed:
    """The 2-action prompt (mu = 1[a = 1], p <= 1/2) with population reward variance p(1-p) + sigma^2 = rv
    (sigma >= 0, and 0 < rv - sigma^2 <= 1/4: the signal variance p(1-p) of a 2-action policy)."""
    rv, sigma = require_real("rv", rv), require_real("sigma", sigma, 0.0)
    q = rv - sigma**2
    if not 0.0 < q <= 0.25:
        raise ValueError(f"need 0 < rv - sigma^2 <= 1/4, got {q} (rv = {rv}, sigma = {sigma})")
    p = 0.5 * (1.0 - math.sqrt(1.0 - 4.0 * q))
    return SoftmaxTestbed.two_action(p, sigma)


def _core_top_p_count(scores: np.ndarray, rho: float) -> int | None:
    """Number of groups ``ragen_core.math.filtering.select_groups`` keeps with top-p (None when it cannot be
    imported)."""
    try:
        import torch

        from ragen_core.math.filtering import select_groups
    except Exception:  # the RL core is optional for the theory checks
        return None
    return select_groups(torch.as_tensor(scores, dtype=torch.float64), strategy="top_p", value=rho).n_kept


def check_t7_paper_setting() -> list[Check]:
    """"Filtering reduces the MSE" fails at the paper's own setting (not only with tied RV).

    Per-group MSE sigma_i^2 = MSE_G of the true-baseline estimator, each computed three ways: the testbed's
    formula, enumeration of all 4^8 outcome tuples of the group, and the 2-action closed form
    sigma_i^2 = p(1-p)[(1-2p)^2 + sigma^2] / G.  Then, with the T7 identity MSE_S = sum_S sigma_i^2 / n^2:

    - the pair (RV 0.34, RV 0.11): keeping only the high-RV group raises the MSE from 0.001334 to 0.0028125;
    - a P = 8 batch (4 prompts of each kind): top-p with rho = 0.9 on the population RV keeps 7 groups and
      raises the MSE by 15% (asserted, by the plain loop and by ``ragen_core.math.filtering.select_groups``);
      keeping only the high-RV half doubles it; no proper subset lowers it.
    - meanwhile the batch SNR ||sum_S g_i|| / sqrt(sum_S sigma_i^2) rises (7.39 -> 7.73 with top-p, 9.43 for
      the high-RV half): the claim on the SNR holds, which is each counterexample's control mutant.
    """
    cfg = T7_PAPER_SETTING
    G, sigma = int(cfg["G"]), float(cfg["sigma"])
    prompts = [t7_paper_prompt(cfg["rv_high"], sigma), t7_paper_prompt(cfg["rv_low"], sigma)]
    formula = np.array([float(t.estimator_mse(G)[0]) for t in prompts])
    enum = np.array([float(np.sum(w * np.sum(e * e, axis=1))) for e, w in (_group_errors(t, 0, G) for t in prompts)])
    ps = np.array([float(t.probs()[0, 1]) for t in prompts])
    closed = ps * (1 - ps) * ((1 - 2 * ps) ** 2 + sigma**2) / G
    noiseless = np.array([float(SoftmaxTestbed.two_action(float(q)).estimator_mse(G)[0]) for q in ps])
    gs = np.array([float(norm(t.task_gradient())[0]) for t in prompts])  # g_i = p(1-p), all along +phi

    def snr(idx: list[int] | np.ndarray, kinds_: np.ndarray) -> float:
        """Batch SNR ||sum_S g_i|| / sqrt(sum_S sigma_i^2) (the g_i are parallel and positive here)."""
        return float(gs[kinds_[idx]].sum() / math.sqrt(formula[kinds_[idx]].sum()))

    snr_note = ("the batch SNR ||sum_S g_i|| / sqrt(sum_S sigma_i^2) rises (the claim on the SNR instead of "
                "the MSE holds)")
    rv = np.array([float(t.reward_variance()[0]) for t in prompts])
    out = [
        identity("t7_paper_rv", rv, np.array([cfg["rv_high"], cfg["rv_low"]])),
        identity("t7_paper_mse_enumeration", formula, enum, atol=1e-15,
                 variants={"drop the noise term": (noiseless, enum)}),
        identity("t7_paper_mse_closed_form", formula, closed,
                 variants={"drop sigma^2": (formula, ps * (1 - ps) * (1 - 2 * ps) ** 2 / G)}),
    ]
    mse_pair = float(formula.sum() / 4)
    mse_high = float(formula[0])
    pair = np.array([0, 1])
    snr_pair, snr_high1 = snr([0, 1], pair), snr([0], pair)
    out.append(counterexample("t7_paper_high_group_false", mse_high,
                              mse_pair,
                              note=f"MSE {mse_pair:.6f} (both) -> {mse_high:.6f} (high-RV group only), "
                                   f"G = {G}, sigma = {sigma}; batch SNR {snr_pair:.2f} -> {snr_high1:.2f}",
                              variants={snr_note: (snr_pair, snr_high1)}))
    P = int(cfg["P"])
    kinds = np.array([0] * (P // 2) + [1] * (P - P // 2))
    sig2, rvs = formula[kinds], rv[kinds]
    mse_all = float(sig2.sum() / P**2)
    rho = float(cfg["rho"])
    kept = top_p_by_score(rvs, rho)
    mse_kept = float(sig2[kept].sum() / len(kept) ** 2)
    every = list(range(P))
    snr_all, snr_kept = snr(every, kinds), snr(kept, kinds)
    out.append(counterexample("t7_paper_top_p_false", mse_kept, mse_all,
                              note=f"keeps {len(kept)} of {P} groups; MSE {mse_all:.6g} -> {mse_kept:.6g}; "
                                   f"batch SNR {snr_all:.2f} -> {snr_kept:.2f}",
                              variants={snr_note: (snr_all, snr_kept)}))
    # what the rule keeps, asserted: 7 groups (4 high, 3 low) and MSE x 1.15, by the plain loop above and by
    # the RL core's select_groups (an independent implementation); two plausible wrong rules as mutants
    n_core = _core_top_p_count(rvs, rho)
    order_desc = np.sort(rvs)[::-1]
    before = int(np.sum(np.cumsum(order_desc) < rho * rvs.sum()))  # the prefix strictly below the threshold
    min_p = int(np.sum(rvs >= rho * rvs.max()))
    ratio = round(mse_kept / mse_all, 2)

    def kept_ratio(n: int) -> float:
        idx = np.argsort(-rvs, kind="stable")[:n]
        return round(float(sig2[idx].sum() / n**2) / mse_all, 2)

    lhs = [float(len(kept)), ratio] + ([float(n_core)] if n_core is not None else [])
    rhs = [7.0, 1.15] + ([7.0] if n_core is not None else [])
    out.append(identity("t7_paper_top_p_kept", np.array(lhs),
                        np.array(rhs), rtol=0.0, atol=1e-12,
                        note=f"top_p_by_score keeps {len(kept)}, ragen_core select_groups keeps "
                             f"{'n/a' if n_core is None else n_core}; MSE ratio {mse_kept / mse_all:.4f}",
                        variants={"the prefix strictly below rho * total (one group fewer)": (
                                      np.array([float(before), kept_ratio(before)] + lhs[2:]), np.array(rhs)),
                                  "min-p rule (score >= rho max)": (
                                      np.array([float(min_p), kept_ratio(min_p)] + lhs[2:]), np.array(rhs))}))
    high = list(range(P // 2))
    snr_half = snr(high, kinds)
    out.append(counterexample("t7_paper_high_half_false",
                              float(sig2[high].sum() / len(high) ** 2), mse_all,
                              note=f"batch SNR {snr_all:.2f} -> {snr_half:.2f}",
                              variants={snr_note: (snr_all, snr_half)}))
    proper = [list(S) for n in range(1, P) for S in itertools.combinations(range(P), n)]
    mse_s = np.array([float(sig2[S].sum() / len(S) ** 2) for S in proper])
    out.append(bound("t7_paper_no_subset_lower",
                     np.full(mse_s.size, mse_all), mse_s,
                     note=f"{len(proper)} proper subsets; "
                          f"smallest MSE_S / MSE_all = {float(mse_s.min() / mse_all):.4f}"))
    return out


def check_t7_snr(rng: np.random.Generator, G: int) -> list[Check]:
    """T7, defensible form: batch SNR ||sum_S g_i|| / sqrt(sum_S sigma_i^2) strictly increases when dropping
    a set D with sum_D g_i = 0 and sum_D sigma_i^2 > 0.  D = pure-noise prompts (mu constant: g = 0)
    and mirrored pairs (mu' = -mu on the same features: g' = -g).  A sanity row: once sum_D g = 0 the
    inequality reduces to sqrt(a) < sqrt(a + b) with b > 0."""
    rng, G = require_rng("rng", rng), require_int("G", G, 1)
    # moderate temperatures: a near-deterministic dropped prompt would have sigma_i^2 ~ 1e-20 and a ratio 1 - 1e-20
    base = SoftmaxTestbed.random(rng, X=int(rng.integers(1, 4)), temperature=float(np.exp(rng.uniform(-1, 1))),
                                 sigma_scale=float(np.exp(rng.uniform(-2, 1))), mu_offset=0.0)
    Xb = base.X
    # D is built on the prompt with the largest sigma_i^2, so that sum_D sigma^2 is not negligible in float64
    j = int(np.argmax(base.estimator_mse(G)))
    fj = base.features[j : j + 1]
    feats = [base.features, fj, fj, fj]
    mus = [base.mu, np.full((1, base.Z), rng.normal()), base.mu[j : j + 1], -base.mu[j : j + 1]]
    sigs = [base.sigma, np.array([base.sigma.max() + 0.1]), base.sigma[j : j + 1], base.sigma[j : j + 1]]
    tb = SoftmaxTestbed(np.concatenate(feats), base.theta, np.concatenate(mus), np.concatenate(sigs))
    g = tb.task_gradient()
    s2 = tb.estimator_mse(G)
    keep = np.arange(Xb)
    snr_all = float(norm(g.sum(axis=0)) / np.sqrt(s2.sum()))
    snr_keep = float(norm(g[keep].sum(axis=0)) / np.sqrt(s2[keep].sum()))
    out = [identity("t7_dropped_gradient_zero", float(norm(g[Xb:].sum(axis=0))), 0.0,
                    atol=1e-12 * (1 + norm(g).max()))]
    if snr_keep > 0:
        out.append(strict("t7_batch_snr_rises", snr_all, snr_keep))
    return out
