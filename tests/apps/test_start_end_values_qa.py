"""The study's analysis reads a start "at step 0" and an end "at the last step" at those steps only: a run with no
step-0 probe row (a resumed run that lost it), a null at step 0, a null at the last step or one in the middle is
never given a neighbouring measurement's value under the start's or the end's name. The value is None, and the
records say why (``not_measured``) and which measurements the detector left out (``left_out_steps``). Synthetic
records with known values; every expected number is written out, not computed by the code under test."""

from __future__ import annotations

import pytest

from ragen_core.apps.reproduce.analysis import analyse, entropy_ratios, finding_filtering, run_collapse
from ragen_core.math.collapse import collapse_from_history

STEPS = [0, 10, 20, 30, 40]
MARGIN = [0.60, 0.55, 0.50, 0.45, 0.40]
TOKEN = [0.20, 0.22, 0.24, 0.26, 0.28]
COND = [0.10, 0.11, 0.12, 0.13, 0.14]


def _record(arm="top_p", seed=1, steps=STEPS, margin=MARGIN, token=TOKEN, cond=COND, val=None):
    env = "collapse_sokoban"
    return {"env": env, "arm": arm, "seed": seed, "name": f"{env}-{arm}-s{seed}", "steps": 40, "planned_steps": 40,
            "val": val if val is not None else [[0, 0.25], [20, 0.5], [40, 0.75]], "mi": [],
            "probe": [{"step": s, "retrieval_margin": m, "token_entropy": t, "cond_entropy_est": c}
                      for s, m, t, c in zip(steps, margin, token, cond)],
            "filter_log": [], "sft_s": 1.0, "rl_s": 1.0}


def _partner(seed=1):
    """A complete no-filter run of the same seed (finding 3 pairs top_p with it)."""
    return _record(arm="no_filter", seed=seed, margin=[0.6, 0.5, 0.4, 0.3, 0.2])


def _run(analysis, name):
    return next(r for r in analysis["runs"] if r["name"] == name)


def _control(analysis, arm="top_p"):
    (row,) = analysis["collapse"]["collapse_sokoban"]["arms"][arm]["runs"]
    return row


def test_a_run_without_a_step0_probe_has_no_start_and_says_why():
    # a resumed run: its probe rows start at step 10 (old: every "start" and "end over start" was step 10's)
    r = _record(steps=STEPS[1:], margin=MARGIN[1:], token=TOKEN[1:], cond=COND[1:])
    a = analyse([r, _partner()], n_boot=20)
    why = "no step-0 probe measurement (the first is at step 10)"
    run = _run(a, r["name"])
    assert run["margin_start"] is None and run["margin_end"] == 0.40
    assert run["not_measured"] == {"margin_start": why}
    ratios = entropy_ratios(r)
    assert ratios["token_end_start"] is None and ratios["cond_end_start"] is None  # old: 0.28 / 0.22, 0.14 / 0.11
    assert ratios["not_measured"] == {"token_end_start": why, "cond_end_start": why}
    row = _control(a)
    assert row["margin_start"] is None and row["token_end_start"] is None  # old: 0.55 and 1.27
    assert row["not_measured"] == {"margin_start": why, "token_end_start": why, "cond_end_start": why}
    assert row["reference_step"] == 10  # the detector's own reference is named with its step


def test_a_null_step0_margin_is_not_replaced_by_step_10s():
    r = _record(margin=[None, *MARGIN[1:]])
    v = run_collapse(r)
    assert v["margin_start"] is None and v["left_out_steps"] == [0]  # old: 0.55, the step-10 margin, unsaid
    assert v["not_measured"] == {"margin_start": "the step-0 probe measurement is null (not measured, or not finite)"}
    a = analyse([r, _partner()], n_boot=20)
    assert _control(a)["margin_start"] is None and _control(a)["left_out_steps"] == [0]
    assert _run(a, r["name"])["not_measured"]["margin_start"].startswith("the step-0 probe measurement is null")
    # the detector's verdict names the step its curves start at
    hist = [{"step": s, "probe/retrieval_margin": m, "probe/token_entropy": t, "probe/cond_entropy_est": c}
            for s, m, t, c in zip(STEPS, [None, *MARGIN[1:]], TOKEN, COND)]
    verdict = collapse_from_history(hist)
    assert verdict.start_step == 10 and verdict.margin_start == 0.55 and verdict.reference_step == 10


