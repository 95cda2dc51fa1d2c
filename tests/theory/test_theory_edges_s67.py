"""The theory checks at the edges of float64: tiny probabilities, probabilities that underflow to 0, reward
magnitudes whose squares overflow, and the 2-action closed form where the SNR is infinite.

Before, these gave a true identity reported as FAIL (a norm whose squares underflowed to 0), NaN gradients
(log 0 of an underflowed probability), an infinite bound that "held" against an infinite left side, or a
ZeroDivisionError / OverflowError from inside the check. Every expected value here is computed independently:
math.hypot, a plain-loop entropy / KL / mutual information with central finite differences, or the 2-action
closed forms written out.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from theory_checks import bounds as B
from theory_checks.entropy_bonus import mi_logit_gradient, mi_time_derivative
from theory_checks.magnitudes import norm
from theory_checks.testbed import SoftmaxTestbed


# ------------------------------------------------------------------------------------------ references
def _softmax_loop(row: list[float]) -> list[float]:
    top = max(row)
    e = [math.exp(v - top) for v in row]
    s = sum(e)
    return [v / s for v in e]


def _entropy_loop(p: list[float]) -> float:
    return -sum(v * math.log(v) for v in p if v > 0)


def _kl_loop(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def _mi_loop(w: list[float], logits: np.ndarray) -> float:
    rows = [_softmax_loop(list(r)) for r in logits]
    m = [sum(w[x] * rows[x][z] for x in range(len(w))) for z in range(len(rows[0]))]
    return sum(w[x] * _kl_loop(rows[x], m) for x in range(len(w)) if w[x] > 0)


def _fd(f, logits: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of f(logits) in every entry."""
    out = np.zeros_like(logits)
    for idx in np.ndindex(*logits.shape):
        up, down = logits.copy(), logits.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = (f(up) - f(down)) / (2 * h)
    return out


# logit gaps of 800 make exp underflow: those probabilities are exactly 0.0 in float64
UNDERFLOW = np.array([[0.0, -800.0, 1.0], [0.5, 0.0, -800.0]])


# ------------------------------------------------------------------------------------------ norms
@pytest.mark.parametrize("v", [[1e-300, 0.0], [3e-200, 4e-200], [1e200, 1e200], [-2e160, 1e-300, 5e159], [3.0, 4.0]])
def test_norm_does_not_underflow_or_overflow(v: list[float]) -> None:
    """Before: sqrt(sum v^2) gave 0 for [1e-300, 0] and inf for [1e200, 1e200]."""
    assert norm(np.array(v)) == pytest.approx(math.hypot(*v), rel=1e-15, abs=0.0)
    assert norm(np.array([v, v]))[1] == pytest.approx(math.hypot(*v), rel=1e-15, abs=0.0)


@pytest.mark.parametrize("k", [1, 50, 120, 160, 200, 250, 300])
def test_two_action_identities_hold_at_tiny_p(k: int) -> None:
    """Before: at p = 1e-160 and below, ||g|| squared underflowed to 0 and the true identities
    g = p(1-p) and SNR^2 = G p(1-p) / ((1-2p)^2 + sigma^2) were reported as failures."""
    p, sigma, G = 10.0**-k, 0.5, 4
    records = B.check_t2_two_action(p, sigma, G)
    assert [c.id for c in records] == ["t2_two_action_closed_form", "t1_two_action_values"]
    assert all(c.holds for c in records), [(c.id, c.lhs, c.rhs) for c in records]
    assert records[1].lhs == pytest.approx(p * (1 - p), rel=1e-12)  # the worst of g, E s^2, RV_mu


# ------------------------------------------------------------------------------------------ infinite SNR
@pytest.mark.parametrize("sigma", [0.0, 1e-200])
def test_two_action_closed_form_refuses_infinite_snr(sigma: float) -> None:
    """Before: ZeroDivisionError from inside check_t2_two_action at p = 1/2 without noise (sigma = 1e-200 squares
    to 0 in float64)."""
    with pytest.raises(ValueError, match=r"p = 0\.5 with sigma = .*SNR is infinite"):
        B.check_t2_two_action(0.5, sigma, 4)


def test_two_action_closed_form_next_to_the_infinite_case() -> None:
    p, G = 0.5 + 1e-4, 8
    (closed, _) = B.check_t2_two_action(p, 0.0, G)
    assert closed.holds
    assert closed.rhs == pytest.approx(G * p * (1 - p) / (1 - 2 * p) ** 2, rel=1e-12)


# ------------------------------------------------------------------------------------------ overflow
@pytest.mark.parametrize("make", [
    lambda: SoftmaxTestbed.two_action(0.3, 1e200),
    lambda: SoftmaxTestbed.tabular(np.zeros((1, 3)), mu=np.array([[1e200, 0.0, 0.0]]), sigma=1.0),
    lambda: SoftmaxTestbed(np.array([[[0.0], [1e200]]]), np.array([1e-200]), np.zeros((1, 2)), np.ones(1)),
])
def test_testbed_refuses_magnitudes_whose_squares_overflow(make) -> None:
    """Before: T1 'held' with inf <= inf, T2 failed with 'lhs must have no NaN' (an argument the user never gave),
    T3 and the 2-action checks raised OverflowError from inside."""
    with pytest.raises(ValueError, match=r"too large for float64: .* must be at most 1e\+150"):
        make()


