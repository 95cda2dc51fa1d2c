"""The pre-registered collapse experiments: their runs, classes, account verdicts and report, on synthetic records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.apps.reproduce import experiments as ex
from ragen_core.apps.reproduce.cli import main


def _record(arm: str, seed: int, margins: list[float], success: list[float], entropy: list[float] | None = None,
            cov: float = 0.0) -> dict:
    steps = [0, 10, 20, 30, 40][: len(margins)]
    entropy = entropy or [0.2] * len(margins)
    return {"env": "mechanism", "arm": arm, "seed": seed, "name": f"mechanism-{arm}-s{seed}", "steps": 40,
            "planned_steps": 40, "val": [[s, v] for s, v in zip([0, 20, 40], success)],
            "mi": [{"step": 1, "pmi_return_cov_kept": cov, "pmi_return_cov_dropped": -cov}],
            "probe": [{"step": s, "retrieval_margin": m, "token_entropy": e, "cond_entropy_est": e,
                       "template_share": 0.5} for s, m, e in zip(steps, margins, entropy)],
            "filter_log": [{"step": 1, "kept_zero_adv_share": 0.8, "zero_fraction": 0.5}], "sft_s": 1.0, "rl_s": 1.0}


def test_seeds_of_the_right_kind_only():
    cfg = Path("configs")
    assert len(ex.build_experiment("mechanism", [30, 31], cfg, Path("/tmp/c"))) == 2 * len(
        ex.EXPERIMENTS["mechanism"].variants)
    with pytest.raises(ValueError, match="tuning seeds"):
        ex.build_experiment("mechanism", [130], cfg, Path("/tmp/c"))
    with pytest.raises(ValueError, match="only tuning seeds"):
        ex.build_experiment("search", [30], cfg, Path("/tmp/c"))
    with pytest.raises(ValueError, match="unknown experiment"):
        ex.build_experiment("nope", [30], cfg, Path("/tmp/c"))
    spec = ex.build_experiment("mechanism", [30], cfg, Path("/tmp/c"))[0]
    assert "filter.max_empty_steps=0" in spec.overrides and "run.seed=30" in spec.overrides


def test_every_variant_is_a_valid_config(monkeypatch):
    from ragen_core.training.config import load_config

    # The regularisers experiment refuses to build runs until its pilot fixes the learning rates: stand-ins here.
    monkeypatch.setattr(ex, "REGULARISERS_LR", {"frozenlake": 0.1, "sokoban": 0.1})
    monkeypatch.setattr(ex, "PILOT_LR", {"frozenlake": 0.1, "sokoban": 0.1})

    for name in ex.EXPERIMENTS:
        seeds = [130] if ex.EXPERIMENTS[name].seeds_kind == "tuning" else [30]
        for spec in ex.build_experiment(name, seeds, Path("configs").resolve(), Path("/tmp/c")):
            load_config(spec.config, list(spec.overrides))


def test_classes_follow_the_intervals():
    assert ex.classify([-0.3, -0.25, -0.35, -0.3])["class"] == "falls"
    assert ex.classify([0.3, 0.25, 0.35, 0.3])["class"] == "rises"
    assert ex.classify([0.01, -0.02, 0.0, 0.02, -0.01])["class"] == "stable"
    assert ex.classify([0.4, -0.4, 0.3, -0.3])["class"] == "unclear"
    assert ex.classify([0.1])["class"].startswith("unclear")


def test_the_accounts_are_read_off_the_classes():
    recs = []
    for seed in range(5):
        jitter = 0.01 * seed
        recs.append(_record("pays_all", seed, [0.5, 0.2, 0.1, 0.05, 0.05 + jitter], [0.3, 0.5, 0.6]))
        recs.append(_record("nopay_all", seed, [0.5, 0.5, 0.55, 0.6, 0.6 + jitter], [0.3, 0.3, 0.4]))
        for arm in ("pays_bottom", "nopay_bottom", "nopay_bottom_ent0", "nopay_bottom_ent01", "nopay_bottom_kl"):
            recs.append(_record(arm, seed, [0.5, 0.5, 0.5, 0.5, 0.5 + jitter - 0.02], [0.3, 0.3, 0.3]))
    res = ex.analyse("mechanism", recs)
    assert res["arms"]["pays_all"]["class"] == "falls" and res["arms"]["nopay_all"]["class"] == "rises"
    verdicts = {a["account"]: a["verdict"] for a in res["accounts"]}
    assert verdicts == {"task gradient": "supported", "regulariser": "contradicted"}
    assert res["payoff"]["direction"] == "lower"


def test_the_search_needs_every_seed(tmp_path):
    harmful = _record("sokoban_nopay", 130, [0.5, 0.6, 0.2, 0.1, 0.1], [0.3, 0.5, 0.3])
    helped = _record("sokoban_nopay", 131, [0.5, 0.6, 0.2, 0.1, 0.1], [0.3, 0.5, 0.8])
    for r in (harmful, helped):
        r["env"] = "search"
    res = ex.analyse("search", [harmful, helped])
    assert res["candidates"]["sokoban_nopay"] == {"seeds": [130, 131], "harmful": [True, False], "needed": 2,
                                                      "shows_it": False}


def test_an_experiment_report_regenerates_from_its_results(tmp_path):
    from ragen_core.apps.reproduce.cli import write_experiment

    recs = [_record(a, s, [0.5, 0.4, 0.3, 0.2, 0.1], [0.3, 0.3, 0.2]) for a in ("pays_all", "nopay_all")
            for s in (30, 31)]
    md = write_experiment("mechanism", recs, tmp_path, {"seeds": [30, 31], "n_runs": 4})
    text = md.read_text()
    assert "pays_all" in text and "## The two accounts" in text and (tmp_path / "mechanism" / "curves.png").is_file()
    results = tmp_path / "mechanism" / "results.json"
    assert json.loads(results.read_text())["experiment"] == "mechanism"
    md.unlink()
    assert main(["--from-results", str(results), "--report-dir", str(tmp_path)]) == 0
    assert md.read_text() == text


def test_runs_that_never_trained_calibrate_the_probe_noise():
    from ragen_core.apps.reproduce.experiments import analyse

    frozen = _record("nopay_bottom_ent0", 1, [0.5, 0.4, 0.6], [0.1, 0.1, 0.1])
    frozen["filter_log"] = [{"step": s, "kept_groups": 0, "skipped": 1} for s in (1, 2, 3)]
    trained = _record("nopay_bottom_ent0", 2, [0.5, 0.3, 0.2], [0.1, 0.1, 0.1])
    trained["filter_log"] = [{"step": 1, "kept_groups": 2, "skipped": 0}, {"step": 2, "kept_groups": 0, "skipped": 1}]
    out = analyse("mechanism", [frozen, trained])
    steps = {r["seed"]: r["trained_steps"] for r in out["runs"]}
    assert steps == {1: 0, 2: 1}
    noise = out["probe_noise"]
    # by hand: margins 0.5, 0.4, 0.6 have mean 0.5 and sample SD sqrt((0 + 0.01 + 0.01) / 2) = 0.1
    assert noise["n"] == 1 and noise["runs"] == ["nopay_bottom_ent0-s1"]
    assert abs(noise["pooled_sd"] - 0.1) < 1e-12 and abs(noise["deltas"][0] - 0.1) < 1e-12



def test_confirm_ships_a_candidate_at_four_of_five_seeds_and_refuses_tuning_seeds(tmp_path, monkeypatch):
    search = {v.name: v.overrides for v in ex.EXPERIMENTS["search"].variants}
    for v in ex.EXPERIMENTS["confirm"].variants:  # each candidate runs exactly as it did in the search
        assert v.overrides == search[v.name]
    assert ex.EXPERIMENTS["confirm"].common == ex.EXPERIMENTS["search"].common
    with pytest.raises(ValueError, match="tuning seeds"):
        ex.build_experiment("confirm", [130], tmp_path, tmp_path)
    arm = ex.EXPERIMENTS["confirm"].variants[0].name
    for flags, ships in (([True] * 4 + [False], True), ([True] * 3 + [False] * 2, False), ([True] * 5, True)):
        verdicts = iter(flags)
        monkeypatch.setattr(ex, "run_summary", lambda r, v=verdicts: {"arm": r["arm"], "seed": r["seed"],
                                                                     "harmful": {"harmful": next(v)}})
        recs = [{"arm": arm, "seed": 40 + i} for i in range(len(flags))]
        cand = ex.analyse("confirm", recs)["candidates"][arm]
        assert (cand["needed"], cand["shows_it"], cand["harmful"]) == (4, ships, flags)


# ---------------------------------------------------------------------------------------------- finding 3 on it
def test_the_filter_experiments_no_filter_arm_is_the_confirmation_run_and_the_arms_differ_only_in_the_filter():
    import dataclasses

    from ragen_core.training.config import load_config

    confirm = ex.EXPERIMENTS["confirm"]
    filt = ex.EXPERIMENTS["filter"]
    arms = {v.name: v for v in filt.variants}
    assert set(arms) == {"no_filter", "top_p", "random"} and filt.seeds_kind == "reporting"
    # the same base, overrides and common overrides: a seed's no-filter run is the confirmation's run
    assert (arms["no_filter"].config, arms["no_filter"].overrides) == (confirm.variants[0].config,
                                                                        confirm.variants[0].overrides)
    assert filt.common == confirm.common
    # ... and its run is the confirmation's run: the same folder name, so the runner never trains it twice
    specs = ex.build_experiment("filter", [40], Path("configs").resolve(), Path("/tmp/c"))
    shared = ex.build_experiment("confirm", [40], Path("configs").resolve(), Path("/tmp/c"))[0]
    assert shared in specs and len({s.name for s in specs}) == 3
    cfgs = {}
    for spec in specs:
        cfgs[spec.arm] = dataclasses.asdict(load_config(spec.config, list(spec.overrides)))
    base = cfgs.pop(shared.arm)
    assert base["filter"]["enabled"] is False and base["run"]["steps"] == 100
    for arm, cfg in cfgs.items():
        assert {k for k in cfg if cfg[k] != base[k]} == {"filter"}, arm
        assert cfg["filter"]["enabled"] is True and cfg["filter"]["spec"]["value"] == 0.9
        assert cfg["filter"]["spec"]["strategy"] == arm and cfg["filter"]["max_empty_steps"] == 0


def _simulated_power(effect: float, sd: float, n: int, reps: int = 4000) -> float:
    """Share of `reps` simulated paired t-tests (normal differences) whose 95% interval excludes 0: a plain loop,
    independent of the noncentral-t code that sizes the plan."""
    import random
    import statistics

    from ragen_core.math.stats import t_quantile

    rng = random.Random(7)
    t = t_quantile(0.975, n - 1)
    hits = 0
    for _ in range(reps):
        d = [rng.gauss(effect, sd) for _ in range(n)]
        half = t * statistics.stdev(d) / n ** 0.5
        hits += abs(statistics.fmean(d)) > half
    return hits / reps


def test_the_seed_plan_detects_the_effect_and_stays_within_its_limits():
    lo, hi = ex.FILTER_SEEDS
    assert ex.seed_plan(0.01)["n"] == lo  # a tiny SD needs few seeds: the floor
    big = ex.seed_plan(1.0)
    assert big["n"] == hi and big["capped"] and big["mde"] > ex.FILTER_EFFECT
    for bad in (None, 0.0, float("nan")):
        assert ex.seed_plan(bad)["n"] == hi
    plan = ex.seed_plan(0.15)  # the paired SDs measured on the earlier testbeds: 0.108-0.150
    assert lo <= plan["n"] <= hi and plan["n"] >= max(plan["n_detect"], plan["n_equiv"]) or plan["capped"]
    # the planned n detects the effect with ~80% power, one seed fewer with less (simulated, not computed)
    n = plan["n_detect"]
    assert _simulated_power(ex.FILTER_EFFECT, 0.15, n) > 0.77
    assert _simulated_power(ex.FILTER_EFFECT, 0.15, n - 1) < 0.83


def _filter_record(arm: str, seed: int, end: float) -> dict:
    r = _record(arm, seed, [0.5, 0.45, 0.4, 0.35, end], [0.18, 0.18, 0.18])
    r.update(env="filter", name=f"filter-{arm}-s{seed}")
    return r


def test_finding_3_on_the_emergent_collapse_reads_the_studys_verdicts(tmp_path):
    from ragen_core.apps.reproduce.cli import write_experiment

    seeds = range(50, 58)
    higher = [_filter_record("no_filter", s, 0.2 + 0.01 * (s % 3)) for s in seeds]
    for r in higher:  # the no-filter runs are recorded under the confirmation's name
        r.update(env="confirm", arm="frozenlake_nopay_slippery_long")
    higher += [_filter_record("top_p", s, 0.5 + 0.01 * (s % 4)) for s in seeds]
    higher += [_filter_record("random", s, 0.2 + 0.02 * (s % 2)) for s in seeds]
    res = ex.analyse("filter", higher)
    comp = res["filtering"]["comparisons"]
    assert comp["top_p-no_filter"]["margin_end"]["verdict"] == "held"
    assert comp["top_p-no_filter"]["margin_end"]["n"] == len(seeds)
    assert comp["top_p-random"]["margin_end"]["verdict"] == "held"
    # the same end margins on every seed, up to a small spread: equivalent within the bound
    same = [_filter_record(a, s, 0.2 + 0.01 * ((s + i) % 3)) for i, a in enumerate(("no_filter", "top_p", "random"))
            for s in seeds]
    res = ex.analyse("filter", same)
    assert res["filtering"]["comparisons"]["top_p-no_filter"]["margin_end"]["verdict"].startswith("equivalent")
    sd = res["filtering"]["comparisons"]["top_p-no_filter"]["margin_end"]["sd"]
    assert res["seed_plan"] == ex.seed_plan(sd)
    md = write_experiment("filter", same, tmp_path, {"seeds": list(seeds), "n_runs": len(same)}).read_text()
    assert "## Comparisons, paired by seed" in md and "equivalent (within +-0.150)" in md and "seeds**" in md
