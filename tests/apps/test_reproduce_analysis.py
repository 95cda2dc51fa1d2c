"""`ragen reproduce` analysis: verdict wording, the cluster bootstrap against a plain-loop reference, constant and
tied metrics, equal-step quartile comparisons, finding 1 from probe curves, power numbers, and the whole report
from a synthetic study whose findings are known by construction."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from ragen_core.apps.reproduce.analysis import (
    CORRELATED,
    PAPER,
    analyse,
    average_ranks,
    cluster_bootstrap,
    env_centred_ranks,
    finding_collapse,
    finding_correlations,
    finding_filtering,
    finding_quartiles,
    fmt_unit,
    mde,
    paired_comparison,
    round_sig,
    run_collapse,
    seeds_needed,
    spearman,
    tie_status,
    within_env_rho,
)
from ragen_core.apps.reproduce.report import FIGURES, control_verdict_text, markdown, pair_verdict_text, write_report
from ragen_core.apps.reproduce.runner import read_run
from ragen_core.apps.reproduce.study import ARMS, RunSpec
from ragen_core.apps.reproduce.verdicts import Verdict, verdict_text, verdict_word
from ragen_core.math.stats import min_detectable_effect, pairs_needed


# ------------------------------------------------------------------------------------------- synthetic runs
def write_run(run_dir: Path, *, steps: int = 30, val=None, probe=None, mi=None, rv_het: float = 1.5,
              probe_every: int = 5, mi_every: int = 5, eval_every: int = 10) -> Path:
    """A metrics.jsonl like the trainer's.

    val(step) -> success at 0 and every `eval_every` steps; probe(step) -> (margin, token entropy, H(Z|X)) at 0
    and every `probe_every` steps; mi(step) -> dict of in-batch metrics every `mi_every` steps (None: not logged).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 60.0}]
    if val:
        rows.append({"step": 0, "val/success": val(0)})
    if probe:
        rows.append({"step": 0, **_probe_row(*probe(0))})
    for s in range(1, steps + 1):
        row = {"step": s, "perf/step_s": 2.0, "filter/zero_fraction": 0.25}
        if s == 1:
            row["filter/rv_heterogeneity"] = rv_het
        if mi and s % mi_every == 0:
            row.update({f"collapse/{k}": v for k, v in mi(s).items()})
        if probe and s % probe_every == 0:
            row.update(_probe_row(*probe(s)))
        if val and (s % eval_every == 0 or s == steps):
            row["val/success"] = val(s)
            row["perf/eval_s"] = 1.0
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def _probe_row(margin, tok, cond, n=32):
    chance = 1 / n
    return {"probe/retrieval_margin": margin, "probe/retrieval_acc": chance + margin * (1 - chance),
            "probe/retrieval_chance": chance, "probe/token_entropy": tok, "probe/cond_entropy_est": cond,
            "probe/mi_seq_est": margin * math.log(n), "probe/mi_upper_bound": math.log(n), "probe/mi_seq_norm": margin,
            "perf/probe_s": 0.5}


def _record(root: Path, env: str, arm: str, seed: int, **kw):
    d = write_run(root / f"{env}-{arm}-s{seed}", **kw)
    return read_run(d, RunSpec(env, arm, seed, "unused.toml", ()))


def _flat(margin=0.6):
    return lambda s: (margin, 1.0, 0.5)


def _collapsing(drop_at, start=0.6, end=0.1):
    """Margin halves (and stays) from step `drop_at`; entropies flat (within +-5%)."""
    return lambda s: (start if s < drop_at else end, 1.0 + 0.01 * (s % 3), 0.5 - 0.005 * (s % 2))


def _noise(alarm_at, drop_at):
    """Token entropy doubles at `alarm_at` (an entropy bonus), then the margin falls at `drop_at`."""
    return lambda s: (0.6 if s < drop_at else 0.05, 1.0 if s < alarm_at else 2.5, 0.5 if s < alarm_at else 2.0)


