"""Mutation machinery: aggregation per row, equivalent and not-claimed mutants, catalog coverage."""

from __future__ import annotations

import numpy as np

from theory_checks import bounds as B
from theory_checks.catalog import CATALOG, entry
from theory_checks.mutants import evaluate_mutants, mutation_summary


def _by_label(results, row):
    return {r.label: r for r in results if r.row == row}


def test_a_mutant_is_caught_when_any_record_rejects_it() -> None:
    checks = [B.bound("T1 paper: ||g|| <= sqrt(RV E||s||^2)", 0.3, 1.0),
              B.bound("T1 paper: ||g|| <= sqrt(RV E||s||^2) [tight]", 1.0, 1.0, tight=True)]
    res = _by_label(evaluate_mutants(checks), "T1 paper: ||g|| <= sqrt(RV E||s||^2)")
    assert {k: v.status for k, v in res.items()} == {
        "rhs x0.5": "caught", "rhs x0.9": "caught", "reversed": "caught", "rhs x2": "caught"
    }


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


def test_exact_run_rows_are_catalogued_and_every_mutant_is_caught() -> None:
    checks = B.run_exact(np.random.default_rng(3), 20, quick=True)
    rows = {c.name.replace(" [tight]", "") for c in checks if c.kind != "search"}
    missing = sorted(r for r in rows if r not in CATALOG)
    assert not missing, missing
    res = evaluate_mutants(checks)
    assert not [(r.row, r.label) for r in res if r.failed]
    s = mutation_summary(res)
    assert s["total"] > 150 and s["caught"] == s["total"]
