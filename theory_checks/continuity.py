"""T8: continuity of the mutual information in the policy (how much I can move for a given change of pi).

- paper  |dI| <= 2 (delta log(|X||Z| - 1) + h2(delta)), delta = sqrt(sup_x KL / 2) <= 1 - 1/(|X||Z|)
  (loose by a factor >= 2: see :func:`t8_paper_cap`);
- |Z|-free (AFW)  |dI| <= 2 dbar log|X| + (1 + dbar) h2(dbar / (1 + dbar)), dbar = E_x TV_x;
- for classical X the same with dbar log|X|; and the AFW bound at the Pinsker value sqrt(E_x KL / 2).

Random pairs, near-extremal constructions (small-weight and symmetric pairs) and an adversarial search.
"""

from __future__ import annotations

import math

import numpy as np

from .inputs import (
    require_bool,
    require_channel,
    require_distribution,
    require_int,
    require_real,
    require_rng,
)
from .records import Check, bound, search_record
from .testbed import _h2, _softmax, channel_mutual_information, h2, kl_divergence, softmax

__all__ = [
    "t8_checks",
    "check_t8",
    "t8_small_weight_pair",
    "t8_symmetric_pair",
    "t8_adversarial_search",
    "t8_paper_cap",
    "check_t8_families",
]


#: the bounds :func:`t8_adversarial_search` can target
_TARGETS = ("paper", "pinsker", "afw", "classical")


def _afw(db: float, X: int, factor: float = 2.0) -> float:
    """factor * dbar log|X| + (1 + dbar) h2(dbar / (1 + dbar)) (factor 2: Alicki-Fannes-Winter; 1: classical X)."""
    return factor * db * math.log(X) + (1 + db) * float(h2(db / (1 + db)))


def _t8_paper(delta: float, D: int) -> float:
    return 2 * (delta * math.log(D - 1) + float(h2(delta)))


def t8_checks(w: np.ndarray, p0: np.ndarray, p1: np.ndarray, family: str = "random") -> list[Check]:
    """Every T8 bound on one channel pair pi_0 = ``p0``, pi = ``p1`` (rows x, columns z) with prompt weights w.

    paper:     |I - I_0| <= 2 (delta log(|X||Z| - 1) + h2(delta)),  delta = sqrt(sup_x KL(pi||pi_0) / 2),
               only where delta <= 1 - 1/(|X||Z|) (and the KL is finite);
    AFW:       |I - I_0| <= 2 dbar log|X| + (1 + dbar) h2(dbar / (1 + dbar)),  dbar = E_x TV_x;
    classical: the same with dbar log|X| (X is a classical variable: H(X|Z) lies in [0, log|X|], so the
               Alicki-Fannes-Winter argument gives range log|X| instead of 2 log|X|; Winter 2016, Lemma 2);
    Pinsker:   dbar <= sqrt(E_x KL / 2), and the AFW bound at that value (a corollary).

    w: ``[X]``, p0 and p1: ``[X, Z]`` with Z >= 2, probability vectors (rows).
    """
    w, p0 = require_channel(w, p0, "w", "p0")
    p1 = require_distribution("p1", p1, 2, shape=p0.shape)
    X, Z = p0.shape
    if Z < 2:
        raise ValueError(f"p0 and p1 must have at least 2 outcomes (columns), got {Z}")
    dI = abs(channel_mutual_information(w, p1) - channel_mutual_information(w, p0))
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = kl_divergence(p1, p0, axis=1)
    out: list[Check] = []
    D = X * Z
    note = family
    if np.all(np.isfinite(kl)):
        delta = math.sqrt(max(float(kl.max()), 0.0) / 2)
        if delta <= 1 - 1 / D:
            d_nosqrt = min(max(float(kl.max()), 0.0) / 2, 1 - 1 / D)
            out.append(bound("t8_paper", dI, _t8_paper(delta, D),
                             atol=1e-14, note=note, variants={"rhs x0.25": (dI, 0.25 * _t8_paper(delta, D)),
                                       "delta = sup KL / 2 (square root dropped)": (dI, _t8_paper(d_nosqrt, D))}))
    dbar = float(w @ (0.5 * np.abs(p1 - p0).sum(axis=1)))
    out.append(bound("t8_afw", dI, _afw(dbar, X),
                     atol=1e-14, note=note, variants={"drop the (1+dbar) h2 term": (dI, 2 * dbar * math.log(X)),
                               "factor 2 -> 1 on dbar log|X|": (dI, _afw(dbar, X, 1.0))}))
    out.append(bound("t8_classical", dI, _afw(dbar, X, 1.0),
                     atol=1e-14, note=note, variants={"drop the (1+dbar) h2 term": (dI, dbar * math.log(X)),
                               "drop dbar log|X|": (dI, _afw(dbar, X, 0.0))}))
    if np.all(np.isfinite(kl)):
        ekl = max(float(w @ kl), 0.0)
        pinsker = min(1.0, math.sqrt(ekl / 2))
        out.append(bound("t8_afw_pinsker", dI, _afw(pinsker, X), atol=1e-14, note=note))
        out.append(bound("t8_pinsker", dbar, pinsker, atol=1e-15, note=note,
                         variants={"no square root: E TV <= E KL / 2": (dbar, ekl / 2)}))
    return out


