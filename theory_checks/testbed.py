"""Exact softmax testbed: every expectation of the theory (docs/theory_report/theory.md) by enumeration, in float64.

Model (the SNR mechanism, one row per prompt):

    prompts   x in {0..X-1}, weighted by w(x) (``prompt_probs``, uniform by default)
    outcomes  z in {0..Z-1}
    policy    pi(z|x) = softmax_z( phi(x, z) . theta ),   phi = ``features`` [X, Z, d], theta [d]
    reward    R = mu(x, z) + eps,  E[eps | x, z] = 0,  Var(eps | x, z) = sigma^2(x, z)

``sigma`` is ``[X]`` (homoscedastic: the same noise level for every outcome of a prompt) or ``[X, Z]``
(heteroscedastic).  Whenever a *distribution* of the noise is needed (enumeration of estimators,
Monte Carlo with Hoeffding bounds), the noise is Rademacher: eps = +-sigma with probability 1/2 each.
It has mean 0 and variance sigma^2, which is all the exact formulas use, and it is bounded.

Derived quantities (all per prompt, all exact sums over z):

    s(z; x)   = phi(x, z) - E_pi[phi(x, .)]                  score  grad_theta log pi(z|x)
    b(x)      = E_pi[mu(x, .)]                               baseline = E[R | x]
    RV_mu(x)  = Var_pi(mu(x, .))                             signal variance
    RV(x)     = RV_mu(x) + E_pi[sigma^2(x, .)]               reward variance Var(R | x)
    g(x)      = E[(R - c) s] = E_pi[mu s]                    task gradient (any baseline c, since E s = 0)
    F(x)      = E_pi[s s^T],   E||s||^2 = tr F(x)            Fisher information
    MSE_G(x)  = E||g_hat - g||^2,  g_hat = (1/G) sum_k (R_k - c) s_k
              = ( E_pi[((mu - c)^2 + sigma^2) ||s||^2] - ||g||^2 ) / G

Information quantities use the joint w(x) pi(z|x):
``mutual_information`` I(X;Z), ``cond_entropy`` H(Z|X), ``marginal_entropy`` H(Z), in nats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .inputs import (
    MAX_OUTCOMES,
    PROB_ATOL,
    require_array,
    require_bool,
    require_channel,
    require_distribution,
    require_int,
    require_real,
    require_rng,
    shown,
)

#: the largest (max |mu| + max sigma + 1)(max ||phi|| + 1) a testbed accepts: its square, times the constants of the
#: checks (a baseline 10 magnitudes away, G), stays finite in float64 (~1.8e308)
MAX_MAGNITUDE = 1e150

__all__ = [
    "MAX_MAGNITUDE",
    "SoftmaxTestbed",
    "require_testbed",
    "entropy",
    "kl_divergence",
    "channel_mutual_information",
    "channel_cond_entropy",
    "channel_marginal_entropy",
    "enumerate_outcomes",
    "h2",
    "random_channel",
    "softmax",
]


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (float64).

    ``logits`` must be real, without NaN or +inf (``-inf`` masks an entry), with at least one finite entry in
    every slice along ``axis`` (``ValueError`` otherwise: the result would be NaN)."""
    logits = require_array("logits", logits, allow_neg_inf=True)
    axis = require_int("axis", axis, -logits.ndim, logits.ndim - 1)
    if np.any(np.all(logits == -np.inf, axis=axis)):
        raise ValueError("logits must have a finite entry in every slice along axis (all -inf has no softmax)")
    return _softmax(logits, axis)


