"""A ratio or a change "from step 0" is over the step-0 probe value only: when that value is missing (a run resumed
from a folder that lost its first probe, a NaN written as null) the figure and the experiments' run summary say so,
never taking the first later measurement as the reference. Synthetic records, read back as data (not pixels)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ragen_core.apps.reproduce import experiments as ex  # noqa: E402
from ragen_core.apps.reproduce import report  # noqa: E402
from ragen_core.apps.reproduce.analysis import entropy_ratios  # noqa: E402

STEPS = [0, 10, 20, 30, 40]


def _record(arm="top_p", seed=1, env="collapse_sokoban", steps=STEPS, margin=None, token=None, cond=None,
            share=None, val=None):
    n = len(steps)
    margin = margin or [0.6, 0.55, 0.5, 0.45, 0.4][:n]
    token = token or [0.20, 0.22, 0.24, 0.26, 0.28][:n]
    cond = cond or [0.10, 0.11, 0.12, 0.13, 0.14][:n]
    share = share or [0.5] * n
    return {"env": env, "arm": arm, "seed": seed, "name": f"{env}-{arm}-s{seed}", "steps": 40, "planned_steps": 40,
            "val": val if val is not None else [[0, 0.25], [20, 0.5], [40, 0.75]], "mi": [],
            "probe": [{"step": s, "retrieval_margin": m, "token_entropy": t, "cond_entropy_est": c,
                       "template_share": sh} for s, m, t, c, sh in zip(steps, margin, token, cond, share)],
            "filter_log": [], "sft_s": 1.0, "rl_s": 1.0}


def _lines(ax, arm):
    """The data lines of `arm` on `ax` (the +-25% guides are black)."""
    return [ln for ln in ax.get_lines() if ln.get_color() == report._COLORS[arm]]


def _ys(line):
    return [float(y) for y in line.get_ydata()]


# ------------------------------------------------------------------------------------------ the study's figure
def test_a_null_step0_entropy_is_named_and_a_middle_null_is_a_gap_over_step0():
    gap = _record(seed=1, token=[0.20, 0.22, None, 0.26, 0.28])
    null0 = _record(seed=2, token=[None, 0.22, 0.24, 0.26, 0.28])
    fig = report.collapse_figure([gap, null0], ["collapse_sokoban"])
    try:
        token_ax, cond_ax = fig.axes[1], fig.axes[2]
        (line,) = _lines(token_ax, "top_p")  # seed 2 has no step-0 token entropy: one curve, seed 1's
        assert [int(x) for x in line.get_xdata()] == STEPS  # steps and values aligned, the null at its own step
        want = [0.20 / 0.20, 0.22 / 0.20, math.nan, 0.26 / 0.20, 0.28 / 0.20]
        got = _ys(line)
        assert math.isnan(got[2]) and [g for i, g in enumerate(got) if i != 2] == pytest.approx(
            [w for i, w in enumerate(want) if i != 2])
        # before: seed 2 left out without a word (the label was only "training step")
        assert token_ax.get_xlabel() == "training step\nnot drawn, no step-0 value: top_p s2 (step-0 value null)"
        assert len(_lines(cond_ax, "top_p")) == 2 and cond_ax.get_xlabel() == "training step"
    finally:
        plt.close(fig)
    # the study's analysis leaves the same ratio None (not over step 10's value)
    assert entropy_ratios(null0)["token_end_start"] is None
    assert entropy_ratios(gap)["token_end_start"] == pytest.approx(0.28 / 0.20)


def test_a_run_without_a_step0_probe_is_not_drawn_over_a_later_step():
    resumed = _record(seed=3, steps=[10, 20, 30, 40])  # its step-0 probe row was lost
    fig = report.collapse_figure([resumed], ["collapse_sokoban"])
    try:
        for ax in fig.axes[1:3]:
            assert _lines(ax, "top_p") == []  # before: drawn over step 10's value under "/ step 0"
            assert ax.get_xlabel().endswith("top_p s3 (no step-0 measurement, first at step 10)")
        (margin,) = _lines(fig.axes[0], "top_p")  # the margin is not a ratio: drawn as measured
        assert [int(x) for x in margin.get_xdata()] == [10, 20, 30, 40]
    finally:
        plt.close(fig)


def test_an_all_null_entropy_and_the_own_panel_say_what_they_drew():
    blank = _record(seed=4, token=[None] * 5, cond=[None] * 5)
    bonus = _record(arm="entropy_bonus", seed=5, cond=[None, 0.11, 0.12, 0.13, 0.14])
    fig = report.collapse_figure([blank, bonus], ["collapse_sokoban"])
    try:
        token_ax, cond_ax, own_ax = fig.axes[1], fig.axes[2], fig.axes[3]
        for ax in (token_ax, cond_ax):
            assert _lines(ax, "top_p") == []
            assert ax.get_xlabel().endswith("top_p s4 (step-0 value null)")
        # the bonus arm's own panel: its token entropy drawn over step 0, its H(Z|X) named
        (line,) = _lines(own_ax, "entropy_bonus")
        assert _ys(line) == pytest.approx([t / 0.20 for t in (0.20, 0.22, 0.24, 0.26, 0.28)])
        assert own_ax.get_xlabel().endswith("entropy_bonus s5 (H(Z|X) step-0 value null)")
    finally:
        plt.close(fig)


# ------------------------------------------------------------------------------------------ the experiments
def test_run_summary_takes_no_later_step_as_the_start():
    # a null step-0 token entropy and success, a null in the middle of H(Z|X)
    r = _record(arm="pays_all", env="mechanism", token=[None, 0.22, 0.24, 0.26, 0.28],
                cond=[0.10, 0.11, None, 0.13, 0.14], val=[[0, None], [20, 0.5], [40, 0.75]])
    out = ex.run_summary(r)
    assert "token_entropy_ratio_end" not in out  # before: 0.28 / 0.22, step 10's value as the start
    assert out["cond_entropy_ratio_end"] == pytest.approx(0.14 / 0.10)  # over step 0, the middle null skipped
    assert out["success_start"] is None  # val[0] is step 0's row: a null stays a null
    assert out["no_step0"] == {"token_entropy_ratio_end": "the step-0 value is null (not measured, or not finite)",
                               "success_start": "the step-0 value is null (not measured, or not finite)"}
    assert out["margin_start"] == 0.6 and out["delta"] == pytest.approx(0.4 - 0.6)


def test_run_summary_of_a_run_that_lost_its_step0_probe():
    r = _record(arm="pays_all", env="mechanism", steps=[10, 20, 30, 40], val=[[20, 0.5], [40, 0.75]],
                share=[None] * 4)
    out = ex.run_summary(r)
    # before: margin_start 0.6 and delta -0.15 (step 10 to the end), ratios 0.26/0.20 and 0.13/0.10, success 0.5
    assert out["margin_start"] is None and out["delta"] is None and out["success_start"] is None
    assert "token_entropy_ratio_end" not in out and "cond_entropy_ratio_end" not in out
    assert out["margin_end"] == 0.45 and out["success_end"] == 0.75  # the end values are as measured
    why = out["no_step0"]
    assert why["delta"] == why["margin_start"] == "no step-0 measurement (the first is at step 10)"
    assert why["success_start"] == "no step-0 measurement (the first is at step 20)"
    assert set(why) == {"margin_start", "delta", "token_entropy_ratio_end", "cond_entropy_ratio_end",
                        "success_start"}  # the template share was never measured: no start to name


def test_the_mechanism_leaves_out_a_run_without_a_step0_margin_and_says_so():
    recs = [_record(arm="pays_all", env="mechanism", seed=s, margin=[0.6, 0.5, 0.4, 0.3, 0.2 + 0.01 * s])
            for s in range(30, 34)]
    recs.append(_record(arm="pays_all", env="mechanism", seed=34, margin=[None, 0.5, 0.4, 0.3, 0.2]))
    res = ex.analyse("mechanism", recs)
    arm = res["arms"]["pays_all"]
    assert arm["n"] == 4  # before: 5, seed 34's change measured from step 10 (-0.3) counted as from step 0
    assert arm["mean"] == pytest.approx(sum(0.2 + 0.01 * s - 0.6 for s in range(30, 34)) / 4)
    text = ex.markdown(res, {"seeds": list(range(30, 35)), "n_runs": 5})
    assert "- `pays_all` seed 34: `margin_start`, `delta`: the step-0 value is null (not measured, or not " \
           "finite)" in text
