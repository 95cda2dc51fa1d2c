"""Exact checks of PAPER.md section 5 (T1-T9), the identities, and the MI-proxy properties of section 2.

Every check compares two numbers computed independently from a :class:`SoftmaxTestbed` (or a channel)
by exact enumeration in float64 and returns :class:`Check` records.  Three kinds:

- ``bound``: a true inequality ``lhs <= rhs``; holds when ``lhs <= rhs (1 + RTOL) + atol``;
  ``ratio = (lhs - atol) / rhs`` (the largest ratio seen says how close the bound gets; removing the
  rounding allowance keeps ratio <= 1 + RTOL exactly when the check holds, so a bound met at the 1e-12
  floor never shows a ratio above 1); instances with rhs <= atol get no ratio.
  ``tight=True`` marks an instance of an equality family: it must also reach ``|ratio - 1| <= TIGHT_TOL``.
- ``strict``: a true strict inequality ``lhs < rhs``; holds when ``ratio < 1 - RTOL``.
- ``identity``: ``lhs == rhs``; holds when ``|lhs - rhs| <= RTOL max(|lhs|, |rhs|) + atol``;
  ``ratio`` is the relative error ``|lhs - rhs| / max(|lhs|, |rhs|, atol / RTOL)``.
- ``counterexample``: a claim ``lhs <= rhs`` that PAPER.md marks false in general; the check holds
  (the counterexample is reproduced) when ``lhs > rhs (1 + CE_MARGIN)``.

The absolute tolerances ``atol`` only absorb float64 rounding around exact zeros (scaled by the
magnitudes involved, about 1e-12 of them); they are documented where they are set.

Which variant is implemented (PAPER.md section 5):

- T1  paper  ||g|| <= sqrt(RV E||s||^2);  sharper  ||g|| <= sqrt(RV_mu lambda_max(F));
      any baseline c: ||E[(R - c) s]|| <= sqrt(RV E||s||^2).
- T2  paper  SNR <= sqrt(G RV) / sigma;  sharper  SNR <= sqrt(G RV_mu) / sigma (homoscedastic);
      heteroscedastic  SNR <= sqrt(G RV_mu) / sigma_eff,  sigma_eff^2 = E[sigma^2 ||s||^2] / E||s||^2;
      with the plain average sigma^2 = E_pi sigma^2 the sharper bound FAILS (counterexample).
- T3  MSE_GRPO >= (1/K) (sigma^2 / RV) E||s||^2 (sigma_eff under heteroscedastic noise; with the plain
      average it fails on the same instance, a counterexample we add), and the floor <= E||s||^2 / K.
- T4  I_alpha <= (1 - alpha) I; alpha -> I_alpha convex; equality when q lives where p(z|x) = p(z);
      strict when q = p(z) and I > 0.
- T5  rho >= ||g_reg|| / (||g_reg|| + sqrt(RV E||s||^2)) for KL-to-reference and entropy regularisers;
      "smaller RV => larger rho" is false (counterexample).
- T6  E||theta_T - theta_0||^2 = eta^2 (T v + T (T-1) ||m||^2), v = E||u||^2, m = E u (by enumeration).
- T7  E||gbar_hat_S - gbar_S||^2 = (1/n^2) sum_S sigma_i^2 (by enumeration); "filtering reduces MSE" is
      false (counterexample); the batch SNR strictly increases when dropping D with sum_D g = 0.
- T8  paper |dI| <= 2 (delta log(|X||Z| - 1) + h2(delta)), delta = sqrt(sup_x KL / 2) <= 1 - 1/(|X||Z|);
      |Z|-free |dI| <= 2 dbar log|X| + (1 + dbar) h2(dbar / (1 + dbar)), dbar = E_x TV_x (and with
      dbar replaced by its Pinsker bound sqrt(E_x KL / 2)).
- T9  dI = dH(Z) - dH(Z|X) (identity); "an entropy bonus lowers I" is false (counterexample at the
      logits of PAPER.md, I = 0.0783, dI/dt = +0.030 along per-prompt entropy ascent).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .testbed import (
    SoftmaxTestbed,
    channel_cond_entropy,
    channel_marginal_entropy,
    channel_mutual_information,
    enumerate_outcomes,
    h2,
    kl_divergence,
    random_channel,
    softmax,
)

RTOL = 1e-9
TIGHT_TOL = 1e-9
CE_MARGIN = 1e-6

__all__ = [
    "Check",
    "RTOL",
    "TIGHT_TOL",
    "bound",
    "strict",
    "identity",
    "counterexample",
    "check_identities",
    "check_estimator_enumeration",
    "check_t1",
    "check_t2",
    "check_t2_two_action",
    "check_t2_heteroscedastic_counterexample",
    "check_t3",
    "check_t3_two_action",
    "check_t4",
    "check_t5",
    "check_t5_counterexample",
    "check_t6",
    "check_t7_identity",
    "check_t7_counterexample",
    "check_t7_snr",
    "check_t8",
    "check_t9",
    "check_t9_counterexample",
    "check_mi_proxy_exact",
    "mi_time_derivative",
    "run_exact",
]


@dataclass(frozen=True)
class Check:
    """One compared pair of numbers (see the module docstring for the kinds)."""

    name: str
    lhs: float
    rhs: float
    holds: bool
    ratio: float
    kind: str = "bound"
    tight: bool = False
    method: str = "exact"
    note: str = ""


def _flat(a: float | np.ndarray) -> np.ndarray:
    return np.atleast_1d(np.asarray(a, dtype=np.float64)).ravel()


def bound(
    name: str,
    lhs: float | np.ndarray,
    rhs: float | np.ndarray,
    atol: float | np.ndarray = 0.0,
    tight: bool = False,
    method: str = "exact",
    note: str = "",
) -> Check:
    """lhs <= rhs (elementwise over arrays); the record keeps the worst element."""
    lhs_a, rhs_a = np.broadcast_arrays(_flat(lhs), _flat(rhs))
    atol_a = np.broadcast_to(_flat(atol), lhs_a.shape)
    ok = lhs_a <= rhs_a * (1.0 + RTOL) + atol_a
    # ratio after the rounding allowance (raw lhs/rhs for an equality family): holds <=> ratio <= 1 + RTOL
    num = lhs_a if tight else np.where(lhs_a > 0, np.maximum(lhs_a - atol_a, 0.0), lhs_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(rhs_a > atol_a, num / np.where(rhs_a > 0, rhs_a, 1.0), np.nan)
    ratio = np.where(~ok & np.isnan(ratio), np.inf, ratio)
    if tight:
        ok = ok & (np.abs(ratio - 1.0) <= TIGHT_TOL)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
    elif np.all(np.isnan(ratio)):
        i = 0
    else:
        i = int(np.nanargmax(np.abs(ratio - 1.0)) if tight else np.nanargmax(ratio))
    return Check(name, float(lhs_a[i]), float(rhs_a[i]), bool(ok.all()), float(ratio[i]), "bound", tight, method, note)


def strict(name: str, lhs: float | np.ndarray, rhs: float | np.ndarray, method: str = "exact", note: str = "") -> Check:
    """lhs < rhs strictly (ratio < 1 - RTOL); rhs must be positive."""
    lhs_a, rhs_a = np.broadcast_arrays(_flat(lhs), _flat(rhs))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(rhs_a > 0, lhs_a / np.where(rhs_a > 0, rhs_a, 1.0), np.inf)
    ok = ratio < 1.0 - RTOL
    i = int(np.flatnonzero(~ok)[0]) if not ok.all() else int(np.argmax(ratio))
    return Check(name, float(lhs_a[i]), float(rhs_a[i]), bool(ok.all()), float(ratio[i]), "strict", False, method, note)


def identity(
    name: str,
    lhs: float | np.ndarray,
    rhs: float | np.ndarray,
    atol: float | np.ndarray = 0.0,
    rtol: float = RTOL,
    method: str = "exact",
    note: str = "",
) -> Check:
    """lhs == rhs up to rtol (relative) and atol (absolute); ratio = relative error."""
    lhs_a, rhs_a = np.broadcast_arrays(_flat(lhs), _flat(rhs))
    atol_a = np.broadcast_to(_flat(atol), lhs_a.shape)
    diff = np.abs(lhs_a - rhs_a)
    scale = np.maximum(np.abs(lhs_a), np.abs(rhs_a))
    ok = diff <= rtol * scale + atol_a
    # relative to the larger value, or to the rounding floor atol / rtol when both are below it
    floor = np.maximum(scale, atol_a / rtol if rtol > 0 else atol_a)
    rel = np.where(floor > 0, diff / np.where(floor > 0, floor, 1.0), 0.0)
    i = int(np.flatnonzero(~ok)[0]) if not ok.all() else int(np.argmax(rel))
    return Check(name, float(lhs_a[i]), float(rhs_a[i]), bool(ok.all()), float(rel[i]), "identity", False, method, note)


def counterexample(name: str, lhs: float, rhs: float, method: str = "exact", note: str = "") -> Check:
    """A claimed ``lhs <= rhs`` that fails: reproduced when lhs > rhs (1 + CE_MARGIN)."""
    ok = lhs > rhs * (1.0 + CE_MARGIN) if rhs >= 0 else lhs > rhs
    ratio = lhs / rhs if rhs != 0 else math.inf
    return Check(name, float(lhs), float(rhs), bool(ok), float(ratio), "counterexample", False, method, note)


def _norm(v: np.ndarray) -> np.ndarray:
    return np.sqrt(np.sum(v * v, axis=-1))


def _scales(tb: SoftmaxTestbed) -> tuple[float, float]:
    """Magnitudes for rounding tolerances: (max |mu| + max sigma + 1, max ||phi|| + 1)."""
    return (
        float(np.max(np.abs(tb.mu)) + np.max(tb.sigma) + 1.0),
        float(np.max(_norm(tb.features)) + 1.0),
    )


# ---------------------------------------------------------------------------------------------- identities
def check_identities(tb: SoftmaxTestbed, rng: np.random.Generator) -> list[Check]:
    """The identities of PAPER.md section 5, each between two independent computations.

    - RV(x) = Var(mu|x) + E sigma^2  vs  Var(R|x) by enumerating (z, eps = +-sigma(x, z)).
    - RV >= sigma^2 (plain average).
    - E_pi s = 0.
    - H(Z) = H(Z|X) + I with I = E_x KL(pi(.|x) || p(z)); and 0 <= I <= H(X).
    - g does not depend on the baseline: E[(mu - c) s] for a random c far from b equals E[(mu - b) s].
    - Regulariser gradients: tabular logit formulas chained through phi equal the score-function
      forms grad KL = E_pi[s log(pi / pi_ref)], grad H = -E_pi[s log pi].
    """
    out: list[Check] = []
    ms, ps = _scales(tb)
    pi = tb.probs()
    # Var(R|x) by enumerating the reward distribution with Rademacher noise.
    sig = np.sqrt(tb.noise_variance())
    vals = np.concatenate([tb.mu - sig, tb.mu + sig], axis=1)
    wts = np.concatenate([pi / 2, pi / 2], axis=1)
    mean_r = np.sum(wts * vals, axis=1)
    var_r = np.sum(wts * (vals - mean_r[:, None]) ** 2, axis=1)
    out.append(identity("RV = Var(mu|x) + E sigma^2", var_r, tb.reward_variance(), atol=1e-12 * ms**2))
    out.append(bound("RV >= sigma^2", tb.mean_noise_variance(), tb.reward_variance(), atol=1e-12 * ms**2))
    es = np.einsum("xz,xzd->xd", pi, tb.score())
    out.append(identity("E_pi s = 0", _norm(es), np.zeros(tb.X), atol=1e-13 * ps))
    H, Hc, mi = tb.marginal_entropy(), tb.cond_entropy(), tb.mutual_information()
    out.append(identity("H(Z) = H(Z|X) + I", H, Hc + mi, atol=1e-13 * (1 + H)))
    Hx = float(-np.sum(tb.prompt_probs[tb.prompt_probs > 0] * np.log(tb.prompt_probs[tb.prompt_probs > 0])))
    out.append(bound("I <= H(X)", mi, Hx, atol=1e-13))
    c = tb.baseline() + rng.normal(size=tb.X) * ms * 10
    out.append(
        identity(
            "g independent of baseline",
            _norm(tb.task_gradient(c) - tb.task_gradient()),
            np.zeros(tb.X),
            atol=1e-12 * (ms * 11) * ps,
        )
    )
    ref = softmax(tb.logits() + rng.normal(size=(tb.X, tb.Z)), axis=1)
    s = tb.score()
    kl_sf = np.einsum("xz,xz,xzd->xd", pi, np.log(pi) - np.log(ref), s)
    h_sf = -np.einsum("xz,xz,xzd->xd", pi, np.log(pi), s)
    gscale = 1e-12 * ps * (1.0 + np.max(np.abs(np.log(pi))) + np.max(np.abs(np.log(ref))))
    out.append(identity("grad KL: tabular = score form", tb.kl_gradient(ref), kl_sf, atol=gscale))
    out.append(identity("grad H: tabular = score form", tb.entropy_gradient(), h_sf, atol=gscale))
    return out


def check_estimator_enumeration(tb: SoftmaxTestbed, G: int, baseline: np.ndarray | None = None) -> list[Check]:
    """MSE_G formulas of :meth:`SoftmaxTestbed.estimator_mse` against brute-force enumeration.

    Enumerates all (2Z)^G tuples of (outcome, eps = +-sigma) per prompt and averages
    ||(1/G) sum_k A_k s_k - g||^2 (and the GRPO-normalised version of T3).  Needs (2Z)^G small.
    """
    out: list[Check] = []
    pi, s, mu, sig = tb.probs(), tb.score(), tb.mu, np.sqrt(tb.noise_variance())
    b = tb.baseline() if baseline is None else baseline
    g = tb.task_gradient()
    rv = tb.reward_variance()
    mse_enum = np.zeros(tb.X)
    mse_grpo = np.zeros(tb.X)
    for x in range(tb.X):
        # atoms: (z, sign) -> reward, score, prob
        r = np.concatenate([mu[x] - sig[x], mu[x] + sig[x]])
        sc = np.concatenate([s[x], s[x]])
        pr = np.concatenate([pi[x] / 2, pi[x] / 2])
        idx, w = enumerate_outcomes(pr, G)
        ghat = np.mean((r[idx] - b[x])[:, :, None] * sc[idx], axis=1)
        err = ghat - g[x]
        mse_enum[x] = np.sum(w * np.sum(err * err, axis=1))
        if rv[x] > 0:
            errn = ghat / np.sqrt(rv[x]) - g[x] / np.sqrt(rv[x])
            mse_grpo[x] = np.sum(w * np.sum(errn * errn, axis=1))
    ms, ps = _scales(tb)
    atol = 1e-12 * (ms * ps) ** 2
    out.append(identity("MSE_G formula = enumeration", mse_enum, tb.estimator_mse(G, baseline=baseline), atol=atol))
    keep = rv > 1e-12 * ms**2
    if keep.any() and baseline is None:
        out.append(identity("GRPO MSE formula = enumeration", mse_grpo[keep], tb.grpo_mse(G)[keep], atol=atol))
    return out


# ---------------------------------------------------------------------------------------------- T1
def check_t1(tb: SoftmaxTestbed, rng: np.random.Generator | None = None, tight: bool = False) -> list[Check]:
    """T1: ||g(x)|| <= sqrt(RV(x) E||s||^2) (paper) and ||g(x)|| <= sqrt(RV_mu(x) lambda_max(F(x))) (sharper).

    With ``rng`` also the any-baseline form ||E[(R - c) s]|| <= sqrt(RV E||s||^2) for a random c far
    from b.  ``tight`` marks an equality instance (rank-one score, A proportional to it, sigma = 0).
    """
    ms, ps = _scales(tb)
    atol = 1e-12 * ms * ps
    gn = _norm(tb.task_gradient())
    rv, rvmu, es2 = tb.reward_variance(), tb.signal_variance(), tb.score_sq_norm()
    lam = np.linalg.eigvalsh(tb.fisher())[:, -1]
    sfx = " [tight]" if tight else ""
    out = [
        bound("T1 paper: ||g|| <= sqrt(RV E||s||^2)" + sfx, gn, np.sqrt(rv * es2), atol=atol, tight=tight),
        bound("T1 sharper: ||g|| <= sqrt(RV_mu lambda_max F)" + sfx, gn, np.sqrt(rvmu * np.maximum(lam, 0)), atol=atol, tight=tight),
    ]
    if rng is not None and not tight:
        c = tb.baseline() + rng.normal(size=tb.X) * ms * 10
        gc = _norm(tb.task_gradient(c))
        out.append(bound("T1 any baseline: ||E[(R-c)s]|| <= sqrt(RV E||s||^2)", gc, np.sqrt(rv * es2), atol=atol * 11))
    return out


# ---------------------------------------------------------------------------------------------- T2
def _snr(tb: SoftmaxTestbed, G: int, baseline: np.ndarray | None = None) -> np.ndarray:
    gn = _norm(tb.task_gradient())
    mse = tb.estimator_mse(G, baseline=baseline)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mse > 0, gn / np.sqrt(np.where(mse > 0, mse, 1.0)), np.where(gn > 0, np.inf, 0.0))


def check_t2(tb: SoftmaxTestbed, G: int, rng: np.random.Generator | None = None, tight: bool = False) -> list[Check]:
    """T2: SNR = ||g|| / sqrt(MSE_G) against sqrt(G RV)/sigma (paper) and sqrt(G RV_mu)/sigma (sharper).

    Homoscedastic testbeds with sigma > 0 (else the bounds are infinite).  Heteroscedastic ones are
    checked with sigma_eff.  With ``rng`` also with a baseline c != b (MSE grows, bound unchanged).
    """
    out: list[Check] = []
    sig2 = tb.noise_variance()
    pos = np.min(sig2, axis=1) > 0 if not tb.heteroscedastic else tb.effective_noise_variance() > 0
    if not pos.any():
        return out
    snr = _snr(tb, G)[pos]
    rv, rvmu = tb.reward_variance()[pos], tb.signal_variance()[pos]
    sfx = " [tight]" if tight else ""
    if tb.heteroscedastic:
        seff = tb.effective_noise_variance()[pos]
        out.append(bound("T2 heteroscedastic: SNR <= sqrt(G RV_mu)/sigma_eff", snr, np.sqrt(G * rvmu / seff)))
        return out
    s2 = sig2[pos, 0]
    if not tight:
        out.append(bound("T2 paper: SNR <= sqrt(G RV)/sigma", snr, np.sqrt(G * rv / s2)))
    out.append(bound("T2 sharper: SNR <= sqrt(G RV_mu)/sigma" + sfx, snr, np.sqrt(G * rvmu / s2), tight=tight))
    if rng is not None and not tight:
        ms, _ = _scales(tb)
        c = tb.baseline() + rng.normal(size=tb.X) * ms
        out.append(bound("T2 baseline c != b: SNR_c <= sqrt(G RV_mu)/sigma", _snr(tb, G, c)[pos], np.sqrt(G * rvmu / s2)))
    return out


def check_t2_two_action(p: float, sigma: float, G: int) -> list[Check]:
    """2-action closed form SNR^2 = G p(1-p) / ((1-2p)^2 + sigma^2) against the testbed's enumeration."""
    tb = SoftmaxTestbed.two_action(p, sigma)
    snr2 = float(_snr(tb, G)[0] ** 2)
    closed = G * p * (1 - p) / ((1 - 2 * p) ** 2 + sigma**2)
    out = [identity("T2 2-action SNR^2 closed form", snr2, closed)]
    g = float(_norm(tb.task_gradient())[0])
    out.append(identity("T1 2-action g = p(1-p) = E s^2 = RV_mu", np.array([g, tb.score_sq_norm()[0], tb.signal_variance()[0]]), p * (1 - p)))
    return out


