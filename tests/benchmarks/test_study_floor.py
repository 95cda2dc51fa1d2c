"""benchmarks.study_floor: the counting rule against a plain loop, and the rebuild's arithmetic by hand."""

import math

import pytest

from benchmarks.study_floor import measurement_points, rebuild, study_counts, unit_seconds


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
