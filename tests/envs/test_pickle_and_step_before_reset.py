"""Every env pickles with the standard library mid-episode and the copy plays on exactly as the original; and
stepping an env before its first reset gives a defined result (no crash) for every id."""

from __future__ import annotations

import copy
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.protocol import FORMAT_PENALTY, vocabulary_matcher
from ragen_envs.registration import env_ids

IDS = env_ids()
#: Kwargs that give the single-answer envs a second turn, so that "mid-episode" exists for them too.
MULTI_TURN = {
    "ragen/Bandit-v0": {"max_answers": 3},
    "ragen/Countdown-v0": {"max_answers": 3},
    "ragen/Code-v0": {"multi_turn_repair": True},
}


def T(answer: str) -> str:
    return f"<think>x</think><answer>{answer}</answer>"


def _same_observation(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and a["text"] == b["text"] and np.array_equal(a["image"], b["image"])
    return a == b


def _step(env, response):
    obs, reward, terminated, truncated, info = env.step(response)
    return obs, float(reward), terminated, truncated, info["actions_executed"], info["success"]


def test_the_vocabulary_matcher_pickles_and_matches_the_same():
    matcher = vocabulary_matcher(["Up", "Down"], {"north": "Up"})
    for clone in (pickle.loads(pickle.dumps(matcher)), copy.deepcopy(matcher)):
        for piece in ("up", "  NORTH ", "Down", "left", "u p"):
            assert clone(piece) == matcher(piece)
    assert matcher(" north ") == "Up" and matcher("left") is None


@pytest.mark.parametrize("env_id", IDS)
def test_a_pickled_env_plays_on_exactly_as_the_original(env_id):
    env = gym.make(env_id, **MULTI_TURN.get(env_id, {})).unwrapped
    env.reset(seed=3)
    env.step("I don't know")  # mid-episode: a turn has been played (and the RNGs have been used at reset)
    clone = pickle.loads(pickle.dumps(env))
    assert clone is not env
    rng = np.random.default_rng(0)
    responses = []
    for _ in range(3):
        if env._terminated or env._truncated:
            break
        responses.append(T(env.noise_answer("random", rng)))  # a valid action of the current state
        a, b = _step(env, responses[-1]), _step(clone, responses[-1])
        assert _same_observation(a[0], b[0]) and a[1:] == b[1:], f"{env_id}: the copy diverged on {responses[-1]!r}"
    a, b = _step(env, "junk"), _step(clone, "junk")
    assert _same_observation(a[0], b[0]) and a[1:] == b[1:]
    assert responses, f"{env_id}: the episode ended before the copy was played"


@pytest.mark.parametrize("env_id", IDS)
def test_the_wrapped_env_from_gym_make_pickles_too(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    clone = pickle.loads(pickle.dumps(env))
    a, b = env.step("junk"), clone.step("junk")
    assert _same_observation(a[0], b[0]) and a[1:4] == b[1:4]


@pytest.mark.parametrize("env_id", IDS)
def test_stepping_the_unwrapped_env_before_reset_gives_a_defined_result(env_id):
    env = gym.make(env_id).unwrapped
    action = env.ACTIONS[0] if env.ACTIONS else "print(1)"
    obs, reward, terminated, truncated, info = env.step(T(action))
    assert env.observation_space.contains(obs)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert {"action_is_valid", "actions_executed", "success", "format_penalty", "turn"} <= set(info)
    # The env still works normally once reset.
    env.reset(seed=0)
    env.step(T(action))


def test_code_before_reset_runs_nothing_and_says_to_reset():
    env = gym.make("ragen/Code-v0").unwrapped
    obs, reward, terminated, _, info = env.step(T("print(1)"))
    assert info["actions_executed"] == [] and not info["action_is_valid"] and not info["success"]
    assert reward == pytest.approx(FORMAT_PENALTY)
    assert "reset()" in obs
    assert terminated  # the one allowed submission was used up (as Countdown and Bandit do before reset)
