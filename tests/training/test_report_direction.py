"""The run report names a task-gradient direction only when the probe measurements show one (interval excludes 0)."""

from __future__ import annotations

import math
import statistics

import pytest

from ragen_core.training.report import task_gradient_direction


def _interval(xs: list[float]) -> tuple[float, float]:
    """The 95% t-interval of the mean, by hand (t quantiles from a table)."""
    t975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}
    n = len(xs)
    half = t975[n - 1] * statistics.stdev(xs) / math.sqrt(n)
    return statistics.fmean(xs) - half, statistics.fmean(xs) + half


@pytest.mark.parametrize("corr,reading", [
    ([0.30, 0.25, 0.35, 0.28], "raised the MI"),
    ([-0.30, -0.25, -0.35, -0.28], "favoured a template"),
    ([0.20, -0.15, 0.05, 0.01], "no direction shown"),  # mean +0.028: a sign alone named one before
    ([0.001, 0.002, 0.0015], "raised the MI"),  # tiny but consistent: the interval says so, with its caveat
])
def test_a_direction_only_when_the_interval_excludes_zero(corr, reading):
    line = task_gradient_direction(corr)
    assert reading in line
    lo, hi = _interval(corr)
    assert f"[{lo:+.3f}, {hi:+.3f}]" in line
    assert (lo > 0 or hi < 0) == ("no direction" not in line)
    assert "optimistic" in line


def test_one_measurement_reads_no_direction():
    line = task_gradient_direction([0.4])
    assert "1 probe measurement:" in line and "no direction is read" in line and "interval [" not in line