def _softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """:func:`softmax` without the argument checks (internal callers with logits known to be valid)."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - np.max(logits, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x * log(y) with the convention 0 * log(anything) = 0."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    out = np.zeros(np.broadcast(x, y).shape)
    mask = np.broadcast_to(x != 0, out.shape)
    xb = np.broadcast_to(x, out.shape)
    yb = np.broadcast_to(y, out.shape)
    out[mask] = xb[mask] * np.log(yb[mask])
    return out


def _along(name: str, p: object, axis: int) -> tuple[np.ndarray, int]:
    """`p` as probability vectors along `axis`: finite, non-negative, each summing to 1 within PROB_ATOL."""
    arr = require_array(name, p, nonneg=True)
    axis = require_int("axis", axis, -arr.ndim, arr.ndim - 1)
    sums = np.sum(arr, axis=axis)
    if np.any(np.abs(sums - 1.0) > PROB_ATOL):
        bad = float(np.ravel(sums)[int(np.argmax(np.abs(np.ravel(sums) - 1.0)))])
        raise ValueError(f"{name} must sum to 1 along axis {axis} (probability vectors, within {PROB_ATOL:g}), "
                         f"got a sum of {bad!r}; renormalise in float64: p / p.sum(axis, keepdims=True)")
    return arr, axis


def entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy -sum p log p (nats) along ``axis``; ``p`` must hold probability vectors along ``axis``."""
    p, axis = _along("p", p, axis)
    return _entropy(p, axis)


def _log0(p: np.ndarray) -> np.ndarray:
    """log p where p > 0, and 0 where p = 0 (so that p * _log0(p) is the 0 log 0 = 0 convention, never NaN)."""
    p = np.asarray(p, dtype=np.float64)
    return np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), 0.0)


def _entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    return -np.sum(_xlogy(p, p), axis=axis)


def kl_divergence(p: np.ndarray, q: np.ndarray, axis: int = -1) -> np.ndarray:
    """KL(p || q) = sum p log(p / q) along ``axis`` (nats; +inf if supp p is not in supp q).

    ``p`` and ``q`` hold probability vectors along ``axis`` and broadcast against each other (one of them may be a
    single vector)."""
    p, axis = _along("p", p, axis)
    q, _ = _along("q", q, axis if np.ndim(q) == p.ndim else -1)
    try:
        np.broadcast_shapes(p.shape, q.shape)
    except ValueError:
        raise ValueError(f"p and q must have broadcastable shapes, got {list(p.shape)} and {list(q.shape)}") from None
    with np.errstate(divide="ignore"):
        return np.sum(_xlogy(p, p) - _xlogy(p, q), axis=axis)


def h2(t: np.ndarray | float) -> np.ndarray:
    """Binary entropy h2(t) = -t log t - (1-t) log(1-t) in nats (h2(0) = h2(1) = 0); every t in [0, 1]."""
    arr = require_array("t", t, nonneg=True)
    if np.any(arr > 1):
        raise ValueError(f"t must lie in [0, 1] (a probability), got {float(arr[arr > 1].ravel()[0])!r}")
    return _h2(arr)


def _h2(t: np.ndarray | float) -> np.ndarray:
    """:func:`h2` without the argument checks (NaN in, NaN out: used inside searches)."""
    t = np.asarray(t, dtype=np.float64)
    return -(_xlogy(t, t) + _xlogy(1.0 - t, 1.0 - t))


def channel_marginal_entropy(w: np.ndarray, channel: np.ndarray) -> float:
    """H(Z) for the joint w(x) channel[x, z]: entropy of p(z) = sum_x w(x) channel[x, z].

    ``w``: prompt weights ``[X]`` (a probability vector); ``channel``: ``[X, Z]``, each row a probability vector.
    """
    w, channel = require_channel(w, channel)
    return float(_entropy(w @ channel))


def channel_cond_entropy(w: np.ndarray, channel: np.ndarray) -> float:
    """H(Z|X) = sum_x w(x) H(channel[x, :]) (arguments as in :func:`channel_marginal_entropy`)."""
    w, channel = require_channel(w, channel)
    return float(w @ _entropy(channel, axis=1))


