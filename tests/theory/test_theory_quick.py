"""`python -m theory_checks --mutants --quick` as part of the test suite (well under a minute on one core)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from theory_checks.__main__ import main
from theory_checks.catalog import CATALOG, SEARCHES

#: rows produced only when an RL-core module imports (the Monte Carlo checks compare it against the references)
NEEDS_CORE = {
    "ragen_core.math.mi": {"core_mi_seq", "core_retrieval", "core_token_estimates", "core_entropy_decomposition",
                           "core_mi_row_shift", "core_retrieval_row_shift", "core_single_token",
                           "core_mi_seq_below_log_p", "core_collapse_mi_seq", "core_collapse_retrieval"},
    "ragen_core.math.filtering": {"core_filter_groups", "core_dr_grpo", "core_reward_variance"},
    "ragen_core.math.advantages": {"core_dr_grpo", "core_reward_variance"},
}
#: rows produced only when an RL-core module does not import (a skipped row says why)
WITHOUT_CORE = {"ragen_core.math.mi": {"core_mi_skipped"}}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("quick")
    js = out / "out.json"
    rep = out / "report"
    assert main(["--quick", "--mutants", "--seed", "3", "--quiet", "--json", str(js), "--report", str(rep)]) == 0
    return json.loads(js.read_text()), rep


def test_quick_mutation_run_passes_and_writes_outputs(quick_run: tuple[dict[str, Any], Path]) -> None:
    data, rep = quick_run
    assert data["status"] == "pass" and data["quick"] is True and data["seed"] == 3
    names = {c["name"] for c in data["checks"]}
    for prefix in ("T1 paper", "T1 sharper", "T2 paper", "T2 sharper", "T3 floor", "T4 contraction", "T5 rho",
                   "T6 drift", "T7 identity", "T7 paper setting", "T8 paper", "T8 Z-free", "T8 classical", "T9 dI",
                   "Fano", "MC T2", "S6 T4", "S9 T2", "S10 T2"):
        assert any(n.startswith(prefix) for n in names), prefix
    kinds = {c["type"] for c in data["checks"]}
    assert {"bound", "identity", "counterexample", "mc-validation", "symbolic", "search"} <= kinds
    assert all(c["status"] in ("pass", "reproduced", "proved", "skipped", "searched") for c in data["checks"])
    # every row is catalogued by its id and shown with the catalog's label; evidence and sanity rows are both present
    assert all(c["name"] == CATALOG[c["id"]].label for c in data["checks"] if c["type"] != "search")
    assert all(c["name"] == SEARCHES[c["id"]] for c in data["checks"] if c["type"] == "search")
    assert {c["category"] for c in data["checks"]} >= {"evidence", "sanity"}
    # every Monte Carlo validation of a verified result detects a 5% error
    mcv = [c for c in data["checks"] if c["type"] == "mc-validation" and c["category"] == "evidence"]
    assert mcv and all(c["detectable_error"] < 0.05 for c in mcv), [(c["id"], c["detectable_error"]) for c in mcv]
    # every mutant of every verified result is caught
    mut = data["mutants"]
    assert mut["status"] == "pass" and mut["summary"]["failed"] == 0
    # only informative mutants are counted; the free catches are reported apart; every verified result has one
    assert mut["summary"]["caught"] == mut["summary"]["total"] > 150
    assert mut["summary"]["no_informative"] == 0 and mut["summary"]["by_construction"] > 100
    counted_rows = {(m["method"], m["check_id"]) for m in mut["results"]
                    if m["status"] == "caught" and m["category"] == "evidence"}
    evidence_rows = {(c["method"], c["id"]) for c in data["checks"]
                     if c["category"] == "evidence" and c["type"] not in ("search", "skipped")}
    assert evidence_rows == counted_rows
    assert not [
        m for m in mut["results"] if m["category"] == "evidence" and m["status"] in ("SURVIVED", "CONTRADICTED")
    ]
    md = (rep / "report.md").read_text()
    assert "Overall status: **PASS**" in md and "## Definitions, constructions and corollaries (not counted)" in md
    assert "Detectable error of each Monte Carlo validation" in md
    assert "Status: **PASS**" in (rep / "mutants.md").read_text()
    for png in ("ratios.png", "snr_vs_rv.png", "grpo_mse_vs_rv.png", "mi_contraction.png", "drift.png"):
        assert (rep / png).stat().st_size > 1000, png


def test_every_catalog_entry_names_a_check_that_runs(quick_run: tuple[dict[str, Any], Path]) -> None:
    """The catalog and the checks agree by id: no entry (or search label) without a row of the run, no row
    without an entry (a record cannot even be built without one), and every mutant an entry names as
    equivalent or by construction is one its check evaluates."""
    data, _ = quick_run
    produced = {c["id"] for c in data["checks"]}
    expected = set(CATALOG) | set(SEARCHES)
    for module, status in data["ragen_core"].items():
        expected -= WITHOUT_CORE.get(module, set()) if status == "available" else NEEDS_CORE.get(module, set())
    assert not sorted(expected - produced), "catalogued ids no check produced"
    assert not sorted(produced - expected), "ids produced without a catalog entry (or not expected here)"
    evaluated = {(m["check_id"], m["mutant"]) for m in data["mutants"]["results"]}
    named = {(i, mutant) for i, e in CATALOG.items() for mutant in (*e.equivalent, *e.by_construction)}
    assert not sorted(named - evaluated), "mutants named in the catalog that their check does not evaluate"
