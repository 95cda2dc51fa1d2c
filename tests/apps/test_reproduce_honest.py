"""`ragen reproduce`'s honest-report rules: the equivalence outcome against a simulation of its error rates, the
early-stop pairing rule on a pair where one run stopped at step 12, the entropy-margin co-movement and the
margin-success association against plain-loop references, the ceiling rule, finding 4's label, the run records'
provenance fields and filter log, regenerating the report from results.json alone, and the entropy panel."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from counted_stats import pearson_loop, ranks_by_counting

from ragen_core.apps.reproduce import cli
from ragen_core.apps.reproduce.analysis import (
    CEILING_NORM,
    EQUIVALENCE_BOUNDS,
    analyse,
    auc_lower,
    ceiling_status,
    co_movement,
    entropy_ratios,
    equivalence_power_now,
    equivalence_seeds,
    filter_log_summary,
    finding_correlations,
    finding_filtering,
    finding_quartiles,
    fmt_unit,
    pair_outcomes,
    paired_comparison,
    planned_steps,
    stopped_early,
    within_run_correlation,
)
from ragen_core.apps.reproduce.report import collapse_figure, markdown, pair_verdict_text, write_report
from ragen_core.apps.reproduce.runner import FILTER_LOG_KEYS, read_run
from ragen_core.apps.reproduce.study import ARMS, RunSpec
from ragen_core.apps.reproduce.verdicts import verdict_text
from ragen_core.math.stats import equivalence_power, t_quantile


# ------------------------------------------------------------------------------------------- synthetic runs
def write_run(run_dir: Path, *, steps: int = 40, probe=None, val=None, probe_every: int = 5, eval_every: int = 10,
              planned: int | None = None, extra_probe=None, filter_row=None, provenance=None, zero: float = 0.25,
              mi=None) -> Path:
    """A metrics.jsonl like the trainer's: probe(step) -> (margin, token entropy, H(Z|X)) at 0 and every
    `probe_every` steps; val(step) -> success at 0, every `eval_every` steps and at the last step; optional
    config.toml with ``run.steps = planned``, extra probe metrics, filter metrics per step and provenance.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 10.0}]
    if val:
        rows.append({"step": 0, "val/success": val(0)})
    if probe:
        rows.append({"step": 0, **_probe_row(*probe(0)), **(extra_probe(0) if extra_probe else {})})
    for s in range(1, steps + 1):
        row = {"step": s, "perf/step_s": 1.0, "filter/zero_fraction": zero}
        if s == 1:
            row["filter/rv_heterogeneity"] = 1.0
        if filter_row:
            row.update(filter_row(s))
        if mi and s % 5 == 0:
            row.update({f"collapse/{k}": v for k, v in mi(s).items()})
        if probe and s % probe_every == 0:
            row.update(_probe_row(*probe(s)))
            if extra_probe:
                row.update(extra_probe(s))
        if val and (s % eval_every == 0 or s == steps):
            row["val/success"] = val(s)
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if planned is not None:
        (run_dir / "config.toml").write_text(f'[run]\nname = "x"\nsteps = {planned}\n')
    if provenance is not None:
        (run_dir / "provenance.json").write_text(json.dumps(provenance))
    return run_dir


def _probe_row(margin, tok, cond, n=32):
    return {"probe/retrieval_margin": margin, "probe/retrieval_acc": 1 / n + margin * (1 - 1 / n),
            "probe/retrieval_chance": 1 / n, "probe/token_entropy": tok, "probe/cond_entropy_est": cond,
            "probe/mi_seq_est": margin * math.log(n), "probe/mi_upper_bound": math.log(n), "probe/mi_seq_norm": margin,
            "perf/probe_s": 0.5}


def rec(root: Path, env: str, arm: str, seed: int, **kw) -> dict:
    d = write_run(root / f"{env}-{arm}-s{seed}", **kw)
    return read_run(d, RunSpec(env, arm, seed, "unused.toml", ()))


