"""The theory report's figures (theory_checks.report._plots), read back through their Figure objects: every ratio is
drawn (a ratio outside the axis at its edge, counted in its row's label), no text is cut off, no legend covers a
curve."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from theory_checks.report import RunResult, Summary, _plots  # noqa: E402

#: (catalog id, ratios): a bound that holds, one with ratios far below 0 (MI-Seq-Est below a negative I_P), a
#: violated one (max 1.7) and the check with the longest name (84 characters).
ROWS = [("t1_paper", [0.0, 0.5, 1.0]),
        ("mi_seq_below_sampler_mi", [-2.57, -0.3, 0.2, 0.9]),
        ("t2_paper_plain_sigma_two_action", [0.1, 0.4, 1.7, 1.2])]


@pytest.fixture
def saved(monkeypatch):
    """(file name, figure, savefig's keyword arguments) of every figure written."""
    out = []
    real = matplotlib.figure.Figure.savefig

    def keep(self, path, *args, **kwargs):
        out.append((str(path).rsplit("/", 1)[-1], self, kwargs))
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return out


def _result():
    summaries = [Summary(id=i, kind="bound", method="exact", instances=len(r), max_ratio=max(r), ratios=r)
                 for i, r in ROWS]
    pts = [{"p": p, "rv_mu": p * (1 - p), "rv": p * (1 - p) + 0.25, "snr": 1.0, "snr_lo": 0.9, "snr_hi": 1.1,
            "grpo_mse": 0.02, "grpo_lo": 0.019, "grpo_hi": 0.021} for p in (0.1, 0.25)]
    drift = [{"label": lab, "T": t, "mean": k * t, "lo": 0.9 * k * t, "hi": 1.1 * k * t, "exact": k * t}
             for lab, k in (("m = 0", 1e-4), ("m = KL direction", 2e-4)) for t in (1, 2, 4, 8)]
    plot = {"snr_G": 8, "snr_sigma": 0.5, "snr_points": pts, "drift": drift,
            "mi_channel_rng": np.random.default_rng(0)}
    return RunResult(seed=0, quick=True, checks=[], summaries=summaries, plot=plot, timings={}, n_testbeds=3)


def _outside(fig, kwargs):
    """The texts (titles, tick labels, axis labels, legends) not inside the area savefig writes: the figure's box,
    or with ``bbox_inches="tight"`` the box of everything drawn."""
    renderer = fig._get_renderer()
    if kwargs.get("bbox_inches") == "tight":
        area = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
    else:
        area = fig.bbox
    texts = []
    for ax in fig.axes:
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label]
        texts += [t for t in ax.get_xticklabels() if x0 <= t.get_position()[0] <= x1]  # the ticks drawn
        texts += [t for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1]
        if ax.get_legend():
            texts.append(ax.get_legend())
    bad = []
    for t in texts:
        if hasattr(t, "get_text") and not t.get_text():
            continue
        box = t.get_window_extent(renderer)
        if box.x0 < area.x0 - 1 or box.x1 > area.x1 + 1 or box.y0 < area.y0 - 1 or box.y1 > area.y1 + 1:
            bad.append(t.get_text() if hasattr(t, "get_text") else "legend")
    return bad


def test_every_ratio_is_drawn_and_its_row_says_which_are_at_the_edge(tmp_path, saved):
    _plots(_result(), tmp_path)
    name, fig, _ = saved[0]
    assert name == "ratios.png"
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    dots = ax.collections
    for i, (cid, ratios) in enumerate(ROWS):
        s = Summary(id=cid, kind="bound", method="exact")
        # the whole name, wrapped (before: cut at 70 characters, "... SNR <= sqrt(G RV)/s")
        assert " ".join(labels[i].split()).startswith(" ".join(s.name.split()))
        below = sum(1 for r in ratios if r < -0.05)  # a plain loop over the ratios
        above = sum(1 for r in ratios if r > 1.05)
        assert (f"{below} below -0.05" in labels[i]) == bool(below)
        assert (f"{above} above 1.05" in labels[i]) == bool(above)
        assert len(dots[i].get_offsets()) == len(ratios)
        assert all(lo <= x <= hi for x, _ in dots[i].get_offsets())
    reds = [ln for ln in ax.get_lines() if ln.get_color() == "tab:red"]
    assert len(reds) == len(ROWS)
    for ln, (_, ratios) in zip(reds, ROWS):
        x = float(ln.get_xdata()[0])
        assert lo <= x <= hi  # before: the violated bound's maximum (1.7) drawn off the axis, not seen
        assert x == pytest.approx(min(max(ratios), 1.05))
    assert "max 1.7" in labels[2]


def test_no_text_is_cut_off_and_no_legend_covers_the_axes(tmp_path, saved):
    _plots(_result(), tmp_path)
    assert [n for n, _, _ in saved] == ["ratios.png", "snr_vs_rv.png", "grpo_mse_vs_rv.png", "mi_contraction.png",
                                        "drift.png"]
    for name, fig, kwargs in saved:
        assert _outside(fig, kwargs) == [], name  # before: ratios.png's title and longest row label cut
        renderer = fig._get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            a, b = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            overlap = min(a.x1, b.x1) - max(a.x0, b.x0) > 0 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0
            assert not overlap, name  # before: inside the axes ("best" place), over the curves it can find


def test_the_same_run_draws_the_same_figures_twice(tmp_path, saved):
    result = _result()
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        _plots(result, tmp_path / sub)
    first, second = ({n: f for n, f, _ in saved[:5]}, {n: f for n, f, _ in saved[5:]})
    for name in first:
        a = [[float(y) for y in ln.get_ydata()] for ln in first[name].axes[0].get_lines()]
        b = [[float(y) for y in ln.get_ydata()] for ln in second[name].axes[0].get_lines()]
        assert a == b, name  # before: mi_contraction.png drew a new random channel from the run's generator