def check_t8(rng: np.random.Generator) -> list[Check]:
    """T8 on a random pair of channels pi, pi_0 (same prompt weights), perturbation scale log-uniform."""
    rng = require_rng("rng", rng)
    X = int(rng.integers(2, 7))
    Z = int(rng.integers(2, 9))
    w = rng.dirichlet(np.ones(X)) if rng.random() < 0.5 else np.full(X, 1.0 / X)
    logits0 = rng.normal(size=(X, Z)) * float(np.exp(rng.uniform(-1, 1.5)))
    logits = logits0 + rng.normal(size=(X, Z)) * float(np.exp(rng.uniform(np.log(1e-3), np.log(3.0))))
    return t8_checks(w, softmax(logits0, 1), softmax(logits, 1))


def t8_small_weight_pair(n: int, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Near-extremal for the dbar bounds: prompt 0 has weight 1 - eps, prompts 1..n-1 share eps; under pi_0
    every prompt emits z = 0, under pi prompt x emits z = x.  Then dbar = eps and
    |dI| = H(X) = h2(eps) + eps log(n - 1), which approaches the classical-X bound as eps -> 0 or n grows
    (and the AFW bound, whose extra dbar log|X| becomes negligible against h2, as eps -> 0).
    n >= 2 prompts, eps in (0, 1)."""
    n = require_int("n", n, 2)
    eps = require_real("eps", eps, 0.0, 1.0, low_open=True, high_open=True)
    w = np.array([1.0 - eps] + [eps / (n - 1)] * (n - 1))
    p0 = np.zeros((n, n))
    p0[:, 0] = 1.0
    p1 = np.eye(n)
    return w, p0, p1


def t8_symmetric_pair(n: int, a: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Near-extremal for the KL bounds (found by the adversarial search, then written in closed form): X uniform
    on n prompts, pi_0 the n-ary symmetric channel with error a, pi noiseless.  KL(pi||pi_0) = -log(1 - a) for
    every x, dbar = a, |dI| = h2(a) + a log(n - 1).  n >= 2 prompts, a in [0, 1]."""
    n = require_int("n", n, 2)
    a = require_real("a", a, 0.0, 1.0)
    w = np.full(n, 1.0 / n)
    p0 = np.full((n, n), a / (n - 1)) + np.eye(n) * (1.0 - a - a / (n - 1))
    return w, p0, np.eye(n)


def _t8_ratio_batch(target: str, w: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """Vectorised ratio |dI| / rhs over a population ``[N, X, Z]`` (rounding allowance 1e-10 on |dI|)."""
    N, X, Z = p0.shape

    def mi(pp: np.ndarray) -> np.ndarray:
        m = np.einsum("nx,nxz->nz", w, pp)
        return np.sum(w[:, :, None] * pp * (np.log(pp) - np.log(m)[:, None, :]), axis=(1, 2))

    dI = np.abs(mi(p1) - mi(p0)) - 1e-10
    if target == "paper":
        kl = np.sum(p1 * (np.log(p1) - np.log(p0)), axis=2).max(axis=1)
        delta = np.sqrt(np.maximum(kl, 0.0) / 2)
        D = X * Z
        rhs = 2 * (delta * math.log(D - 1) + _h2(np.clip(delta, 0.0, 1.0)))
        return np.where(delta <= 1 - 1 / D, dI / np.maximum(rhs, 1e-300), -1.0)
    if target == "pinsker":
        db = np.minimum(
            1.0, np.sqrt(np.maximum(np.einsum("nx,nx->n", w, np.sum(p1 * (np.log(p1) - np.log(p0)), axis=2)), 0.0) / 2)
        )
    else:
        db = np.einsum("nx,nx->n", w, 0.5 * np.abs(p1 - p0).sum(axis=2))
    factor = 1.0 if target == "classical" else 2.0
    rhs = factor * db * math.log(X) + (1 + db) * _h2(db / (1 + db))
    return np.where(db > 1e-8, dI / np.maximum(rhs, 1e-300), -1.0)


def t8_adversarial_search(rng: np.random.Generator, target: str, X: int, Z: int, gens: int = 150,
                          pop: int = 64) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Maximise |dI| / rhs over channel pairs and prompt weights by a (1 + pop) evolution strategy on the
    logits (self-adapting step); returns (best ratio, (w, p0, p1)).  ``target``: paper, pinsker, afw, classical;
    X >= 1 prompts, Z >= 2 outcomes, gens >= 1 generations of pop >= 1 offspring."""
    rng = require_rng("rng", rng)
    if target not in _TARGETS:
        raise ValueError(f"target must be one of {', '.join(_TARGETS)}, got {target!r}")
    X, Z = require_int("X", X, 1), require_int("Z", Z, 2)
    gens, pop = require_int("gens", gens, 1), require_int("pop", pop, 1)
    m0 = rng.normal(size=(X, Z)) * 3.0
    m = [m0, m0 + rng.normal(size=(X, Z)) * 0.3, rng.normal(size=X)]
    step, best = 1.0, -1.0
    for _ in range(gens):
        L0 = m[0] + step * rng.normal(size=(pop, X, Z))
        L1 = m[1] + step * rng.normal(size=(pop, X, Z))
        W = m[2] + step * rng.normal(size=(pop, X))
        L0[0], L1[0], W[0] = m
        with np.errstate(all="ignore"):
            r = np.nan_to_num(_t8_ratio_batch(target, _softmax(W, 1), _softmax(L0, 2), _softmax(L1, 2)), nan=-1.0)
        i = int(np.argmax(r))
        best = float(r[i])
        if i > 0:
            m = [L0[i], L1[i], W[i]]
            step *= 1.1
        else:
            step = max(step * 0.85, 1e-3)
    return best, (_softmax(m[2], 0), _softmax(m[0], 1), _softmax(m[1], 1))


def t8_paper_cap(X: int, Z: int, n_grid: int = 4000) -> float:
    """Largest possible |dI| / (paper rhs) implied by the classical-X bound: with dbar <= delta (Pinsker, Jensen)
    and |dI| <= log min(|X|, |Z|),  cap = max_delta min(W(delta), log min(X, Z)) / paper(delta), W the
    classical-X bound (increasing in dbar).  Log-spaced delta grid down to 1e-12; the limit delta -> 0 is 1/2.
    X >= 1, Z >= 2, n_grid >= 2 grid points.
    """
    X, Z, n_grid = require_int("X", X, 1), require_int("Z", Z, 2), require_int("n_grid", n_grid, 2)
    D = X * Z
    delta = np.concatenate([np.logspace(-12, -1, n_grid // 2), np.linspace(0.1, 1 - 1 / D, n_grid // 2)])
    paper = 2 * (delta * math.log(D - 1) + _h2(delta))
    W = delta * math.log(X) + (1 + delta) * _h2(delta / (1 + delta))
    return float(np.max(np.minimum(W, math.log(min(X, Z))) / paper))


def check_t8_families(rng: np.random.Generator, quick: bool = False) -> list[Check]:
    """Near-tight and adversarial T8 instances (issue 12: the random pairs are far from tight).

    - small-weight pairs (:func:`t8_small_weight_pair`): ratio of the classical-X bound above 0.99 and of
      the AFW bound above 0.9, so that a constant 10% too small fails;
    - n-ary symmetric pairs (:func:`t8_symmetric_pair`) on a grid of the error a (i.e. of delta): the best
      ratio of the paper's bound (0.27 at n = 2) and of its Pinsker variant;
    - an adversarial evolution strategy per bound from random starts (searches, reported apart);
    - the cap of the paper's ratio implied by the classical-X bound (< 1/2: the paper's constant is loose
      by a factor >= 2, so its x0.5 and x0.9 variants are true statements no instance can refute).
    """
    rng, quick = require_rng("rng", rng), require_bool("quick", quick)
    out: list[Check] = []
    eps_list = (1e-2, 1e-4, 1e-8, 1e-10) if quick else (1e-1, 1e-2, 1e-3, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12)
    for n in ((2, 6) if quick else (2, 3, 4, 6, 8)):
        for eps in eps_list:
            out += t8_checks(*t8_small_weight_pair(n, eps), family=f"small-weight n={n} eps={eps:g}")
    grid = np.linspace(0.02, 0.9, 12 if quick else 45)
    for n in ((2, 3) if quick else (2, 3, 4, 6)):
        for a in grid:
            out += t8_checks(*t8_symmetric_pair(n, float(a)), family=f"symmetric n={n} a={a:.3f}")
    sizes = ((2, 2), (3, 3)) if quick else ((2, 2), (2, 4), (3, 3), (4, 4), (6, 3))
    for target, check_id in (("paper", "t8_search_paper"), ("pinsker", "t8_search_afw_pinsker"),
                             ("afw", "t8_search_afw"), ("classical", "t8_search_classical")):
        best = -1.0
        for X, Z in sizes:
            for _ in range(1 if quick else 3):
                r, inst = t8_adversarial_search(rng, target, X, Z, gens=80 if quick else 250)
                out += t8_checks(*inst, family=f"adversarial ({target}) X={X} Z={Z}")
                best = max(best, r)
        out.append(search_record(check_id, best, f"evolution strategy on the logits, sizes {list(sizes)}"))
    caps = np.array([t8_paper_cap(X, Z) for X in range(2, 9) for Z in range(2, 9)])
    out.append(bound("t8_paper_cap", caps, np.full(caps.size, 0.5),
                     note=f"|X|, |Z| in 2..8; largest cap {caps.max():.4f} (limit 1/2 as delta -> 0)"))
    return out