def test_a_null_last_value_is_no_end_and_the_pair_leaves_the_seed_out_named():
    r = _record(margin=[*MARGIN[:-1], None], token=[*TOKEN[:-1], None],
                val=[[0, 0.25], [20, 0.5], [40, None]])
    # old: analyse raised TypeError (float(None) / max over a null success); the margin's end was step 30's 0.45
    a = analyse([r, _partner()], n_boot=20)
    margin_why = "the probe measurement at the last step (40) is null (not an earlier step's value)"
    success_why = "the evaluation at the last step (40) is null (not an earlier step's value)"
    run = _run(a, r["name"])
    assert run["margin_end"] is None and run["final"] is None and run["peak"] == 0.5
    assert run["not_measured"] == {"margin_end": margin_why, "final": success_why}
    assert run_collapse(r)["margin_end"] is None and run_collapse(r)["left_out_steps"] == [40]
    assert entropy_ratios(r)["token_end_start"] is None  # as before: the end is null, now with why
    assert entropy_ratios(r)["not_measured"]["token_end_start"] == margin_why
    cm = a["co_movement"]
    (row,) = [x for x in cm["runs"] if x["name"] == r["name"]]
    assert row["margin_end"] is None  # old: 0.45
    assert cm["margin_success"]["left_out"] == [
        {"name": r["name"], "why": f"margin_end: {margin_why}; final_success: {success_why}"}]
    f = a["filtering"]["collapse_sokoban"]
    c = f["comparisons"]["top_p-no_filter"]
    assert c["margin_end"]["n"] == 0 and c["success_end"]["n"] == 0  # old: 1, at step 30 against step 40
    assert c["margin_end"]["not_measured"] == {1: {"top_p": margin_why}}
    assert c["success_end"]["not_measured"] == {1: {"top_p": success_why}}
    assert f["arms"]["top_p"]["not_measured"] == {"margin_end": {1: margin_why}, "success_end": {1: success_why}}


def test_at_equal_steps_a_null_at_the_common_step_is_not_read_from_an_earlier_one():
    # top_p stopped at step 30 with a null margin there; the pair is read at step 30 (the last both have)
    r = _record(steps=STEPS[:4], margin=[0.6, 0.55, 0.5, None], token=TOKEN[:4], cond=COND[:4],
                val=[[0, 0.25], [20, 0.5]])
    r["steps"] = 30
    c = finding_filtering([r, _partner()])["collapse_sokoban"]["comparisons"]["top_p-no_filter"]["margin_end"]
    assert c["early_seeds"] == [1] and c["n"] == 0  # old: 0.5 (step 20) against the partner's 0.3 (step 30)
    assert c["not_measured"] == {1: {"top_p": "the probe measurement at the last step (30) is null (not an earlier "
                                               "step's value)"}}


def test_a_null_in_the_middle_is_left_out_and_named_start_and_end_stay():
    r = _record(margin=[0.6, 0.55, None, 0.45, 0.4], val=[[0, 0.25], [20, None], [40, 0.75]])
    a = analyse([r, _partner()], n_boot=20)  # old: TypeError (max over a null success)
    run = _run(a, r["name"])
    assert (run["margin_start"], run["margin_end"], run["before"], run["peak"], run["final"]) == (
        0.6, 0.4, 0.25, 0.75, 0.75)
    assert "not_measured" not in run
    assert _control(a)["left_out_steps"] == [20]  # old: the key was absent, the gap unsaid
    assert a["filtering"]["collapse_sokoban"]["comparisons"]["top_p-no_filter"]["margin_end"]["mean"] == (
        pytest.approx(0.4 - 0.2))
