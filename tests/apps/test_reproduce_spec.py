"""`ragen reproduce` as data (issue 46): one Experiment spec per experiment in one registry, any spec through the
same runner and flags, the typed run record, one verdict rule, and rule prose generated from the rule objects."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ragen_core.apps.reproduce import cli, report
from ragen_core.apps.reproduce.analysis import PAPER, RULES, finding_collapse
from ragen_core.apps.reproduce.experiments import EXPERIMENTS, classify
from ragen_core.apps.reproduce.spec import RunRecord, build_runs, choose_seeds
from ragen_core.apps.reproduce.verdicts import (
    CHANGE_LABELS,
    PairedRule,
    ShareRule,
    Verdict,
    compare,
    mean_of,
    verdict_text,
)

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = [ROOT / "docs" / "reproduction" / "results.json",
             *sorted((ROOT / "docs" / "collapse").glob("*/results.json"))]


# ------------------------------------------------------------------------------------------- specs
def _stand_in_learning_rates(monkeypatch):
    """The regularisers experiment refuses to build runs until its pilot fixes the learning rates: stand-ins."""
    from ragen_core.apps.reproduce import experiments

    monkeypatch.setattr(experiments, "REGULARISERS_LR", {"frozenlake": 0.1, "sokoban": 0.1})
    monkeypatch.setattr(experiments, "PILOT_LR", {"frozenlake": 0.1, "sokoban": 0.1})


def test_every_experiment_is_one_spec_in_the_registry_and_builds_its_runs(monkeypatch):
    _stand_in_learning_rates(monkeypatch)
    assert "study" in EXPERIMENTS
    for name, exp in EXPERIMENTS.items():
        assert exp.name == name and exp.analyse is not None and exp.write is not None and exp.rule is not None
        seeds = choose_seeds(exp)  # its own default seeds, of its kind
        specs = build_runs(exp, seeds, ROOT / "configs", Path("/tmp/cache"))
        assert len(specs) == len(exp.variants) * len(seeds)
        assert all(f"run.seed={s.seed}" in s.overrides for s in specs)
    with pytest.raises(ValueError, match="tuning seeds"):
        build_runs(EXPERIMENTS["mechanism"], [130], ROOT / "configs", Path("/tmp/c"))
    with pytest.raises(ValueError, match="only tuning seeds"):
        build_runs(EXPERIMENTS["search"], [30], ROOT / "configs", Path("/tmp/c"))
    with pytest.raises(FileNotFoundError, match="--configs-dir"):
        build_runs(EXPERIMENTS["mechanism"], [30], ROOT / "nowhere", Path("/tmp/c"))


def test_adding_an_experiment_is_one_spec(tmp_path, monkeypatch):
    """A new spec in the registry runs through the same CLI, every flag included, with no other change."""
    base = EXPERIMENTS["confirm"]
    new = dataclasses.replace(base, name="extra", variants=base.variants[:1])
    monkeypatch.setitem(EXPERIMENTS, "extra", new)
    seen = {}

    def fake_run(specs, runs_dir, args, ray=None):
        seen.update(specs=specs, ray=ray, runs_dir=runs_dir)
        return ""

    monkeypatch.setattr(cli, "_run", fake_run)
    out = tmp_path / "out"
    argv = ["--experiment", "extra", "--first-seed", "41", "--seeds", "2", "--out", str(out), "--ray", "local",
            "--report-dir", str(tmp_path / "rep"), "--no-progress"]
    assert cli.main(argv) == 1  # nothing finished: no report, but the runs were handed to the runner
    assert seen["ray"] == "local" and [s.seed for s in seen["specs"]] == [41, 42]
    assert {s.env for s in seen["specs"]} == {"extra"} and seen["runs_dir"] == out / "runs"
    assert cli.main([*argv, "--report-only"]) == 1  # report-only starts nothing either
    assert "extra" in cli.build_parser().format_help()  # the help lists the registry


def test_every_flag_reaches_every_experiment(monkeypatch, tmp_path):
    _stand_in_learning_rates(monkeypatch)
    calls = []
    monkeypatch.setattr(cli, "_run", lambda specs, runs_dir, args, ray=None: calls.append((len(specs), ray)) or "")
    for name, exp in EXPERIMENTS.items():
        first = choose_seeds(exp, 1)[0]
        argv = ["--experiment", name, "--first-seed", str(first), "--seeds", "1", "--out", str(tmp_path / name),
                "--ray", "auto", "--no-progress"]
        assert cli.main(argv) == 1
        assert calls[-1] == (len(exp.variants), "auto")
    help_text = cli.build_parser().format_help()
    for name in EXPERIMENTS:
        assert name in help_text


# ------------------------------------------------------------------------------------------- run records
@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_the_typed_record_reads_the_committed_results_unchanged(path):
    for record in json.loads(path.read_text())["records"]:
        typed = RunRecord.from_dict(record)
        assert typed.to_dict() == record and list(typed.to_dict()) == list(record)
        assert typed.seed == record["seed"] and typed.val == record["val"]
    with pytest.raises(ValueError, match="lacks"):
        RunRecord.from_dict({"env": "x"})


# ------------------------------------------------------------------------------------------- verdicts
def test_one_verdict_function_numbers_and_an_enum():
    held = compare([0.3, 0.31, 0.29, 0.3], PairedRule(), bound=0.15)
    assert held.verdict is Verdict.HELD and held.as_dict()["verdict"] == "held"
    assert isinstance(held.mde, float) and held.n == 4 and held.ci95[0] > 0
    eq = compare([0.01, -0.02, 0.03, 0.0, -0.01], PairedRule(), bound=0.15)
    assert eq.verdict is Verdict.EQUIVALENT and verdict_text(eq.as_dict()) == "equivalent (within +-0.150)"
    assert compare([], PairedRule()).verdict is Verdict.NOT_TESTED
    assert compare([0.2], PairedRule()).verdict is Verdict.INCONCLUSIVE
    # the mechanism's classes are the same verdict under other labels
    for diffs in ([-0.3, -0.25, -0.35, -0.3], [0.3, 0.25, 0.35, 0.3], [0.01, -0.02, 0.0, 0.02, -0.01],
                  [0.4, -0.4, 0.3, -0.3]):
        c = classify(diffs)
        assert c["class"] == CHANGE_LABELS[compare(diffs, PairedRule(), 0.15).verdict] and c["verdict"] in (
            v.value for v in Verdict)
    assert mean_of([1.0, None, float("nan"), 3.0]) == 2.0 and mean_of([None]) is None


def test_finding_1_reads_its_share_rule(monkeypatch):
    import ragen_core.apps.reproduce.analysis as analysis

    monkeypatch.setattr(analysis, "CONTROL", ShareRule(share=0.5, min_seeds=2))
    assert analysis._criterion_verdict(2, 1, 0, 1)["verdict"] == "passed"
    monkeypatch.setattr(analysis, "CONTROL", ShareRule(share=0.8, min_seeds=5))
    assert analysis._criterion_verdict(2, 1, 0, 1)["verdict"] == "inconclusive"
    assert finding_collapse([])["collapse_sokoban"]["verdict"] == "not tested"


# ------------------------------------------------------------------------------------------- rule prose
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?")


def _numbers(lines: list[str]) -> set[str]:
    # names that contain digits are not numbers of a rule
    text = " ".join(lines).replace("H(Z|X)", "").replace("log N", "").replace("log P", "")
    return {m.lstrip("+-") for m in _NUMBER.findall(text)}


def _perturb(x, k=[0]):  # noqa: B006 - a counter shared by the calls of one perturbation
    """Every number of a rule object (or of PAPER) moved to a distinct odd value; structure kept."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        k[0] += 1
        return 600 + 7 * k[0]
    if isinstance(x, float):
        k[0] += 1
        return round(0.0113 + 0.0071 * k[0], 4)
    if isinstance(x, dict):
        return {key: _perturb(v) for key, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_perturb(v) for v in x)
    if dataclasses.is_dataclass(x):
        return dataclasses.replace(x, **{f.name: _perturb(getattr(x, f.name)) for f in dataclasses.fields(x)})
    return x


