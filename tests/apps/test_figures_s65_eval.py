"""``ragen eval``'s summary.png read back from its Figure and compared with the summary's numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from ragen_core.apps.eval.summary import write_plot  # noqa: E402


@pytest.fixture
def saved(monkeypatch):
    figs = []
    real = matplotlib.figure.Figure.savefig

    def keep(self, *args, **kwargs):
        figs.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return figs


def _env(k, n, lo, hi, n_eff=None):
    return {"episodes": n, "successes": k, "success": k / n, "success_ci95": [lo, hi],
            "success_ci95_n": float(n if n_eff is None else n_eff), "failed_episodes": 0}


ENVS = {"ragen/Bandit-v0": _env(6, 12, 0.209, 0.791, n_eff=7.5),
        "ragen/Sokoban-v0": {"refused": "needs a vision model", "episodes": 0},
        "ragen/FrozenLake-v0": _env(0, 12, 0.0, 0.39),
        "ragen/Countdown-v0": {**_env(1, 1, 0.0, 1.0), "episodes": 0, "success": None, "failed_episodes": 4}}


def _points(ax):
    """(row, x, lo, hi) of every error bar, from the drawn segments."""
    out = []
    for coll in ax.collections:
        for seg in coll.get_segments():
            (x0, y0), (x1, _) = seg
            out.append((round(float(y0)), float(x0), float(x1)))
    return sorted(out)


def test_every_env_keeps_its_row_and_each_bar_is_its_interval(tmp_path, saved):
    write_plot(tmp_path / "summary.png", ENVS, "tiny: temperature 1, top-p 1")
    ax = saved[-1].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == len(ENVS)  # before: the refused env and the one without a finished episode vanished
    assert labels[0].startswith("Bandit-v0 (n=12") and "7.5 effective" in labels[0]
    assert labels[1] == "Sokoban-v0 (refused)"
    texts = {round(t.get_position()[1]): t.get_text() for t in ax.texts}
    assert texts[1] == "refused" and texts[3].startswith("no finished episode (4 failed)")
    expected = []
    for row, s in enumerate(ENVS.values()):  # a plain loop over the summary: one bar per env with a success
        if "refused" not in s and s["episodes"]:
            expected.append((row, s["success_ci95"][0], s["success_ci95"][1]))
    assert [(r, pytest.approx(lo), pytest.approx(hi)) for r, lo, hi in _points(ax)] == expected


def test_a_long_title_stays_inside_the_figure(tmp_path, saved):
    title = ("/a/long/path/to/a/model/folder/checkpoint-final: per env: ragen/Bandit-v0 temperature 1, top-p 1; "
             "ragen/FrozenLake-v0 greedy (temperature 0)")
    write_plot(tmp_path / "summary.png", ENVS, title)
    fig = saved[-1]
    renderer = fig._get_renderer()
    shown = [t for t in fig.texts + [a.title for a in fig.axes] if t.get_text()]
    assert "".join(shown[0].get_text().split()) == "".join(title.split())
    box = shown[0].get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (box, fig.bbox)