def _mi(quality, retrieval=1.0):
    return lambda s: {"mi_zscore_ema": quality, "mi_seq_est": 1.9 + 0.1 * quality, "mi_upper_bound": math.log(8),
                      "retrieval_acc": retrieval, "retrieval_chance": 0.125, "cond_entropy_est": 0.3 - 0.1 * quality,
                      "marginal_entropy_est": 0.4, "token_entropy": 0.5, "regime": "diverse_reasoning"}


def synthetic_study(root: Path, seeds=range(5)) -> list[dict]:
    """A study whose verdicts are known by construction:

    - collapse_sokoban: no_filter collapses on every seed (drop at step 15, entropy flat); top_p keeps its margin
      and succeeds more; random collapses later (step 25); entropy_bonus: entropy alarm at 5, drop at 10;
    - collapse_frozenlake: no_filter never drops; the arms differ by seed noise only;
    - sokoban / frozenlake (learning): early MI-ZScore-EMA orders final success within env, early in-batch
      retrieval is 1.0 in every run (constant), and the bottom RV quartile stops at step 12 + seed.
    """
    recs = []
    for seed in seeds:
        e = 0.01 * seed  # seed effect, shared by the arms of a seed (as a shared warm start would be)
        noise = [0.02, -0.01, 0.03, 0.0, -0.02, 0.01, 0.015][seed % 7]
        val = lambda v: (lambda s: v if s else 0.1)  # noqa: E731
        recs += [
            _record(root, "collapse_sokoban", "no_filter", seed, probe=_collapsing(15), val=val(0.20 + e)),
            _record(root, "collapse_sokoban", "top_p", seed, probe=_flat(0.6 - e), val=val(0.30 + e + noise)),
            _record(root, "collapse_sokoban", "random", seed, probe=_collapsing(25), val=val(0.22 + e - noise)),
            _record(root, "collapse_sokoban", "entropy_bonus", seed, probe=_noise(5, 10), val=val(0.0)),
            _record(root, "collapse_frozenlake", "no_filter", seed, probe=_flat(0.5 + noise), val=val(0.5 + e)),
            _record(root, "collapse_frozenlake", "top_p", seed, probe=_flat(0.5 - noise), val=val(0.5 + e + noise)),
            _record(root, "collapse_frozenlake", "random", seed, probe=_flat(0.5), val=val(0.5 - noise)),
        ]
        for env, arms in (("sokoban", ("top_p", "no_filter", "rv_top_quartile", "rv_bottom_quartile")),
                          ("frozenlake", ("top_p", "no_filter"))):
            for i, arm in enumerate(arms):
                q = 0.2 * i + 0.05 * seed + (0.5 if env == "frozenlake" else 0.0)
                steps = 12 + seed if arm == "rv_bottom_quartile" else 30
                recs.append(_record(root, env, arm, seed, steps=steps, mi=_mi(q), probe=_flat(0.9 - 0.1 * i),
                                    val=val(0.1 + q / 3)))
    return recs


