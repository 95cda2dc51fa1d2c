"""Row norms and the magnitudes of a testbed that scale the rounding tolerances of the exact checks."""

from __future__ import annotations

import numpy as np

from .testbed import SoftmaxTestbed

__all__ = ["norm", "scales"]


def norm(v: np.ndarray) -> np.ndarray:
    """Euclidean norm along the last axis."""
    return np.sqrt(np.sum(v * v, axis=-1))


def scales(tb: SoftmaxTestbed) -> tuple[float, float]:
    """Magnitudes for rounding tolerances: (max |mu| + max sigma + 1, max ||phi|| + 1)."""
    return (
        float(np.max(np.abs(tb.mu)) + np.max(tb.sigma) + 1.0),
        float(np.max(norm(tb.features)) + 1.0),
    )
