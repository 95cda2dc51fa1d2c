"""Confidence intervals against published Student-t quantiles and hand-computed intervals."""

from __future__ import annotations

import math

import pytest

from ragen_core.math.stats import mean_ci, paired_ci, t_quantile

# Two-sided 95% critical values from standard t tables (independent of the code under test).
T_975 = {1: 12.706204736174707, 2: 4.302652729749464, 5: 2.570581835636314, 10: 2.228138851986274,
         30: 2.042272456301238}


@pytest.mark.parametrize("df,expected", sorted(T_975.items()))
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-9)
    assert t_quantile(0.025, df) == pytest.approx(-expected, rel=1e-9)


def test_t_quantile_tends_to_the_normal():
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959963984540054, rel=1e-6)
    assert t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-12)


def test_mean_ci_by_hand():
    # mean 0.2, s = 0.1, n = 3: half-width = 4.3027 * 0.1 / sqrt(3) = 0.248415...
    mean, lo, hi = mean_ci([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2)
    assert hi - mean == pytest.approx(4.302652729749464 * 0.1 / math.sqrt(3), rel=1e-9)
    assert mean - lo == pytest.approx(hi - mean)


def test_paired_ci_uses_item_differences():
    before = [0, 0, 1, 1, 0, 1, 0, 0]
    after = [1, 0, 1, 1, 1, 1, 0, 1]
    gain, lo, hi = paired_ci(before, after)
    d = [a - b for b, a in zip(before, after)]  # three +1, five 0
    mean = sum(d) / 8
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 7)
    assert gain == pytest.approx(3 / 8)
    assert hi - gain == pytest.approx(t_quantile(0.975, 7) * sd / math.sqrt(8))


def test_degenerate_and_bad_inputs():
    mean, lo, hi = mean_ci([0.4])
    assert mean == 0.4 and math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match="pair up"):
        paired_ci([1, 0], [1])
    with pytest.raises(ValueError, match="at least one"):
        mean_ci([])
    with pytest.raises(ValueError, match="finite"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=1.0)


# ------------------------------------------------------------------------------------------------------------
# Power of the paired t-test
# ------------------------------------------------------------------------------------------------------------


def test_power_matches_published_values():
    from ragen_core.math.stats import paired_power, pairs_needed

    # Cohen's d = 1 with 10 pairs: 0.8031 (G*Power, two-sided alpha 0.05); d = 0.5 needs 34 pairs for 80%
    assert paired_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=5e-4)
    assert pairs_needed(0.5, 1.0) == 34
    for n in (2, 3, 7):  # no effect: the test's own level
        assert paired_power(0.0, 1.0, n) == pytest.approx(0.05, abs=1e-6)


@pytest.mark.parametrize("n, t_crit", [(5, 2.776445), (8, 2.364624)])  # textbook t_{0.975, n-1}
def test_minimum_detectable_effect_has_80_percent_power_by_simulation(n, t_crit):
    import numpy as np

    from ragen_core.math.stats import min_detectable_effect

    sd = 3.0
    mde = min_detectable_effect(sd, n)
    rng = np.random.default_rng(n)
    sims = 20_000
    d = rng.normal(mde, sd, size=(sims, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    power = float((np.abs(t) > t_crit).mean())
    assert power == pytest.approx(0.80, abs=4 * (0.16 / sims) ** 0.5)  # 4 Monte Carlo standard errors
    assert min_detectable_effect(2 * sd, n) == pytest.approx(2 * mde, rel=1e-5)  # scales with sd


def test_power_arguments_are_checked():
    from ragen_core.math.stats import min_detectable_effect, paired_power, pairs_needed

    with pytest.raises(ValueError, match="n must be"):
        paired_power(1.0, 1.0, 1)
    with pytest.raises(ValueError, match="sd must be"):
        paired_power(1.0, 0.0, 5)
    with pytest.raises(ValueError, match="power must be"):
        min_detectable_effect(1.0, 5, power=0.01)
    with pytest.raises(ValueError, match="non-zero"):
        pairs_needed(0.0, 1.0)