def check_t2_heteroscedastic_counterexample(G: int = 8) -> list[Check]:
    """PAPER.md T2: the sharper bound with the plain average sigma^2 fails (p = 0.4, noise on action 0).

    Claimed: SNR^2 / G <= RV_mu / E_pi sigma^2 = 0.4.  Exact: SNR^2 / G = 6/11 = 0.5454...
    With sigma_eff the bound holds (checked as well).
    """
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    snr2g = float(_snr(tb, G)[0] ** 2 / G)
    rvmu = float(tb.signal_variance()[0])
    out = [
        counterexample("T2 sharper with plain-average sigma^2 (false)", snr2g, rvmu / float(tb.mean_noise_variance()[0])),
        identity("T2 counterexample value SNR^2/G = 6/11", snr2g, 6.0 / 11.0),
        bound("T2 heteroscedastic: SNR <= sqrt(G RV_mu)/sigma_eff", snr2g, rvmu / float(tb.effective_noise_variance()[0])),
    ]
    return out


# ---------------------------------------------------------------------------------------------- T3
def check_t3(tb: SoftmaxTestbed, K: int, tight: bool = False) -> list[Check]:
    """T3: MSE of the population-normalised GRPO estimator >= (1/K)(sigma^2/RV) E||s||^2, and the floor
    saturates: (1/K)(sigma^2/RV) E||s||^2 <= E||s||^2 / K.  sigma_eff^2 for heteroscedastic noise."""
    rv = tb.reward_variance()
    ms, ps = _scales(tb)
    pos = rv > 1e-12 * ms**2
    if not pos.any():
        return []
    es2 = tb.score_sq_norm()[pos]
    mse = tb.grpo_mse(K)[pos]
    sfx = " [tight]" if tight else ""
    if tb.heteroscedastic:
        floor = tb.effective_noise_variance()[pos] / rv[pos] * es2 / K
        return [bound("T3 heteroscedastic: floor(sigma_eff) <= MSE_GRPO", floor, mse)]
    floor = tb.noise_variance()[pos, 0] / rv[pos] * es2 / K
    out = [bound("T3 floor <= MSE_GRPO" + sfx, floor, mse, tight=tight)]
    if not tight:
        out.append(bound("T3 floor <= E||s||^2 / K (saturation)", floor, es2 / K))
    return out


