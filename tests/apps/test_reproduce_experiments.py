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


def test_every_variant_is_a_valid_config():
    from ragen_core.training.config import load_config

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
