"""The learning-curve benchmark's bookkeeping, on synthetic run folders (no training)."""

import json
import math

import pytest

from benchmarks.bench_learning import aggregate, curve_record, markdown

#: t quantile 0.975 at 2 degrees of freedom, from a printed table (an independent reference).
T_975_DF2 = 4.302652729911275


def _write_run(path, curve, step_s=2.0):
    path.mkdir(parents=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 30.0}]
    for step, success in curve:
        row = {"step": step, "val/success": success}
        if step > 0:
            row.update({"perf/step_s": step_s, "collapse/mi_seq_est": 1.0 + step, "collapse/retrieval_acc": 0.5})
        rows.append(row)
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_curve_record_reads_before_after_and_time(tmp_path):
    _write_run(tmp_path / "r", [(0, 0.1), (10, 0.3), (20, 0.5)])
    rec = curve_record(tmp_path / "r", "sokoban", 1, "top_p")
    assert rec["curve"] == [(0, 0.1), (10, 0.3), (20, 0.5)]
    assert (rec["before"], rec["after"], rec["steps"]) == (0.1, 0.5, 20)
    assert rec["sft_s"] == 30.0 and rec["rl_s"] == 4.0
    assert rec["mi_seq_first_last"] == [11.0, 21.0]


def test_aggregate_sorts_seeds_and_gives_the_t_interval(tmp_path):
    gains = {2: 0.4, 0: 0.2, 1: 0.3}  # completion order differs from seed order
    records = []
    for seed, gain in gains.items():
        _write_run(tmp_path / f"s{seed}", [(0, 0.1), (10, 0.1 + gain / 2), (20, 0.1 + gain)])
        records.append(curve_record(tmp_path / f"s{seed}", "sokoban", seed, "top_p"))
    summary = aggregate(records)["sokoban/top_p"]
    assert summary["seeds"] == [0, 1, 2]
    assert summary["after"] == [0.1 + gains[s] for s in (0, 1, 2)]
    assert math.isclose(summary["gain_mean"], 0.3)
    half = T_975_DF2 * 0.1 / math.sqrt(3)  # sample sd of (0.2, 0.3, 0.4) is 0.1
    assert all(math.isclose(a, b) for a, b in zip(summary["gain_ci95"], (0.3 - half, 0.3 + half)))
    assert all(math.isclose(a, b) for a, b in zip(summary["mean"], [0.1, 0.25, 0.4]))
    assert summary["min"][-1] == 0.1 + 0.2 and summary["max"][-1] == 0.1 + 0.4
    table = markdown({"sokoban/top_p": summary})
    assert "| sokoban | top-p 0.9 | 3 | 10.0, 10.0, 10.0 | 30.0, 40.0, 50.0 | +30.0 |" in table


def test_one_seed_has_no_interval(tmp_path):
    _write_run(tmp_path / "s0", [(0, 0.2), (5, 0.6)])
    summary = aggregate([curve_record(tmp_path / "s0", "bandit", 0, "top_p")])
    assert "n/a (1 seed)" in markdown(summary)


