"""Every phase of a run counted: `read_run`'s phases, the start-up left of the wall time, the design's cost per seed
(`ragen reproduce` reports it in the header of every report)."""

from __future__ import annotations

import json

import pytest

from ragen_core.apps.reproduce.report import cost_text
from ragen_core.apps.reproduce.runner import PHASES, design_cost, finished_records, read_run, run_phases, with_wall_time
from ragen_core.apps.reproduce.spec import RunRecord, RunSpec

ROWS = [
    {"step": 0, "perf/sft_s": 120.0, "sft/loss_last": 0.2},
    {"step": 0, "val/success": 0.5, "perf/eval_s": 3.0},
    {"step": 0, "probe/retrieval_margin": 0.5, "perf/probe_s": 7.0},
    {"step": 1, "perf/step_s": 10.0, "filter/zero_fraction": 0.5},
    {"step": 2, "perf/step_s": 11.0, "filter/zero_fraction": 0.5, "val/success": 0.6, "perf/eval_s": 4.0},
    {"step": 2, "probe/retrieval_margin": 0.4, "perf/probe_s": 6.5},
]


def test_run_phases_sum_each_phase_by_a_plain_loop():
    got = run_phases(ROWS, wall_s=200.0)
    assert got == {"warm_start_s": 120.0, "rl_steps_s": 21.0, "validation_s": 7.0, "probe_s": 13.5,
                   "other_s": 200.0 - (120.0 + 21.0 + 7.0 + 13.5)}
    assert run_phases(ROWS)["other_s"] is None
    assert tuple(got) == PHASES


def test_read_run_records_the_phases(tmp_path):
    run = tmp_path / "g-a-s0"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    rec = read_run(run, RunSpec("g", "a", 0, "x", ()))
    assert rec["phases"]["probe_s"] == 13.5 and rec["phases"]["other_s"] is None
    assert RunRecord.from_dict(rec).to_dict() == rec


def test_design_cost_counts_every_phase_and_old_records_as_before():
    new = {"phases": {"warm_start_s": 600.0, "rl_steps_s": 300.0, "validation_s": 60.0, "probe_s": 120.0,
                      "other_s": 120.0}, "sft_s": 600.0, "rl_s": 360.0}
    old = {"sft_s": 60.0, "rl_s": 60.0}  # recorded before phases existed: warm start + RL steps only
    cost = design_cost([new, new, old], n_seeds=2)
    assert cost["whole_core_minutes"] == pytest.approx(2 * 1200.0 / 60 + 2.0)
    assert cost["per_seed_core_minutes"] == pytest.approx(cost["whole_core_minutes"] / 2)
    assert cost["phases_core_minutes"]["probe_s"] == pytest.approx(4.0)
    assert (cost["runs_with_phases"], cost["runs"]) == (2, 3)
    text = cost_text(cost)
    assert "42.0 core-minutes, 21.0 per seed" in text and "probes 4.0" in text and "2 of 3 runs" in text
    assert cost_text(None) == ""


def test_a_finished_run_read_back_counts_its_start_up(tmp_path):
    """A report re-reads every finished run with the current reader; the start-up (wall time less the timed phases)
    must survive that, or the design's cost silently leaves it out (it did: 1.5 core-minutes per seed)."""
    spec = RunSpec("g", "a", 0, "x", ())
    run = tmp_path / spec.name
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    (run / "done.json").write_text(json.dumps({**read_run(run, spec), "wall_s": 200.0}))
    (record,), missing = finished_records([spec], tmp_path)
    assert missing == [] and record["wall_s"] == 200.0
    assert record["phases"]["other_s"] == pytest.approx(200.0 - (120.0 + 21.0 + 7.0 + 13.5))
    assert design_cost([record], n_seeds=1)["whole_core_minutes"] == pytest.approx(200.0 / 60)
    assert with_wall_time(read_run(run, spec), None)["phases"]["other_s"] is None