def falling(drop_at: int, start: float = 0.6, end: float = 0.1, tok_end: float = 0.85):
    """Margin halves from `drop_at`; token entropy and H(Z|X) drift down linearly to `tok_end` of their start."""
    return lambda s: (start if s < drop_at else end, 1.0 - (1.0 - tok_end) * s / 40, 0.5 - 0.5 * (1 - tok_end) * s / 40)


def flat(margin: float = 0.5, wobble: float = 0.0):
    return lambda s: (margin + wobble * math.sin(s), 1.0 + 0.02 * math.cos(s), 0.5)


# ------------------------------------------------------------------------------------------- equivalence rule
def _simulate(effect: float, sd: float, n: int, bound: float, sims: int, seed: int) -> tuple[float, float]:
    """(share of "equivalent" verdicts, share of 90% intervals inside the bounds) of paired_comparison on
    simulated normal differences."""
    rng = random.Random(seed)
    verdicts = inside = 0
    for _ in range(sims):
        a = {i: rng.gauss(effect, sd) for i in range(n)}
        c = paired_comparison(a, dict.fromkeys(range(n), 0.0), bound=bound)
        verdicts += c["verdict"].startswith("equivalent")
        inside += -bound < c["ci90"][0] and c["ci90"][1] < bound
    return verdicts / sims, inside / sims


def test_equivalence_rule_at_the_bound_says_equivalent_at_most_5_percent():
    # A narrow interval (sd 0.02, 10 seeds): TOST's size at the bound is close to its alpha of 0.05.
    sims, bound = 4000, 0.15
    verdict_rate, inside_rate = _simulate(bound, 0.02, 10, bound, sims, seed=1)
    exact = equivalence_power(bound, 0.02, 10, bound)
    se = math.sqrt(0.05 * 0.95 / sims)
    assert exact <= 0.05 + 1e-9
    assert abs(inside_rate - exact) < 4 * se
    assert verdict_rate <= inside_rate and verdict_rate <= 0.05 + 3 * se
    # The other side of the bound as well.
    verdict_rate, _ = _simulate(-bound, 0.02, 10, bound, sims, seed=2)
    assert verdict_rate <= 0.05 + 3 * se


def test_equivalence_rule_at_zero_has_the_predicted_power():
    sd, bound = 0.108, EQUIVALENCE_BOUNDS["margin_end"]
    n = equivalence_seeds(sd, bound)
    predicted = equivalence_power_now(sd, n, bound)
    assert n == 7 and predicted >= 0.8  # the seeds the report says equivalence needs at this paired SD
    sims = 3000
    verdict_rate, inside_rate = _simulate(0.0, sd, n, bound, sims, seed=3)
    se = math.sqrt(predicted * (1 - predicted) / sims)
    assert abs(inside_rate - predicted) < 4 * se
    # "held" / "contradicted" come first: a significant difference (5% of studies at a true 0) is never called
    # equivalent, so the verdict's rate sits a little below the interval's.
    assert inside_rate - 0.06 < verdict_rate <= inside_rate


