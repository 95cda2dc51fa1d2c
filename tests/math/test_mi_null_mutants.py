"""`mi_seq_null`'s defaults, input checks and tie rule, pinned where the mutation run found them untested
(`make mutation`, docs/theory_report/mutation.md): the default number of relabellings and seed, the exact path up
to 8 prompts inclusive, float64 arithmetic for float32 scores, the messages of its errors, and the rule that a
relabelling within ``1e-12 * max(1, |observed|)`` of the observed MI-Seq counts as reaching it (boundary included).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ragen_core.math.mi import EXACT_NULL_MAX_PROMPTS, mi_seq_null


def _scores(p: int, g: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    L = torch.randn(p, g, p, generator=gen, dtype=torch.float64) * 2 - 30
    L[torch.arange(p), :, torch.arange(p)] += 0.7  # some dependence, so the null's values spread
    return L.to(dtype)


def _loop_stats(L: torch.Tensor) -> tuple[float, list[float]]:
    """The observed MI-Seq and that of every relabelling, from the definition in float64 by plain loops."""
    p, g, _ = L.shape
    x = [[[float(L[i, k, j]) for j in range(p)] for k in range(g)] for i in range(p)]
    lse = [[max(x[i][k]) + math.log(math.fsum(math.exp(v - max(x[i][k])) for v in x[i][k]) / p) for k in range(g)]
           for i in range(p)]
    stats = [math.fsum(x[i][k][perm[i]] - lse[i][k] for i in range(p) for k in range(g)) / (p * g)
             for perm in itertools.permutations(range(p))]
    return stats[0], stats


def test_the_default_draws_9999_relabellings_from_seed_0_beyond_the_exact_limit():
    L = _scores(EXACT_NULL_MAX_PROMPTS + 1, 2, 4)
    got = mi_seq_null(L)
    assert not got["exact"]
    assert got["permutations"] == 9999 + 1  # the identity and 9999 seeded draws
    assert got == mi_seq_null(L, n_perm=9999, seed=0)
    assert got["null_mean"] != mi_seq_null(L, n_perm=9999, seed=1)["null_mean"]  # the seed matters here


def test_eight_prompts_get_every_relabelling():
    p = EXACT_NULL_MAX_PROMPTS
    L = _scores(p, 1, 5)
    got = mi_seq_null(L, n_perm=3)
    assert got["exact"] and got["permutations"] == math.factorial(p)


def test_float32_scores_are_read_in_float64():
    """Scores near -30 in float32: summing them in float32 would move the null's mean by about 1e-6 nats."""
    L = _scores(4, 3, 6, dtype=torch.float32)
    observed, stats = _loop_stats(L)
    got = mi_seq_null(L)
    assert got["null_mean"] == pytest.approx(math.fsum(stats) / len(stats), rel=0, abs=1e-12)
    ordered = sorted(stats)
    assert got["null_quantile"] == pytest.approx(ordered[math.ceil(0.95 * (len(stats) - 1))], rel=0, abs=1e-12)
    assert got["p_value"] == pytest.approx(sum(v >= observed - 1e-12 for v in stats) / len(stats))


def test_an_unreadable_input_names_the_expected_shape():
    with pytest.raises(ValueError, match=r"^L must be a real tensor \[P, G, P\] or nested lists"):
        mi_seq_null([[[None, 1.0]]])


def test_no_trace_per_prompt_is_refused():
    with pytest.raises(ValueError, match=r"L must be \[P, G, P\] with P >= 2, G >= 1; got shape \(3, 0, 3\)"):
        mi_seq_null(torch.zeros(3, 0, 3))


@pytest.mark.parametrize("bad", [float("-inf"), float("inf"), float("nan")])
def test_a_row_without_a_finite_log_sum_exp_is_refused(bad):
    """A trace impossible under every prompt (a row of -inf, no NaN anywhere) is refused as a NaN is."""
    L = _scores(3, 2, 7)
    L[1, 0, :] = bad
    with pytest.raises(ValueError, match=r"^L must have no NaN and a finite log-sum-exp in every row"):
        mi_seq_null(L)


