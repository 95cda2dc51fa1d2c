"""The Trainer as a researcher drives it from Python (a notebook) instead of `ragen train`: the arguments and the
config are checked before anything is made, a run folder that holds a run is never overwritten, a resume keeps the
run's identity, and calling `fit()` / `train_step()` again (after a Ctrl-C, after a finished run) never trains on
a half-updated state or leaves the run folder out of step with the model."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.policy import HFPolicy
from ragen_core.training.config import RESUME_KEYS, ConfigError, TrainConfig, load_config
from ragen_core.training.trainer import LIVE_KEYS, Trainer

ENV_ID = register("test/ParityApi-v0", ParityEnv)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def make_cfg(*overrides: str) -> TrainConfig:
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.steps=2", "run.progress=false", "run.device=cpu", "algo.name=grpo",
            "algo.lr=1e-3", "algo.mini_batch_size=4", "algo.micro_batch_size=4", "eval.episodes=2",
            "eval.every=2", "mi.every=2", "filter.value=0.5"]
    return load_config(None, base + list(overrides))


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def _same_weights(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _records(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the timings (`perf/`), which differ between any two runs."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


# ------------------------------------------------------------------ the config and the arguments
@pytest.mark.parametrize("key,value", [
    ("algo.lr", float("nan")),        # crashed inside torch's AdamW, after the run folder was made
    ("rollout.groups", 0),            # IndexError inside the trainer
    ("algo.name", "foo"),             # ValueError of the algorithm table, after the run folder was made
    ("eval.episodes", 0),             # accepted
    ("run.steps", "3"),               # accepted: a str where an int belongs
    ("rollout.group_size", 1),        # accepted with filter.enabled = true (no reward variance to filter on)
])
def test_a_config_changed_after_loading_is_checked_again_and_leaves_no_folder(model_dir, tmp_path, key, value):
    cfg = make_cfg()
    section, name = key.split(".")
    setattr(getattr(cfg, section), name, value)
    with pytest.raises(ConfigError, match="^" + re.escape(key)):
        Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    assert not (tmp_path / "run").exists()


def test_a_config_built_in_code_runs_like_the_loaded_one(model_dir, tmp_path):
    """TrainConfig() with its fields set by hand trains exactly as load_config's config of the same values."""
    built = TrainConfig()
    built.env.id = ENV_ID
    built.rollout.groups, built.rollout.group_size, built.rollout.max_turns, built.rollout.max_new_tokens = 3, 4, 2, 6
    built.run.steps, built.run.progress, built.run.device = 1, False, "cpu"
    built.algo.name, built.algo.lr, built.algo.mini_batch_size, built.algo.micro_batch_size = "grpo", 1e-3, 4, 4
    built.eval.episodes, built.eval.every, built.mi.every = 2, 1, 2
    built.filter.spec = dataclasses.replace(built.filter.spec, value=0.5)
    a = Trainer(make_cfg("run.steps=1", "eval.every=1"), tmp_path / "a", policy=HFPolicy.from_pretrained(model_dir))
    a.fit()
    b = Trainer(built, tmp_path / "b", policy=HFPolicy.from_pretrained(model_dir))
    b.fit()
    assert _records(tmp_path / "a") == _records(tmp_path / "b")
    assert _same_weights(_weights(a), _weights(b))


