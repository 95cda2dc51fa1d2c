"""An episode that ``max_turns`` ends before the env does is recorded as truncated (Gymnasium's TimeLimit
convention): it was recorded as neither terminated nor truncated, so ``done`` had no reason in the record."""

from __future__ import annotations

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the ragen/ ids)
from ragen_core.episode import ChatEpisode

WRONG = "<think>x</think><answer>Up</answer>"


def _capped(max_turns: int) -> ChatEpisode:
    env = gym.make("ragen/FrozenLake-v0", is_slippery=False, max_actions_per_turn=1, size=8)
    ep = ChatEpisode(env, length_limit=64, max_turns=max_turns)
    ep.reset(seed=3)
    return ep


def test_the_turn_cap_marks_the_episode_truncated_not_terminated():
    ep = _capped(2)
    first = ep.step(WRONG)  # Up from the top row stays put: the env goes on
    assert not ep.done and not first.terminated and not first.truncated
    last = ep.step(WRONG)
    assert ep.done and last.truncated and not last.terminated
    assert ep.truncated and not ep.terminated


def test_an_env_that_ends_on_the_capped_turn_is_terminated_not_truncated():
    env = gym.make("ragen/Bandit-v0")
    ep = ChatEpisode(env, length_limit=64, max_turns=1)
    ep.reset(seed=0)
    step = ep.step("<think>x</think><answer>" + env.unwrapped.oracle()[0] + "</answer>")
    assert ep.done and step.terminated and not step.truncated
