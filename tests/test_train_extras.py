"""Trainer paths beyond the core loop: vision envs end to end, optional TensorBoard logging."""

from __future__ import annotations

import json
from pathlib import Path

from ragen_core import train


def test_vision_env_trains_end_to_end_on_cpu(tmp_path):
    status = train.main(
        [
            str(Path(__file__).resolve().parent.parent / "configs" / "sokoban_tiny.toml"),
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

    from ragen_core.config import ConfigError

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    from ragen_core.report import require_tensorboard

    with pytest.raises(ConfigError, match=r"ragen2\[tensorboard\]"):
        require_tensorboard()
