"""Row norms and the magnitudes of a testbed that scale the rounding tolerances of the exact checks."""

from __future__ import annotations

import numpy as np

from .testbed import SoftmaxTestbed

__all__ = ["norm", "scales"]


def norm(v: np.ndarray) -> np.ndarray:
    """Euclidean norm along the last axis, without underflow or overflow of the squares.

    The plain sqrt(sum v^2) where it is exact to rounding; rows whose squares underflow (every entry below
    ~1e-154: the sum would be 0 for a non-zero vector) or overflow (an entry above ~1e154: inf for a finite
    norm) are recomputed scaled by their largest entry, m sqrt(sum (v / m)^2)."""
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        out = np.sqrt(np.sum(v * v, axis=-1))
    top = np.max(np.abs(v), axis=-1) if v.shape[-1] else np.zeros(v.shape[:-1])
    redo = np.isfinite(top) & (top > 0) & ((out == 0) | np.isinf(out) | (out < top))
    if np.any(redo):
        m = np.where(redo, top, 1.0)
        scaled = np.sqrt(np.sum((v / m[..., None]) ** 2, axis=-1)) * m
        out = np.where(redo, scaled, out)
    return out


def scales(tb: SoftmaxTestbed) -> tuple[float, float]:
    """Magnitudes for rounding tolerances: (max |mu| + max sigma + 1, max ||phi|| + 1)."""
    return (
        float(np.max(np.abs(tb.mu)) + np.max(tb.sigma) + 1.0),
        float(np.max(norm(tb.features)) + 1.0),
    )
