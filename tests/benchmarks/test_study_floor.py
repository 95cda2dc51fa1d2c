"""benchmarks.study_floor: the counting rule against a plain loop, the rebuild's arithmetic by hand, and the lean
floor's measurements against the study's analysis (its findings unchanged when only those are taken)."""

import json
import math

import pytest

from benchmarks import study_floor as sf
from benchmarks.study_floor import (
    measurement_points,
    measurement_steps,
    read_steps,
    rebuild,
    study_counts,
    unit_seconds,
)


@pytest.mark.parametrize("steps", [0, 1, 5, 19, 20, 40, 45, 60])
@pytest.mark.parametrize("every", [0, 1, 5, 10, 20])
@pytest.mark.parametrize("at_end", [False, True])
def test_measurement_points_against_a_step_loop(steps, every, at_end):
    taken = [s for s in range(steps + 1) if every and s % every == 0]  # the trainer's `step % every == 0`
    if every and at_end and (not taken or taken[-1] != steps):
        taken.append(steps)
    assert measurement_points(steps, every, at_end) == len(taken)


def _profile():
    def phase(name, base, now, floor, **extra):
        return {"phase": name, "base_s": base, "now_s": now, "floor_s": floor, **extra}
    return {"configs": [
        {"config": "a", "phases": [phase("warm_start", 20.0, 10.0, 5.0, episodes=10), phase("rl_steps", 2.0, 1.0, 0.5),
                                   phase("validation", 3.0, 2.0, 1.0), phase("probe", 6.0, 4.0, 2.0)]},
        {"config": "b", "phases": [phase("warm_start", 4.0, 4.0, 2.0, episodes=2), phase("rl_steps", 1.0, 1.0, 1.0),
                                   phase("validation", 1.0, 1.0, 1.0)]},
    ]}


def test_rebuild_multiplies_counts_by_unit_seconds():
    counts = [{"run": "r1", "config": "a", "warm_start": 30, "rl_steps": 10, "validation": 2, "probe": 3},
              {"run": "r2", "config": "b", "warm_start": 0, "rl_steps": 6, "validation": 1, "probe": 0}]
    out = rebuild(counts, unit_seconds(_profile()))
    # now: a = 30 x 1.0 + 10 x 1.0 + 2 x 2.0 + 3 x 4.0 = 56 s; b = 6 x 1.0 + 1 x 1.0 = 7 s
    assert math.isclose(out["core_minutes"]["now"], 63 / 60)
    # floor: a = 30 x 0.5 + 10 x 0.5 + 2 x 1 + 3 x 2 = 28 s; b = 6 + 1 = 7 s
    assert math.isclose(out["core_minutes"]["floor"], 35 / 60)
    assert math.isclose(out["phase_core_minutes"]["base"]["warm_start"], 30 * 2.0 / 60)
    assert out["probe_stand_ins"] == []


def test_a_phase_the_profile_lacks_is_priced_at_its_stand_in_or_refused():
    units = unit_seconds(_profile())
    units["sokoban_tiny"] = units.pop("b")
    units["collapse_sokoban"] = units.pop("a")
    out = rebuild([{"run": "r", "config": "sokoban_tiny", "warm_start": 0, "rl_steps": 0, "validation": 0,
                    "probe": 2}], units)
    assert math.isclose(out["core_minutes"]["now"], 2 * 4.0 / 60)
    assert out["probe_stand_ins"] == ["sokoban_tiny -> collapse_sokoban"]
    with pytest.raises(KeyError, match="no probe for zzz"):
        rebuild([{"run": "r", "config": "zzz", "warm_start": 0, "rl_steps": 0, "validation": 0, "probe": 1}], units)


def test_the_study_shares_one_warm_start_per_env_and_seed():
    rows = study_counts(20, 2)
    assert len(rows) == 26  # 13 arms over the four envs, 2 seeds
    for name in {r["config"] for r in rows}:
        for seed in (20, 21):
            mine = [r for r in rows if r["config"] == name and r["run"].endswith(f"-s{seed}")]
            assert sum(1 for r in mine if r["warm_start"]) <= 1
    assert all(r["rl_steps"] > 0 and r["validation"] >= 2 for r in rows)


