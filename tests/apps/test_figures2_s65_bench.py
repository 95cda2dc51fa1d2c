"""benchmarks/bench_learning.py's learning.png and benchmarks/bench_trl.py's trl_crosscheck.png, drawn from the
committed results (benchmarks/results/*.json) and read back through their Figure objects."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from benchmarks import bench_learning, bench_trl  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
BLUE, ORANGE = (matplotlib.colors.to_rgba(c) for c in ("tab:blue", "tab:orange"))


@pytest.fixture
def saved(monkeypatch):
    figs = []
    real = matplotlib.figure.Figure.savefig

    def keep(self, *args, **kwargs):
        figs.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return figs


def _colour(artist):
    c = artist.get_color() if hasattr(artist, "get_color") else artist.get_facecolor()[0]
    return matplotlib.colors.to_rgba(c)[:3]


def _no_legend_over_axes(fig):
    renderer = fig._get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends
    for legend in legends:
        a = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            b = ax.get_window_extent(renderer)
            assert min(a.x1, b.x1) <= max(a.x0, b.x0) or min(a.y1, b.y1) <= max(a.y0, b.y0), ax.get_title()


def _band(ax, rgb):
    """{step: (low, high)} of the fill_between band in colour `rgb`, from its polygon's vertices."""
    (poly,) = [c for c in ax.collections if len(c.get_paths()) and _colour(c) == rgb]
    out = {}
    for x, y in poly.get_paths()[0].vertices:
        lo, hi = out.get(float(x), (y, y))
        out[float(x)] = (min(lo, y), max(hi, y))
    return out


# ------------------------------------------------------------------------------------------------ learning.png
@pytest.fixture(scope="module")
def learning():
    return json.loads((RESULTS / "learning.json").read_text())["summary"]


def test_learning_curves_and_min_max_band_are_the_seeds_and_say_so(tmp_path, saved, learning):
    bench_learning.plot(learning, tmp_path / "learning.png")
    fig = saved[-1]
    panels = {ax.get_title().split(" (")[0]: ax for ax in fig.axes if ax.get_visible()}
    for key, s in learning.items():
        name, variant = key.split("/")
        ax, rgb = panels[name], (BLUE if variant == "top_p" else ORANGE)[:3]
        curves = [dict((int(x), y) for x, y in c) for c in s["seed_curves"]]  # a plain loop over the seeds
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        (mean,) = [ln for ln in ax.get_lines() if _colour(ln) == rgb and ln.get_marker() == "o"]
        assert [float(x) for x in mean.get_xdata()] == steps
        assert [float(y) for y in mean.get_ydata()] == pytest.approx([sum(c[t] for c in curves) / len(curves)
                                                                      for t in steps])
        band = _band(ax, rgb)
        for t in steps:
            vals = [c[t] for c in curves]
            assert band[float(t)] == (pytest.approx(min(vals)), pytest.approx(max(vals))), (key, t)
        assert len([ln for ln in ax.get_lines() if _colour(ln) == rgb and ln.get_linestyle() == "--"]) == len(curves)
    labels = [t.get_text() for legend in fig.legends for t in legend.texts]
    assert "top-p 0.9: min-max over seeds" in labels  # before: the band was nowhere named
    assert "no filter: min-max over seeds" in labels
    _no_legend_over_axes(fig)  # before: inside bandit's panel


def test_each_panel_names_its_own_seed_count(tmp_path, saved, learning):
    summary = copy.deepcopy(learning)
    s = summary["sokoban/top_p"]
    s["seeds"], s["seed_curves"] = s["seeds"][:1], s["seed_curves"][:1]
    s["mean"] = s["min"] = s["max"] = [y for _, y in s["seed_curves"][0]]
    bench_learning.plot(summary, tmp_path / "learning.png")
    titles = [ax.get_title() for ax in saved[-1].axes if ax.get_visible()]
    assert "bandit (3 seeds)" in titles  # a plain count: 3 seeds of each variant in the committed results
    assert "sokoban (top-p 0.9 1 seed, no filter 3 seeds)" in titles  # before: "3 seeds", from bandit's legend


# ------------------------------------------------------------------------------------------------ trl_crosscheck.png
@pytest.fixture(scope="module")
def trl():
    return json.loads((RESULTS / "trl_crosscheck.json").read_text())


def _trl_lines(fig, name, rgb):
    ax = next(a for a in fig.axes if a.get_title().startswith(name + ":"))
    lines = [ln for ln in ax.get_lines() if _colour(ln) == rgb]
    mean = [ln for ln in lines if ln.get_linewidth() > 2]
    return mean, [ln for ln in lines if ln.get_linewidth() <= 2]


def test_trl_mean_is_over_the_seeds_and_the_legend_covers_no_curve(tmp_path, saved, trl):
    bench_trl.plot(trl["summary"], trl["pairs"], tmp_path / "trl.png")
    fig = saved[-1]
    for name in trl["summary"]:
        for engine, rgb in (("ragen", BLUE[:3]), ("trl", ORANGE[:3])):
            curves = [dict((int(x), y) for x, y in p[engine]["curve"]) for p in trl["pairs"] if p["env"] == name]
            (mean,), seeds = _trl_lines(fig, name, rgb)
            steps = sorted(curves[0])
            assert [float(x) for x in mean.get_xdata()] == steps
            assert [float(y) for y in mean.get_ydata()] == pytest.approx(
                [100 * sum(c[t] for c in curves) / len(curves) for t in steps])
            assert mean.get_marker() not in ("None", "", None)  # a dot on every validation
            assert len(seeds) == len(curves)
    _no_legend_over_axes(fig)  # before: lower right of each panel, over sokoban's seed-1 curves at 20-30%


def test_trl_mean_stops_where_a_seed_stops(tmp_path, saved, trl):
    pairs = copy.deepcopy([p for p in trl["pairs"] if p["env"] == "sokoban"])
    pairs[0]["trl"]["curve"] = pairs[0]["trl"]["curve"][:-2]  # one run validated two times fewer
    summary = {"sokoban": trl["summary"]["sokoban"]}
    bench_trl.plot(summary, pairs, tmp_path / "trl.png")
    (mean,), _ = _trl_lines(saved[-1], "sokoban", ORANGE[:3])
    last = max(int(x) for x, _ in pairs[0]["trl"]["curve"])
    # before: the summary's curve, whose last two points average the two other seeds only
    assert max(float(x) for x in mean.get_xdata()) == last
