"""benchmarks/compare_studies.py's figure: its band is the 95% t-interval its table states, read back from the plot."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from benchmarks.compare_studies import figure  # noqa: E402

#: Student's t 97.5% quantile on 2 degrees of freedom (printed tables).
T_975_DF2 = 4.302652729911275


def _study(shift):
    recs = []
    for seed, v in zip((0, 1, 2), (0.2, 0.5, 0.6)):
        recs.append({"env": "sokoban", "arm": "top_p", "seed": seed, "name": f"r{seed}",
                     "val": [[0, 0.1], [10, v + shift]],
                     "probe": [{"step": 0, "retrieval_margin": 0.5}, {"step": 10, "retrieval_margin": v / 2}]})
    return {"records": recs}


def test_the_band_is_the_95_percent_t_interval_of_the_mean(tmp_path, monkeypatch):
    saved = []
    real = matplotlib.figure.Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    old, new = _study(0.0), _study(0.1)
    figure(old, new, ["old", "new"], tmp_path / "cmp.png")
    ax = saved[-1].axes[0]  # validation success of sokoban/top_p
    bands = [c for c in ax.collections if len(c.get_paths())]
    assert len(bands) == 2
    for band, study in zip(bands, (old, new)):
        finals = [r["val"][1][1] for r in study["records"]]  # step 10, a plain loop
        mean = sum(finals) / 3
        sd = math.sqrt(sum((v - mean) ** 2 for v in finals) / 2)
        lo, hi = mean - T_975_DF2 * sd / math.sqrt(3), mean + T_975_DF2 * sd / math.sqrt(3)
        ys = [y for x, y in band.get_paths()[0].vertices if x == 10]
        assert min(ys) == pytest.approx(lo) and max(ys) == pytest.approx(hi)  # before: 1.96 * sd / sqrt(n)
