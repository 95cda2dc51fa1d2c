"""T4: mixing the channel with an x-independent template contracts the mutual information.

I_alpha <= (1 - alpha) I; alpha -> I_alpha is convex; equality when q lives where p(z|x) = p(z);
strict when q = p(z) and I > 0.
"""

from __future__ import annotations

import numpy as np

from .inputs import PROB_ATOL, require_array, require_bool, require_channel, require_distribution, require_rng
from .records import Check, bound, strict
from .testbed import channel_mutual_information, random_channel

__all__ = ["ALPHAS", "mixture_mi", "check_t4", "t4_instances"]


ALPHAS = np.linspace(0.0, 1.0, 11)


def _t4_args(w: object, channel: object, q: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """w [X] and q [Z] probability vectors, channel [X, Z] with probability rows."""
    w, channel = require_channel(w, channel)
    q = require_distribution("q", q, 1)
    if q.shape[0] != channel.shape[1]:
        raise ValueError(f"q must have one entry per column of channel ({channel.shape[1]}), got {q.shape[0]}")
    return w, channel, q


def mixture_mi(w: np.ndarray, channel: np.ndarray, q: np.ndarray, alphas: np.ndarray = ALPHAS) -> np.ndarray:
    """I_alpha(X;Z) for p_alpha(z|x) = (1 - alpha) p(z|x) + alpha q(z), one value per alpha.

    w: prompt weights ``[X]``; channel: ``[X, Z]`` (rows p(.|x)); q: template ``[Z]``: probability vectors;
    alphas: numbers in [0, 1] (outside it p_alpha is not a distribution)."""
    w, channel, q = _t4_args(w, channel, q)
    alphas = np.atleast_1d(require_array("alphas", alphas, nonneg=True))
    if np.any(alphas > 1):
        raise ValueError(f"alphas must lie in [0, 1], got {float(alphas[alphas > 1][0])!r}")
    return np.array([channel_mutual_information(w, (1 - a) * channel + a * q[None, :]) for a in alphas])


def check_t4(
    w: np.ndarray, channel: np.ndarray, q: np.ndarray, label: str = "random q", tight: bool = False
) -> list[Check]:
    """T4 on a grid alpha = 0, 0.1, ..., 1.

    - contraction I_alpha <= (1 - alpha) I (``tight``: equality expected);
    - convexity I(alpha_m) <= (I(alpha_{m-1}) + I(alpha_{m+1})) / 2;
    - ``label == "q = p(z)"``: strict contraction I_alpha < (1 - alpha) I for alpha in (0, 1) when I > 0
      (``ValueError`` when q is not the marginal w @ channel).
    """
    w, channel, q = _t4_args(w, channel, q)
    tight = require_bool("tight", tight)
    if label == "q = p(z)" and np.max(np.abs(q - w @ channel)) > PROB_ATOL:
        raise ValueError(f"label 'q = p(z)' needs q = w @ channel (the marginal), got q = {q.tolist()} "
                         f"and w @ channel = {(w @ channel).tolist()}")
    I_a = mixture_mi(w, channel, q)
    I0 = I_a[0]
    atol = 1e-15 * (1.0 + I0)
    inner = slice(1, -1)
    rhs = (1 - ALPHAS[inner]) * I0
    # tightness is asserted only where I is well above the float64 floor of the inputs (I > 1e-6)
    out = [bound("t4_contraction", I_a[inner], rhs, atol=atol, tight=tight and I0 > 1e-6,
                 variants={"(1-alpha)^2 instead of (1-alpha)": (I_a[inner], (1 - ALPHAS[inner]) ** 2 * I0)})]
    out.append(bound("t4_convexity", I_a[1:-1], (I_a[:-2] + I_a[2:]) / 2, atol=atol))
    if label == "q = p(z)" and I0 > 1e-8:
        out.append(strict("t4_strict_contraction", I_a[inner], rhs))
    return out


def t4_instances(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, str, bool]]:
    """Random (w, channel, q, label, tight) triples: random q, q = p(z), and q on x-independent outcomes."""
    rng = require_rng("rng", rng)
    X = int(rng.integers(2, 6))
    Z = int(rng.integers(2, 7))
    w = rng.dirichlet(np.ones(X)) if rng.random() < 0.5 else np.full(X, 1.0 / X)
    ch = random_channel(rng, X, Z, scale=float(np.exp(rng.uniform(-2, 2))))
    out = [(w, ch, rng.dirichlet(np.ones(Z)), "random q", False), (w, ch, w @ ch, "q = p(z)", False)]
    # tight: a block S of outcomes with p(z|x) = c_z for every x, template q supported on S
    k = int(rng.integers(1, Z + 1))
    S = rng.choice(Z + 1, size=k, replace=False)
    rest = np.setdiff1d(np.arange(Z + 1), S)
    cS = rng.dirichlet(np.ones(k)) * rng.uniform(0.05, 0.95)
    ch2 = np.zeros((X, Z + 1))
    ch2[:, S] = cS
    ch2[:, rest] = (1 - cS.sum()) * rng.dirichlet(np.ones(len(rest)), size=X)
    q = np.zeros(Z + 1)
    q[S] = rng.dirichlet(np.ones(k))
    out.append((w, ch2, q, "q on x-independent outcomes", True))
    return out
