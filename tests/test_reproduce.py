"""`ragen reproduce`: the study's configuration, its statistics against independent references, the findings on
synthetic metric files, the report, resumability, and Ray scheduling on a single-node Ray instance."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from ragen_core.config import load_config
from ragen_core.reproduce.analysis import (
    analyse,
    average_ranks,
    early_value,
    finding_collapse,
    finding_filtering,
    late_value,
    mi_beats_entropy,
    peak_success,
    spearman,
    spearman_ci,
    verdict,
)
from ragen_core.reproduce.cli import main as reproduce_main
from ragen_core.reproduce.report import FIGURES, write_report
from ragen_core.reproduce.runner import execute_run, finished_records, read_run, run_local, run_ray
from ragen_core.reproduce.study import ARMS, ENVS, RunSpec, build_study, find_configs_dir

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------- statistics
def _ranks_by_counting(xs):
    """Independent reference: rank = #smaller + (#equal + 1) / 2."""
    return [sum(y < x for y in xs) + (sum(y == x for y in xs) + 1) / 2 for x in xs]


def _pearson(a, b):
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return num / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


def test_average_ranks_match_counting_with_ties():
    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.choice([0.0, 0.5, 1.0, 2.0, 3.5]) for _ in range(rng.randint(1, 12))]
        assert average_ranks(xs) == _ranks_by_counting(xs)


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
        assert spearman(x, y) == pytest.approx(_pearson(_ranks_by_counting(x), _ranks_by_counting(y)), abs=1e-12)


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


def test_verdict_reads_the_interval():
    assert verdict({"mean": 0.1, "ci95": [0.01, 0.2]}) == "helped"
    assert verdict({"mean": -0.1, "ci95": [-0.2, -0.01]}) == "hurt"
    assert verdict({"mean": 0.1, "ci95": [-0.1, 0.3]}) == "no clear difference"
    assert verdict({"mean": 0.1, "ci95": [None, None]}) == "higher (1 seed)"
    assert verdict({"mean": 0.1, "ci95": [0.01, 0.2]}, "top higher", "bottom higher") == "top higher"


def test_mi_beats_entropy_compares_the_size_of_rho():
    def corr(mi, ent):
        return {"mi_zscore_ema": {"rho": mi}, "mi_seq_est": {"rho": None}, "cond_entropy_est": {"rho": ent},
                "marginal_entropy_est": {"rho": None}}

    assert mi_beats_entropy(corr(0.39, -0.14)) is True  # the paper
    assert mi_beats_entropy(corr(0.60, -0.82)) is False  # a strong negative entropy correlation predicts too
    assert mi_beats_entropy(corr(None, -0.5)) is None


# ------------------------------------------------------------------------------------------- synthetic runs
def _mi_row(step, *, token_entropy, cond, marg, mi_seq, retrieval, zscore, P=8):
    ub = math.log(P)
    return {"step": step, "collapse/token_entropy": token_entropy, "collapse/cond_entropy_est": cond,
            "collapse/marginal_entropy_est": marg, "collapse/mi_seq_est": mi_seq, "collapse/mi_upper_bound": ub,
            "collapse/retrieval_acc": retrieval, "collapse/retrieval_chance": 1 / P, "collapse/mi_zscore_ema": zscore,
            "collapse/regime": "template_collapse" if cond >= 0.1 and mi_seq / ub < 0.1 else "compressed_reasoning"}


