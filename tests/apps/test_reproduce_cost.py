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


def _phased(env: str, warm: float, rl: float, probe: float = 0.0) -> dict:
    return {"env": env, "phases": {"warm_start_s": warm, "rl_steps_s": rl, "validation_s": 6.0, "probe_s": probe,
                                   "other_s": 3.0}}


def test_design_cost_splits_by_group_and_the_groups_add_up():
    records = [_phased("collapse_sokoban", 600.0, 120.0, 60.0), _phased("collapse_sokoban", 0.0, 90.0, 60.0),
               _phased("sokoban", 300.0, 240.0), {"env": "sokoban", "sft_s": 30.0, "rl_s": 30.0}]
    cost = design_cost(records, n_seeds=1)
    groups = cost["by_group"]
    assert {k: g["runs"] for k, g in groups.items()} == {"collapse_sokoban": 2, "sokoban": 2}
    # by a plain sum of each group's seconds
    assert groups["collapse_sokoban"]["whole_core_minutes"] == pytest.approx((600 + 120 + 60 + 9 + 90 + 60 + 9) / 60)
    assert groups["sokoban"]["whole_core_minutes"] == pytest.approx((300 + 240 + 9 + 60) / 60)
    assert groups["sokoban"]["phases_core_minutes"]["warm_start_s"] == pytest.approx(5.0)  # the old record: all only
    assert sum(g["whole_core_minutes"] for g in groups.values()) == pytest.approx(cost["whole_core_minutes"])
    for k in PHASES:
        assert sum(g["phases_core_minutes"][k] for g in groups.values()) == pytest.approx(
            cost["phases_core_minutes"][k])


def test_the_report_shows_where_the_core_minutes_go_also_for_studies_run_before_the_split():
    from ragen_core.apps.reproduce.report import _section_cost

    records = [_phased("collapse_frozenlake", 1200.0, 300.0, 240.0), _phased("sokoban", 120.0, 240.0, 0.0),
               _phased("collapse_frozenlake", 1000.0, 360.0, 300.0), _phased("sokoban", 100.0, 200.0, 0.0)]
    header = {"seeds": [20, 21], "cost": design_cost(records, 2)}
    lines = _section_cost(header, None)
    table = [line for line in lines if line.startswith("| ")]
    assert table[0].startswith("| config | runs per seed | warm starts | RL steps")
    # collapse-prone FrozenLake first (the larger), per seed: warm starts (1200 + 1000) / 60 / 2
    assert table[1].startswith(f"| collapse-prone FrozenLake | 1 | {2200 / 120:.2f} | {660 / 120:.2f} |")
    assert table[-1].startswith("| all | 2 |") and table[-1].endswith("| 100% |")
    shares = [int(row.rsplit("|", 2)[1].strip().rstrip("%")) for row in table[1:-1]]
    assert sum(shares) in (99, 100, 101)
    # a header written before the split: recomputed from the records, the same table
    old = {"seeds": [20, 21], "cost": {k: v for k, v in header["cost"].items() if k not in ("by_group", "seeds")}}
    assert _section_cost(old, records) == lines
    assert _section_cost({"seeds": [1]}, [{"env": "x", "sft_s": 1.0, "rl_s": 1.0}]) == []  # no phases: no table
    assert _section_cost({"seeds": [1]}, None) == []