def test_verdict_order_and_intervals():
    fmt = fmt_unit("margin")
    n = dict.fromkeys(range(5), 0.0)

    def comp(diffs, bound=0.15):
        return verdict_text(paired_comparison(dict(enumerate(diffs)), n, bound=bound), fmt)

    # Tightly around +0.05: the 95% interval excludes 0 (held) though the 90% one is inside +-0.15.
    assert comp([0.05, 0.051, 0.049, 0.05, 0.05]) == "held"
    assert comp([-0.05, -0.051, -0.049, -0.05, -0.05]) == "contradicted"
    assert comp([0.01, -0.02, 0.03, 0.0, -0.01]) == "equivalent (within +-0.150)"
    c = paired_comparison(dict(enumerate([0.01, -0.02, 0.03, 0.0, -0.01])), n, bound=0.15)
    assert c["verdict"] == "equivalent"
    assert comp([0.01, -0.02, 0.03, 0.0, -0.01], bound=None).startswith("inconclusive (detectable effect")
    assert comp([0.3, -0.3, 0.2, -0.25, 0.1]).startswith("inconclusive (detectable effect")
    # The 90% interval by hand: mean +- t_{0.95, 4} s / sqrt(5).
    d = [0.01, -0.02, 0.03, 0.0, -0.01]
    m = sum(d) / 5
    s = math.sqrt(sum((x - m) ** 2 for x in d) / 4)
    half = t_quantile(0.95, 4) * s / math.sqrt(5)
    assert c["ci90"] == pytest.approx([m - half, m + half]) and c["bound"] == 0.15
    assert c["ci95"][1] - m == pytest.approx(t_quantile(0.975, 4) * s / math.sqrt(5))


# ------------------------------------------------------------------------------------------- early stops
def test_early_stopped_run_is_paired_at_equal_steps(tmp_path):
    # top_p runs its 40 steps (probe every 5, evaluations every 10); random stops at step 12 with its margin
    # still up and a last evaluation at step 12.
    full = rec(tmp_path, "collapse_sokoban", "top_p", 22, steps=40, planned=40, probe=falling(25),
               val=lambda s: 0.3 + s / 100)
    short = rec(tmp_path, "collapse_sokoban", "random", 22, steps=12, planned=40, probe=flat(0.45),
                val=lambda s: 0.3 if s == 0 else (0.35 if s == 10 else 0.0))
    planned = planned_steps([full, short])
    assert planned == {"collapse_sokoban": 40}
    assert stopped_early(short, planned) and not stopped_early(full, planned)
    oa, ob, early = pair_outcomes(full, short, planned)
    assert early
    # Margin at the last common probe step, 10 (not top_p's end at 40, where it had dropped to 0.1).
    assert oa["margin_end"] == pytest.approx(0.6) and ob["margin_end"] == pytest.approx(0.45)
    # No drop up to step 10 in either: both censored at 10.
    assert oa["steps_to_drop"] == 10.0 and ob["steps_to_drop"] == 10.0 and oa["censored"] and ob["censored"]
    # Success at the last common evaluation step, 10 (0.40 vs 0.35), not 0.70 at 40 against 0.0 at 12.
    assert oa["success_end"] == pytest.approx(0.4) and ob["success_end"] == pytest.approx(0.35)


def test_a_pair_whose_last_common_evaluation_is_step_0_has_no_success_value(tmp_path):
    full = rec(tmp_path, "collapse_sokoban", "top_p", 22, steps=40, planned=40, probe=flat(0.5),
               val=lambda s: 0.5, eval_every=20)
    short = rec(tmp_path, "collapse_sokoban", "random", 22, steps=12, planned=40, probe=flat(0.3),
                val=lambda s: 0.0, eval_every=20)
    oa, ob, early = pair_outcomes(full, short, planned_steps([full, short]))
    assert early and oa["success_end"] is None and ob["success_end"] is None
    assert oa["margin_end"] == pytest.approx(0.5) and ob["margin_end"] == pytest.approx(0.3)