# ------------------------------------------------------------------------------------------- verdicts
def test_paired_comparison_verdict_wording():
    fmt = fmt_unit("points")
    held = paired_comparison({0: 0.5, 1: 0.6, 2: 0.55}, {0: 0.3, 1: 0.35, 2: 0.36})
    assert held["verdict"] == "held" and held["ci95"][0] > 0
    contra = paired_comparison({0: 0.3, 1: 0.35, 2: 0.36}, {0: 0.5, 1: 0.6, 2: 0.55})
    assert contra["verdict"] == "contradicted" and contra["ci95"][1] < 0
    # Direction -1 (the paper predicts a lower value): the same intervals read the other way.
    assert paired_comparison({0: 0.3, 1: 0.35, 2: 0.36}, {0: 0.5, 1: 0.6, 2: 0.55}, -1)["verdict"] == "held"
    mixed = paired_comparison({0: 0.5, 1: 0.2, 2: 0.45}, {0: 0.3, 1: 0.4, 2: 0.4})
    diffs = [0.2, -0.2, 0.05]
    sd = math.sqrt(sum((d - sum(diffs) / 3) ** 2 for d in diffs) / 2)
    assert mixed["sd"] == pytest.approx(sd)
    assert mixed["mde"] == pytest.approx(min_detectable_effect(sd, 3), rel=1e-5)
    # results.json keeps the verdict as a word and its numbers as numbers; the report words it from them
    assert mixed["verdict"] == "inconclusive" and isinstance(mixed["mde"], float)
    assert verdict_text(mixed, fmt) == f"inconclusive (detectable effect {100 * mixed['mde']:.1f} points)"
    assert "fail" not in verdict_text(mixed, fmt) and "no clear" not in verdict_text(mixed, fmt)
    one = paired_comparison({0: 0.5}, {0: 0.3, 1: 0.2})
    assert one["n"] == 1 and verdict_text(one, fmt) == "inconclusive (1 seed: no interval)"
    assert paired_comparison({0: 0.5}, {1: 0.3})["verdict"] == "not tested"
    assert verdict_text(paired_comparison({0: 0.5}, {1: 0.3}), fmt).startswith("not tested (")
    # The same difference on every seed (up to float rounding): a point interval, no detectable effect.
    same = paired_comparison({0: 0.3, 1: 0.4}, {0: 0.1, 1: 0.2})
    assert same["sd"] == 0.0 and same["mde"] is None and same["ci95"] == [same["mean"]] * 2
    assert same["verdict"] == "held"
    # Seeds missing a value are left out of the pairing, not treated as 0.
    assert paired_comparison({0: 0.5, 1: None, 2: 0.4}, {0: 0.3, 1: 0.2, 2: 0.1})["seeds"] == [0, 2]


def test_mde_scales_with_sd_and_matches_stats():
    assert mde(2.0, 5) == pytest.approx(min_detectable_effect(2.0, 5), rel=1e-5)
    assert mde(0.0, 5) is None and mde(1.0, 1) is None and mde(None, 5) is None


def test_seeds_needed_matches_pairs_needed():
    for effect, sd in ((1.0, 1.0), (2.0, 1.0), (0.8, 1.0), (1.5, 2.0)):
        assert seeds_needed(effect, sd) == pairs_needed(effect, sd), (effect, sd)
    assert seeds_needed(-1.0, 1.0) == seeds_needed(1.0, 1.0)
    assert seeds_needed(0.001, 1.0, max_n=100) is None
    with pytest.raises(ValueError):
        seeds_needed(1.0, 0.0)


# ------------------------------------------------------------------------------------------- bootstrap
def _plain_bootstrap(clusters, statistic, n_boot, seed, level=0.95):
    """Reference: the documented draws, written out as plain loops, and numpy-style linear quantiles."""
    import numpy as np

    rng = random.Random(seed)
    keys = list(clusters)
    values = []
    for _ in range(n_boot):
        sample = []
        for _ in range(len(keys)):
            u = rng.random()
            sample.extend(clusters[keys[int(u * len(keys))]])
        values.append(statistic(sample))
    return np.quantile(values, [(1 - level) / 2, (1 + level) / 2])


def test_cluster_bootstrap_against_a_plain_loop_and_seeded():
    clusters = {0: [(1.0, 2.0), (1.5, 2.5)], 1: [(3.0, 1.0)], 2: [(0.5, 0.7), (2.2, 2.0), (1.1, 0.3)]}

    def mean_x(items):
        return [sum(x for x, _ in items) / len(items)]

    got = cluster_bootstrap(clusters, mean_x, n_boot=300, seed=7)
    ref = _plain_bootstrap(clusters, lambda s: mean_x(s)[0], 300, 7)
    assert got[0]["ci95"] == pytest.approx(list(ref), abs=1e-12) and got[0]["n_valid"] == 300
    assert cluster_bootstrap(clusters, mean_x, n_boot=300, seed=7) == got  # repeatable
    assert cluster_bootstrap(clusters, mean_x, n_boot=300, seed=8) != got