def check_t3_two_action(p: float, sigma: float, K: int) -> list[Check]:
    """2-action: MSE = p(1-p)[(1-2p)^2 + sigma^2] / (K (p(1-p) + sigma^2)) against enumeration."""
    tb = SoftmaxTestbed.two_action(p, sigma)
    mse = float(tb.grpo_mse(K)[0])
    closed = p * (1 - p) * ((1 - 2 * p) ** 2 + sigma**2) / (K * (p * (1 - p) + sigma**2))
    return [identity("T3 2-action GRPO MSE closed form", mse, closed)]


def check_t3_heteroscedastic_counterexample(K: int = 8) -> list[Check]:
    """Our addition: on T2's heteroscedastic instance, T3's floor with the plain-average sigma^2 exceeds the MSE.

    floor K RV = E_pi sigma^2 E s^2 = 0.6 * 0.24 = 0.144 > K RV MSE = 0.1056.
    """
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    rv = float(tb.reward_variance()[0])
    floor = float(tb.mean_noise_variance()[0] / rv * tb.score_sq_norm()[0] / K)
    return [counterexample("T3 floor with plain-average sigma^2 (false)", floor, float(tb.grpo_mse(K)[0]))]


# ---------------------------------------------------------------------------------------------- T4
ALPHAS = np.linspace(0.0, 1.0, 11)


