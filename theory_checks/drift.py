"""T6: drift of the parameters under noisy updates, E||theta_T - theta_0||^2 = eta^2 (T v + T (T-1) ||m||^2),
v = E||u||^2, m = E u (by enumeration)."""

from __future__ import annotations

import numpy as np

from .inputs import require_rng
from .records import Check, identity
from .testbed import enumerate_outcomes

__all__ = ["check_t6"]


def check_t6(rng: np.random.Generator) -> list[Check]:
    """T6 by enumeration: updates u_t i.i.d. over K atoms in R^d, theta_T - theta_0 = eta sum_t u_t.

        E||theta_T - theta_0||^2 = eta^2 (T v + T (T-1) ||m||^2),   v = E||u||^2, m = E u,

    so with m = 0 it is eta^2 T v (diffusive, RMS ~ sqrt T) and a persistent m is ballistic.
    Enumerates all K^T update sequences.
    """
    rng = require_rng("rng", rng)
    K = int(rng.integers(2, 4))
    T = int(rng.integers(1, 7 if K == 2 else 6))
    d = int(rng.integers(1, 4))
    eta = float(np.exp(rng.uniform(-3, 1)))
    probs = rng.dirichlet(np.ones(K))
    atoms = rng.normal(size=(K, d))
    out = []
    for check_id, at in (("t6_drift_diffusive", atoms - probs @ atoms), ("t6_drift_ballistic", atoms)):
        idx, w = enumerate_outcomes(probs, T)
        disp = eta * at[idx].sum(axis=1)
        lhs = float(np.sum(w * np.sum(disp * disp, axis=1)))
        m = probs @ at
        v = float(probs @ np.sum(at * at, axis=1))
        rhs = eta**2 * (T * v + T * (T - 1) * float(m @ m))
        variants = {"eta instead of eta^2": (lhs, eta * (T * v + T * (T - 1) * float(m @ m)))}
        if check_id == "t6_drift_ballistic":
            variants["T^2 instead of T(T-1)"] = (lhs, eta**2 * (T * v + T * T * float(m @ m)))
            variants["drop the ballistic term T(T-1)||m||^2"] = (lhs, eta**2 * T * v)
        out.append(identity(check_id, lhs, rhs, atol=1e-14 * eta**2 * T**2 * (1 + v), variants=variants))
    return out
