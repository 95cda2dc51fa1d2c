"""T1-T3: the gradient-norm bound, the SNR bounds and the GRPO noise floor (docs/theory_report/theory.md).

- T1  paper  ||g|| <= sqrt(RV E||s||^2);  sharper  ||g|| <= sqrt(RV_mu lambda_max(F));
      any baseline c: ||E[(R - c) s]|| <= sqrt(RV E||s||^2) (a sanity row: the same numbers as T1).
- T2  paper  SNR <= sqrt(G RV) / sigma;  sharper  SNR <= sqrt(G RV_mu) / sigma (homoscedastic);
      heteroscedastic  SNR <= sqrt(G RV_mu) / sigma_eff,  sigma_eff^2 = E[sigma^2 ||s||^2] / E||s||^2;
      with the plain average sigma^2 = E_pi sigma^2 the sharper bound FAILS (counterexample), and the paper's
      own bound holds for 2 actions (checked here, proved in S9) but FAILS with 3 outcomes (noise where the
      score is 0: SNR^2/G = 2 > RV/sigma^2 = 5/3; proved in S10).
- T3  MSE_GRPO >= (1/K) (sigma^2 / RV) E||s||^2 (sigma_eff under heteroscedastic noise; with the plain
      average it fails on the same instance, a counterexample we add), and the floor <= E||s||^2 / K.
"""

from __future__ import annotations

import math

import numpy as np

from .inputs import require_bool, require_int, require_real, require_rng
from .magnitudes import norm, scales
from .records import Check, bound, counterexample, identity
from .testbed import SoftmaxTestbed, require_testbed

__all__ = [
    "check_t1",
    "check_t2",
    "check_t2_two_action",
    "check_t2_heteroscedastic_counterexample",
    "check_t2_paper_two_action_heteroscedastic",
    "check_t2_paper_heteroscedastic_counterexample",
    "t2_paper_plain_ratio",
    "check_t3",
    "check_t3_two_action",
    "check_t3_heteroscedastic_counterexample",
]


def check_t1(tb: SoftmaxTestbed, rng: np.random.Generator | None = None, tight: bool = False) -> list[Check]:
    """T1: ||g(x)|| <= sqrt(RV(x) E||s||^2) (paper) and ||g(x)|| <= sqrt(RV_mu(x) lambda_max(F(x))) (sharper).

    With ``rng`` also the any-baseline form ||E[(R - c) s]|| <= sqrt(RV E||s||^2) for a random c far
    from b.  ``tight`` marks an equality instance (rank-one score, A proportional to it, sigma = 0).
    """
    tb, rng, tight = require_testbed("tb", tb), require_rng("rng", rng, allow_none=True), require_bool("tight", tight)
    ms, ps = scales(tb)
    atol = 1e-12 * ms * ps
    gn = norm(tb.task_gradient())
    rv, rvmu, es2 = tb.reward_variance(), tb.signal_variance(), tb.score_sq_norm()
    eig = np.linalg.eigvalsh(tb.fisher())
    lam = eig[:, -1]
    out = [
        bound("t1_paper", gn, np.sqrt(rv * es2), atol=atol, tight=tight,
              variants={"drop sqrt(E||s||^2)": (gn, np.sqrt(rv)),
                        "RV -> sigma^2": (gn, np.sqrt(tb.mean_noise_variance() * es2))}),
        bound("t1_sharper", gn, np.sqrt(rvmu * np.maximum(lam, 0)), atol=atol,
              tight=tight, variants={"lambda_max -> lambda_min": (gn, np.sqrt(rvmu * np.maximum(eig[:, 0], 0)))}),
    ]
    if rng is not None and not tight:
        c = tb.baseline() + rng.normal(size=tb.X) * ms * 10
        gc = norm(tb.task_gradient(c))
        out.append(bound("t1_any_baseline", gc, np.sqrt(rv * es2), atol=atol * 11))
    return out


# ---------------------------------------------------------------------------------------------- T2
def _snr(tb: SoftmaxTestbed, G: int, baseline: np.ndarray | None = None) -> np.ndarray:
    gn = norm(tb.task_gradient())
    mse = tb.estimator_mse(G, baseline=baseline)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mse > 0, gn / np.sqrt(np.where(mse > 0, mse, 1.0)), np.where(gn > 0, np.inf, 0.0))


