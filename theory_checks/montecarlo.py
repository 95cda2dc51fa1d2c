"""Monte Carlo checks of the estimator-level results (MI proxies, SNR mechanism, T1-T9).

Harness rule: first validate the simulator, i.e. its sample mean must agree with the exact value from
:class:`SoftmaxTestbed` within a confidence interval; only then compare with a bound, and flag a violation
only when the whole interval clears the bound.

Confidence intervals.  Every simulated statistic Y is bounded, Y in [a, b] (noise is Rademacher,
eps = +-sigma, so rewards, scores and estimators are bounded; the range is computed from the testbed).
For n i.i.d. draws the half-width at level delta_i is

    t = min( (b - a) sqrt(log(4 / delta_i) / (2 n)),                                 Hoeffding, delta_i / 2
             sqrt(2 V_n log(8 / delta_i) / n) + 7 (b - a) log(8 / delta_i) / (3 (n - 1)) )
                                                          empirical Bernstein (Maurer & Pontil 2009), delta_i / 2

so P(|Ybar - E Y| > t) <= delta_i (union bound over the two).  Bonferroni over the whole run:
delta_i = DELTA / M_INTERVALS with DELTA = 1e-3, and the run asserts that it uses at most M_INTERVALS
intervals.  All draws come from one seeded ``np.random.Generator``: the same seed gives the same numbers.

Power (issue 12).  Every validation is sized to detect a simulator error of 5%: its record carries the
*detectable error* d = (half-width + |mean - exact|) / |exact|, the smallest relative error of the exact
value that the run would have flagged, and two mutants (exact value x1.05 and x0.95) that must be caught.
Variance reduction, all unbiased and exact (no fitted constants):

- exact conditional expectation over the Rademacher noise given the sampled outcomes (Rao-Blackwell):
  the estimators are affine in eps, so E[||g_hat - g||^2 | z] = ||m_hat - g||^2 + sum_k sigma_k^2 ||s_k||^2 / G^2
  and E[g_hat | z] drops the noise; the noise itself is still simulated where the result depends on it
  (the per-draw T1 bound, the heteroscedastic counterexample, the T7 selection from the same rollouts);
- enough draws that the empirical-Bernstein range term 7 (b - a) log(8 / delta_i) / (3 n) stays small.

Claims the run cannot support were dropped: the Monte Carlo Fano bound and the MC forms of the bounds
that the exact checks verify on the same quantities (they added no power); "E[Retrieval-Acc] = 1/P under
collapse" holds for any winner function and is reported as a sanity identity.

Checks (each a :class:`~theory_checks.records.Check` with ``method="monte-carlo"``):

- T2 SNR: g_hat = (1/G) sum_k (R_k - b) s_k; validate E||g_hat - g||^2 against ``estimator_mse``; then
  SNR <= sqrt(G RV_mu) / sigma and the T3 floor (sigma^2 / RV) E||s||^2 / K <= MSE_GRPO, both tight at
  p = 1/2; the heteroscedastic counterexample with simulated noise.
- T1 sample version: ||(1/G) sum_k (R_k - Rbar) s_k|| <= sqrt(Var_hat) sqrt(mean_k ||s_k||^2) on every draw,
  with the RL core's Dr.GRPO advantages and ``reward_variance`` (ddof = 0) when importable; validates
  E[(1/G) sum_k (R_k - Rbar) s_k] . u = (1 - 1/G) ||g||, u = g / ||g||.
- T6 drift: theta_T - theta_0 = eta sum_t (m + xi_t), xi_t = g_hat_t - g; validates
  E||theta_T - theta_0||^2 = eta^2 (T MSE_G + T^2 ||m||^2).
- T7: the identity for a fixed subset, and its failure when the subset is chosen from the same rollouts
  (top-k by sample reward variance, with ``ragen_core.math.filtering.filter_groups``).
- MI proxies (section 2) with ``ragen_core.math.mi.mi_proxies`` (numpy reference when it cannot be imported):
  E[MI-Seq-Est] = I_P (scorer = sampler) and the exact expectation at sampler temperature != 1,
  E[Retrieval-Acc] = the Bayes accuracy, per batch: MI-Seq-Est <= log P (tight for disjoint supports),
  agreement with an independent numpy implementation, invariance to row shifts, and 0 under collapse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import reference
from .inputs import require_array, require_bool, require_int, require_real, require_rng
from .mi_proxies import bayes_accuracy, expected_seq_proxy
from .records import Check, bound, identity
from .reference import retrieval_hits as _retrieval_hits
from .reference import token_proxy_terms
from .reference import topk_by_variance as _topk_by_variance
from .testbed import SoftmaxTestbed, channel_mutual_information, softmax

DELTA = 1e-3
M_INTERVALS = 120
#: the simulator error every validation must be able to detect (issue 12)
TARGET_ERROR = 0.05

__all__ = [
    "DELTA",
    "M_INTERVALS",
    "TARGET_ERROR",
    "Interval",
    "MCBudget",
    "Est",
    "seq_proxy_terms",
    "run_montecarlo",
    "core_available",
]


def core_available() -> dict[str, str]:
    """Which RL-core pieces import: {name: "available" | "not available (<error>)"}."""
    out = {}
    for mod in ("ragen_core.math.mi", "ragen_core.math.filtering", "ragen_core.math.advantages"):
        try:
            __import__(mod)
            out[mod] = "available"
        except Exception as exc:  # any import failure means "skip"
            out[mod] = f"not available ({type(exc).__name__}: {exc})"
    return out


def seq_proxy_terms(L: np.ndarray) -> np.ndarray:
    """Per-trace sequence-level proxy terms ``[P, G]`` of a cross-score tensor ``L [P, G, P]``,
    ``L[i, k, j] = log pi(z_ik | x_j)`` (:func:`theory_checks.reference.seq_proxy_terms`, which documents them),
    on a checked ``L``: 3-D with ``L.shape[2] == L.shape[0]``, no NaN or +inf (a log-probability of -inf is
    allowed, but not in a trace's own column: its term would be -inf or NaN)."""
    L = require_array("L", L, 3, allow_neg_inf=True)
    if L.shape[2] != L.shape[0]:
        raise ValueError(f"L must have shape [P, G, P] (one column per scoring prompt), got {list(L.shape)}")
    own = np.einsum("iki->ik", L)
    if np.any(own == -np.inf):
        i, k = (int(v) for v in np.argwhere(own == -np.inf)[0])
        raise ValueError(f"L[i, k, i] (a trace scored by its own prompt) must be finite, got -inf at i={i}, k={k}")
    return reference.seq_proxy_terms(L)


@dataclass
class Interval:
    """Mean of n bounded i.i.d. draws with its half-width (see the module docstring): a finite mean, a
    half-width >= 0 (not NaN), n >= 1 draws, lo_range <= hi_range."""

    mean: float
    halfwidth: float
    n: int
    lo_range: float
    hi_range: float

    def __post_init__(self) -> None:
        require_real("mean", self.mean)
        require_real("halfwidth", self.halfwidth, 0.0, finite=False)
        require_int("n", self.n, 1)
        lo, hi = require_real("lo_range", self.lo_range), require_real("hi_range", self.hi_range)
        if lo > hi:
            raise ValueError(f"lo_range must be <= hi_range, got {lo} > {hi}")

    @property
    def lower(self) -> float:
        return self.mean - self.halfwidth

    @property
    def upper(self) -> float:
        return self.mean + self.halfwidth


@dataclass(frozen=True)
class Est:
    """A quantity with a confidence interval [lo, hi] (lo = hi = est for an exact value): numbers, never NaN
    (+-inf allowed), with lo <= hi.  A NaN would make every comparison False, so a bound lhs.lo > rhs.hi could
    never be refuted."""

    est: float
    lo: float
    hi: float

    def __post_init__(self) -> None:
        lo, hi = require_real("lo", self.lo, finite=False), require_real("hi", self.hi, finite=False)
        require_real("est", self.est, finite=False)
        if lo > hi:
            raise ValueError(f"lo must be <= hi, got lo = {lo} > hi = {hi}")

    @classmethod
    def exact(cls, v: float) -> Est:
        return cls(float(v), float(v), float(v))

    @classmethod
    def of(cls, iv: Interval, scale: float = 1.0) -> Est:
        """The interval ``iv`` times ``scale`` (a negative scale swaps the ends)."""
        scale = require_real("scale", scale)
        a, b = iv.lower * scale, iv.upper * scale
        return cls(iv.mean * scale, min(a, b), max(a, b))

    def map(self, f: Any) -> Est:
        """Image under a monotone function (decreasing ones swap the ends)."""
        a, b = f(self.lo), f(self.hi)
        return Est(float(f(self.est)), float(min(a, b)), float(max(a, b)))


@dataclass
class MCBudget:
    """Bonferroni bookkeeping: hands out intervals at level DELTA / M_INTERVALS and counts them.

    ``delta`` in (0, 1) is the total level, ``m`` >= 1 the number of intervals it is split over."""

    delta: float = DELTA
    m: int = M_INTERVALS
    used: int = 0
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.delta = require_real("delta", self.delta, 0.0, 1.0, low_open=True, high_open=True)
        self.m = require_int("m", self.m, 1)
        self.used = require_int("used", self.used, 0)

    def interval(self, y: np.ndarray, lo: float, hi: float, what: str = "") -> Interval:
        """Confidence interval for E y from draws ``y`` (at least 2, finite) known to lie in [lo, hi] (finite,
        lo <= hi); ``AssertionError`` for draws outside it (the interval would not be valid: a simulator that
        breaks its own declared range is a bug, as is asking for more than ``m`` intervals)."""
        y = require_array("y", y, allow_empty=True).ravel()
        n = y.size
        if n < 2:
            raise ValueError(f"y must hold at least 2 draws, got {n}")
        lo, hi = require_real("lo", lo), require_real("hi", hi)
        if lo > hi:
            raise ValueError(f"lo must be <= hi, got lo = {lo} > hi = {hi}")
        tol = 1e-9 * max(1.0, abs(lo), abs(hi))
        if y.min() < lo - tol or y.max() > hi + tol:
            raise AssertionError(f"{what}: draws outside the declared range [{lo}, {hi}]: [{y.min()}, {y.max()}]")
        self.used += 1
        if self.used > self.m:
            raise AssertionError(f"more than M_INTERVALS={self.m} confidence intervals requested")
        di = self.delta / self.m
        R = hi - lo
        hoeff = R * math.sqrt(math.log(4 / di) / (2 * n))
        var = float(np.var(y, ddof=1))
        eb = math.sqrt(2 * var * math.log(8 / di) / n) + 7 * R * math.log(8 / di) / (3 * (n - 1))
        self.log.append(what)
        return Interval(float(y.mean()), min(hoeff, eb), n, lo, hi)


def _validate(
    check_id: str, iv: Interval, exact: float, note: str = "", variants: Mapping[str, float] | None = None
) -> Check:
    """Simulator validation: |mean - exact| <= half-width; ratio = |mean - exact| / half-width.

    Mutants: the exact value off by +-5% (``exact x1.05``, ``exact x0.95``) and every ``variants`` entry
    (a wrong exact value, e.g. a formula with a factor dropped); each is caught when it falls outside the
    interval.  ``detect`` = (half-width + |mean - exact|) / |exact|.
    """
    err = abs(iv.mean - exact)
    ok = err <= iv.halfwidth

    def holds(v: float) -> bool:
        return bool(abs(iv.mean - v) <= iv.halfwidth)

    muts = [("exact x1.05", holds(1.05 * exact)), ("exact x0.95", holds(0.95 * exact))]
    muts += [(label, holds(v)) for label, v in (variants or {}).items()]
    detect = (iv.halfwidth + err) / abs(exact) if exact != 0 else math.inf
    full = f"n={iv.n}, mean={iv.mean:.6g}, exact={exact:.6g}, halfwidth={iv.halfwidth:.3g}" + (
        f"; {note}" if note else ""
    )
    return Check(check_id, iv.mean, exact, bool(ok), err / iv.halfwidth if iv.halfwidth > 0 else 0.0, "mc-validation",
                 False, "monte-carlo", full, tuple(muts), detect)


def _mc_bound(
    check_id: str, lhs: Est, rhs: Est, note: str = "", variants: Mapping[str, tuple[Est, Est]] | None = None
) -> Check:
    """Bound lhs <= rhs between quantities with intervals: violated only when lhs.lo > rhs.hi.

    Mutants: ``rhs x0.5``, ``rhs x0.9`` (caught when lhs.lo > c rhs.hi), ``reversed`` (caught when
    rhs.lo > lhs.hi) and the ``variants``.  ``detect`` = lhs.lo / rhs.hi: every constant below it is refuted.
    """

    def holds(a: Est, b: Est) -> bool:
        return not a.lo > b.hi * (1 + 1e-12) + 1e-300

    scaled = lambda c: Est(rhs.est * c, rhs.lo * c, rhs.hi * c)  # noqa: E731
    muts = [("rhs x0.5", holds(lhs, scaled(0.5))), ("rhs x0.9", holds(lhs, scaled(0.9))), ("reversed", holds(rhs, lhs))]
    muts += [(label, holds(a, b)) for label, (a, b) in (variants or {}).items()]
    ratio = lhs.est / rhs.est if rhs.est > 0 else (math.inf if lhs.est > 0 else 0.0)
    detect = lhs.lo / rhs.hi if rhs.hi > 0 else math.nan
    return Check(
        check_id, lhs.est, rhs.est, holds(lhs, rhs), ratio, "bound", False, "monte-carlo", note, tuple(muts), detect
    )


def _mc_counterexample(
    check_id: str, lhs: Est, rhs: Est, note: str = "", variants: Mapping[str, tuple[Est, Est]] | None = None
) -> Check:
    """A claimed lhs <= rhs is reproduced false only when lhs.lo > rhs.hi.  Mutants: ``reversed`` and ``variants``."""

    def reproduced(a: Est, b: Est) -> bool:
        return bool(a.lo > b.hi)

    muts = [("reversed", reproduced(rhs, lhs))] + [
        (label, reproduced(a, b)) for label, (a, b) in (variants or {}).items()
    ]
    ratio = lhs.est / rhs.est if rhs.est > 0 else math.inf
    return Check(
        check_id, lhs.est, rhs.est, reproduced(lhs, rhs), ratio, "counterexample", False, "monte-carlo", note,
        tuple(muts), lhs.lo / rhs.hi if rhs.hi > 0 else math.nan,
    )


# ------------------------------------------------------------------------------------------- sampling
def _sample(rng: np.random.Generator, probs: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Categorical draws by inverse CDF: indices with P(i) = probs[i]."""
    cdf = np.cumsum(probs)
    cdf[-1] = 1.0
    return np.minimum(np.searchsorted(cdf, rng.random(shape), side="right"), probs.size - 1)


def _draw_group(rng: np.random.Generator, tb: SoftmaxTestbed, x: int, n: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """n groups of G rollouts of prompt x: rewards R [n, G] (Rademacher noise) and scores s [n, G, d]."""
    idx = _sample(rng, tb.probs()[x], (n, G))
    sig = np.sqrt(tb.noise_variance()[x])
    eps = np.where(rng.random((n, G)) < 0.5, -1.0, 1.0) * sig[idx]
    return tb.mu[x][idx] + eps, tb.score()[x][idx]


def _rb_parts(tb: SoftmaxTestbed, x: int) -> tuple[np.ndarray, np.ndarray]:
    """Per outcome z: a_z = (mu_z - b) s_z - g  [Z, d] and the noise term sigma_z^2 ||s_z||^2  [Z]."""
    s = tb.score()[x]
    a = (tb.mu[x] - tb.baseline()[x])[:, None] * s - tb.task_gradient()[x][None, :]
    return a, tb.noise_variance()[x] * np.sum(s * s, axis=1)


def _rb_errors(
    rng: np.random.Generator, tb: SoftmaxTestbed, x: int, n: int, G: int, chunk: int = 100_000
) -> tuple[np.ndarray, float]:
    """n draws of E[||g_hat - g||^2 | z_1..z_G] = ||mean_k a_{z_k}||^2 + sum_k sigma^2 ||s||^2 / G^2 (the
    true-baseline G-sample estimator with the Rademacher noise integrated out exactly), and the upper end
    of their range."""
    a, ns = _rb_parts(tb, x)
    pi = tb.probs()[x]
    out = np.empty(n)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        idx = _sample(rng, pi, (m, G))
        mh = a[idx].mean(axis=1)
        out[start : start + m] = np.sum(mh * mh, axis=1) + ns[idx].sum(axis=1) / G**2
    return out, float(np.max(np.sum(a * a, axis=1)) + np.max(ns) / G)


def _raw_errors(rng: np.random.Generator, tb: SoftmaxTestbed, x: int, n: int, G: int) -> tuple[np.ndarray, float]:
    """n draws of ||g_hat - g||^2 with the noise simulated (no variance reduction), and the range's upper end."""
    R, s = _draw_group(rng, tb, x, n, G)
    ghat = np.mean((R - tb.baseline()[x])[:, :, None] * s, axis=1)
    sc = tb.score()[x]
    amp = np.abs(tb.mu[x] - tb.baseline()[x]) + np.sqrt(tb.noise_variance()[x])
    B = float(np.max(amp * np.linalg.norm(sc, axis=1)) + np.linalg.norm(tb.task_gradient()[x]))
    return np.sum((ghat - tb.task_gradient()[x]) ** 2, axis=1), B * B


def _sized(budget: MCBudget, draw: Any, lo: float, hi: float, what: str, n: int, rounds: int = 3) -> Interval:
    """An interval from ``draw(n)`` (an array of i.i.d. draws in [lo, hi]), redrawn with 4x as many fresh
    draws (up to ``rounds`` times) while its relative half-width exceeds 0.6 TARGET_ERROR, so that the
    validation can detect a 5% error.  Every interval drawn counts against the Bonferroni budget, so the
    last one is valid whatever the stopping rule."""
    iv = budget.interval(draw(n), lo, hi, what)
    for _ in range(rounds - 1):
        if iv.halfwidth <= 0.6 * TARGET_ERROR * abs(iv.mean):
            break
        n *= 4
        iv = budget.interval(draw(n), lo, hi, what + f" (n={n})")
    return iv


# ------------------------------------------------------------------------------------------- T2 / T3
def mc_t2_t3(rng: np.random.Generator, budget: MCBudget, n: int, plot: dict[str, Any]) -> list[Check]:
    """T2 and T3 on the 2-action family (for the plots) and on random single-prompt testbeds."""
    checks: list[Check] = []
    G = 8
    sigma = 0.5
    pts: list[dict[str, float]] = []
    # p = 0.45 is the near-tight configuration that samples something: at p = 1/2 every outcome has the
    # same per-draw error (a_z = 0, equal ||s||^2), so the draws are constant; at p = 0.45 the ratio is
    # sqrt(sigma^2 / ((1 - 2p)^2 + sigma^2)) = 0.981 with draws of positive variance
    cases: list[tuple[str, SoftmaxTestbed]] = [
        (f"2-action p={p}", SoftmaxTestbed.two_action(p, sigma)) for p in (0.1, 0.25, 0.45, 0.5, 0.75, 0.9)
    ]
    for _ in range(4):
        cases.append(("random", SoftmaxTestbed.random(rng, X=1, Z=int(rng.integers(2, 6)), d=int(rng.integers(1, 4)),
                                                      temperature=float(rng.uniform(0.3, 2)),
                                                      sigma_scale=float(rng.uniform(0.2, 2)), mu_offset=0.0)))
    for label, tb in cases:
        hi = _rb_errors(rng, tb, 0, 2, G)[1]
        iv_draws: list[np.ndarray] = []

        def draw(m: int, tb: SoftmaxTestbed = tb, keep: list[np.ndarray] = iv_draws) -> np.ndarray:
            y = _rb_errors(rng, tb, 0, m, G)[0]
            keep[:] = [y]
            return y

        iv = _sized(budget, draw, 0.0, hi, f"T2 {label}", n)
        exact = float(tb.estimator_mse(G)[0])
        checks.append(_validate("mc_mse", iv, exact, f"{label}, G={G}",
                                variants={"drop the noise term": exact - float(
                                    tb.noise_variance()[0] @ (tb.probs()[0] * np.sum(tb.score()[0] ** 2, 1))) / G}))
        gn = float(np.linalg.norm(tb.task_gradient()[0]))
        s2 = float(tb.sigma[0] ** 2)
        rvmu, rv = float(tb.signal_variance()[0]), float(tb.reward_variance()[0])
        mse = Est.of(iv)
        snr = mse.map(lambda v, gn=gn: gn / math.sqrt(max(v, 1e-300)))
        checks.append(_mc_bound("mc_t2_sharper", snr, Est.exact(math.sqrt(G * rvmu / s2)),
                                f"{label}, G={G}, draw variance {float(np.var(iv_draws[0])):.3g}",
                                variants={"drop sqrt(G)": (snr, Est.exact(math.sqrt(rvmu / s2)))}))
        # T3: the population-normalised GRPO estimator is g_hat / sqrt(RV): its MSE is MSE_G / RV
        floor = s2 / rv * float(tb.score_sq_norm()[0]) / G
        grpo = Est.of(iv, 1.0 / rv)
        checks.append(_mc_bound("mc_t3_floor", Est.exact(floor), grpo,
                                f"{label}, K={G}, draw variance {float(np.var(iv_draws[0])):.3g}",
                                variants={"drop 1/K": (Est.exact(floor * G), grpo)}))
        if label.startswith("2-action"):
            pts.append({"p": float(tb.probs()[0, 1]), "rv_mu": rvmu, "rv": rv,
                        "snr": snr.est, "snr_lo": snr.lo, "snr_hi": snr.hi,
                        "grpo_mse": grpo.est, "grpo_lo": grpo.lo, "grpo_hi": grpo.hi})
    plot["snr_points"] = pts
    plot["snr_G"] = G
    plot["snr_sigma"] = sigma
    # heteroscedastic counterexample with simulated noise (G = 1: SNR^2 / G does not depend on G)
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    y, hi = _raw_errors(rng, tb, 0, n, 1)
    iv = budget.interval(y, 0.0, hi, "T2 heteroscedastic counterexample")
    checks.append(_validate("mc_mse_simulated_noise", iv, float(tb.estimator_mse(1)[0]),
                            "heteroscedastic counterexample, G=1"))
    g2 = float(np.sum(tb.task_gradient()[0] ** 2))
    snr2 = Est.of(iv).map(lambda v: g2 / max(v, 1e-300))
    claimed = float(tb.signal_variance()[0] / tb.mean_noise_variance()[0])
    corrected = float(tb.signal_variance()[0] / tb.effective_noise_variance()[0])
    checks.append(_mc_counterexample("mc_t2_sharper_plain_sigma_false", snr2, Est.exact(claimed),
                                     "p=0.4, noise variance 1 on action 0; SNR^2/G vs RV_mu/E sigma^2",
                                     variants={"corrected claim (sigma_eff)": (snr2, Est.exact(corrected))}))
    return checks


# ------------------------------------------------------------------------------------------- T1 sample version
def mc_t1_sample(rng: np.random.Generator, budget: MCBudget, n: int, core: dict[str, str]) -> list[Check]:
    """T1 sample version on every draw, with the RL core's Dr.GRPO advantages and reward_variance when present,
    and the validation E[g_hat] . u = (1 - 1/G) ||g|| of the sample-baseline estimator (noise integrated out,
    advantages of the noiseless rewards mu from the RL core)."""
    checks: list[Check] = []
    use_core = core["ragen_core.math.advantages"] == "available" and core["ragen_core.math.filtering"] == "available"
    if use_core:
        import torch

        from ragen_core.math.advantages import dr_grpo
        from ragen_core.math.filtering import reward_variance
    for G in (2, 2, 4, 8, 16):
        if not checks:  # the equality case first: 2 actions at p = 1/2, G = 2 (opposite scores, A proportional to s)
            tb = SoftmaxTestbed.two_action(0.5, 0.3)
        else:
            # a random testbed on which the validation has power: the projected per-draw term (mu - b) s . u must
            # not be dominated by its spread (chosen from the exact model, never from simulated data)
            for _ in range(50):
                tb = SoftmaxTestbed.random(rng, X=1, Z=int(rng.integers(2, 7)), d=int(rng.integers(1, 4)),
                                           temperature=float(np.exp(rng.uniform(-1, 0.7))),
                                           sigma_scale=float(rng.uniform(0.1, 2)), mu_offset=0.0)
                g0 = tb.task_gradient()[0]
                proj_term = (tb.mu[0] - tb.baseline()[0]) * (tb.score()[0] @ (g0 / max(np.linalg.norm(g0), 1e-300)))
                if np.linalg.norm(g0) ** 2 >= 0.2 * float(tb.probs()[0] @ proj_term**2):
                    break
        R, s = _draw_group(rng, tb, 0, n // 4, G)
        adv_np = R - R.mean(axis=1, keepdims=True)
        var_np = np.var(R, axis=1)
        if use_core:
            Rt = torch.from_numpy(R)
            adv = dr_grpo(Rt).numpy()
            var = reward_variance(Rt, ddof=0).numpy()
            scale = 1e-12 * (1 + np.abs(R).max())
            checks.append(identity("core_dr_grpo", adv, adv_np, atol=scale,
                                   method="monte-carlo",
                                   variants={"mean over the whole batch instead of the group": (
                                                 adv, R - R.mean()),
                                             "GRPO (divided by the group std)": (
                                                 adv, adv_np / (R.std(axis=1, ddof=1, keepdims=True) + 1e-6))}))
            checks.append(identity("core_reward_variance", var, var_np,
                                   atol=1e-12 * (1 + np.abs(R).max()) ** 2, method="monte-carlo",
                                   variants={"ddof = 1": (var * G / (G - 1), var_np)}))
        else:
            adv, var = adv_np, var_np
        ghat = np.mean(adv[:, :, None] * s, axis=1)
        lhs = np.linalg.norm(ghat, axis=1)
        rhs = np.sqrt(var) * np.sqrt(np.mean(np.sum(s * s, axis=2), axis=1))
        atol = 1e-12 * (1 + np.abs(R).max()) * (1 + np.abs(s).max())
        note = f"n={n // 4} draws, G={G}" + ("" if use_core else ", numpy advantages (RL core not available)")
        checks.append(bound("mc_t1_sample", lhs, rhs, atol=atol, method="monte-carlo", note=note))
        # validation: E[(1/G) sum (R_k - Rbar) s_k] . u = (1 - 1/G) ||g||, noise integrated out (it enters linearly)
        g = tb.task_gradient()[0]
        u = g / np.linalg.norm(g)
        su = tb.score()[0] @ u

        def proj(m: int, tb: SoftmaxTestbed = tb, G: int = G, su: np.ndarray = su) -> np.ndarray:
            idx = _sample(rng, tb.probs()[0], (m, G))
            mu = tb.mu[0][idx]
            a_mu = dr_grpo(torch.from_numpy(mu)).numpy() if use_core else mu - mu.mean(axis=1, keepdims=True)
            return np.mean(a_mu * su[idx], axis=1)

        span = float(np.ptp(tb.mu[0]) * np.max(np.abs(su)))
        iv = _sized(budget, proj, -span, span, f"T1 sample mean G={G}", n)
        exact = (1 - 1 / G) * float(np.linalg.norm(g))
        checks.append(_validate("mc_sample_baseline", iv, exact, f"G={G}",
                                variants={"drop the factor (1 - 1/G)": float(np.linalg.norm(g))}))
    return checks


# ------------------------------------------------------------------------------------------- T6
def mc_t6(rng: np.random.Generator, budget: MCBudget, n: int, plot: dict[str, Any]) -> list[Check]:
    """Drift of theta under policy-gradient noise: E||theta_T - theta_0||^2 = eta^2 (T MSE_G + T^2 ||m||^2).

    theta_T - theta_0 = eta sum_t (m + m_hat_t - g + n_t) with n_t the noise part of step t; integrating the
    Rademacher noise out exactly,
    E[||.||^2 | z] = eta^2 (||sum_t (m + m_hat_t - g)||^2 + sum_t sum_k sigma^2 ||s||^2 / G^2).
    """
    checks: list[Check] = []
    tb = SoftmaxTestbed.random(rng, X=1, Z=4, d=3, temperature=1.0, sigma_scale=0.5, mu_offset=0.0)
    G, eta = 4, 0.1
    v = float(tb.estimator_mse(G)[0])
    a, ns = _rb_parts(tb, 0)
    pi = tb.probs()[0]
    ref = softmax(tb.logits() + rng.normal(size=(1, tb.Z)), axis=1)
    kl_dir = -tb.kl_gradient(ref)[0]
    m_reg = kl_dir / np.linalg.norm(kl_dir) * math.sqrt(v)  # a persistent regulariser direction, ||m||^2 = v
    am = float(np.max(np.linalg.norm(a, axis=1)))
    rows = []
    for check_id, label, m in (("mc_t6_drift_diffusive", "m = 0", np.zeros(tb.d)),
                               ("mc_t6_drift_kl", "m = KL direction", m_reg)):
        for T in (1, 2, 4, 8):

            def drift(k: int, T: int = T, m: np.ndarray = m) -> np.ndarray:
                disp = np.zeros((k, tb.d))
                noise = np.zeros(k)
                for _ in range(T):
                    idx = _sample(rng, pi, (k, G))
                    disp += m + a[idx].mean(axis=1)
                    noise += ns[idx].sum(axis=1) / G**2
                return eta**2 * (np.sum(disp * disp, axis=1) + noise)

            hi = eta**2 * ((T * (am + np.linalg.norm(m))) ** 2 + T * float(ns.max()) / G)
            iv = _sized(budget, drift, 0.0, hi, f"T6 {label} T={T}", n, rounds=2)
            exact = eta**2 * (T * v + T**2 * float(m @ m))
            wrong = (
                {"T instead of T^2 on ||m||^2": eta**2 * (T * v + T * float(m @ m))}
                if T > 1 and label != "m = 0"
                else {}
            )
            checks.append(_validate(check_id, iv, exact, f"T={T}", variants=wrong))
            rows.append({"label": label, "T": T, "mean": iv.mean, "lo": iv.lower, "hi": iv.upper, "exact": exact})
    plot["drift"] = rows
    return checks


# ------------------------------------------------------------------------------------------- T7
def mc_t7(rng: np.random.Generator, budget: MCBudget, n: int, core: dict[str, str]) -> list[Check]:
    """T7: the identity for a fixed subset, and its failure when the subset is chosen from the same rollouts."""
    checks: list[Check] = []
    base = SoftmaxTestbed.two_action(0.3, 1.0)
    P, G, k = 6, 4, 3
    tb = SoftmaxTestbed(np.repeat(base.features, P, 0), base.theta, np.repeat(base.mu, P, 0), np.repeat(base.sigma, P))
    sig2 = float(tb.estimator_mse(G)[0])
    # fixed S = the first k groups, noise integrated out: E||mean_S (g_hat_i - g_i)||^2 given the outcomes
    a, ns = _rb_parts(tb, 0)
    idx = _sample(rng, tb.probs()[0], (n, k, G))
    mh = a[idx].mean(axis=2).mean(axis=1)
    y = np.sum(mh * mh, axis=1) + ns[idx].sum(axis=(1, 2)) / (G**2 * k**2)
    hi = float(np.max(np.sum(a * a, axis=1)) + np.max(ns) / (G * k))
    iv = budget.interval(y, 0.0, hi, "T7 fixed subset")
    checks.append(_validate("mc_t7_identity", iv,
                            k * sig2 / k**2, f"P={P}, G={G}, |S|={k}", variants={"1/n instead of 1/n^2": k * sig2 / k}))
    # S chosen from the same rollouts: simulated noise, top-k by sample variance
    m = n // 4
    b, g = tb.baseline()[0], tb.task_gradient()[0]
    R = np.empty((m, P, G))
    S = np.empty((m, P, G, tb.d))
    for x in range(P):
        R[:, x], S[:, x] = _draw_group(rng, tb, x, m, G)
    err = np.mean((R - b)[..., None] * S, axis=2) - g  # [m, P, d]
    mask = _topk_by_variance(R, k)
    if core["ragen_core.math.filtering"] == "available":
        import torch

        from ragen_core.math.filtering import filter_groups

        m_core = min(m, 2000)
        mask_hi = _topk_by_variance(R[:m_core], k, ties="higher")
        agree = agree_hi = 0
        for i in range(m_core):
            res = filter_groups(torch.from_numpy(R[i]), strategy="top_k_abs", value=k)
            agree += int(np.array_equal(res.mask.numpy(), mask[i]))
            agree_hi += int(np.array_equal(res.mask.numpy(), mask_hi[i]))
        # rewards mu +- sigma take 4 values, so tied variances are common and the tie-break rule is tested
        checks.append(identity("core_filter_groups", float(agree),
                               float(m_core), method="monte-carlo",
                               note=f"{m_core} batches, {m_core - agree_hi} of them decided by the tie-break",
                               variants={"ties toward the higher index": (float(agree_hi), float(m_core))}))
    B = float(
        np.max(np.abs(tb.mu[0] - b) + tb.sigma[0]) * np.max(np.linalg.norm(tb.score()[0], axis=1)) + np.linalg.norm(g)
    )
    sel = np.sum(np.sum(err * mask[..., None], axis=1) ** 2, axis=1) / k**2
    iv2 = budget.interval(sel, 0.0, B * B, "T7 selected subset")
    fixed = np.sum(np.sum(err[:, :k], axis=1) ** 2, axis=1) / k**2
    iv3 = budget.interval(fixed, 0.0, B * B, "T7 fixed subset, same draws")
    claimed = sig2 / k
    checks.append(_mc_counterexample("mc_t7_selected_false", Est.of(iv2),
                                     Est.exact(claimed),
                                     f"P={P} equal prompts, G={G}, top-{k} by sample variance; "
                                     f"exact identity value {claimed:.4g}",
                                     variants={"S fixed in advance (the identity's condition)": (Est.of(iv3),
                                                                                                Est.exact(claimed))}))
    return checks


# ------------------------------------------------------------------------------------------- MI proxies
def _transposed_hits(L: np.ndarray) -> np.ndarray:
    """A wrong retrieval (prompt and trace indices swapped): hit[i, k] = 1[argmax_j L[j, k, i] == i]."""
    return (np.argmax(L.transpose(2, 1, 0), axis=2) == np.arange(L.shape[0])[:, None]).astype(float)


def _cross_scores(
    rng: np.random.Generator, sampler: np.ndarray, scorer_log: np.ndarray, G: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sample z_ik ~ sampler[i] and return (L [P, G, P] with L[i,k,j] = scorer_log[j, z_ik], z [P, G])."""
    P = sampler.shape[0]
    z = np.stack([_sample(rng, sampler[i], (G,)) for i in range(P)])
    L = scorer_log[:, z].transpose(1, 2, 0)  # [P, G, P]
    return L, z


def mc_mi(rng: np.random.Generator, budget: MCBudget, G: int, batches: int, core: dict[str, str]) -> list[Check]:
    """Section 2 proxies against the exact I_P, with ragen_core.math.mi.mi_proxies when importable."""
    checks: list[Check] = []
    have_mi = core["ragen_core.math.mi"] == "available"
    if have_mi:
        import torch

        from ragen_core.math.mi import mi_proxies

        def proxies(L: np.ndarray, lengths: np.ndarray | None = None) -> dict[str, Any]:
            n = np.ones(L.shape[:2]) if lengths is None else lengths
            return mi_proxies(torch.from_numpy(L), torch.from_numpy(n))
    P, Z = 8, 12
    logits = rng.normal(size=(P, Z)) * 2.5
    p = softmax(logits, 1)
    logp = np.log(p)
    u = np.full(P, 1.0 / P)
    I_P = channel_mutual_information(u, p)
    lo_term = math.log(P) + float(np.min(logp - np.log(p.sum(axis=0))[None, :]))  # log P + min log r(i|z)

    def seq_units(sampler: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Per rollout index k: the mean over prompts of the sequence term and of the retrieval hit (i.i.d.
        across k), and the cross-score tensors (ragen_core.math.mi's batch mean over all (i, k) is the mean of
        the units of that batch, checked below)."""
        units, hits, Ls = [], [], []
        for _ in range(batches):
            L, _ = _cross_scores(rng, sampler, logp, G)
            t = seq_proxy_terms(L)
            units.append(t.mean(axis=0))
            hits.append(_retrieval_hits(L).mean(axis=0))
            Ls.append(L)
        return np.concatenate(units), np.concatenate(hits), Ls

    # scorer = sampler: E[MI-Seq-Est] = I_P; retrieval accuracy = Bayes accuracy
    unit, hit, Ls = seq_units(p)
    if have_mi:
        outs = [proxies(L) for L in Ls[:4]]
        ours = np.array([seq_proxy_terms(L).mean() for L in Ls[:4]])
        checks.append(identity("core_mi_seq",
                               np.array([o["mi_seq_est"] for o in outs]), ours, atol=1e-12, method="monte-carlo",
                               variants={"log-sum instead of log-mean (drop log P)": (
                                   np.array([o["mi_seq_est"] for o in outs]), ours - math.log(P))}))
        core_acc = np.array([o["retrieval_acc"] for o in outs])
        checks.append(identity("core_retrieval", core_acc,
                               np.array([_retrieval_hits(L).mean() for L in Ls[:4]]), atol=1e-12,
                               method="monte-carlo",
                               variants={"recall@2 instead of the top-1 accuracy": (core_acc, np.array(
                                   [(np.argsort(-L, axis=2, kind="stable")[:, :, :2]
                                     == np.arange(P)[:, None, None]).any(axis=2).mean() for L in Ls[:4]]))}))
    iv = budget.interval(unit, lo_term, math.log(P), "MI seq proxy")
    checks.append(_validate("mc_mi_seq", iv, I_P,
                            f"P={P}, {batches} batches of G={G}",
                            variants={"I(X;Z) with H(Z|X) dropped (= H(Z))":
                                      I_P + float(np.mean([-(r * np.log(r)).sum() for r in p]))}))
    iva = budget.interval(hit, 0.0, 1.0, "MI retrieval")
    checks.append(_validate("mc_retrieval", iva, bayes_accuracy(p), f"P={P}",
                            variants={"chance level 1/P": 1.0 / P}))
    # per-batch bound MI-Seq-Est <= log P: random batches (small G, where it is closest) and disjoint supports
    # (equality)
    small = np.array([seq_proxy_terms(_cross_scores(rng, p, logp, 4)[0]).mean() for _ in range(200)])
    checks.append(bound("mc_mi_seq_below_log_p", small, math.log(P), atol=1e-12, method="monte-carlo"))
    disjoint = np.zeros((P, 2 * P))
    for i in range(P):
        disjoint[i, 2 * i : 2 * i + 2] = (0.3, 0.7)
    with np.errstate(divide="ignore"):
        dlog = np.log(disjoint)
    Ld = [_cross_scores(rng, disjoint, dlog, 16)[0] for _ in range(4)]
    checks.append(bound("mc_mi_seq_below_log_p",
                        np.array([seq_proxy_terms(L).mean() for L in Ld]), math.log(P),
                        atol=1e-12, tight=True, method="monte-carlo",
                        note="disjoint supports: every term equals log P"))
    if have_mi:
        L0 = Ls[0][:, :256]
        lengths = rng.integers(1, 40, size=L0.shape[:2]).astype(np.float64)
        o = proxies(L0, lengths)
        matched, marginal = token_proxy_terms(L0, lengths)
        checks.append(identity("core_token_estimates",
                               np.array([o["cond_entropy_est"], o["marginal_entropy_est"], o["mi_est"]]),
                               np.array([-matched.mean(), -marginal.mean(), (matched - marginal).mean()]), atol=1e-12,
                               method="monte-carlo",
                               variants={"marginal without the 1/P": (
                                   np.array([o["cond_entropy_est"], o["marginal_entropy_est"], o["mi_est"]]),
                                   np.array([-matched.mean(), -(marginal + math.log(P) / lengths).mean(),
                                             (matched - marginal - math.log(P) / lengths).mean()]))}))
        checks.append(identity("core_entropy_decomposition",
                               o["marginal_entropy_est"] - o["cond_entropy_est"], o["mi_est"],
                               atol=1e-12, method="monte-carlo"))
        shift = rng.normal(size=(P, L0.shape[1], 1)) * 50.0
        o_shift = proxies(L0 + shift, lengths)
        checks.append(identity("core_mi_row_shift", o_shift["mi_est"], o["mi_est"],
                               atol=1e-9,
                               method="monte-carlo",
                               variants={"the matched term alone (no log-mean over prompts)": (
                                   -o_shift["cond_entropy_est"], -o["cond_entropy_est"])}))
        checks.append(identity("core_retrieval_row_shift", o_shift["retrieval_acc"],
                               o["retrieval_acc"], atol=1e-12, method="monte-carlo",
                               variants={"prompt and trace indices swapped (argmax_j L[j, k, i])": (
                                   _transposed_hits(L0 + shift).mean(), _transposed_hits(L0).mean())}))
        checks.append(identity("core_single_token", proxies(L0)["mi_est"],
                               proxies(L0)["mi_seq_est"], atol=1e-12, method="monte-carlo"))
        Lsmall = [_cross_scores(rng, p, logp, 4)[0] for _ in range(20)]
        core_small = np.array([proxies(L)["mi_seq_est"] for L in Lsmall])

        def mean_of_logs(L: np.ndarray) -> float:
            """A wrong proxy: the log-mean-exp over prompts replaced by the mean of the log-probs (Jensen)."""
            with np.errstate(invalid="ignore"):
                return float(np.mean(np.einsum("iki->ik", L) - L.mean(axis=2)))

        wrong = "log-mean-exp over prompts replaced by the mean of the log-probs"
        checks.append(bound("core_mi_seq_below_log_p", core_small, math.log(P), atol=1e-12,
                            method="monte-carlo",
                            variants={wrong: (np.array([mean_of_logs(L) for L in Lsmall]), math.log(P))}))
        checks.append(bound("core_mi_seq_below_log_p",
                            np.array([proxies(L)["mi_seq_est"] for L in Ld]), math.log(P), atol=1e-12, tight=True,
                            method="monte-carlo", note="disjoint supports",
                            variants={wrong: (np.array([mean_of_logs(L) for L in Ld]), math.log(P))}))
    # sampler at temperature T != 1, scorer at T = 1: the exact expectation sum_i q_i . (log p_i - log mean_j p_j)
    for T in (0.5, 1.5):
        q = softmax(logits / T, 1)
        units_q, _, Ls_q = seq_units(q)
        ivq = budget.interval(units_q, lo_term, math.log(P), f"MI T={T}")
        exact_q = expected_seq_proxy(q, p)
        checks.append(_validate("mc_mi_seq_temperature", ivq, exact_q, f"T={T}",
                                variants={"I_P(sampler) (scorer = sampler)": channel_mutual_information(u, q)}))
        if have_mi:
            checks.append(identity("core_mi_seq",
                                   np.array([proxies(L)["mi_seq_est"] for L in Ls_q[:2]]),
                                   np.array([seq_proxy_terms(L).mean() for L in Ls_q[:2]]), atol=1e-12,
                                   method="monte-carlo"))
    # exact collapse: identical p(z|x); scorer = sampler gives 0 on every draw; arbitrary scorer gives 1/P
    pz = softmax(rng.normal(size=Z), 0)
    coll = np.repeat(pz[None, :], P, 0)
    # an arbitrary scorer with integer scores, so that ties are common and the tie-break rule is tested
    arbitrary = np.round(np.log(softmax(rng.normal(size=(P, Z)) * 2, 1)) / 2)
    zero_terms, accs, accs_core, zero_core, accs_hi = [], [], [], [], []
    for _ in range(32):
        L0, z = _cross_scores(rng, coll, np.log(coll), 1024)
        zero_terms.append(seq_proxy_terms(L0).mean())
        La = arbitrary[:, z].transpose(1, 2, 0)
        accs.append(_retrieval_hits(La).mean(axis=0))
        if have_mi and len(zero_core) < 4:
            zero_core.append(proxies(L0)["mi_seq_est"])
            accs_core.append(proxies(La)["retrieval_acc"])
            accs_hi.append((_retrieval_hits(La, ties="lower").mean(), _retrieval_hits(La, ties="higher").mean()))
    zero_terms_a = np.array(zero_terms)
    checks.append(identity("mc_collapse_mi_seq", zero_terms_a, 0.0, atol=1e-12,
                           method="monte-carlo",
                           variants={"log-sum instead of log-mean (drop log P)": (zero_terms_a - math.log(P), 0.0)}))
    iv0 = budget.interval(np.concatenate(accs), 0.0, 1.0, "collapse acc")
    checks.append(_validate("mc_collapse_retrieval", iv0, 1.0 / P,
                            "holds for any winner function"))
    if have_mi:
        checks.append(identity("core_collapse_mi_seq", np.array(zero_core), 0.0,
                               atol=1e-12, method="monte-carlo",
                               variants={"log-sum instead of log-mean (drop log P)": (
                                   np.array(zero_core) - math.log(P), 0.0)}))
        tied = float(np.mean([np.mean(np.sum(La_k == La_k.max(axis=2, keepdims=True), axis=2) > 1)
                              for La_k in [arbitrary[:, z].transpose(1, 2, 0)]]))
        checks.append(identity("core_collapse_retrieval", np.array(accs_core),
                               np.array([a.mean() for a in accs[:4]]), atol=1e-12, method="monte-carlo",
                               note=f"integer scorer: {tied:.0%} of the traces of the last batch have a tied maximum",
                               variants={"ties toward the lower index": (np.array(accs_core),
                                                                         np.array([a[0] for a in accs_hi])),
                                         "ties toward the higher index": (np.array(accs_core),
                                                                          np.array([a[1] for a in accs_hi]))}))
    else:
        checks.append(Check("core_mi_skipped", math.nan, math.nan, True, math.nan, "skipped",
                            False, "monte-carlo", core["ragen_core.math.mi"]))
    return checks


# ------------------------------------------------------------------------------------------- runner
def run_montecarlo(rng: np.random.Generator, quick: bool = False) -> tuple[list[Check], dict[str, Any]]:
    """All Monte Carlo checks; returns (checks, plot data).  ``quick`` uses fewer draws, still sized so that
    every validation detects a 5% error of its exact value."""
    rng, quick = require_rng("rng", rng), require_bool("quick", quick)
    budget = MCBudget()
    core = core_available()
    plot: dict[str, Any] = {"core": core}
    n = 200_000 if quick else 600_000
    checks: list[Check] = []
    checks += mc_t2_t3(rng, budget, n, plot)
    checks += mc_t1_sample(rng, budget, n, core)
    checks += mc_t6(rng, budget, int(1.5 * n), plot)
    checks += mc_t7(rng, budget, n, core)
    checks += mc_mi(rng, budget, G=8192, batches=16 if quick else 48, core=core)
    plot["intervals_used"] = budget.used
    plot["delta"] = budget.delta
    plot["m_intervals"] = budget.m
    return checks, plot
