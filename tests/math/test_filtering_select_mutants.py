"""Tests that kill the mutants of ``select_groups`` (and the batch statistics it reports) that the unit tests and
tests/math/test_filtering_mutants.py left alive in the first full mutmut run over ragen_core/math/filtering.py (see
docs/theory_report/mutation.md): its defaults, every validation message, integer scores, the ``ZERO_TOL``
boundary, NaN exclusion with ``include_zero=False``, and the stable tie-break by lower index on batches large
enough (P >= 33 here) that torch's unstable sort orders ties differently."""

from __future__ import annotations

import math

import pytest
import torch

from ragen_core.math.filtering import ZERO_TOL, rv_statistics, select_groups


def test_select_groups_defaults_are_top_p_at_0_9() -> None:
    scores = torch.tensor([4.0, 3.0, 2.0, 1.0])  # total 10: cumsum 4, 7, 9 >= 9 -> three groups
    assert select_groups(scores).kept.tolist() == [0, 1, 2]
    assert select_groups(scores).kept.tolist() == select_groups(scores, "top_p", 0.9).kept.tolist()


def test_select_groups_validation_messages() -> None:
    s = torch.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"^strategy must be one of 'top_p', "):
        select_groups(s, strategy="best")
    with pytest.raises(ValueError, match=r"^order must be one of 'largest', 'smallest'; got 'up'$"):
        select_groups(s, order="up")
    with pytest.raises(ValueError, match=r"^scores must be a non-empty 1-D tensor \[P\]; got shape \(2, 2\)$"):
        select_groups(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"^scores must be a non-empty 1-D tensor \[P\]; got shape \(0,\)$"):
        select_groups(torch.ones(0))
    with pytest.raises(ValueError, match=r"^scores must be non-negative \(variances or standard deviations\); "
                                         r"got a negative entry$"):
        select_groups(torch.tensor([1.0, -0.5]))
    with pytest.raises(ValueError, match=r"^eps must be a non-negative number; got 'x'$"):
        select_groups(s, eps="x")
    with pytest.raises(ValueError, match=r"^value must be a positive integer count for strategy='top_k_abs'; "
                                         r"got 'two'$"):
        select_groups(s, "top_k_abs", "two")
    with pytest.raises(ValueError, match=r"^value must be a number in \(0, 1\] for strategy='top_p'; got 'x'$"):
        select_groups(s, "top_p", "x")
    with pytest.raises(ValueError, match=r"^value must be in \(0, 1\] for strategy='min_p' \(a keep rate\); "
                                         r"got 1\.5$"):
        select_groups(s, "min_p", 1.5)
    with pytest.raises(ValueError, match=r"^generator must be a torch\.Generator for strategy='random' "
                                         r"\(no global random state\)$"):
        select_groups(s, "random", 0.5)


def test_select_groups_accepts_integer_scores_and_reports_them_as_float64() -> None:
    out = select_groups(torch.tensor([0, 3, 1]), "top_p", 0.9)
    assert out.kept.tolist() == [1, 2]  # total 4: 3 < 3.6 <= 4
    assert out.scores.dtype == torch.float64 and out.scores.tolist() == [0.0, 3.0, 1.0]


def test_rv_statistics_counts_a_variance_of_exactly_zero_tol_as_zero() -> None:
    assert rv_statistics(torch.tensor([ZERO_TOL, 1.0], dtype=torch.float64))["zero_fraction"] == 0.5
    assert rv_statistics(torch.tensor([2 * ZERO_TOL, 1.0], dtype=torch.float64))["zero_fraction"] == 0.0


def test_include_zero_false_drops_scores_at_zero_tol_and_never_keeps_nan() -> None:
    at_tol = torch.tensor([ZERO_TOL, 1.0], dtype=torch.float64)
    assert select_groups(at_tol, "top_k", 1.0, include_zero=False).kept.tolist() == [1]
    assert select_groups(at_tol, "top_k", 1.0, include_zero=True).kept.tolist() == [1, 0]
    with_nan = torch.tensor([math.nan, 0.0, 2.0, 1.0], dtype=torch.float64)
    for strategy, value in (("top_k", 1.0), ("top_p", 1.0), ("top_k_abs", 4)):
        out = select_groups(with_nan, strategy, value, include_zero=False)
        assert out.kept.tolist() == [2, 3], strategy


@pytest.mark.parametrize("order", ["largest", "smallest"])
def test_ties_go_to_the_lower_index_on_large_batches(order: str) -> None:
    # 64 equal scores: every strategy that keeps half must keep groups 0..31 (a stable sort); torch's unstable
    # sort picks another set of tied indices at this size.
    scores = torch.ones(64, dtype=torch.float64)
    for strategy, value in (("top_k", 0.5), ("top_k_abs", 32)):
        assert select_groups(scores, strategy, value, order=order).kept.tolist() == list(range(32)), strategy
    # ties among a mixed batch: 40 groups at 1.0 after 30 groups at 2.0; the largest 45 are the 2.0s then the
    # 15 lowest-index 1.0s
    mixed = torch.cat([torch.full((30,), 2.0), torch.ones(40)]).double()
    kept = select_groups(mixed, "top_k_abs", 45).kept.tolist()
    assert kept == list(range(45))
    low = select_groups(mixed, "top_k_abs", 20, order="smallest").kept.tolist()
    assert low == list(range(30, 50))



def test_min_p_keeps_groups_exactly_at_the_threshold() -> None:
    # s_i >= p * max: a score equal to the threshold is kept (2 * 0.5 = 1 and 2 * 1.0 = 2 are exact)
    assert select_groups(torch.tensor([2.0, 1.0, 0.5]), "min_p", 0.5).kept.tolist() == [0, 1]
    assert select_groups(torch.tensor([2.0, 2.0, 1.0]), "min_p", 1.0).kept.tolist() == [0, 1]
    assert select_groups(torch.tensor([2.0, 1.0, 0.5]), "min_p", 0.5, order="smallest").kept.tolist() == [1, 2]


def test_random_drop_in_the_smallest_order_keeps_top_p_largest_count_among_candidates() -> None:
    # top-p (rho 0.9, largest first) keeps 3 of [4, 3, 2, 1] (4 + 3 + 2 = 9 >= 9); summed from the smallest it
    # would take all 4. The random arm keeps that count, drawn among the candidates only (never the NaN group,
    # never the zero group when include_zero=False).
    scores = torch.tensor([math.nan, 4.0, 0.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    for seed in range(20):
        for order in ("largest", "smallest"):
            g = torch.Generator().manual_seed(seed)
            out = select_groups(scores, "random", 0.9, include_zero=False, order=order, generator=g)
            assert out.n_kept == 3, (seed, order)
            assert set(out.kept.tolist()) <= {1, 3, 4, 5}
            assert out.kept.tolist() == sorted(out.kept.tolist(), key=lambda i: -float(scores[i]))


def test_select_groups_reports_the_batch_statistics_of_the_scores() -> None:
    out = select_groups(torch.tensor([0.0, 1.0, 3.0]), "top_p", 0.9)
    mean = 4.0 / 3.0
    std = math.sqrt(((0 - mean) ** 2 + (1 - mean) ** 2 + (3 - mean) ** 2) / 3)  # population std over the groups
    assert out.rv_mean == pytest.approx(mean, rel=1e-12)
    assert out.rv_std == pytest.approx(std, rel=1e-12)
    assert out.zero_fraction == pytest.approx(1 / 3, rel=1e-12)
