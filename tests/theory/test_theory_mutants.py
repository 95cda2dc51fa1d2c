"""Mutation machinery: informative vs by-construction mutants, rows without a mutant, equivalent and not-claimed
mutants, catalog coverage, and checks that a wrong reference rule or a wrong tie rule fails."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp

from theory_checks import bounds as B
from theory_checks import filtering
from theory_checks.catalog import CATALOG, SEARCHES, entry, label
from theory_checks.mutants import BY_CONSTRUCTION, NO_INFORMATIVE, evaluate_mutants, mutation_summary


def _by_label(results, check_id):
    return {r.label: r for r in results if r.check_id == check_id}


def test_ids_are_short_unique_and_labels_are_distinct() -> None:
    ids = [*CATALOG, *SEARCHES]
    assert len(ids) == len(set(ids))  # a search is not also a claim
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", i) and len(i) <= 40 for i in ids), ids
    labels = [label(i) for i in ids]
    assert len(labels) == len(set(labels))  # two rows of the table never look alike


def test_an_id_without_a_catalog_entry_is_an_error_not_a_silent_drop() -> None:
    # a record cannot be built for an id the catalog does not know (e.g. a label typed in place of the id)
    with pytest.raises(ValueError, match="no_such_check"):
        B.bound("no_such_check", 0.3, 1.0)
    with pytest.raises(ValueError, match="CATALOG"):
        B.identity("T1 paper: ||g|| <= sqrt(RV E||s||^2)", 1.0, 1.0)
    # a search id is not a claim, and a claim id is not a search
    with pytest.raises(ValueError, match="CATALOG"):
        B.bound("t8_search_paper", 0.3, 1.0)
    with pytest.raises(ValueError, match="SEARCHES"):
        B.search_record("t8_paper", 0.3)
    with pytest.raises(KeyError, match="no_such_check"):
        entry("no_such_check")
    with pytest.raises(KeyError, match="no_such_check"):
        label("no_such_check")
    # the label is display only: the row, its catalog entry and its mutants are found by the id
    c = B.bound("t1_paper", 0.3, 1.0)
    assert c.name == CATALOG["t1_paper"].label
    assert {r.check_id for r in evaluate_mutants([c])} == {"t1_paper"}
    assert {r.row for r in evaluate_mutants([c])} == {CATALOG["t1_paper"].label}


def test_free_catches_are_reported_apart_and_not_counted() -> None:
    name = "t1_paper"
    # a loose record (ratio 0.3) and an equality instance: every scaling is rejected only at the equality
    # instance, where the tight check itself implies it; the reversed bound is free everywhere
    checks = [B.bound(name, 0.3, 1.0), B.bound(name, 1.0, 1.0, tight=True)]
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
    ident = B.identity("mse_enumeration", 2.0, 2.0, variants={"1/G^2 instead of 1/G": (2.0, 1.0)})
    ce = B.counterexample("t5_smaller_rv_false", 2.0, 1.0,
                          variants={"noise prompt without its noise (sigma = 0)": (0.5, 1.0)})
    res = evaluate_mutants([ident, ce])
    st = {(r.check_id, r.label): r.status for r in res}
    assert st[("mse_enumeration", "rhs x0.5")] == st[("mse_enumeration", "rhs x2")] == BY_CONSTRUCTION
    assert st[("mse_enumeration", "1/G^2 instead of 1/G")] == "caught"
    assert st[("t5_smaller_rv_false", "reversed")] == BY_CONSTRUCTION
    assert st[("t5_smaller_rv_false", "noise prompt without its noise (sigma = 0)")] == "caught"
    s = mutation_summary(res)
    assert (s["caught"], s["total"], s["by_construction"], s["no_informative"]) == (2, 2, 4, 0)


def test_evidence_row_without_mutants_is_flagged_not_dropped() -> None:
    row = "core_reward_variance"
    res = evaluate_mutants([B.identity(row, 0.0, 0.0)])  # zero values: no scaling mutant is generated at all
    assert [(r.label, r.status) for r in res] == [("(no informative mutant)", NO_INFORMATIVE)]
    assert mutation_summary(res)["failed"] == 1


def test_surviving_mutant_of_evidence_fails_and_of_sanity_does_not() -> None:
    checks = [B.bound("mi_below_prompt_entropy", 0.3, 1.0), B.bound("t3_floor_saturation", 0.3, 1.0)]
    res = evaluate_mutants(checks)
    ev = _by_label(res, "mi_below_prompt_entropy")
    assert ev["rhs x0.5"].status == "SURVIVED" and ev["rhs x0.5"].failed
    san = _by_label(res, "t3_floor_saturation")
    assert san["rhs x0.5"].status == "SURVIVED" and not san["rhs x0.5"].failed
    assert ev["rhs x0.9"].status == "SURVIVED"  # I <= H(X) claims tightness (deterministic channels)
    assert mutation_summary(res)["failed"] == 2


def test_equivalent_mutants_are_reported_and_contradicted_when_refuted() -> None:
    name = "t8_paper"
    assert "rhs x0.5" in entry(name).equivalent
    res = _by_label(evaluate_mutants([B.bound(name, 0.2, 1.0)]), name)
    assert res["rhs x0.5"].status == "equivalent" and not res["rhs x0.5"].counted
    res = _by_label(evaluate_mutants([B.bound(name, 0.8, 1.0)]), name)  # a ratio the proof says is impossible
    assert res["rhs x0.5"].status == "CONTRADICTED" and res["rhs x0.5"].failed


def test_x09_of_a_bound_that_does_not_claim_tightness_is_not_claimed() -> None:
    name = "batch_mi_below_mi"
    assert not entry(name).sharp
    res = _by_label(evaluate_mutants([B.bound(name, 0.6, 1.0)]), name)
    assert res["rhs x0.9"].status == "not claimed" and not res["rhs x0.9"].failed
    assert res["rhs x0.5"].status == "caught"


def test_tautologies_are_sanity_rows() -> None:
    for row in ("t9_decomposition", "t7_equal_sigma_ratio", "t7_filtering_false", "mc_mi_seq_below_log_p",
                "mc_collapse_mi_seq"):
        assert CATALOG[row].category == "sanity" and CATALOG[row].why, row


def test_exact_run_rows_are_catalogued_and_every_evidence_row_has_a_caught_informative_mutant() -> None:
    checks = B.run_exact(np.random.default_rng(3), 20, quick=True)
    rows = {c.id for c in checks if c.kind != "search"}
    missing = sorted(r for r in rows if r not in CATALOG)
    assert not missing, missing
    res = evaluate_mutants(checks)
    assert not [(r.check_id, r.label, r.status) for r in res if r.failed]
    evidence_rows = {r for r in rows if CATALOG[r].category == "evidence"}
    counted_rows = {r.check_id for r in res if r.counted}
    assert evidence_rows == counted_rows
    s = mutation_summary(res)
    assert s["total"] > 90 and s["caught"] == s["total"] and s["by_construction"] > 50


@pytest.mark.parametrize("n_keep", [6, 3])
def test_a_wrong_top_p_reference_rule_fails_the_t7_paper_setting(monkeypatch: pytest.MonkeyPatch, n_keep: int) -> None:
    """A top-p rule that keeps 6 (or 3) groups still raises the MSE, so the counterexample alone cannot tell;
    the row that asserts 7 groups and MSE x1.15 must fail."""
    good = {c.id: c.holds for c in B.check_t7_paper_setting()}
    assert all(good.values())
    monkeypatch.setattr(filtering, "top_p_by_score",
                        lambda scores, rho: list(np.argsort(-scores, kind="stable")[:n_keep]))
    bad = {c.id: c.holds for c in B.check_t7_paper_setting()}
    assert bad["t7_paper_top_p_false"]  # still reproduced
    assert not bad["t7_paper_top_p_kept"]


def test_t7_paper_setting_reports_the_batch_snr_rising() -> None:
    notes = {c.id: c.note for c in B.check_t7_paper_setting()}
    assert "batch SNR 7.39 -> 7.73" in notes["t7_paper_top_p_false"]
    assert "batch SNR 7.39 -> 9.43" in notes["t7_paper_high_half_false"]


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