def test_cluster_bootstrap_resamples_whole_clusters_uniformly():
    clusters = {"a": ["a1", "a2"], "b": ["b1"], "c": ["c1", "c2", "c3"]}
    seen = []

    def record(items):
        seen.append(tuple(items))
        return [0.0]

    cluster_bootstrap(clusters, record, n_boot=2700, seed=1)
    counts = {}
    for sample in seen:
        # Every sample is 3 whole clusters, in draw order.
        rest, drawn = list(sample), []
        while rest:
            key = rest[0][0]
            assert rest[: len(clusters[key])] == clusters[key]
            drawn.append(key)
            rest = rest[len(clusters[key]):]
        assert len(drawn) == 3
        counts[tuple(drawn)] = counts.get(tuple(drawn), 0) + 1
    # The 27 ordered draws are equally likely (exact enumeration): a chi-square goodness-of-fit check.
    assert set(counts) == set(itertools.product("abc", repeat=3))
    chi2 = sum((c - 100) ** 2 / 100 for c in counts.values())
    assert chi2 < 54.1  # the 0.999 quantile of chi-square with 26 df


def test_cluster_bootstrap_drops_undefined_resamples():
    clusters = {0: [1.0], 1: [2.0]}
    out = cluster_bootstrap(clusters, lambda s: [math.nan if len(set(s)) == 1 else 1.0], n_boot=400, seed=0)
    assert 150 < out[0]["n_valid"] < 250  # half the resamples draw one seed twice: undefined there
    out = cluster_bootstrap({0: [1.0]}, lambda s: [math.nan], n_boot=10, seed=0)
    assert out[0]["ci95"] == [None, None] and out[0]["n_valid"] == 0


# ------------------------------------------------------------------------------------------- ranks and ties
def test_ties_and_constants():
    assert tie_status([1.0] * 6) == "constant"
    assert tie_status([1.0, 1.0, 1.0, 1.0, 0.9, 0.8]) == "tied"  # one value covers 4 of 6
    assert tie_status([1.0, 1.0, 1.0, 0.9, 0.8, 0.7]) is None  # 3 of 6 is not more than half
    assert tie_status([1.906150, 1.9061500001, 1.906149999, 0.5]) == "tied"  # equal at 4 significant digits
    assert round_sig(1.90615) == 1.906 and round_sig(0.0123456) == 0.01235 and round_sig(0.0) == 0.0


def test_env_centred_ranks_remove_the_env_effect():
    # Within each env x and y are unrelated (one increasing, one decreasing), but env B is higher on both:
    # pooled Spearman sees a strong positive correlation, the env-centred one a negative one.
    x = [1, 2, 3, 10, 11, 12]
    y = [0.3, 0.2, 0.1, 0.9, 0.8, 0.7]
    envs = ["A"] * 3 + ["B"] * 3
    assert spearman(x, y) > 0.3
    assert within_env_rho(x, y, envs) == pytest.approx(-1.0)
    r = env_centred_ranks([5.0, 1.0, 3.0, 2.0, 2.0], ["a", "a", "a", "b", "b"])
    assert r == pytest.approx([(3 - 2) / 3, (1 - 2) / 3, 0.0, 0.0, 0.0])
    # One env: the same as Spearman's rho.
    rng = random.Random(3)
    xs, ys = [rng.random() for _ in range(9)], [rng.random() for _ in range(9)]
    assert within_env_rho(xs, ys, ["e"] * 9) == pytest.approx(spearman(xs, ys))
    assert average_ranks([2.0, 1.0]) == [2.0, 1.0]