def test_no_run_aggregates_finished_runs_and_names_the_missing(tmp_path, monkeypatch):
    import benchmarks.bench_learning as bl

    runs = tmp_path / "runs"
    for seed in (0, 2):
        _write_run(runs / f"sokoban-top_p-s{seed}", [(0, 0.1), (10, 0.5)])
        rec = curve_record(runs / f"sokoban-top_p-s{seed}", "sokoban", seed, "top_p")
        (runs / f"sokoban-top_p-s{seed}" / "done.json").write_text(json.dumps(rec))
    monkeypatch.setattr(bl, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(bl, "run_one", lambda *a: (_ for _ in ()).throw(AssertionError("--no-run started a run")))
    assert bl.main(["--no-run", "--configs", "sokoban", "--variants", "top_p", "--seeds", "0", "1", "2",
                    "--runs-dir", str(runs)]) == 0
    out = json.loads((tmp_path / "results" / "learning.json").read_text())
    assert [r["seed"] for r in out["runs"]] == [0, 2]
    assert out["missing"] == ["sokoban/top_p/s1"]
    assert "Not run yet: sokoban/top_p/s1." in out["markdown"]
    assert math.isclose(out["run_minutes_total"], 2 * (30.0 + 2.0) / 60.0)


def test_a_run_of_some_configs_keeps_the_other_configs_records(tmp_path, monkeypatch):
    import benchmarks.bench_learning as bl

    runs = tmp_path / "runs"
    _write_run(runs / "sokoban-top_p-s0", [(0, 0.1), (10, 0.5)])
    rec = curve_record(runs / "sokoban-top_p-s0", "sokoban", 0, "top_p")
    (runs / "sokoban-top_p-s0" / "done.json").write_text(json.dumps({**rec, "commit": "new"}))
    old = [{**rec, "config": "bandit", "seed": 2, "commit": "old"}, {**rec, "before": 0.0, "commit": "old"},
           {**rec, "config": "retired_config"}]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "learning.json").write_text(json.dumps({"runs": old}))
    monkeypatch.setattr(bl, "RESULTS", tmp_path / "results")
    assert bl.main(["--no-run", "--configs", "sokoban", "--variants", "top_p", "--seeds", "0",
                    "--runs-dir", str(runs)]) == 0
    out = json.loads((tmp_path / "results" / "learning.json").read_text())
    # sokoban's seed 0 measured now replaces the old record; bandit's stays; an unknown config is dropped
    assert sorted((r["config"], r["commit"]) for r in out["runs"]) == [("bandit", "old"), ("sokoban", "new")]
    assert out["summary"]["sokoban/top_p"]["before"] == [0.1]
    assert out["seeds"] == [0, 2]  # the seeds of every record kept, not only of the configs run now
    assert "old (bandit)" in out["markdown"] and "new (sokoban)" in out["markdown"]


def test_the_image_only_config_is_the_vision_config_with_the_text_withheld(tmp_path, monkeypatch):
    import benchmarks.bench_learning as bl
    from ragen_core.training.config import load_config

    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        raise SystemExit  # stop before reading the (absent) run

    monkeypatch.setattr(bl.subprocess, "run", fake_run)
    with pytest.raises(SystemExit):
        bl.run_one("sokoban_vision_image", 0, "top_p", tmp_path, [])
    cmd = seen[0]
    assert cmd[cmd.index("ragen_core.apps.train") + 1].endswith("configs/sokoban_vision_tiny.toml")
    assert 'env.kwargs.obs_format="image"' in cmd
    cfg = load_config(bl.ROOT / bl.CONFIGS["sokoban_vision_image"], bl.CONFIG_OVERRIDES["sokoban_vision_image"])
    assert cfg.env.id == "ragen/Sokoban-Vision-v0" and cfg.env.kwargs["obs_format"] == "image"


def test_seeds_cut_at_different_steps_keep_their_whole_curves():
    """The mean and band use the steps every seed reached; each seed's own curve, to its last step, is kept too
    (a run stopped by its time cap must not lose its final validation from the summary)."""
    recs = [{"config": "game2048", "variant": "top_p", "seed": s, "curve": c, "before": 0.0, "after": c[-1][1],
             "sft_s": 1.0, "rl_s": 1.0} for s, c in ((0, [[0, 0.0], [10, 0.5], [17, 0.7]]), (1, [[0, 0.0], [10, 0.1]]))]
    summary = aggregate(recs)["game2048/top_p"]
    assert summary["steps"] == [0, 10] and summary["mean"] == pytest.approx([0.0, 0.3])
    assert summary["seed_curves"] == [[[0, 0.0], [10, 0.5], [17, 0.7]], [[0, 0.0], [10, 0.1]]]


def test_a_record_names_the_commit_the_run_started_at_and_its_neighbours(tmp_path):
    """A commit made while a run trains must not be credited with it: the run's own provenance.json says what it
    trained; and the footer says how many runs shared the cores, per record, not per invocation."""
    import json

    from benchmarks.bench_learning import _workers_text, run_commit

    run = tmp_path / "r"
    run.mkdir()
    (run / "provenance.json").write_text(json.dumps({"commit": "fb906148821575ab", "dirty": False}))
    assert run_commit(run) == "fb90614"
    (run / "provenance.json").write_text(json.dumps({"commit": "3a6c6694eaa46902", "dirty": True}))
    assert run_commit(run) == "3a6c669+changes"
    assert _workers_text([{"workers": 2}, {"workers": 1}, {"workers": 2}]) == "1/2 at a time"
    assert _workers_text([{"workers": 2}, {}]) == "2 at a time, not recorded for 1"
