"""The MI-Seq permutation null (`mi_seq_null`) against a plain loop over every relabelling, its calibration under
exchangeable traces, and the regime's resolution rule (`regime_resolution`)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ragen_core.math.metrics import regime_resolution
from ragen_core.math.mi import mi_proxies, mi_seq_null


def _loop_null(L: torch.Tensor) -> list[float]:
    """MI-Seq-Est of every relabelling of the prompts, from the definition, by plain loops."""
    p, g, _ = L.shape
    lse = [[math.log(sum(math.exp(float(L[i, k, j])) for j in range(p)) / p) for k in range(g)] for i in range(p)]
    out = []
    for perm in itertools.permutations(range(p)):
        out.append(sum(float(L[i, k, perm[i]]) - lse[i][k] for i in range(p) for k in range(g)) / (p * g))
    return out


@pytest.mark.parametrize("p,g,seed", [(2, 1, 0), (3, 2, 1), (4, 3, 2), (5, 2, 3)])
def test_exact_null_equals_the_loop_over_every_relabelling(p, g, seed):
    gen = torch.Generator().manual_seed(seed)
    L = torch.randn(p, g, p, generator=gen, dtype=torch.float64) * 3 - 20
    L[torch.arange(p), :, torch.arange(p)] += 1.0  # some dependence
    got = mi_seq_null(L)
    ref = _loop_null(L)
    observed = ref[0]  # the identity comes first in itertools' order
    assert observed == pytest.approx(mi_proxies(L, torch.ones(p, g))["mi_seq_est"], abs=1e-12)
    assert got["exact"] and got["permutations"] == math.factorial(p)
    assert got["p_value"] == pytest.approx(sum(v >= observed - 1e-12 for v in ref) / len(ref))
    assert got["null_mean"] == pytest.approx(sum(ref) / len(ref), abs=1e-12)
    ordered = sorted(ref)
    assert got["null_quantile"] == pytest.approx(ordered[math.ceil(0.95 * (len(ref) - 1))], abs=1e-12)


def test_calibrated_when_traces_ignore_their_prompts():
    """Exchangeable scores: P(p <= 0.05) <= 0.05 (an exact permutation test), checked by Monte Carlo."""
    gen = torch.Generator().manual_seed(7)
    n, hits = 400, 0
    for _ in range(n):
        scores = torch.randn(6, 3, 6, generator=gen, dtype=torch.float64)  # no link between i and j
        hits += mi_seq_null(scores)["p_value"] <= 0.05
    # 95% binomial band around 0.05 at n = 400 reaches about 0.072; the test's level is the bound
    assert hits / n <= 0.08, hits / n
    assert hits / n >= 0.02, hits / n  # and not conservative to uselessness


def test_strong_dependence_reaches_the_smallest_p_value():
    L = torch.full((6, 2, 6), -30.0, dtype=torch.float64)
    L[torch.arange(6), :, torch.arange(6)] = -5.0
    got = mi_seq_null(L)
    assert got["p_value"] == pytest.approx(1 / 720)
    big = torch.full((12, 2, 12), -30.0, dtype=torch.float64)
    big[torch.arange(12), :, torch.arange(12)] = -5.0
    sampled = mi_seq_null(big, n_perm=999, seed=3)
    assert not sampled["exact"] and sampled["permutations"] == 1000
    assert sampled["p_value"] == pytest.approx(1 / 1000)  # only the identity reaches it
    assert mi_seq_null(big, n_perm=999, seed=3) == sampled  # seeded


@pytest.mark.parametrize("bad,match", [(torch.zeros(1, 2, 1), "P >= 2"), (torch.zeros(2, 2, 3), r"\[P, G, P\]")])
def test_bad_shapes_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        mi_seq_null(bad)


def test_bad_scores_and_settings_are_refused():
    L = torch.zeros(3, 1, 3)
    with pytest.raises(ValueError, match="NaN"):
        mi_seq_null(torch.full((3, 1, 3), float("nan")))
    with pytest.raises(ValueError, match="level"):
        mi_seq_null(L, level=1.0)
    with pytest.raises(ValueError, match="n_perm"):
        mi_seq_null(L, n_perm=0)


def test_regime_resolution():
    # 2 and 3 prompts: 2 and 6 relabellings cannot reach p <= 0.05, whatever the reading
    for p in (2, 3):
        L = torch.full((p, 4, p), -30.0, dtype=torch.float64)
        L[torch.arange(p), :, torch.arange(p)] = -1.0
        resolved, note = regime_resolution(mi_seq_null(L), math.log(p), p, 4)
        assert not resolved and f"only {math.factorial(p)} relabellings" in note
    # many prompts, traces that ignore them, small score noise: chance reads far below 0.1 of log P
    gen = torch.Generator().manual_seed(0)
    quiet = torch.randn(16, 4, 16, generator=gen, dtype=torch.float64) * 0.01 - 40
    assert regime_resolution(mi_seq_null(quiet), math.log(16), 16, 4) == (True, None)
    # 4 prompts, one trace each, scores that vary by a nat: chance alone reaches the threshold
    loud = torch.randn(4, 1, 4, generator=gen, dtype=torch.float64) - 20
    null = mi_seq_null(loud)
    resolved, note = regime_resolution(null, math.log(4), 4, 1)
    assert null["null_quantile"] / math.log(4) >= 0.1
    assert not resolved and "not below the regime's threshold 0.1" in note and "permutation p = " in note
    with pytest.raises(ValueError, match="mi_upper_bound"):
        regime_resolution(null, 0.0, 4, 1)


def test_traces_impossible_under_other_prompts_give_a_usable_null():
    """L = -inf under another prompt is a valid score (mi_proxies accepts it); relabellings that use it read -inf,
    and the null stays usable: no NaN quantile, a regime resolution instead of an error."""
    gen = torch.Generator().manual_seed(1)
    L = torch.randn(5, 2, 5, generator=gen, dtype=torch.float64) - 10
    off = ~torch.eye(5, dtype=torch.bool)
    L[:, 0, :] = torch.where(off, torch.tensor(-math.inf, dtype=torch.float64), L[:, 0, :])  # trace 0: own prompt only
    mi_proxies(L, torch.ones(5, 2))  # accepted
    null = mi_seq_null(L)
    assert null["null_quantile"] == -math.inf and null["p_value"] == pytest.approx(1 / 120)
    assert regime_resolution(null, math.log(5), 5, 2) == (True, None)