def test_finding_3_counts_the_early_pair_and_repeats_without_it(tmp_path):
    recs = []
    for seed in range(5):
        steps = 12 if seed == 2 else 40
        recs.append(rec(tmp_path, "collapse_sokoban", "top_p", seed, probe=flat(0.5 + 0.01 * seed),
                        val=lambda s: 0.5))
        recs.append(rec(tmp_path, "collapse_sokoban", "random", seed, steps=steps, probe=falling(25),
                        val=lambda s: 0.4))
        recs.append(rec(tmp_path, "collapse_sokoban", "no_filter", seed, probe=falling(25), val=lambda s: 0.4))
    f = finding_filtering(recs, envs=("collapse_sokoban",))["collapse_sokoban"]
    assert f["arms"]["random"]["stopped_early"] == [{"seed": 2, "steps": 12}]
    c = f["comparisons"]["top_p-random"]["margin_end"]
    assert c["early_seeds"] == [2] and c["n"] == 5 and c["sensitivity"]["n"] == 4
    # Seed 2 at equal steps (10): random's margin was still 0.6 there, so its difference is 0.52 - 0.6.
    assert c["diffs"][2] == pytest.approx(0.52 - 0.6)
    assert c["sensitivity"]["diffs"] == pytest.approx([0.5 - 0.1, 0.51 - 0.1, 0.53 - 0.1, 0.54 - 0.1])
    assert "sensitivity" not in f["comparisons"]["top_p-no_filter"]["margin_end"]
    # A record's own planned_steps wins over the env's longest run (here every run stopped at 30 of 50).
    cut = [dict(r, planned_steps=50, steps=30) for r in recs[:2]]
    assert planned_steps(cut) == {"collapse_sokoban": 50} and stopped_early(cut[0], planned_steps(cut))


# ------------------------------------------------------------------------------------------- co-movement
def _auc_rank_sum(pos, neg):
    """AUC of 'lower is positive' from the Mann-Whitney rank sum of the negatives: U / (n_pos n_neg)."""
    ranks = ranks_by_counting(list(pos) + list(neg))
    r_neg = sum(ranks[len(pos):])
    return (r_neg - len(neg) * (len(neg) + 1) / 2) / (len(pos) * len(neg))


def _co_movement_study(root: Path) -> list[dict]:
    """Two envs x 3 arms x 5 seeds; collapsing runs' entropies drift down by seed-dependent amounts, the others'
    stay; success rises where the margin falls. Plus an entropy-bonus run and a run that stopped early (both
    left out)."""
    recs = []
    for env_i, env in enumerate(("collapse_sokoban", "collapse_frozenlake")):
        for arm_i, arm in enumerate(("no_filter", "top_p", "random")):
            for seed in range(5):
                collapses = (seed + arm_i + env_i) % 4 != 0
                probe = (falling(10 + 5 * arm_i, tok_end=0.80 + 0.03 * seed) if collapses
                         else flat(0.5 - 0.01 * seed, wobble=0.01))
                success = 0.5 + 0.05 * seed + 0.02 * arm_i if collapses else 0.1 + 0.01 * seed
                recs.append(rec(root, env, arm, seed, planned=40, probe=probe, val=lambda s, v=success: v))
    recs.append(rec(root, "collapse_sokoban", "entropy_bonus", 0, planned=40,
                    probe=lambda s: (0.6 if s < 10 else 0.0, 1.0 + s, 0.5 + s), val=lambda s: 0.0))
    recs.append(rec(root, "collapse_sokoban", "random", 9, steps=12, planned=40, probe=flat(), val=lambda s: 0.0))
    return recs


