"""`ragen reproduce`'s analysis on run records a study can produce or a user can hand-edit: a NaN probe value, probe
curves the detector refuses, an infinite MI estimate, two records of one run, a seed with a run in one arm only, a
search candidate with a run missing, a seed plan without a paired SD and a quartile arm missing. Each is checked
against an independent reference (the same record with the value left out, a plain loop, a hand count)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from ragen_core.apps.reproduce import cli
from ragen_core.apps.reproduce import experiments as E
from ragen_core.apps.reproduce.analysis import (
    RecordsError,
    analyse,
    early_value,
    finding_collapse,
    finding_correlations,
    finding_filtering,
    finding_quartiles,
    run_collapse,
)
from ragen_core.apps.reproduce.report import markdown

NAN = float("nan")
#: t_{0.975, 1} (scipy.stats.t.ppf(0.975, 1)), the 95% two-sided quantile with one degree of freedom
T975_DF1 = 12.706204736174707
COLLAPSING = [0.6, 0.6, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # the margin halves at step 10 and stays there


def record(env: str, arm: str, seed: int, margins=COLLAPSING, entropy=1.0, cond=1.0, steps: int = 40,
           val=((0, 0.5), (20, 0.5), (40, 0.4)), mi_seq=1.0) -> dict:
    """A run record as runner.read_run writes it: a probe every 5 steps with flat entropies, three evaluations,
    in-batch MI every 10 steps."""
    probe = [{"step": 5 * i, "retrieval_margin": m, "token_entropy": entropy, "cond_entropy_est": cond,
              "mi_seq_norm": 0.5} for i, m in enumerate(margins)]
    mi = [{"step": s, "mi_zscore_ema": 0.1 * seed, "mi_seq_est": mi_seq, "mi_upper_bound": 2.0,
           "cond_entropy_est": 0.5 + 0.01 * seed} for s in (10, 20, 30, 40)]
    return {"env": env, "arm": arm, "seed": seed, "name": f"{env}-{arm}-s{seed}", "steps": steps,
            "val": [list(v) for v in val], "mi": mi, "probe": probe}


def collapse_study(seeds=range(5)) -> list[dict]:
    """The collapse-prone Sokoban arms of finding 3, each seed's margin a little different."""
    out = []
    for s in seeds:
        out.append(record("collapse_sokoban", "no_filter", s, [m + 0.01 * s for m in COLLAPSING]))
        out.append(record("collapse_sokoban", "top_p", s, [m + 0.02 * s for m in COLLAPSING]))
        out.append(record("collapse_sokoban", "random", s, [m + 0.015 * s for m in COLLAPSING]))
    return out


HEADER = {"mode": "full", "command": "ragen reproduce", "seeds": [0, 1, 2, 3, 4], "n_runs": 0, "n_missing": 0,
          "missing": [], "core_minutes": 0.0, "machine": "test", "arms": {}}


# ------------------------------------------------------------------------------------------- missing values
def test_a_nan_probe_value_is_a_missing_measurement_like_none():
    """Before: a NaN at one probe measurement made the detector refuse the whole run, which then counted as a run
    without the signature and was carried as "no drop" to its last probe step: finding 1 read 0 of 5 and finding
    3's steps until the drop read "contradicted". Now NaN is left out like None."""
    with_nan, with_none = collapse_study(), collapse_study()
    for nan_run, none_run in zip(with_nan, with_none):
        if nan_run["arm"] == "no_filter":
            nan_run["probe"][-1]["token_entropy"] = NAN
            none_run["probe"][-1]["token_entropy"] = None
    for a, b in zip(with_nan, with_none):
        assert run_collapse(a) == run_collapse(b)
    got = finding_collapse(with_nan, envs=("collapse_sokoban",))["collapse_sokoban"]
    want = finding_collapse(with_none, envs=("collapse_sokoban",))["collapse_sokoban"]
    assert got["verdict"] == want["verdict"] == "passed"
    assert got["arms"]["no_filter"]["n_collapsed"] == want["arms"]["no_filter"]["n_collapsed"] == 5
    f_nan = finding_filtering(with_nan, envs=("collapse_sokoban",))["collapse_sokoban"]["comparisons"]
    f_none = finding_filtering(with_none, envs=("collapse_sokoban",))["collapse_sokoban"]["comparisons"]
    assert f_nan["top_p-no_filter"]["steps_to_drop"] == f_none["top_p-no_filter"]["steps_to_drop"]
    assert f_nan["top_p-no_filter"]["steps_to_drop"]["diffs"] == [0.0] * 5  # both arms drop at step 10


def test_a_run_whose_margins_are_all_nan_is_a_run_without_probe_not_a_crash():
    """Before: IndexError deep inside co_movement (the run passed as measured, its margins were all dropped)."""
    records = collapse_study()
    for p in records[0]["probe"]:
        p["retrieval_margin"] = NAN
    a = analyse(records, n_boot=20)
    assert a["collapse"]["collapse_sokoban"]["arms"]["no_filter"]["no_probe"] == [0]
    assert a["collapse"]["collapse_sokoban"]["arms"]["no_filter"]["n"] == 4