def _bregman_log(r: np.ndarray) -> np.ndarray:
    """f(r) = r log r - r + 1 >= 0, accurate to a few ulps also for r near 1 (series in u = r - 1)."""
    r = np.asarray(r, dtype=np.float64)
    u = r - 1.0
    small = np.abs(u) < 0.05
    out = np.empty_like(r)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[~small] = _xlogy(r[~small], r[~small]) - u[~small]
    us = u[small]
    acc = np.zeros_like(us)
    for k in range(16, 1, -1):  # f(u) = sum_{k>=2} (-1)^k u^k / (k (k - 1))
        acc = us * acc + (-1.0) ** k / (k * (k - 1))
    out[small] = us * us * acc
    return out


def channel_mutual_information(w: np.ndarray, channel: np.ndarray) -> float:
    """I(X;Z) = sum_x w(x) KL(channel[x, :] || p(z)), p(z) = sum_x w(x) channel[x, z].

    Computed as the KL average (not as H(Z) - H(Z|X)), so that the identity
    H(Z) = H(Z|X) + I can be checked between two independent computations.  Each KL is summed in the
    Bregman form sum_z p(z) f(channel[x, z] / p(z)), f(r) = r log r - r + 1 >= 0 (the added terms
    sum to 0), which has no first-order cancellation: I keeps ~1e-12 relative accuracy down to I ~ 1e-8.
    Arguments as in :func:`channel_marginal_entropy`.
    """
    w, channel = require_channel(w, channel)
    marginal = w @ channel
    keep_z = marginal > 0
    keep_x = w > 0
    ratio = channel[np.ix_(keep_x, keep_z)] / marginal[keep_z][None, :]
    kl = _bregman_log(ratio) @ marginal[keep_z]
    return float(max(w[keep_x] @ kl, 0.0))


