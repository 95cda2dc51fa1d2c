"""The rollout / episode / TRL-reward API with inputs an outside review tried: a responder returning the wrong
number of texts or non-text, reset options of the wrong length or kind, non-integer counts and seeds (1.5 used to be
truncated to 1), settings of the wrong type or out of range. Each gets a ValueError or TypeError naming the argument
before any env is stepped; valid inputs (numpy integers included) play as before."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from ragen_core.episode import ChatEpisode, per_rollout_options, rollout_option
from ragen_core.rollout import RolloutOptions, RolloutSettings, reset_episode, rollout
from ragen_envs.base import TextAgentEnv


class StopEnv(TextAgentEnv):
    """Hand-built env: "Stop" ends the episode with reward 1; the start value depends on the seed."""

    ACTIONS = ("Stop",)

    def __init__(self, **kw: Any):
        super().__init__(max_actions_per_turn=1, max_actions=4, **kw)

    def _reset_task(self, options):
        self.n = int(self.np_random.integers(0, 1000))
        self.options = options
        return {}

    def _execute(self, action):
        return 1.0, True

    def _state_text(self):
        return f"n = {self.n}"

    def _task_instructions(self):
        return "Stop."

    def _is_success(self):
        return True


ANSWER = "<think> ok </think> <answer> Stop </answer>"
ONE_TURN = RolloutSettings(max_turns=1)


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("n = 5 Stop")


def answer_all(envs, idx):
    return [ANSWER] * len(idx)


def play(policy, n_envs=4, seeds=(3, 4), group_size=2, settings=ONE_TURN, **kw):
    return rollout(policy, [StopEnv() for _ in range(n_envs)], seeds, group_size, settings, **kw)


# ------------------------------------------------------------------------------------------------ the responder
@pytest.mark.parametrize("count", [1, 3, 5])
def test_a_responder_with_the_wrong_number_of_texts_is_named(policy, count):
    # fewer texts used to fail inside zip(); more were dropped without a word
    with pytest.raises(ValueError, match=rf"responder must return one text per active episode \(4\), got {count}"):
        play(policy, responder=lambda envs, idx: [ANSWER] * count)


@pytest.mark.parametrize("bad", [None, 5, b"<answer> Stop </answer>", ["Stop"]])
def test_a_responder_text_that_is_not_a_str_is_named(policy, bad):
    with pytest.raises(TypeError, match=r"responder must return str texts; entry 1 is"):
        play(policy, responder=lambda envs, idx: [ANSWER, bad, ANSWER, ANSWER])


def test_a_responder_may_return_any_iterable_of_texts(policy):
    batch = play(policy, responder=lambda envs, idx: (ANSWER for _ in idx))
    assert batch.returns.tolist() == [1.0] * 4
    want = policy.tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
    assert [t.turns[0].response_ids for t in batch.trajectories] == [want] * 4


# ------------------------------------------------------------------------------------------------ reset options
@pytest.mark.parametrize("n", [2, 5])
def test_reset_options_of_another_length_are_named(policy, n):
    # a short list used to raise IndexError; extra entries were ignored
    with pytest.raises(ValueError, match=rf"reset_options must have one entry per episode \(P \* G = 4\), got {n}"):
        play(policy, responder=answer_all, reset_options=[None] * n)


@pytest.mark.parametrize("options", [{"payoff_seed": 1}, "x", 5])
def test_reset_options_that_are_not_a_list_are_named(policy, options):
    with pytest.raises(TypeError, match="reset_options must be None or a list"):
        play(policy, responder=answer_all, reset_options=options)


def test_a_reset_option_that_is_not_a_dict_is_named(policy):
    with pytest.raises(TypeError, match=r"reset_options\[2\] must be None or a dict"):
        play(policy, responder=answer_all, reset_options=[None, None, 7, None])


def test_reset_options_reach_their_envs(policy):
    envs = [StopEnv() for _ in range(4)]
    opts = [{"k": i} for i in range(4)]
    rollout(policy, envs, [3, 4], 2, ONE_TURN, responder=answer_all, reset_options=opts)
    assert [e.options for e in envs] == opts


# ------------------------------------------------------------------------------------------------ counts and seeds
@pytest.mark.parametrize("group_size", [1.5, 2.0, True, 0, "2", None])
def test_group_size_must_be_a_positive_integer(policy, group_size):
    with pytest.raises(ValueError, match=rf"group_size must be an integer >= 1, got {group_size!r}"):
        play(policy, responder=answer_all, group_size=group_size)


@pytest.mark.parametrize("seeds", [[3, 1.7], [True, 4], [3, -1], [3, "4"]])
def test_seeds_must_be_non_negative_integers(policy, seeds):
    with pytest.raises(ValueError, match=r"seeds\[[01]\] must be an integer >= 0"):
        play(policy, responder=answer_all, seeds=seeds)


@pytest.mark.parametrize("seeds", [3, "34", None])
def test_seeds_must_be_a_list(policy, seeds):
    with pytest.raises(TypeError, match="seeds must be a list of integer seeds"):
        play(policy, responder=answer_all, seeds=seeds)


def test_numpy_and_tensor_counts_play_like_ints(policy):
    want = play(policy, responder=answer_all)
    for seeds, g in ((np.array([3, 4]), np.int64(2)), (torch.tensor([3, 4]), 2)):
        got = play(policy, responder=answer_all, seeds=seeds, group_size=g)
        assert torch.equal(got.input_ids, want.input_ids) and got.group_size == 2
        assert [t.seed for t in got.trajectories] == [3, 3, 4, 4]
        assert all(type(t.seed) is int for t in got.trajectories)


# ------------------------------------------------------------------------------------------------ settings
@pytest.mark.parametrize("settings", [RolloutOptions(max_turns=1), {"max_turns": 1}, 5])
def test_settings_must_be_rollout_settings(policy, settings):
    with pytest.raises(TypeError, match="settings must be None or a RolloutSettings"):
        play(policy, responder=answer_all, settings=settings)


def test_settings_changed_after_construction_are_checked(policy):
    s = RolloutSettings(max_turns=1)
    s.max_new_tokens = 2.5
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        play(policy, responder=answer_all, settings=s)


@pytest.mark.parametrize("kwargs, match", [
    (dict(length_limit=1.5), "length_limit must be an integer >= 0"),
    (dict(length_limit=-1), "length_limit must be an integer >= 0"),
    (dict(temperature="1"), "temperature must be"),
    (dict(temperature=float("inf")), "temperature must be"),
    (dict(top_p=True), "top_p must be"),
    (dict(top_p="0.9"), "top_p must be"),
    (dict(system_prompt="no"), "system_prompt must be True or False"),
    (dict(greedy="no"), "greedy must be True or False"),
    (dict(context=5), "context must be"),
    (dict(stop=5), "stop must be"),
    (dict(max_turns=1.5), "max_turns must be an integer >= 1"),
])
def test_rollout_settings_name_a_bad_option(kwargs, match):
    with pytest.raises(ValueError, match=f"^{match}"):
        RolloutSettings(**kwargs)


# ------------------------------------------------------------------------------------------------ the episode
@pytest.mark.parametrize("call, match", [
    (lambda: rollout_option("payoff_seed", 1.7, 0, 2), "seed must be an integer"),
    (lambda: rollout_option("payoff_seed", 3, 0.5, 2), "k must be an integer >= 0"),
    (lambda: rollout_option("payoff_seed", 3, 0, 1.5), "group_size must be an integer >= 1"),
    (lambda: rollout_option("payoff_seed", 3, 0, True), "group_size must be an integer >= 1"),
    (lambda: per_rollout_options("payoff_seed", [3, 1.7], 2), r"seeds\[1\] must be an integer"),
    (lambda: per_rollout_options("payoff_seed", [3], 1.5), "group_size must be an integer >= 1"),
    (lambda: ChatEpisode(StopEnv(), length_limit=1.5), "length_limit must be an integer >= 0"),
    (lambda: ChatEpisode(StopEnv(), length_limit=10, max_turns=0), "max_turns must be None or an integer >= 1"),
    (lambda: ChatEpisode(StopEnv(), length_limit=10, system_prompt="no"), "system_prompt must be True or False"),
    (lambda: ChatEpisode(StopEnv(), length_limit=10).reset(1.7), "seed must be an integer >= 0"),
    (lambda: reset_episode(StopEnv(), 2.5), "seed must be an integer >= 0"),
])
def test_episode_helpers_name_a_non_integer(call, match):
    with pytest.raises(ValueError, match=f"^{match}"):
        call()


def test_episode_options_of_valid_integers_are_unchanged():
    assert rollout_option("payoff_seed", np.int64(3), 1, np.int64(4)) == {"payoff_seed": 13}
    assert per_rollout_options("payoff_seed", [3, 5], 2) == [{"payoff_seed": v} for v in (6, 7, 10, 11)]
    assert rollout_option("", 1.7, 0, 2) is None  # no option: nothing to compute


def test_a_chat_episode_step_needs_text():
    ep = ChatEpisode(StopEnv(), length_limit=10)
    ep.reset(3)
    with pytest.raises(TypeError, match="response must be a str"):
        ep.step(5)


# ------------------------------------------------------------------------------------------------ TRL reward
def test_env_reward_refuses_seeds_that_are_not_non_negative_integers():
    from ragen_core.integrations.trl.env import EnvReward

    reward = EnvReward("ragen/Bandit-v0")
    for seeds in ([3, 1.7], [3, True], [3, -2], [3, "4"]):
        # 1.7 used to be played as seed 1
        with pytest.raises(ValueError, match=r"seed\[1\] must be an integer >= 0"):
            reward(None, ["x", "y"], seed=seeds)


def test_env_reward_takes_numpy_seeds_like_ints():
    from ragen_core.integrations.trl.env import EnvReward

    reward = EnvReward("ragen/Bandit-v0")
    texts = ["<answer> Trader </answer>", "junk"]
    assert reward(None, texts, seed=np.array([3, 4])) == reward(None, texts, seed=[3, 4])


@pytest.mark.parametrize("group_size", [1.5, True, 0, "2"])
def test_env_reward_refuses_a_group_size_that_is_not_a_positive_integer(group_size):
    from ragen_core.integrations.trl.env import EnvReward

    # without per_rollout_option a bad group size used to be stored and ignored
    for option in (None, "payoff_seed"):
        with pytest.raises(ValueError, match="group_size"):
            EnvReward("ragen/Bandit-v0", group_size=group_size, per_rollout_option=option)


def test_single_turn_dataset_refuses_non_integer_seeds():
    from ragen_core.integrations.trl.env import single_turn_dataset

    with pytest.raises(ValueError, match=r"seeds\[1\] must be an integer >= 0"):
        single_turn_dataset("ragen/Bandit-v0", [3, 1.7])
    with pytest.raises(TypeError, match="seeds must be a list of integer seeds"):
        single_turn_dataset("ragen/Bandit-v0", 3)


def test_trl_environment_takes_a_numpy_seed():
    from ragen_core.integrations.trl.env import RagenEnvironment

    a, b = RagenEnvironment("ragen/Bandit-v0"), RagenEnvironment("ragen/Bandit-v0")
    assert a.reset(seed=np.int64(5)) == b.reset(seed=5)
    with pytest.raises(ValueError, match="non-negative integer 'seed'"):
        a.reset(seed=1.7)