def mixture_mi(w: np.ndarray, channel: np.ndarray, q: np.ndarray, alphas: np.ndarray = ALPHAS) -> np.ndarray:
    """I_alpha(X;Z) for p_alpha(z|x) = (1 - alpha) p(z|x) + alpha q(z), one value per alpha."""
    return np.array([channel_mutual_information(w, (1 - a) * channel + a * q[None, :]) for a in alphas])


def check_t4(w: np.ndarray, channel: np.ndarray, q: np.ndarray, label: str = "random q", tight: bool = False) -> list[Check]:
    """T4 on a grid alpha = 0, 0.1, ..., 1.

    - contraction I_alpha <= (1 - alpha) I (``tight``: equality expected);
    - convexity I(alpha_m) <= (I(alpha_{m-1}) + I(alpha_{m+1})) / 2;
    - ``label == "q = p(z)"``: strict contraction I_alpha < (1 - alpha) I for alpha in (0, 1) when I > 0.
    """
    I_a = mixture_mi(w, channel, q)
    I0 = I_a[0]
    atol = 1e-15 * (1.0 + I0)
    inner = slice(1, -1)
    rhs = (1 - ALPHAS[inner]) * I0
    sfx = " [tight]" if tight else ""
    # tightness is asserted only where I is well above the float64 floor of the inputs (I > 1e-6)
    out = [bound("T4 contraction: I_alpha <= (1-alpha) I" + sfx, I_a[inner], rhs, atol=atol, tight=tight and I0 > 1e-6)]
    out.append(bound("T4 convexity of alpha -> I_alpha", I_a[1:-1], (I_a[:-2] + I_a[2:]) / 2, atol=atol))
    if label == "q = p(z)" and I0 > 1e-8:
        out.append(strict("T4 strict contraction with q = p(z)", I_a[inner], rhs))
    return out


