"""The tiny configs of SearchQA, WebShop, Sudoku, 2048, MetaMathQA, Code and Sokoban with images.

Each shipped config loads, passes the trainer's preflight (its env kwargs make an env), and trains two steps
after a warm start of 8 demonstrated episodes (everything else as shipped, only the sizes cut down: 2 groups of
2, 2 validation episodes), with the test fixtures' tiny model (also for the configs shipped on "tiny-base", whose
pre-training tests/policy/test_tiny_base.py covers); its metrics.jsonl has the warm start's loss and the
rollout figures, the per-turn ones included. The vision config also gets a plumbing check: with the text
observation withheld, the prompts of different levels are the same tokens, the model's output still depends on
the image, and a two-step run trains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from ragen_core.apps.train import preflight
from ragen_core.rollout import RolloutSettings, reset_episode
from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: config file -> (does the env say which actions are final, the words its tokenizer should know).
NEW_CONFIGS: dict[str, tuple[bool, str]] = {
    "searchqa_tiny.toml": (True, "Question: search finish Search results for I need the so I search"),
    "webshop_tiny.toml": (True, "Instruction: search click Buy Now Back to Search Result Selected under"),
    "sudoku_tiny.toml": (False, "R1C1=1 sees so Empty cells"),
    "game2048_tiny.toml": (False, "Up Down Left Right merges leaves empty cells Score Target"),
    "math_tiny.toml": (False, "Question: stickers buys change Incorrect. Please think again."),
    "code_tiny.toml": (False, "Problem: print input def return Reverse the words python"),
}
#: Cut-down sizes: a warm start of 8 episodes, 2 steps of 2 groups x 2, 2 validation episodes, no MI.
SMALL = ["warm_start.sft_episodes=8", "warm_start.epochs=1", "run.steps=2", "run.progress=false",
         "rollout.groups=2", "rollout.group_size=2", "eval.episodes=2", "eval.every=2", "mi.every=0",
         "algo.mini_batch_size=8", "algo.micro_batch_size=8"]


def per_turn_keys(max_turns: int, tool: bool) -> set[str]:
    keys = {"rollout/num_turns", "rollout/invalid_action", "rollout/reward_turn",
            *(f"rollout/reward_share_turn{k}" for k in range(1, max_turns + 1))}
    return keys | ({"rollout/tool_use"} if tool else set())


def run_two_steps(cfg: Any, run_dir: Path, policy: Any) -> list[dict[str, Any]]:
    """Fit `cfg` with `policy`; the records of metrics.jsonl."""
    Trainer(cfg, run_dir, policy=policy).fit()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def check_records(records: list[dict[str, Any]], max_turns: int, tool: bool) -> None:
    """Warm start logged at step 0, two training steps with every rollout figure, validation at the end."""
    assert any("sft/loss_first" in r and r["step"] == 0 for r in records)
    steps = [r for r in records if "rollout/success" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        missing = per_turn_keys(max_turns, tool) - set(r)
        assert not missing, missing
        assert ("rollout/tool_use" in r) == tool
        assert 0.0 <= r["rollout/invalid_action"] <= 1.0 and 1.0 <= r["rollout/num_turns"] <= max_turns
    assert any("val/success" in r and r["step"] == 2 for r in records)


@pytest.mark.parametrize("name", sorted(NEW_CONFIGS))
def test_new_config_loads_and_trains_two_steps(name, make_tiny_policy, tmp_path):
    tool, words = NEW_CONFIGS[name]
    shipped = load_config(CONFIGS / name)
    preflight(shipped)  # the env id and kwargs make an env
    assert shipped.model.path in ("tiny", "tiny-base") and shipped.warm_start.sft_episodes > 0
    assert shipped.warm_start.action_noise > 0 and shipped.rollout.system_prompt is False
    cfg = load_config(CONFIGS / name, SMALL)
    records = run_two_steps(cfg, tmp_path / "run", make_tiny_policy(words))
    check_records(records, cfg.rollout.max_turns, tool)


# ---------------------------------------------------------------------------------------------- vision
#: The text withheld: Sokoban's obs_format="image" shows one fixed sentence for every state, so the image is all
#: the policy sees of the level.
IMAGE_ONLY = 'env.kwargs.obs_format="image"'


@pytest.fixture(scope="module")
def vision_policy(make_tiny_policy):
    return make_tiny_policy("Up Down Left Right Player box target Push from Go", vision=True)


def test_vision_config_trains_two_steps(vision_policy, tmp_path):
    shipped = load_config(CONFIGS / "sokoban_vision_tiny.toml")
    preflight(shipped)
    assert "Vision" in shipped.env.id and shipped.model.path == "tiny"  # the trainer loads the tiny vision model
    cfg = load_config(CONFIGS / "sokoban_vision_tiny.toml", SMALL)
    records = run_two_steps(cfg, tmp_path / "run", vision_policy)
    check_records(records, cfg.rollout.max_turns, tool=False)


def _first_prompt(env_id: str, kwargs: dict[str, Any], seed: int, policy: Any) -> tuple[list[int], np.ndarray]:
    """The token ids and the image of the first prompt of level `seed`, as the rollout builds it."""
    env = gym.make(env_id, **kwargs)
    start = reset_episode(env, seed, RolloutSettings(system_prompt=False), image_token=policy.image_token)
    ids = list(policy.encode_chat(start.messages(), add_generation_prompt=True))
    return ids, start.images[0]


def test_the_policy_reads_the_image_when_the_text_is_withheld(vision_policy):
    """Two levels with the text withheld: the prompts are the same tokens, the images differ, and the model's
    log-probs of one response differ with the image (and not between two calls with the same image)."""
    cfg = load_config(CONFIGS / "sokoban_vision_tiny.toml", [IMAGE_ONLY])
    ids_a, image_a = _first_prompt(cfg.env.id, cfg.env.kwargs, 1, vision_policy)
    ids_b, image_b = _first_prompt(cfg.env.id, cfg.env.kwargs, 2, vision_policy)
    assert ids_a == ids_b and not np.array_equal(image_a, image_b)
    response = list(vision_policy.tokenizer("<think> go </think> <answer> Up </answer>",
                                            add_special_tokens=False)["input_ids"])
    seq = torch.tensor([ids_a + response] * 3)
    with torch.no_grad():
        out = vision_policy.forward_logprobs(seq, torch.ones_like(seq), images=[[image_a], [image_b], [image_a]])
    tail = out.logprobs[:, len(ids_a):]
    assert torch.equal(tail[0], tail[2])
    assert (tail[0] - tail[1]).abs().max() > 1e-4


def test_a_run_with_the_text_withheld_trains(vision_policy, tmp_path):
    cfg = load_config(CONFIGS / "sokoban_vision_tiny.toml", [*SMALL, IMAGE_ONLY])
    trainer = Trainer(cfg, tmp_path / "run", policy=vision_policy)
    trainer.fit()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    check_records(records, cfg.rollout.max_turns, tool=False)
    batch = trainer.collect()
    first = [tr.turns[0] for tr in batch.trajectories]
    assert all(t.prompt_ids == first[0].prompt_ids for t in first)  # the text says nothing about the level
    assert batch.images is not None and all(len(t.images) == 1 for t in first)
    assert not np.array_equal(first[0].images[0], first[-1].images[0])  # two groups, two levels
