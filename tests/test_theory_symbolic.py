"""Symbolic proofs (sympy) and negative controls showing that the proof helpers can say no."""

from __future__ import annotations

import sympy as sp

from theory_checks import symbolic as S


def test_all_symbolic_proofs_go_through() -> None:
    checks = S.run_symbolic()
    assert len(checks) >= 10
    bad = [c for c in checks if not c.holds]
    assert not bad, bad
    assert all(c.kind == "symbolic" for c in checks)


def test_two_action_derivation() -> None:
    q = S.two_action_symbols()
    p = q["p"]
    assert S._is_zero(q["s1"] - (1 - p))
    assert S._is_zero(q["g"] - q["es2"])
    assert S._is_zero(q["g"] - q["rvmu"])


def test_helpers_reject_false_statements() -> None:
    t, sigma = S.t, S.sigma
    p = t / (1 + t)
    assert not S._is_zero(p - sp.Rational(1, 2))
    assert not S._nonneg(t - 1)  # negative for t < 1
    assert not S._nonneg((1 - 2 * p) * sigma)  # changes sign at p = 1/2
    assert S._nonneg((1 - 2 * p) ** 2 * sigma)
    assert S._nonneg(sigma**2 * (t + 1) ** 2 + (t - 1) ** 2, strict=True)
    assert not S._nonneg((t - 1) ** 2, strict=True)  # zero at t = 1
    # a wrong SNR closed form (missing sigma^2) is not proved equal
    q = S.two_action_symbols()
    snr2 = q["g"] ** 2 / ((q["second"] - q["g"] ** 2) / S.G)
    assert not S._is_zero(snr2 - S.G * p * (1 - p) / (1 - 2 * p) ** 2)


def test_t4_convexity_proof() -> None:
    assert S._t4_convexity()
