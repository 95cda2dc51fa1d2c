"""benchmarks/compare_studies: two runs of a study compared on the runs both finished."""

from benchmarks.compare_studies import compare


def _rec(name, env, arm, seed, success, margin, wall):
    return {"name": name, "env": env, "arm": arm, "seed": seed, "val": [[0, 0.1], [40, success]],
            "probe": [{"step": 0, "retrieval_margin": 0.5}, {"step": 40, "retrieval_margin": margin}],
            "sft_s": 0.0, "rl_s": wall, "wall_s": wall}


def _analysis(verdict):
    return {"collapse": {"sokoban": {"verdict": verdict}}}


def test_only_runs_both_studies_finished_are_compared_and_changed_verdicts_are_marked():
    old = {"analysis": _analysis("collapsed"), "records": [
        _rec("a-s1", "sokoban", "no_filter", 1, 0.5, 0.2, 600.0),
        _rec("a-s2", "sokoban", "no_filter", 2, 0.7, 0.4, 300.0),
        _rec("b-s1", "sokoban", "top_p", 1, 0.9, 0.9, 999.0)]}  # the new study never ran b-s1
    new = {"analysis": _analysis("no collapse"), "records": [
        _rec("a-s1", "sokoban", "no_filter", 1, 0.6, 0.2, 200.0),
        _rec("a-s2", "sokoban", "no_filter", 2, 0.6, 0.4, 100.0)]}
    out = compare(old, new, "old", "new", reanalyse=False)
    assert out["runs_compared"] == 2 and out["runs_total"] == 3
    assert [a["arm"] for a in out["arms"]] == ["no_filter"]  # top_p ran only in the old study
    # means by hand: success (0.5 + 0.7) / 2 and (0.6 + 0.6) / 2
    arm = out["arms"][0]
    assert abs(arm["old"]["success"][0] - 0.6) < 1e-12 and abs(arm["new"]["success"][0] - 0.6) < 1e-12
    assert out["wall_ratio"]["sokoban/no_filter"] == [3.0, 3.0]
    assert abs(out["core_minutes"]["old"] - 15.0) < 1e-12 and abs(out["core_minutes"]["new"] - 5.0) < 1e-12
    assert out["verdicts"] == [{"what": "finding 1, sokoban", "old": "collapsed", "new": "no collapse",
                                "same": False}]
    assert "**(changed)**" in out["markdown"] and "Runs compared: 2 of 3" in out["markdown"]