def test_co_movement_against_plain_loops(tmp_path):
    recs = _co_movement_study(tmp_path)
    cm = co_movement(recs, n_boot=200)
    assert cm["stopped_early"] == ["collapse_sokoban-random-s9"]
    names = {r["name"] for r in cm["runs"]}
    assert len(names) == 30 and not any("entropy_bonus" in n for n in names)
    for x in cm["runs"]:
        r = next(r for r in recs if r["name"] == x["name"])
        m = [p["retrieval_margin"] for p in r["probe"]]
        t = [p["token_entropy"] for p in r["probe"]]
        assert x["pearson"] == pytest.approx(pearson_loop(m, t))
        assert x["spearman"] == pytest.approx(pearson_loop(ranks_by_counting(m), ranks_by_counting(t)))
        assert x["token_end_start"] == pytest.approx(t[-1] / t[0])
        c = [p["cond_entropy_est"] for p in r["probe"]]
        assert x["cond_end_start"] == pytest.approx(c[-1] / c[0])
    for g, grp in cm["by_group"].items():
        runs = [x for x in cm["runs"] if g == "all" or x["env"] == g]
        pear = sorted(x["pearson"] for x in runs)
        assert grp["pearson"]["median"] == pytest.approx((pear[len(pear) // 2] + pear[(len(pear) - 1) // 2]) / 2)
        assert grp["pearson"]["n_positive"] == sum(p > 0 for p in pear)
        pos = [x["token_end_start"] for x in runs if x["collapsed"]]
        neg = [x["token_end_start"] for x in runs if not x["collapsed"]]
        assert grp["auc_token_end_start"] == pytest.approx(_auc_rank_sum(pos, neg))
        assert grp["max_success_not_collapsed"] == max(x["final_success"] for x in runs if not x["collapsed"])
    # End margin against final success: Spearman per env, and pooled on ranks centred and scaled within each env,
    # (r - (n + 1) / 2) / n, both by plain loops.
    ms = cm["margin_success"]
    centred_m, centred_s = [], []
    for e in ("collapse_sokoban", "collapse_frozenlake"):
        xs = [x for x in cm["runs"] if x["env"] == e]
        rm = ranks_by_counting([x["margin_end"] for x in xs])
        rs = ranks_by_counting([x["final_success"] for x in xs])
        assert ms[e]["rho"] == pytest.approx(pearson_loop(rm, rs))
        centred_m += [(r - (len(xs) + 1) / 2) / len(xs) for r in rm]
        centred_s += [(r - (len(xs) + 1) / 2) / len(xs) for r in rs]
    assert ms["within_env"]["rho"] == pytest.approx(pearson_loop(centred_m, centred_s))
    # Success was built to rise where the margin falls: strongly negative, and so is every bootstrap interval's
    # upper end (seeds resampled, 5 seeds).
    assert ms["within_env"]["rho"] < -0.5 and ms["within_env"]["ci95"][0] <= ms["within_env"]["ci95"][1] < 0
    assert ms["n_runs"] == 30 and ms["n_seeds"] == 5


def test_auc_and_ratios_on_hand_values():
    assert auc_lower([0.8, 0.9], [1.0, 1.1]) == 1.0
    assert auc_lower([1.0], [1.0]) == 0.5
    assert auc_lower([0.9, 1.2], [1.0]) == 0.5
    assert auc_lower([], [1.0]) is None
    r = {"probe": [{"step": 0, "retrieval_margin": 0.5, "token_entropy": 2.0, "cond_entropy_est": 1.0},
                   {"step": 5, "retrieval_margin": 0.7, "token_entropy": 2.5, "cond_entropy_est": 1.25},
                   {"step": 10, "retrieval_margin": 0.1, "token_entropy": 2.0, "cond_entropy_est": 1.0}]}
    out = entropy_ratios(r)
    # The detector's reference is the margin's peak before the drop (step 5).
    assert out["reference_step"] == 5
    assert out["token_end_start"] == pytest.approx(1.0) and out["token_end_ref"] == pytest.approx(0.8)
    assert out["cond_end_ref"] == pytest.approx(0.8)
    assert within_run_correlation({"probe": r["probe"][:2]})["pearson"] is None  # two points: undefined


# ------------------------------------------------------------------------------------------- ceiling, finding 4
def test_ceiling_rule(tmp_path):
    assert ceiling_status([0.99, 0.995, 0.97])["at_ceiling"] is True
    assert ceiling_status([0.99, 0.97, 0.97])["at_ceiling"] is False
    assert ceiling_status([0.99, 0.97])["at_ceiling"] is False  # half is not "more than half"
    assert ceiling_status([])["at_ceiling"] is False
    mi = lambda q: (lambda s: {"mi_zscore_ema": q, "mi_seq_est": 1.0 + q, "mi_upper_bound": math.log(8),  # noqa: E731
                               "retrieval_acc": 1.0, "retrieval_chance": 0.125, "cond_entropy_est": 0.3 - q / 10,
                               "marginal_entropy_est": 0.4, "token_entropy": 0.5, "regime": "x"})
    at, below = [], []
    for seed in range(4):
        for i, arm in enumerate(("top_p", "no_filter")):
            q = 0.1 * seed + 0.05 * i
            at.append(rec(tmp_path / "a", "sokoban", arm, seed, steps=20, mi=mi(q), probe=flat(0.995 - 0.001 * seed),
                          val=lambda s, v=q: v))
            below.append(rec(tmp_path / "b", "sokoban", arm, seed, steps=20, mi=mi(q), probe=flat(0.9 - 0.1 * seed),
                             val=lambda s, v=q: v))
    pair = finding_correlations(at, envs=("sokoban",), n_boot=50)["pairs"][1]
    assert pair["verdict"] == "not testable" and pair["reason"] == "at_ceiling"
    assert (pair["at_ceiling_runs"], pair["runs"], pair["threshold"]) == (8, 8, CEILING_NORM)
    assert pair_verdict_text(pair) == (f"not testable (at the ceiling: early MI-Seq / log N (probe) above "
                                       f"{CEILING_NORM} on 8 of 8 runs)")
    assert finding_correlations(below, envs=("sokoban",), n_boot=50)["pairs"][1]["verdict"] != "not testable"


def test_finding_4_label_stops_and_filter_log(tmp_path):
    log = lambda s: {"filter/groups_total": 8.0, "filter/kept_groups": 2.0,  # noqa: E731
                     "filter/kept_zero_adv_share": 1.0 if s % 2 else 0.5}
    top = [rec(tmp_path, "sokoban", "rv_top_quartile", s, steps=40, planned=40, probe=flat(0.99),
               val=lambda t: 0.5) for s in range(3)]
    bottom = [rec(tmp_path, "sokoban", "rv_bottom_quartile", s, steps=21 if s else 40, planned=40, probe=flat(0.99),
                  val=lambda t: 0.1, filter_row=log, zero=0.7) for s in range(3)]
    q = finding_quartiles(top + bottom)
    assert q["label"].startswith("expected under GRPO")
    b = q["arms"]["rv_bottom_quartile"]
    assert b["stopped_early"] == [{"seed": 1, "steps": 21}, {"seed": 2, "steps": 21}]
    assert b["zero_variance_fraction"] == pytest.approx(0.7)
    # Per run the mean over its steps of (1, 0.5, 1, 0.5, ...): 0.75 over 40 steps, (11 + 10 * 0.5) / 21 over 21.
    assert b["kept_zero_adv_share"] == pytest.approx((0.75 + 2 * (11 + 5) / 21) / 3)
    assert q["arms"]["rv_top_quartile"]["kept_zero_adv_share"] is None  # no log: not recorded
    assert q["equal_steps"]["success"]["verdict"] == "held"
    assert q["equal_steps"]["probe_mi_seq_norm"]["verdict"] == "not testable"
    assert verdict_text(q["equal_steps"]["probe_mi_seq_norm"]).startswith("not testable (at the ceiling: above 0.98 on")
    s = filter_log_summary(bottom[1])
    assert s["n_steps"] == 21 and s["kept_groups"] == 2.0 and s["all_zero_adv_steps"] == 11
    assert s["skipped"] is None and s["zero_fraction"] == pytest.approx(0.7)


# ------------------------------------------------------------------------------------------- run records
def test_read_run_keeps_provenance_probe_fields_and_the_filter_log(tmp_path):
    extra = lambda s: {"probe/reasoning_tokens": 20.0 + s, "probe/template_share": s / 40}  # noqa: E731
    row = lambda s: {"filter/groups_total": 8.0, "filter/kept_groups": 6.0, "filter/kept_zero_adv_share": 0.0,  # noqa: E731
                     "filter/skipped": 0.0}
    r = rec(tmp_path, "collapse_sokoban", "top_p", 0, steps=10, planned=40, probe=flat(), extra_probe=extra,
            filter_row=row, provenance={"commit": "abc123", "config_sha256": "f" * 64})
    assert r["commit"] == "abc123" and r["config_sha256"] == "f" * 64 and r["planned_steps"] == 40
    assert [p["reasoning_tokens"] for p in r["probe"]] == [20.0, 25.0, 30.0]
    assert [p["template_share"] for p in r["probe"]] == [0.0, 0.125, 0.25]
    assert len(r["filter_log"]) == 10
    assert r["filter_log"][0] == {"step": 1, "groups_total": 8.0, "kept_groups": 6.0, "zero_fraction": 0.25,
                                  "kept_zero_adv_share": 0.0, "skipped": 0.0, "regulariser_only": None,
                                  "grad_norm_task": None, "grad_norm_entropy": None}
    assert set(r["filter_log"][0]) == {"step", *FILTER_LOG_KEYS}
    # An old run: no provenance, no config, only filter/zero_fraction logged.
    old = rec(tmp_path, "collapse_sokoban", "top_p", 1, steps=3, probe=flat())
    assert old["commit"] is None and old["config_sha256"] is None and old["planned_steps"] is None
    assert old["probe"][0]["reasoning_tokens"] is None and old["probe"][0]["template_share"] is None
    assert old["filter_log"][0] == {"step": 1, "groups_total": None, "kept_groups": None, "zero_fraction": 0.25,
                                    "kept_zero_adv_share": None, "skipped": None, "regulariser_only": None,
                                    "grad_norm_task": None, "grad_norm_entropy": None}
    # A damaged provenance file is "not recorded", not a crash.
    (tmp_path / "collapse_sokoban-top_p-s1" / "provenance.json").write_text("{not json")
    assert read_run(tmp_path / "collapse_sokoban-top_p-s1", RunSpec("collapse_sokoban", "top_p", 1, "x", ()))[
        "commit"] is None


def _header(records):
    return {"mode": "full", "command": "ragen reproduce --first-seed 0", "seeds": sorted({r["seed"] for r in records}),
            "n_runs": len(records), "n_missing": 0, "missing": [], "core_minutes": 1.0, "machine": "test",
            "arms": {k: {"overrides": list(v.overrides), "purpose": v.purpose} for k, v in ARMS.items()}}


def test_report_says_not_recorded_for_old_runs_and_lists_new_fields(tmp_path):
    old = _co_movement_study(tmp_path / "old")
    old = [{k: v for k, v in r.items() if k not in ("commit", "config_sha256", "filter_log")} for r in old]
    text = markdown({"analysis": analyse(old, n_boot=50), "records": old}, "reproduction", _header(old))
    assert ("Not recorded for any of the 32 runs (they predate these fields): commit, config hash, probe reasoning "
            "length (tokens), probe traces matching the template exactly, per-step filter log.") in text
    assert "## 1. A positive control" in text and "not evidence for the paper's claim" in text
    assert "## 1b. What entropy and success do while the margin falls" in text
    new = [rec(tmp_path / "new", "collapse_sokoban", "no_filter", 0, planned=40, probe=flat(),
               provenance={"commit": "0123456789abcdef", "config_sha256": "ab" * 32},
               extra_probe=lambda s: {"probe/reasoning_tokens": 24.0, "probe/template_share": 0.5},
               filter_row=lambda s: {"filter/groups_total": 8.0, "filter/kept_groups": 8.0,
                                     "filter/kept_zero_adv_share": 0.25, "filter/skipped": 0.0})]
    text = markdown({"analysis": analyse(new, n_boot=50), "records": new}, "reproduction", _header(new))
    row = next(line for line in text.splitlines() if line.startswith("| collapse_sokoban-no_filter-s0 | `0123"))
    assert "`0123456789`" in row and "`abababababab`" in row and "24.0 -> 24.0" in row and "0.50 -> 0.50" in row
    assert "40, 8.0 / 8.0, 25.0, 0, 0" in row


# ------------------------------------------------------------------------------------------- --from-results
def test_the_report_regenerates_from_results_json_alone(tmp_path, capsys):
    records = _co_movement_study(tmp_path / "runs")
    first = write_report({"analysis": analyse(records, n_boot=50), "records": records}, tmp_path / "a",
                         _header(records))
    results = first.parent / "reproduction" / "results.json"
    # Remove the analysis (and the run folders): the report must come from the records alone.
    data = json.loads(results.read_text())
    data["analysis"] = {}
    results.write_text(json.dumps(data))
    for d in (tmp_path / "runs").iterdir():
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    assert cli.main(["--from-results", str(results), "--report-dir", str(tmp_path / "b")]) == 0
    again = json.loads((tmp_path / "b" / "reproduction" / "results.json").read_text())
    assert again["records"] == data["records"]
    # Recomputed, not copied: the analysis was emptied above.
    sok = again["analysis"]["collapse"]["collapse_sokoban"]
    assert (sok["verdict"], sok["seeds_with_signature"], sok["seeds"], sok["seeds_no_drop"]) == (
        "inconclusive", 3, 5, 2)
    assert again["header"]["command"] == "ragen reproduce --first-seed 0"
    want = f"ragen reproduce --from-results {tmp_path / 'b' / 'reproduction' / 'results.json'} --report-dir " \
           f"{tmp_path / 'b'}"
    assert again["header"]["regenerate"] == want
    text = (tmp_path / "b" / "reproduction.md").read_text()
    assert f"`{want}` regenerates this file" in text
    for fig in ("collapse_curves.png", "filtering.png", "correlations.png", "quartiles.png"):
        assert (tmp_path / "b" / "reproduction" / fig).stat().st_size > 1000
    # Default report dir: the folder above the one holding results.json.
    assert cli.main(["--from-results", str(tmp_path / "b" / "reproduction" / "results.json")]) == 0
    assert "from the 32 records" in capsys.readouterr().err
    # Unreadable or empty input: exit 1 with the reason.
    assert cli.main(["--from-results", str(tmp_path / "missing.json")]) == 1
    (tmp_path / "empty.json").write_text(json.dumps({"header": {}, "analysis": {}, "records": []}))
    assert cli.main(["--from-results", str(tmp_path / "empty.json")]) == 1
    assert "holds no run record" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- the figure
def test_entropy_panel_is_not_squashed_by_the_entropy_bonus(tmp_path):
    recs = _co_movement_study(tmp_path)
    fig = collapse_figure(recs, ["collapse_sokoban", "collapse_frozenlake"])
    try:
        axes = fig.axes
        row = axes[:5]  # Sokoban: margin, token entropy, H(Z|X), the entropy bonus's own panel, success
        shared_max = max(max(line.get_ydata()) for ax in row[1:3] for line in ax.get_lines()
                         if len(line.get_xdata()) > 2)
        own_max = max(max(line.get_ydata()) for line in row[3].get_lines() if len(line.get_xdata()) > 2)
        # The bonus arm's largest ratio is its H(Z|X): (0.5 + 40) / 0.5; the filter arms stay within +-25%.
        assert shared_max < 1.3 and own_max == pytest.approx(81.0)
        assert row[3].get_yscale() == "log"
        assert row[1].get_ylim()[1] < 2.0  # the shared panel is scaled to the filter arms
        assert all(ax.get_legend() is None for ax in axes) and fig.legends  # one legend, outside the axes
        assert all(ax.get_xlabel() == "training step" for ax in axes if ax.axison)
        assert not axes[8].axison  # FrozenLake has no entropy-bonus run: that panel says so instead
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
