"""The run-length knobs of a long run: `run.max_minutes` (stop, validate once more, resume), `run.save_every` with
`run.keep_every`, and what `summary.md` says about why a run stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bandit_cli import BANDIT_CORPUS, bandit_args, base_config_file
from stand_in_envs import ParityEnv, register

from ragen_core.apps.train import main
from ragen_core.policy import HFPolicy
from ragen_core.training.config import TrainConfig, load_config
from ragen_core.training.report import write_summary
from ragen_core.training.trainer import Trainer

ENV_ID = register("test/ParityLongRun-v0", ParityEnv)
TIME_STOP = "stopped at the time limit"


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def make_cfg(*overrides: str) -> TrainConfig:
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.progress=false", "run.device=cpu", "algo.name=grpo", "algo.lr=1e-3",
            "algo.mini_batch_size=4", "algo.micro_batch_size=4", "eval.episodes=2", "eval.every=3", "mi.every=2",
            "filter.value=0.5", "filter.max_empty_steps=0"]
    return load_config(None, base + list(overrides))


def _fit(model_dir: Path, run_dir: Path, cfg: TrainConfig, **kw) -> Trainer:
    trainer = Trainer(cfg, run_dir, policy=HFPolicy.from_pretrained(model_dir), **kw)
    trainer.fit()
    return trainer


def _records(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the timings (`perf/`), which differ between any two runs."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


# ------------------------------------------------------------------ summary.md: why the run stopped
@pytest.mark.parametrize("steps_run,run_steps,shown", [(3, 3, False), (3, 5, True)])
def test_the_summary_names_a_stop_only_when_steps_were_left(tmp_path, steps_run, run_steps, shown):
    """A limit reached on the last step stopped nothing: "3 of 3; stopped at the time limit" was misleading."""
    cfg = load_config(None, [f"run.steps={run_steps}"])
    history = [{"step": s, "rollout/success": 0.5} for s in range(1, steps_run + 1)]
    text = write_summary(tmp_path, cfg, history, f"{TIME_STOP} run.max_minutes=1").read_text()
    assert f"steps run: {steps_run} of {run_steps}" in text
    assert (TIME_STOP in text) is shown


def test_a_time_limit_reached_on_the_last_step_is_not_reported_as_a_stop(model_dir, tmp_path):
    # 1e-6 minutes pass during the first step: a 1-step run ends as planned, a 3-step one stops after step 1.
    _fit(model_dir, tmp_path / "one", make_cfg("run.steps=1", "run.max_minutes=1e-6"))
    text = (tmp_path / "one" / "summary.md").read_text()
    assert "steps run: 1 of 1" in text and TIME_STOP not in text
    _fit(model_dir, tmp_path / "three", make_cfg("run.steps=3", "run.max_minutes=1e-6"))
    text = (tmp_path / "three" / "summary.md").read_text()
    assert "steps run: 1 of 3" in text and f"{TIME_STOP} run.max_minutes=1e-06" in text


# ------------------------------------------------------------------ max_minutes: stop, validate, resume
def test_a_run_stopped_by_the_time_limit_validates_then_resumes_as_an_uninterrupted_run(model_dir, tmp_path):
    full = tmp_path / "full"
    _fit(model_dir, full, make_cfg("run.steps=6", "run.save_every=2"))
    cfg = make_cfg("run.steps=6", "run.save_every=2")

    def stop_after_step_3(record: dict) -> None:
        if record.get("step") == 3 and "perf/step_s" in record:
            cfg.run.max_minutes = 1e-9  # a live key: the limit has passed when the loop next looks

    part = tmp_path / "part"
    trainer = _fit(model_dir, part, cfg, on_step=stop_after_step_3)
    assert trainer.state.step == 3 and trainer.saved_step == 3  # step 3 is off the save cadence: saved at the stop
    last = _records(part)[-1]
    assert last["step"] == 3 and "val/success" in last  # validated once more at the stop
    _fit(model_dir, part, make_cfg("run.steps=6", "run.save_every=2"), resume=True)
    steps = {r["step"]: r for r in _records(full) if "rollout/success" in r}
    resumed = {r["step"]: r for r in _records(part) if "rollout/success" in r}
    assert sorted(resumed) == sorted(steps) == list(range(1, 7))
    assert resumed == steps


def test_ragen_train_says_how_to_continue_a_run_stopped_by_the_time_limit(make_tiny_model, tmp_path, capsys):
    model = make_tiny_model(BANDIT_CORPUS)
    run_dir = tmp_path / "run"
    args = [str(base_config_file(tmp_path)), *bandit_args(model, "filter.max_empty_steps=0", steps=3)]
    assert main([*args, "run.max_minutes=1e-6", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"stopped at step 1 of 3 by the time limit (run.max_minutes=1e-06); continue with `ragen train --resume " \
           f"{run_dir}`" in out
    assert main(["--resume", str(run_dir), "run.max_minutes=0"]) == 0  # the command it names finishes the run
    assert "by the time limit" not in capsys.readouterr().out
    assert "steps run: 3 of 3" in (run_dir / "summary.md").read_text()


# ------------------------------------------------------------------ keep_every with save_every
@pytest.mark.parametrize("save_every, expected", [(5, ["step_000003.pt", "step_000006.pt"]),
                                                   (0, ["step_000003.pt", "step_000006.pt"])])
def test_keep_every_keeps_its_copies_whatever_save_every_is(model_dir, tmp_path, save_every, expected):
    """A numbered copy every run.keep_every steps, as documented: the copy is made by a save, and saves came only on
    run.save_every's cadence (save_every=5, keep_every=3: no copy at 3 or 6; save_every=0: none at all)."""
    _fit(model_dir, tmp_path / "r", make_cfg("run.steps=7", f"run.save_every={save_every}", "run.keep_every=3"))
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").glob("step_*.pt"))
    assert names == expected
    assert (tmp_path / "r" / "checkpoints" / "latest.pt").is_file()
