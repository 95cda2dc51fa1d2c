"""The study's report (summary.md) says why a start or end value is n/a: the analysis leaves a value None when its
measurement at step 0 or at the last step is missing or null (never a neighbouring step's), and the report names
each such value, the probe steps the detector left out, and the seeds a paired comparison left out for a null."""

from __future__ import annotations

from ragen_core.apps.reproduce.analysis import analyse
from ragen_core.apps.reproduce.report import markdown

HEADER = {"mode": "full", "command": "ragen reproduce", "seeds": [1], "n_runs": 2, "n_missing": 0,
          "missing": [], "core_minutes": 0.0, "machine": "test", "arms": {}}
STEPS = [0, 10, 20, 30, 40]


def _record(arm, margin, val, seed=1):
    env = "collapse_sokoban"
    return {"env": env, "arm": arm, "seed": seed, "name": f"{env}-{arm}-s{seed}", "steps": 40, "planned_steps": 40,
            "val": val, "mi": [],
            "probe": [{"step": s, "retrieval_margin": m, "token_entropy": 0.2 + 0.01 * i,
                       "cond_entropy_est": 0.1 + 0.01 * i} for i, (s, m) in enumerate(zip(STEPS, margin))],
            "filter_log": [], "sft_s": 1.0, "rl_s": 1.0}


def _report(records):
    return markdown({"analysis": analyse(records, n_boot=20), "records": records}, "r", HEADER)


def test_the_report_names_values_left_n_a_for_a_null_at_the_last_step():
    top = _record("top_p", [0.6, 0.55, 0.5, 0.45, None], [[0, 0.25], [20, 0.5], [40, None]])
    partner = _record("no_filter", [0.6, 0.5, 0.4, 0.3, 0.2], [[0, 0.25], [20, 0.5], [40, 0.75]])
    text = _report([top, partner])
    margin_why = "the probe measurement at the last step (40) is null (not an earlier step's value)"
    success_why = "the evaluation at the last step (40) is null (not an earlier step's value)"
    # the runs table's list: the run, each value and why
    (line,) = [x for x in text.splitlines() if x.startswith(f"- {top['name']}: ")]
    assert f"`margin_end`: {margin_why}" in line and f"`final`: {success_why}" in line
    # finding 1's per-seed line: the detector's left-out probe step
    assert "- `top_p` seed 1: " in text
    assert "probe steps left out of the detector's curves (a null value): 40" in text
    # finding 3: the seed left out of the paired comparison, with its reason
    assert "Seeds left out of a comparison for a null at the step it is read at:" in text
    assert f"seed 1 (`top_p` {margin_why})" in text


def test_a_complete_study_has_none_of_these_lines():
    runs = [_record(arm, [0.6, 0.5, 0.4, 0.3, 0.2], [[0, 0.25], [20, 0.5], [40, 0.75]])
            for arm in ("top_p", "no_filter")]
    text = _report(runs)
    assert "n/a above because" not in text
    assert "left out for a null" not in text and "for a null at the step it is read at" not in text
    assert "probe steps left out" not in text
