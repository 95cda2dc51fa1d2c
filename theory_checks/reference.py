"""The reference rules the theory checks compare the RL core against: plain numpy / plain-loop versions of the
paper's top-p and top-k selection and of the MI proxies' per-trace terms, written independently of
``ragen_core`` (no import from it).

They are kept in one small module so that they can be mutation-tested on their own (``make mutation``, module
``theory_reference``): a wrong reference rule would let a wrong core pass its cross-checks. Shapes follow the
paper's cross-scoring matrix: ``L[i, k, j] = log pi(z_ik | x_j)``, prompt ``i``, sample ``k``, scoring prompt ``j``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["top_p_by_score", "topk_by_variance", "seq_proxy_terms", "token_proxy_terms", "retrieval_hits"]

#: the tie rules of :func:`retrieval_hits`: ``shared`` is the core's rule, the other two are wrong rules (mutants)
RETRIEVAL_TIES = ("shared", "lower", "higher")


def top_p_by_score(scores: np.ndarray, rho: float) -> list[int]:
    """The paper's top-p rule by a plain loop in exact rational arithmetic: sort descending (ties by lower
    index), keep the smallest prefix whose sum reaches ``rho * total``.

    Every number is taken as the shortest decimal that round-trips its float (``repr``: 0.3 is 3/10, 0.9 is
    9/10), the value a user wrote, and compared exactly. In floating point a prefix that reaches the threshold
    exactly (0.3 + 0.3 + 0.3 of a total 1.0 at rho = 0.9) is decided by rounding and summation order, so two
    correct float implementations can keep different counts there; this rule cannot.

    Args:
        scores: ``[P]`` non-negative group scores (reward variances).
        rho: keep rate in (0, 1].

    Returns:
        the kept group indices in ranking order (at least one group).
    """
    exact = [Fraction(repr(float(s))) for s in scores]
    order = sorted(range(len(exact)), key=lambda i: (-exact[i], i))
    threshold = Fraction(repr(float(rho))) * sum(exact, Fraction(0))
    kept: list[int] = []
    acc = Fraction(0)
    for i in order:
        kept.append(i)
        acc += exact[i]
        if acc >= threshold:
            break
    return kept


def topk_by_variance(R: np.ndarray, k: int, ties: str = "lower") -> np.ndarray:
    """Mask ``[n, P]`` of the k groups with the largest sample variance (ddof = 1) in each of n batches
    ``R [n, P, G]``, ties by lower index (``ties="higher"``: by higher index, a wrong rule used as a mutant);
    nothing in a batch whose variances are all 0 (the documented empty step of ``ragen_core.math.filtering``)."""
    if ties not in ("lower", "higher"):
        raise ValueError(f"ties must be 'lower' or 'higher'; got {ties!r}")
    V = np.var(R, axis=2, ddof=1)
    if ties == "higher":
        return topk_by_variance(R[:, ::-1], k)[:, ::-1]
    order = np.argsort(-V, axis=1, kind="stable")[:, :k]
    mask = np.zeros(V.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=1)
    mask[np.all(V == 0, axis=1)] = False
    return mask


def seq_proxy_terms(L: np.ndarray) -> np.ndarray:
    """Per-trace sequence-level proxy terms, ``[P, G]``, from ``L [P, G, P]``:

        t[i, k] = L[i, k, i] - log( (1/P) sum_j exp L[i, k, j] )       (MI-Seq-Est = mean t)
    """
    P = L.shape[0]
    mx = L.max(axis=2, keepdims=True)
    lse = np.log(np.sum(np.exp(L - mx), axis=2)) + mx[..., 0] - math.log(P)
    return np.einsum("iki->ik", L) - lse


def token_proxy_terms(L: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-token matched and marginal terms of the paper's Eq. 1 by a plain loop:
    ``matched[i,k] = L[i,k,i] / n``, ``marginal[i,k] = log((1/P) sum_j exp L[i,k,j]) / n``, ``n = lengths[i,k]``
    (``L [P, G, P]``, ``lengths [P, G]``; both outputs ``[P, G]``)."""
    P, G, _ = L.shape
    matched = np.empty((P, G))
    marginal = np.empty((P, G))
    for i in range(P):
        for k in range(G):
            row = L[i, k]
            top = float(row.max())
            lse = top + math.log(sum(math.exp(float(v) - top) for v in row) / P)
            matched[i, k] = float(row[i]) / float(lengths[i, k])
            marginal[i, k] = lse / float(lengths[i, k])
    return matched, marginal


def retrieval_hits(L: np.ndarray, ties: str = "shared") -> np.ndarray:
    """``hit[i, k] = 1[argmax_j L[i, k, j] == i]`` (``[P, G]``), distinct prompts. A tie for the top score is
    shared (``ragen_core.math.mi``'s rule: the expected hit under a uniformly random tie-break, 1 / (number tied) when
    prompt i is among them); ``ties="lower"`` / ``"higher"``: the lowest / highest tied index wins (wrong rules,
    used as mutants)."""
    if ties not in RETRIEVAL_TIES:
        raise ValueError(f"ties must be one of {RETRIEVAL_TIES}; got {ties!r}")
    P = L.shape[0]
    own = np.arange(P)[:, None]
    if ties == "shared":
        top = L == L.max(axis=2, keepdims=True)
        return np.take_along_axis(top, own[:, :, None].repeat(L.shape[1], 1), axis=2)[..., 0] / top.sum(axis=2)
    win = np.argmax(L, axis=2) if ties == "lower" else P - 1 - np.argmax(L[:, :, ::-1], axis=2)
    return (win == own).astype(float)