def test_large_but_representable_rewards_give_finite_records() -> None:
    tb = SoftmaxTestbed.tabular(np.array([[0.0, 1.0, -1.0]]), mu=np.array([[1e100, 0.0, -1e100]]), sigma=1e99)
    rng = np.random.default_rng(0)
    records = B.check_t1(tb, rng) + B.check_t2(tb, 4, rng) + B.check_t3(tb, 4)
    assert records and all(c.holds for c in records)
    assert all(math.isfinite(c.lhs) and math.isfinite(c.rhs) for c in records)
    p = _softmax_loop([0.0, 1.0, -1.0])
    b = p[0] * 1e100 - p[2] * 1e100
    rv = sum(pz * (m - b) ** 2 for pz, m in zip(p, (1e100, 0.0, -1e100))) + 1e198
    assert float(tb.reward_variance()[0]) == pytest.approx(rv, rel=1e-12)


# ------------------------------------------------------------------------------------------ 0 log 0
def test_entropy_and_kl_gradients_with_underflowed_probabilities() -> None:
    """Before: NaN in every entry of both rows (0 * log 0)."""
    tb = SoftmaxTestbed.tabular(UNDERFLOW)
    ref = np.array([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]])  # 0 where the policy is 0: KL still finite
    ent = tb.entropy_logit_gradient()
    kl = tb.kl_logit_gradient(ref)
    for x in range(2):
        fd_h = _fd(lambda lg: _entropy_loop(_softmax_loop(list(lg))), UNDERFLOW[x])
        fd_kl = _fd(lambda lg, q=list(ref[x]): _kl_loop(_softmax_loop(list(lg)), q), UNDERFLOW[x])
        np.testing.assert_allclose(ent[x], fd_h, atol=1e-8)
        np.testing.assert_allclose(kl[x], fd_kl, atol=1e-8)
    assert np.all(np.isfinite(tb.entropy_gradient())) and np.all(np.isfinite(tb.kl_gradient(ref)))
    with pytest.raises(ValueError, match=r"ref_probs must be > 0 everywhere the policy is .* index \[0, 0\]"):
        tb.kl_logit_gradient(np.array([[0.0, 0.5, 0.5], [0.6, 0.4, 0.0]]))


def test_mi_gradient_and_rate_with_underflowed_probabilities() -> None:
    """Before: mi_logit_gradient and mi_time_derivative were NaN."""
    w = [0.3, 0.7]
    grad = mi_logit_gradient(np.array(w), UNDERFLOW)
    np.testing.assert_allclose(grad, _fd(lambda lg: _mi_loop(w, lg), UNDERFLOW), atol=1e-8)
    pi = [_softmax_loop(list(r)) for r in UNDERFLOW]
    vel = np.array([[-pz * (math.log(pz) + _entropy_loop(row)) if pz > 0 else 0.0 for pz in row] for row in pi])
    rate = mi_time_derivative(np.array(w), UNDERFLOW)
    h = 1e-6
    assert rate == pytest.approx((_mi_loop(w, UNDERFLOW + h * vel) - _mi_loop(w, UNDERFLOW - h * vel)) / (2 * h),
                                 abs=1e-8)


def test_mi_gradient_of_a_prompt_of_weight_zero() -> None:
    """A prompt of weight 0 putting mass where p(z) = 0: before, 0 * log(0.5 / 0) = NaN; I does not depend on it."""
    logits = np.array([[0.0, -800.0], [0.0, 0.0]])
    assert np.array_equal(mi_logit_gradient(np.array([1.0, 0.0]), logits), np.zeros((2, 2)))


def test_checks_on_a_testbed_with_underflowed_probabilities() -> None:
    """Before: check_t5 and check_identities raised 'ref_probs must be > 0 everywhere' about a reference they
    draw themselves (softmax of the same extreme logits underflows too)."""
    tb = SoftmaxTestbed.tabular(UNDERFLOW, mu=np.array([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0]]), sigma=0.3)
    rng = np.random.default_rng(3)
    records = B.check_identities(tb, rng) + B.check_t5(tb, rng) + B.check_t9(tb, tb.with_theta(tb.theta * 0.5))
    assert {c.id for c in records} >= {"grad_kl_forms", "grad_entropy_forms", "t5_rho_kl", "t5_rho_entropy"}
    assert all(c.holds for c in records), [(c.id, c.lhs, c.rhs) for c in records if not c.holds]
    assert all(math.isfinite(c.lhs) and math.isfinite(c.rhs) for c in records)
