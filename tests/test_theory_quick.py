"""`python -m theory_checks --quick` as part of the test suite (about half a minute on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

from theory_checks.__main__ import main


def test_quick_run_passes_and_writes_outputs(tmp_path: Path) -> None:
    js = tmp_path / "out.json"
    rep = tmp_path / "report"
    assert main(["--quick", "--seed", "3", "--quiet", "--json", str(js), "--report", str(rep)]) == 0
    data = json.loads(js.read_text())
    assert data["status"] == "pass" and data["quick"] is True and data["seed"] == 3
    names = {c["name"] for c in data["checks"]}
    for prefix in ("T1 paper", "T1 sharper", "T2 paper", "T2 sharper", "T3 floor", "T4 contraction", "T5 rho",
                   "T6 drift", "T7 identity", "T8 paper", "T8 Z-free", "T9 dI", "Fano", "MC T2", "S6 T4"):
        assert any(n.startswith(prefix) for n in names), prefix
    kinds = {c["type"] for c in data["checks"]}
    assert {"bound", "identity", "counterexample", "mc-validation", "symbolic"} <= kinds
    assert all(c["status"] in ("pass", "reproduced", "proved", "skipped") for c in data["checks"])
    md = (rep / "report.md").read_text()
    assert "Overall status: **PASS**" in md
    for png in ("ratios.png", "snr_vs_rv.png", "grpo_mse_vs_rv.png", "mi_contraction.png", "drift.png"):
        assert (rep / png).stat().st_size > 1000, png


def test_bad_seed_is_rejected() -> None:
    assert main(["--quick", "--seed", "-1"]) == 2
