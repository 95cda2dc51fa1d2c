"""`python -m theory_checks --mutants --quick` as part of the test suite (well under a minute on one core)."""

from __future__ import annotations

import json
from pathlib import Path

from theory_checks.__main__ import main
from theory_checks.catalog import CATALOG


def test_quick_mutation_run_passes_and_writes_outputs(tmp_path: Path) -> None:
    js = tmp_path / "out.json"
    rep = tmp_path / "report"
    assert main(["--quick", "--mutants", "--seed", "3", "--quiet", "--json", str(js), "--report", str(rep)]) == 0
    data = json.loads(js.read_text())
    assert data["status"] == "pass" and data["quick"] is True and data["seed"] == 3
    names = {c["name"] for c in data["checks"]}
    for prefix in ("T1 paper", "T1 sharper", "T2 paper", "T2 sharper", "T3 floor", "T4 contraction", "T5 rho",
                   "T6 drift", "T7 identity", "T7 paper setting", "T8 paper", "T8 Z-free", "T8 classical", "T9 dI",
                   "Fano", "MC T2", "S6 T4", "S9 T2", "S10 T2"):
        assert any(n.startswith(prefix) for n in names), prefix
    kinds = {c["type"] for c in data["checks"]}
    assert {"bound", "identity", "counterexample", "mc-validation", "symbolic", "search"} <= kinds
    assert all(c["status"] in ("pass", "reproduced", "proved", "skipped", "searched") for c in data["checks"])
    # every row is catalogued; evidence and sanity rows are both present
    assert all(c["name"] in CATALOG for c in data["checks"] if c["type"] != "search")
    assert {c["category"] for c in data["checks"]} >= {"evidence", "sanity"}
    # every Monte Carlo validation of a verified result detects a 5% error
    mcv = [c for c in data["checks"] if c["type"] == "mc-validation" and c["category"] == "evidence"]
    assert mcv and all(c["detectable_error"] < 0.05 for c in mcv), [(c["name"], c["detectable_error"]) for c in mcv]
    # every mutant of every verified result is caught
    mut = data["mutants"]
    assert mut["status"] == "pass" and mut["summary"]["failed"] == 0
    # only informative mutants are counted; the free catches are reported apart; every verified result has one
    assert mut["summary"]["caught"] == mut["summary"]["total"] > 150
    assert mut["summary"]["no_informative"] == 0 and mut["summary"]["by_construction"] > 100
    counted_rows = {(m["method"], m["check"]) for m in mut["results"]
                    if m["status"] == "caught" and m["category"] == "evidence"}
    evidence_rows = {(c["method"], c["name"]) for c in data["checks"]
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


def test_bad_seed_is_rejected() -> None:
    assert main(["--quick", "--seed", "-1"]) == 2
