"""`ragen reproduce`: the study's composition, rank statistics against independent references, reading run records
(probe rows included), resumability, `--report-only` with missing runs, and Ray scheduling on a single-node Ray
instance. The findings and the report are tested in test_reproduce_analysis.py."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest
from counted_stats import pearson_loop, ranks_by_counting

from ragen_core.apps.reproduce.analysis import (
    EARLY_FRACTION,
    average_ranks,
    early_value,
    late_value,
    peak_success,
    spearman,
    spearman_ci,
)
from ragen_core.apps.reproduce.cli import main as reproduce_main
from ragen_core.apps.reproduce.runner import (
    execute_run,
    execute_warm_run,
    finished_records,
    read_run,
    run_local,
    run_ray,
)
from ragen_core.apps.reproduce.study import (
    ENVS,
    TUNING_SEEDS,
    RunSpec,
    build_study,
    find_configs_dir,
    study_seeds,
)
from ragen_core.training.config import load_config

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------- statistics
def test_average_ranks_match_counting_with_ties():
    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.choice([0.0, 0.5, 1.0, 2.0, 3.5]) for _ in range(rng.randint(1, 12))]
        assert average_ranks(xs) == ranks_by_counting(xs)


def test_spearman_without_ties_equals_the_d_squared_formula():
    rng = random.Random(1)
    for n in range(3, 12):
        for _ in range(20):
            x = rng.sample(range(100), n)
            y = rng.sample(range(100), n)
            rx = {v: i + 1 for i, v in enumerate(sorted(x))}
            ry = {v: i + 1 for i, v in enumerate(sorted(y))}
            d2 = sum((rx[a] - ry[b]) ** 2 for a, b in zip(x, y))
            assert spearman(x, y) == pytest.approx(1 - 6 * d2 / (n * (n * n - 1)), abs=1e-12)


def test_spearman_with_ties_is_pearson_of_counted_ranks():
    rng = random.Random(2)
    for _ in range(100):
        n = rng.randint(3, 10)
        x = [rng.choice([0.1, 0.2, 0.3]) for _ in range(n)]
        y = [rng.random() for _ in range(n)]
        if len(set(x)) == 1:
            assert math.isnan(spearman(x, y))
            continue
        assert spearman(x, y) == pytest.approx(pearson_loop(ranks_by_counting(x), ranks_by_counting(y)), abs=1e-12)


def test_spearman_edge_cases():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1, 2]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="pair up"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="NaN"):
        average_ranks([1.0, float("nan")])


def test_spearman_interval_by_hand():
    # rho = 0.5, n = 28: z = atanh(0.5) = 0.549306, SE = 1.03 / 5 = 0.206, z_0.975 = 1.959964.
    lo, hi = spearman_ci(0.5, 28)
    assert lo == pytest.approx(math.tanh(0.549306 - 1.959964 * 0.206), abs=1e-5)
    assert hi == pytest.approx(math.tanh(0.549306 + 1.959964 * 0.206), abs=1e-5)
    assert all(math.isnan(v) for v in spearman_ci(0.5, 3))
    assert all(math.isnan(v) for v in spearman_ci(math.nan, 30))


# ------------------------------------------------------------------------------------------- synthetic runs
def _mi_row(step, *, token_entropy, cond, marg, mi_seq, retrieval, zscore, P=8):
    ub = math.log(P)
    return {"step": step, "collapse/token_entropy": token_entropy, "collapse/cond_entropy_est": cond,
            "collapse/marginal_entropy_est": marg, "collapse/mi_seq_est": mi_seq, "collapse/mi_upper_bound": ub,
            "collapse/retrieval_acc": retrieval, "collapse/retrieval_chance": 1 / P, "collapse/mi_zscore_ema": zscore,
            "collapse/regime": "template_collapse" if cond >= 0.1 and mi_seq / ub < 0.1 else "compressed_reasoning"}


def write_synthetic_run(run_dir: Path, *, steps=20, val=(0.1, 0.3, 0.5), collapse=False, rv_het=1.5, quality=1.0,
                        probe=False):
    """A metrics.jsonl like the trainer's: warm start, step-0 validation, steps 1..steps with MI every 5 (and the
    held-out probe at step 0 and every 10 steps when `probe`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 60.0}, {"step": 0, "val/success": val[0]}]
    if probe:
        rows.append({"step": 0, "probe/retrieval_margin": 0.6, "probe/token_entropy": 1.0,
                     "probe/cond_entropy_est": 0.5, "probe/retrieval_chance": 1 / 32, "perf/probe_s": 0.4})
    evals = dict(zip(range(0, steps + 1, steps // (len(val) - 1)), val))
    for s in range(1, steps + 1):
        row = {"step": s, "perf/step_s": 3.0, "rollout/success": 0.2, "filter/rv_heterogeneity": rv_het + s}
        if s % 5 == 0:
            frac = s / steps
            if collapse:  # entropy drifts up (never 2x), the reasoning stops depending on the input
                row.update(_mi_row(s, token_entropy=0.05 + 0.03 * frac, cond=0.05 + 0.5 * frac, marg=0.1 + 0.5 * frac,
                                   mi_seq=math.log(8) * (1 - 0.95 * frac), retrieval=1 - 0.85 * frac, zscore=quality))
            else:
                row.update(_mi_row(s, token_entropy=0.05, cond=0.03, marg=0.08, mi_seq=math.log(8) * 0.98,
                                   retrieval=1.0, zscore=quality))
        if probe and s % 10 == 0:
            row.update({"probe/retrieval_margin": 0.6 - 0.02 * s, "probe/token_entropy": 1.0,
                        "probe/cond_entropy_est": float("nan"), "probe/retrieval_chance": 1 / 32, "perf/probe_s": 0.5})
        if s in evals:
            row["val/success"] = evals[s]
            row["perf/eval_s"] = 1.0
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _spec(env, arm, seed):
    return RunSpec(env, arm, seed, "unused.toml", ())


def test_read_run_extracts_the_curves(tmp_path):
    write_synthetic_run(tmp_path / "r", val=(0.1, 0.3, 0.5), rv_het=1.5)
    rec = read_run(tmp_path / "r", _spec("sokoban", "top_p", 0))
    assert [list(v) for v in rec["val"]] == [[0, 0.1], [10, 0.3], [20, 0.5]]
    assert [m["step"] for m in rec["mi"]] == [5, 10, 15, 20]
    assert rec["rv_heterogeneity_first"] == 2.5  # the step-1 batch
    assert rec["steps"] == 20 and rec["sft_s"] == 60.0 and rec["rl_s"] == 20 * 3.0 + 2 * 1.0
    assert peak_success(rec) == 0.5
    # Early = steps <= 5 (a quarter of 20), late = steps >= 15.
    assert early_value(rec, "retrieval_acc") == 1.0
    assert late_value(rec, "mi_zscore_ema") == 1.0
    assert rec["probe"] == []  # no probe in this run


def test_read_run_extracts_the_probe_rows(tmp_path):
    write_synthetic_run(tmp_path / "r", probe=True)
    rec = read_run(tmp_path / "r", _spec("collapse_sokoban", "no_filter", 0))
    assert [p["step"] for p in rec["probe"]] == [0, 10, 20]
    assert [p["retrieval_margin"] for p in rec["probe"]] == pytest.approx([0.6, 0.4, 0.2])
    assert rec["probe"][0]["probe_s"] == 0.4 and rec["probe"][1]["retrieval_chance"] == 1 / 32
    assert rec["probe"][1]["cond_entropy_est"] is None  # a non-finite value is read as missing, not NaN
    assert rec["probe"][0]["mi_seq_norm"] is None  # a key the run did not log
    assert early_value(rec, "retrieval_margin", source="probe") == pytest.approx(0.6)  # steps <= 5


# ------------------------------------------------------------------------------------------- the study
@pytest.fixture
def configs_dir(tmp_path):
    """The checkout's configs/, with a stand-in (a copy of the learning config) for a collapse-prone config that
    is not there yet: the study's composition does not depend on the configs' contents."""
    real = ROOT / "configs"
    try:
        return find_configs_dir(real)
    except FileNotFoundError:
        folder = tmp_path / "configs"
        folder.mkdir()
        for f in real.glob("*.toml"):
            (folder / f.name).write_text(f.read_text())
        stand_ins = (("collapse_sokoban", "sokoban_tiny.toml"), ("collapse_frozenlake", "frozenlake_tiny.toml"))
        for env, learning in stand_ins:
            if not (folder / ENVS[env][0]).is_file():
                (folder / ENVS[env][0]).write_text((real / learning).read_text())
        return find_configs_dir(folder)


def test_full_and_quick_studies(tmp_path, configs_dir):
    seeds = study_seeds(None, quick=False)
    assert seeds == [0, 1, 2, 3, 4]
    full = build_study(seeds, False, configs_dir, tmp_path / "cache")
    # 5 seeds x (collapse Sokoban 4 arms + collapse FrozenLake 3 + Sokoban 4 + FrozenLake 2) = 65 runs.
    assert len(full) == 5 * 13 == 65 and len({s.name for s in full}) == 65
    arms = {env: sorted({s.arm for s in full if s.env == env}) for env in ENVS}
    assert arms == {"collapse_sokoban": ["entropy_bonus", "no_filter", "random", "top_p"],
                    "collapse_frozenlake": ["no_filter", "random", "top_p"],
                    "sokoban": ["no_filter", "rv_bottom_quartile", "rv_top_quartile", "top_p"],
                    "frozenlake": ["no_filter", "top_p"]}
    # The first two runs need different warm starts (2 workers never wait on one another at the start).
    assert (full[0].env, full[0].seed) != (full[1].env, full[1].seed)
    for spec in full:
        cfg = load_config(spec.config, list(spec.overrides))
        assert cfg.run.seed == spec.seed and cfg.warm_start.cache_dir == str(tmp_path / "cache")
        assert cfg.run.max_minutes == 0  # steps, not the machine's speed, decide where a run ends
        assert Path(spec.config).name == ENVS[spec.env][0]
        early = int(EARLY_FRACTION * cfg.run.steps)
        if spec.env in ("sokoban", "frozenlake"):
            assert cfg.mi.probe_prompts == 32 and cfg.mi.probe_every == 10  # the probe, on the learning configs
            # top-p and no filter measure only finding 2's early window (and the end): it must cover the window;
            # the RV quartiles measure everything (finding 4 compares them at any step)
            window = early if spec.arm in ("top_p", "no_filter") else 0
            assert (cfg.mi.probe_until, cfg.mi.until, cfg.eval.until) == (window,) * 3, spec.name
        else:
            # findings 1 and 3 read the collapse configs' whole probe curve and validations, the per-run table
            # the early window of their in-batch MI
            assert (cfg.mi.probe_until, cfg.eval.until, cfg.mi.until) == (0, 0, early), spec.name
        if spec.arm in ("no_filter", "entropy_bonus"):
            assert cfg.filter.enabled is False
        if spec.arm == "top_p":
            assert cfg.filter.enabled and cfg.filter.spec.strategy == "top_p" and cfg.filter.spec.value == 0.9
        if spec.arm == "random":
            assert cfg.filter.enabled and cfg.filter.spec.strategy == "random" and cfg.filter.spec.value == 0.9
        if spec.arm.startswith("rv_"):
            assert cfg.filter.enabled and cfg.filter.spec.strategy == "top_k" and cfg.filter.spec.value == 0.25
            assert cfg.filter.spec.order == ("largest" if "top" in spec.arm else "smallest")
        if spec.arm == "entropy_bonus":
            assert cfg.algo.entropy_coef == 1.0
    quick = build_study(study_seeds(None, quick=True), True, configs_dir, tmp_path / "cache")
    assert len(quick) == 13 and {s.seed for s in quick} == {0}
    for spec in quick:
        base = load_config(spec.config, [])
        quick_cfg = load_config(spec.config, list(spec.overrides))
        assert quick_cfg.run.steps == max(base.run.steps // 3, 1)
        assert quick_cfg.warm_start.sft_episodes == max(base.warm_start.sft_episodes // 3, 1)
    assert len(build_study(study_seeds(7, quick=False), False, configs_dir, tmp_path)) == 7 * 13


def test_filter_arms_do_not_inherit_the_base_filter(tmp_path, configs_dir):
    """A base config that ships with its filter off still gets real top-p, random and quartile arms."""
    folder = tmp_path / "filter_off"
    folder.mkdir()
    for config, _, _ in ENVS.values():
        text = (configs_dir / config).read_text()
        if "[filter]\n" in text:
            text = text.replace("[filter]\n", "[filter]\nenabled = false\n", 1)
        else:
            text += "\n[filter]\nenabled = false\n"
        (folder / config).write_text(text)
        assert load_config(folder / config, []).filter.enabled is False
    for spec in build_study([0], True, folder, tmp_path / "cache"):
        cfg = load_config(spec.config, list(spec.overrides))
        assert cfg.filter.enabled == (spec.arm not in ("no_filter", "entropy_bonus")), spec.name


def test_study_errors(tmp_path, configs_dir):
    with pytest.raises(FileNotFoundError, match="--configs-dir"):
        find_configs_dir(tmp_path)
    with pytest.raises(ValueError, match="unknown env"):
        build_study([0], True, configs_dir, tmp_path, envs=("chess",))
    with pytest.raises(ValueError, match="distinct"):
        build_study([0, 0], True, configs_dir, tmp_path)
    with pytest.raises(ValueError, match="tuning seeds"):
        build_study([0, 150], False, configs_dir, tmp_path)
    with pytest.raises(ValueError, match="tuning seeds"):
        study_seeds(101, quick=False)
    assert study_seeds(100, quick=False)[-1] == TUNING_SEEDS.start - 1
    with pytest.raises(ValueError, match=">= 1"):
        study_seeds(0, quick=True)


def test_first_seed_shifts_the_range_and_never_reaches_the_tuning_seeds():
    assert study_seeds(5, quick=False, first=20) == [20, 21, 22, 23, 24]
    assert study_seeds(None, quick=True, first=7) == [7]
    assert study_seeds(3, quick=False, first=200) == [200, 201, 202]  # above the tuning range is fine
    assert study_seeds(5, quick=False, first=95) == [95, 96, 97, 98, 99]
    for n, first in ((5, 96), (1, 100), (3, 150), (1, 199), (300, 0)):
        with pytest.raises(ValueError, match="tuning seeds"):
            study_seeds(n, quick=False, first=first)
    with pytest.raises(ValueError, match="--first-seed"):
        study_seeds(5, quick=False, first=-1)


def _fake_execute(spec, runs_dir):
    """Stands in for a training run: writes a synthetic run and its done.json like execute_run."""
    d = Path(runs_dir) / spec.name
    write_synthetic_run(d, val=(0.1, 0.2 + 0.1 * spec.seed, 0.3))
    record = read_run(d, spec)
    (d / "done.json").write_text(json.dumps(record))
    return record


def test_local_runs_are_resumable_and_failures_are_collected(tmp_path):
    specs = [_spec("sokoban", arm, s) for arm, s in itertools.product(("top_p", "no_filter"), (0, 1))]
    calls = []

    def execute(spec, runs_dir):
        calls.append(spec.name)
        return _fake_execute(spec, runs_dir)

    records = run_local(specs, tmp_path, workers=2, progress=False, execute=execute)
    assert [r["name"] for r in records] == [s.name for s in specs]
    assert sorted(calls) == sorted(s.name for s in specs)
    calls.clear()
    assert len(run_local(specs, tmp_path, workers=2, progress=False, execute=execute)) == 4
    assert calls == []  # every run was done: nothing re-ran

    def flaky(spec, runs_dir):
        if spec.seed == 1:
            raise RuntimeError("boom")
        return _fake_execute(spec, runs_dir)

    with pytest.raises(RuntimeError, match="frozenlake-top_p-s1: boom"):
        run_local([_spec("frozenlake", "top_p", s) for s in (0, 1)], tmp_path, progress=False, execute=flaky)
    done, missing = finished_records([_spec("frozenlake", "top_p", s) for s in (0, 1)], tmp_path)
    assert [r["name"] for r in done] == ["frozenlake-top_p-s0"] and missing == ["frozenlake-top_p-s1"]


@pytest.mark.slow
def test_ray_tasks_on_a_single_node_instance(tmp_path):
    pytest.importorskip("ray")
    specs = [_spec("sokoban", "top_p", s) for s in (0, 1, 2)]

    def execute(spec, runs_dir):  # a closure: Ray pickles it by value (the test module is not importable there)
        d = Path(runs_dir) / spec.name
        d.mkdir(parents=True, exist_ok=True)
        record = {"name": spec.name, "env": spec.env, "arm": spec.arm, "seed": spec.seed,
                  "pid": __import__("os").getpid()}
        (d / "done.json").write_text(json.dumps(record))
        return record

    records = run_ray(specs, tmp_path, "local", progress=False, execute=execute,
                      init_kwargs={"num_cpus": 1, "include_dashboard": False})
    assert [r["name"] for r in records] == [s.name for s in specs]
    assert all(r["pid"] != __import__("os").getpid() for r in records)  # ran in Ray workers, not here
    assert all((tmp_path / s.name / "done.json").is_file() for s in specs)


def _bandit_config(tmp_path):
    config = tmp_path / "bandit.toml"
    config.write_text("\n".join([
        "[run]", "steps = 2", "device = \"cpu\"", "[model]", "path = \"tiny\"", "[env]", "id = \"ragen/Bandit-v0\"",
        "[rollout]", "groups = 2", "group_size = 4", "max_turns = 1", "max_new_tokens = 24", "system_prompt = false",
        "[algo]", "name = \"grpo\"", "lr = 1e-3", "mini_batch_size = 8", "micro_batch_size = 8",
        "[mi]", "every = 1", "[eval]", "every = 2", "episodes = 4",
        "[warm_start]", "sft_episodes = 8", "batch_size = 8", "epochs = 1"]) + "\n")
    return config


def _outputs(run_dir):
    """What a run computed: its metrics without the clocks, its validation outcomes and its sampled rollouts."""
    rows = [{k: v for k, v in json.loads(x).items() if not k.startswith("perf/")}
            for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return rows, (run_dir / "val_outcomes.jsonl").read_text(), (run_dir / "rollouts.jsonl").read_text()


@pytest.mark.slow
def test_a_real_training_run_through_the_runner(tmp_path):
    config = _bandit_config(tmp_path)
    spec = RunSpec("bandit", "top_p", 0, str(config), ("run.seed=0", "run.progress=false",
                                                       f'warm_start.cache_dir="{tmp_path / "cache"}"'))
    record = execute_run(spec, tmp_path / "runs")
    assert record["steps"] == 2 and [s for s, _ in record["val"]] == [0, 2]
    assert [m["step"] for m in record["mi"]] == [1, 2] and "rv_heterogeneity_first" in record  # None if V = 0
    assert (tmp_path / "runs" / spec.name / "done.json").is_file()
    assert list((tmp_path / "cache").glob("*.pt"))
    assert execute_run(spec, tmp_path / "runs") == json.loads(json.dumps(record))  # read back, not re-run


@pytest.mark.slow
def test_a_run_forked_from_the_warm_process_is_the_fresh_process_run(tmp_path):
    """The study's local runs are forked from a process that imported torch and the trainer once: the same run as a
    fresh ``python -m ragen_core.apps.train`` (every metric, validation outcome and sampled rollout), its log
    written, and a failing run reported with its exit status as before."""
    config = _bandit_config(tmp_path)
    spec = RunSpec("bandit", "top_p", 0, str(config), ("run.seed=0", "run.progress=false", "warm_start.cache_dir="))
    fresh = execute_run(spec, tmp_path / "fresh")
    forked = execute_warm_run(spec, tmp_path / "forked")
    assert _outputs(tmp_path / "fresh" / spec.name) == _outputs(tmp_path / "forked" / spec.name)
    assert {k: v for k, v in forked.items() if k not in ("wall_s", "phases", "sft_s", "rl_s", "probe")} == \
        {k: v for k, v in fresh.items() if k not in ("wall_s", "phases", "sft_s", "rl_s", "probe")}
    assert "Files:" in (tmp_path / "forked" / spec.name / "train.log").read_text()
    assert forked["phases"]["other_s"] is not None
    bad = RunSpec("bandit", "top_p", 1, str(config), ("run.seed=1", "run.progress=false", "algo.no_such_key=1"))
    with pytest.raises(RuntimeError, match=r"failed \(exit 2\)"):
        execute_warm_run(bad, tmp_path / "forked")
    assert "no_such_key" in (tmp_path / "forked" / bad.name / "train.log").read_text()


def test_cli_report_only_lists_missing_runs_and_errors(tmp_path, configs_dir, capsys):
    out = tmp_path / "study"
    specs = build_study([0], True, configs_dir, out / "warm_cache")
    for spec in specs[:4]:
        _fake_execute(spec, out / "runs")
    (out / "runs" / specs[4].name).mkdir(parents=True)
    (out / "runs" / specs[4].name / "done.json").write_text("{not json")  # a damaged run folder
    argv = ["--quick", "--out", str(out), "--configs-dir", str(configs_dir), "--no-progress"]
    assert reproduce_main([*argv, "--report-only"]) == 0
    text = (out / "reproduction.md").read_text()
    assert f"{len(specs) - 4} missing" in text and specs[-1].name in text
    assert f"{specs[4].name} (unreadable: JSONDecodeError)" in text
    assert "not tested" in text  # the findings without their runs say so
    assert reproduce_main(["--seeds", "0", "--out", str(out), "--configs-dir", str(configs_dir)]) == 2
    assert reproduce_main(["--seeds", "101", "--out", str(out), "--configs-dir", str(configs_dir)]) == 2
    assert "tuning seeds" in capsys.readouterr().err
    assert reproduce_main(["--out", str(out), "--configs-dir", str(tmp_path)]) == 2
    assert "--configs-dir" in capsys.readouterr().err
    empty = ["--out", str(tmp_path / "empty"), "--configs-dir", str(configs_dir), "--report-only", "--no-progress"]
    capsys.readouterr()
    assert reproduce_main(empty) == 1
    err = capsys.readouterr().err
    full = build_study(list(range(5)), False, configs_dir, tmp_path / "empty" / "warm_cache")
    assert f"{len(full)} of {len(full)} runs missing" in err and full[0].name in err  # it lists what is missing
    assert not (tmp_path / "empty").exists()  # and creates no folder


def test_cli_first_seed_reports_the_shifted_runs(tmp_path, configs_dir, capsys):
    out = tmp_path / "study"
    specs = build_study([20], True, configs_dir, out / "warm_cache")
    for spec in specs:
        _fake_execute(spec, out / "runs")
    argv = ["--quick", "--first-seed", "20", "--out", str(out), "--configs-dir", str(configs_dir), "--no-progress"]
    assert reproduce_main([*argv, "--report-only"]) == 0
    assert "seeds 20..20" in capsys.readouterr().err
    results = json.loads((out / "reproduction" / "results.json").read_text())
    assert results["header"]["seeds"] == [20] and "--first-seed 20" in results["header"]["command"]
    assert results["header"]["n_missing"] == 0
    assert reproduce_main([*argv[:2], "120", *argv[3:], "--report-only"]) == 2  # 120 is a tuning seed
    assert "tuning seeds" in capsys.readouterr().err


def test_a_platform_without_forkserver_runs_each_run_in_a_fresh_process(tmp_path, monkeypatch):
    from ragen_core.apps.reproduce import runner

    seen = []
    monkeypatch.setattr(runner.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    monkeypatch.setattr(runner, "execute_run", lambda spec, runs_dir, warm=False: seen.append(warm) or {})
    runner.execute_warm_run(_spec("bandit", "top_p", 0), tmp_path)
    monkeypatch.setattr(runner.multiprocessing, "get_all_start_methods", lambda: ["fork", "spawn", "forkserver"])
    runner.execute_warm_run(_spec("bandit", "top_p", 0), tmp_path)
    assert seen == [False, True]
