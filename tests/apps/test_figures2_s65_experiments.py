"""The collapse experiments' curves.png (ragen_core.apps.reproduce.experiments.figure / write_experiment), drawn from
the committed records (docs/collapse/*/results.json) and read back through the Figure object."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ragen_core.apps.reproduce import experiments as ex  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "collapse"


@pytest.fixture(scope="module")
def mechanism():
    return json.loads((DOCS / "mechanism" / "results.json").read_text())


def _value(p, key):
    """A probe point's value as the figure must draw it: NaN for a null."""
    v = p.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def _same(a, b):
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y) for x, y in zip(a, b))


def _seed_of_color(fig):
    """colour (rgba tuple) -> seed, from the figure's legend ("seed N" entries)."""
    legend = fig.legends[0]
    return {tuple(h.get_color()): int(t.get_text().split()[1]) for h, t in zip(legend.legend_handles, legend.texts)
            if t.get_text().startswith("seed ")}


def _drawn(fig, row, column):
    """{seed: (xs, ys)} of the panel at (row, column), the seed read from each line's colour."""
    ncols = len(fig.axes) // 2
    ax = fig.axes[row * ncols + column]
    seeds = _seed_of_color(fig)
    out = {}
    for ln in ax.get_lines():
        seed = seeds[tuple(matplotlib.colors.to_rgba(ln.get_color()))]
        assert seed not in out, f"two lines of seed {seed} in one panel"
        out[seed] = ([float(x) for x in ln.get_xdata()], [float(y) for y in ln.get_ydata()])
    return out


def test_every_curve_is_its_runs_probe_in_its_seeds_colour(mechanism):
    recs = copy.deepcopy(mechanism["records"])
    victim = next(r for r in recs if r["arm"] == "pays_all")
    for p in victim["probe"]:
        p["retrieval_margin"] = None  # a run without a margin: the other seeds keep their colours in that column
    fig = ex.figure({"experiment": "mechanism"}, recs)
    arms = list(dict.fromkeys(r["arm"] for r in recs))
    assert [fig.axes[j].get_title() for j in range(len(arms))] == arms
    for j, arm in enumerate(arms):
        runs = [r for r in recs if r["arm"] == arm]
        want_m, want_e = {}, {}
        for r in runs:  # a plain loop over the records
            steps = [p["step"] for p in r["probe"]]
            margins = [_value(p, "retrieval_margin") for p in r["probe"]]
            if any(not math.isnan(v) for v in margins):
                want_m[r["seed"]] = (steps, margins)
            e0 = next(p["token_entropy"] for p in r["probe"] if p["step"] == 0)
            want_e[r["seed"]] = (steps, [_value(p, "token_entropy") / e0 for p in r["probe"]])
        got_m, got_e = _drawn(fig, 0, j), _drawn(fig, 1, j)
        assert sorted(got_m) == sorted(want_m) and sorted(got_e) == sorted(want_e), arm
        for want, got in ((want_m, got_m), (want_e, got_e)):
            for seed in want:  # before: colours by drawing order, shifted by the run without a margin
                assert got[seed][0] == want[seed][0] and _same(got[seed][1], want[seed][1]), (arm, seed)
    plt.close(fig)


def test_a_null_probe_point_is_a_gap_and_every_point_has_a_dot(mechanism):
    r = copy.deepcopy(next(r for r in mechanism["records"] if r["arm"] == "nopay_all"))
    r["probe"][3]["retrieval_margin"] = None
    r["probe"][4]["token_entropy"] = float("nan")
    fig = ex.figure({"experiment": "mechanism"}, [r])
    steps = [p["step"] for p in r["probe"]]
    for ax, gap in ((fig.axes[0], 3), (fig.axes[1], 4)):
        (line,) = ax.get_lines()  # one run: one line per panel
        xs, ys = list(line.get_xdata()), list(line.get_ydata())
        assert xs == steps and math.isnan(ys[gap])  # before: that step left out, the line drawn straight across it
    for ax in fig.axes:
        for ln in ax.get_lines():
            assert ln.get_marker() not in ("None", "", None)  # a point between two gaps is still seen
    plt.close(fig)


def test_the_entropy_ratio_is_over_step_0_or_not_drawn(mechanism):
    r = copy.deepcopy(next(r for r in mechanism["records"] if r["arm"] == "pays_all"))
    r["probe"][0]["token_entropy"] = None  # no step-0 value
    fig = ex.figure({"experiment": "mechanism"}, [r])
    assert fig.axes[1].get_lines() == []  # before: every value over step 5's, labelled "/ step 0"
    assert "without a step-0 entropy" in fig.axes[1].get_xlabel()
    assert any("no token entropy ratio" in t.get_text() for t in fig.axes[1].texts)
    plt.close(fig)
    r["probe"] = r["probe"][1:]  # the first measurement is at step 5: no step 0 at all
    fig = ex.figure({"experiment": "mechanism"}, [r])
    assert fig.axes[1].get_lines() == []
    plt.close(fig)


def test_the_band_is_the_stated_interval_and_the_legend_covers_no_panel(mechanism):
    fig = ex.figure({"experiment": "mechanism"}, mechanism["records"])
    band = ex.HARMFUL["band"]
    ncols = len(fig.axes) // 2
    for ax in fig.axes[ncols:]:
        (patch,) = ax.patches  # axhspan: a Rectangle in data coordinates along y
        lo, hi = patch.get_y(), patch.get_y() + patch.get_height()
        assert lo == pytest.approx(1 - band) and hi == pytest.approx(1 + band)
    labels = [t.get_text() for t in fig.legends[0].texts]
    assert f"+-{band:.0%} of step 0" in labels
    assert sorted(int(t.split()[1]) for t in labels if t.startswith("seed ")) == mechanism["header"]["seeds"]
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        assert legend.y0 >= box.y1 or legend.y1 <= box.y0 or legend.x0 >= box.x1 or legend.x1 <= box.x0
    ticks = [t for t in fig.axes[-1].get_xticks() if fig.axes[-1].get_xlim()[0] <= t <= fig.axes[-1].get_xlim()[1]]
    assert all(float(t).is_integer() for t in ticks)
    plt.close(fig)


def test_write_experiment_closes_its_figure(tmp_path):
    search = json.loads((DOCS / "search" / "results.json").read_text())
    before = set(plt.get_fignums())
    md = ex.write_experiment("search", search["records"], tmp_path, {"seeds": [130, 131], "n_runs": 16})
    assert md is not None and (tmp_path / "search" / "curves.png").is_file()
    assert set(plt.get_fignums()) == before  # before: one open figure more per experiment written