def write_synthetic_run(run_dir: Path, *, steps=20, val=(0.1, 0.3, 0.5), collapse=False, rv_het=1.5, quality=1.0):
    """A metrics.jsonl like the trainer's: warm start, step-0 validation, steps 1..steps with MI every 5."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "sft/loss_last": 0.1, "perf/sft_s": 60.0}, {"step": 0, "val/success": val[0]}]
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
        if s in evals:
            row["val/success"] = evals[s]
            row["perf/eval_s"] = 1.0
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _spec(env, arm, seed):
    return RunSpec(env, arm, seed, "unused.toml", ())


def synthetic_study(root: Path, seeds=(0, 1, 2)):
    """Runs whose findings are known by construction; returns the records."""
    records = []
    for seed in seeds:
        plan = {
            ("sokoban", "top_p"): {"val": (0.1, 0.5 + 0.01 * seed, 0.6 + 0.01 * seed), "quality": 0.9},
            ("sokoban", "no_filter"): {"val": (0.1, 0.4 + 0.01 * seed, 0.45 + 0.01 * seed), "quality": 0.6},
            ("sokoban", "random"): {"val": (0.1, 0.4, 0.42 + 0.01 * seed), "quality": 0.5},
            ("sokoban", "rv_top_quartile"): {"val": (0.1, 0.3, 0.35 + 0.01 * seed), "quality": 0.4},
            ("sokoban", "rv_bottom_quartile"): {"val": (0.1, 0.12, 0.1 + 0.01 * seed), "quality": 0.1},
            ("sokoban", "entropy_bonus"): {"val": (0.1, 0.05, 0.02 + 0.001 * seed), "quality": 0.0, "collapse": True},
            ("frozenlake", "top_p"): {"val": (0.1, 0.5, 0.5 + 0.01 * seed), "quality": 0.7, "rv_het": -0.7},
            ("frozenlake", "no_filter"): {"val": (0.1, 0.52, 0.55 + 0.01 * seed), "quality": 0.8, "rv_het": -0.7},
            ("frozenlake", "random"): {"val": (0.1, 0.5, 0.52 + 0.01 * seed), "quality": 0.75, "rv_het": -0.7},
        }
        for (env, arm), kw in plan.items():
            d = root / f"{env}-{arm}-s{seed}"
            write_synthetic_run(d, val=kw["val"], collapse=kw.get("collapse", False), rv_het=kw.get("rv_het", 0.5),
                                quality=kw["quality"])
            records.append(read_run(d, _spec(env, arm, seed)))
    return records


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


def test_findings_on_a_synthetic_study(tmp_path):
    records = synthetic_study(tmp_path)
    a = analyse(records)
    c = a["collapse"]
    assert c["shown"] is True and c["mi_fell"] is True and c["mi_first_seeds"] == 3
    # Retrieval 1 - 0.85 f: half the margin over chance 1/8 is lost at f >= 0.515, the measurement at step 15.
    assert [o["mi_drop_step"] for o in c["arms"]["entropy_bonus"]["order"]] == [15, 15, 15]
    assert [o["entropy_alarm_step"] for o in c["arms"]["entropy_bonus"]["order"]] == [None] * 3
    assert c["retrieval_margin_kept"]["top_p"] == pytest.approx(1.0)
    eb = c["arms"]["entropy_bonus"]
    # Late quarter = measurements at steps 15 and 20: retrieval 1 - 0.85 * (0.75, 1.0) -> mean 0.25625.
    assert eb["retrieval_acc"]["end"] == pytest.approx(1 - 0.85 * 0.875)
    corr = a["correlations"]
    # The early MI-ZScore-EMA is the run's `quality`, which orders final success except within ties.
    finals = [(r["late"], r) for r in a["runs"]]
    assert len(finals) == 27
    xs = [r["early"]["mi_zscore_ema"] for r in a["runs"]]
    ys = [r["final"] for r in a["runs"]]
    assert corr["mi_zscore_ema"]["rho"] == pytest.approx(_pearson(_ranks_by_counting(xs), _ranks_by_counting(ys)))
    assert corr["mi_zscore_ema"]["rho"] > 0.8
    f = a["filtering"]
    sok = f["sokoban"]
    # Peaks: top-p 0.6 + 0.01 s, none 0.45 + 0.01 s: a constant +0.15 by seed (zero-width interval).
    assert sok["differences"]["top_p-no_filter"]["mean"] == pytest.approx(0.15)
    assert sok["rv_heterogeneity"]["mean"] == pytest.approx(1.5)
    assert sok["prediction"] == {"predicted_helps": True, "outcome": "helped", "held": True, "threshold": 1.0}
    fl = f["frozenlake"]
    assert fl["rv_heterogeneity"]["mean"] == pytest.approx(0.3)
    assert fl["differences"]["top_p-no_filter"]["mean"] == pytest.approx(-0.05)
    assert fl["prediction"]["predicted_helps"] is False and fl["prediction"]["held"] is True
    q = a["quartiles"]
    assert q["top_minus_bottom_peak"]["mean"] == pytest.approx(0.36 - 0.12)  # top 0.35 + 0.01 s, bottom 0.12
    assert q["rv_top_quartile"]["peak"]["values"] == pytest.approx([0.35, 0.36, 0.37])


def test_collapse_is_not_claimed_when_entropy_falls(tmp_path):
    d = tmp_path / "sokoban-entropy_bonus-s0"
    write_synthetic_run(d, collapse=True)
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if "collapse/token_entropy" in r:
            r["collapse/token_entropy"] = 0.05 * (1 - r["step"] / 25)  # entropy falls with the MI
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_synthetic_run(tmp_path / "h")
    records = [read_run(d, _spec("sokoban", "entropy_bonus", 0)),
               read_run(tmp_path / "h", _spec("sokoban", "top_p", 0))]
    out = finding_collapse(records)
    assert out["shown"] is False and out["mi_fell"] is True  # entropy fell 2x at the MI drop: a dashboard sees it


def test_collapse_is_not_claimed_when_entropy_explodes_first(tmp_path):
    """Uniform noise also ends at high H and low MI; if entropy moved first, MI was not the only witness."""
    d = tmp_path / "sokoban-entropy_bonus-s0"
    write_synthetic_run(d, collapse=True)
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if "collapse/token_entropy" in r:
            r["collapse/token_entropy"] = 0.05 * 10 ** (r["step"] / 10)  # 0.16 at step 5 (start), 0.5 at 10
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_synthetic_run(tmp_path / "h")
    out = finding_collapse([read_run(d, _spec("sokoban", "entropy_bonus", 0)),
                            read_run(tmp_path / "h", _spec("sokoban", "top_p", 0))])
    order = out["arms"]["entropy_bonus"]["order"][0]
    assert order["entropy_alarm_step"] == 10 and order["mi_drop_step"] == 15
    assert out["mi_fell"] is True and out["shown"] is False


def test_one_seed_gives_no_interval_and_says_so(tmp_path):
    records = synthetic_study(tmp_path, seeds=(0,))
    f = finding_filtering(records)
    assert f["sokoban"]["differences"]["top_p-no_filter"]["ci95"] == [None, None]
    assert f["sokoban"]["prediction"]["outcome"] == "higher (1 seed)"


def test_report_is_written_with_every_figure(tmp_path):
    records = synthetic_study(tmp_path / "runs")
    header = {"mode": "full", "command": "ragen reproduce", "seeds": [0, 1, 2], "n_runs": len(records), "n_missing": 0,
              "missing": [], "core_minutes": 12.0, "machine": "test",
              "arms": {k: {"overrides": list(v.overrides), "purpose": v.purpose} for k, v in ARMS.items()}}
    path = write_report({"analysis": analyse(records), "records": records}, tmp_path / "report", header)
    text = path.read_text()
    for fig in FIGURES:
        assert (tmp_path / "report" / "reproduction" / fig).stat().st_size > 1000, fig
        assert f"reproduction/{fig}" in text
    assert "+0.39" in text and "21.1" in text  # the paper's numbers beside ours
    assert "**Held.**" in text
    data = json.loads((tmp_path / "report" / "reproduction" / "results.json").read_text())
    assert data["analysis"]["filtering"]["sokoban"]["prediction"]["held"] is True


# ------------------------------------------------------------------------------------------- the study
def test_full_and_quick_studies(tmp_path):
    configs = find_configs_dir()
    full = build_study([0, 1, 2], False, configs, tmp_path / "cache")
    assert len(full) == 3 * sum(len(arms) for _, arms in ENVS.values()) == 27
    assert len({s.name for s in full}) == 27
    # The first two runs need different warm starts (2 workers never wait on one another at the start).
    assert (full[0].env, full[0].seed) != (full[1].env, full[1].seed)
    for spec in full:
        cfg = load_config(spec.config, list(spec.overrides))
        assert cfg.run.seed == spec.seed and cfg.warm_start.cache_dir == str(tmp_path / "cache")
        if spec.arm == "no_filter":
            assert cfg.filter.enabled is False
        if spec.arm == "random":
            assert cfg.filter.strategy == "random" and cfg.filter.value == 0.9
        if spec.arm.startswith("rv_"):
            assert cfg.filter.strategy == "top_k" and cfg.filter.value == 0.25
            assert cfg.filter.order == ("largest" if "top" in spec.arm else "smallest")
        if spec.arm == "entropy_bonus":
            assert cfg.algo.entropy_coef > 0.01
    quick = build_study([0], True, configs, tmp_path / "cache")
    assert len(quick) == 9
    for spec in quick:
        base = load_config(spec.config, [])
        assert load_config(spec.config, list(spec.overrides)).run.steps == base.run.steps // 3


def test_study_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="--configs-dir"):
        find_configs_dir(tmp_path)
    with pytest.raises(ValueError, match="unknown env"):
        build_study([0], True, find_configs_dir(), tmp_path, envs=("chess",))
    with pytest.raises(ValueError, match="distinct"):
        build_study([0, 0], True, find_configs_dir(), tmp_path)


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


@pytest.mark.slow
def test_a_real_training_run_through_the_runner(tmp_path):
    config = tmp_path / "bandit.toml"
    config.write_text("\n".join([
        "[run]", "steps = 2", "device = \"cpu\"", "[model]", "path = \"tiny\"", "[env]", "id = \"ragen/Bandit-v0\"",
        "[rollout]", "groups = 2", "group_size = 4", "max_turns = 1", "max_new_tokens = 24", "system_prompt = false",
        "[algo]", "name = \"grpo\"", "lr = 1e-3", "mini_batch_size = 8", "micro_batch_size = 8",
        "[mi]", "every = 1", "[eval]", "every = 2", "episodes = 4",
        "[warm_start]", "sft_episodes = 8", "batch_size = 8", "epochs = 1"]) + "\n")
    spec = RunSpec("bandit", "top_p", 0, str(config), ("run.seed=0", "run.progress=false",
                                                       f'warm_start.cache_dir="{tmp_path / "cache"}"'))
    record = execute_run(spec, tmp_path / "runs")
    assert record["steps"] == 2 and [s for s, _ in record["val"]] == [0, 2]
    assert [m["step"] for m in record["mi"]] == [1, 2] and "rv_heterogeneity_first" in record  # None if V = 0
    assert (tmp_path / "runs" / spec.name / "done.json").is_file()
    assert list((tmp_path / "cache").glob("*.pt"))
    assert execute_run(spec, tmp_path / "runs") == json.loads(json.dumps(record))  # read back, not re-run


def test_cli_report_only_and_errors(tmp_path, capsys):
    out = tmp_path / "study"
    specs = build_study([0], True, find_configs_dir(), out / "warm_cache")
    for spec in specs[:4]:
        _fake_execute(spec, out / "runs")
    assert reproduce_main(["--quick", "--out", str(out), "--report-only", "--no-progress"]) == 0
    text = (out / "reproduction.md").read_text()
    assert "5 missing" in text and specs[-1].name in text
    assert reproduce_main(["--seeds", "0", "--out", str(out)]) == 2
    assert reproduce_main(["--out", str(out), "--configs-dir", str(tmp_path)]) == 2
    assert "--configs-dir" in capsys.readouterr().err
    assert reproduce_main(["--out", str(tmp_path / "empty"), "--report-only", "--no-progress"]) == 1