def test_rule_prose_changes_with_the_rule_objects():
    text = "\n".join(report._rules(RULES, PAPER))
    assert "+-0.150" in text and "at alpha 0.05" in text and ">= 80% of the seeds" in text
    wider = dataclasses.replace(RULES, paired=dataclasses.replace(RULES.paired,
                                                                  bounds={**RULES.paired.bounds, "margin_end": 0.2}))
    changed = "\n".join(report._rules(wider, PAPER))
    assert "+-0.200" in changed and "+-0.150" not in changed
    stricter = dataclasses.replace(RULES, control=ShareRule(share=0.9, min_seeds=10))
    assert ">= 90% of the seeds, with >= 10 seeds (>= 9 of 10)" in "\n".join(report._rules(stricter, PAPER))


def test_no_number_in_the_rule_prose_is_typed_by_hand(monkeypatch):
    """Every number of report._rules' output comes from a rule object, PAPER or the study's arms (top-p's rho,
    the quartile's share): moving every number of the rules, of PAPER and of the arms leaves none of the original
    numbers but the structural ones (the rules' own numbering, "0" of "excludes 0" and of step 0)."""
    real = _numbers(report._rules(RULES, PAPER))
    monkeypatch.setattr(report, "_arm_value", lambda arm, key: 0.0777 if arm == "top_p" else 0.0333)
    moved = _numbers(report._rules(_perturb(RULES), _perturb(PAPER)))
    structural = {"0", "1", "2", "3", "4"}
    assert (real & moved) - structural == set()
    # and the paper's numbers in the report come from PAPER
    paper_text = "\n".join(report._section_paper())
    for v in PAPER["spearman"].values():
        assert f"{v:+.2f}" in paper_text


def test_warm_starts_go_to_one_cache_shared_by_studies_unless_told_otherwise(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(cli, "_run", lambda specs, runs_dir, args, ray=None: seen.append(specs) or "")
    monkeypatch.setenv("RAGEN2_CACHE", str(tmp_path / "home-cache"))
    base = ["--experiment", "confirm", "--seeds", "1", "--no-progress"]
    for out in ("one", "two"):  # two studies in different folders: one cache
        assert cli.main([*base, "--out", str(tmp_path / out)]) == 1
    own = tmp_path / "own"
    assert cli.main([*base, "--out", str(tmp_path / "three"), "--warm-cache", str(own)]) == 1

    def caches(specs):
        return {o for s in specs for o in s.overrides if o.startswith("warm_start.cache_dir=")}

    shared = f'warm_start.cache_dir="{tmp_path / "home-cache" / "warm_starts"}"'
    assert caches(seen[0]) == caches(seen[1]) == {shared}
    assert caches(seen[2]) == {f'warm_start.cache_dir="{own}"'}
