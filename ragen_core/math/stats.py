"""Confidence intervals for learning results: a mean over seeds, a paired gain over held-out episodes.

- :func:`t_quantile`: Student-t quantile (bisection on the CDF, ``F(t) = 1 - I_x(df/2, 1/2) / 2`` with
  ``x = df / (df + t^2)`` for t >= 0, the regularised incomplete beta from mpmath, which sympy ships).
- :func:`mean_ci`: the t-interval ``mean +- t_{(1+level)/2, n-1} * s / sqrt(n)`` (s with ddof = 1), e.g. the mean
  gain of three training seeds.
- :func:`paired_ci`: the same interval on per-item differences ``after_j - before_j`` (the same held-out episodes
  before and after training), which removes the between-episode variance from the comparison.

With n = 1 there is no spread to estimate: the bounds are NaN, never a fake zero-width interval.

Power of a paired comparison (how many seeds a study needs, and what it could have detected):

- :func:`paired_power`: the exact power of the two-sided paired t-test at level alpha for a true mean difference
  `effect` with paired standard deviation `sd` over `n` pairs, from the noncentral t distribution
  (``T = (Z + lam) / sqrt(V / df)``, ``lam = effect * sqrt(n) / sd``, ``V ~ chi2(df)``, ``df = n - 1``):

      power = E_V[ Phi(-c sqrt(V/df) + lam) + Phi(-c sqrt(V/df) - lam) ],   c = t_{1 - alpha/2, df}

  integrated over the chi-square density with mpmath;
- :func:`min_detectable_effect`: the smallest `effect` with ``paired_power >= power`` (bisection);
- :func:`pairs_needed`: the smallest ``n >= 2`` with ``paired_power >= power``.

Equivalence (two one-sided tests, TOST: "the difference lies within +-B"):

- :func:`equivalence_power`: the exact probability that the ``1 - 2 alpha`` t-interval of the mean of `n` paired
  differences (true mean `effect`, SD `sd`) lies inside ``[-B, +B]``. With ``delta = sd / sqrt(n)``,
  ``c = t_{1 - alpha, df}`` and ``U ~ chi(df)`` (so that ``s / sqrt(n) = delta U / sqrt(df)``), the interval is
  inside when ``-B + c delta U / sqrt(df) < d_bar < B - c delta U / sqrt(df)``, hence

      power = E_U[ max(0, Phi((B - effect) / delta - c U / sqrt(df)) - Phi((-B - effect) / delta + c U / sqrt(df))) ]

  integrated over the chi density on ``[0, u_max]``, ``u_max = (B / delta) sqrt(df) / c`` (beyond it the
  interval is wider than the bounds). At ``|effect| = B`` it is at most alpha (the test's size);
- :func:`pairs_needed_equivalence`: the smallest ``n >= 2`` with ``equivalence_power >= power``.

Planning a study: :func:`seed_plan`, the pairs a comparison needs to both detect an effect and conclude
equivalence within it (each with the given power), between a floor and a cap. This module holds the project's
only power computations; the apps call them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist

import mpmath

__all__ = ["t_quantile", "mean_ci", "paired_ci", "paired_power", "min_detectable_effect", "pairs_needed",
           "equivalence_power", "pairs_needed_equivalence", "SeedPlan", "seed_plan", "wilson_interval",
           "wilson_of_share"]


def _t_tail(t: float, df: float) -> float:
    """``P(T > |t|)``, the upper tail of Student's t at ``|t|`` (``I_x(df/2, 1/2) / 2``, ``x = df / (df + t^2)``)."""
    tt = t * t
    # Beyond t ~ 1e150 (small df has quantiles that large) t^2 overflows and x underflows: x in mpmath's exponent range
    x = df / (df + tt) if tt < 1e300 else mpmath.mpf(df) / (df + mpmath.mpf(t) ** 2)
    return 0.5 * float(mpmath.betainc(df / 2.0, 0.5, 0.0, x, regularized=True))


def _t_cdf(t: float, df: float) -> float:
    tail = _t_tail(t, df)
    return 1.0 - tail if t >= 0 else tail


