"""The theory checks used from Python (and the CLI) with the arguments a researcher gets wrong.

Every bad argument is one ValueError/TypeError naming it (never a crash inside numpy/sympy, a silently wrong
number, or a check that passes vacuously); valid arguments are compared against plain-loop references written
here, independently of the code under test.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from theory_checks import __main__ as cli
from theory_checks import bounds as B
from theory_checks import montecarlo as M
from theory_checks import symbolic as S
from theory_checks import testbed as T
from theory_checks.exact import run_exact
from theory_checks.report import RunResult, run_all
from theory_checks.testbed import SoftmaxTestbed

W2 = np.array([0.5, 0.5])
P0 = np.array([[0.9, 0.1], [0.2, 0.8]])
P1 = np.array([[0.8, 0.2], [0.3, 0.7]])


def _tb() -> SoftmaxTestbed:
    return SoftmaxTestbed.two_action(0.3, 0.5)


# ------------------------------------------------------------------------------------------ references
def _mi_loop(w: np.ndarray, ch: np.ndarray) -> float:
    """I(X;Z) = sum_x sum_z w(x) p(z|x) log(p(z|x) / p(z)) by a plain loop."""
    X, Z = ch.shape
    m = [sum(w[x] * ch[x, z] for x in range(X)) for z in range(Z)]
    return sum(w[x] * ch[x, z] * math.log(ch[x, z] / m[z]) for x in range(X) for z in range(Z) if ch[x, z] > 0)


def _mse_loop(tb: SoftmaxTestbed, G: int, c: float) -> float:
    """E||(1/G) sum_k (R_k - c) s_k - g||^2 of prompt 0 by enumerating every G-tuple of (outcome, noise sign)."""
    theta = float(tb.theta[0])
    phi = [float(tb.features[0, z, 0]) for z in range(tb.Z)]
    e = [math.exp(f * theta) for f in phi]
    pi = [v / sum(e) for v in e]
    s = [f - sum(p * g for p, g in zip(pi, phi)) for f in phi]
    mu = [float(v) for v in tb.mu[0]]
    sig = float(tb.sigma[0])
    g = sum(p * m * sc for p, m, sc in zip(pi, mu, s))
    total = 0.0
    for tup in itertools.product(range(tb.Z), (-1.0, 1.0), repeat=G):
        pairs = list(zip(tup[::2], tup[1::2]))
        prob = math.prod(pi[z] / 2 for z, _ in pairs)
        ghat = sum((mu[z] + sign * sig - c) * s[z] for z, sign in pairs) / G
        total += prob * (ghat - g) ** 2
    return total


# ------------------------------------------------------------------------------------------ testbed
@pytest.mark.parametrize("field", ["features", "theta", "mu", "sigma", "prompt_probs"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_testbed_rejects_nan_and_inf_naming_the_field(field: str, bad: float) -> None:
    """Before: a NaN sigma, mu or theta gave a testbed whose every number was NaN; a NaN prompt weight passed."""
    args = {"features": np.array([[[0.0], [1.0]]]), "theta": np.array([0.2]), "mu": np.array([[0.0, 1.0]]),
            "sigma": np.array([0.5]), "prompt_probs": np.array([1.0])}
    with_bad = {"features": np.array([[[0.0], [bad]]]), "theta": np.array([bad]), "mu": np.array([[0.0, bad]]),
                "sigma": np.array([bad]), "prompt_probs": np.array([bad])}
    args[field] = with_bad[field]
    with pytest.raises(ValueError, match=f"{field} must have finite entries"):
        SoftmaxTestbed(**args)


def test_testbed_rejects_empty_and_non_numeric_arrays() -> None:
    with pytest.raises(ValueError, match=r"features must not be empty, got shape \[0, 2, 1\]"):
        SoftmaxTestbed(np.zeros((0, 2, 1)), np.zeros(1), np.zeros((0, 2)), np.zeros(0))  # was ZeroDivisionError
    with pytest.raises(ValueError, match="features must not be empty"):
        SoftmaxTestbed(np.zeros((1, 2, 0)), np.zeros(0), np.zeros((1, 2)), np.zeros(1))
    with pytest.raises(TypeError, match="features must be an array of real numbers"):
        SoftmaxTestbed("abc", np.zeros(1), np.zeros((1, 2)), np.zeros(1))
    with pytest.raises(ValueError, match="overflow"):
        SoftmaxTestbed(np.array([[[0.0], [1e300]]]), np.array([1e300]), np.zeros((1, 2)), np.zeros(1))


def test_integer_arrays_are_accepted_as_numbers() -> None:
    a = SoftmaxTestbed(np.array([[[0], [1]]]), np.array([0]), np.array([[0, 1]]), np.array([1]))
    assert a.estimator_mse(2)[0] == pytest.approx(_mse_loop(a, 2, 0.5), rel=1e-12)


@pytest.mark.parametrize("G, exc", [(2.5, TypeError), (True, TypeError), ("2", TypeError), (2.0, TypeError),
                                    (0, ValueError), (-1, ValueError)])
def test_group_size_must_be_a_positive_integer(G: object, exc: type) -> None:
    """Before: G = 2.5 and G = True returned an MSE for a group of 2.5 (or 1) samples."""
    with pytest.raises(exc, match="G must be an integer >= 1"):
        _tb().estimator_mse(G)
    with pytest.raises(exc, match="G must be an integer >= 1"):
        B.check_t2(_tb(), G)
    with pytest.raises(exc, match="K must be an integer >= 1"):
        B.check_t3(_tb(), G)
    with pytest.raises(exc, match="K must be an integer >= 1"):
        _tb().grpo_mse(G)


def test_baseline_is_a_number_or_one_per_prompt() -> None:
    """Before: a scalar baseline was an IndexError and a [3] baseline for 1 prompt gave 3 MSE values."""
    tb = SoftmaxTestbed.two_action(0.3, 0.5)
    for G in (1, 2, 3):
        ref = _mse_loop(tb, G, 0.7)
        assert tb.estimator_mse(G, baseline=0.7)[0] == pytest.approx(ref, rel=1e-12)
        assert tb.estimator_mse(np.int64(G), baseline=np.array([0.7]))[0] == pytest.approx(ref, rel=1e-12)
    with pytest.raises(ValueError, match=r"baseline must be a number or have shape \[1\]"):
        tb.estimator_mse(2, baseline=np.zeros(3))
    with pytest.raises(ValueError, match="baseline"):
        tb.task_gradient(np.array([np.nan]))


def test_reference_policy_must_be_a_positive_distribution() -> None:
    """Before: rows of ref_probs summing to 0.4 gave a gradient; a 0 gave inf/NaN with a warning."""
    tb = _tb()
    with pytest.raises(ValueError, match="row 0 of ref_probs must sum to 1"):
        tb.kl_gradient(np.array([[0.2, 0.2]]))
    with pytest.raises(ValueError, match=r"ref_probs must be > 0 everywhere"):
        tb.kl_logit_gradient(np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"ref_probs must have shape \[1, 2\]"):
        tb.kl_gradient(np.full((2, 2), 0.5))


def test_constructors_check_their_arguments() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        SoftmaxTestbed.random(0)
    with pytest.raises(TypeError, match="X must be an integer"):
        SoftmaxTestbed.random(rng, X=2.5)
    with pytest.raises(ValueError, match="X must be an integer >= 1, got 0"):
        SoftmaxTestbed.random(rng, X=0)  # was ZeroDivisionError
    with pytest.raises(ValueError, match="temperature must be a finite real number >= 0"):
        SoftmaxTestbed.random(rng, temperature=-1.0)  # was a policy with theta pointing the other way
    with pytest.raises(ValueError, match="temperature must be a finite real number > 0"):
        SoftmaxTestbed.rank_one_tight(rng, temperature=0.0)  # was a zero score: nothing is tight
    with pytest.raises(ValueError, match="sigma_scale"):
        SoftmaxTestbed.random(rng, sigma_scale=-1.0)
    with pytest.raises(TypeError, match="p must be a finite real number"):
        SoftmaxTestbed.two_action("0.3")
    with pytest.raises(ValueError, match="sigma must be a finite real number >= 0, got nan"):
        SoftmaxTestbed.two_action(0.3, float("nan"))
    with pytest.raises(ValueError, match="logits must be a 2-D array"):
        SoftmaxTestbed.tabular(np.array([1.0, 2.0]))  # was "not enough values to unpack"
    with pytest.raises(ValueError, match="X must be an integer >= 1"):
        T.random_channel(rng, 0, 2)
    # temperature 0 is the uniform policy (the norm of theta), a valid draw
    tb = SoftmaxTestbed.random(np.random.default_rng(1), X=2, Z=3, temperature=0.0)
    np.testing.assert_allclose(tb.probs(), np.full((2, 3), 1 / 3), rtol=0, atol=1e-15)


# ------------------------------------------------------------------------------------------ information
def test_channel_functions_reject_what_is_not_a_distribution() -> None:
    """Before: a NaN in the channel gave I = 0.042, weights summing to 1.1 or negative weights gave numbers."""
    ch = np.array([[np.nan, 1.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="channel must have finite entries"):
        T.channel_mutual_information(W2, ch)
    with pytest.raises(ValueError, match="w must sum to 1"):
        T.channel_mutual_information(np.array([0.5, 0.6]), np.eye(2))
    with pytest.raises(ValueError, match="w must be non-negative, got -0.5"):
        T.channel_cond_entropy(np.array([-0.5, 1.5]), np.eye(2))
    with pytest.raises(ValueError, match="row 0 of channel must sum to 1"):
        T.channel_marginal_entropy(W2, np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match=r"w must have one weight per row of channel \(3\), got 2"):
        T.channel_mutual_information(W2, np.eye(3))
    with pytest.raises(ValueError, match="channel must not be empty"):
        T.channel_mutual_information(np.array([]), np.zeros((0, 2)))  # was I = 0.0
    w = np.array([0.2, 0.3, 0.5])
    ch = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    assert T.channel_mutual_information(w, ch) == pytest.approx(_mi_loop(w, ch), rel=1e-12)


def test_entropy_helpers_check_their_arguments() -> None:
    with pytest.raises(ValueError, match="p must be non-negative"):
        T.entropy(np.array([-0.5, 1.5]))  # was NaN with a warning
    with pytest.raises(ValueError, match="p must sum to 1"):
        T.entropy(np.array([0.5, 0.6]))  # was 0.653
    with pytest.raises(ValueError, match=r"t must lie in \[0, 1\]"):
        T.h2(1.5)
    with pytest.raises(ValueError, match="p and q must have broadcastable shapes"):
        T.kl_divergence(np.array([0.5, 0.5]), np.array([0.2, 0.3, 0.5]))
    with pytest.raises(ValueError, match="logits must have no NaN"):
        T.softmax(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="logits must not be empty"):
        T.softmax(np.zeros((2, 0)))
    assert float(T.h2(0.25)) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), rel=1e-14)
    p, q = np.array([0.2, 0.8]), np.array([[0.5, 0.5], [0.1, 0.9]])
    ref = [sum(a * math.log(a / b) for a, b in zip(p, row)) for row in q]
    np.testing.assert_allclose(T.kl_divergence(p, q), ref, rtol=1e-13)
    np.testing.assert_allclose(T.softmax(np.array([0.0, -np.inf, 1.0])), [1 / (1 + math.e), 0, math.e / (1 + math.e)])


def test_enumeration_is_refused_before_it_allocates() -> None:
    with pytest.raises(ValueError, match="G must be an integer >= 1, got 0"):
        T.enumerate_outcomes([0.5, 0.5], 0)
    with pytest.raises(ValueError, match="more than the 4194304 allowed"):
        T.enumerate_outcomes(np.full(16, 1 / 16), 8)  # was a MemoryError for 256 GiB
    with pytest.raises(ValueError, match="probs must sum to 1"):
        T.enumerate_outcomes([0.5, 0.6], 2)  # weights summing to 1.21
    idx, w = T.enumerate_outcomes([0.25, 0.75], 2)
    assert [tuple(r) for r in idx] == list(itertools.product(range(2), repeat=2))
    np.testing.assert_allclose(w, [0.0625, 0.1875, 0.1875, 0.5625])


# ------------------------------------------------------------------------------------------ acceptance rules
def test_a_tolerance_that_accepts_anything_is_refused() -> None:
    """Before: identity(1, 1000, rtol=1) and bound(1e9, 0, atol=inf) both held."""
    with pytest.raises(ValueError, match=r"rtol must be a finite real number in \[0, 1\)"):
        B.identity("rv_decomposition", 1.0, 1000.0, rtol=1.0)
    with pytest.raises(ValueError, match="rtol"):
        B.identity("rv_decomposition", 1.0, -1000.0, rtol=np.inf)
    with pytest.raises(ValueError, match="atol must have finite entries"):
        B.bound("t1_paper", 1e9, 0.0, atol=np.inf)
    with pytest.raises(ValueError, match="atol must be non-negative"):
        B.bound("t1_paper", 0.5, 1.0, atol=-1.0)


def test_records_refuse_empty_nan_and_mismatched_numbers() -> None:
    with pytest.raises(ValueError, match="lhs must not be empty"):
        B.bound("t1_paper", [], [])  # was an IndexError
    with pytest.raises(ValueError, match="lhs must not be empty"):
        B.identity("rv_decomposition", [], [])
    with pytest.raises(ValueError, match="lhs must have no NaN"):
        B.bound("t1_paper", np.nan, 1.0)
    with pytest.raises(ValueError, match="rhs of variant 'x' must have no NaN"):
        B.bound("t1_paper", 0.5, 1.0, variants={"x": (0.5, np.nan)})  # a NaN variant was counted as caught
    with pytest.raises(ValueError, match=r"same number of elements .* got 3 and 2"):
        B.bound("t1_paper", [1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="rhs of a strict inequality must be positive"):
        B.strict("t4_strict_contraction", -2.0, -1.0)  # a true -2 < -1 was reported as failing
    with pytest.raises(TypeError, match="lhs must be a real number"):
        B.counterexample("t7_filtering_false", np.array([2.0, 3.0]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="best must be a real number"):
        B.search_record("t8_search_paper", float("nan"))
    with pytest.raises(TypeError, match="lhs must be an array of real numbers"):
        B.bound("t1_paper", "a", 1.0)
    c = B.bound("t1_paper", [1.0, 3.0], [2.0, 4.0])
    assert c.holds and c.ratio == max(1.0 / 2.0, 3.0 / 4.0)
    assert B.bound("t1_paper", 1.0, math.inf).holds


# ------------------------------------------------------------------------------------------ the checks
def test_checks_name_a_wrong_kind_of_rng_or_testbed() -> None:
    tb = _tb()
    for call in (lambda: B.check_t1(tb, 0), lambda: B.check_t5(tb, 0), lambda: B.check_t6(0),
                 lambda: B.check_t8(0), lambda: B.check_mi_proxy_exact(0), lambda: B.check_identities(tb, 0),
                 lambda: B.t4_instances(0), lambda: B.check_t7_snr(0, 2), lambda: M.run_montecarlo(0),
                 lambda: run_exact(np.random.RandomState(0), 1)):
        with pytest.raises(TypeError, match="rng must be"):
            call()
    with pytest.raises(TypeError, match="tb must be a SoftmaxTestbed"):
        B.check_t1("x")
    with pytest.raises(TypeError, match="tb2 must be a SoftmaxTestbed"):
        B.check_t9(tb, None)
    with pytest.raises(ValueError, match="n_testbeds must be an integer >= 1"):
        run_exact(np.random.default_rng(0), 0)


def test_t4_refuses_templates_and_weights_that_are_not_distributions() -> None:
    """Before: check_t4 passed with q summing to 1.2 or w summing to 1.2; mixture_mi took alpha = 2."""
    with pytest.raises(ValueError, match="q must sum to 1"):
        B.check_t4(W2, np.eye(2), np.array([0.5, 0.7]))
    with pytest.raises(ValueError, match="w must sum to 1"):
        B.check_t4(np.array([0.5, 0.7]), np.eye(2), W2)
    with pytest.raises(ValueError, match=r"q must have one entry per column of channel \(2\), got 3"):
        B.check_t4(W2, np.eye(2), np.full(3, 1 / 3))
    with pytest.raises(ValueError, match=r"needs q = w @ channel"):
        B.check_t4(W2, P0, np.array([0.1, 0.9]), label="q = p(z)")
    with pytest.raises(ValueError, match=r"alphas must lie in \[0, 1\]"):
        B.mixture_mi(W2, np.eye(2), W2, np.array([2.0]))
    I_a = B.mixture_mi(W2, P0, W2, np.array([0.0, 0.5]))
    assert I_a[0] == pytest.approx(_mi_loop(W2, P0), rel=1e-12)
    assert I_a[1] == pytest.approx(_mi_loop(W2, 0.5 * P0 + 0.25), rel=1e-12)


def test_t2_heteroscedastic_two_action_refuses_negative_or_no_noise() -> None:
    with pytest.raises(ValueError, match="var0 must be a finite real number >= 0"):
        B.check_t2_paper_two_action_heteroscedastic(0.3, -1.0, 1.0, 4)  # was NaN with a warning
    with pytest.raises(ValueError, match="must not both be 0"):
        B.check_t2_paper_two_action_heteroscedastic(0.3, 0.0, 0.0, 4)  # was ZeroDivisionError


def test_t7_subsets_and_sizes() -> None:
    """Before: S = [] divided by zero, S = [3] was an IndexError, S = [0, 0] counted a prompt twice, and
    check_t7_counterexample(n = P) returned a NOT REPRODUCED record for a batch that filters nothing."""
    tb = _tb()
    with pytest.raises(ValueError, match="S must hold at least one prompt"):
        B.check_t7_identity(tb, [], 2)
    with pytest.raises(ValueError, match=r"each prompt of S must be an integer in \[0, 0\], got 3"):
        B.check_t7_identity(tb, [3], 2)
    with pytest.raises(ValueError, match="S must list distinct prompts"):
        B.check_t7_identity(tb, [0, 0], 2)
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 7\], got 8"):
        B.check_t7_counterexample(8, 8, 8)
    with pytest.raises(ValueError, match="P must be an integer >= 2"):
        B.check_t7_counterexample(8, 1, 1)
    three = SoftmaxTestbed.random(np.random.default_rng(0), X=3, Z=2, d=1)
    with pytest.raises(ValueError, match=r"\(2Z\)\^\(G \|S\|\) = 4\^18 joint outcomes is more than the 4194304"):
        B.check_t7_identity(three, [0, 1, 2], 6)  # was a MemoryError (4^18 joint outcomes)
    wide = SoftmaxTestbed.random(np.random.default_rng(0), X=1, Z=8, d=1)
    with pytest.raises(ValueError, match="more than the 4194304 allowed"):
        B.check_estimator_enumeration(wide, 8)  # was a MemoryError (16^8 tuples, 256 GiB)
    with pytest.raises(ValueError, match=r"need 0 < rv - sigma\^2 <= 1/4, got .* \(rv = 0.05, sigma = 0.3\)"):
        B.t7_paper_prompt(0.05, 0.3)


def test_top_p_rule_refuses_what_it_would_answer_silently() -> None:
    """Before: an empty batch kept [] (documented: at least one group), rho = 0 kept one group, rho = 2 kept every
    group, a negative score was ranked, NaN was a Fraction error."""
    for scores, rho, match in (([], 0.9, "scores must not be empty"), ([1.0, 2.0], 0.0, "rho"),
                               ([1.0, 2.0], 2.0, "rho"), ([-1.0, 2.0], 0.5, "scores must be non-negative"),
                               ([np.nan, 2.0], 0.5, "scores must have finite entries")):
        with pytest.raises(ValueError, match=match):
            B.top_p_by_score(np.array(scores), rho)
    scores = np.array([0.3, 0.1, 0.4, 0.2])  # sorted 0.4, 0.3, 0.2, 0.1; 0.4 + 0.3 = 0.7 of 1.0 reaches rho = 0.7
    assert B.top_p_by_score(scores, 0.7) == [2, 0]


def test_t8_refuses_non_distributions_and_unknown_targets() -> None:
    """Before: t8_checks passed on rows summing to 2, an unknown search target ran as 'afw', gens = 0 returned a
    best ratio of -1, n = 1 divided by zero and eps = 2 gave negative prompt weights."""
    with pytest.raises(ValueError, match="row 0 of p1 must sum to 1"):
        B.t8_checks(W2, P0, P1 * 2)
    with pytest.raises(ValueError, match=r"p1 must have shape \[2, 2\], got \[3, 3\]"):
        B.t8_checks(W2, P0, np.eye(3))
    with pytest.raises(ValueError, match="p0 must be a 2-D array"):
        B.t8_checks(W2, P0[0], P1[0])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="target must be one of paper, pinsker, afw, classical, got 'bogus'"):
        B.t8_adversarial_search(rng, "bogus", 2, 2, gens=2)
    with pytest.raises(ValueError, match="gens must be an integer >= 1"):
        B.t8_adversarial_search(rng, "afw", 2, 2, gens=0)
    with pytest.raises(ValueError, match="pop must be an integer >= 1"):
        B.t8_adversarial_search(rng, "afw", 2, 2, gens=2, pop=0)
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        B.t8_small_weight_pair(1, 0.1)
    with pytest.raises(ValueError, match=r"eps must be a finite real number in \(0, 1\)"):
        B.t8_small_weight_pair(3, 2.0)
    with pytest.raises(ValueError, match=r"a must be a finite real number in \[0, 1\]"):
        B.t8_symmetric_pair(3, 2.0)
    with pytest.raises(ValueError, match="Z must be an integer >= 2"):
        B.t8_paper_cap(1, 1)  # was "math domain error"
    with pytest.raises(ValueError, match="n_grid must be an integer >= 2"):
        B.t8_paper_cap(2, 2, 0)
    dI = abs(_mi_loop(W2, P1) - _mi_loop(W2, P0))
    assert {c.id: c.lhs for c in B.t8_checks(W2, P0, P1)}["t8_afw"] == pytest.approx(dI, rel=1e-12)


def test_t9_and_mi_proxy_helpers_check_their_arguments() -> None:
    with pytest.raises(ValueError, match="w must sum to 1"):
        B.mi_logit_gradient(np.array([0.5, 0.7]), np.zeros((2, 2)))  # was a gradient of zeros
    with pytest.raises(ValueError, match=r"w must have one weight per row of logits \(3\), got 2"):
        B.mi_time_derivative(W2, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="row 0 of p must sum to 1"):
        B.entropy_rows(np.array([[0.5, 0.7]]))  # was 0.596
    with pytest.raises(ValueError, match=r"scorer must have shape \[2, 2\], got \[3, 2\]"):
        B.expected_seq_proxy(np.eye(2), np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="scorer must be > 0 everywhere"):
        B.expected_seq_proxy(np.full((2, 2), 0.5), np.eye(2))  # was -inf/NaN with a warning
    with pytest.raises(ValueError, match="channel must be non-negative"):
        B.bayes_accuracy(np.array([[2.0, -1.0]]))  # was an accuracy of 1.0
    with pytest.raises(ValueError, match="P must be an integer >= 1, got 0"):
        B.fano_lower(0.5, 0)  # was "math domain error"
    with pytest.raises(ValueError, match=r"acc must be a finite real number in \[0, 1\]"):
        B.fano_lower(1.5, 4)
    acc, P = 0.6, 4
    ref = math.log(P) + 0.4 * math.log(0.4) + 0.6 * math.log(0.6) - 0.4 * math.log(3)
    assert B.fano_lower(acc, P) == pytest.approx(ref, rel=1e-13)
    assert B.bayes_accuracy(P0) == pytest.approx((0.9 + 0.8) / 2)


# ------------------------------------------------------------------------------------------ Monte Carlo
def test_confidence_intervals_refuse_nan_empty_and_reversed_ranges() -> None:
    """Before: a NaN draw gave an interval with a NaN mean (a NaN bound is never refuted), delta = 0 divided by
    zero, and Est.of with a negative scale gave lo > hi."""
    budget = M.MCBudget()
    with pytest.raises(ValueError, match="y must have finite entries"):
        budget.interval(np.array([np.nan, 0.5, 0.2]), 0.0, 1.0)
    with pytest.raises(ValueError, match="y must hold at least 2 draws, got 0"):
        budget.interval(np.array([]), 0.0, 1.0)
    with pytest.raises(ValueError, match="lo must be <= hi"):
        budget.interval(np.array([0.5, 0.6]), 1.0, 0.0)
    assert budget.used == 0
    with pytest.raises(ValueError, match=r"delta must be a finite real number in \(0, 1\)"):
        M.MCBudget(delta=0.0)
    with pytest.raises(ValueError, match="m must be an integer >= 1"):
        M.MCBudget(m=0)
    with pytest.raises(ValueError, match="lo must be <= hi"):
        M.Est(1.0, 2.0, 0.0)
    with pytest.raises(ValueError, match="est must be a real number"):
        M.Est(float("nan"), 0.0, 1.0)
    iv = M.Interval(1.0, 0.1, 10, 0.0, 2.0)
    e = M.Est.of(iv, -2.0)
    assert (e.lo, e.est, e.hi) == pytest.approx((-2.2, -2.0, -1.8))
    with pytest.raises(ValueError, match="halfwidth"):
        M.Interval(1.0, -0.1, 10, 0.0, 2.0)


def test_seq_proxy_terms_checks_the_cross_score_shape() -> None:
    with pytest.raises(ValueError, match="L must be a 3-D array"):
        M.seq_proxy_terms(np.zeros((2, 2)))  # was an AxisError
    with pytest.raises(ValueError, match=r"L must have shape \[P, G, P\]"):
        M.seq_proxy_terms(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="own prompt"):
        M.seq_proxy_terms(np.array([[[-np.inf, 0.0]], [[0.0, 0.0]]]))
    L = np.log(np.array([[[0.5, 0.25]], [[0.1, 0.4]]]))
    ref = [[L[i, 0, i] - math.log(sum(math.exp(v) for v in L[i, 0]) / 2)] for i in range(2)]
    np.testing.assert_allclose(M.seq_proxy_terms(L), ref, rtol=1e-13)


# ------------------------------------------------------------------------------------------ symbolic
def test_symbolic_refutation_needs_real_finite_instances() -> None:
    """Before: log(-t) >= 0 crashed inside sympy ("Invalid comparison of non-real"), and a claim with no finite
    instance was 'not refuted' without having been tried; a non-polynomial numerator was a PolynomialError."""
    with pytest.raises(ValueError, match="is not real"):
        S.refuted_nonneg(sp.log(-S.t))
    with pytest.raises(ValueError, match="no finite value"):
        S.refuted_identity(sp.zoo * S.t)
    with pytest.raises(TypeError, match="expr must be a sympy expression"):
        S.refuted_nonneg(3)
    u, v = sp.symbols("u v", positive=True)
    assert S.prove_nonneg_quadratic(sp.sqrt(u) + v, u, v) is False
    assert S.prove_nonneg_quadratic(u**2 + v**2, u, v) is True
    assert S.refuted_nonneg(S.t - 1) and not S.refuted_identity(S.t - S.t)


# ------------------------------------------------------------------------------------------ run_all and the CLI
@pytest.mark.parametrize("seed, exc", [(-1, ValueError), (2**32, ValueError), (1.5, TypeError), ("0", TypeError),
                                       (True, TypeError)])
def test_run_all_checks_the_seed_first(seed: object, exc: type) -> None:
    """Before: -1 and 1.5 failed inside numpy's SeedSequence; True ran with seed 1."""
    with pytest.raises(exc, match="seed must be an integer in"):
        run_all(seed=seed, quick=True)