def test_constant_metric_is_reported_not_correlated(tmp_path):
    recs = []
    for seed in range(4):
        for i, arm in enumerate(("top_p", "no_filter", "rv_top_quartile")):
            q = 0.3 * i + 0.1 * seed
            recs.append(_record(tmp_path, "sokoban", arm, seed, mi=_mi(q, retrieval=1.0),
                                val=lambda s, q=q: 0.1 + q / 3 if s else 0.1))
    corr = finding_correlations(recs, envs=("sokoban",), n_boot=200)
    ret = corr["metrics"]["retrieval_acc"]
    assert ret["status"] == {"sokoban": "constant"} and ret["rho"] is None and ret["envs_used"] == []
    assert ret["by_env"]["sokoban"]["rho"] is None
    z = corr["metrics"]["mi_zscore_ema"]
    assert z["rho"] == pytest.approx(1.0) and z["ci95"][0] == pytest.approx(1.0)
    assert corr["metrics"]["probe_mi_seq_norm"]["n"] == 0  # no probe in these runs
    # |rho| = 1 on both sides: the difference is 0 on every resample.
    assert corr["pairs"][0]["verdict"] == "inconclusive" and corr["pairs"][0]["reason"] == "interval_contains_0"
    assert pair_verdict_text(corr["pairs"][0]).startswith(
        "inconclusive (the interval of abs(rho_MI) - abs(rho_H) contains 0")
    assert corr["pairs"][1]["verdict"] == "not tested" and corr["pairs"][1]["metric_role"] == "mi"
    assert pair_verdict_text(corr["pairs"][1]) == "not tested (the MI metric was not measured)"


def test_correlation_within_env_with_bootstrap_over_seeds(tmp_path):
    recs = synthetic_study(tmp_path, seeds=range(4))
    corr = finding_correlations(recs, n_boot=300)
    assert corr["envs"] == ["sokoban", "frozenlake"] and corr["n_runs"] == 4 * 6 and corr["n_seeds"] == 4
    z = corr["metrics"]["mi_zscore_ema"]
    # Early MI-ZScore-EMA = q, final success = 0.1 + q / 3: a perfect rank order within each env.
    assert z["by_env"]["sokoban"]["rho"] == pytest.approx(1.0) and z["rho"] == pytest.approx(1.0)
    xs = [p["mi_zscore_ema"] for p in corr["points"]]
    ys = [p["y"] for p in corr["points"]]
    envs = [p["env"] for p in corr["points"]]
    assert z["rho"] == pytest.approx(within_env_rho(xs, ys, envs))
    assert corr["metrics"]["retrieval_acc"]["status"] == {"sokoban": "constant", "frozenlake": "constant"}
    assert set(CORRELATED) == set(corr["metrics"])


