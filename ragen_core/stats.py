"""Confidence intervals for learning results: a mean over seeds, a paired gain over held-out episodes.

- :func:`t_quantile`: Student-t quantile (bisection on the CDF, ``F(t) = 1 - I_x(df/2, 1/2) / 2`` with
  ``x = df / (df + t^2)`` for t >= 0, the regularised incomplete beta from mpmath, which sympy ships).
- :func:`mean_ci`: the t-interval ``mean +- t_{(1+level)/2, n-1} * s / sqrt(n)`` (s with ddof = 1), e.g. the mean
  gain of three training seeds.
- :func:`paired_ci`: the same interval on per-item differences ``after_j - before_j`` (the same held-out episodes
  before and after training), which removes the between-episode variance from the comparison.

With n = 1 there is no spread to estimate: the bounds are NaN, never a fake zero-width interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mpmath

__all__ = ["t_quantile", "mean_ci", "paired_ci"]


def _t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * float(mpmath.betainc(df / 2.0, 0.5, 0.0, x, regularized=True))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` > 0 degrees of freedom (p in (0, 1)), to ~1e-12."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1); got {p!r}")
    if not df > 0:
        raise ValueError(f"df must be > 0; got {df!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_cdf(mid, df) < p:
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
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in xs) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_ci(before: Sequence[float], after: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean gain, low, high)`` of ``after - before`` item by item (equal lengths: the same episodes)."""
    if len(before) != len(after):
        raise ValueError(f"before and after must pair up item by item; got {len(before)} and {len(after)} items")
    return mean_ci([float(a) - float(b) for b, a in zip(before, after)], level)