@pytest.mark.parametrize("argument,kwargs,match", [
    ("cfg", {"cfg": {"run": {"steps": 2}}}, r"^cfg must be a .*TrainConfig.*got \{'run'.*\(dict\)"),
    ("run_dir", {"run_dir": None}, r"^run_dir must be a folder path .*got None"),
    ("run_dir", {"run_dir": 3}, r"^run_dir must be a folder path .*got 3"),
    ("policy", {"policy": "tiny"}, r"^policy must be .*got 'tiny'"),
    ("resume", {"resume": "runs/x"}, r"^resume must be True or False.*got 'runs/x'"),
    ("on_step", {"on_step": "print"}, r"^on_step must be a callable .*got 'print'"),
])
def test_arguments_of_the_wrong_kind_are_a_type_error_naming_them(model_dir, tmp_path, monkeypatch, argument,
                                                                   kwargs, match):
    monkeypatch.chdir(tmp_path)
    args = {"cfg": make_cfg(), "run_dir": tmp_path / "run", **kwargs}
    if argument != "policy":
        args["policy"] = HFPolicy.from_pretrained(model_dir)
    with pytest.raises(TypeError, match=match):
        Trainer(**args)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("override,match", [
    ("env.id=nope/Nothing-v0", r"^env\.id: .*nope"),
    (f"env.id={ENV_ID.replace('-v0', '-v7')}", r"^env\.id: "),
    ("env.kwargs.bogus=1", r"^env\.kwargs .*has no kwarg 'bogus'"),
])
def test_an_unknown_env_or_kwarg_is_a_config_error_before_anything_is_made(model_dir, tmp_path, override, match):
    with pytest.raises(ConfigError, match=match):
        Trainer(make_cfg(override), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    assert not (tmp_path / "run").exists()


def test_a_missing_model_folder_is_a_config_error_naming_model_path(tmp_path):
    with pytest.raises(ConfigError, match=r"^model\.path .*nowhere"):
        Trainer(make_cfg(f"model.path={tmp_path / 'nowhere'}"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ the run folder
def test_a_new_trainer_refuses_a_folder_that_holds_a_run(model_dir, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(make_cfg("run.steps=1"), run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()
    before = _tree(run_dir)
    with pytest.raises(ValueError, match=r"^run_dir .*already holds a run .*resume=True"):
        Trainer(make_cfg("run.steps=1"), run_dir, policy=HFPolicy.from_pretrained(model_dir))
    assert _tree(run_dir) == before


def test_a_run_dir_that_is_a_file_is_a_value_error(model_dir, tmp_path):
    path = tmp_path / "file"
    path.write_text("notes")
    with pytest.raises(ValueError, match=r"^run_dir .*is a file"):
        Trainer(make_cfg(), path, policy=HFPolicy.from_pretrained(model_dir))
    assert path.read_text() == "notes"


def test_an_empty_existing_folder_is_a_fine_run_dir(model_dir, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    Trainer(make_cfg("run.steps=1"), run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()
    assert (run_dir / "checkpoints" / "latest.pt").is_file()


def test_resuming_a_folder_without_a_run_makes_nothing(model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
        Trainer(make_cfg(), tmp_path / "nowhere", policy=HFPolicy.from_pretrained(model_dir), resume=True)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("override", ["algo.name=ppo", "algo.lr=0.5", "rollout.groups=2", "algo.kl_coef=0.1"])
def test_a_resume_with_another_config_is_refused_before_the_folder_is_touched(model_dir, tmp_path, override):
    run_dir = tmp_path / "run"
    Trainer(make_cfg("run.steps=1"), run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()
    before = _tree(run_dir)
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match="^" + re.escape(key) + " cannot change when resuming"):
        Trainer(make_cfg("run.steps=1", override), run_dir, policy=HFPolicy.from_pretrained(model_dir),
                resume=True)
    assert _tree(run_dir) == before


def test_a_resume_that_raises_run_steps_records_it_in_config_toml(model_dir, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(make_cfg("run.steps=1"), run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()
    trainer = Trainer(make_cfg("run.steps=2"), run_dir, policy=HFPolicy.from_pretrained(model_dir), resume=True)
    trainer.fit()
    assert load_config(run_dir / "config.toml").run.steps == 2
    assert [r["step"] for r in _records(run_dir) if "rollout/return" in r] == [1, 2]


# ------------------------------------------------------------------ calling fit() and train_step() again
def test_fit_after_a_ctrl_c_mid_step_continues_like_an_uninterrupted_run(model_dir, tmp_path, monkeypatch):
    straight = Trainer(make_cfg("run.steps=3"), tmp_path / "straight", policy=HFPolicy.from_pretrained(model_dir))
    straight.fit()

    trainer = Trainer(make_cfg("run.steps=3"), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    real_update = Trainer.update

    def update_then_interrupt(self, rows, images):
        out = real_update(self, rows, images)
        if self.state.step == 1:  # step 2's optimiser step is taken, then Ctrl-C
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(Trainer, "update", update_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    monkeypatch.setattr(Trainer, "update", real_update)
    assert trainer.saved_step == 1
    trainer.fit()  # the notebook cell run again
    assert _records(tmp_path / "run") == _records(tmp_path / "straight")
    assert _same_weights(_weights(trainer), _weights(straight))


def test_fit_after_a_ctrl_c_before_the_first_checkpoint_says_to_start_again(model_dir, tmp_path, monkeypatch):
    trainer = Trainer(make_cfg(), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))

    def interrupt(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "save_checkpoint", interrupt)  # the first checkpoint, after the warm start
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="before the run's first checkpoint.*new Trainer"):
        trainer.fit()


def test_train_step_after_an_interrupted_one_is_refused(model_dir, tmp_path, monkeypatch):
    trainer = Trainer(make_cfg(), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    trainer.fit()
    monkeypatch.setattr(Trainer, "collect", lambda self, policy=None: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        trainer.train_step()
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match=r"interrupted.*load_checkpoint\(\)"):
        trainer.train_step()
    trainer.load_checkpoint()
    assert trainer.state.step == 2
    trainer.train_step()  # from the checkpoint again
    assert trainer.state.step == 3


def test_fit_after_train_steps_outside_it_is_refused(model_dir, tmp_path):
    fresh = Trainer(make_cfg(), tmp_path / "fresh", policy=HFPolicy.from_pretrained(model_dir))
    fresh.train_step()  # no config.toml, no step-0 validation, nothing logged: fit() cannot make a run of that
    with pytest.raises(RuntimeError, match=r"train_step\(\).*outside fit\(\)"):
        fresh.fit()
    assert not (tmp_path / "fresh" / "config.toml").exists()

    done = Trainer(make_cfg(), tmp_path / "done", policy=HFPolicy.from_pretrained(model_dir))
    done.fit()
    done.train_step()  # step 3 of a 2-step run: neither logged nor checkpointed
    before = _tree(tmp_path / "done")
    with pytest.raises(RuntimeError, match=r"train_step\(\).*outside fit\(\)"):
        done.fit()
    assert _tree(tmp_path / "done") == before


def test_fit_twice_trains_nothing_more_and_returns_its_own_list(model_dir, tmp_path):
    trainer = Trainer(make_cfg(), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    first = trainer.fit()
    kept = [dict(r) for r in first]
    weights = _weights(trainer)
    second = trainer.fit()
    assert second == kept and first == kept
    assert _same_weights(weights, _weights(trainer))
    trainer.cfg.run.steps = 3  # a key a running trainer reads at every step: train one more
    third = trainer.fit()
    assert first == kept  # the list returned earlier is the caller's, not the live log
    assert [r["step"] for r in third if "rollout/return" in r] == [1, 2, 3]
    assert load_config(tmp_path / "run" / "config.toml").run.steps == 3


@pytest.mark.parametrize("key,value", [("algo.name", "ppo"), ("rollout.groups", 5), ("env.id", "ragen/Bandit-v0"),
                                       ("rollout.group_size", 2), ("run.rollouts_steps", 0)])
def test_a_key_changed_after_the_trainer_is_built_is_refused_unless_read_at_every_step(model_dir, tmp_path, key,
                                                                                      value):
    cfg = make_cfg()
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    section, name = key.split(".")
    setattr(getattr(cfg, section), name, value)  # the caller's config object is the trainer's
    with pytest.raises(ConfigError, match="^" + re.escape(key) + r" changed .*after the Trainer was built"):
        trainer.fit()
    with pytest.raises(ConfigError, match="^" + re.escape(key)):
        trainer.train_step()
    assert not (tmp_path / "run" / "config.toml").exists()


def test_a_live_key_changed_before_fit_takes_effect_and_is_recorded(model_dir, tmp_path):
    cfg = make_cfg()
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    cfg.run.steps = 3
    history = trainer.fit()
    assert [r["step"] for r in history if "rollout/return" in r] == [1, 2, 3]
    assert load_config(tmp_path / "run" / "config.toml").run.steps == 3


def test_run_steps_may_not_change_once_trained_under_a_linear_schedule(model_dir, tmp_path):
    trainer = Trainer(make_cfg("algo.lr_schedule=linear"), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    trainer.fit()
    trainer.cfg.run.steps = 4
    with pytest.raises(ConfigError, match=r"^run\.steps .*lr_schedule=linear"):
        trainer.fit()


def test_on_step_sees_every_logged_record(model_dir, tmp_path):
    seen = []
    trainer = Trainer(make_cfg(), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir), on_step=seen.append)
    history = trainer.fit()
    assert seen == history


# ------------------------------------------------------------------ the documented example
def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_the_python_example_of_the_training_docs_runs(model_dir, tmp_path, monkeypatch):
    """docs/train.md's Python example, run as written, in an empty folder (a notebook's); only the size of the run is
    cut down (every load_config call gets the overrides of a tiny run on the same env), so that it takes seconds."""
    blocks = [b for b in _python_blocks(ROOT / "docs" / "train.md") if "Trainer(" in b]
    assert blocks, "docs/train.md shows the Python API"
    monkeypatch.chdir(tmp_path)
    import ragen_core.training.config as config_module

    real = config_module.load_config
    tiny = [f"model.path={model_dir}", "run.steps=2", "run.progress=false", "rollout.groups=2",
            "rollout.group_size=2", "rollout.max_new_tokens=8", "algo.mini_batch_size=4", "algo.micro_batch_size=4",
            "eval.episodes=2", "mi.every=0", "warm_start.sft_episodes=4", "warm_start.epochs=1",
            "warm_start.batch_size=4"]
    monkeypatch.setattr(config_module, "load_config", lambda path=None, overrides=(): real(path, [*overrides, *tiny]))
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, "docs/train.md", "exec"), namespace)  # noqa: S102 - the documentation's own code
    assert (tmp_path / "runs").is_dir()


def test_the_docs_list_the_live_keys_of_the_code_and_each_is_a_resume_key():
    text = (ROOT / "docs" / "train.md").read_text()
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    listed = section.split("a change to", 1)[1].split("takes effect", 1)[0]
    assert re.findall(r"`([a-z_]+\.[a-z_]+)`", listed) == list(LIVE_KEYS)
    assert set(LIVE_KEYS) <= set(RESUME_KEYS)
