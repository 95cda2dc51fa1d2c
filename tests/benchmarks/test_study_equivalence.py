"""study_equivalence's reading of run records and its paired verdicts, on hand-made records."""

from __future__ import annotations

import pytest

from benchmarks import study_equivalence as se


def _rec(seed, success, margin, env="collapse_sokoban", arm="no_filter"):
    return {"env": env, "arm": arm, "seed": seed, "val": [[0, 0.5], [20, success[0]], [40, success[1]]],
            "probe": [{"step": 0, "retrieval_margin": 0.6}, {"step": 40, "retrieval_margin": margin}]}


def test_outcomes_read_step_0_and_the_end():
    assert se.outcomes(_rec(1, (0.7, 0.8), 0.3)) == {"success_0": 0.5, "success_end": 0.8, "margin_0": 0.6,
                                                    "margin_end": 0.3}
    # no step-0 measurement, no probe
    rec = {"val": [[10, 0.4]], "probe": []}
    assert se.outcomes(rec) == {"success_0": None, "success_end": 0.4, "margin_0": None, "margin_end": None}


def test_groups_are_paired_by_seed_and_judged_by_hand():
    old = [_rec(s, (0.5, m), 0.30) for s, m in ((20, 0.80), (21, 0.70), (22, 0.60))]
    old.append(_rec(20, (0.5, 0.5), 0.2, arm="top_p"))  # not retrained: not compared
    new = [_rec(20, (0.5, 0.82), 0.31), _rec(21, (0.5, 0.69), 0.30), _rec(22, (0.5, 0.64), 0.32)]
    g = se.compare_groups(old, new)
    assert list(g) == ["collapse_sokoban/no_filter"]
    end = g["collapse_sokoban/no_filter"]["success_end"]
    assert end["diffs"] == pytest.approx([0.02, -0.01, 0.04]) and end["mean"] == pytest.approx(0.05 / 3)
    assert end["reading"] == "equivalent"  # 90% CI about [-0.026, +0.059], inside +-0.10
    assert g["collapse_sokoban/no_filter"]["success_0"]["sd"] == 0.0  # every step 0 equal: a point interval
    far = [_rec(s, (0.5, 0.2), 0.3) for s in (20, 21, 22)]
    assert se.compare_groups(old, far)["collapse_sokoban/no_filter"]["success_end"]["reading"] == \
        "differs (new lower)"


def test_a_finished_studys_records_are_the_new_side_without_retraining(tmp_path, monkeypatch):
    """--new reads another study's results.json (only the chosen seeds, every group with --groups all) and writes
    the named result; nothing is trained (run_local would fail the test)."""
    import json

    import ragen_core.apps.reproduce.runner as runner

    monkeypatch.setattr(runner, "run_local", lambda *a, **k: pytest.fail("retrained"))
    monkeypatch.setattr(se, "RESULTS", tmp_path)
    old = [_rec(s, (0.5, 0.8), 0.3) for s in (20, 21, 22)] + [_rec(s, (0.5, 0.6), 0.2, arm="top_p") for s in (20, 21)]
    new = [_rec(s, (0.5, 0.8), 0.3) for s in (20, 21, 22, 23)] + [_rec(s, (0.5, 0.6), 0.2, arm="top_p")
                                                                   for s in (20, 21)]
    (tmp_path / "old.json").write_text(json.dumps({"records": old}))
    (tmp_path / "new.json").write_text(json.dumps({"records": new}))
    assert se.main(["--old", str(tmp_path / "old.json"), "--new", str(tmp_path / "new.json"), "--groups", "all",
                    "--seeds", "20,21,22", "--result", "eq_main"]) == 0
    out = json.loads((tmp_path / "eq_main.json").read_text())
    assert set(out["groups"]) == {"collapse_sokoban/no_filter", "collapse_sokoban/top_p"}
    assert out["groups"]["collapse_sokoban/no_filter"]["success_end"]["n"] == 3  # seed 23 is not one of the seeds
    assert "5 runs of the study in" in out["markdown"] and "not retrained" in out["markdown"]
