"""A researcher's own env (a plain gymnasium.Env) through ChatEpisode and the rollout: what it returns is either
recorded as it said or refused in one line naming it."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit

from ragen_core.episode import ChatEpisode
from ragen_core.rollout import RolloutSettings, rollout


class DigitEnv(gym.Env):
    """Guess a digit; the action is the LAST digit anywhere in the text (a parser of the user's own). No render,
    no `action_is_valid` in its info; `obs` picks what reset and step return as the observation."""

    metadata = {"render_modes": []}

    def __init__(self, obs=lambda text: text, secret=7, final_obs=None, reward_type=float):
        self.make_obs, self.secret, self.final_obs, self.reward_type = obs, secret, final_obs, reward_type
        self.action_space = spaces.Text(64)
        self.observation_space = spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.make_obs("Guess a digit."), {"seed_seen": np.int64(seed or 0)}

    def step(self, action):
        digits = re.findall(r"\d", action)
        won = bool(digits) and int(digits[-1]) == self.secret
        obs = self.final_obs if won else self.make_obs(f"{digits[-1] if digits else 'nothing'} is wrong.")
        info = {"success": np.bool_(won), "tags": {"x"}, "score": np.float32(0.5)}
        return obs, self.reward_type(won), won, False, info


def _episode(env, max_turns=4):
    return ChatEpisode(env, length_limit=16, max_turns=max_turns)


@pytest.mark.parametrize("obs, expected", [
    (lambda t: {"msg": t}, "a dict without a 'text' string (keys: 'msg')"),
    (lambda t: {"text": t.encode()}, "a dict whose 'text' is bytes"),
    (lambda t: np.arange(2000), "a numpy array of shape (2000,)"),
    (lambda t: t.encode(), "bytes b'Guess a digit.'"),
    (lambda t: None, "NoneType None"),
])
def test_an_observation_the_model_cannot_be_shown_is_refused_in_one_line(obs, expected):
    """Before, ``str()`` showed the model an empty state (a dict without "text"), numpy's cut ``[0 1 2 ... 1999]``,
    ``b'...'`` or ``None``, and training went on without a word."""
    ep = _episode(DigitEnv(obs=obs))
    with pytest.raises(TypeError) as info:
        ep.reset(0)
    message = str(info.value)
    assert message.startswith("DigitEnv: reset returned an observation the model cannot be shown: ")
    assert expected in message and "\n" not in message


def test_a_bad_observation_from_step_names_the_env_and_changes_nothing():
    calls = iter([lambda t: t, lambda t: None])
    env = DigitEnv()
    env.make_obs = lambda t: next(calls)(t)  # text at reset, None after the first step
    ep = _episode(env)
    ep.reset(0)
    with pytest.raises(TypeError, match=r"^DigitEnv: step returned an observation the model cannot be shown: "):
        ep.step("<answer>1</answer>")
    assert ep.rewards == [] and ep.turn == 0 and not ep.done  # refused before any state changed


def test_the_last_observation_is_not_read():
    """An env that returns None (or anything) with its final step: nobody is shown it, the reward stands."""
    ep = _episode(DigitEnv(final_obs=None))
    ep.reset(0)
    step = ep.step("<think>it is 7</think><answer>7</answer>")
    assert (step.reward, step.terminated, ep.done, ep.success) == (1.0, True, True, True)


def test_a_text_dict_observation_is_shown():
    ep = _episode(DigitEnv(obs=lambda t: {"text": t, "turn": 1}))
    start = ep.reset(0)
    assert "State:\nGuess a digit.\n" in start.user["content"]


@pytest.mark.parametrize("result, expected", [
    ("just the observation", "reset returned str 'just the observation'; expected (observation, info)"),
    (("obs", {}, 3), "reset returned a 3-tuple; expected (observation, info)"),
    (("obs", ["info"]), "reset returned info list ['info']; expected a dict"),
])
def test_a_reset_outside_the_gymnasium_api_is_one_line(result, expected):
    """An old-gym reset that returns the observation alone used to be "too many values to unpack (expected 2)"."""
    env = DigitEnv()
    env.reset = lambda **kw: result
    with pytest.raises(ValueError) as info:
        _episode(env).reset(0)
    assert str(info.value) == f"DigitEnv: {expected}"


def test_an_env_that_raises_in_reset_is_named_in_the_traceback():
    env = gym.make("ragen/Bandit-v0")
    env.unwrapped._reset_task = lambda options: 1 / 0
    with pytest.raises(ZeroDivisionError) as info:
        _episode(env).reset(5)
    assert "raised by ragen/Bandit-v0.reset(seed=5, options=None)" in info.value.__notes__


def test_a_plain_env_that_reports_no_action_is_valid_has_valid_actions():
    """A plain Gymnasium env says nothing of `action_is_valid`; every turn of it counted as an invalid action
    (`rollout/invalid_action` 1.0, `ragen eval`'s invalid_actions) even on the turn that won."""
    ep = _episode(DigitEnv())
    ep.reset(0)
    assert ep.step("<answer>3</answer>").action_valid is True
    assert ep.step("<answer>7</answer>").action_valid is True
    bandit = _episode(gym.make("ragen/Bandit-v0"))
    bandit.reset(0)
    assert bandit.step("nonsense").action_valid is False  # an env that says so is read as it says


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("Guess a digit. is wrong. nothing")


def test_rollout_records_a_plain_env_as_it_said(policy):
    """The rollout with the tiny policy over a plain env behind Gymnasium's TimeLimit (truncation at 2 steps),
    numpy rewards and info values that are not JSON: the records hold the env's rewards and flags, turn by turn
    (a scripted responder, compared with a plain loop over the same env)."""
    texts = {0: ["<answer>1</answer>", "<answer>2</answer>", "<answer>3</answer>"],
             1: ["<answer>1</answer>", "x 7"]}  # episode 1 wins on turn 2 with the user's own parser

    def responder(envs, idx):
        return [texts[i].pop(0) for i in idx]

    envs = [TimeLimit(DigitEnv(reward_type=np.float32), max_episode_steps=2) for _ in range(2)]
    settings = RolloutSettings(max_turns=3, max_new_tokens=8, system_prompt=False)
    batch = rollout(policy, envs, [11], 2, settings, responder=responder)
    lost, won = batch.trajectories
    assert [t.reward for t in lost.turns] == [0.0, 0.0] and (lost.terminated, lost.truncated) == (False, True)
    # won on the limit's step: TimeLimit sets truncated too (Gymnasium's flags, recorded as the env gave them)
    assert [t.reward for t in won.turns] == [0.0, 1.0] and (won.terminated, won.truncated, won.success) == (
        True, True, True)
    assert batch.returns.tolist() == [0.0, 1.0]
    assert batch.summary()["rollout/invalid_action"] == 0.0
    assert all(isinstance(t.reward, float) for t in lost.turns + won.turns)