# ------------------------------------------------------------------------------------------- finding 1
def test_finding_1_from_probe_curves(tmp_path):
    recs = [_record(tmp_path, "collapse_sokoban", "no_filter", s, probe=_collapsing(15)) for s in range(5)]
    v = run_collapse(recs[0])
    assert v["collapsed"] is True and v["drop_step"] == 15 and v["entropy_alarm_step"] is None
    out = finding_collapse(recs, envs=("collapse_sokoban",))
    a = out["collapse_sokoban"]["arms"]["no_filter"]
    assert a["n"] == 5 and a["n_collapsed"] == 5 and out["collapse_sokoban"]["verdict"] == "passed"
    assert out["collapse_sokoban"]["kind"] == "positive control"
    # 3 of 5 collapse, 2 never drop: inconclusive, never "no".
    mixed = recs[:3] + [_record(tmp_path / "m", "collapse_sokoban", "no_filter", s, probe=_flat()) for s in (3, 4)]
    out = finding_collapse(mixed, envs=("collapse_sokoban",))["collapse_sokoban"]
    assert out["verdict"] == "inconclusive" and out["reason"] == "criterion_not_met"
    assert control_verdict_text(out) == "inconclusive (signature on 3 of 5; no MI drop on 2)"
    # The MI drop comes after an entropy alarm on most seeds: the positive control failed.
    noisy = [_record(tmp_path / "n", "collapse_sokoban", "no_filter", s, probe=_noise(5, 10)) for s in range(5)]
    out = finding_collapse(noisy, envs=("collapse_sokoban",))["collapse_sokoban"]
    assert out["verdict"] == "failed" and out["arms"]["no_filter"]["n_entropy_first"] == 5
    # Fewer than 5 seeds never pass; no probe at all is "not tested".
    assert control_verdict_text(finding_collapse(recs[:4], envs=("collapse_sokoban",))["collapse_sokoban"]).startswith(
        "inconclusive (4 seeds; the criterion needs >= 5")
    bare = [_record(tmp_path / "b", "collapse_sokoban", "no_filter", 0, val=lambda s: 0.1)]
    out = finding_collapse(bare, envs=("collapse_sokoban", "collapse_frozenlake"))
    assert out["collapse_sokoban"]["verdict"] == "not tested" and out["collapse_sokoban"]["reason"] == "no_runs"
    assert out["collapse_sokoban"]["arms"]["no_filter"]["no_probe"] == [0]
    assert control_verdict_text(out["collapse_frozenlake"]) == "not tested (no no-filter run with probe measurements)"


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def test_findings_1_and_2_store_bare_verdicts_and_their_reasons_as_numbers(tmp_path):
    """The stored verdict is a bare Verdict value; the numbers a reason needs are numbers beside it, and the report
    words the reason from them."""
    words = {v.value for v in Verdict}
    recs = [_record(tmp_path, "collapse_sokoban", "no_filter", s, probe=_collapsing(15)) for s in range(3)]
    recs += [_record(tmp_path / "m", "collapse_sokoban", "no_filter", s, probe=_flat()) for s in (3, 4)]
    one = synthetic_study(tmp_path / "one", seeds=(0,))
    outs = [finding_collapse(recs, envs=("collapse_sokoban", "collapse_frozenlake")),
            finding_collapse(synthetic_study(tmp_path / "s", seeds=range(5))), finding_collapse(one)]
    seen = set()
    for out in outs:
        for e in json.loads(json.dumps(out)).values():  # as results.json keeps it
            assert e["verdict"] in words and "(" not in e["verdict"]
            seen.add(e["verdict"])
            for k in ("seeds", "min_seeds", "share", "seeds_with_signature", "seeds_no_drop", "seeds_entropy_first"):
                assert _is_number(e[k]), k
            assert e["reason"] in (None, "criterion_not_met", "no_runs")
    assert {"passed", "inconclusive", "not tested"} <= seen
    sok = outs[0]["collapse_sokoban"]
    assert (sok["verdict"], sok["reason"], sok["seeds"], sok["seeds_with_signature"], sok["seeds_no_drop"],
            sok["min_seeds"], sok["share"]) == ("inconclusive", "criterion_not_met", 5, 3, 2, 5, 0.8)
    assert control_verdict_text(sok) == "inconclusive (signature on 3 of 5; no MI drop on 2)"
    assert verdict_word(sok) == "inconclusive" == verdict_word("inconclusive (signature on 3 of 5; no MI drop on 2)")
    for corr in (finding_correlations(one, n_boot=50), finding_correlations(synthetic_study(tmp_path / "c",
                                                                                           seeds=range(4)), n_boot=50)):
        for pair in json.loads(json.dumps(corr))["pairs"]:
            assert pair["verdict"] in words and "(" not in pair["verdict"]
            assert "reason" in pair
            for k in ("min_seeds", "at_ceiling_runs", "runs", "threshold"):
                assert k not in pair or _is_number(pair[k]), k
            assert verdict_word(pair_verdict_text(pair)) == pair["verdict"]
    pair = finding_correlations(one, n_boot=50)["pairs"][0]
    assert (pair["verdict"], pair["reason"], pair["min_seeds"]) == ("inconclusive", "no_interval", 3)
    # An older results file's verdict strings, read as words and worded as they are.
    old = {"verdict": "not testable (at the ceiling: early MI-Seq / log N (probe) above 0.98 on 28 of 30 runs)"}
    assert verdict_word(old) == "not testable" and pair_verdict_text(old) == old["verdict"]
    assert verdict_word("equivalent (within +-0.150)") == "equivalent" and verdict_word(Verdict.PASSED) == "passed"
    assert control_verdict_text({"verdict": "inconclusive (1 seed; x)"}) == "inconclusive (1 seed; x)"


