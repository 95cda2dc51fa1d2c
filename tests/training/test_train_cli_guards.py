"""`ragen train` refuses what cannot run before it makes a run folder, in one line with exit status 2: bad values,
overlapping seed streams, a missing device, unusable or occupied run folders, a resume that lowers `run.steps` or
names another folder. Tiny runs of the real Bandit env through `ragen_core.apps.train.main`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from bandit_cli import BANDIT_CORPUS, bandit_args, base_config_file

from ragen_core.apps import train as train_app
from ragen_core.apps.train import check_new_run_dir, main
from ragen_core.training.config import ConfigError, load_config
from ragen_core.training.trainer import Trainer


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model(BANDIT_CORPUS)


def _args(model_dir: Path, *extra: str) -> list[str]:
    return bandit_args(model_dir, *extra, steps=3)


_cfg_file = base_config_file


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error_line(err: str, prefix: str = "config error: ") -> None:
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.fixture(scope="module")
def finished_run(model_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("finished")
    run_dir = folder / "run"
    assert main([str(_cfg_file(folder)), *_args(model_dir), "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.mark.parametrize("bad", [
    "algo.lr=inf", "warm_start.batch_size=-1", "run.max_minutes=-5", "warm_start.lr=nan", "run.seed=-1",
    "env.val_seed=-1", "env.train_seed=-1", "rollout.temperature=inf",
    # seed streams that overlap: checked before the folder exists (it was raised inside the trainer, after it)
    "eval.episodes=10000", "env.val_seed=10000",
    "rollout.group_size=1", "run.name=", "run.name=../escaped",
])
def test_bad_values_are_one_config_error_line_and_leave_no_run_folder(model_dir, tmp_path, capsys, bad):
    out_dir = tmp_path / "runs"
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir, f"run.out_dir={out_dir}"), bad]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert bad.split("=")[0] in err or "seeds" in err
    assert not out_dir.exists() and not (tmp_path / "escaped").exists()


def test_a_missing_cuda_device_is_a_config_error(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out_dir = tmp_path / "runs"
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir, f"run.out_dir={out_dir}", "run.device=cuda")]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "run.device=cuda" in err and not out_dir.exists()


def test_a_non_utf8_config_file_is_a_config_error(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_bytes(b"\xff\xfe[run]\n")
    assert main([str(path), f"run.out_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "UTF-8" in err and not (tmp_path / "runs").exists()


def test_an_empty_config_file_says_so_first(model_dir, tmp_path, capsys):
    path = tmp_path / "empty.toml"
    path.write_text("# nothing here\n")
    # A model folder that does not exist stops it right after the note (nothing trains).
    assert main([str(path), "model.path=/no/such/model", f"run.out_dir={tmp_path / 'runs'}"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"note: {path} sets no keys") and "default" in lines[0], lines
    assert lines[1].startswith("config error: model.path")


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_a_run_dir_that_cannot_be_made_is_one_line(model_dir, tmp_path, capsys, where):
    if where == "proc":
        if not sys.platform.startswith("linux") or not Path("/proc").is_dir():
            pytest.skip("needs /proc")
        run_dir = Path("/proc") / "ragen_test_run"
    else:
        (tmp_path / "a_file").write_text("x")
        run_dir = tmp_path / "a_file" / "run"
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    _one_error_line(err, prefix=f"cannot make the run folder {run_dir}: ")
    assert not run_dir.exists()


def test_a_run_dir_that_is_a_file_is_refused(model_dir, tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("x")
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir), "--run-dir", str(target)]) == 2
    _one_error_line(capsys.readouterr().err)
    assert target.read_text() == "x"


def test_a_new_run_never_overwrites_a_finished_run(model_dir, finished_run, tmp_path, capsys):
    before = _tree(finished_run)
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir), "--run-dir", str(finished_run)]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "--resume" in err and str(finished_run) in err
    assert _tree(finished_run) == before


def test_a_new_run_never_writes_into_a_folder_of_other_files(model_dir, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir), "--run-dir", str(mine)]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "not empty" in err and "notes.txt" in err and "new or empty folder" in err
    assert _tree(mine) == {"notes.txt": b"keep me"}


def test_which_folders_a_new_run_may_use(tmp_path):
    check_new_run_dir(tmp_path / "new")  # not there yet
    (tmp_path / "empty").mkdir()
    check_new_run_dir(tmp_path / "empty")
    # What `ragen reproduce` makes before it starts a run: the folder and its train.log.
    (tmp_path / "reproduce").mkdir()
    (tmp_path / "reproduce" / "train.log").write_text("")
    check_new_run_dir(tmp_path / "reproduce")
    # A start that stopped before its first checkpoint: the restart `--resume` prints must be accepted.
    left = tmp_path / "left"
    (left / "checkpoints").mkdir(parents=True)
    for name in ("config.toml", "provenance.json", "metrics.jsonl", "val_outcomes.jsonl", "train.log"):
        (left / name).write_text("")
    check_new_run_dir(left)
    # ... but not once it has a checkpoint (a run to resume), nor with anything else in it.
    (left / "checkpoints" / "latest.pt").write_bytes(b"x")
    with pytest.raises(ConfigError, match="already holds a run"):
        check_new_run_dir(left)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.csv").write_text("")
    with pytest.raises(ConfigError, match="not empty"):
        check_new_run_dir(tmp_path / "other")


def test_a_resume_may_not_lower_run_steps_below_the_steps_run(finished_run, tmp_path, capsys):
    before = _tree(finished_run)
    for steps in (2, 1, 0):
        assert main(["--resume", str(finished_run), f"run.steps={steps}"]) == 2
        err = capsys.readouterr().err
        _one_error_line(err)
        assert f"run.steps={steps}" in err and "3 steps" in err
        assert _tree(finished_run) == before  # config.toml, metrics and the resume log untouched


def test_the_trainer_refuses_a_resume_below_its_checkpoint_before_touching_the_folder(finished_run, tmp_path):
    before = _tree(finished_run)
    cfg = load_config(finished_run / "config.toml", ["run.steps=1"])
    with pytest.raises(ConfigError, match=r"^run.steps=1 is below the 3 steps"):
        Trainer(cfg, finished_run, resume=True)
    assert _tree(finished_run) == before


def test_the_checkpoint_step_is_read_without_the_trainer(finished_run):
    assert train_app._checkpoint_step(finished_run) == 3
    assert train_app._checkpoint_step(finished_run / "nowhere") is None


def test_resume_with_another_run_dir_is_refused(finished_run, tmp_path, capsys):
    before = _tree(finished_run)
    other = tmp_path / "other"
    assert main(["--resume", str(finished_run), "--run-dir", str(other)]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "--run-dir" in err and "--resume" in err
    assert not other.exists() and _tree(finished_run) == before


def test_a_resume_that_keeps_run_steps_is_accepted(finished_run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(finished_run, copy)
    assert main(["--resume", str(copy), "run.steps=3"]) == 0
    assert "resuming at step 3 of 3" in capsys.readouterr().err
    log = [json.loads(x) for x in (copy / "resume_log.jsonl").read_text().splitlines()]
    assert [{k: e[k] for k in ("step", "changes")} for e in log] == [{"step": 3, "changes": {}}]
    # and the code and the machine it ran with
    assert set(log[0]) == {"time", "step", "changes", "commit", "dirty", "torch", "cpu", "cpu_arithmetic",
                           "torch_threads", "decoding", "patch", "untracked", "untracked_count"}


def test_too_few_probe_levels_is_one_config_error_line_and_leaves_no_run_folder(model_dir, tmp_path, capsys,
                                                                                   monkeypatch):
    from ragen_core.training import probe

    def too_few(*a, **k):
        raise ValueError("only 3 distinct levels among seeds 5000..5031 of ragen/Bandit-v0; lower mi.probe_prompts")

    monkeypatch.setattr(probe, "build_probe", too_few)
    run_dir = tmp_path / "run"
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir, "mi.probe_prompts=8"), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"run folder: {run_dir}" and len(err) == 2, err
    assert err[1].startswith("config error: mi.probe_prompts: only 3 distinct levels"), err
    assert not run_dir.exists()


def test_tensorboard_without_its_package_is_refused_before_the_run_folder(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    out_dir = tmp_path / "runs"
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir, f"run.out_dir={out_dir}", "run.tensorboard=true")]) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "ragen2[tensorboard]" in err and not out_dir.exists()
