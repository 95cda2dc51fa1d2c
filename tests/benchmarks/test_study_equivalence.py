"""study_equivalence's reading of run records and its paired verdicts, on hand-made records."""

from __future__ import annotations

import pytest

from benchmarks import study_equivalence as se


def _rec(seed, success, margin, env="collapse_sokoban", arm="no_filter"):
    return {"env": env, "arm": arm, "seed": seed, "val": [[0, 0.5], [20, success[0]], [40, success[1]]],
            "probe": [{"step": 0, "retrieval_margin": 0.6}, {"step": 40, "retrieval_margin": margin}]}


def test_outcomes_read_step_0_and_the_end():
    assert se.outcomes(_rec(1, (0.7, 0.8), 0.3)) == {"success_0": 0.5, "success_end": 0.8, "margin_0": 0.6,
                                                    "margin_end": 0.3}
    # no step-0 measurement, no probe
    rec = {"val": [[10, 0.4]], "probe": []}
    assert se.outcomes(rec) == {"success_0": None, "success_end": 0.4, "margin_0": None, "margin_end": None}


def test_groups_are_paired_by_seed_and_judged_by_hand():
    old = [_rec(s, (0.5, m), 0.30) for s, m in ((20, 0.80), (21, 0.70), (22, 0.60))]
    old.append(_rec(20, (0.5, 0.5), 0.2, arm="top_p"))  # not retrained: not compared
    new = [_rec(20, (0.5, 0.82), 0.31), _rec(21, (0.5, 0.69), 0.30), _rec(22, (0.5, 0.64), 0.32)]
    g = se.compare_groups(old, new)
    assert list(g) == ["collapse_sokoban/no_filter"]
    end = g["collapse_sokoban/no_filter"]["success_end"]
    assert end["diffs"] == pytest.approx([0.02, -0.01, 0.04]) and end["mean"] == pytest.approx(0.05 / 3)
    assert end["reading"] == "equivalent"  # 90% CI about [-0.026, +0.059], inside +-0.10
    assert g["collapse_sokoban/no_filter"]["success_0"]["sd"] == 0.0  # every step 0 equal: a point interval
    far = [_rec(s, (0.5, 0.2), 0.3) for s in (20, 21, 22)]
    assert se.compare_groups(old, far)["collapse_sokoban/no_filter"]["success_end"]["reading"] == \
        "differs (new lower)"