# ---------------------------------------------------------------------------------------------- the lean floor
def test_rebuild_prices_each_column_at_its_own_counts():
    profile = _profile()
    for c in profile["configs"]:
        for p in c["phases"]:
            p["lean_floor_s"] = p["floor_s"] / 2
    units = unit_seconds(profile)
    row = {"run": "r1", "config": "a", "seed": 0, "warm_start": 10, "rl_steps": 10, "mi": 0, "validation": 2,
           "probe": 3, "base": {"validation": 3, "probe": 4}, "read": {"validation": 1, "probe": 1}}
    out = rebuild([row], units)
    # base: 10 x 2.0 (per demonstration) + 10 x 2 + 3 x 3 + 4 x 6 = 73 s; lean: 10 x 0.25 + 10 x 0.25 + 1 x 0.5 + 1 x 1
    assert math.isclose(out["core_minutes"]["base"], 73 / 60)
    assert math.isclose(out["core_minutes"]["now"], (10 * 1.0 + 10 * 1.0 + 2 * 2.0 + 3 * 4.0) / 60)
    assert math.isclose(out["core_minutes"]["lean"], 6.5 / 60)
    assert out["n_seeds"] == 1 and math.isclose(out["core_minutes_per_seed"]["lean"], 6.5 / 60)
    # A profile without lean floors: that column is None, the others as before.
    old = rebuild([row], unit_seconds(_profile()))
    assert old["core_minutes"]["lean"] is None and math.isclose(old["core_minutes"]["now"], out["core_minutes"]["now"])


def test_read_steps_by_hand():
    every10 = measurement_steps(60, 10, True)
    assert every10 == [0, 10, 20, 30, 40, 50, 60]
    assert read_steps("all", every10, 60) == every10 and read_steps("none", every10, 60) == []
    assert read_steps("early+ends", every10, 60) == [0, 10, 60]  # the early window is steps <= 15 of 60
    assert read_steps("ends", every10, 60) == [0, 60]
    assert read_steps("early", [5, 10, 15, 20, 60], 60) == [5, 10, 15]
    assert read_steps("early", [20, 40], 60) == [20]  # at least the first measurement
    assert read_steps("ends", [0, 10, 20], 60) == [0, 20]  # a run that stopped: its last one


def test_the_read_rules_name_the_analysis_own_groups_and_arms():
    import inspect

    from ragen_core.apps.reproduce import analysis, study

    defaults = {name: {k: p.default for k, p in inspect.signature(getattr(analysis, name)).parameters.items()}
                for name in ("finding_collapse", "finding_filtering", "finding_correlations", "finding_quartiles",
                             "co_movement")}
    assert tuple(sf.COLLAPSE_ENVS) == tuple(defaults["finding_collapse"]["envs"]) == study.COLLAPSE_ENVS
    assert tuple(defaults["co_movement"]["envs"]) == sf.COLLAPSE_ENVS
    assert tuple(defaults["finding_correlations"]["envs"]) == sf.LEARNING_ENVS == study.LEARNING_ENVS
    assert set(sf.FINDING3_ARMS) == {a for pair in defaults["finding_filtering"]["comparisons"] for a in pair}
    assert defaults["finding_quartiles"]["env"] == sf.QUARTILE_ENV
    assert set(sf.QUARTILE_ARMS) <= set(study.ENVS[sf.QUARTILE_ENV][1])
    for env, (_, arms, _) in study.ENVS.items():  # every run of the study has a rule for every measurement
        for arm in arms:
            for what in sf.MEASUREMENTS:
                assert sf.read_rule(env, arm, what)["rule"] in ("all", "none", "early", "ends", "early+ends")


def test_step0_measurements_are_counted_once_per_env_and_seed():
    rows = study_counts(20, 2)
    by = {}
    for r in rows:
        by.setdefault((r["env"], r["seed"]), []).append(r)
    for runs in by.values():
        for what in ("validation", "probe"):
            if not runs[0]["taken"][what]:
                continue
            # 43a82f3: every run measured its own step 0; now: all but the first arm read it from the cache.
            fewer = sum(len(r["taken_base"][what]) - len(r["taken"][what]) for r in runs)  # mi.probe_until
            assert sum(r["base"][what] - r[what] for r in runs) == len(runs) - 1 + fewer
            assert all(r["base"][what] == len(r["taken_base"][what]) for r in runs)
    # The learning configs' probes (every 10 of 60 steps): 0, 10 and 60 read by the top-p / no-filter arms, and
    # since mi.probe_until only those taken; 43a82f3 took all seven.
    sok = [r for r in rows if r["env"] == "sokoban" and r["arm"] in ("top_p", "no_filter")]
    assert all(r["read_steps"]["probe"] == [0, 10, 60] for r in sok)
    assert all(r["taken"]["probe"] == [0, 10, 60] for r in sok)
    assert all(r["taken_base"]["probe"] == [0, 10, 20, 30, 40, 50, 60] for r in sok)
    # Every run takes every measurement a finding reads.
    for r in rows:
        for what in ("validation", "probe", "mi"):
            assert set(r["read_steps"][what]) <= set(r["taken"][what]), (r["run"], what)
    assert all(r["read_steps"]["mi"] == [5, 10, 15] for r in sok)
    assert all(r["read_steps"]["mi"] == [] for r in rows if r["env"].startswith("collapse"))
    # ... and what the windows take: the early window and the end (mi.until, eval.until), where 43a82f3 took all
    assert all(r["taken"]["mi"] == [5, 10, 15] and r["taken_base"]["mi"] == list(range(5, 61, 5)) for r in sok)
    assert all(r["taken"]["validation"] == [0, 10, 60] for r in sok)
    assert all(r["taken_base"]["validation"] == list(range(0, 61, 10)) for r in sok)
    collapse = [r for r in rows if r["env"].startswith("collapse")]
    assert all(r["taken"]["mi"] == [5, 10] and r["taken_base"]["mi"] == list(range(5, 41, 5)) for r in collapse)
    quartiles = [r for r in rows if r["arm"].startswith("rv_")]
    assert quartiles and all(r["taken"] == r["taken_base"] for r in quartiles)  # finding 4 reads any step


