"""Resuming a run whose logs a crash left inconsistent: a last line cut short, validation outcomes written without
their metrics record. Before: the cut line was a JSONDecodeError traceback in `RunLog.rewind`; the orphan
outcomes line was kept and the resumed run appended a second one for the same step. Tiny runs of the real Bandit
env through `ragen_core.apps.train.main`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bandit_cli import BANDIT_CORPUS, bandit_args, base_config_file

from ragen_core.apps.train import RESUME_LOG, main


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model(BANDIT_CORPUS)


def _train(tmp_path: Path, model_dir: Path, run_dir: Path) -> int:
    return main([str(base_config_file(tmp_path)), *bandit_args(model_dir, steps=2), "--run-dir", str(run_dir)])


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in records]


@pytest.fixture(scope="module")
def finished(model_dir, tmp_path_factory):
    """One finished two-step run (its files are copied by each test)."""
    tmp = tmp_path_factory.mktemp("resume-logs")
    run_dir = tmp / "run"
    assert _train(tmp, model_dir, run_dir) == 0
    return run_dir


@pytest.fixture
def run(finished, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def test_a_last_line_cut_short_is_dropped_and_the_resume_finishes(run, finished, capsys):
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rollout/retu')  # a record being written when the run died
    with open(run / "val_outcomes.jsonl", "a") as f:
        f.write('{"step": 3, "seeds": [1, 2')
    assert main(["--resume", str(run), "run.steps=3"]) == 0, capsys.readouterr().err
    records = _lines(run / "metrics.jsonl")  # every line parses
    assert [r["step"] for r in records if "rollout/return" in r] == [1, 2, 3]
    assert _without_timing(records[: len(_lines(finished / "metrics.jsonl"))]) == _without_timing(
        _lines(finished / "metrics.jsonl"))
    assert [r["step"] for r in _lines(run / "val_outcomes.jsonl")] == [0, 2, 3]


def test_outcomes_without_their_metrics_record_are_measured_once_again(run, finished, capsys):
    """The crash fell between the last validation's outcomes line and its metrics record."""
    metrics = _lines(run / "metrics.jsonl")
    last_val = max(i for i, r in enumerate(metrics) if "val/success" in r)
    assert metrics[last_val]["step"] == 2
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics[:last_val]))
    assert main(["--resume", str(run)]) == 0, capsys.readouterr().err
    outcomes = _lines(run / "val_outcomes.jsonl")
    assert [r["step"] for r in outcomes] == [0, 2]  # not [0, 2, 2]
    assert outcomes == _lines(finished / "val_outcomes.jsonl")  # the same measurement, taken again


def test_a_damaged_line_before_the_last_is_refused_naming_it(run, capsys):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:10]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert main(["--resume", str(run), "run.steps=3"]) == 2
    err = capsys.readouterr().err
    assert "\ncannot resume: " in err and "metrics.jsonl line 2 is not JSON" in err and "Traceback" not in err
    assert (run / "metrics.jsonl").read_bytes() == before["metrics.jsonl"]  # nothing rewritten


def test_the_resume_log_names_the_code_the_resume_ran(run, capsys):
    import torch

    from ragen_core.training.provenance import git_state

    assert main(["--resume", str(run), "run.steps=3"]) == 0, capsys.readouterr().err
    (entry,) = _lines(run / RESUME_LOG)
    commit, dirty = git_state()
    assert (entry["commit"], entry["dirty"], entry["torch"]) == (commit, dirty, torch.__version__)


def test_a_python_resume_is_logged_as_the_command_line_one_is(run, model_dir):
    """`Trainer(cfg, run_dir, resume=True)` records the resume and writes the config in force (only the CLI did)."""
    import torch

    from ragen_core.training.config import load_config
    from ragen_core.training.provenance import git_state
    from ragen_core.training.trainer import Trainer

    cfg = load_config(run / "config.toml", ["run.steps=3"])
    trainer = Trainer(cfg, run, resume=True)
    (entry,) = _lines(run / RESUME_LOG)
    assert entry["step"] == 2 and entry["changes"] == {"run.steps": {"from": 2, "to": 3}}
    assert (entry["commit"], entry["torch"]) == (git_state()[0], torch.__version__)
    assert load_config(run / "config.toml").run.steps == 3
    trainer.fit()
    assert [r["step"] for r in _lines(run / "metrics.jsonl") if "rollout/return" in r] == [1, 2, 3]


def test_resuming_with_a_policy_of_another_size_is_refused_and_leaves_it_untouched(run, tmp_path):
    from ragen_core.policy import HFPolicy, build_tiny_model
    from ragen_core.training.checkpoint import CheckpointError
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    other = HFPolicy.from_pretrained(build_tiny_model(tmp_path / "other", corpus=[BANDIT_CORPUS], hidden=48,
                                                      heads=2, layers=1))
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    log_before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(CheckpointError, match="does not fit the model given to this Trainer"):
        Trainer(load_config(run / "config.toml"), run, policy=other, resume=True)
    after = other.model.state_dict()
    assert all(torch_equal(before[k], after[k]) for k in before)  # nothing copied into it
    assert (run / "metrics.jsonl").read_bytes() == log_before and not (run / RESUME_LOG).exists()


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def test_a_damaged_rollouts_file_is_refused_naming_it_and_a_cut_last_line_is_dropped(run, capsys):
    """rollouts.jsonl is read on a resume too; a damaged line was a JSONDecodeError traceback."""
    path = run / "rollouts.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) >= 3
    path.write_text("\n".join([lines[0], lines[1][:15], *lines[2:]]) + "\n")
    assert main(["--resume", str(run), "run.steps=3"]) == 2
    err = capsys.readouterr().err
    assert "\ncannot resume: " in err and "rollouts.jsonl line 2 is not JSON" in err and "Traceback" not in err
    path.write_text("\n".join(lines) + "\n" + lines[-1][:20])  # the last line cut short
    assert main(["--resume", str(run), "run.steps=3"]) == 0, capsys.readouterr().err
    assert all(json.loads(x) for x in path.read_text().splitlines())