def t4_instances(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, str, bool]]:
    """Random (w, channel, q, label, tight) triples: random q, q = p(z), and q on x-independent outcomes."""
    X = int(rng.integers(2, 6))
    Z = int(rng.integers(2, 7))
    w = rng.dirichlet(np.ones(X)) if rng.random() < 0.5 else np.full(X, 1.0 / X)
    ch = random_channel(rng, X, Z, scale=float(np.exp(rng.uniform(-2, 2))))
    out = [(w, ch, rng.dirichlet(np.ones(Z)), "random q", False), (w, ch, w @ ch, "q = p(z)", False)]
    # tight: a block S of outcomes with p(z|x) = c_z for every x, template q supported on S
    k = int(rng.integers(1, Z + 1))
    S = rng.choice(Z + 1, size=k, replace=False)
    rest = np.setdiff1d(np.arange(Z + 1), S)
    cS = rng.dirichlet(np.ones(k)) * rng.uniform(0.05, 0.95)
    ch2 = np.zeros((X, Z + 1))
    ch2[:, S] = cS
    ch2[:, rest] = (1 - cS.sum()) * rng.dirichlet(np.ones(len(rest)), size=X)
    q = np.zeros(Z + 1)
    q[S] = rng.dirichlet(np.ones(k))
    out.append((w, ch2, q, "q on x-independent outcomes", True))
    return out


# ---------------------------------------------------------------------------------------------- T5
def _rho(greg: np.ndarray, gtask: np.ndarray) -> np.ndarray:
    r, t = _norm(greg), _norm(gtask)
    den = r + t
    return np.where(den > 0, r / np.where(den > 0, den, 1.0), 0.0)


def check_t5(tb: SoftmaxTestbed, rng: np.random.Generator, tight: bool = False) -> list[Check]:
    """T5: rho(x) = ||g_reg|| / (||g_task|| + ||g_reg||) >= ||g_reg|| / (||g_reg|| + sqrt(RV E||s||^2)).

    g_reg = beta grad KL(pi || pi_ref) (random reference) and beta grad H (entropy bonus), beta random.
    """
    out: list[Check] = []
    g = tb.task_gradient()
    cap = np.sqrt(tb.reward_variance() * tb.score_sq_norm())
    ref = softmax(tb.logits() + rng.normal(size=(tb.X, tb.Z)) * rng.uniform(0.1, 3), axis=1)
    beta = float(np.exp(rng.uniform(np.log(1e-3), np.log(10.0))))
    sfx = " [tight]" if tight else ""
    for label, greg in (("KL", beta * tb.kl_gradient(ref)), ("entropy", beta * tb.entropy_gradient())):
        rn = _norm(greg)
        keep = rn > 0
        if not keep.any():
            continue
        lower = rn[keep] / (rn[keep] + cap[keep])
        out.append(bound(f"T5 rho lower bound ({label})" + sfx, lower, _rho(greg, g)[keep], atol=1e-12, tight=tight))
    return out


def check_t5_counterexample() -> list[Check]:
    """"Smaller RV => larger rho" is false: a pure-noise prompt (mu = 0, sigma = 1: RV = 1, g = 0,
    rho = 1) against a 2-action signal prompt (p = 1/2, mu = 1[a=1], sigma = 0: RV = 1/4, rho < 1),
    both with the same entropy regulariser."""
    tb = SoftmaxTestbed(
        features=np.array([[[0.0], [1.0]], [[0.0], [1.0]]]),
        theta=np.array([0.3]),
        mu=np.array([[0.0, 0.0], [0.0, 1.0]]),
        sigma=np.array([1.0, 0.0]),
    )
    rv = tb.reward_variance()
    rho = _rho(0.1 * tb.entropy_gradient(), tb.task_gradient())
    lo, hi = int(np.argmin(rv)), int(np.argmax(rv))
    # claim: RV_lo < RV_hi  =>  rho_lo >= rho_hi, i.e. rho_hi <= rho_lo
    return [counterexample("T5 'smaller RV => larger rho' (false)", float(rho[hi]), float(rho[lo]))]