STOPS = {("sokoban", "rv_bottom_quartile", 20): 21, ("sokoban", "rv_bottom_quartile", 23): 58,
         ("sokoban", "rv_bottom_quartile", 24): 21, ("collapse_sokoban", "random", 22): 12}


def _records(rows, keep=None, schedule="taken_base"):
    """Synthetic run records of the study's plan (`rows` of study_counts), some runs stopped early as at seeds
    20-24 (:data:`STOPS`), with seeded random measurements (step 0 shared by a seed's arms), measured at the steps of
    `schedule` (``taken_base``: every step of each cadence, as 43a82f3 measured; ``taken``: what the code takes
    now); `keep(row, what, steps)`: the steps kept of each measurement (default all)."""
    import random
    import zlib

    out = []
    for row in rows:
        planned = row["rl_steps"]
        stop = STOPS.get((row["env"], row["arm"], row["seed"]), planned)
        rec = {"name": row["run"], "env": row["env"], "arm": row["arm"], "seed": row["seed"], "steps": stop,
               "planned_steps": planned}
        for what, src in (("validation", "val"), ("probe", "probe"), ("mi", "mi")):
            steps = [s for s in row[schedule][what] if s <= stop]
            if what == "probe" and schedule == "taken" and row["taken"]["probe"] != row["taken_base"]["probe"]:
                steps = sorted(set(steps) | {stop})  # mi.probe_until's run also probes at its last step
            if what == "validation" and steps[-1] != stop:
                steps.append(stop)  # a run that stops validates once more
            if keep is not None:
                steps = keep(row, what, steps)
            values = []
            for s in steps:
                key = (row["env"], row["seed"], what, s) if s == 0 else (row["run"], what, s)
                rng = random.Random(zlib.crc32(repr(key).encode()))
                if what == "validation":
                    values.append([s, round(rng.random(), 3)])
                elif what == "probe":
                    values.append({"step": s, "retrieval_margin": rng.uniform(0.0, 0.8),
                                   "token_entropy": rng.uniform(0.5, 1.0), "cond_entropy_est": rng.uniform(0.5, 1.0),
                                   "mi_seq_norm": rng.uniform(0.0, 1.0)})
                else:
                    values.append({"step": s, **{k: rng.uniform(0.1, 2.0) for k in (
                        "mi_zscore_ema", "mi_seq_est", "retrieval_acc", "cond_entropy_est", "marginal_entropy_est",
                        "token_entropy")}, "mi_upper_bound": 2.08, "retrieval_chance": 0.125})
            rec[src] = values
        out.append(rec)
    return out


def test_the_findings_are_unchanged_when_only_the_read_measurements_are_taken():
    """The study's analysis on synthetic records of its full plan (runs stopping early as at seeds 20-24) and on
    the same records holding only the measurements the lean floor counts: every finding is the same. Dropping one
    more (the early probe at step 10 of a learning run) changes finding 2: the test can fail."""
    from ragen_core.apps.reproduce.analysis import analyse

    rows = study_counts(20, 5)

    def read(row, what, steps):
        planned = row["rl_steps"]
        return read_steps(sf.read_rule(row["env"], row["arm"], what)["rule"], steps, planned)

    full, lean = analyse(_records(rows), n_boot=40), analyse(_records(rows, read), n_boot=40)
    now = analyse(_records(rows, schedule="taken"), n_boot=40)  # the study's own schedule (mi.probe_until)
    findings = ("collapse", "co_movement", "correlations", "filtering", "power", "quartiles", "rules")
    for key in findings:
        assert json.dumps(full[key], sort_keys=True, default=str) == json.dumps(lean[key], sort_keys=True,
                                                                                default=str), key
        assert json.dumps(full[key], sort_keys=True, default=str) == json.dumps(now[key], sort_keys=True,
                                                                                default=str), key
    assert sum(len(r["probe"]) for r in _records(rows, read)) < sum(len(r["probe"]) for r in _records(rows))
    assert sum(len(r["probe"]) for r in _records(rows, schedule="taken")) < sum(
        len(r["probe"]) for r in _records(rows))

    def fewer(row, what, steps):
        kept = read(row, what, steps)
        return [s for s in kept if s != 10] if (row["env"], what) == ("sokoban", "probe") else kept

    worse = analyse(_records(rows, fewer), n_boot=40)
    assert json.dumps(worse["correlations"], sort_keys=True, default=str) != json.dumps(
        full["correlations"], sort_keys=True, default=str)
