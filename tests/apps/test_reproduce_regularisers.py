"""docs/collapse.md section 8, the `regularisers` experiment and its pilot: the registry against the registration's
arm table, the primary outcomes, the verdict's direction ("lower" is held), the learning-rate rule, the refusal of
runs before the pilot fixes the learning rate, and the seed kinds. Synthetic records only: nothing here trains."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from ragen_core.apps.reproduce import cli
from ragen_core.apps.reproduce import experiments as ex
from ragen_core.apps.reproduce.analysis import PAIRED
from ragen_core.apps.reproduce.spec import RunRecord, build_runs, choose_seeds
from ragen_core.apps.reproduce.verdicts import Verdict, compare
from ragen_core.math.stats import seed_plan

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
ENVS = ("frozenlake", "sokoban")

# The registration's arm table (docs/collapse.md section 8), written out here independently of the module.
LOW = ("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.25", 'filter.order="smallest"')
HIGH = ("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.25", 'filter.order="largest"')
TABLE = {
    "low_ent0": (*LOW, "algo.entropy_coef=0.0"),
    "low_ent001": (*LOW, "algo.entropy_coef=0.001"),
    "low_ent01": (*LOW, "algo.entropy_coef=0.01"),
    "high_ent0": (*HIGH, "algo.entropy_coef=0.0"),
    "high_ent001": (*HIGH, "algo.entropy_coef=0.001"),
    "high_ent01": (*HIGH, "algo.entropy_coef=0.01"),
    "low_ent001_kl": (*LOW, "algo.entropy_coef=0.001", "algo.kl_coef=0.01"),
}
COMMON = ('algo.optimizer="sgd"', "eval.every=10", "mi.probe_every=5", "filter.max_empty_steps=0")
PROBE_STEPS = list(range(0, 45, 5))


def _record(env: str, arm: str, seed: int, margins: list[float], success: list[float] | None = None,
            entropy: float = 0.3, template: tuple[float, float] = (0.45, 0.45)) -> dict:
    """A run record shaped like the committed ones (docs/collapse/mechanism/results.json): every key, in order."""
    success = success or [0.2] * 5
    share = np.linspace(template[0], template[1], len(margins))
    probe = [{"step": s, "retrieval_acc": m + 0.03, "retrieval_chance": 0.03125, "retrieval_margin": m,
              "mi_seq_est": 1.8 * m, "mi_upper_bound": 3.4657359027997265, "mi_seq_norm": m,
              "token_entropy": entropy, "cond_entropy_est": entropy + 0.01, "recall_at_2": 0.6,
              "recall_at_2_chance": 0.0625, "recall_at_4": 0.65, "recall_at_4_chance": 0.125, "recall_at_8": 0.7,
              "recall_at_8_chance": 0.25, "reasoning_tokens": 45.6, "template_share": float(t),
              "modal_share": float(t), "probe_s": 8.9} for s, m, t in zip(PROBE_STEPS, margins, share)]
    return {"env": env, "arm": arm, "seed": seed, "name": f"{env}-{arm}-s{seed}", "steps": 40,
            "val": [[s, v] for s, v in zip([0, 10, 20, 30, 40], success)],
            "mi": [{"step": 1, "mi_zscore_ema": 0.33, "mi_seq_est": 0.77, "mi_upper_bound": 2.08, "retrieval_acc": 0.47,
                    "retrieval_chance": 0.16, "cond_entropy_est": 0.16, "marginal_entropy_est": 0.18,
                    "token_entropy": 0.15, "regime": "diverse_reasoning", "pmi_return_cov_kept": 0.0,
                    "pmi_return_cov_dropped": None}],
            "probe": probe, "rv_heterogeneity_first": 0.6, "zero_variance_fraction": 0.8, "sft_s": 200.0,
            "sft_cached": False, "rl_s": 80.0, "planned_steps": 40, "commit": "0" * 40, "config_sha256": "f" * 64,
            "filter_log": [{"step": s, "groups_total": 8.0, "kept_groups": 2.0, "zero_fraction": 0.8,
                            "kept_zero_adv_share": 1.0, "skipped": 0.0} for s in range(1, 41)],
            "wall_s": 300.0}


def _line(start: float, change: float, rng: random.Random, noise: float) -> list[float]:
    """A margin curve from `start`, changing by `change` over the 40 steps, with Gaussian noise."""
    return [start + change * s / 40 + rng.gauss(0.0, noise) for s in PROBE_STEPS]


def _experiment_records(low_change: float, seeds: list[int], noise: float = 0.01, low_success_end: float = 0.3,
                        rng_seed: int = 0, jitter: float = 0.0) -> list[dict]:
    """Every arm of both envs on `seeds`: `low_ent001` and `low_ent001_kl` change the margin by `low_change` over
    the 40 steps, `low_ent01` by twice that, the others stay (each with its own noise); `jitter` moves
    `low_ent001`'s curve up (even seeds) or down (odd seeds) by it at step 0 and twice it at step 40, so that its
    differences from `low_ent0` spread around exactly 0."""
    rng = random.Random(rng_seed)
    change = {"low_ent001": low_change, "low_ent001_kl": low_change, "low_ent01": 2 * low_change}
    recs = []
    for env in ENVS:
        for seed in seeds:
            start = 0.5 + rng.gauss(0.0, 0.03)  # the warm start of the seed, shared by its arms
            for arm in TABLE:
                success = [0.3] * 4 + [low_success_end + rng.gauss(0.0, 0.01)] if arm == "low_ent001" else None
                j = (jitter if seed % 2 == 0 else -jitter) if arm == "low_ent001" else 0.0
                recs.append(_record(env, arm, seed, _line(start + j, change.get(arm, 0.0) + j, rng, noise), success))
    return recs


# ------------------------------------------------------------------------------------------- (1) the registry
def test_the_registry_is_the_registrations_arm_table():
    exp = ex.EXPERIMENTS["regularisers"]
    assert exp.common == COMMON
    for env in ENVS:
        arms = [v for v in exp.variants if v.group == env]
        assert [v.name for v in arms] == list(TABLE)  # 7 arms per env
        for v in arms:
            assert v.overrides == TABLE[v.name], v.name
            assert v.config == f"mechanism_{env}.toml" and (CONFIGS / v.config).is_file()
            assert v.same_runs_as is None and not [c for c in v.common if not c.startswith("algo.lr=")]
    assert len(exp.variants) == 14
    assert exp.seeds.kind == "reporting" and (exp.seeds.first, exp.seeds.count, exp.seeds.plan) == (60, 6, "seed_plan")
    assert ex.REGULARISERS_SEEDS == (6, 12)
    # the verdict rule: direction lower, the bounds of both outcomes, the study's levels
    rule = exp.rule
    assert rule is ex.REGULARISERS_RULE and rule.direction == -1
    assert dict(rule.bounds) == {"slope": 0.375, "end_margin": 0.15}
    assert (rule.level, rule.equivalence_level, rule.power) == (0.95, pytest.approx(0.90), 0.8)
    assert ex.REGULARISERS_COMPARISONS["primary"] == ("low_ent001", "low_ent0")
    assert ex.REGULARISERS_COMPARISONS["dose"] == ("low_ent01", "low_ent0")
    assert ex.REGULARISERS_COMPARISONS["regime"] == ("high_ent001", "high_ent0")
    assert ex.REGULARISERS_COMPARISONS["interaction"] == ("low_ent001", "low_ent0", "high_ent001", "high_ent0")
    assert ex.REGULARISERS_COMPARISONS["kl"] == ("low_ent001_kl", "low_ent001")
    # the pilot's step 2 runs the same arms; step 1 the high_ent001 arm at each learning rate
    pilot = ex.EXPERIMENTS["regularisers_pilot"]
    assert [(v.group, v.name, v.overrides) for v in pilot.variants] == [
        (v.group, v.name, v.overrides) for v in exp.variants] and pilot.common == COMMON
    assert (pilot.seeds.kind, pilot.seeds.first, pilot.seeds.count) == ("tuning", 140, 4)
    lr_pilot = ex.EXPERIMENTS["regularisers_lr_pilot"]
    assert (lr_pilot.seeds.kind, lr_pilot.seeds.first, lr_pilot.seeds.count) == ("tuning", 140, 2)
    assert lr_pilot.common == COMMON
    for env in ENVS:
        arms = [v for v in lr_pilot.variants if v.group == env]
        assert [v.overrides for v in arms] == [(*TABLE["high_ent001"], f"algo.lr={lr}")
                                              for lr in ("0.01", "0.03", "0.1", "0.3")]
        assert all(v.config == f"mechanism_{env}.toml" for v in arms)
    # the main runs' rates: step 1's by the amended rule (section 8.1), set after step 2 (section 8.2)
    assert ex.REGULARISERS_LR == ex.PILOT_LR == {"frozenlake": 0.3, "sokoban": 0.1}
    # step 2's rates: step 1's report read by the amended rule of section 8.1 (the runs are committed records)
    assert ex.PILOT_LR == {"frozenlake": 0.3, "sokoban": 0.1}


# ------------------------------------------------------------------------------------------- (2) the slope
def test_the_slope_is_the_least_squares_slope_per_100_steps():
    rng = np.random.default_rng(0)
    margin = 0.55 - 0.004 * np.array(PROBE_STEPS) + rng.normal(0, 0.03, len(PROBE_STEPS))
    expected = np.polyfit(np.array(PROBE_STEPS, float), margin, 1)[0] * 100
    points = list(zip(PROBE_STEPS, margin.tolist()))
    assert ex.margin_slope(points) == pytest.approx(expected, rel=1e-10)
    # measurements after step 40 are not part of it; fewer than two steps give none
    assert ex.margin_slope([*points, (45, 5.0), (50, -5.0)]) == pytest.approx(expected, rel=1e-10)
    assert ex.margin_slope(points[:1]) is None and ex.margin_slope([]) is None
    run = ex.regularisers_run(_record("sokoban", "low_ent0", 60, margin.tolist()))
    assert run["slope"] == pytest.approx(expected, rel=1e-10) and run["env"] == "sokoban"
    assert run["end_margin"] == pytest.approx(margin[-1])
    # a run not measured at step 40 has no end margin (the outcome is m(40), not the last measurement)
    short = _record("sokoban", "low_ent0", 60, margin.tolist()[:5])
    assert ex.regularisers_run(short)["end_margin"] is None


# ------------------------------------------------------------------------------------------- (3) the verdicts
def test_the_direction_lower_is_held():
    falls = [-0.4, -0.38, -0.41, -0.42, -0.39, -0.4]
    assert compare(falls, ex.REGULARISERS_RULE, 0.15).verdict is Verdict.HELD
    assert compare([-d for d in falls], ex.REGULARISERS_RULE, 0.15).verdict is Verdict.CONTRADICTED
    # the study's rule (direction +1) reads the same differences the other way round
    assert compare(falls, PAIRED, 0.15).verdict is Verdict.CONTRADICTED


def _verdicts(res: dict, comp: str = "primary") -> dict[str, dict[str, str]]:
    return {env: {k: c["verdict"] for k, c in e["comparisons"][comp].items()} for env, e in res["envs"].items()}


def test_a_margin_that_falls_more_with_the_bonus_is_held():
    seeds = list(range(60, 66))
    recs = _experiment_records(-0.4, seeds)
    for r in recs:
        assert RunRecord.from_dict(r).to_dict() == r  # the synthetic records have the committed records' shape
    res = ex.analyse("regularisers", recs)
    assert _verdicts(res) == {env: {"slope": "held", "end_margin": "held"} for env in ENVS}
    for env in ENVS:
        primary = res["envs"][env]["comparisons"]["primary"]
        assert primary["slope"]["n"] == 6 and primary["slope"]["seeds"] == seeds
        assert primary["slope"]["mean"] == pytest.approx(-1.0, abs=0.1)  # -0.4 over 40 steps is -1.0 per 100
        assert primary["end_margin"]["mean"] == pytest.approx(-0.4, abs=0.04)
        assert primary["slope"]["ci95"][1] < 0 and primary["end_margin"]["ci95"][1] < 0
        comps = res["envs"][env]["comparisons"]
        assert comps["dose"]["end_margin"]["verdict"] == "held"  # 0.8 lower
        assert comps["regime"]["end_margin"]["verdict"] == "equivalent"  # the high arms stay
        assert comps["interaction"]["end_margin"]["verdict"] == "held"
        assert comps["interaction"]["end_margin"]["mean"] == pytest.approx(-0.4, abs=0.04)
        assert comps["kl"]["end_margin"]["verdict"] == "equivalent"
    # every seed's slope and end margin are kept; the secondaries the records lack are None (NaN in the report)
    assert len(res["runs"]) == 2 * 7 * 6 and all(r["slope"] is not None for r in res["runs"])
    arm = res["envs"]["frozenlake"]["arms"]["low_ent001"]
    assert arm["regulariser_grad_share"] is None and arm["regulariser_only_share"] is None
    assert arm["token_entropy_ratio_end"] == pytest.approx(1.0) and arm["template_share_change"] == pytest.approx(0)
    assert not res["grad_metrics_recorded"]


def test_equal_margins_on_twelve_seeds_are_equivalent():
    res = ex.analyse("regularisers", _experiment_records(0.0, list(range(60, 72)), noise=0.001, jitter=0.01))
    assert _verdicts(res) == {env: {"slope": "equivalent", "end_margin": "equivalent"} for env in ENVS}
    for env in ENVS:
        for c in res["envs"][env]["comparisons"]["primary"].values():
            assert c["n"] == 12 and c["sd"] > 0 and c["ci95"][0] < 0 < c["ci95"][1]


def test_a_margin_that_rises_with_the_bonus_contradicts():
    res = ex.analyse("regularisers", _experiment_records(+0.4, list(range(60, 66))))
    assert _verdicts(res) == {env: {"slope": "contradicted", "end_margin": "contradicted"} for env in ENVS}


def test_a_noisy_difference_is_inconclusive_with_its_detectable_effect():
    res = ex.analyse("regularisers", _experiment_records(0.0, list(range(60, 63)), noise=0.2, rng_seed=3))
    c = res["envs"]["frozenlake"]["comparisons"]["primary"]["end_margin"]
    assert c["verdict"] == "inconclusive" and c["mde"] > 0.15


def test_the_collapse_that_emerges_and_hurts_and_the_report(tmp_path):
    # low_ent001's margin falls from 0.5 to 0.1 with flat entropies, and its success falls: every seed meets the
    # three conditions, success falls with an interval below 0, the slope verdict is held -> the arm ships
    recs = _experiment_records(-0.4, list(range(60, 66)), low_success_end=0.1)
    res = ex.analyse("regularisers", recs)
    h = res["envs"]["sokoban"]["harmful"]
    assert h["harmful"] == [True] * 6 and h["conditions_met"] and h["success_falls"] and h["slope_held"]
    assert h["ships"] and h["config"] == "configs/collapse_emergent_sokoban.toml"
    assert h["success_change"]["ci95"][1] < 0
    flat = _experiment_records(-0.4, list(range(60, 66)))
    for r in flat:  # success at the end no higher than at the start (condition 2), and not falling over seeds
        if r["arm"] == "low_ent001":
            r["val"][-1][1] = 0.3 - (0.02 if r["seed"] == 60 else 0.0)
    flat = ex.analyse("regularisers", flat)["envs"]["sokoban"]["harmful"]
    assert flat["conditions_met"] and not flat["success_falls"] and not flat["ships"]  # success did not fall
    # the report: per comparison mean, both intervals, n and verdict; every seed's slope and end margin
    header = {"command": "ragen reproduce --experiment regularisers", "seeds": list(range(60, 66)), "n_runs": 84}
    path = ex.write_experiment("regularisers", recs, tmp_path, header)
    text = path.read_text()
    assert "docs/collapse.md, section 8" in text and "**held**" in text
    assert "(**primary**)" in text and "| 95% CI | 90% CI |" in text
    assert text.count("| `low_ent001_kl` | 6 |") == 2  # the arm table of each env
    assert "NaN" in text and "do not keep loss/grad_norm_task" in text
    assert "| sokoban | `low_ent0` | 65 |" in text and "`frozenlake/low_ent0` | 60 |" in text
    assert "**ships** as `configs/collapse_emergent_frozenlake.toml`" in text
    results = tmp_path / "regularisers" / "results.json"
    assert json.loads(results.read_text())["analysis"]["envs"]["sokoban"]["harmful"]["ships"]
    # the report regenerates from its results alone
    assert cli.main(["--from-results", str(results), "--report-dir", str(tmp_path / "again")]) == 0
    again = (tmp_path / "again" / "regularisers.md").read_text()
    assert again.split("Regenerate:")[0] == text.split("Regenerate:")[0]


def test_the_pilot_sizes_the_main_runs_from_its_paired_sds():
    recs = _experiment_records(-0.1, [140, 141, 142, 143], noise=0.05)
    res = ex.analyse("regularisers_pilot", recs)
    plan = res["seed_plan"]
    expected = []
    for env in ENVS:
        for key, bound in (("slope", 0.375), ("end_margin", 0.15)):
            sd = res["envs"][env]["comparisons"]["primary"][key]["sd"]
            assert sd > 0 and plan["per"][env][key]["sd"] == sd
            direct = seed_plan(sd, bound, (6, 12), alpha=0.05, power=0.8)
            assert plan["per"][env][key]["n"] == direct.n
            expected.append(direct.n)
    assert plan["n"] == max(expected) and 6 <= plan["n"] <= 12
    assert "seed_plan" not in ex.analyse("regularisers", _experiment_records(-0.1, [60, 61, 62]))


# ------------------------------------------------------------------------------------------- (4) the lr pilot
def _lr_records(gains: dict[str, dict[float, tuple[float, float]]], start: float = 0.1) -> list[dict]:
    recs = []
    for env, by_lr in gains.items():
        for lr, per_seed in by_lr.items():
            for seed, gain in zip((140, 141), per_seed):
                if gain is None:
                    continue  # a missing run
                recs.append(_record(env, f"high_ent001_lr{lr:g}", seed, [0.5] * 9,
                                    [start, start, start, start, start + gain]))
    return recs


def test_the_lr_pilot_picks_the_smallest_rate_that_gains_five_points_on_both_seeds():
    gains = {"frozenlake": {0.01: (0.02, 0.0), 0.03: (0.06, 0.04), 0.1: (0.06, 0.05), 0.3: (0.2, 0.2)},
             "sokoban": {0.01: (0.0, 0.0), 0.03: (0.01, 0.0), 0.1: (0.04, 0.0), 0.3: (0.0, 0.03)}}
    res = ex.analyse("regularisers_lr_pilot", _lr_records(gains))
    assert res["envs"]["frozenlake"]["lr_registered"] == 0.1  # exactly 5 points counts (0.15 - 0.1 in floating point)
    assert res["envs"]["frozenlake"]["qualified"] == [0.1, 0.3]
    assert res["envs"]["sokoban"]["lr_registered"] == 0.3 and res["envs"]["sokoban"]["qualified"] == []  # none: 0.3
    # a rate whose run of one seed is missing does not qualify
    gains["frozenlake"][0.03] = (0.06, 0.06)
    assert ex.analyse("regularisers_lr_pilot", _lr_records(gains))["envs"]["frozenlake"]["lr_registered"] == 0.03
    gains["frozenlake"][0.03] = (0.06, None)
    assert ex.analyse("regularisers_lr_pilot", _lr_records(gains))["envs"]["frozenlake"]["lr_registered"] == 0.1
    assert ex.LR_RULE.meets([[0, 0.2], [40, 0.25]]) and not ex.LR_RULE.meets([[0, 0.2], [30, 0.9]])
    assert ex.LR_RULE.choose({}, [140]) == 0.3  # one seed is not "both seeds"


def test_the_amended_lr_rule_picks_the_largest_rate_that_leaves_the_task_intact_on_every_seed():
    # gains (success at 40 minus step 0) per rate and seed; "intact": no seed more than 15 points below step 0
    gains = {"frozenlake": {0.01: (0.0, 0.0), 0.03: (-0.16, 0.0), 0.1: (0.0, -0.15), 0.3: (-0.07, 0.08)},
             "sokoban": {0.01: (0.0, 0.1), 0.03: (0.16, -0.09), 0.1: (-0.02, -0.03), 0.3: (-0.55, -0.74)}}
    res = ex.analyse("regularisers_lr_pilot", _lr_records(gains, start=0.6))
    fl, sk = res["envs"]["frozenlake"], res["envs"]["sokoban"]
    assert fl["intact"] == [0.01, 0.1, 0.3] and fl["lr"] == 0.3  # exactly 15 points down is still intact
    assert sk["intact"] == [0.01, 0.03, 0.1] and sk["lr"] == 0.1  # 0.3 broke the task
    assert fl["lr_registered"] == sk["lr_registered"] == 0.3  # the registered rule's fallback, kept in the report
    # the rule by hand, on each row: intact iff step 0 minus step 40 <= 0.15
    for row in fl["rows"] + sk["rows"]:
        assert row["intact"] == (row["success_start"] - row["success_step"] <= 0.15 + 1e-9)
    # no rate intact on every seed: no L (the runs stay refused); one seed is too few
    broken = {"sokoban": {lr: (-0.3, 0.0) for lr in ex.LR_GRID}}
    assert ex.analyse("regularisers_lr_pilot", _lr_records(broken, start=0.6))["envs"]["sokoban"]["lr"] is None
    assert ex.LR_AMENDED.choose({0.1: {140: True}}, [140]) is None
    assert not ex.LR_AMENDED.intact([[0, 0.6], [30, 0.6]])  # step 40 not evaluated


def test_the_committed_lr_pilot_sets_the_pilot_rates():
    """PILOT_LR is what the amended rule reads off the committed records of step 1."""
    data = json.loads((Path(__file__).resolve().parents[2] / "docs" / "collapse" / "regularisers_lr_pilot"
                       / "results.json").read_text())
    res = ex.analyse("regularisers_lr_pilot", data["records"])
    assert {env: e["lr"] for env, e in res["envs"].items()} == ex.PILOT_LR


def test_the_lr_pilot_report(tmp_path):
    gains = {"frozenlake": {0.01: (0.0, 0.0), 0.03: (0.1, 0.1), 0.1: (0.1, 0.1), 0.3: (0.1, 0.1)},
             "sokoban": {0.01: (0.0, 0.0), 0.03: (0.0, 0.0), 0.1: (0.0, 0.0), 0.3: (0.0, 0.0)}}
    text = ex.write_experiment("regularisers_lr_pilot", _lr_records(gains), tmp_path,
                               {"seeds": [140, 141], "n_runs": 16}).read_text()
    assert "frozenlake, registered rule: L = 0.03" in text and "sokoban, registered rule: L = 0.3 (no rate" in text
    # nothing fell: the amended rule takes the largest rate
    assert "**frozenlake: L = 0.3** (amended rule" in text and "**sokoban: L = 0.3** (amended rule" in text
    only = ex.analyse("regularisers_lr_pilot", _lr_records({"frozenlake": gains["frozenlake"]}))
    assert only["envs"]["sokoban"]["lr"] is None and "- **sokoban: not run**" in ex._lr_pilot_md(only)


# ------------------------------------------------------------------------------------------- (5) the refusal
def test_runs_are_refused_until_the_pilot_sets_the_learning_rate(monkeypatch, tmp_path):
    exp = ex.EXPERIMENTS["regularisers"]
    monkeypatch.setattr(ex, "REGULARISERS_LR", {"frozenlake": None, "sokoban": None})
    with pytest.raises(ValueError, match="pilot's step 1"):
        build_runs(exp, [60, 61], CONFIGS, tmp_path / "cache")
    with pytest.raises(ValueError, match="REGULARISERS_LR"):
        ex.build_experiment("regularisers", [60], CONFIGS, tmp_path / "cache")
    monkeypatch.setattr(ex, "PILOT_LR", {"frozenlake": None, "sokoban": None})
    with pytest.raises(ValueError, match="PILOT_LR"):
        build_runs(ex.EXPERIMENTS["regularisers_pilot"], [140], CONFIGS, tmp_path / "cache")
    monkeypatch.setitem(ex.REGULARISERS_LR, "frozenlake", 0.1)  # one env set is not enough
    with pytest.raises(ValueError, match="sokoban"):
        build_runs(exp, [60], CONFIGS, tmp_path / "cache")
    # the CLI refuses too, and starts nothing
    started = []
    monkeypatch.setattr(cli, "_run", lambda specs, runs_dir, args, ray=None: started.append(specs) or "")
    assert cli.main(["--experiment", "regularisers", "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert started == []
    # the lr pilot has its rates in its arms: it builds without them
    assert len(build_runs(ex.EXPERIMENTS["regularisers_lr_pilot"], [140, 141], CONFIGS, tmp_path / "c")) == 16


@pytest.mark.parametrize("name,table,seeds", [("regularisers", "REGULARISERS_LR", [60, 61, 62]),
                                              ("regularisers_pilot", "PILOT_LR", [140, 141, 142, 143])])
def test_with_the_learning_rate_set_every_arm_runs_on_every_seed(monkeypatch, tmp_path, name, table, seeds):
    from ragen_core.training.config import load_config

    monkeypatch.setattr(ex, table, {"frozenlake": 0.1, "sokoban": 0.03})
    specs = build_runs(ex.EXPERIMENTS[name], seeds, CONFIGS, tmp_path / "cache")
    assert len(specs) == 7 * 2 * len(seeds) and len({s.name for s in specs}) == len(specs)
    lr = {"frozenlake": "algo.lr=0.1", "sokoban": "algo.lr=0.03"}
    for s in specs:
        assert s.env in ENVS and Path(s.config).name == f"mechanism_{s.env}.toml"
        assert lr[s.env] in s.overrides and sum(o.startswith("algo.lr=") for o in s.overrides) == 1
        assert s.overrides[-len(TABLE[s.arm]):] == TABLE[s.arm] and set(COMMON) <= set(s.overrides)
        assert f"run.seed={s.seed}" in s.overrides
    assert {(s.env, s.arm) for s in specs} == {(e, a) for e in ENVS for a in TABLE}
    for s in specs[:: len(seeds)]:  # every variant once: a valid config with its overrides
        cfg = load_config(s.config, list(s.overrides))
        assert cfg.algo.optimizer == "sgd" and cfg.algo.lr == (0.1 if s.env == "frozenlake" else 0.03)
        assert cfg.filter.max_empty_steps == 0 and cfg.mi.probe_every == 5 and cfg.eval.every == 10


# ------------------------------------------------------------------------------------------- (6) seed kinds
def test_reporting_seeds_refuse_tuning_seeds_and_the_pilots_refuse_fresh_ones(monkeypatch, tmp_path):
    main, pilot, lr_pilot = (ex.EXPERIMENTS[n] for n in ("regularisers", "regularisers_pilot",
                                                          "regularisers_lr_pilot"))
    assert choose_seeds(main) == list(range(60, 66))
    assert choose_seeds(pilot) == [140, 141, 142, 143] and choose_seeds(lr_pilot) == [140, 141]
    for table in ("REGULARISERS_LR", "PILOT_LR"):
        monkeypatch.setattr(ex, table, {"frozenlake": 0.1, "sokoban": 0.1})
    with pytest.raises(ValueError, match="tuning seeds"):
        build_runs(main, [140, 141], CONFIGS, tmp_path)
    with pytest.raises(ValueError, match="tuning seeds"):
        choose_seeds(main, 12, 95)  # 95..106 reaches the tuning seeds
    for exp in (pilot, lr_pilot):
        with pytest.raises(ValueError, match="only tuning seeds"):
            build_runs(exp, [60], CONFIGS, tmp_path)
        with pytest.raises(ValueError, match="only tuning seeds"):
            choose_seeds(exp, 2, 60)
    monkeypatch.setattr(ex, "REGULARISERS_LR", {"frozenlake": None, "sokoban": None})
    with pytest.raises(ValueError, match="tuning seeds"):  # the seed kind is checked first, whatever the rate
        build_runs(main, [140], CONFIGS, tmp_path)


def test_the_gradient_secondaries_are_counted_by_hand():
    """The regulariser's share of the gradient and the two step shares, against a hand count on one filter log:
    steps with a zero task gradient (the kept groups had no reward variance) are regulariser-only updates even
    though the filter kept groups (section 8.2)."""
    rec = _record("sokoban", "low_ent001", 60, [0.5] * 9)
    norms = [(0.0, 0.001), (0.0, 0.002), (0.3, 0.001), (0.0, 0.0)]  # (task, entropy) per step
    rec["filter_log"] = [{"step": s, "grad_norm_task": t, "grad_norm_entropy": e, "regulariser_only": 0.0}
                         for s, (t, e) in enumerate(norms, start=1)]
    run = ex.regularisers_run(rec)
    assert run["task_free_share"] == pytest.approx(3 / 4)
    assert run["regulariser_only_share"] == 0.0  # the filter never kept nothing
    # steps with any gradient: 1.0, 1.0 and 0.001 / 0.301 (the last step has none and is left out)
    assert run["regulariser_grad_share"] == pytest.approx((1.0 + 1.0 + 0.001 / 0.301) / 3)
    rec["filter_log"] = [{"step": 1}]
    assert ex.regularisers_run(rec)["task_free_share"] is None  # not recorded
