"""Bandit: payoffs, arm names, single turn, bad answers."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.bandit import HIGH_RISK_NAMES, LOW_RISK_NAMES, BanditEnv


def answer(text: str) -> str:
    return f"<think>the name sounds steady</think><answer>{text}</answer>"


def pull_many(env: BanditEnv, kind: str, n: int, seed0: int = 0) -> np.ndarray:
    rewards = []
    for i in range(n):
        _, info = env.reset(seed=seed0 + i)
        _, reward, terminated, truncated, info = env.step(answer(info[f"{kind}_arm"]))
        assert terminated and not truncated and info["arm_kind"] == kind
        rewards.append(reward)
    return np.array(rewards)


def test_default_payoff_frequencies() -> None:
    env = BanditEnv()
    n = 4000
    high = pull_many(env, "high", n)
    assert set(np.unique(high)) <= {0.0, 1.0}
    sigma = math.sqrt(0.25 * 0.75 / n)
    assert abs(high.mean() - 0.25) < 4 * sigma, high.mean()
    low = pull_many(env, "low", 500)
    assert np.all(low == 0.1)


def test_configurable_payoffs() -> None:
    env = BanditEnv(low_reward=0.5, high_reward=2.0, high_prob=0.6, high_miss_reward=-1.0)
    n = 3000
    high = pull_many(env, "high", n, seed0=10_000)
    assert set(np.unique(high)) == {-1.0, 2.0}
    frac = np.mean(high == 2.0)
    assert abs(frac - 0.6) < 4 * math.sqrt(0.6 * 0.4 / n)
    assert np.all(pull_many(env, "low", 200) == 0.5)
    _, info = env.reset(seed=0)
    assert info["expected_payoffs"] == {info["low_arm"]: 0.5, info["high_arm"]: pytest.approx(0.6 * 2 - 0.4)}


def test_oracle_and_success() -> None:
    env = BanditEnv()  # high arm mean 0.25 > 0.1
    _, info = env.reset(seed=1)
    assert env.oracle()[0] == info["high_arm"]
    *_, info = env.step(answer(info["high_arm"]))
    assert info["success"]
    _, info = env.reset(seed=1)
    *_, info = env.step(answer(info["low_arm"]))
    assert not info["success"]

    cautious = BanditEnv(high_prob=0.05)  # 0.05 < 0.1: the low arm is better
    _, info = cautious.reset(seed=1)
    assert cautious.oracle()[0] == info["low_arm"]
    tie = BanditEnv(high_prob=0.1)  # equal means: the low arm (no variance)
    _, info = tie.reset(seed=1)
    assert tie.oracle()[0] == info["low_arm"]


def test_names_come_from_the_lists_in_random_order() -> None:
    env = BanditEnv()
    lows, highs, low_first = set(), set(), 0
    n = 400
    for seed in range(n):
        obs, info = env.reset(seed=seed)
        low, high = info["low_arm"], info["high_arm"]
        assert low in LOW_RISK_NAMES["train"] and high in HIGH_RISK_NAMES["train"]
        assert set(info["arm_names"]) == {low, high}
        a, b = info["arm_names"]
        assert obs == f"There are two arms: {a} and {b}. Which arm do you pull?"
        assert a in info["instructions"] and b in info["instructions"]
        lows.add(low)
        highs.add(high)
        low_first += info["arm_names"][0] == low
    assert lows == set(LOW_RISK_NAMES["train"]) and highs == set(HIGH_RISK_NAMES["train"])
    assert abs(low_first / n - 0.5) < 4 * math.sqrt(0.25 / n)  # the position gives nothing away


def test_splits_are_disjoint_and_custom_lists_work() -> None:
    train = {n.lower() for n in LOW_RISK_NAMES["train"] + HIGH_RISK_NAMES["train"]}
    test = {n.lower() for n in LOW_RISK_NAMES["test"] + HIGH_RISK_NAMES["test"]}
    assert not train & test
    assert not {n.lower() for n in LOW_RISK_NAMES["train"]} & {n.lower() for n in HIGH_RISK_NAMES["train"]}
    env = BanditEnv(split="test")
    _, info = env.reset(seed=0)
    assert info["low_arm"] in LOW_RISK_NAMES["test"] and info["high_arm"] in HIGH_RISK_NAMES["test"]
    custom = BanditEnv(low_risk_names=["Bond"], high_risk_names=["Rocket Stock"])
    _, info = custom.reset(seed=0)
    assert (info["low_arm"], info["high_arm"]) == ("Bond", "Rocket Stock")
    *_, info = custom.step(answer("  rocket   STOCK "))
    assert info["arm"] == "Rocket Stock"


def test_answers_are_case_insensitive() -> None:
    env = BanditEnv()
    for spelling in (str.lower, str.upper, lambda s: f"  {s}\n"):
        _, info = env.reset(seed=4)
        _, reward, terminated, _, info = env.step(answer(spelling(info["low_arm"])))
        assert terminated and reward == 0.1 and info["arm"] == info["low_arm"] and info["format_penalty"] == 0.0


def test_single_turn() -> None:
    env = BanditEnv()
    _, info = env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step(answer(info["low_arm"]))
    assert (terminated, truncated, reward) == (True, False, 0.1)
    assert obs == f"You pulled {info['low_arm']} and received 0.1 points."
    # Stepping a finished episode is a no-op: nothing is pulled again.
    obs2, reward2, terminated2, _, info2 = env.step(answer(info["high_arm"]))
    assert (obs2, reward2, terminated2, info2["actions_executed"]) == (obs, 0.0, True, [])


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "Teacher",  # no tags
        "<think>x</think><answer></answer>",
        "<think>x</think><answer>Nobody</answer>",
        "x" * 1_000_000,
        "<think>\x00\x07</think><answer>\x1b[31m</answer>",
        "<answer><answer>",
        None,
        3.5,
    ],
)
def test_bad_answers_cost_the_penalty_and_end_the_single_turn(bad) -> None:
    env = BanditEnv()
    env.reset(seed=5)
    obs, reward, terminated, truncated, info = env.step(bad)
    assert reward == pytest.approx(-0.1)
    assert (terminated, truncated) == (True, False)
    assert info["forfeited"] and info["arm"] is None and info["arm_kind"] is None and not info["success"]
    assert obs == "No arm was named, so no arm was pulled; the game is over."


def test_naming_both_arms_is_invalid() -> None:
    env = BanditEnv()
    _, info = env.reset(seed=6)
    a, b = info["arm_names"]
    for text in (f"{a} || {b}", f"{a} {b}", f"{a} or {b}"):
        env.reset(seed=6)
        _, reward, terminated, _, info = env.step(answer(text))
        assert reward == pytest.approx(-0.1) and info["arm"] is None and terminated


def test_retries_with_max_answers() -> None:
    env = BanditEnv(max_answers=3)
    _, info = env.reset(seed=7)
    question = f"There are two arms: {info['arm_names'][0]} and {info['arm_names'][1]}. Which arm do you pull?"
    for _ in range(2):
        obs, reward, terminated, truncated, info = env.step(answer("nobody"))
        assert (reward, terminated, truncated) == (pytest.approx(-0.1), False, False)
        assert obs.endswith(question) and not info["forfeited"]
    _, reward, terminated, _, info = env.step(answer(info["low_arm"]))
    assert (reward, terminated, info["arm_kind"]) == (0.1, True, "low")

    env.reset(seed=7)
    for _ in range(3):
        *_, terminated, _, info = env.step("garbage")
    assert terminated and info["forfeited"]


def test_same_seed_same_episode_and_payoff_seed_decouples_payoffs() -> None:
    env1, env2 = BanditEnv(), BanditEnv()
    rewards = []
    for seed in range(50):
        _, i1 = env1.reset(seed=seed)
        _, i2 = env2.reset(seed=seed)
        assert i1["arm_names"] == i2["arm_names"]
        r1 = env1.step(answer(i1["high_arm"]))[1]
        r2 = env2.step(answer(i2["high_arm"]))[1]
        assert r1 == r2
        rewards.append(r1)
    assert 0 < np.mean(rewards) < 1

    # A group of rollouts sharing one seed: same arms, independent payoffs through options["payoff_seed"].
    env = BanditEnv()
    names, payoffs = set(), []
    for k in range(400):
        _, info = env.reset(seed=123, options={"payoff_seed": k})
        names.add(info["arm_names"])
        payoffs.append(env.step(answer(info["high_arm"]))[1])
    assert len(names) == 1
    assert abs(np.mean(payoffs) - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 400)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"high_prob": 1.5}, "high_prob"),
        ({"low_reward": float("nan")}, "low_reward"),
        ({"split": "val"}, "split"),
        ({"max_answers": 0}, "max_answers"),
        ({"low_risk_names": []}, "low_risk_names"),
        ({"high_risk_names": "Gambler"}, "high_risk_names"),
        ({"low_risk_names": ["A || B"]}, "usable"),
        ({"low_risk_names": ["Same"], "high_risk_names": ["same"]}, "both lists"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        BanditEnv(**kwargs)


def test_bad_payoff_seed_raises() -> None:
    with pytest.raises(ValueError, match="payoff_seed"):
        BanditEnv().reset(seed=0, options={"payoff_seed": -1})


@pytest.mark.parametrize("kwargs", [{}, {"render_mode": "ansi"}, {"max_answers": 3}])
def test_check_env(kwargs) -> None:
    check_env(gym.make("ragen/Bandit-v0", **kwargs).unwrapped, skip_render_check="render_mode" not in kwargs)