def _stub_result() -> RunResult:
    return RunResult(0, True, [], [], {}, {"total": 0.0, "exact": 0.0, "monte_carlo": 0.0, "symbolic": 0.0}, 0)


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Replace the (minutes-long) run by an empty one and record its calls."""
    calls: list[dict] = []

    def run(**kwargs: object) -> RunResult:
        calls.append(kwargs)
        return _stub_result()

    monkeypatch.setattr(cli, "run_all", run)
    return calls


@pytest.mark.parametrize("seed", ["-1", str(2**32), "99999999999999999999999"])
def test_cli_seed_out_of_range_is_exit_2(seed: str, fake_run: list, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["--quiet", "--seed", seed]) == 2
    assert f"--seed must be an integer in [0, 4294967295] (2**32 - 1), got {seed}" in capsys.readouterr().err
    assert not fake_run
    assert cli.main(["--quiet", "--seed", str(2**32 - 1)]) == 0 and fake_run[0]["seed"] == 2**32 - 1


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (a folder no file can be created in)")
@pytest.mark.parametrize("flag, path", [("--json", "/proc/theory.json"), ("--report", "/proc/theory_report")])
def test_cli_unwritable_output_is_exit_2_before_the_run(flag: str, path: str, fake_run: list,
                                                        capsys: pytest.CaptureFixture) -> None:
    """Before: the run went ahead (a minute or more) and the write raised a traceback at the end."""
    assert cli.main(["--quiet", flag, path]) == 2
    assert f"{flag} {path}: cannot write in /proc" in capsys.readouterr().err
    assert not fake_run


def test_cli_json_and_report_on_one_path_is_exit_2(tmp_path: Path, fake_run: list,
                                                   capsys: pytest.CaptureFixture) -> None:
    for report in (tmp_path / "out", tmp_path / "out" / "r"):
        assert cli.main(["--quiet", "--json", str(tmp_path / "out"), "--report", str(report)]) == 2
        assert "the JSON file would take the place of the report folder" in capsys.readouterr().err
    assert not fake_run


def test_cli_kind_of_output_path(tmp_path: Path, fake_run: list, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "f").write_text("x")
    assert cli.main(["--quiet", "--json", str(tmp_path)]) == 2
    assert "it is a folder, not a file" in capsys.readouterr().err
    assert cli.main(["--quiet", "--report", str(tmp_path / "f")]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err
    assert (tmp_path / "f").read_text() == "x"  # the writability probe leaves an existing file as it was
    assert not fake_run


def test_cli_write_failure_after_the_run_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   fake_run: list, capsys: pytest.CaptureFixture) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "write_json", fail)
    assert cli.main(["--quiet", "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert f"--json {tmp_path / 'r.json'}: could not write it" in err and "No space left on device" in err
    assert len(fake_run) == 1


def test_cli_ctrl_c_is_exit_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def interrupted(**kwargs: object) -> RunResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_all", interrupted)
    assert cli.main(["--quiet"]) == 130
    assert "interrupted" in capsys.readouterr().err
