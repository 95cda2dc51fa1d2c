"""Trainer paths beyond the core loop: vision envs end to end, optional TensorBoard logging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.apps import train


def test_vision_env_trains_end_to_end_on_cpu(tmp_path):
    status = train.main(
        [
            str(Path(__file__).resolve().parents[2] / "configs" / "sokoban_tiny.toml"),
            'env.id="ragen/Sokoban-Vision-v0"',
            'model.path="tiny-vision"',
            "run.steps=1",
            "rollout.groups=2",
            "rollout.group_size=2",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=16",
            "warm_start.sft_episodes=0",
            "eval.every=0",
            "mi.every=0",
            "filter.enabled=false",  # the untrained model's rewards have no variance; update anyway
            f'run.out_dir="{tmp_path}"',
            "run.progress=false",
        ]
    )
    assert status == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = rows[-1]
    assert last["loss/grad_norm"] > 0  # the policy received a gradient through the image-conditioned forward
    assert last["rollout/trajectories"] == 4


def test_tensorboard_without_the_package_is_a_clear_start_up_error(monkeypatch):
    import sys

    import pytest

    from ragen_core.training.config import ConfigError

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    from ragen_core.training.report import require_tensorboard

    with pytest.raises(ConfigError, match=r"ragen2\[tensorboard\]"):
        require_tensorboard()


def test_format_penalty_cheaper_than_a_wasted_turn_is_flagged(make_tiny_policy, tmp_path):
    """Sokoban's defaults (2 actions per turn at -0.1 each, format penalty -0.1) make a malformed answer the
    cheaper failure; the trainer warns, and says nothing when the penalty is low enough or one action per turn."""
    import warnings

    import gymnasium as gym
    import pytest

    import ragen_envs  # noqa: F401
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer, format_penalty_warning

    msg = format_penalty_warning(gym.make("ragen/Sokoban-v0"))
    assert msg is not None and "-0.2" in msg and "-0.1" in msg
    assert format_penalty_warning(gym.make("ragen/Sokoban-v0", max_actions_per_turn=1)) is None
    assert format_penalty_warning(gym.make("ragen/Sokoban-v0", format_penalty=-0.5)) is None
    assert format_penalty_warning(gym.make("ragen/Sokoban-v0", max_actions_per_turn=3, format_penalty=-0.3)) is None
    assert format_penalty_warning(gym.make("ragen/Sokoban-v0", max_actions_per_turn=3, format_penalty=-0.2))
    assert format_penalty_warning(gym.make("ragen/Bandit-v0")) is None  # no per-action cost

    policy = make_tiny_policy("Player Boxes Targets")
    base = ["env.id=ragen/Sokoban-v0", "rollout.groups=1", "rollout.group_size=2", "eval.episodes=1",
            "run.device=cpu", "run.progress=false"]
    with pytest.warns(UserWarning, match="break the answer format"):
        Trainer(load_config(None, base), tmp_path / "a", policy=policy)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        Trainer(load_config(None, [*base, "env.kwargs.max_actions_per_turn=1"]), tmp_path / "b", policy=policy)


def test_run_threads_sets_torch_threads_and_rejects_negatives(make_tiny_policy, tmp_path):
    import torch

    from ragen_core.training.config import ConfigError, load_config
    from ragen_core.training.trainer import Trainer

    base = ["env.id=ragen/Sokoban-v0", "env.kwargs.max_actions_per_turn=1", "rollout.groups=1",
            "rollout.group_size=2", "eval.episodes=1", "run.device=cpu", "run.progress=false"]
    before = torch.get_num_threads()
    policy = make_tiny_policy("Player Boxes Targets")
    try:
        torch.set_num_threads(2)
        Trainer(load_config(None, base), tmp_path / "default", policy=policy)
        assert torch.get_num_threads() == 1  # 0, the default: one thread for a model as small as the tiny one
        torch.set_num_threads(2)
        Trainer(load_config(None, [*base, "run.threads=2"]), tmp_path / "two", policy=policy)
        assert torch.get_num_threads() == 2
        Trainer(load_config(None, [*base, "run.threads=1"]), tmp_path / "one", policy=policy)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="run.threads"):
        load_config(None, [*base, "run.threads=-1"])


def test_auto_threads_leave_torch_alone_for_large_models_and_gpus():
    import torch

    from ragen_core.training.trainer import AUTO_ONE_THREAD_PARAMETERS, cpu_threads

    small = torch.nn.Linear(10, 10, device="meta")
    side = int(AUTO_ONE_THREAD_PARAMETERS ** 0.5) + 1
    large = torch.nn.Linear(side, side, bias=False, device="meta")  # just over the bound, no memory
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert cpu_threads(0, small, cpu) == 1
    assert cpu_threads(0, large, cpu) == 0  # 0: torch's default (one per core)
    assert cpu_threads(0, small, gpu) == 0
    assert cpu_threads(3, large, cpu) == 3 and cpu_threads(3, small, gpu) == 3  # an explicit setting wins


def test_the_validation_bar_counts_turns_through_the_rollout_callback(make_tiny_policy, tmp_path, monkeypatch):
    """The bar advances once per turn of the batched validation rollout, driven by the rollout's `on_turn`
    callback: the trainer's policy stays the one it was given."""
    from ragen_core.training import trainer as train_mod
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    class Bar:
        def __init__(self, total, done, enabled, desc, unit):
            self.total, self.desc, self.unit, self.updates, self.closed = total, desc, unit, 0, False

        def update(self, n):
            assert trainer.policy is policy  # no stand-in policy while the rollout runs
            self.updates += n

        def close(self):
            self.closed = True

    bars, batches = [], []
    monkeypatch.setattr(train_mod, "_progress", lambda *a, **k: bars.append(Bar(*a, **k)) or bars[-1])
    real_rollout = train_mod.rollout
    monkeypatch.setattr(train_mod, "rollout", lambda *a, **k: batches.append(real_rollout(*a, **k)) or batches[-1])
    policy = make_tiny_policy("Player Boxes Targets")
    cfg = load_config(None, ["env.id=ragen/Sokoban-v0", "env.kwargs.max_actions_per_turn=1", "rollout.groups=1",
                             "rollout.group_size=2", "rollout.max_turns=3", "rollout.max_new_tokens=4",
                             "eval.episodes=2", "run.device=cpu", "run.progress=true"])
    trainer = Trainer(cfg, tmp_path, policy=policy)
    metrics = trainer._timed_evaluate(progress_label="validation at step 0")
    (bar,) = bars
    assert (bar.total, bar.desc, bar.unit) == (3, "validation at step 0", "turn") and bar.closed
    assert bar.updates == max(len(t.turns) for t in batches[0].trajectories) and metrics["val/response_length"] > 0
    assert trainer._timed_evaluate() and len(bars) == 1  # no label: no bar