# ---------------------------------------------------------------------------------------------- T6
def check_t6(rng: np.random.Generator) -> list[Check]:
    """T6 by enumeration: updates u_t i.i.d. over K atoms in R^d, theta_T - theta_0 = eta sum_t u_t.

        E||theta_T - theta_0||^2 = eta^2 (T v + T (T-1) ||m||^2),   v = E||u||^2, m = E u,

    so with m = 0 it is eta^2 T v (diffusive, RMS ~ sqrt T) and a persistent m is ballistic.
    Enumerates all K^T update sequences.
    """
    K = int(rng.integers(2, 4))
    T = int(rng.integers(1, 7 if K == 2 else 6))
    d = int(rng.integers(1, 4))
    eta = float(np.exp(rng.uniform(-3, 1)))
    probs = rng.dirichlet(np.ones(K))
    atoms = rng.normal(size=(K, d))
    out = []
    for label, at in (("diffusive m = 0", atoms - probs @ atoms), ("ballistic m != 0", atoms)):
        idx, w = enumerate_outcomes(probs, T)
        disp = eta * at[idx].sum(axis=1)
        lhs = float(np.sum(w * np.sum(disp * disp, axis=1)))
        m = probs @ at
        v = float(probs @ np.sum(at * at, axis=1))
        rhs = eta**2 * (T * v + T * (T - 1) * float(m @ m))
        out.append(identity(f"T6 drift {label}", lhs, rhs, atol=1e-14 * eta**2 * T**2 * (1 + v)))
    return out


