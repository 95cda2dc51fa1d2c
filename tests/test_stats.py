"""Confidence intervals against published Student-t quantiles and hand-computed intervals."""

from __future__ import annotations

import math

import pytest

from ragen_core.stats import mean_ci, paired_ci, t_quantile

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
