"""The readers of a training run's folder, on folders users really have: `ragen diagnose RUN_DIR` (damaged lines,
a run's several batches, a run folder that cannot take the export, a vision run) and the run's own report
(`RunLog.rewind` on damaged logs, plots of extreme values, the summary of odd probe records). Before: a non-UTF-8
line refused the whole rollouts file, JSON that Python cannot hold was a traceback, a read-only run folder given as
--model was a traceback, a vision run was cross-scored without its pictures, a damaged metrics/outcomes line was a
traceback (after metrics.jsonl had been rewritten), values near 1e308 crashed the plots before the summary."""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import shutil
from pathlib import Path

import pytest

from ragen_core.apps.diagnose import build_parser, run
from ragen_core.apps.train import main as train
from ragen_core.training.checkpoint import CheckpointError
from ragen_core.training.config import load_config
from ragen_core.training.report import METRICS, VAL_OUTCOMES, RunLog, write_plots, write_summary

CORPUS = "Bandit arm teacher engineer gambler Choose one arm <answer> </answer>"


def diagnose(*argv: str) -> tuple[int, str, str]:
    """`ragen diagnose ARGV` in process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    rc = run(build_parser().parse_args(list(argv)), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` (links as their target text) -> its sha256: what a reader must leave alone."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = "link:" + str(p.readlink())
        elif p.is_file():
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model(CORPUS)


@pytest.fixture(scope="module")
def finished(model_dir, tmp_path_factory):
    """A three-step tiny Bandit run (its folder is copied by each test that changes it)."""
    run_dir = tmp_path_factory.mktemp("runs") / "run"
    base = run_dir.parent / "base.toml"
    base.write_text("[run]\nseed = 3\n")
    args = [str(base), f"model.path={model_dir}", "env.id=ragen/Bandit-v0", "rollout.groups=3",
            "rollout.group_size=2", "rollout.max_turns=1", "rollout.max_new_tokens=8", "rollout.system_prompt=false",
            "run.steps=3", "run.device=cpu", "run.progress=false", "algo.name=grpo", "algo.lr=1e-3",
            "algo.mini_batch_size=6", "algo.micro_batch_size=6", "eval.episodes=2", "eval.every=2", "mi.every=0",
            "warm_start.sft_episodes=4", "warm_start.epochs=1", "warm_start.batch_size=4", "--run-dir", str(run_dir)]
    assert train(args) == 0
    return run_dir


@pytest.fixture
def run_copy(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


# ------------------------------------------------------------------------------------------ ragen diagnose


def _plain_precheck(path: Path) -> dict:
    """The pre-check by a plain loop over the file: sample variance per group (0 when all equal), population
    mean/std over the groups, their ratio, the zero share."""
    groups: dict = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        groups.setdefault(rec["group"], []).append(rec["reward"])
    var = []
    for rewards in groups.values():
        m = sum(rewards) / len(rewards)
        var.append(0.0 if len(set(rewards)) == 1 else sum((r - m) ** 2 for r in rewards) / (len(rewards) - 1))
    mean = sum(var) / len(var)
    std = math.sqrt(sum((v - mean) ** 2 for v in var) / len(var))
    return {"n_groups": len(var), "rv_mean": mean, "rv_std": std, "rv_heterogeneity": std / mean,
            "zero_fraction": sum(v <= 1e-10 for v in var) / len(var)}


def test_a_run_folder_reads_as_a_plain_loop_says_names_its_batches_and_is_left_alone(run_copy):
    path = run_copy / "rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert {r.get("step") for r in rows} == {2, 3} and any(r.get("final") for r in rows)  # the run's own format
    rng = random.Random(0)  # rewards with variance, in the run's format (the tiny run's are all equal)
    path.write_text("".join(json.dumps({**r, "reward": rng.choice([0.0, 1.0, -0.1, 0.5])}) + "\n" for r in rows))
    before = digest(run_copy)
    rc, out, err = diagnose(str(run_copy), "--json")
    assert rc == 0, err
    report = json.loads(out)
    rv, want = report["rv"], _plain_precheck(path)
    assert rv["n_groups"] == want["n_groups"] == 9
    for key in ("rv_mean", "rv_std", "rv_heterogeneity", "zero_fraction"):
        assert rv[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key
    assert report["batches"].startswith("these rollouts are 3 training batches (step 2, step 3 and final weights)")
    rc, out, _ = diagnose(str(run_copy))
    assert rc == 0 and "3 training batches" in out.splitlines()[1]
    assert digest(run_copy) == before  # the reader wrote nothing into the run folder


def test_one_rollouts_file_names_no_batches(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"group": 1, "reward": 1}\n{"group": 1, "reward": 0}\n')
    rc, out, _ = diagnose(str(path), "--json")
    assert rc == 0 and json.loads(out)["batches"] is None


def test_a_line_that_is_not_utf8_is_one_malformed_line_and_the_others_are_read(tmp_path):
    good = [b'{"group": 1, "reward": 1}', b'{"group": 1, "reward": 0}', b'{"group": 2, "reward": 0.5}',
            b'{"group": 2, "reward": 0}']
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([good[0], b'{"group": 3, "reward": 1, "response": "caf\xe9"}', *good[1:]]) + b"\n")
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"\n".join(good) + b"\n")
    rc, out, err = diagnose(str(bad), "--json")
    assert rc == 1, err  # before: exit 2, the whole file refused as "not UTF-8 text"
    assert "malformed line 2: not UTF-8 text (byte 0xe9 at column" in err
    assert json.loads(out)["rv"] == json.loads(diagnose(str(clean), "--json")[1])["rv"]


def test_a_byte_order_mark_is_not_a_malformed_first_line(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"group": 1, "reward": 1}\r\n{"group": 1, "reward": 0}\r\n')
    rc, out, err = diagnose(str(path), "--json")
    assert rc == 0 and err == "" and json.loads(out)["rv"]["n_rollouts"] == 2


@pytest.mark.parametrize("line", [
    '{"group": 3, "reward": ' + "1" * 400 + "}",  # an integer beyond float64: OverflowError before
    '{"group": 3, "reward": ' + "1" * 5000 + "}",  # beyond Python's 4300-digit limit: ValueError before
    '{"group": ' + "1" * 5000 + ', "reward": 0}',
    "[" * 100_000 + "]" * 100_000,  # nested deeper than the parser recurses: RecursionError before
])
def test_json_python_cannot_hold_is_one_malformed_line(tmp_path, line):
    path = tmp_path / "r.jsonl"
    path.write_text('{"group": 1, "reward": 1}\n{"group": 1, "reward": 0}\n' + line + "\n")
    rc, out, err = diagnose(str(path))
    assert rc == 1 and "malformed line 3: " in err and "rollouts: 2 in 1 groups" in out
    assert len(err.strip().splitlines()) == 2  # the line, then the count


def test_a_run_stopped_before_its_first_step_is_told_why_it_has_no_rollouts(run_copy):
    (run_copy / "rollouts.jsonl").unlink()  # what a run stopped during its warm start or step 1 holds
    rc, _, err = diagnose(str(run_copy))
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "warm start" in err and "run.rollouts_steps = 0" in err


def test_a_run_folder_that_cannot_take_the_export_is_scored_from_a_temporary_one(run_copy, tmp_path):
    """`RUN/model` cannot be made (here a link to nowhere: rename gives ENOTDIR, as a read-only folder gives EROFS;
    root, who runs these tests, ignores file modes): the model is exported elsewhere, the folder left alone."""
    shutil.rmtree(run_copy / "model", ignore_errors=True)
    (run_copy / "model").symlink_to(tmp_path / "nowhere")
    before = digest(run_copy)
    rc, out, err = diagnose(str(run_copy), "--model", str(run_copy), "--json")
    assert rc == 0, err  # before: a NotADirectoryError traceback from the export
    assert "scoring with a temporary export instead" in err
    mi = json.loads(out)["mi"]
    assert mi["scorer_is_sampler"].startswith("yes") and mi["scoring_model"] == f"{run_copy} (its model)"
    assert digest(run_copy) == before and not list(run_copy.glob(".model*"))


def test_a_vision_runs_prompts_are_not_cross_scored_without_their_pictures(make_tiny_model, tmp_path):
    vision = make_tiny_model(CORPUS, vision=True)
    rows = [{"group": g, "reward": float(k), "prompt": f"<|im_start|>user\nState:\n<image><image>\narm {g}<|im_end|>\n",
             "response": f"<answer>arm {k}</answer>"} for g in range(3) for k in range(2)]
    path = tmp_path / "vision.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, out, err = diagnose(str(path), "--model", str(vision))
    assert rc == 2 and out == ""  # before: exit 0 and MI proxies of prompts scored without their images
    assert "line 1: the prompt shows images (<image>)" in err and "collapse/mi_skipped_vision" in err
    text = tmp_path / "text.jsonl"  # the same model on text prompts still scores
    text.write_text("".join(json.dumps({**r, "prompt": r["prompt"].replace("<image>", "")}) + "\n" for r in rows))
    rc, out, err = diagnose(str(text), "--model", str(vision), "--json")
    assert rc == 0, err
    assert json.loads(out)["mi"]["n_prompts"] == 3


# ------------------------------------------------------------------------------------------ the run's report


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_rewind_keeps_a_valid_runs_logs_byte_for_byte(run_copy):
    before = {name: (run_copy / name).read_bytes() for name in (METRICS, VAL_OUTCOMES)}
    log = RunLog(run_copy)
    log.rewind(3)
    assert {name: (run_copy / name).read_bytes() for name in (METRICS, VAL_OUTCOMES)} == before
    assert log.history == _records(run_copy / METRICS)
    assert not list(run_copy.glob("*.tmp"))


@pytest.mark.parametrize("name, damage", [
    (METRICS, lambda line: line[:12] + b"\xff" + line[12:]),  # before: UnicodeDecodeError
    (METRICS, lambda line: line.replace(b'{"step": 0', b'{"step": "0"', 1)),  # before: TypeError
    (METRICS, lambda line: b'{"val/success": 1.0}'),  # no step: before kept, then write_plots' KeyError
    (VAL_OUTCOMES, lambda line: line.replace(b'{"step": 2', b'{"step": "2"', 1)),  # before: TypeError, metrics
])                                                                                 # already rewritten
def test_a_damaged_log_line_is_one_checkpoint_error_and_both_logs_stay(run_copy, name, damage):
    lines = (run_copy / name).read_bytes().split(b"\n")
    lines[1] = damage(lines[1])
    (run_copy / name).write_bytes(b"\n".join(lines))
    before = digest(run_copy)
    with pytest.raises(CheckpointError, match=f"{name} line 2 "):
        RunLog(run_copy).rewind(3)
    assert digest(run_copy) == before


def test_a_last_line_cut_with_a_damaged_byte_is_dropped(run_copy):
    expected = _records(run_copy / METRICS)
    with open(run_copy / METRICS, "ab") as f:
        f.write(b'{"step": 4, "rollout/ret\xe2\x82')  # a crash in the middle of a line (and of a character)
    log = RunLog(run_copy)
    log.rewind(3)
    assert log.history == expected == _records(run_copy / METRICS)


def _history(finished: Path) -> list[dict]:
    return _records(finished / METRICS)


@pytest.mark.parametrize("value", [1e308, -1.7e308])
def test_plots_of_values_near_the_float_limit_are_written(finished, tmp_path, value):
    history = [{**r, "filter/rv_mean": value} if r["step"] > 0 else r for r in _history(finished)]
    paths = write_plots(tmp_path, history)  # before: "arange: cannot compute length" from matplotlib
    assert {p.name for p in paths} == {"success.png", "entropy_mi.png", "filter.png"}
    assert all(p.stat().st_size > 0 for p in paths)


def test_plots_and_summary_take_nan_null_single_points_and_missing_keys(finished, tmp_path):
    records = _history(finished)
    one = [r for r in records if r["step"] <= 1]
    odd = one + [{"step": 2, "rollout/success": None, "filter/rv_mean": math.nan, "val/success": math.inf},
                 {"step": 3, "probe/retrieval_margin": 0.5, "probe/n_prompts": None, "probe/group_size": math.nan,
                  "probe/token_entropy": 0.0, "probe/retrieval_acc": "n/a"}]
    cfg = load_config(finished / "config.toml")
    for history in ([], one, odd):
        folder = tmp_path / f"h{len(history)}"
        folder.mkdir()
        write_plots(folder, history)
        text = write_summary(folder, cfg, history).read_text()  # before (odd): TypeError on the probe's counts
        assert text.startswith("# Run ")
    assert "Held-out MI probe (? prompts x ? samples, steps 3..3)" in text
    assert "| Retrieval-Acc | n/a | n/a |" in text