# ---------------------------------------------------------------------------------------------- T7
def _group_errors(tb: SoftmaxTestbed, x: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """All outcomes of g_hat_x - g_x over (2Z)^G tuples: (errors [n, d], probabilities [n])."""
    pi, s, mu, sig = tb.probs()[x], tb.score()[x], tb.mu[x], np.sqrt(tb.noise_variance()[x])
    r = np.concatenate([mu - sig, mu + sig])
    sc = np.concatenate([s, s])
    pr = np.concatenate([pi / 2, pi / 2])
    idx, w = enumerate_outcomes(pr, G)
    ghat = np.mean((r[idx] - tb.baseline()[x])[:, :, None] * sc[idx], axis=1)
    return ghat - tb.task_gradient()[x], w


def check_t7_identity(tb: SoftmaxTestbed, S: Iterable[int], G: int) -> list[Check]:
    """T7 identity by enumerating the joint outcomes of the groups in S (independent of the noise):

        E||(1/n) sum_{i in S} (g_hat_i - g_i)||^2 = (1/n^2) sum_{i in S} sigma_i^2,  sigma_i^2 = MSE_G(i).
    """
    S = list(S)
    n = len(S)
    errs, ws = zip(*(_group_errors(tb, x, G) for x in S))
    total = np.zeros((1, tb.d))
    weight = np.ones(1)
    for e, w in zip(errs, ws):
        total = (total[:, None, :] + e[None, :, :]).reshape(-1, tb.d)
        weight = (weight[:, None] * w[None, :]).ravel()
    lhs = float(np.sum(weight * np.sum((total / n) ** 2, axis=1)))
    rhs = float(np.sum(tb.estimator_mse(G)[S]) / n**2)
    ms, ps = _scales(tb)
    return [identity("T7 identity E||gbar_hat_S - gbar_S||^2 = sum sigma_i^2 / n^2", lhs, rhs, atol=1e-12 * (ms * ps) ** 2)]


def check_t7_counterexample(G: int = 8, P: int = 8, n: int = 4) -> list[Check]:
    """"Filtering reduces the MSE" is false: P copies of one prompt (equal sigma_i), keep n < P groups.

    MSE_S = sigma^2 / n = (P / n) MSE_all > MSE_all.
    """
    base = SoftmaxTestbed.two_action(0.3, 0.5)
    tb = SoftmaxTestbed(
        np.repeat(base.features, P, axis=0), base.theta, np.repeat(base.mu, P, axis=0), np.repeat(base.sigma, P)
    )
    sig2 = tb.estimator_mse(G)
    mse_all = float(np.sum(sig2) / P**2)
    mse_s = float(np.sum(sig2[:n]) / n**2)
    return [
        counterexample("T7 'filtering reduces MSE' (false)", mse_s, mse_all),
        identity("T7 equal sigma: MSE_S / MSE_all = P / n", mse_s / mse_all, P / n),
    ]


def check_t7_snr(rng: np.random.Generator, G: int) -> list[Check]:
    """T7, defensible form: batch SNR ||sum_S g_i|| / sqrt(sum_S sigma_i^2) strictly increases when dropping
    a set D with sum_D g_i = 0 and sum_D sigma_i^2 > 0.  D = pure-noise prompts (mu constant: g = 0)
    and mirrored pairs (mu' = -mu on the same features: g' = -g)."""
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
    snr_all = float(_norm(g.sum(axis=0)) / np.sqrt(s2.sum()))
    snr_keep = float(_norm(g[keep].sum(axis=0)) / np.sqrt(s2[keep].sum()))
    out = [identity("T7 sum_D g = 0 (construction)", float(_norm(g[Xb:].sum(axis=0))), 0.0, atol=1e-12 * (1 + _norm(g).max()))]
    if snr_keep > 0:
        out.append(strict("T7 batch SNR rises when dropping sum_D g = 0", snr_all, snr_keep))
    return out


# ---------------------------------------------------------------------------------------------- T8
def check_t8(rng: np.random.Generator) -> list[Check]:
    """T8 on a random pair of channels pi, pi_0 (same prompt weights), perturbation scale log-uniform.

    paper:   |I - I_0| <= 2 (delta log(|X||Z| - 1) + h2(delta)),  delta = sqrt(sup_x KL(pi||pi_0) / 2),
             checked only where delta <= 1 - 1/(|X||Z|);
    Z-free:  |I - I_0| <= 2 dbar log|X| + (1 + dbar) h2(dbar / (1 + dbar)), dbar = E_x TV_x, and again with
             dbar -> min(1, sqrt(E_x KL / 2)) (Pinsker + Jensen).
    """
    X = int(rng.integers(2, 7))
    Z = int(rng.integers(2, 9))
    w = rng.dirichlet(np.ones(X)) if rng.random() < 0.5 else np.full(X, 1.0 / X)
    logits0 = rng.normal(size=(X, Z)) * float(np.exp(rng.uniform(-1, 1.5)))
    logits = logits0 + rng.normal(size=(X, Z)) * float(np.exp(rng.uniform(np.log(1e-3), np.log(3.0))))
    p0, p1 = softmax(logits0, 1), softmax(logits, 1)
    dI = abs(channel_mutual_information(w, p1) - channel_mutual_information(w, p0))
    kl = kl_divergence(p1, p0, axis=1)
    out: list[Check] = []
    D = X * Z
    delta = math.sqrt(max(float(kl.max()), 0.0) / 2)
    if delta <= 1 - 1 / D:
        out.append(bound("T8 paper: |dI| <= 2(delta log(|X||Z|-1) + h2(delta))", dI, 2 * (delta * math.log(D - 1) + float(h2(delta))), atol=1e-14))

    def zfree(db: float) -> float:
        return 2 * db * math.log(X) + (1 + db) * float(h2(db / (1 + db)))

    dbar = float(w @ (0.5 * np.abs(p1 - p0).sum(axis=1)))
    pinsker = min(1.0, math.sqrt(max(float(w @ kl), 0.0) / 2))
    out.append(bound("T8 Z-free (AFW): |dI| <= 2 dbar log|X| + (1+dbar) h2(dbar/(1+dbar))", dI, zfree(dbar), atol=1e-14))
    out.append(bound("T8 Z-free with dbar <= sqrt(E KL/2)", dI, zfree(pinsker), atol=1e-14))
    out.append(bound("T8 Pinsker: E_x TV_x <= sqrt(E_x KL/2)", dbar, pinsker, atol=1e-15))
    return out


# ---------------------------------------------------------------------------------------------- T9
def mi_logit_gradient(w: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """dI/d logit(x, z) = w(x) pi(z|x) [log(pi(z|x) / p(z)) - KL(pi(.|x) || p)] for a tabular softmax channel."""
    pi = softmax(logits, 1)
    m = w @ pi
    lr = np.log(pi) - np.log(m)[None, :]
    kl = np.sum(pi * lr, axis=1, keepdims=True)
    return w[:, None] * pi * (lr - kl)


def mi_time_derivative(w: np.ndarray, logits: np.ndarray) -> float:
    """dI/dt along per-prompt entropy ascent d logit_x/dt = grad_{logit_x} H(pi(.|x)) = -pi (log pi + H)."""
    pi = softmax(logits, 1)
    Hx = -np.sum(pi * np.log(pi), axis=1, keepdims=True)
    velocity = -pi * (np.log(pi) + Hx)
    return float(np.sum(mi_logit_gradient(w, logits) * velocity))


def _mi_of_logits(w: np.ndarray, logits: np.ndarray) -> float:
    return channel_mutual_information(w, softmax(logits, 1))


def check_t9(tb: SoftmaxTestbed, tb2: SoftmaxTestbed) -> list[Check]:
    """T9 decomposition between two policies: dI = dH(Z) - dH(Z|X) (I from the KL form, H's from entropies)."""
    dI = tb2.mutual_information() - tb.mutual_information()
    dmarg = tb2.marginal_entropy() - tb.marginal_entropy()
    din = tb2.cond_entropy() - tb.cond_entropy()
    scale = 1.0 + tb.marginal_entropy() + tb2.marginal_entropy()
    return [identity("T9 dI = Delta_marg - Delta_in", dI, dmarg - din, atol=1e-13 * scale)]


def check_t9_counterexample() -> list[Check]:
    """PAPER.md T9 counterexample: I = 0.0783 and dI/dt = +0.030 > 0 along entropy ascent.

    dI/dt is computed analytically (chain rule through mi_logit_gradient) and, independently, as a
    central finite difference of I along the ascent direction; a small explicit entropy-ascent step is
    also shown to raise I.
    """
    tb = SoftmaxTestbed.entropy_bonus_counterexample()
    w, logits = tb.prompt_probs, tb.logits()
    I0 = tb.mutual_information()
    dIdt = mi_time_derivative(w, logits)
    pi = tb.probs()
    vel = -pi * (np.log(pi) + entropy_rows(pi)[:, None])
    h = 1e-5
    fd = (_mi_of_logits(w, logits + h * vel) - _mi_of_logits(w, logits - h * vel)) / (2 * h)
    step = _mi_of_logits(w, logits + 0.05 * vel)
    return [
        identity("T9 counterexample I = 0.0783 (4 d.p.)", round(I0, 4), 0.0783, rtol=0.0, atol=1e-12),
        identity("T9 counterexample dI/dt = 0.030 (3 d.p.)", round(dIdt, 3), 0.030, rtol=0.0, atol=1e-12),
        identity("T9 dI/dt analytic = finite difference", dIdt, fd, rtol=1e-6),
        counterexample("T9 'entropy bonus lowers I' (false): dI/dt > 0", dIdt, 0.0),
        counterexample("T9 entropy-ascent step raises I", step, I0),
    ]


def entropy_rows(p: np.ndarray) -> np.ndarray:
    """Row entropies H(p[x, :])."""
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)


# ---------------------------------------------------------------------------------------------- MI proxies (exact)
def expected_seq_proxy(sampler: np.ndarray, scorer: np.ndarray) -> float:
    """E[MI-Seq-Est] for a batch of P prompts with channel rows ``sampler`` [P, Z] and ``scorer`` [P, Z]:

        (1/P) sum_i sum_z q_i(z) [ log p_i(z) - log( (1/P) sum_j p_j(z) ) ]    (PAPER.md section 2).
    """
    mix = scorer.mean(axis=0)
    return float(np.mean(np.sum(sampler * (np.log(scorer) - np.log(mix)[None, :]), axis=1)))


def bayes_accuracy(channel: np.ndarray) -> float:
    """Retrieval accuracy of the Bayes (MAP) scorer, uniform prompts: (1/P) sum_z max_i p_i(z)."""
    return float(np.sum(channel.max(axis=0)) / channel.shape[0])


def fano_lower(acc: float, P: int) -> float:
    """Fano: I_P >= log P - h2(1 - acc) - (1 - acc) log(P - 1)."""
    pe = 1.0 - acc
    return math.log(P) - float(h2(pe)) - (pe * math.log(P - 1) if P > 1 else 0.0)


def check_mi_proxy_exact(rng: np.random.Generator) -> list[Check]:
    """Section 2 properties by enumeration on a random batch channel (P prompts, Z outcomes).

    - scorer = sampler: E[MI-Seq-Est] = I_P, with I_P from entropies H(Z) - H(Z|X) (independent form);
    - sampler at temperature T != 1, scorer at T = 1: E[MI-Seq-Est] <= I_P(sampler);
    - E over batches (subsets of P of the X prompts) of I_P <= I(X;Z), X uniform;
    - exact collapse: E[Retrieval-Acc] = 1/P for an arbitrary scorer with first-index tie-break;
    - Fano with the Bayes scorer: log P - h2(1-Acc) - (1-Acc) log(P-1) <= I_P; the symmetric channel is tight.
    """
    out: list[Check] = []
    P = int(rng.integers(2, 9))
    Z = int(rng.integers(2, 10))
    logits = rng.normal(size=(P, Z)) * float(np.exp(rng.uniform(-1, 1.5)))
    p = softmax(logits, 1)
    u = np.full(P, 1.0 / P)
    I_P = channel_marginal_entropy(u, p) - channel_cond_entropy(u, p)
    out.append(identity("MI-Seq-Est: E = I_P when scorer = sampler", expected_seq_proxy(p, p), I_P, atol=1e-13))
    T = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0))))
    q = softmax(logits / T, 1)
    out.append(bound("MI-Seq-Est: E <= I_P(sampler), sampler at T != 1", expected_seq_proxy(q, p), channel_mutual_information(u, q), atol=1e-13))
    # batches drawn from a larger pool
    Xpool = int(rng.integers(3, 8))
    pool = softmax(rng.normal(size=(Xpool, Z)) * 2, 1)
    Pb = int(rng.integers(2, Xpool))
    vals = [channel_mutual_information(np.full(Pb, 1.0 / Pb), pool[list(c)]) for c in itertools.combinations(range(Xpool), Pb)]
    out.append(bound("E_batch[I_P] <= I(X;Z)", float(np.mean(vals)), channel_mutual_information(np.full(Xpool, 1.0 / Xpool), pool), atol=1e-13))
    # collapse: every prompt has the same p(z); scorer arbitrary integer table (ties) with argmax tie-break
    pz = rng.dirichlet(np.ones(Z))
    scorer = rng.integers(-2, 3, size=(Z, P)).astype(float)
    winner = np.argmax(scorer, axis=1)  # first index among ties
    acc = float(np.mean([np.sum(pz[winner == i]) for i in range(P)]))
    out.append(identity("Retrieval-Acc under collapse: E = 1/P", acc, 1.0 / P))
    acc_b = bayes_accuracy(p)
    out.append(bound("Fano (Bayes scorer)", fano_lower(acc_b, P), I_P, atol=1e-13))
    a = float(rng.uniform(1.0 / P + 0.01, 0.99))
    sym = np.full((P, P), (1 - a) / (P - 1)) + np.eye(P) * (a - (1 - a) / (P - 1))
    I_sym = channel_mutual_information(np.full(P, 1.0 / P), sym)
    out.append(bound("Fano (Bayes scorer) [tight]", fano_lower(bayes_accuracy(sym), P), I_sym, atol=1e-13, tight=True))
    return out


