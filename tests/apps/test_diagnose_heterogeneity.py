"""The RV heterogeneity pre-check says when its batch has too few groups to place the ratio in one band."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragen_core.apps.diagnose import heterogeneity_interval, heterogeneity_reading


def test_three_groups_one_with_variance_span_every_band():
    # k draws of the one group with variance among 3 give std/mean = sqrt(3/k - 1): sqrt(2), sqrt(0.5), 0, with
    # probabilities 12/19, 6/19, 1/19 given k >= 1; the 2.5% and 97.5% points are 0 and sqrt(2)
    lo, hi = heterogeneity_interval(np.array([0.0, 0.25, 0.0]))
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(math.sqrt(2))
    reading = heterogeneity_reading(math.sqrt(2), [lo, hi])
    assert reading.startswith("high") and "reaches low and intermediate too" in reading


def test_the_interval_covers_the_true_ratio_about_as_often_as_it_says():
    """Monte Carlo: group variances drawn from a known law (a 50/50 mix of 0 and Uniform(0.1, 0.3)) whose
    std / mean is computed exactly; the 95% interval from 64 groups covers it in most batches."""
    # mixture: X = 0 w.p. 1/2, else U(0.1, 0.3): E X = 0.1, E X^2 = 0.5 * (0.2^2 + 0.2^2 / 12) = 0.02 + 1/600
    mean, second = 0.1, 0.5 * (0.2**2 + 0.2**2 / 12)
    true_ratio = math.sqrt(second - mean**2) / mean
    rng = np.random.default_rng(0)
    hits, n = 0, 200
    for i in range(n):
        v = np.where(rng.random(64) < 0.5, 0.0, rng.uniform(0.1, 0.3, 64))
        lo, hi = heterogeneity_interval(v, seed=i, resamples=1000)
        hits += lo <= true_ratio <= hi
    assert hits / n >= 0.85, hits / n


def test_a_tight_interval_inside_one_band_reads_the_band_alone():
    assert heterogeneity_reading(1.3, [1.1, 1.5]).startswith("high") and "bootstrap" not in \
        heterogeneity_reading(1.3, [1.1, 1.5])
    assert heterogeneity_reading(0.3, [0.2, 0.45]).startswith("low")
    assert "reaches high too" in heterogeneity_reading(0.8, [0.6, 1.2])
    assert heterogeneity_reading(float("nan"), [float("nan")] * 2).startswith("undefined")


def test_no_interval_from_fewer_than_two_groups_or_no_variance():
    assert all(math.isnan(x) for x in heterogeneity_interval(np.array([0.2])))
    assert all(math.isnan(x) for x in heterogeneity_interval(np.array([0.0, 0.0, float("nan")])))