#: Below this tail probability the quantile is found on the tail itself: ``1 - tail`` keeps only ~1e-16 of it
#: absolutely, which is a relative error above 1e-12 (and p < 1e-16 would round 1 - p to 1).
_FAR_TAIL = 1e-4


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` > 0 degrees of freedom (p in (0, 1); ``df = inf`` is the normal),
    to ~1e-12 relative, in the far tails too."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1); got {p!r}")
    if not df > 0:
        raise ValueError(f"df must be > 0; got {df!r}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    q = p if p < 0.5 else 1.0 - p  # the tail probability beyond the quantile (1 - p is exact for p >= 0.5)
    if q < _FAR_TAIL:
        t = _bisect(lambda x: _t_tail(x, df) > q, p, df)
        return t if p > 0.5 else -t
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    return _bisect(lambda x: _t_cdf(x, df) < p, p, df)


def _bisect(below: Callable[[float], bool], p: float, df: float) -> float:
    """The t >= 0 where `below` (true below the quantile) turns false: doubling, then bisection to ~1e-13."""
    lo, hi = 0.0, 1.0
    while below(hi):
        hi *= 2.0
        if math.isinf(hi):
            raise ValueError(f"the {p!r}-quantile of t with df {df!r} is beyond the float range")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the t-interval of the mean of `values` at confidence `level` (NaN bounds if n < 2)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_ci needs at least one value")
    if any(not math.isfinite(v) for v in xs):
        raise ValueError(f"values must be finite; got {xs}")
    n = len(xs)
    mean = sum(xs) / n
    try:
        sd = math.sqrt(sum((v - mean) ** 2 for v in xs) / (n - 1)) if n > 1 else 0.0
    except OverflowError:
        sd = math.inf
    if not (math.isfinite(mean) and math.isfinite(sd)):  # finite values near the float limit: no usable interval
        raise ValueError(f"values are too large: their mean or spread overflows a float; got {xs}")
    if n < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_ci(before: Sequence[float], after: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean gain, low, high)`` of ``after - before`` item by item (equal lengths: the same episodes)."""
    if len(before) != len(after):
        raise ValueError(f"before and after must pair up item by item; got {len(before)} and {len(after)} items")
    return mean_ci([float(a) - float(b) for b, a in zip(before, after)], level)


def _check_power_args(sd: float, n: int, alpha: float) -> None:
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd must be finite and > 0; got {sd!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (a paired t-test needs 2 pairs); got {n!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")


def _check_effect(effect: float) -> float:
    """`effect` as a float; a NaN or infinite effect has no power (NaN would read as power NaN or 0)."""
    if isinstance(effect, bool) or not isinstance(effect, (int, float)) or not math.isfinite(effect):
        raise ValueError(f"effect must be a finite number; got {effect!r}")
    return float(effect)


def _check_target_power(power: float, alpha: float) -> None:
    if not alpha < power < 1.0:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha!r}, 1); got {power!r}")


def _check_max_n(max_n: int) -> None:
    if isinstance(max_n, bool) or not isinstance(max_n, int) or max_n < 2:
        raise ValueError(f"max_n must be an integer >= 2; got {max_n!r}")


#: Simpson's fixed grid (4000 panels on [0, sqrt(df) + 12]) is kept while its panel is at most 1/20 of the width
#: of the integrand's steps (sqrt(df) / c: a small alpha at few pairs makes c large) and at most 0.25 (the chi
#: density's SD is ~0.7: a million pairs make the range long); beyond that the integral is taken adaptively.
_MIN_PANELS_PER_STEP = 20
_MAX_PANEL = 0.25


def _grid_resolves(df: int, top: float, c: float, m: int = 4000) -> bool:
    """Whether Simpson's `m` panels on [0, top] resolve the steps (width sqrt(df) / c) and the chi density."""
    h = top / m
    return h * _MIN_PANELS_PER_STEP <= math.sqrt(df) / c and h <= _MAX_PANEL


def _chi_pdf(df: int, u: float) -> float:
    """The chi density with `df` degrees of freedom at u >= 0."""
    if u <= 0.0:
        return math.sqrt(2.0 / math.pi) if df == 1 else 0.0
    log_norm = (df / 2.0 - 1.0) * math.log(2.0) + math.lgamma(df / 2.0)
    return math.exp((df - 1) * math.log(u) - u * u / 2.0 - log_norm)


def _chi_quad(df: int, top: float, f: Callable[[float], float], points: Sequence[float]) -> float:
    """``int_0^top chi_df(u) f(u) du`` by mpmath's adaptive quadrature, split at `points` (the integrand's steps,
    where it is sharp) and restricted to the chi density's bulk ``sqrt(df) +- 12`` (the rest holds < 1e-30)."""
    a, b = max(0.0, math.sqrt(df) - 12.0), min(top, math.sqrt(df) + 12.0)
    if b <= a:
        return 0.0
    knots = sorted({a, b, *(x for x in points if a < x < b)})
    return float(mpmath.quad(lambda u: _chi_pdf(df, float(u)) * f(float(u)), knots))


def paired_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Exact power of the two-sided paired t-test (level `alpha`, `n` pairs) when the mean difference is `effect`
    and the differences have standard deviation `sd` (see the module docstring)."""
    _check_power_args(sd, n, alpha)
    effect = _check_effect(effect)
    df = n - 1
    c = t_quantile(1.0 - alpha / 2.0, df)
    lam = abs(effect) * math.sqrt(n) / sd
    # V = U^2 with U ~ chi(df): the chi density u^(df-1) exp(-u^2/2) / (2^(df/2-1) Gamma(df/2)) is smooth at 0 for
    # every df >= 1, so composite Simpson on [0, sqrt(df) + 12] (the tail beyond holds < 1e-30) is accurate to
    # ~1e-10 with 4000 panels.
    m = 4000
    top = math.sqrt(df) + 12.0
    if not _grid_resolves(df, top, c, m):
        scale = c / math.sqrt(df)
        return _chi_quad(df, top, lambda u: _phi(lam - scale * u) + _phi(-lam - scale * u), [lam / scale])
    total = 0.0
    for u, dens, weight in _chi_nodes(df, top, m):
        if u == 0.0:
            continue  # the density is 0 at u = 0 for df >= 2 and finite for df = 1: its Simpson weight is h/3
        x = c * u / math.sqrt(df)
        val = dens * (_phi(lam - x) + _phi(-lam - x))
        total += val * weight
    h = top / m
    if df == 1:  # chi(1) density at 0 is sqrt(2/pi); both tails there are Phi(lam) + Phi(-lam) = 1
        total += math.sqrt(2.0 / math.pi)
    return total * h / 3.0


def _phi(x: float) -> float:
    """The standard normal CDF."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def min_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest mean difference the paired t-test detects with probability `power` (to ~1e-6 relative)."""
    _check_power_args(sd, n, alpha)
    _check_target_power(power, alpha)
    lo, hi = 0.0, sd
    while paired_power(hi, sd, n, alpha) < power:
        hi *= 2.0
        if hi > 1e12 * sd:  # the power is 1 to within the integral's accuracy long before: never reached
            raise ValueError(f"power {power!r} is beyond what the power computation resolves (~1 - 1e-9)")
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        if paired_power(mid, sd, n, alpha) < power:
            lo = mid
        else:
            hi = mid
    return hi


def pairs_needed(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 10_000) -> int:
    """The smallest number of pairs n >= 2 whose paired t-test detects `effect` with probability `power`.

    The power rises with n, so the search starts at the normal approximation
    ``n ~ ((z_{1 - alpha/2} + z_power) sd / effect)^2`` and steps to the exact boundary of :func:`paired_power`."""
    _check_power_args(sd, 2, alpha)
    effect = _check_effect(effect)
    _check_target_power(power, alpha)
    _check_max_n(max_n)
    if not effect:
        raise ValueError("effect must be non-zero (no finite study detects a zero difference)")
    d = abs(effect) / sd
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0) + NormalDist().inv_cdf(power)
    guess = (z / d) ** 2
    if guess > 2 * max_n:
        raise ValueError(f"more than {max_n} pairs needed for effect {effect} with sd {sd}")
    n = min(max(math.ceil(guess), 2), max_n)
    if _power_std(d, n, alpha) >= power:
        while n > 2 and _power_std(d, n - 1, alpha) >= power:
            n -= 1
        return n
    while n < max_n:
        n += 1
        if _power_std(d, n, alpha) >= power:
            return n
    raise ValueError(f"more than {max_n} pairs needed for effect {effect} with sd {sd}")


@cache
def _power_std(d: float, n: int, alpha: float) -> float:
    """:func:`paired_power` of a standardised effect `d` (the power depends on effect / sd only), cached."""
    return paired_power(d, 1.0, n, alpha)


def _chi_simpson(df: int, top: float, f, m: int = 4000) -> float:
    """``int_0^top chi_df(u) f(u) du`` by composite Simpson with `m` panels (m even). The chi density
    ``u^(df-1) exp(-u^2/2) / (2^(df/2-1) Gamma(df/2))`` is smooth on [0, top] for every df >= 1; at u = 0 it is
    sqrt(2/pi) for df = 1 and 0 otherwise."""
    if top <= 0.0:
        return 0.0
    total = 0.0
    for u, dens, weight in _chi_nodes(df, top, m):
        total += dens * f(u) * weight
    return total * (top / m) / 3.0


def _chi_nodes(df: int, top: float, m: int) -> Iterator[tuple[float, float, int]]:
    """The nodes of composite Simpson with `m` panels on [0, top]: ``(u, chi_df density at u, Simpson weight)``
    (weights 1, 4, 2, ..., 4, 1; the whole rule is ``h / 3 * sum(weight * density * f(u))`` with ``h = top / m``).
    The chi density ``u^(df-1) exp(-u^2/2) / (2^(df/2-1) Gamma(df/2))`` is sqrt(2/pi) at u = 0 for df = 1, else 0."""
    h = top / m
    log_norm = (df / 2.0 - 1.0) * math.log(2.0) + math.lgamma(df / 2.0)
    for i in range(m + 1):
        u = i * h
        if u == 0.0:
            dens = math.sqrt(2.0 / math.pi) if df == 1 else 0.0
        else:
            dens = math.exp((df - 1) * math.log(u) - u * u / 2.0 - log_norm)
        yield u, dens, (1 if i in (0, m) else (4 if i % 2 else 2))


def equivalence_power(effect: float, sd: float, n: int, bound: float, alpha: float = 0.05) -> float:
    """Exact probability that TOST at level `alpha` (the ``1 - 2 alpha`` t-interval inside ``[-bound, +bound]``)
    concludes equivalence over `n` pairs whose differences have mean `effect` and SD `sd` (module docstring)."""
    _check_power_args(sd, n, alpha)
    effect = _check_effect(effect)
    _check_bound(bound)
    if not alpha < 0.5:
        raise ValueError(f"alpha must be < 0.5 (the interval has level 1 - 2 alpha); got {alpha!r}")
    df = n - 1
    c = t_quantile(1.0 - alpha, df)
    delta = sd / math.sqrt(n)
    hi, lo = (bound - effect) / delta, (-bound - effect) / delta
    scale = c / math.sqrt(df)
    # Beyond u_max the interval is wider than [-B, B]; the chi tail beyond sqrt(df) + 12 holds < 1e-30.
    top = min(bound / delta / scale, math.sqrt(df) + 12.0)
    def inside(u: float) -> float:
        return max(0.0, _phi(hi - scale * u) - _phi(lo + scale * u))
    if top > 0.0 and not _grid_resolves(df, top, c):
        return _chi_quad(df, top, inside, [hi / scale, -lo / scale])
    return _chi_simpson(df, top, inside)


def _check_bound(bound: float) -> None:
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound must be a finite number > 0; got {bound!r}")


def pairs_needed_equivalence(sd: float, bound: float, effect: float = 0.0, alpha: float = 0.05, power: float = 0.8,
                             max_n: int = 10_000) -> int | None:
    """The smallest number of pairs n >= 2 whose TOST concludes equivalence within +-`bound` with probability
    `power` when the true mean difference is `effect` (|effect| < bound); None when more than `max_n` are needed.
    The power rises with n (for |effect| < bound) once it is above its value at 2 pairs (with sd far above the
    bound it first dips: a lucky small s at 2 pairs), so after n = 2 the answer is found by doubling, then
    bisection."""
    _check_power_args(sd, 2, alpha)
    effect = _check_effect(effect)
    _check_bound(bound)
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1); got {power!r}")
    _check_max_n(max_n)
    if not abs(effect) < bound:
        raise ValueError(f"need |effect| < bound (at the bound the power is at most alpha); got {effect}, {bound}")
    if equivalence_power(effect, sd, 2, bound, alpha) >= power:
        return 2
    lo, hi = 2, 4
    while equivalence_power(effect, sd, hi, bound, alpha) < power:
        if hi >= max_n:
            return None
        lo, hi = hi, min(2 * hi, max_n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if equivalence_power(effect, sd, mid, bound, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class SeedPlan:
    """The seeds of a planned paired comparison (:func:`seed_plan`): the pilot's paired `sd`, the pairs needed to
    detect the effect (`n_detect`) and to conclude equivalence within it (`n_equiv`; None: more than the search
    allows, or no usable SD), the plan `n`, whether the cap bound it (`capped`) and the effect `n` detects at the
    power (`mde`); `effect`, `limits`, `alpha`, `power` as asked."""

    sd: float | None
    n_detect: int | None
    n_equiv: int | None
    n: int
    capped: bool
    mde: float | None
    effect: float
    limits: tuple[int, int]
    alpha: float
    power: float

    def as_dict(self) -> dict:
        return {"sd": self.sd, "n_detect": self.n_detect, "n_equiv": self.n_equiv, "n": self.n, "capped": self.capped,
                "mde": self.mde, "effect": self.effect, "limits": list(self.limits), "alpha": self.alpha,
                "power": self.power}


def seed_plan(sd: float | None, effect: float, limits: tuple[int, int], alpha: float = 0.05, power: float = 0.8,
              max_n: int = 1000) -> SeedPlan:
    """Pairs for a comparison whose paired SD is `sd` (from a pilot): ``n = min(max(n_detect, n_equiv, lo), hi)``
    with ``n_detect`` = :func:`pairs_needed` (two-sided test at `alpha` detects `effect` with `power`) and
    ``n_equiv`` = :func:`pairs_needed_equivalence` (TOST at `alpha` within +-`effect` concludes equivalence with
    `power` when the true difference is 0). Without a usable SD (None, 0 or not finite) the plan is the cap.
    `effect` must be finite and non-zero (it is the equivalence bound too), `limits` integers ``2 <= lo <= hi``."""
    lo, hi = _check_limits(limits)
    if _check_effect(effect) == 0.0:
        raise ValueError("effect must be non-zero (it is also the equivalence bound +-|effect|)")
    if sd is None or not math.isfinite(sd) or sd <= 0:
        return SeedPlan(sd, None, None, hi, True, None, effect, (lo, hi), alpha, power)
    try:
        n_detect: int | None = pairs_needed(effect, sd, alpha=alpha, power=power, max_n=max_n)
    except ValueError:
        n_detect = None
    n_equiv = pairs_needed_equivalence(sd, abs(effect), alpha=alpha, power=power, max_n=max_n)
    need = max(hi + 1 if n_detect is None else n_detect, hi + 1 if n_equiv is None else n_equiv)
    n = min(max(need, lo), hi)
    return SeedPlan(sd, n_detect, n_equiv, n, need > hi, min_detectable_effect(sd, n, alpha, power), effect,
                    (lo, hi), alpha, power)


def _check_limits(limits: tuple[int, int]) -> tuple[int, int]:
    """`limits` as ``(lo, hi)``: integers with ``2 <= lo <= hi`` (a paired t-test needs 2 pairs)."""
    try:
        lo, hi = limits
    except (TypeError, ValueError):
        raise ValueError(f"limits must be a pair (lo, hi); got {limits!r}") from None
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (lo, hi)) or not 2 <= lo <= hi:
        raise ValueError(f"limits must be integers with 2 <= lo <= hi; got {limits!r}")
    return lo, hi


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion k / n: the p with ``|k/n - p| <= z sqrt(p (1 - p) / n)``,

        center = (p_hat + z^2 / 2n) / (1 + z^2 / n),   half = z sqrt(p_hat (1 - p_hat) / n + z^2 / 4n^2) / (1 + z^2 / n)

    with z the two-sided normal quantile of `level` (1.96 for 95%). Unlike the Wald interval it stays inside
    [0, 1] and is not empty at k = 0 or k = n. ``n = 0`` gives (0, 1): nothing is known."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n; got k={k}, n={n}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    if n == 0:
        return 0.0, 1.0
    return wilson_of_share(k / n, n, level)


def wilson_of_share(p: float, n: float, level: float) -> tuple[float, float]:
    """Wilson's interval of a proportion `p` observed on `n` trials (`n` > 0, possibly not an integer)."""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # The bounds are exactly 0 at p = 0 and 1 at p = 1 (center -/+ half cancel); say so rather than round to 1e-17.
    return (0.0 if p == 0 else max(0.0, center - half)), (1.0 if p == 1 else min(1.0, center + half))
