"""bench_fast_forward's reading of a run and its paired verdicts, on hand-made records."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_fast_forward as ff


def _metrics(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_outcomes_read_step_0_and_the_last_measurement(tmp_path):
    rows = [{"step": 0, "val/success": 0.5, "probe/retrieval_margin": 0.40},
            {"step": 5, "probe/retrieval_margin": 0.30, "rollout/return": 1.0},
            {"step": 10, "val/success": 0.75, "probe/retrieval_margin": 0.20},
            {"step": 12, "rollout/return": 0.0}]
    rows[0]["perf/sft_s"] = 100.0
    rows[2]["perf/step_s"], rows[3]["perf/step_s"] = 1.5, 2.0
    got = ff.outcomes(_metrics(tmp_path / "m.jsonl", rows))
    assert got == {"success_0": 0.5, "success_end": 0.75, "margin_0": 0.40, "margin_end": 0.20, "steps": 12,
                   "phase_s": {"warm start": 100.0, "RL steps": 3.5, "validations": 0.0, "probes": 0.0}}
    assert ff.outcomes(_metrics(tmp_path / "n.jsonl", [{"step": 0}]))["margin_end"] is None


def _run(seed, setting, **values):
    base = {"success_0": 0.5, "success_end": 0.5, "margin_0": 0.4, "margin_end": 0.4}
    return {"seed": seed, "setting": setting, "wall_s": 1.0, **{**base, **values}}


def test_paired_verdicts_by_hand():
    # on - off end margins: +0.01, -0.01, +0.03 -> mean +0.01, sd 0.02, t(0.95, 2) = 2.920: 90% CI +-0.0337
    runs = [_run(1, "off"), _run(1, "on", margin_end=0.41), _run(2, "off"), _run(2, "on", margin_end=0.39),
            _run(3, "off"), _run(3, "on", margin_end=0.43)]
    v = ff.judge(runs)["margin_end"]
    assert v["n"] == 3 and v["mean"] == pytest.approx(0.01) and v["sd"] == pytest.approx(0.02)
    half90 = 2.919986 * 0.02 / 3 ** 0.5
    assert v["ci90"] == pytest.approx([0.01 - half90, 0.01 + half90], abs=1e-5)
    assert v["reading"] == "equivalent"
    # every seed 0.3 higher with the lean forward: the interval excludes 0
    far = [_run(s, "off") for s in (1, 2, 3)] + [_run(s, "on", success_end=0.8 + 0.01 * s) for s in (1, 2, 3)]
    assert ff.judge(far)["success_end"]["reading"] == "differs (on higher)"
    # an unpaired seed is left out
    assert ff.judge([_run(1, "off"), _run(1, "on"), _run(2, "on")])["margin_0"]["n"] == 1


def test_the_table_names_the_setting_compared():
    runs = [_run(1, "off"), _run(1, "on")]
    md = ff.markdown(runs, ff.judge(runs), "collapse_sokoban", 20, "", key="model.fused_training")
    assert "once with `model.fused_training=false` and once with `true`" in md
    assert "model.fast_forward" in ff.markdown(runs, ff.judge(runs), "collapse_sokoban", 20, "")


def test_the_fused_training_ab_keeps_its_registered_design():
    """bench_fused_training's defaults are the design fixed before its runs (docs/performance.md): 8 seeds from 400,
    20 steps of collapse_sokoban, the study's bounds."""
    from benchmarks import bench_fused_training as ft

    args = ft.parser().parse_args([])
    assert (args.seeds, args.first_seed, args.steps, args.config) == (8, 400, 20, "collapse_sokoban")
    assert ft.BOUNDS == {"success_end": 0.10, "margin_end": 0.15, "success_0": 0.10, "margin_0": 0.15}
    assert ft.KEY == "model.fused_training"


def test_the_fused_training_second_stage_keeps_its_registered_design():
    """Stage 2 (fixed before its runs, docs/performance.md): 24 new seeds from 408, judged alone, its own file."""
    from benchmarks import bench_fused_training as ft

    args = ft.parser(2).parse_args(["--stage", "2"])
    assert (args.seeds, args.first_seed, args.steps, args.config) == (24, 408, 20, "collapse_sokoban")
    assert ft.STAGES[2][2] == "fused_training_stage2" and ft.STAGES[1] == (8, 400, "fused_training")
    first = set(range(400, 408))
    assert not first & set(range(args.first_seed, args.first_seed + args.seeds))  # no stage-1 seed reused


def test_a_kept_run_is_read_not_trained_again_and_a_foreign_one_is_refused(tmp_path, monkeypatch):
    """A benchmark kept in --out resumes from each run's record; a record of another design stops it."""
    config = tmp_path / "collapse_sokoban.toml"
    config.write_text("")
    run = {"seed": 408, "setting": "on", "wall_s": 3.0, "success_0": 0.5}
    design = {"config": config.name, "steps": 20, "key": "model.fused_training"}
    (tmp_path / "on-s408.record.json").write_text(json.dumps({"design": design, "run": run}))
    monkeypatch.setattr(ff.subprocess, "run", lambda *a, **k: pytest.fail("a kept run was trained again"))
    assert ff.run_one(config, 408, 20, "on", tmp_path, "model.fused_training") == run
    with pytest.raises(RuntimeError, match="another design"):
        ff.run_one(config, 408, 4, "on", tmp_path, "model.fused_training")


def test_a_killed_run_without_a_record_is_trained_again_from_scratch(tmp_path, monkeypatch):
    """Its folder is removed first (ragen train would not start in a folder holding another run's files), then the
    record is written from the new run."""
    config = tmp_path / "c.toml"
    config.write_text("")
    stale = tmp_path / "off-s1"
    stale.mkdir()
    (stale / "metrics.jsonl").write_text('{"step": 0, "val/success": 0.9}\n')

    class Done:
        returncode = 0

    def train(cmd, **kwargs):
        assert not stale.exists(), "the killed run's folder was not removed first"
        stale.mkdir()
        (stale / "metrics.jsonl").write_text('{"step": 0, "val/success": 0.25}\n')
        return Done()

    monkeypatch.setattr(ff.subprocess, "run", train)
    got = ff.run_one(config, 1, 20, "off", tmp_path, "model.fused_training")
    assert got["success_0"] == 0.25
    assert json.loads((tmp_path / "off-s1.record.json").read_text())["run"] == got