def check_t2(tb: SoftmaxTestbed, G: int, rng: np.random.Generator | None = None, tight: bool = False) -> list[Check]:
    """T2: SNR = ||g|| / sqrt(MSE_G) against sqrt(G RV)/sigma (paper) and sqrt(G RV_mu)/sigma (sharper).

    Homoscedastic testbeds with sigma > 0 (else the bounds are infinite).  Heteroscedastic ones are
    checked with sigma_eff.  With ``rng`` also with a baseline c != b (MSE grows, bound unchanged).
    Prompts with sigma = 0 (sigma_eff = 0) are left out: their bound is infinite; a testbed without noise gives
    no record (an empty list).  ``G`` is the group size, an integer >= 1.
    """
    tb, rng, tight = require_testbed("tb", tb), require_rng("rng", rng, allow_none=True), require_bool("tight", tight)
    G = require_int("G", G, 1)
    out: list[Check] = []
    sig2 = tb.noise_variance()
    pos = np.min(sig2, axis=1) > 0 if not tb.heteroscedastic else tb.effective_noise_variance() > 0
    if not pos.any():
        return out
    snr = _snr(tb, G)[pos]
    rv, rvmu = tb.reward_variance()[pos], tb.signal_variance()[pos]
    if tb.heteroscedastic:
        seff = tb.effective_noise_variance()[pos]
        sbar = tb.mean_noise_variance()[pos]
        out.append(bound("t2_heteroscedastic", snr, np.sqrt(G * rvmu / seff),
                         variants={"sigma_eff -> plain average sigma": (snr, np.sqrt(G * rvmu / sbar))}))
        return out
    s2 = sig2[pos, 0]
    if not tight:
        out.append(bound("t2_paper", snr, np.sqrt(G * rv / s2),
                         variants={"drop sqrt(G)": (snr, np.sqrt(rv / s2))}))
    out.append(bound("t2_sharper", snr, np.sqrt(G * rvmu / s2), tight=tight,
                     variants={"drop sqrt(G)": (snr, np.sqrt(rvmu / s2))}))
    if rng is not None and not tight:
        ms, _ = scales(tb)
        c = tb.baseline() + rng.normal(size=tb.X) * ms
        out.append(bound("t2_other_baseline", _snr(tb, G, c)[pos],
                         np.sqrt(G * rvmu / s2), variants={"drop sqrt(G)": (_snr(tb, G, c)[pos], np.sqrt(rvmu / s2))}))
    return out


def check_t2_two_action(p: float, sigma: float, G: int) -> list[Check]:
    """2-action closed form SNR^2 = G p(1-p) / ((1-2p)^2 + sigma^2) against the testbed's enumeration
    (p in (0, 1), sigma >= 0, G an integer >= 1)."""
    G = require_int("G", G, 1)
    tb = SoftmaxTestbed.two_action(p, sigma)
    p, sigma = require_real("p", p), require_real("sigma", sigma)  # checked by two_action; as floats
    denominator = (1 - 2 * p) ** 2 + sigma**2
    if denominator == 0:
        raise ValueError(f"p = {p!r} with sigma = {sigma!r} (sigma^2 = {sigma**2!r} in float64): at p = 1/2 without "
                         "noise the estimator has no error and the SNR is infinite, so there is no closed form to "
                         "compare; give sigma > 0 (sigma^2 above ~1e-308) or p != 1/2")
    snr2 = float(_snr(tb, G)[0] ** 2)
    closed = G * p * (1 - p) / denominator
    out = [identity("t2_two_action_closed_form", snr2, closed,
                    variants={"drop sigma^2 from the denominator": (snr2,
                                                                    G * p * (1 - p) / max((1 - 2 * p) ** 2, 1e-300))})]
    g = float(norm(tb.task_gradient())[0])
    es2_uncentred = float(tb.probs()[0] @ np.sum(tb.features[0] ** 2, axis=1))  # E phi^2 = p: score not centred
    out.append(identity("t1_two_action_values",
                        np.array([g, tb.score_sq_norm()[0], tb.signal_variance()[0]]), p * (1 - p),
                        variants={"score without the mean subtraction (E phi^2 = p)": (
                            np.array([g, es2_uncentred, tb.signal_variance()[0]]), p * (1 - p))}))
    return out


