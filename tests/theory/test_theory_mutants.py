"""Mutation machinery: informative vs by-construction mutants, rows without a mutant, equivalent and not-claimed
mutants, catalog coverage, and checks that a wrong reference rule or a wrong tie rule fails."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from theory_checks import bounds as B
from theory_checks import filtering
from theory_checks.catalog import CATALOG, entry
from theory_checks.mutants import BY_CONSTRUCTION, NO_INFORMATIVE, evaluate_mutants, mutation_summary


def _by_label(results, row):
    return {r.label: r for r in results if r.row == row}


def test_free_catches_are_reported_apart_and_not_counted() -> None:
    name = "T1 paper: ||g|| <= sqrt(RV E||s||^2)"
    # a loose record (ratio 0.3) and an equality instance: every scaling is rejected only at the equality
    # instance, where the tight check itself implies it; the reversed bound is free everywhere
    checks = [B.bound(name, 0.3, 1.0), B.bound(name + " [tight]", 1.0, 1.0, tight=True)]
    res = _by_label(evaluate_mutants(checks), name)
    assert {k: v.status for k, v in res.items() if k != "(no informative mutant)"} == {
        "rhs x0.5": BY_CONSTRUCTION, "rhs x0.9": BY_CONSTRUCTION, "reversed": BY_CONSTRUCTION, "rhs x2": BY_CONSTRUCTION
    }
    assert not any(r.counted for r in res.values())
    # so the row has no informative mutant, and that fails the run (it is not dropped silently)
    assert res["(no informative mutant)"].status == NO_INFORMATIVE and res["(no informative mutant)"].failed
    # a near-tight record that is not an equality instance rejects x0.9 on its data: informative
    res = _by_label(evaluate_mutants(checks + [B.bound(name, 0.95, 1.0)]), name)
    assert res["rhs x0.9"].status == "caught" and res["rhs x0.9"].counted
    assert res["rhs x0.5"].status == "caught" and res["reversed"].status == BY_CONSTRUCTION
    assert "(no informative mutant)" not in res


def test_identity_scalings_and_reversed_counterexamples_are_by_construction() -> None:
    ident = B.identity("MSE_G formula = enumeration", 2.0, 2.0, variants={"1/G^2 instead of 1/G": (2.0, 1.0)})
    ce = B.counterexample("T5 'smaller RV => larger rho' (false)", 2.0, 1.0,
                          variants={"noise prompt without its noise (sigma = 0)": (0.5, 1.0)})
    res = evaluate_mutants([ident, ce])
    st = {(r.row[:5], r.label): r.status for r in res}
    assert st[("MSE_G", "rhs x0.5")] == st[("MSE_G", "rhs x2")] == BY_CONSTRUCTION
    assert st[("MSE_G", "1/G^2 instead of 1/G")] == "caught"
    assert st[("T5 's", "reversed")] == BY_CONSTRUCTION
    assert st[("T5 's", "noise prompt without its noise (sigma = 0)")] == "caught"
    s = mutation_summary(res)
    assert (s["caught"], s["total"], s["by_construction"], s["no_informative"]) == (2, 2, 4, 0)


def test_evidence_row_without_mutants_is_flagged_not_dropped() -> None:
    row = "RL core reward_variance(ddof=0) = numpy var"
    res = evaluate_mutants([B.identity(row, 0.0, 0.0)])  # zero values: no scaling mutant is generated at all
    assert [(r.label, r.status) for r in res] == [("(no informative mutant)", NO_INFORMATIVE)]
    assert mutation_summary(res)["failed"] == 1


def test_surviving_mutant_of_evidence_fails_and_of_sanity_does_not() -> None:
    checks = [B.bound("I <= H(X)", 0.3, 1.0), B.bound("T3 floor <= E||s||^2 / K (saturation)", 0.3, 1.0)]
    res = evaluate_mutants(checks)
    ev = _by_label(res, "I <= H(X)")
    assert ev["rhs x0.5"].status == "SURVIVED" and ev["rhs x0.5"].failed
    san = _by_label(res, "T3 floor <= E||s||^2 / K (saturation)")
    assert san["rhs x0.5"].status == "SURVIVED" and not san["rhs x0.5"].failed
    assert ev["rhs x0.9"].status == "SURVIVED"  # I <= H(X) claims tightness (deterministic channels)
    assert mutation_summary(res)["failed"] == 2


def test_equivalent_mutants_are_reported_and_contradicted_when_refuted() -> None:
    name = "T8 paper: |dI| <= 2(delta log(|X||Z|-1) + h2(delta))"
    assert "rhs x0.5" in entry(name).equivalent
    res = _by_label(evaluate_mutants([B.bound(name, 0.2, 1.0)]), name)
    assert res["rhs x0.5"].status == "equivalent" and not res["rhs x0.5"].counted
    res = _by_label(evaluate_mutants([B.bound(name, 0.8, 1.0)]), name)  # a ratio the proof says is impossible
    assert res["rhs x0.5"].status == "CONTRADICTED" and res["rhs x0.5"].failed


def test_x09_of_a_bound_that_does_not_claim_tightness_is_not_claimed() -> None:
    name = "E_batch[I_P] <= I(X;Z)"
    assert not entry(name).sharp
    res = _by_label(evaluate_mutants([B.bound(name, 0.6, 1.0)]), name)
    assert res["rhs x0.9"].status == "not claimed" and not res["rhs x0.9"].failed
    assert res["rhs x0.5"].status == "caught"


def test_tautologies_are_sanity_rows() -> None:
    for row in ("T9 dI = Delta_marg - Delta_in", "T7 equal sigma: MSE_S / MSE_all = P / n",
                "T7 'filtering reduces MSE' (false)", "MC MI-Seq-Est <= log P (every batch)",
                "MC collapse, scorer = sampler: MI-Seq-Est = 0 (every batch)"):
        assert CATALOG[row].category == "sanity" and CATALOG[row].why, row


def test_exact_run_rows_are_catalogued_and_every_evidence_row_has_a_caught_informative_mutant() -> None:
    checks = B.run_exact(np.random.default_rng(3), 20, quick=True)
    rows = {c.name.replace(" [tight]", "") for c in checks if c.kind != "search"}
    missing = sorted(r for r in rows if r not in CATALOG)
    assert not missing, missing
    res = evaluate_mutants(checks)
    assert not [(r.row, r.label, r.status) for r in res if r.failed]
    evidence_rows = {r for r in rows if CATALOG[r].category == "evidence"}
    counted_rows = {r.row for r in res if r.counted}
    assert evidence_rows == counted_rows
    s = mutation_summary(res)
    assert s["total"] > 90 and s["caught"] == s["total"] and s["by_construction"] > 50


@pytest.mark.parametrize("n_keep", [6, 3])
def test_a_wrong_top_p_reference_rule_fails_the_t7_paper_setting(monkeypatch: pytest.MonkeyPatch, n_keep: int) -> None:
    """A top-p rule that keeps 6 (or 3) groups still raises the MSE, so the counterexample alone cannot tell;
    the row that asserts 7 groups and MSE x1.15 must fail."""
    good = {c.name: c.holds for c in B.check_t7_paper_setting()}
    assert all(good.values())
    monkeypatch.setattr(filtering, "top_p_by_score",
                        lambda scores, rho: list(np.argsort(-scores, kind="stable")[:n_keep]))
    bad = {c.name: c.holds for c in B.check_t7_paper_setting()}
    assert bad["T7 paper setting: top-p (rho = 0.9, P = 8) lowers the MSE (false)"]  # still reproduced
    assert not bad["T7 paper setting: top-p (rho = 0.9, P = 8) keeps 7 groups, MSE x1.15"]


def test_t7_paper_setting_reports_the_batch_snr_rising() -> None:
    notes = {c.name: c.note for c in B.check_t7_paper_setting()}
    assert "batch SNR 7.39 -> 7.73" in notes["T7 paper setting: top-p (rho = 0.9, P = 8) lowers the MSE (false)"]
    assert "batch SNR 7.39 -> 9.43" in notes["T7 paper setting: keeping the high-RV half lowers the MSE (false)"]


def test_symbolic_mutants_are_refuted_by_instances_not_by_failed_proofs() -> None:
    from theory_checks import symbolic as S

    q = S.two_action_symbols(gap=S.Delta, scale=S.c_feat)
    snr2 = S.G * q["g"] ** 2 / (q["second"] - q["g"] ** 2)
    paper = S.G * (q["rvmu"] + S.sigma**2) / S.sigma**2
    # the true, weaker statement 2 G RV / sigma^2 - SNR^2 >= 0: the sufficient prover does not decide it, and
    # no instance refutes it, so it would not count as a caught mutant
    weaker = 2 * paper - snr2
    assert not S._nonneg(weaker)
    assert not S.refuted_nonneg(weaker)
    # a false one is refuted at p = 1/2 (t = 1), where SNR^2 = G RV_mu / sigma^2
    sharp = S.G * q["rvmu"] / S.sigma**2
    assert S.refuted_nonneg(sp.Rational(9, 10) * sharp - snr2)
    assert not S.refuted_identity(q["es2"] - S.c_feat**2 * q["p"] * (1 - q["p"]))
    assert S.refuted_identity(q["es2"] - S.c_feat * q["p"] * (1 - q["p"]))
