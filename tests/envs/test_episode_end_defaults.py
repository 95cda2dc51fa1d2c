"""Every episode ends, also when no answer is ever valid; and the default turn limit never binds in a training run.

An answer that executes nothing spends no action of the budget, so an env whose only limit is its budget would
never end an episode of invalid answers (Gymnasium users get no TimeLimit: no id registers max_episode_steps).
The expected limits below are the documented ones (docs/envs.md, "When an episode ends"), written out here.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.base import TextAgentEnv
from ragen_envs.registration import env_ids

ROOT = Path(__file__).resolve().parents[2]
INVALID = "I don't know"

#: id -> (the turn that ends an episode of invalid answers, "truncated" or "terminated"), from the documented
#: defaults: Sokoban / FrozenLake budget 10 -> 20 turns, PocketCube 20 -> 40, Sudoku 4x4 16 -> 32, 2048 no budget
#: -> 10,000; the others end at their own task turn limit (Bandit, Countdown, Code: 1; MetaMathQA, SearchQA: 5;
#: WebShop: 9), which terminates.
EXPECTED_END = {
    "ragen/Sokoban-v0": (20, "truncated"),
    "ragen/Sokoban-Vision-v0": (20, "truncated"),
    "ragen/FrozenLake-v0": (20, "truncated"),
    "ragen/FrozenLake-Vision-v0": (20, "truncated"),
    "ragen/PocketCube-v0": (40, "truncated"),
    "ragen/PocketCube-Vision-v0": (40, "truncated"),
    "ragen/Sudoku-v0": (32, "truncated"),
    "ragen/2048-v0": (10_000, "truncated"),
    "ragen/Bandit-v0": (1, "terminated"),
    "ragen/Countdown-v0": (1, "terminated"),
    "ragen/MetaMathQA-v0": (5, "terminated"),
    "ragen/Code-v0": (1, "terminated"),
    "ragen/SearchQA-v0": (5, "terminated"),
    "ragen/WebShop-v0": (9, "terminated"),
}


def test_the_table_covers_every_id():
    assert set(EXPECTED_END) == set(env_ids())


def _turns_until_the_end(env, limit: int) -> tuple[int, bool, bool]:
    for turn in range(1, limit + 1):
        _, _, terminated, truncated, info = env.step(INVALID)
        assert info["actions_executed"] == []
        if terminated or truncated:
            return turn, terminated, truncated
    return limit + 1, False, False


@pytest.mark.parametrize("env_id", env_ids())
def test_an_episode_of_invalid_answers_ends_at_the_documented_turn(env_id):
    end, how = EXPECTED_END[env_id]
    env = gym.make(env_id)  # plain gym.make: no rollout, no TimeLimit around it
    env.reset(seed=0)
    turn, terminated, truncated = _turns_until_the_end(env, end + 5)
    assert turn == end, f"{env_id}: the episode ended on turn {turn}, expected {end}"
    assert (terminated, truncated) == ((True, False) if how == "terminated" else (False, True))


@pytest.mark.parametrize("env_id, kwargs, end", [
    ("ragen/FrozenLake-v0", {"max_actions": 3}, 6),  # follows the budget
    ("ragen/Sokoban-v0", {"max_actions": None}, 10_000),  # no budget
    ("ragen/Sudoku-v0", {"max_turns": 4}, 4),  # an explicit limit wins
    ("ragen/2048-v0", {"max_actions": 7}, 14),
])
def test_the_default_follows_max_actions_and_an_explicit_max_turns_wins(env_id, kwargs, end):
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    turn, terminated, truncated = _turns_until_the_end(env, end + 5)
    assert (turn, terminated, truncated) == (end, False, True)


class Steps(TextAgentEnv):
    """A task that never ends by itself: each action adds one step (independent of the real envs)."""

    ACTIONS = ("Step",)

    def _reset_task(self, options):
        self.steps = 0
        return {}

    def _execute(self, action):
        self.steps += 1
        return 0.0, False

    def _state_text(self):
        return f"{self.steps} steps"

    def _task_instructions(self):
        return "Step."

    def _is_success(self):
        return False


def test_valid_play_is_never_cut_by_the_default_before_the_budget_is_spent():
    """As many invalid answers as the budget has actions, then one valid action a turn: every action of the budget
    still runs, and the budget (not the turn limit) ends the episode, on turn 2 x budget at the latest."""
    env = Steps(max_actions=4, max_actions_per_turn=1)
    env.reset(seed=0)
    for _ in range(4):
        assert not any(env.step(INVALID)[2:4])
    for turn in range(4):
        _, _, terminated, truncated, info = env.step("<think>x</think><answer>Step</answer>")
        assert info["actions_executed"] == ["Step"]
        assert truncated == (turn == 3) and not terminated
    assert env.steps == 4 and info["actions_left"] == 0


def test_an_env_without_budget_or_task_limit_still_ends():
    env = Steps()
    env.reset(seed=0)
    turns = 0
    while True:
        turns += 1
        _, _, terminated, truncated, _ = env.step("<think>x</think><answer>Step</answer>")
        if terminated or truncated or turns > 20_000:
            break
    assert truncated and turns == 10_000


CONFIGS = sorted((ROOT / "configs").glob("*.toml"))


def test_there_are_shipped_configs():
    assert len(CONFIGS) >= 10


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_the_default_turn_limit_never_binds_in_a_shipped_config(path):
    """The rollout stops every episode after `rollout.max_turns` turns. Playing that many turns of invalid answers
    (they spend no budget, so only a turn limit can end them) must never truncate the env: a default turn limit at
    or below the rollout's would change the run (its truncated flags at least). Turn limits of the task itself
    (Bandit's max_answers, SearchQA's max_turns, ...) terminate and are part of the task, not of this default."""
    from ragen_core.training.config import load_config

    cfg = load_config(path)
    env = gym.make(cfg.env.id, **dict(cfg.env.kwargs))
    env.reset(seed=cfg.env.train_seed)
    for turn in range(1, cfg.rollout.max_turns + 1):
        _, _, terminated, truncated, _ = env.step(INVALID)
        assert not truncated, f"{path.name}: the env truncated on turn {turn} of {cfg.rollout.max_turns}"
        if terminated:
            break
    unwrapped = env.unwrapped
    assert unwrapped.max_turns is None or unwrapped.max_turns > cfg.rollout.max_turns