def check_t2_heteroscedastic_counterexample(G: int = 8) -> list[Check]:
    """T2: the sharper bound with the plain average sigma^2 fails (p = 0.4, noise on action 0).

    Claimed: SNR^2 / G <= RV_mu / E_pi sigma^2 = 0.4.  Exact: SNR^2 / G = 6/11 = 0.5454...
    With sigma_eff the bound holds (checked as well).
    """
    G = require_int("G", G, 1)
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    snr2g = float(_snr(tb, G)[0] ** 2 / G)
    rvmu = float(tb.signal_variance()[0])
    seff = float(tb.effective_noise_variance()[0])
    homo = SoftmaxTestbed(tb.features, tb.theta, tb.mu, np.sqrt(tb.mean_noise_variance()))
    snr2g_homo = float(_snr(homo, G)[0] ** 2 / G)
    out = [
        counterexample("t2_sharper_plain_sigma_false", snr2g,
                       rvmu / float(tb.mean_noise_variance()[0]),
                       variants={"corrected claim (sigma_eff)": (snr2g, rvmu / seff)}),
        identity("t2_counterexample_value", snr2g, 6.0 / 11.0,
                 variants={"noise spread evenly (homoscedastic at the plain average)": (snr2g_homo, 6.0 / 11.0)}),
        bound("t2_heteroscedastic", snr2g, rvmu / seff,
              variants={"sigma_eff -> plain average sigma": (snr2g, rvmu / float(tb.mean_noise_variance()[0]))}),
    ]
    return out


def check_t2_paper_two_action_heteroscedastic(p: float, var0: float, var1: float, G: int) -> list[Check]:
    """T2 as stated, SNR <= sqrt(G RV)/sigma with the plain average sigma^2 = E_pi sigma^2, on a
    2-action softmax with noise variance var0 on action 0 and var1 on action 1.  It holds for 2 actions
    (sympy proof S9), unlike the sharper form (6/11 > 2/5).  var0, var1 >= 0, not both 0 (without noise the
    bound is infinite)."""
    var0, var1 = require_real("var0", var0, 0.0), require_real("var1", var1, 0.0)
    if var0 == 0.0 and var1 == 0.0:
        raise ValueError("var0 and var1 must not both be 0: without noise T2's bound sqrt(G RV) / sigma is infinite")
    G = require_int("G", G, 1)
    base = SoftmaxTestbed.two_action(p)
    tb = SoftmaxTestbed(base.features, base.theta, base.mu, np.sqrt(np.array([[var0, var1]])))
    snr = float(_snr(tb, G)[0])
    rv, sbar = float(tb.reward_variance()[0]), float(tb.mean_noise_variance()[0])
    return [bound("t2_paper_plain_sigma_two_action", snr,
                  math.sqrt(G * rv / sbar), variants={"drop sqrt(G)": (snr, math.sqrt(rv / sbar))})]


def check_t2_paper_heteroscedastic_counterexample(G: int = 8) -> list[Check]:
    """T2 as stated (plain-average sigma) FAILS with 3 outcomes (issue 12, point 5).

    X = 1, phi = (-1, 0, 1), theta = 0 (uniform policy, score s = phi), mu = s, noise variance 3 on the
    middle outcome only, where the score is 0.  The noise then adds nothing to the estimator's MSE but
    raises the plain average: SNR^2 / G = ||g||^2 / E||(mu - b) s - g||^2 = (4/9) / (2/9) = 2, while the
    claimed ceiling is RV / sigma^2 = (2/3 + 1) / 1 = 5/3.  With sigma_eff (here 0) the claim holds.
    """
    G = require_int("G", G, 1)
    tb = SoftmaxTestbed.zero_score_noise_counterexample()
    snr2g = float(_snr(tb, G)[0] ** 2 / G)
    rv, sbar, seff = (
        float(tb.reward_variance()[0]),
        float(tb.mean_noise_variance()[0]),
        float(tb.effective_noise_variance()[0]),
    )
    claimed = rv / sbar
    # a wrong MSE that charges the noise at the average score norm: MSE_G + (sbar E||s||^2 - E[sigma^2 ||s||^2]) / G
    mse = float(tb.estimator_mse(G)[0])
    extra = (sbar * float(tb.score_sq_norm()[0]) - float(tb.noise_variance()[0] @ (
        tb.probs()[0] * np.sum(tb.score()[0] ** 2, axis=1)))) / G
    snr2g_flat = float(np.sum(tb.task_gradient()[0] ** 2)) / (mse + extra) / G
    return [
        counterexample("t2_paper_plain_sigma_false", snr2g, claimed,
                       variants={"corrected claim (sigma_eff)": (snr2g, rv / seff if seff > 0 else math.inf)}),
        identity("t2_paper_counterexample_values", np.array([snr2g, claimed]),
                 np.array([2.0, 5.0 / 3.0]),
                 variants={"RV without its noise term (RV_mu / sigma^2)": (
                     np.array([snr2g, float(tb.signal_variance()[0]) / sbar]), np.array([2.0, 5.0 / 3.0])),
                           "noise counted where the score is 0 (MSE with E[sigma^2] E||s||^2)": (
                     np.array([snr2g_flat, claimed]), np.array([2.0, 5.0 / 3.0]))}),
    ]


