"""`ragen train` as a user runs it: resume overrides that keep the run's identity (and the log of them), Ctrl-C,
the checkpoint after the warm start, runs with nothing to resume, failed starts, the last-step validation and
the progress bars. Tiny runs of the real Bandit env through `ragen_core.apps.train.main`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bandit_cli import BANDIT_CORPUS, bandit_args, base_config_file

from ragen_core.apps.train import RESUME_LOG, main
from ragen_core.training import trainer as train_mod
from ragen_core.training import warm_cache
from ragen_core.training.checkpoint import LATEST
from ragen_core.training.config import ConfigError, load_config, resume_changes
from ragen_core.training.trainer import Trainer


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model(BANDIT_CORPUS)


def _args(model_dir: Path, *extra: str) -> list[str]:
    return bandit_args(model_dir, *extra, steps=2)


_cfg_file = base_config_file


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _train(tmp_path, model_dir, run_dir, *extra) -> int:
    return main([str(_cfg_file(tmp_path)), *_args(model_dir, *extra), "--run-dir", str(run_dir)])


def test_resume_rejects_identity_changes_and_records_the_accepted_ones(model_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _train(tmp_path, model_dir, run_dir) == 0
    before = {name: (run_dir / name).read_text() for name in ("config.toml", "summary.md", "metrics.jsonl")}
    capsys.readouterr()
    for bad, key in (("algo.name=ppo", "algo.name"), ("algo.lr=0.5", "algo.lr"),
                     ("env.kwargs.high_prob=0.9", "env.kwargs"), ("rollout.group_size=4", "rollout.group_size")):
        assert main(["--resume", str(run_dir), bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith(f"config error: {key} cannot change when resuming") and err.count("\n") == 1, err
        assert {n: (run_dir / n).read_text() for n in before} == before  # nothing rewritten
        assert not (run_dir / RESUME_LOG).exists()
    # A config file next to --resume is refused too (the run's own config.toml is the config).
    assert main(["--resume", str(run_dir), str(_cfg_file(tmp_path))]) == 2
    assert "--resume uses the run's own config.toml" in capsys.readouterr().err

    assert main(["--resume", str(run_dir), "run.steps=3", "eval.every=3"]) == 0
    log = [json.loads(x) for x in (run_dir / RESUME_LOG).read_text().splitlines()]
    assert log[0]["step"] == 2
    assert log[0]["changes"] == {"run.steps": {"from": 2, "to": 3}, "eval.every": {"from": 2, "to": 3}}
    saved = load_config(run_dir / "config.toml")
    assert (saved.run.steps, saved.eval.every) == (3, 3)
    steps = [r["step"] for r in _metrics(run_dir) if "rollout/return" in r]
    assert steps == [1, 2, 3]
    # The last step is always validated: step 3 here (also when run.steps is not a multiple of eval.every).
    assert [r["step"] for r in _metrics(run_dir) if "val/success" in r] == [0, 2, 3]


def test_resume_changes_allows_only_the_listed_keys():
    saved = load_config(None, ["run.steps=10"])
    assert resume_changes(saved, load_config(None, ["run.steps=20", "run.max_minutes=5", "mi.every=0"])) == {
        "run.steps": (10, 20), "run.max_minutes": (0.0, 5.0), "mi.every": (5, 0)}
    assert resume_changes(saved, saved) == {}
    for bad in ("filter.value=0.5", "run.seed=1", "warm_start.sft_episodes=3", "rollout.temperature=0.5"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            resume_changes(saved, load_config(None, ["run.steps=10", bad]))
    linear = load_config(None, ["run.steps=10", "algo.lr_schedule=linear"])
    with pytest.raises(ConfigError, match="lr_schedule=linear"):
        resume_changes(linear, load_config(None, ["run.steps=20", "algo.lr_schedule=linear"]))


def test_ctrl_c_prints_how_to_resume_and_the_resume_finishes(model_dir, tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    real_step = Trainer.train_step

    def step_then_interrupt(self):
        if self.state.step == 1:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", step_then_interrupt)
    assert _train(tmp_path, model_dir, run_dir) == 130
    err = capsys.readouterr().err
    assert f"interrupted at step 1 of 2 (last checkpoint: step 1); resume with `ragen train --resume {run_dir}`" in err
    assert "Traceback" not in err
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert main(["--resume", str(run_dir)]) == 0
    assert [r["step"] for r in _metrics(run_dir) if "rollout/return" in r] == [1, 2]


def test_a_run_stopped_after_its_warm_start_resumes_without_training_it_again(model_dir, tmp_path, capsys,
                                                                              monkeypatch):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    monkeypatch.setattr("ragen_core.progress.LOG_INTERVAL_S", 0.0)  # captured stderr is a log: a line per update
    assert _train(tmp_path, model_dir, straight, "run.progress=true") == 0
    bars = capsys.readouterr().err
    for label in ("warm start (demonstrations)", "warm start (SFT)", "loss=", "validation at step 0"):
        assert label in bars, label

    real = Trainer._step0_measurements
    monkeypatch.setattr(Trainer, "_step0_measurements", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    assert _train(tmp_path, model_dir, stopped) == 130  # stopped during the step-0 validation
    assert "last checkpoint: step 0" in capsys.readouterr().err
    assert (stopped / LATEST).is_file() and any("sft/loss_last" in r for r in _metrics(stopped))

    monkeypatch.setattr(Trainer, "_step0_measurements", real)
    monkeypatch.setattr(warm_cache, "cached_warm_start", lambda *a, **k: pytest.fail("warm start trained again"))
    assert main(["--resume", str(stopped)]) == 0

    def strip(run_dir):
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in _metrics(run_dir)]

    # The same records as the uninterrupted run: warm start, step-0 validation, steps, last validation.
    a, b = strip(straight), strip(stopped)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                assert rb[k] == pytest.approx(ra[k], rel=1e-5, abs=1e-6), (ra["step"], k)


def test_nothing_to_resume_says_so_and_how_to_restart(model_dir, tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    monkeypatch.setattr(warm_cache, "cached_warm_start", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert _train(tmp_path, model_dir, run_dir) == 130
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "Traceback" not in err
    assert not run_dir.exists()  # it made the folder, nothing was saved: removed

    # A run killed (SIGKILL) during its warm start: a config and no checkpoint.
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(train_mod.dump_toml(load_config(None, _args(model_dir))))
    assert main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume" in err and f"ragen train {run_dir / 'config.toml'} --run-dir {run_dir}" in err
    assert err.count("\n") == 1
    assert main(["--resume", str(tmp_path / "not_a_run")]) == 2
    assert "a run folder?" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["algo.nme=ppo", "env.id=ragen/Nope-v0", "env.kwargs.bogus=1",
                                 "env.kwargs.high_prob=2", "model.path=/no/such/model", "rollout.groups=0"])
def test_failed_starts_are_one_config_error_line_and_leave_no_run_folder(model_dir, tmp_path, capsys, bad):
    out_dir = tmp_path / "runs"
    assert main([str(_cfg_file(tmp_path)), *_args(model_dir, f"run.out_dir={out_dir}"), bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error:") and err.count("\n") == 1 and "Traceback" not in err
    assert not out_dir.exists()
    assert main(["no_such_preset"]) == 2
    assert "shipped presets" in capsys.readouterr().err


def test_a_start_that_fails_inside_the_trainer_removes_its_folder(model_dir, tmp_path, monkeypatch, capsys):
    """A model that cannot be loaded is one line (exit 2), and the start leaves no folder it made behind."""
    def broken(*a, **k):
        raise OSError("corrupt weights")

    monkeypatch.setattr(train_mod, "load_policy", broken)
    run_dir = tmp_path / "run"
    assert _train(tmp_path, model_dir, run_dir) == 2
    err = capsys.readouterr().err
    assert "cannot load the model: corrupt weights" in err and "Traceback" not in err
    assert not run_dir.exists()
    existing = tmp_path / "mine"
    existing.mkdir()
    assert _train(tmp_path, model_dir, existing) == 2
    assert existing.is_dir()  # a folder the user made is never removed
