"""The exact power of the equivalence test (TOST) against a Monte Carlo simulation, the normal limit and its size
at the bound; the seeds it needs against a plain search."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from ragen_core.math.stats import equivalence_power, pairs_needed_equivalence

# One-sided 95% t critical values from standard tables (independent of the code under test).
T_95 = {4: 2.131846786326649, 9: 1.833112932653634, 19: 1.729132811521367}


def simulated_tost(effect: float, sd: float, n: int, bound: float, sims: int, seed: int) -> float:
    """Share of simulated studies whose 90% t-interval of the mean difference lies inside [-bound, bound]."""
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, sd, size=(sims, n))
    mean = d.mean(axis=1)
    half = T_95[n - 1] * d.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean((mean - half > -bound) & (mean + half < bound)))


@pytest.mark.parametrize("effect,sd,n,bound", [(0.0, 0.1, 5, 0.15), (0.05, 0.1, 10, 0.15), (-0.05, 0.1, 10, 0.15),
                                               (0.0, 6.0, 20, 10.0), (0.15, 0.05, 10, 0.15), (0.0, 0.3, 5, 0.15)])
def test_power_matches_a_simulation(effect, sd, n, bound):
    sims = 40_000
    sim = simulated_tost(effect, sd, n, bound, sims, seed=int(1000 * sd) + n)
    exact = equivalence_power(effect, sd, n, bound)
    se = math.sqrt(max(exact * (1 - exact), 1e-4) / sims)
    assert abs(sim - exact) < 4 * se, (sim, exact)


def test_power_tends_to_the_normal_formula():
    # Large n: s is sd and t_{0.95} is z_{0.95}, so the power is Phi((B - mu)/delta - z) - Phi((-B - mu)/delta + z).
    effect, sd, n, bound = 0.02, 1.0, 4000, 0.06
    delta, z = sd / math.sqrt(n), NormalDist().inv_cdf(0.95)
    normal = NormalDist().cdf((bound - effect) / delta - z) - NormalDist().cdf((-bound - effect) / delta + z)
    assert equivalence_power(effect, sd, n, bound) == pytest.approx(normal, abs=2e-3)


def test_size_at_the_bound_is_at_most_alpha():
    # At |effect| = B only the one-sided test at that bound can fail to reject: the size tends to alpha from below
    # as the interval narrows, and stays below it for wide intervals.
    for sd, n in ((0.01, 40), (0.05, 10), (0.2, 5)):
        p = equivalence_power(0.15, sd, n, 0.15)
        assert p <= 0.05 + 1e-9
        assert equivalence_power(-0.15, sd, n, 0.15) == pytest.approx(p, abs=1e-12)
    assert equivalence_power(0.15, 0.001, 40, 0.15) == pytest.approx(0.05, abs=1e-4)
    # The wider the interval relative to the bounds, the more rarely it fits: the size falls with sd.
    sizes = [equivalence_power(0.15, sd, 5, 0.15) for sd in (0.05, 0.2, 0.5, 1.0)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < 1e-3


def test_pairs_needed_is_the_smallest_n_that_reaches_the_power():
    for sd, bound in ((0.108, 0.15), (0.15, 0.15), (6.4, 10.0)):
        n = pairs_needed_equivalence(sd, bound)
        assert equivalence_power(0.0, sd, n, bound) >= 0.8
        assert n == 2 or equivalence_power(0.0, sd, n - 1, bound) < 0.8
        first = next(k for k in range(2, 200) if equivalence_power(0.0, sd, k, bound) >= 0.8)
        assert n == first
    assert pairs_needed_equivalence(100.0, 0.01, max_n=50) is None


def test_bad_arguments():
    with pytest.raises(ValueError, match="bound"):
        equivalence_power(0.0, 1.0, 5, 0.0)
    with pytest.raises(ValueError, match="n must be"):
        equivalence_power(0.0, 1.0, 1, 0.5)
    with pytest.raises(ValueError, match="effect"):
        pairs_needed_equivalence(1.0, 0.5, effect=0.5)
