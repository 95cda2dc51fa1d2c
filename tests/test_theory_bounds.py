"""Property tests of the bound checks (each true bound on generated testbeds), negative controls that
show every kind of check can fail, the counterexamples, and the Monte Carlo machinery."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from theory_checks import bounds as B
from theory_checks import montecarlo as M
from theory_checks.testbed import SoftmaxTestbed, random_channel

seeds = st.integers(0, 2**32 - 1)


def _all_hold(checks: list[B.Check]) -> None:
    bad = [c for c in checks if not c.holds]
    assert not bad, bad


@settings(max_examples=40, deadline=None)
@given(seeds, st.booleans(), st.sampled_from([1, 2, 8, 64]))
def test_true_bounds_hold_on_generated_testbeds(seed: int, het: bool, G: int) -> None:
    rng = np.random.default_rng(seed)
    tb = SoftmaxTestbed.random(rng, heteroscedastic=het)
    _all_hold(B.check_identities(tb, rng))
    _all_hold(B.check_t1(tb, rng))
    _all_hold(B.check_t2(tb, G, rng))
    _all_hold(B.check_t3(tb, G))
    _all_hold(B.check_t5(tb, rng))
    tb2 = tb.with_theta(tb.theta + rng.normal(size=tb.d))
    _all_hold(B.check_t9(tb, tb2))


@settings(max_examples=30, deadline=None)
@given(seeds)
def test_information_bounds_hold(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for w, ch, q, label, tight in B.t4_instances(rng):
        _all_hold(B.check_t4(w, ch, q, label, tight))
    _all_hold(B.check_t6(rng))
    _all_hold(B.check_t8(rng))
    _all_hold(B.check_mi_proxy_exact(rng))
    _all_hold(B.check_t7_snr(rng, 4))


@settings(max_examples=20, deadline=None)
@given(seeds, st.floats(0.02, 0.98), st.floats(0.05, 5.0))
def test_tightness_families_reach_ratio_one(seed: int, p: float, sigma: float) -> None:
    rng = np.random.default_rng(seed)
    for c in B.check_t1(SoftmaxTestbed.two_action(p), tight=True) + B.check_t1(SoftmaxTestbed.rank_one_tight(rng), tight=True):
        assert c.holds and abs(c.ratio - 1) <= B.TIGHT_TOL
    for c in B.check_t2(SoftmaxTestbed.two_action(0.5, sigma), 8, tight=True) + B.check_t3(SoftmaxTestbed.two_action(0.5, sigma), 8, tight=True):
        assert c.holds and abs(c.ratio - 1) <= B.TIGHT_TOL


def test_counterexamples_are_reproduced() -> None:
    checks = (
        B.check_t2_heteroscedastic_counterexample()
        + B.check_t3_heteroscedastic_counterexample()
        + B.check_t5_counterexample()
        + B.check_t7_counterexample()
        + B.check_t9_counterexample()
    )
    _all_hold(checks)
    assert {c.kind for c in checks} >= {"counterexample", "identity", "bound"}


def test_estimator_enumeration_and_t7_identity() -> None:
    rng = np.random.default_rng(11)
    tb = SoftmaxTestbed.random(rng, X=2, Z=2, sigma_scale=0.5)
    _all_hold(B.check_estimator_enumeration(tb, 3))
    _all_hold(B.check_t7_identity(tb, [0, 1], 2))


# ------------------------------------------------------------------------------- negative controls
def test_bound_check_can_fail() -> None:
    assert not B.bound("x", 1.0 + 1e-6, 1.0).holds
    assert B.bound("x", 1.0 + 1e-12, 1.0).holds  # within rtol
    assert not B.bound("x", 0.5, 1.0, tight=True).holds  # a tight case that is not tight
    assert not B.strict("x", 1.0, 1.0).holds
    assert not B.identity("x", 1.0, 1.0 + 1e-6).holds
    assert not B.counterexample("x", 0.9, 1.0).holds
    assert B.counterexample("x", 1.1, 1.0).holds


def test_wrong_bound_is_caught() -> None:
    """A deliberately weakened rhs (RV / 2 in T1) fails on the tight 2-action case."""
    tb = SoftmaxTestbed.two_action(0.3)
    gn = np.linalg.norm(tb.task_gradient(), axis=1)
    wrong = np.sqrt(tb.reward_variance() / 2 * tb.score_sq_norm())
    assert not B.bound("T1 with RV/2", gn, wrong).holds


def test_wrong_mse_formula_is_caught_by_enumeration(monkeypatch: pytest.MonkeyPatch) -> None:
    tb = SoftmaxTestbed.random(np.random.default_rng(2), X=1, Z=2, sigma_scale=1.0)
    orig = SoftmaxTestbed.estimator_mse
    monkeypatch.setattr(SoftmaxTestbed, "estimator_mse", lambda self, G, baseline=None, normalize=False: orig(self, G, baseline, normalize) * 1.01)
    assert not all(c.holds for c in B.check_estimator_enumeration(tb, 2))


# ------------------------------------------------------------------------------- Monte Carlo machinery
def test_interval_is_valid_and_counted() -> None:
    budget = M.MCBudget(m=3)
    y = np.random.default_rng(0).random(10_000)
    iv = budget.interval(y, 0.0, 1.0)
    assert iv.lower <= 0.5 <= iv.upper
    hoeff = math.sqrt(math.log(4 / (budget.delta / budget.m)) / (2 * y.size))
    assert 0 < iv.halfwidth <= hoeff
    budget.interval(y, 0.0, 1.0)
    budget.interval(y, 0.0, 1.0)
    with pytest.raises(AssertionError, match="M_INTERVALS"):
        budget.interval(y, 0.0, 1.0)
    with pytest.raises(AssertionError, match="outside"):
        M.MCBudget().interval(y, 0.0, 0.5)


def test_mc_validation_detects_a_wrong_exact_value() -> None:
    rng = np.random.default_rng(4)
    tb = SoftmaxTestbed.two_action(0.3, 0.5)
    bmax = M._err_range(tb, 0)
    budget = M.MCBudget()
    iv = budget.interval(M._estimator_errors(rng, tb, 0, 40_000, 4), 0.0, bmax**2)
    exact = float(tb.estimator_mse(4)[0])
    assert M._validate("ok", iv, exact).holds
    assert not M._validate("wrong", iv, exact * 1.3).holds


def test_mc_bound_flags_only_when_interval_clears() -> None:
    assert M._mc_bound("x", 1.2, 0.99, 1.0).holds  # estimate above, interval still reaches the bound
    assert not M._mc_bound("x", 1.2, 1.05, 1.0).holds
    assert M._mc_counterexample("x", 1.3, 1.1, 1.0).holds
    assert not M._mc_counterexample("x", 1.3, 0.9, 1.0).holds


# ------------------------------------------------------------------------------- MI proxies
@settings(max_examples=25, deadline=None)
@given(seeds, st.integers(2, 8), st.integers(1, 6))
def test_seq_proxy_properties(seed: int, P: int, G: int) -> None:
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(P, G, P)) * 5
    terms = M.seq_proxy_terms(L)
    assert np.all(terms <= math.log(P) + 1e-12)
    shifted = L + rng.normal(size=(P, G, 1)) * 100
    np.testing.assert_allclose(M.seq_proxy_terms(shifted), terms, atol=1e-9)
    np.testing.assert_array_equal(M._retrieval_hits(shifted), M._retrieval_hits(L))


@settings(max_examples=25, deadline=None)
@given(seeds, st.integers(2, 8), st.integers(1, 6))
def test_numpy_proxy_agrees_with_ragen_core_mi(seed: int, P: int, G: int) -> None:
    mi = pytest.importorskip("ragen_core.mi", reason="ragen_core.mi not available")
    rng = np.random.default_rng(seed)
    ch = random_channel(rng, P, 6)
    L, _ = M._cross_scores(rng, ch, np.log(ch), G)
    out = mi.mi_proxies(torch.from_numpy(L), torch.ones(P, G, dtype=torch.float64))
    assert out["mi_seq_est"] == pytest.approx(float(M.seq_proxy_terms(L).mean()), abs=1e-12)
    assert out["retrieval_acc"] == pytest.approx(float(M._retrieval_hits(L).mean()), abs=1e-12)
    shifted = mi.mi_proxies(torch.from_numpy(L + rng.normal(size=(P, G, 1)) * 30), torch.ones(P, G, dtype=torch.float64))
    assert shifted["mi_est"] == pytest.approx(out["mi_est"], abs=1e-9)
    assert shifted["retrieval_acc"] == out["retrieval_acc"]


def test_core_availability_is_reported() -> None:
    core = M.core_available()
    assert set(core) == {"ragen_core.mi", "ragen_core.filtering", "ragen_core.advantages"}
    assert all(v == "available" or v.startswith("not available") for v in core.values())


def test_exact_run_is_reproducible() -> None:
    a = B.run_exact(np.random.default_rng(7), 3)
    b = B.run_exact(np.random.default_rng(7), 3)
    assert [(c.name, c.lhs, c.rhs) for c in a] == [(c.name, c.lhs, c.rhs) for c in b]
