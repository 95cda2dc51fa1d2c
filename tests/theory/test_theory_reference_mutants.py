"""Tests that kill the mutants of theory_checks/reference.py that tests/theory/test_theory_reference.py left alive in
the first mutmut run (see docs/theory_report/mutation.md): the top-k mask is a boolean array, and the
sequence proxy's log-sum-exp is shifted per row, so rows of very different magnitude stay finite."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from theory_checks import reference as R


def test_topk_by_variance_returns_a_boolean_mask() -> None:
    Rb = np.array([[[0.0, 2.0], [1.0, 1.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]])
    mask = R.topk_by_variance(Rb, 2)
    assert mask.dtype == np.bool_
    assert mask.tolist() == [[True, False, True], [False, False, False]]


def test_seq_proxy_terms_shift_each_row_by_its_own_maximum() -> None:
    # traces of prompt 0 are scored near 0, traces of prompt 1 near -2000: one shift for the whole batch would
    # underflow every exp of the second kind of row to 0 (log 0 = -inf)
    rng = np.random.default_rng(6)
    L = rng.normal(0.0, 1.0, size=(2, 3, 2))
    L[1] -= 2000.0
    got = R.seq_proxy_terms(L)
    assert np.all(np.isfinite(got))
    for i in range(2):
        for k in range(3):
            lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in L[i, k]) / 2)
            assert got[i, k] == pytest.approx(float(mpmath.mpf(float(L[i, k, i])) - lse), abs=1e-9)
