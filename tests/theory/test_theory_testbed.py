"""The exact softmax testbed against finite differences, enumeration and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory_checks.testbed import (
    SoftmaxTestbed,
    channel_cond_entropy,
    channel_marginal_entropy,
    channel_mutual_information,
    enumerate_outcomes,
    h2,
    kl_divergence,
    softmax,
)


def _fd_grad(f, theta: np.ndarray, h: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        out[j] = (f(theta + e) - f(theta - e)) / (2 * h)
    return out


def _moderate(seed: int, **kw) -> SoftmaxTestbed:
    rng = np.random.default_rng(seed)
    return SoftmaxTestbed.random(rng, temperature=float(rng.uniform(0.2, 2.0)), mu_offset=0.0, **kw)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_score_and_task_gradient_match_finite_differences(seed: int) -> None:
    tb = _moderate(seed)
    s = tb.score()
    for x in range(tb.X):
        for z in range(tb.Z):
            fd = _fd_grad(lambda th, x=x, z=z: math.log(tb.with_theta(th).probs()[x, z]), tb.theta)
            np.testing.assert_allclose(s[x, z], fd, rtol=1e-6, atol=1e-7)
    # policy-gradient theorem: g(x) = grad_theta E_pi[mu(x, .)]
    for x in range(tb.X):
        fd = _fd_grad(lambda th, x=x: float(tb.with_theta(th).probs()[x] @ tb.mu[x]), tb.theta)
        np.testing.assert_allclose(tb.task_gradient()[x], fd, rtol=1e-6, atol=1e-7 * (1 + np.abs(tb.mu).max()))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_regulariser_gradients_match_finite_differences(seed: int) -> None:
    tb = _moderate(seed)
    ref = softmax(np.random.default_rng(seed + 1).normal(size=(tb.X, tb.Z)), axis=1)
    for x in range(tb.X):
        fd_kl = _fd_grad(lambda th, x=x: float(kl_divergence(tb.with_theta(th).probs()[x], ref[x])), tb.theta)
        fd_h = _fd_grad(
            lambda th, x=x: float(-np.sum(tb.with_theta(th).probs()[x] * np.log(tb.with_theta(th).probs()[x]))),
            tb.theta,
        )
        np.testing.assert_allclose(tb.kl_gradient(ref)[x], fd_kl, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(tb.entropy_gradient()[x], fd_h, rtol=1e-5, atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_identities_on_random_testbeds(seed: int, het: bool) -> None:
    tb = SoftmaxTestbed.random(np.random.default_rng(seed), heteroscedastic=het)
    pi = tb.probs()
    np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.trace(tb.fisher(), axis1=1, axis2=2), tb.score_sq_norm(), rtol=1e-9, atol=1e-300)
    assert np.all(tb.reward_variance() >= tb.mean_noise_variance())
    H, Hc, mi = tb.marginal_entropy(), tb.cond_entropy(), tb.mutual_information()
    assert H == pytest.approx(Hc + mi, rel=1e-9, abs=1e-12)
    assert -1e-15 <= mi <= H + 1e-12


def test_estimator_mse_matches_enumeration() -> None:
    tb = SoftmaxTestbed.random(np.random.default_rng(3), X=2, Z=3, d=2, sigma_scale=0.7, mu_offset=0.0)
    G = 2
    for x in range(tb.X):
        pi, s, mu, sig = tb.probs()[x], tb.score()[x], tb.mu[x], tb.sigma[x]
        r = np.concatenate([mu - sig, mu + sig])
        sc = np.concatenate([s, s])
        idx, w = enumerate_outcomes(np.concatenate([pi, pi]) / 2, G)
        ghat = np.mean((r[idx] - tb.baseline()[x])[:, :, None] * sc[idx], axis=1)
        mse = float(np.sum(w * np.sum((ghat - tb.task_gradient()[x]) ** 2, axis=1)))
        assert mse == pytest.approx(float(tb.estimator_mse(G)[x]), rel=1e-10)
        assert mse / tb.reward_variance()[x] == pytest.approx(float(tb.grpo_mse(G)[x]), rel=1e-10)


@pytest.mark.parametrize("p", [0.01, 0.2, 0.5, 0.77])
def test_two_action_closed_forms(p: float) -> None:
    sigma, G = 0.6, 5
    tb = SoftmaxTestbed.two_action(p, sigma)
    assert tb.probs()[0, 1] == pytest.approx(p, rel=1e-12)
    for value in (np.linalg.norm(tb.task_gradient()[0]), tb.score_sq_norm()[0], tb.signal_variance()[0]):
        assert value == pytest.approx(p * (1 - p), rel=1e-12)
    snr2 = np.sum(tb.task_gradient()[0] ** 2) / tb.estimator_mse(G)[0]
    assert snr2 == pytest.approx(G * p * (1 - p) / ((1 - 2 * p) ** 2 + sigma**2), rel=1e-12)
    mse = tb.grpo_mse(G)[0]
    assert mse == pytest.approx(p * (1 - p) * ((1 - 2 * p) ** 2 + sigma**2) / (G * (p * (1 - p) + sigma**2)), rel=1e-12)


def test_named_counterexamples() -> None:
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    snr2g = np.sum(tb.task_gradient()[0] ** 2) / tb.estimator_mse(1)[0]
    assert snr2g == pytest.approx(6 / 11, rel=1e-12)
    assert tb.signal_variance()[0] / tb.mean_noise_variance()[0] == pytest.approx(0.4, rel=1e-12)
    eb = SoftmaxTestbed.entropy_bonus_counterexample()
    assert eb.mutual_information() == pytest.approx(0.0783, abs=5e-5)
    assert eb.X == 2 and eb.Z == 3


def test_rank_one_family_is_tight() -> None:
    tb = SoftmaxTestbed.rank_one_tight(np.random.default_rng(5), X=2, Z=4, d=3)
    lhs = np.linalg.norm(tb.task_gradient(), axis=1)
    rhs = np.sqrt(tb.reward_variance() * tb.score_sq_norm())
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def test_information_helpers() -> None:
    w = np.array([0.5, 0.5])
    ch = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert channel_mutual_information(w, ch) == pytest.approx(math.log(2))
    assert channel_cond_entropy(w, ch) == 0.0
    assert channel_marginal_entropy(w, ch) == pytest.approx(math.log(2))
    assert float(h2(0.5)) == pytest.approx(math.log(2))
    assert float(h2(0.0)) == 0.0 and float(h2(1.0)) == 0.0
    collapsed = np.array([[0.3, 0.7], [0.3, 0.7]])
    assert channel_mutual_information(w, collapsed) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"features": np.zeros((2, 3)), "theta": np.zeros(1), "mu": np.zeros((2, 3)), "sigma": np.zeros(2)},
         "features"),
        ({"features": np.zeros((2, 3, 1)), "theta": np.zeros(2), "mu": np.zeros((2, 3)), "sigma": np.zeros(2)},
         "theta"),
        ({"features": np.zeros((2, 3, 1)), "theta": np.zeros(1), "mu": np.zeros((3, 2)), "sigma": np.zeros(2)}, "mu"),
        ({"features": np.zeros((2, 3, 1)), "theta": np.zeros(1), "mu": np.zeros((2, 3)), "sigma": -np.ones(2)},
         "sigma"),
        ({"features": np.zeros((2, 3, 1)), "theta": np.zeros(1), "mu": np.zeros((2, 3)), "sigma": np.zeros(2),
          "prompt_probs": np.array([0.2, 0.2])}, "sum to 1"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SoftmaxTestbed(**kwargs)


def test_two_action_rejects_degenerate_p() -> None:
    with pytest.raises(ValueError, match="p must lie"):
        SoftmaxTestbed.two_action(1.0)
