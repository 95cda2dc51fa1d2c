"""Symbolic proofs (sympy) and negative controls showing that the proof helpers can say no."""

from __future__ import annotations

import sympy as sp

from theory_checks import symbolic as S


def test_all_symbolic_proofs_go_through_and_reject_their_mutants() -> None:
    checks = S.run_symbolic()
    assert len(checks) >= 12
    bad = [c for c in checks if not c.holds]
    assert not bad, bad
    assert all(c.kind == "symbolic" for c in checks)
    # every proof carries mutated statements, and none of them is proved
    for c in checks:
        assert c.mutants, c.name
        assert not any(proved for _, proved in c.mutants), (c.name, c.mutants)
    # every proof states exactly what it covers, and every statement of coverage names a proof (by check id)
    assert {c.id for c in checks} == set(S.COVERS)


def test_two_action_derivation() -> None:
    q = S.two_action_symbols()
    p = q["p"]
    assert S._is_zero(q["s1"] - (1 - p))
    assert S._is_zero(q["g"] - q["es2"])
    assert S._is_zero(q["g"] - q["rvmu"])
    # general reward gap and feature scale: g = c Delta p(1-p), E s^2 = c^2 p(1-p), RV_mu = Delta^2 p(1-p)
    g = S.two_action_symbols(gap=S.Delta, scale=S.c_feat)
    assert S._is_zero(g["g"] - S.c_feat * S.Delta * p * (1 - p))
    assert S._is_zero(g["es2"] - S.c_feat**2 * p * (1 - p))
    assert S._is_zero(g["rvmu"] - S.Delta**2 * p * (1 - p))


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


def test_quadratic_prover_accepts_true_and_rejects_false() -> None:
    t = S.t
    u, v = sp.symbols("u v", positive=True)
    assert S.prove_nonneg_quadratic((t - 1) ** 2 + (t - 1) * u + u**2 + v**2, u, v)  # a square-completable form
    assert not S.prove_nonneg_quadratic((t - 1) ** 2 - 3 * (t - 1) * u + u**2, u, v)  # negative at t = 2, u = 1
    assert not S.prove_nonneg_quadratic(-u * v, u, v)
    assert not S.prove_nonneg_quadratic(u**3, u, v)  # not a quadratic: undecided, never a false True


def test_t4_general_proof_and_lemma_controls() -> None:
    assert S._t4_general()
    assert S._t4_lemma(lambda a, b: a - b)
    assert not S._t4_lemma(lambda a, b: a + b)
    assert not S._t4_lemma(lambda a, b: a - b, square=False)


def test_t2_paper_bound_two_actions_and_three_outcomes() -> None:
    ok, muts = S._t2_paper_two_action_heteroscedastic()
    assert ok and not any(muts.values())
    ok3, statement, muts3 = S._t2_paper_three_outcome_counterexample()
    assert ok3 and "Interval.open(2, oo)" in statement and not any(muts3.values())