@dataclass
class SoftmaxTestbed:
    """Linear-softmax policy with a noisy reward, all expectations exact (see the module docstring).

    Args:
        features: phi, ``[X, Z, d]``.
        theta: ``[d]``.
        mu: mean reward ``[X, Z]``.
        sigma: noise standard deviation, ``[X]`` (homoscedastic) or ``[X, Z]`` (heteroscedastic).
        prompt_probs: w(x), ``[X]``, non-negative and summing to 1 (uniform when None).
    """

    features: np.ndarray
    theta: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    prompt_probs: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Check every field (real, finite, of the shapes above; ``ValueError``/``TypeError`` naming it), and that
        the magnitudes (max |mu| + max sigma + 1)(max ||phi|| + 1) stay at most :data:`MAX_MAGNITUDE`."""
        self.features = require_array("features", self.features)
        if self.features.ndim != 3:
            raise ValueError(f"features must have shape [X, Z, d], got {self.features.shape}")
        X, Z, d = self.features.shape
        if Z < 2:
            raise ValueError(f"need at least 2 outcomes per prompt, got Z={Z}")
        self.theta = require_array("theta", self.theta, shape=(d,))
        self.mu = require_array("mu", self.mu, shape=(X, Z))
        self.sigma = require_array("sigma", self.sigma, nonneg=True)
        if self.sigma.shape not in ((X,), (X, Z)):
            raise ValueError(f"sigma must have shape [{X}] or [{X}, {Z}], got {self.sigma.shape}")
        if self.prompt_probs is None:
            self.prompt_probs = np.full(X, 1.0 / X)
        self.prompt_probs = require_distribution("prompt_probs", self.prompt_probs, 1, shape=(X,))
        with np.errstate(over="ignore", invalid="ignore"):
            finite = np.all(np.isfinite(self.features @ self.theta))
        if not finite:
            raise ValueError("the logits phi(x, z) . theta overflow float64: scale features or theta down")
        with np.errstate(over="ignore"):
            size = (float(np.max(np.abs(self.mu))) + float(np.max(self.sigma)) + 1.0) * (
                float(np.max(np.sqrt(np.sum(self.features**2, axis=2)))) + 1.0)
        if not size <= MAX_MAGNITUDE:
            raise ValueError(f"mu, sigma and features are too large for float64: (max |mu| + max sigma + 1) "
                             f"(max ||phi|| + 1) = {size:.3g} must be at most {MAX_MAGNITUDE:g} (variances, MSEs and "
                             "their tolerances square it, and would overflow to inf); rescale the rewards or features")

    # ------------------------------------------------------------------ shapes
    @property
    def X(self) -> int:
        return self.features.shape[0]

    @property
    def Z(self) -> int:
        return self.features.shape[1]

    @property
    def d(self) -> int:
        return self.features.shape[2]

    @property
    def heteroscedastic(self) -> bool:
        return self.sigma.ndim == 2

    def with_theta(self, theta: np.ndarray) -> SoftmaxTestbed:
        """The same testbed at another parameter vector."""
        return SoftmaxTestbed(self.features, theta, self.mu, self.sigma, self.prompt_probs)

    # ------------------------------------------------------------------ policy
    def logits(self) -> np.ndarray:
        """phi(x, z) . theta, ``[X, Z]``."""
        return self.features @ self.theta

    def probs(self) -> np.ndarray:
        """pi(z|x), ``[X, Z]``."""
        return _softmax(self.logits(), axis=1)

    def score(self) -> np.ndarray:
        """s(z; x) = phi(x, z) - sum_z' pi(z'|x) phi(x, z'), ``[X, Z, d]``."""
        pi = self.probs()
        mean_phi = np.einsum("xz,xzd->xd", pi, self.features)
        return self.features - mean_phi[:, None, :]

    def score_sq_norm(self) -> np.ndarray:
        """E_pi ||s||^2 = tr F(x), ``[X]``."""
        s = self.score()
        return np.einsum("xz,xz->x", self.probs(), np.sum(s * s, axis=2))

    def fisher(self) -> np.ndarray:
        """F(x) = E_pi[s s^T], ``[X, d, d]``."""
        s = self.score()
        return np.einsum("xz,xzd,xze->xde", self.probs(), s, s)

    # ------------------------------------------------------------------ reward
    def noise_variance(self) -> np.ndarray:
        """sigma^2(x, z) broadcast to ``[X, Z]``."""
        s2 = self.sigma**2
        return s2[:, None] * np.ones((1, self.Z)) if s2.ndim == 1 else s2

    def baseline(self) -> np.ndarray:
        """b(x) = E[R | x] = sum_z pi(z|x) mu(x, z), ``[X]``."""
        return np.sum(self.probs() * self.mu, axis=1)

    def signal_variance(self) -> np.ndarray:
        """RV_mu(x) = Var_pi(mu(x, .)) = sum_z pi (mu - b)^2, ``[X]``."""
        dev = self.mu - self.baseline()[:, None]
        return np.sum(self.probs() * dev * dev, axis=1)

    def mean_noise_variance(self) -> np.ndarray:
        """Plain average sigma^2(x) = E_pi[sigma^2(x, .)], ``[X]``."""
        return np.sum(self.probs() * self.noise_variance(), axis=1)

    def effective_noise_variance(self) -> np.ndarray:
        """sigma_eff^2(x) = E_pi[sigma^2 ||s||^2] / E_pi||s||^2 (T2/T3 under heteroscedastic noise), ``[X]``.

        Equal to sigma^2(x) for homoscedastic noise; 0/0 is reported as the plain average.
        """
        s = self.score()
        sn = np.sum(s * s, axis=2)
        pi = self.probs()
        num = np.sum(pi * self.noise_variance() * sn, axis=1)
        den = np.sum(pi * sn, axis=1)
        plain = self.mean_noise_variance()
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), plain)

    def reward_variance(self) -> np.ndarray:
        """RV(x) = Var(R | x) = RV_mu(x) + E_pi[sigma^2(x, .)], ``[X]``."""
        return self.signal_variance() + self.mean_noise_variance()

    # ------------------------------------------------------------------ gradients
    def _baseline_arg(self, baseline: object) -> np.ndarray:
        """The baseline c(x), ``[X]``: b(x) when None, a finite number for every prompt, or a ``[X]`` vector."""
        if baseline is None:
            return self.baseline()
        c = require_array("baseline", baseline)
        if c.shape not in ((), (self.X,)):
            raise ValueError(f"baseline must be a number or have shape [{self.X}] (one per prompt), "
                             f"got shape {list(c.shape)}")
        return np.broadcast_to(c, (self.X,))

    def task_gradient(self, baseline: np.ndarray | None = None) -> np.ndarray:
        """g(x) = E[(R - c(x)) s], ``[X, d]``; c = b(x) (the true baseline) when None, else a number or ``[X]``.

        The noise drops out (E[eps | z] = 0), and so does c, because E_pi s = 0.
        """
        c = self._baseline_arg(baseline)
        adv = self.mu - c[:, None]
        return np.einsum("xz,xz,xzd->xd", self.probs(), adv, self.score())

    def estimator_mse(
        self, G: int, baseline: np.ndarray | None = None, normalize: bool = False
    ) -> np.ndarray:
        """Exact E||g_hat - E g_hat||^2 of the G-sample estimator, ``[X]``.

            g_hat = (1/G) sum_k A_k s_k,   A_k = (R_k - c(x)) / n(x)

        with c the true baseline b(x) when ``baseline`` is None (else a number or ``[X]``), and n(x) = sqrt(RV(x))
        when ``normalize`` (population GRPO advantage of T3) else 1.  ``G`` is an integer >= 1 (a group size:
        ``TypeError`` for 2.5 or True).  The G terms are i.i.d., so

            MSE_G = ( E_pi[((mu - c)^2 + sigma^2) ||s||^2] - ||g||^2 ) / (G n^2).
        """
        G = require_int("G", G, 1)
        normalize = require_bool("normalize", normalize)
        c = self._baseline_arg(baseline)
        pi = self.probs()
        s = self.score()
        g = self.task_gradient()
        # Variance form (no cancellation): E||(mu - c) s - g||^2 + E[sigma^2 ||s||^2].
        dev = (self.mu - c[:, None])[:, :, None] * s - g[:, None, :]
        signal_part = np.sum(pi * np.sum(dev * dev, axis=2), axis=1)
        noise_part = np.sum(pi * self.noise_variance() * np.sum(s * s, axis=2), axis=1)
        mse = (signal_part + noise_part) / G
        if normalize:
            rv = self.reward_variance()
            mse = mse / np.where(rv > 0, rv, np.nan)
        return np.maximum(mse, 0.0)

    def grpo_mse(self, K: int) -> np.ndarray:
        """T3: E||g_tilde_hat - g/sqrt(RV)||^2 with A_tilde = (R - b) / sqrt(RV) over K samples (an integer >= 1),
        ``[X]``; NaN where RV(x) = 0."""
        return self.estimator_mse(require_int("K", K, 1), normalize=True)

    # ------------------------------------------------------------------ regularisers
    def kl_logit_gradient(self, ref_probs: np.ndarray) -> np.ndarray:
        """Tabular d KL(pi || pi_ref) / d logit_z = pi (log(pi / pi_ref) - KL), ``[X, Z]`` (T5).

        ``ref_probs``: ``[X, Z]``, each row a probability vector, > 0 wherever pi > 0 (KL(pi || pi_ref) is infinite
        where pi_ref = 0 < pi).  An outcome whose probability underflows to 0 (a logit gap above ~745) has gradient
        0 (the limit of pi log pi), never NaN."""
        pi = self.probs()
        ref_probs = self._ref_arg(ref_probs, pi)
        log_ratio = np.where(pi > 0, _log0(pi) - _log0(ref_probs), 0.0)  # 0 log(0 / q) = 0
        kl = np.sum(pi * log_ratio, axis=1, keepdims=True)
        return pi * (log_ratio - kl)

    def entropy_logit_gradient(self) -> np.ndarray:
        """Tabular d H(pi) / d logit_z = -pi (log pi + H), ``[X, Z]`` (T5); 0 where pi underflows to 0."""
        pi = self.probs()
        logp = _log0(pi)  # 0 log 0 = 0: an outcome whose probability underflows contributes nothing
        H = -np.sum(pi * logp, axis=1, keepdims=True)
        return -pi * (logp + H)

    def _ref_arg(self, ref_probs: object, pi: np.ndarray) -> np.ndarray:
        ref = require_distribution("ref_probs", ref_probs, 2, shape=(self.X, self.Z))
        bad = (ref <= 0) & (pi > 0)
        if np.any(bad):
            where = [int(i) for i in np.argwhere(bad)[0]]
            raise ValueError(f"ref_probs must be > 0 everywhere the policy is (KL(pi || pi_ref) is infinite where "
                             f"pi_ref = 0 < pi), got 0 at index {where}")
        return ref

    def kl_gradient(self, ref_probs: np.ndarray) -> np.ndarray:
        """grad_theta KL(pi(.|x) || pi_ref(.|x)) = sum_z [tabular logit gradient]_z phi(x, z), ``[X, d]``
        (``ref_probs`` as in :meth:`kl_logit_gradient`)."""
        return np.einsum("xz,xzd->xd", self.kl_logit_gradient(ref_probs), self.features)

    def entropy_gradient(self) -> np.ndarray:
        """grad_theta H(pi(.|x)) = sum_z [tabular logit gradient]_z phi(x, z), ``[X, d]``."""
        return np.einsum("xz,xzd->xd", self.entropy_logit_gradient(), self.features)

    # ------------------------------------------------------------------ information
    def marginal(self) -> np.ndarray:
        """p(z) = sum_x w(x) pi(z|x), ``[Z]``."""
        return self.prompt_probs @ self.probs()

    def mutual_information(self) -> float:
        """I(X;Z) = E_x KL(pi(.|x) || p(z)) in nats."""
        return channel_mutual_information(self.prompt_probs, self.probs())

    def cond_entropy(self) -> float:
        """H(Z|X) = sum_x w(x) H(pi(.|x))."""
        return channel_cond_entropy(self.prompt_probs, self.probs())

    def marginal_entropy(self) -> float:
        """H(Z) = H(p(z))."""
        return channel_marginal_entropy(self.prompt_probs, self.probs())

    # ------------------------------------------------------------------ constructors
    @classmethod
    def tabular(
        cls,
        logits: np.ndarray,
        mu: np.ndarray | None = None,
        sigma: np.ndarray | float = 0.0,
        prompt_probs: np.ndarray | None = None,
    ) -> SoftmaxTestbed:
        """One parameter per (x, z): features are one-hot, so theta is the flattened logit table ``logits [X, Z]``;
        ``sigma`` a number (the same for every prompt), ``[X]`` or ``[X, Z]``."""
        logits = require_array("logits", logits, 2)
        X, Z = logits.shape
        features = np.eye(X * Z).reshape(X, Z, X * Z)
        mu = np.zeros((X, Z)) if mu is None else mu
        sig = require_array("sigma", sigma, nonneg=True)
        if sig.ndim == 0:
            sig = np.full(X, float(sig))
        return cls(features, logits.reshape(-1), mu, sig, prompt_probs)

    @classmethod
    def two_action(cls, p: float, sigma: float = 0.0) -> SoftmaxTestbed:
        """The 2-action tight case: one logit theta, pi(1) = p, mu = 1[a = 1], homoscedastic sigma.

        features phi(0) = 0, phi(1) = 1, so s(1) = 1 - p, s(0) = -p and
        g = p(1-p) = E s^2 = RV_mu (T1 holds with equality when sigma = 0).
        """
        p = require_real("p", p)
        if not 0.0 < p < 1.0:
            raise ValueError(f"p must lie in (0, 1), got {p}")
        sigma = require_real("sigma", sigma, 0.0)
        theta = np.array([np.log(p) - np.log1p(-p)])
        features = np.array([[[0.0], [1.0]]])
        return cls(features, theta, np.array([[0.0, 1.0]]), np.array([float(sigma)]))

    @classmethod
    def heteroscedastic_counterexample(cls) -> SoftmaxTestbed:
        """T2: p = pi(1) = 0.4, mu = 1[a = 1], noise variance 1 on action 0 only.

        SNR^2 / G = 0.24^2 / 0.1056 = 6/11 = 0.545... > RV_mu / E_pi sigma^2 = 0.24 / 0.6 = 0.4.
        """
        tb = cls.two_action(0.4)
        return cls(tb.features, tb.theta, tb.mu, np.array([[1.0, 0.0]]))

    @classmethod
    def zero_score_noise_counterexample(cls) -> SoftmaxTestbed:
        """T2 as stated, with the plain-average noise, fails with 3 outcomes (issue 12, point 5).

        X = 1, features phi = (-1, 0, 1), theta = 0 (uniform policy, score s = phi), mu = s, noise variance 3
        on the middle outcome only (where s = 0): SNR^2 / G = 2 > RV / E_pi sigma^2 = 5/3.
        """
        features = np.array([[[-1.0], [0.0], [1.0]]])
        return cls(features, np.zeros(1), np.array([[-1.0, 0.0, 1.0]]), np.array([[0.0, np.sqrt(3.0), 0.0]]))

    @classmethod
    def entropy_bonus_counterexample(cls) -> SoftmaxTestbed:
        """T9: X uniform on 2 prompts, Z in {0, 1, 2}, tabular logits (2, 0, -5) and (2, -5, 0).

        I = 0.0783 nats, and dI/dt = +0.030 along per-prompt entropy ascent d logit_x / dt = grad H(pi(.|x)).
        """
        return cls.tabular(np.array([[2.0, 0.0, -5.0], [2.0, -5.0, 0.0]]))

    @classmethod
    def rank_one_tight(
        cls, rng: np.random.Generator, X: int = 1, Z: int = 3, d: int = 3, temperature: float = 1.0
    ) -> SoftmaxTestbed:
        """A T1 equality case: phi(x, z) = c(x, z) v(x) (rank-one score), mu = a(x) + beta(x) c(x, z), sigma = 0.

        Then s = (c - E c) v and A = beta (c - E c), so A is proportional to the score's only direction.
        ``temperature`` > 0 scales c (at 0 the score vanishes and there is no equality to check).
        """
        rng = require_rng("rng", rng)
        X, Z, d = require_int("X", X, 1), require_int("Z", Z, 2), require_int("d", d, 1)
        temperature = require_real("temperature", temperature, 0.0, low_open=True)
        c = rng.normal(size=(X, Z)) * temperature
        v = rng.normal(size=(X, d))
        features = c[:, :, None] * v[:, None, :]
        theta = rng.normal(size=d)
        a = rng.normal(size=(X, 1))
        beta = rng.choice([-1.0, 1.0], size=(X, 1)) * rng.uniform(0.1, 3.0, size=(X, 1))
        return cls(features, theta, a + beta * c, np.zeros(X))

    @classmethod
    def random(
        cls,
        rng: np.random.Generator,
        X: int | None = None,
        Z: int | None = None,
        d: int | None = None,
        temperature: float | None = None,
        sigma_scale: float | None = None,
        heteroscedastic: bool = False,
        mu_offset: float | None = None,
    ) -> SoftmaxTestbed:
        """A random testbed; every argument left as None is drawn.

        Draws cover: X in 1..6, Z in 2..8, d in 1..5; an inverse temperature ||theta|| log-uniform in
        [0.01, 30] (so near-deterministic policies occur); sigma log-uniform in [1e-3, 100] (large
        noise), sometimes exactly 0; reward means with a random offset up to +-100 (baselines far from
        0); occasionally duplicated outcome features (ties) and non-uniform prompt weights.  Given values:
        X >= 1, Z >= 2, d >= 1 (integers), temperature >= 0 (the norm of theta: 0 is the uniform policy),
        sigma_scale >= 0 and mu_offset finite.
        """
        rng = require_rng("rng", rng)
        X = None if X is None else require_int("X", X, 1)
        Z = None if Z is None else require_int("Z", Z, 2)
        d = None if d is None else require_int("d", d, 1)
        temperature = None if temperature is None else require_real("temperature", temperature, 0.0)
        sigma_scale = None if sigma_scale is None else require_real("sigma_scale", sigma_scale, 0.0)
        mu_offset = None if mu_offset is None else require_real("mu_offset", mu_offset)
        heteroscedastic = require_bool("heteroscedastic", heteroscedastic)
        X = int(rng.integers(1, 7)) if X is None else X
        Z = int(rng.integers(2, 9)) if Z is None else Z
        d = int(rng.integers(1, 6)) if d is None else d
        temperature = float(np.exp(rng.uniform(np.log(0.01), np.log(30.0)))) if temperature is None else temperature
        features = rng.normal(size=(X, Z, d))
        if Z > 2 and rng.random() < 0.15:  # tied outcomes
            features[:, 1] = features[:, 0]
        theta = rng.normal(size=d)
        theta *= temperature / max(np.linalg.norm(theta), 1e-12)
        mu = rng.normal(size=(X, Z)) * float(np.exp(rng.uniform(np.log(0.01), np.log(10.0))))
        if mu_offset is None:
            mu_offset = float(rng.choice([0.0, rng.uniform(-100.0, 100.0)]))
        mu = mu + mu_offset
        if sigma_scale is None:
            sigma_scale = 0.0 if rng.random() < 0.1 else float(np.exp(rng.uniform(np.log(1e-3), np.log(100.0))))
        shape = (X, Z) if heteroscedastic else (X,)
        sigma = sigma_scale * rng.uniform(0.2, 1.0, size=shape)
        if heteroscedastic and Z > 1:
            sigma[:, rng.integers(0, Z)] = 0.0  # noise on some outcomes only
        prompt_probs = None
        if X > 1 and rng.random() < 0.3:
            prompt_probs = rng.dirichlet(np.ones(X))
        return cls(features, theta, mu, sigma, prompt_probs)


