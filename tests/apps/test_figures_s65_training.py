"""The training run's figures (success.png, entropy_mi.png, filter.png, probe.png) read back from their Figure
objects and compared with the metrics history they draw, computed here by a plain loop."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from ragen_core.training.metrics import STEP, Collapse, Filter, Probe, Rollout, Val  # noqa: E402
from ragen_core.training.report import write_plots  # noqa: E402


@pytest.fixture
def figures(monkeypatch):
    """file name -> the Figure that write_plots saved to it."""
    saved = {}
    real = matplotlib.figure.Figure.savefig

    def keep(self, path, *args, **kwargs):
        saved[str(path).rsplit("/", 1)[-1]] = self
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return saved


def _line(fig, label_start):
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_label().startswith(label_start):
                return ax, line
    raise AssertionError(f"no line labelled {label_start!r}: {[ln.get_label() for a in fig.axes for ln in a.lines]}")


def _expected(history, key):
    """(steps, values) of every record holding `key`, a null as NaN."""
    xs, ys = [], []
    for rec in history:
        if key in rec:
            xs.append(rec[STEP])
            ys.append(math.nan if rec[key] is None else float(rec[key]))
    return xs, ys


def _same(a, b):
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b))


def _history():
    return [{STEP: 0, Val.SUCCESS: 0.25},
            {STEP: 1, Rollout.SUCCESS: 0.5, Filter.RV_HETEROGENEITY: 0.4, Collapse.TOKEN_ENTROPY: 0.3},
            {STEP: 2, Rollout.SUCCESS: None, Filter.RV_HETEROGENEITY: None, Collapse.TOKEN_ENTROPY: 0.2},
            {STEP: 3, Rollout.SUCCESS: 0.75, Filter.RV_HETEROGENEITY: 0.6, Collapse.TOKEN_ENTROPY: 0.1},
            {STEP: 3, Val.SUCCESS: 0.5}]


def test_a_null_step_is_a_gap_not_a_line_across_it(tmp_path, figures):
    history = _history()
    write_plots(tmp_path, history)
    for name, key, label in (("success.png", Rollout.SUCCESS, "training rollouts"),
                             ("filter.png", Filter.RV_HETEROGENEITY, "RV heterogeneity")):
        _, line = _line(figures[name], label)
        xs, ys = _expected(history, key)
        assert list(line.get_xdata()) == xs == [1, 2, 3]
        assert _same([float(y) for y in line.get_ydata()], ys), line.get_ydata()
        assert "1 null step(s)" in line.get_label()
    for name, key, label in (("success.png", Val.SUCCESS, "validation"),
                             ("entropy_mi.png", Collapse.TOKEN_ENTROPY, "token entropy")):
        _, line = _line(figures[name], label)
        xs, ys = _expected(history, key)
        assert list(line.get_xdata()) == xs
        assert _same([float(y) for y in line.get_ydata()], ys)


def test_a_single_point_is_visible_and_the_step_axis_is_whole_steps(tmp_path, figures):
    history = [{STEP: 0, Val.SUCCESS: 0.5}, {STEP: 1, Rollout.SUCCESS: 0.25, Collapse.TOKEN_ENTROPY: 0.3}]
    write_plots(tmp_path, history)
    for name, label in (("success.png", "training rollouts"), ("entropy_mi.png", "token entropy")):
        ax, line = _line(figures[name], label)
        assert line.get_marker() not in (None, "", "None", " "), f"{name}: a one-point line without a marker"
        fig = figures[name]
        fig.canvas.draw()
        ticks = [t for t in fig.axes[-1].get_xticks() if fig.axes[-1].get_xlim()[0] <= t <= fig.axes[-1].get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_a_panel_without_data_says_so(tmp_path, figures):
    write_plots(tmp_path, _history())  # no MI check in a 3-step run: MI-Seq-Est and Retrieval-Acc never logged
    axes = figures["entropy_mi.png"].axes
    texts = [" ".join(t.get_text() for t in ax.texts) for ax in axes]
    assert not axes[0].texts  # token entropy is drawn
    assert "MI-Seq-Est" in texts[1] and "no value" in texts[1]
    assert "Retrieval-Acc" in texts[2] and "no value" in texts[2]


def test_probe_entropy_ratio_is_over_step_0_and_keeps_gaps(tmp_path, figures):
    history = [{STEP: s, Probe.RETRIEVAL_MARGIN: m, Probe.TOKEN_ENTROPY: e}
               for s, m, e in ((0, 0.5, 2.0), (5, 0.4, None), (10, 0.3, 1.0), (15, 0.2, 3.0))]
    write_plots(tmp_path, history)
    _, line = _line(figures["probe.png"], "token entropy")
    assert list(line.get_xdata()) == [0, 5, 10, 15]
    assert _same([float(y) for y in line.get_ydata()], [1.0, math.nan, 0.5, 1.5])


def test_an_all_null_run_says_so_and_a_one_record_run_draws(tmp_path, figures):
    nulls = [{STEP: s, Rollout.SUCCESS: None, Collapse.TOKEN_ENTROPY: None, Filter.KEPT_FRACTION: None,
              Probe.RETRIEVAL_MARGIN: None if s else 0.5, Probe.TOKEN_ENTROPY: None} for s in range(3)]
    assert len(write_plots(tmp_path, nulls)) == 4
    _, line = _line(figures["success.png"], "training rollouts")
    assert "3 null step(s)" in line.get_label() and all(math.isnan(y) for y in line.get_ydata())
    assert len(write_plots(tmp_path, [{STEP: 0, Val.SUCCESS: None}])) == 3