def _two_prompts(x: float, y: float) -> torch.Tensor:
    """P = 2, G = 1 with A = [[x, y], [y, x]]: MI-Seq is x - c under the identity and y - c under the swap (the same
    c = mean log-sum-exp - log 2 for both), so the swap sits x - y below the observed value."""
    return torch.tensor([[[x, y]], [[y, x]]], dtype=torch.float64)


def test_a_relabelling_just_outside_the_tolerance_does_not_tie():
    """|observed| < 1, so the tolerance is 1e-12: a swap 1.5e-12 below the observed value does not reach it."""
    L = _two_prompts(0.3, 0.3 - 1.5e-12)
    observed, stats = _loop_stats(L)
    assert abs(observed) < 1 and 1.2e-12 < observed - stats[1] < 1.8e-12
    assert mi_seq_null(L)["p_value"] == 0.5
    assert mi_seq_null(_two_prompts(0.3, 0.3 - 0.5e-12))["p_value"] == 1.0  # inside the tolerance: a tie


def test_ties_up_to_rounding_count_at_every_magnitude():
    """A[i, j] = c_i + d_j: every relabelling has the same MI-Seq in exact arithmetic (the mean of c plus the mean
    of d, minus the same log-sum-exps), so the p-value is 1. In float64 the relabellings' sums differ in their last
    bits; the d_j spread over hundreds of nats make |observed| about 300, where a tolerance of 1e-12 alone (not
    scaled by |observed|) would miss those ties."""
    gen = torch.Generator().manual_seed(8)
    p = 6
    c = torch.rand(p, generator=gen, dtype=torch.float64) * 1000 + 500
    d = -torch.rand(p, generator=gen, dtype=torch.float64) * 600
    L = (c[:, None] + d[None, :])[:, None, :]
    observed, stats = _loop_stats(L)
    assert abs(observed) > 100
    got = mi_seq_null(L)
    assert got["p_value"] == 1.0
    assert max(stats) - min(stats) < 1e-9  # the same value up to rounding


def _cycle_batch(delta: float) -> torch.Tensor:
    """8 prompts, G = 1: each trace scores 0 under its own prompt, -delta under the next one (cyclically) and -50
    under the others. |observed| is about log 4 > 1, and the cyclic relabelling sits delta below it."""
    p = EXACT_NULL_MAX_PROMPTS
    a = torch.full((p, p), -50.0, dtype=torch.float64)
    a[torch.arange(p), torch.arange(p)] = 0.0
    a[torch.arange(p), (torch.arange(p) + 1) % p] = -delta
    return a[:, None, :]


def test_a_relabelling_exactly_at_the_tolerance_ties():
    """The rule is ``MI-Seq(pi) >= observed - 1e-12 * max(1, |observed|)``, boundary included. The cyclic relabelling
    is placed exactly on the boundary (found by stepping delta in the function's own float64 arithmetic); it and the
    identity reach the observed value, nothing else does."""
    p = EXACT_NULL_MAX_PROMPTS
    shift = (torch.arange(p) + 1) % p
    for k in range(-200, 200):
        L = _cycle_batch(1.3862943611198906e-12 + k * 1e-17)
        a = L[:, 0, :]
        lse_mean = float((torch.logsumexp(a, dim=1) - math.log(p)).mean())
        observed = float(a.diagonal().mean() - lse_mean)
        cyclic = float(a[torch.arange(p), shift].mean() - lse_mean)
        if cyclic == observed - 1e-12 * max(1.0, abs(observed)):
            break
    else:  # pragma: no cover
        raise AssertionError("no boundary case found")
    assert abs(observed) > 1
    assert mi_seq_null(L)["p_value"] == 2 / math.factorial(p)
