"""The study report's figures, drawn from the committed records (docs/reproduction/results.json) and read back."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from ragen_core.apps.reproduce import report  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "reproduction" / "results.json"


@pytest.fixture(scope="module")
def study():
    return json.loads(RESULTS.read_text())


def _run(study):
    """A copy of the first Sokoban top_p record, with its probe."""
    r = next(r for r in study["records"] if r["env"] == "collapse_sokoban" and r["arm"] == "top_p" and r["probe"])
    return copy.deepcopy(r)


def _curves(ax, color):
    """The data lines of `ax` drawn in `color` (the +-25% guides are black)."""
    return [ln for ln in ax.get_lines() if ln.get_color() == color]


def test_a_null_probe_point_is_a_gap_in_the_study_curves(study):
    r = _run(study)
    r["probe"][2]["retrieval_margin"] = None  # a probe measurement that was not finite
    fig = report.collapse_figure([r], [r["env"]])
    (line,) = _curves(fig.axes[0], report._COLORS["top_p"])
    steps = [p["step"] for p in r["probe"]]
    margins = [math.nan if p["retrieval_margin"] is None else p["retrieval_margin"] for p in r["probe"]]
    assert list(line.get_xdata()) == steps  # before: step 10 left out, the line drawn straight across it
    ys = [float(y) for y in line.get_ydata()]
    assert all((math.isnan(a) and math.isnan(b)) or a == pytest.approx(b) for a, b in zip(ys, margins))
    matplotlib.pyplot.close(fig)


def test_the_entropy_ratio_is_over_step_0_or_not_drawn(study):
    r = _run(study)
    fig = report.collapse_figure([r], [r["env"]])
    (line,) = _curves(fig.axes[1], report._COLORS["top_p"])
    e0 = r["probe"][0]["token_entropy"]
    assert [float(y) for y in line.get_ydata()] == pytest.approx([p["token_entropy"] / e0 for p in r["probe"]])
    matplotlib.pyplot.close(fig)
    r["probe"][0]["token_entropy"] = None  # no step-0 value: no ratio "to step 0" (before: over step 5's value)
    fig = report.collapse_figure([r], [r["env"]])
    assert _curves(fig.axes[1], report._COLORS["top_p"]) == []
    matplotlib.pyplot.close(fig)


def test_the_quartile_legend_covers_no_curve(study, tmp_path, monkeypatch):
    saved = {}
    real = matplotlib.figure.Figure.savefig

    def keep(self, path, *args, **kwargs):
        saved[Path(path).name] = self
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    report._plots({"analysis": study["analysis"], "records": study["records"]}, tmp_path)
    fig = saved["quartiles.png"]
    ax = fig.axes[0]
    renderer = fig._get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    plotted = ax.get_window_extent(renderer)
    assert legend.x0 >= plotted.x1 or legend.y1 <= plotted.y0 or legend.y0 >= plotted.y1, (legend, plotted)
    # the curves are the records' validations in %, one per quartile run (a plain loop)
    want = sorted(tuple(100 * v for _, v in r["val"]) for r in study["records"]
                  if r["env"] == "sokoban" and r["arm"] in ("rv_top_quartile", "rv_bottom_quartile") and r["val"])
    got = sorted(tuple(float(y) for y in ln.get_ydata()) for ln in ax.get_lines() if len(ln.get_xdata()) > 2
                 or ln.get_linestyle() == "-")
    assert got == [pytest.approx(w) for w in want]