def random_channel(rng: np.random.Generator, X: int, Z: int, scale: float = 2.0) -> np.ndarray:
    """A random full-support channel softmax(scale * N(0, 1)), ``[X, Z]`` (X, Z >= 1, scale >= 0)."""
    rng = require_rng("rng", rng)
    X, Z = require_int("X", X, 1), require_int("Z", Z, 1)
    scale = require_real("scale", scale, 0.0)
    return _softmax(scale * rng.normal(size=(X, Z)), axis=1)


def enumerate_outcomes(probs: Sequence[float] | np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """All G-tuples of outcome indices with their probabilities: (indices [n^G, G], weights [n^G]).

    ``probs``: a probability vector ``[n]``; ``G`` >= 1, with n^G at most :data:`~theory_checks.inputs.MAX_OUTCOMES`
    (``ValueError`` before anything is allocated: 16 outcomes and G = 8 would need 256 GiB).
    """
    probs = require_distribution("probs", probs, 1)
    G = require_int("G", G, 1)
    n = probs.shape[0]
    if n**G > MAX_OUTCOMES:
        raise ValueError(f"enumerating {n}^{G} = {n**G:.3g} outcome tuples is more than the {MAX_OUTCOMES} allowed "
                         f"(probs has {n} outcomes, G = {G}): use a smaller G or fewer outcomes")
    idx = np.indices((n,) * G).reshape(G, -1).T
    return idx, np.prod(probs[idx], axis=1)


def require_testbed(name: str, tb: object) -> SoftmaxTestbed:
    """`tb` if it is a :class:`SoftmaxTestbed`; ``TypeError`` naming `name` otherwise."""
    if not isinstance(tb, SoftmaxTestbed):
        raise TypeError(f"{name} must be a SoftmaxTestbed, got {shown(tb)} ({type(tb).__name__})")
    return tb