def test_curves_the_detector_refuses_are_not_counted_as_runs_without_the_signature():
    """An entropy of 0 at a measurement: the detector cannot judge the run. Before: counted as "no signature" (so
    finding 1 read 4 of 5: inconclusive) and carried as "no drop" at its last probe step in finding 3."""
    records = collapse_study(range(6))
    refused = next(r for r in records if r["arm"] == "no_filter" and r["seed"] == 5)
    refused["probe"][0]["cond_entropy_est"] = 0.0
    assert run_collapse(refused)["refused"] is True
    c = finding_collapse(records, envs=("collapse_sokoban",))["collapse_sokoban"]
    arm = c["arms"]["no_filter"]
    assert (arm["n"], arm["n_collapsed"], arm["n_no_drop"]) == (5, 5, 0)
    assert [x["seed"] for x in arm["refused"]] == [5] and "entropies must be > 0" in arm["refused"][0]["reason"]
    assert c["verdict"] == "passed"
    comp = finding_filtering(records, envs=("collapse_sokoban",))["collapse_sokoban"]["comparisons"]
    assert comp["top_p-no_filter"]["steps_to_drop"]["seeds"] == [0, 1, 2, 3, 4]  # seed 5: no value, not censored
    text = markdown({"analysis": analyse(records, n_boot=20), "records": records}, "r", HEADER)
    assert "| `no_filter` | 5 | | not judged: probe curves refused" in text
    assert "not judged (the detector refused the probe curves), so not counted: seed 5" in text


def test_an_infinite_mi_estimate_is_missing_not_at_the_ceiling():
    """Before: an infinite MI-Seq made MI-Seq / log P infinite, the ceiling check read "inf to inf, above 0.98 on
    every run" and the pair was "not testable (at the ceiling)"."""
    records = [record(env, "top_p", s, mi_seq=math.inf, val=((0, 0.1), (40, 0.1 * s)))
               for env in ("sokoban", "frozenlake") for s in range(4)]
    assert early_value(records[0], "mi_norm") is None
    pair = finding_correlations(records, n_boot=20)["pairs"][0]
    assert pair["ceiling"]["n"] == 0 and not pair["ceiling"]["at_ceiling"]
    assert pair["verdict"] != "not testable"


# ------------------------------------------------------------------------------------------- duplicates
def test_two_records_of_one_run_are_refused_by_every_analysis():
    """Before: a paired comparison kept the last of the two silently while finding 1 counted the seed twice ("6 of
    6 seeds" out of 5)."""
    records = collapse_study()
    records.append(copy.deepcopy(records[1]))
    with pytest.raises(RecordsError, match=r"collapse_sokoban/top_p seed 0: 2 records"):
        analyse(records, n_boot=20)
    mech = [record("mechanism", "pays_all", s) for s in range(3)]
    with pytest.raises(RecordsError, match=r"mechanism/pays_all seed 2: 2 records"):
        E.analyse("mechanism", [*mech, copy.deepcopy(mech[2])])


def test_from_results_refuses_two_records_of_one_run_in_one_line(tmp_path, capsys):
    records = [record("search", "sokoban_nopay", s) for s in (130, 131)]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"experiment": "search", "header": {}, "records": [*records, records[0]]}))
    assert cli.main(["--from-results", str(path), "--report-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "search/sokoban_nopay seed 130: 2 records" in err
    assert f"cannot read the records of {path}" in err  # the file is named
    assert not (tmp_path / "out" / "search.md").exists()


# ------------------------------------------------------------------------------------------- unpaired seeds
def test_a_seed_with_a_run_in_one_arm_only_is_named_not_dropped_unsaid():
    """Before: a seed of top_p without a no_filter run left the comparison with n one lower and nothing said."""
    records = [r for r in collapse_study(range(3)) if not (r["arm"] == "no_filter" and r["seed"] == 2)]
    c = finding_filtering(records, envs=("collapse_sokoban",))["collapse_sokoban"]["comparisons"]["top_p-no_filter"]
    m = c["margin_end"]
    assert m["unpaired"] == {"top_p": [2]} and m["seeds"] == [0, 1]
    # the numbers by hand over the two seeds that pair: end margins differ by 0.01 * seed
    diffs = [0.1 + 0.02 * s - (0.1 + 0.01 * s) for s in (0, 1)]
    mean = sum(diffs) / 2
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs))
    assert m["mean"] == pytest.approx(mean)
    assert m["ci95"] == pytest.approx([mean - T975_DF1 * sd / math.sqrt(2), mean + T975_DF1 * sd / math.sqrt(2)])
    assert "unpaired" not in c["margin_end"] or c["margin_end"]["unpaired"] == c["success_end"]["unpaired"]
    text = markdown({"analysis": analyse(records, n_boot=20), "records": records}, "r", HEADER)
    assert "`top_p` seed 2 has no partner run (not paired)" in text
    assert "Seeds left out of a comparison for want of a partner run: collapse-prone Sokoban, top_p minus " \
           "no_filter: `top_p` seed 2 has no partner run (not paired)." in text


