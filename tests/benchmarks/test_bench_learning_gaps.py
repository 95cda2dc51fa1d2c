"""A null validation (a NaN written as null in metrics.jsonl) is a gap at its own step in the learning benchmark's
curve, summary, table and figure: never dropped, which shortened the curve and moved `after` to an earlier step."""

from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from benchmarks import bench_learning as bl  # noqa: E402


def _run(path, curve):
    """A run folder whose metrics.jsonl validates at every (step, success) of `curve` (None: a null success)."""
    path.mkdir(parents=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 30.0}]
    for step, success in curve:
        row = {"step": step, "val/success": success, "val/return": 1.0}
        if step > 0:
            row.update({"perf/step_s": 2.0})
        rows.append(row)
        if step > 0:
            rows.append({"step": step, "loss/policy": 0.5})  # a training row: no validation, no point
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _rec(tmp_path, seed, curve):
    return bl.curve_record(_run(tmp_path / f"s{seed}", curve), "sokoban", seed, "top_p")


def test_a_null_at_step_0_in_the_middle_and_at_the_end_stays_at_its_step(tmp_path):
    first = _rec(tmp_path, 0, [(0, None), (10, 0.3), (20, 0.5)])
    assert first["curve"] == [(0, None), (10, 0.3), (20, 0.5)]  # before: [(10, 0.3), (20, 0.5)]
    assert (first["before"], first["after"]) == (None, 0.5)
    middle = _rec(tmp_path, 1, [(0, 0.1), (10, None), (20, 0.5)])
    assert [s for s, _ in middle["curve"]] == [0, 10, 20] and middle["curve"][1] == (10, None)
    last = _rec(tmp_path, 2, [(0, 0.1), (10, 0.3), (20, None)])
    assert last["after"] is None  # before: 0.3, step 10's value reported as the value after RL (step 20)
    blank = _rec(tmp_path, 3, [(0, None), (10, None)])
    assert blank["curve"] == [(0, None), (10, None)] and blank["before"] is None and blank["after"] is None


def test_the_summary_keeps_steps_and_values_aligned_with_gaps(tmp_path):
    recs = [_rec(tmp_path, 0, [(0, 0.1), (10, 0.3), (20, 0.5)]),
            _rec(tmp_path, 1, [(0, 0.2), (10, None), (20, 0.6)]),
            _rec(tmp_path, 2, [(0, 0.1), (10, 0.4), (20, None)])]
    s = bl.aggregate(recs)["sokoban/top_p"]
    assert s["steps"] == [0, 10, 20]  # before: step 10 and 20 dropped from the mean (a seed had no value there)
    assert len(s["mean"]) == len(s["min"]) == len(s["max"]) == 3
    assert s["mean"][0] == pytest.approx((0.1 + 0.2 + 0.1) / 3) and s["mean"][1:] == [None, None]
    assert (s["min"][0], s["max"][0]) == (0.1, 0.2)
    assert s["after"] == [0.5, 0.6, None]
    # the gain is over the seeds with both values, and the table says so
    assert s["gain_seeds"] == [0, 1] and s["gain_mean"] == pytest.approx(((0.5 - 0.1) + (0.6 - 0.2)) / 2)
    table = bl.markdown({"sokoban/top_p": s})
    assert "| 10.0, 20.0, 10.0 | 50.0, 60.0, n/a | +40.0 (over 2 of 3 seeds: a null before or after) |" in table


def test_all_null_runs_are_a_row_of_n_a(tmp_path):
    recs = [_rec(tmp_path, 0, [(0, None), (10, None)])]
    s = bl.aggregate(recs)["sokoban/top_p"]  # before: no row at all, the run silently left out
    assert s["seeds"] == [0] and s["mean"] == [None, None] and s["gain_mean"] is None
    assert "| sokoban | top-p 0.9 | 1 | n/a | n/a | n/a | n/a (no seed with both values) |" in bl.markdown(
        {"sokoban/top_p": s})


def test_the_figure_draws_a_null_as_a_gap(tmp_path, monkeypatch):
    saved = []
    real = matplotlib.figure.Figure.savefig

    def keep(self, path, *args, **kwargs):
        saved.append(self)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    recs = [_rec(tmp_path, 0, [(0, 0.1), (10, 0.3), (20, 0.5)]), _rec(tmp_path, 1, [(0, 0.2), (10, None), (20, 0.6)])]
    summary = bl.aggregate(recs)
    summary = json.loads(json.dumps(summary))  # as read back from learning.json
    bl.plot(summary, tmp_path / "learning.png")
    ax = next(a for a in saved[-1].axes if a.get_visible())
    (mean,) = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert [int(x) for x in mean.get_xdata()] == [0, 10, 20]
    ys = [float(y) for y in mean.get_ydata()]
    assert ys[0] == pytest.approx(0.15) and math.isnan(ys[1]) and ys[2] == pytest.approx(0.55)
    seeds = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    gap = [[float(y) for y in ln.get_ydata()] for ln in seeds if any(math.isnan(float(y)) for y in ln.get_ydata())]
    assert len(seeds) == 2 and len(gap) == 1 and gap[0][0] == 0.2 and gap[0][2] == 0.6
    # the band: one polygon on each side of the gap, none across it
    (band,) = ax.collections
    assert len(band.get_paths()) == 2
    assert not any(0 < x < 20 for p in band.get_paths() for x, _ in p.vertices if x != 10) and not any(
        x == 10 for p in band.get_paths() for x, _ in p.vertices)