# ------------------------------------------------------------------------------------------- finding 3
def test_finding_3_outcomes_and_censoring(tmp_path):
    recs = synthetic_study(tmp_path, seeds=range(3))
    f = finding_filtering(recs)["collapse_sokoban"]
    c = f["comparisons"]["top_p-no_filter"]
    # top_p never drops (censored at its last probe step, 30); no_filter drops at 15.
    assert c["steps_to_drop"]["diffs"] == [15.0, 15.0, 15.0] and f["arms"]["top_p"]["censored"] == 3
    assert c["margin_end"]["diffs"] == pytest.approx([0.5, 0.49, 0.48])
    assert c["margin_end"]["verdict"] == "held"
    assert f["comparisons"]["top_p-random"]["steps_to_drop"]["diffs"] == [5.0, 5.0, 5.0]
    fl = finding_filtering(recs)["collapse_frozenlake"]["comparisons"]["top_p-no_filter"]["margin_end"]
    # The arms differ by seed noise of a few hundredths: the 90% interval lies inside +-0.15.
    assert fl["verdict"] == "equivalent" and fl["bound"] == 0.15
    assert verdict_text(fl, fmt_unit("margin")) == "equivalent (within +-0.150)"


# ------------------------------------------------------------------------------------------- finding 4
def test_finding_4_compares_at_equal_steps(tmp_path):
    # Top quartile: success climbs 0.1 per eval; bottom stops at step 17 with a final eval there.
    top = _record(tmp_path, "sokoban", "rv_top_quartile", 0, steps=40, val=lambda s: 0.1 + s / 100,
                  mi=_mi(0.8), probe=_flat(0.9))
    bottom = _record(tmp_path, "sokoban", "rv_bottom_quartile", 0, steps=17, val=lambda s: 0.1 + s / 200,
                     mi=_mi(0.2), probe=_flat(0.4))
    q = finding_quartiles([top, bottom])
    # Evaluations: top at 0, 10, 20, 30, 40; bottom at 0, 10, 17. The last step both have is 10.
    assert q["seeds"][0]["success_step"] == 10
    assert q["equal_steps"]["success"]["diffs"] == pytest.approx([(0.1 + 0.1) - (0.1 + 0.05)])
    # At the end the stopped run is carried at its last value (step 17).
    assert q["at_end"]["success"]["diffs"] == pytest.approx([(0.1 + 0.4) - (0.1 + 17 / 200)])
    # In-batch MI every 5 steps: both reached step 15; probe likewise.
    assert q["seeds"][0]["mi_norm_step"] == 15 and q["seeds"][0]["probe_mi_seq_norm_step"] == 15
    assert q["equal_steps"]["probe_mi_seq_norm"]["diffs"] == pytest.approx([0.5])
    assert q["arms"]["rv_bottom_quartile"]["steps"] == [17]


# ------------------------------------------------------------------------------------------- the report
def _header(records, missing=()):
    return {"mode": "full", "command": "ragen reproduce", "seeds": sorted({r["seed"] for r in records}),
            "n_runs": len(records), "n_missing": len(missing), "missing": list(missing), "core_minutes": 12.0,
            "machine": "test", "arms": {k: {"overrides": list(v.overrides), "purpose": v.purpose}
                                        for k, v in ARMS.items()}}