def t2_paper_plain_ratio(tb: SoftmaxTestbed, G: int) -> float:
    """Largest SNR / (sqrt(G RV)/sigma) over the prompts of a heteroscedastic testbed, plain-average sigma
    (NaN when no prompt has noise)."""
    tb, G = require_testbed("tb", tb), require_int("G", G, 1)
    sbar = tb.mean_noise_variance()
    pos = sbar > 0
    if not pos.any():
        return math.nan
    return float(np.max(_snr(tb, G)[pos] / np.sqrt(G * tb.reward_variance()[pos] / sbar[pos])))


# ---------------------------------------------------------------------------------------------- T3
def check_t3(tb: SoftmaxTestbed, K: int, tight: bool = False) -> list[Check]:
    """T3: MSE of the population-normalised GRPO estimator >= (1/K)(sigma^2/RV) E||s||^2, and the floor
    saturates: (1/K)(sigma^2/RV) E||s||^2 <= E||s||^2 / K.  sigma_eff^2 for heteroscedastic noise.
    ``K`` is the group size, an integer >= 1; prompts with RV = 0 are left out (an empty list when every one is)."""
    tb, K, tight = require_testbed("tb", tb), require_int("K", K, 1), require_bool("tight", tight)
    rv = tb.reward_variance()
    ms, ps = scales(tb)
    pos = rv > 1e-12 * ms**2
    if not pos.any():
        return []
    es2 = tb.score_sq_norm()[pos]
    mse = tb.grpo_mse(K)[pos]
    if tb.heteroscedastic:
        floor = tb.effective_noise_variance()[pos] / rv[pos] * es2 / K
        return [bound("t3_heteroscedastic", floor, mse,
                      variants={"drop 1/K": (floor * K, mse)})]
    floor = tb.noise_variance()[pos, 0] / rv[pos] * es2 / K
    out = [bound("t3_floor", floor, mse, tight=tight, variants={"drop 1/K": (floor * K, mse)})]
    if not tight:
        out.append(bound("t3_floor_saturation", floor, es2 / K))
    return out


def check_t3_two_action(p: float, sigma: float, K: int) -> list[Check]:
    """2-action: MSE = p(1-p)[(1-2p)^2 + sigma^2] / (K (p(1-p) + sigma^2)) against enumeration."""
    K = require_int("K", K, 1)
    tb = SoftmaxTestbed.two_action(p, sigma)
    mse = float(tb.grpo_mse(K)[0])
    closed = p * (1 - p) * ((1 - 2 * p) ** 2 + sigma**2) / (K * (p * (1 - p) + sigma**2))
    wrong = p * (1 - p) * (1 - 2 * p) ** 2 / (K * (p * (1 - p) + sigma**2))
    return [identity("t3_two_action_closed_form", mse, closed,
                     variants={"drop sigma^2 from the numerator": (mse, wrong)})]


def check_t3_heteroscedastic_counterexample(K: int = 8) -> list[Check]:
    """Our addition: on T2's heteroscedastic instance, T3's floor with the plain-average sigma^2 exceeds the MSE.

    floor K RV = E_pi sigma^2 E s^2 = 0.6 * 0.24 = 0.144 > K RV MSE = 0.1056.
    """
    K = require_int("K", K, 1)
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    rv = float(tb.reward_variance()[0])
    floor = float(tb.mean_noise_variance()[0] / rv * tb.score_sq_norm()[0] / K)
    floor_eff = float(tb.effective_noise_variance()[0] / rv * tb.score_sq_norm()[0] / K)
    return [counterexample("t3_floor_plain_sigma_false", floor, float(tb.grpo_mse(K)[0]),
                           variants={"corrected claim (sigma_eff)": (floor_eff, float(tb.grpo_mse(K)[0]))})]