def test_a_quartile_seed_without_its_partner_is_named_and_no_share_reads_n_a_percent():
    records = [record("sokoban", "rv_top_quartile", s) for s in range(3)]
    records += [record("sokoban", "rv_bottom_quartile", s) for s in range(2)]
    assert finding_quartiles(records)["unpaired"] == {"rv_top_quartile": [2]}
    text = markdown({"analysis": analyse(records, n_boot=20), "records": records}, "r", HEADER)
    assert "`rv_top_quartile` seed 2 has no partner run (not paired)" in text
    assert "n/a%" not in text  # no zero-variance share was recorded: "n/a", not "n/a%"


def test_the_experiments_name_the_seeds_they_cannot_pair():
    mech = [record("mechanism", arm, s) for arm in ("pays_all", "nopay_all") for s in range(3)]
    res = E.analyse("mechanism", [r for r in mech if not (r["arm"] == "nopay_all" and r["seed"] == 0)])
    assert res["payoff"]["unpaired"] == {"pays_all": [0]}
    assert "Left out: `pays_all` seed 0 has no partner run (not paired)." in E.markdown(res, {})
    reg = [record(env, arm, s) for env in ("frozenlake", "sokoban") for arm in ("low_ent001", "low_ent0")
           for s in range(3)]
    res = E.analyse("regularisers", [r for r in reg if (r["env"], r["arm"], r["seed"]) != ("sokoban", "low_ent0", 1)])
    assert res["envs"]["sokoban"]["comparisons"]["primary"]["slope"]["unpaired"] == {"low_ent001": [1]}
    assert "unpaired" not in res["envs"]["frozenlake"]["comparisons"]["primary"]["slope"]
    assert "- primary: `low_ent001` seed 1 has no partner run (not paired)." in E.markdown(res, {})


# ------------------------------------------------------------------------------------------- the experiments
def test_a_candidate_with_a_missing_run_does_not_show_it_on_the_seeds_left():
    """Before: the search's "every seed" was met by a candidate whose second run was missing (1 of 1)."""
    harmful = [record("search", arm, s) for arm in ("sokoban_nopay", "frozenlake_nopay") for s in (130, 131)]
    assert all(E.run_summary(r)["harmful"]["harmful"] for r in harmful)
    res = E.analyse("search", [r for r in harmful if (r["arm"], r["seed"]) != ("frozenlake_nopay", 131)])
    full, lost = res["candidates"]["sokoban_nopay"], res["candidates"]["frozenlake_nopay"]
    assert full["shows_it"] and "missing" not in full
    assert not lost["shows_it"] and lost["missing"] == [131] and lost["needed"] == 2
    assert "131: no run (counted as no)" in E.markdown(res, {})


def test_a_seed_plan_without_a_paired_sd_prints_no_raw_none():
    res = E.analyse("regularisers_pilot", [record("frozenlake", arm, 140) for arm in ("low_ent001", "low_ent0")])
    text = E.markdown(res, {})
    rows = [line for line in text.splitlines() if line.startswith("| frozenlake | slope |")]
    assert rows and "None" not in rows[0] and "| n/a | n/a |" in rows[0]


@pytest.mark.parametrize("ci, found", [((-0.82, -0.33), "comes with higher success"),
                                       ((0.2, 0.7), "comes with lower success"),
                                       ((-0.44, 0.27), "no relation shown"),
                                       (None, "no relation shown"),
                                       ((float("nan"), float("nan")), "no relation shown")])
def test_the_collapse_and_success_sentence_follows_its_interval(ci, found):
    """The summary row said "here the collapse comes with higher success ... the path that pays" whatever the
    interval of rho: beside rho -0.05 [-0.44, +0.27] in a committed report."""
    from ragen_core.apps.reproduce.report import _margin_success_reading

    assert found in _margin_success_reading(ci)[0]


def test_the_committed_reports_say_what_their_intervals_show():
    root = Path(__file__).resolve().parents[2]
    rows = {name: next(line for line in (root / name).read_text().splitlines()
                       if line.startswith("| collapse and success"))
            for name in ("docs/reproduction.md", "docs/study-05e2668/reproduction.md")}
    assert "[-0.82, -0.33]" in rows["docs/reproduction.md"]
    assert "comes with higher success" in rows["docs/reproduction.md"]
    assert "[-0.44, +0.27]" in rows["docs/study-05e2668/reproduction.md"]
    assert "no relation shown" in rows["docs/study-05e2668/reproduction.md"]