def test_report_from_a_synthetic_study_renders_every_section(tmp_path):
    records = synthetic_study(tmp_path / "runs")
    a = analyse(records, n_boot=300)
    assert a["collapse"]["collapse_sokoban"]["verdict"] == "passed"
    assert a["collapse"]["collapse_sokoban"]["arms"]["entropy_bonus"]["n_entropy_first"] == 5
    assert a["collapse"]["collapse_frozenlake"]["verdict"] == "inconclusive"
    assert a["filtering"]["collapse_sokoban"]["comparisons"]["top_p-no_filter"]["margin_end"]["verdict"] == "held"
    assert a["power"] and all(r["needed"] for r in a["power"])
    path = write_report({"analysis": a, "records": records}, tmp_path / "report",
                        _header(records, missing=["sokoban-top_p-s9"]))
    text = path.read_text()
    for fig in FIGURES:
        assert (tmp_path / "report" / "reproduction" / fig).stat().st_size > 1000, fig
        assert f"reproduction/{fig}" in text
    sections = ["## Outcomes and verdict rules", "## 1. A positive control", "## 1b. What entropy and success do",
                "## 2. MI predicts success", "## 3. Filtering", "## Power analysis", "## 4. The RV quartile",
                "## The paper's numbers", "## What this study can resolve", "## Every run",
                "## Provenance and filter logs", "## Definitions", "**Missing runs**"]
    positions = [text.index(s) for s in sections]
    assert positions == sorted(positions)
    # The rules come before any number of this study: the first table row follows them.
    assert text.index("## Outcomes and verdict rules") < text.index("| finding |")
    for quote in ("+16.0", "+10.9", "+0.6", "+0.0", "+9.0", "-3.0", "+1.2", "+2.2", "+22.9", "-0.2", "-0.7",
                  "+12.0", "+59.5", "1.29", "1.16", "+4.6", "+3.2", "0.33", "-5.0", "+0.39", "+0.22", "-0.11",
                  "-0.14", "21.1", "0.95", "11.0", "0.73"):
        assert quote in text, quote
    assert "+3 to +16" not in text and "prediction failed" not in text
    assert not [line for line in text.splitlines() if line.startswith("|") and "**failed**" in line]
    assert "constant/tied" in text and "sokoban-top_p-s9" in text
    # Table rows split only on their column separators: H(Z|X) is escaped there.
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert not [line for line in table if "H(Z|X)" in line]
    assert any("H(Z\\|X)" in line for line in table)
    assert "entropy-driven, not template collapse" in text
    assert "The held-out probe cost 0.5 s per measurement on average over the 65 runs" in text
    assert "is detectable at 80% power from" in text  # the resolution section puts the MDE beside the paper
    data = json.loads((tmp_path / "report" / "reproduction" / "results.json").read_text())
    assert data["analysis"]["collapse"]["collapse_sokoban"]["verdict"] == "passed"


def test_report_survives_an_almost_empty_study(tmp_path):
    """One learning run without probe or MI: every section says what is missing instead of crashing."""
    records = [_record(tmp_path, "sokoban", "top_p", 0, val=lambda s: 0.2)]
    text = markdown({"analysis": analyse(records, n_boot=50), "records": records}, "reproduction", _header(records))
    assert "not tested" in text
    write_report({"analysis": analyse(records, n_boot=50), "records": records}, tmp_path / "r", _header(records))


def test_paper_numbers_are_quoted_exactly():
    f = PAPER["filtering"]
    assert f["GRPO"]["FrozenLake"] == -3.0 and f["PPO, Qwen2.5-0.5B"]["Sokoban"] == 22.9
    assert f["Qwen2.5-VL-3B (vision)"]["FrozenLake"] == 59.5 and f["PPO, Qwen2.5-0.5B"]["Countdown"] == -0.7
    assert PAPER["rv_heterogeneity"][2] == ("FrozenLake, GRPO", 0.33, -5.0)


def test_one_seed_gets_no_bootstrap_interval(tmp_path):
    """The quick study (one seed): a rho, but no interval that would pretend there is no uncertainty."""
    recs = synthetic_study(tmp_path, seeds=(0,))
    corr = finding_correlations(recs, n_boot=100)
    z = corr["metrics"]["mi_zscore_ema"]
    assert z["rho"] == pytest.approx(1.0) and z["ci95"] == [None, None]
    assert corr["pairs"][0]["verdict"] == "inconclusive" and corr["pairs"][0]["min_seeds"] == 3
    assert pair_verdict_text(corr["pairs"][0]).startswith("inconclusive (no bootstrap interval: it needs >= 3 seeds")
    f = finding_filtering(recs)["collapse_sokoban"]["comparisons"]["top_p-no_filter"]["margin_end"]
    assert f["verdict"] == "inconclusive" and verdict_text(f) == "inconclusive (1 seed: no interval)"
    assert control_verdict_text(finding_collapse(recs)["collapse_sokoban"]).startswith("inconclusive (1 seed; ")