# ---------------------------------------------------------------------------------------------- runner
def run_exact(rng: np.random.Generator, n_testbeds: int, progress: bool = False) -> list[Check]:
    """All exact checks: ``n_testbeds`` random testbeds plus the tightness families and counterexamples."""
    checks: list[Check] = []
    Gs = (1, 2, 4, 8, 16, 64)
    for i in range(n_testbeds):
        het = i % 5 == 4
        tb = SoftmaxTestbed.random(rng, heteroscedastic=het)
        G = int(rng.choice(Gs))
        checks += check_identities(tb, rng)
        checks += check_t1(tb, rng)
        checks += check_t2(tb, G, rng)
        checks += check_t3(tb, G)
        checks += check_t5(tb, rng)
        if i % 10 == 0:
            small = SoftmaxTestbed.random(rng, X=int(rng.integers(1, 3)), Z=int(rng.integers(2, 4)), heteroscedastic=het)
            Gs_small = 3 if small.Z == 2 else 2
            checks += check_estimator_enumeration(small, Gs_small)
            checks += check_estimator_enumeration(small, 1, baseline=small.baseline() + rng.normal(size=small.X))
            if small.X == 2:
                checks += check_t7_identity(small, [0, 1], 1 if small.Z == 3 else 2)
        # a second policy for the T9 decomposition
        tb2 = tb.with_theta(tb.theta + rng.normal(size=tb.d) * float(np.exp(rng.uniform(-4, 1))))
        checks += check_t9(tb, tb2)
        for w, ch, q, label, tight in t4_instances(rng):
            checks += check_t4(w, ch, q, label, tight)
        checks += check_t6(rng)
        checks += check_t8(rng)
        checks += check_mi_proxy_exact(rng)
        checks += check_t7_snr(rng, G)
        # tightness families
        p = float(rng.uniform(0.01, 0.99))
        checks += check_t1(SoftmaxTestbed.two_action(p), tight=True)
        checks += check_t1(SoftmaxTestbed.rank_one_tight(rng, X=int(rng.integers(1, 4)), Z=int(rng.integers(2, 7)), d=int(rng.integers(1, 5))), tight=True)
        checks += check_t5(SoftmaxTestbed.two_action(p), rng, tight=True)
        sig = float(np.exp(rng.uniform(-3, 2)))
        checks += check_t2(SoftmaxTestbed.two_action(0.5, sig), G, tight=True)
        checks += check_t3(SoftmaxTestbed.two_action(0.5, sig), G, tight=True)
        checks += check_t2_two_action(p, sig, G)
        checks += check_t3_two_action(p, sig, G)
        if progress and (i + 1) % 500 == 0:
            print(f"  exact: {i + 1}/{n_testbeds} testbeds", flush=True)
    checks += check_t2_heteroscedastic_counterexample()
    checks += check_t3_heteroscedastic_counterexample()
    checks += check_t5_counterexample()
    checks += check_t7_counterexample()
    checks += check_t9_counterexample()
    return checks
