"""Bad constructor arguments fail at `gym.make` time, quickly, with a ValueError that names the argument.

NaN and infinities never pass as numbers (a NaN penalty or payoff poisons every return it is summed into), bools
never pass as numbers, strings never pass as bools or as lists of names, and a wrong type never escapes as an
unnamed TypeError from deep inside.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.registration import env_ids

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("env_id", env_ids())
@pytest.mark.parametrize("value", [NAN, -INF, INF, None, "x", True, 0.5, [-0.1]])
def test_format_penalty_must_be_a_finite_number_at_most_zero(env_id, value):
    with pytest.raises(ValueError, match="format_penalty") as exc:
        gym.make(env_id, format_penalty=value)
    assert "finite" in str(exc.value) and "<= 0" in str(exc.value)


def test_a_nan_penalty_never_reaches_a_reward():
    # The example, checked end to end: before the fix this reward was NaN.
    with pytest.raises(ValueError, match="format_penalty"):
        gym.make("ragen/FrozenLake-v0", format_penalty=NAN)
    env = gym.make("ragen/FrozenLake-v0", format_penalty=-0.5)
    env.reset(seed=0)
    assert env.step("junk")[1] == -0.5


@pytest.mark.parametrize("env_id", env_ids())
def test_valid_penalties_of_every_numeric_type_still_pass(env_id):
    for value in (0, -1, -0.25, np.float32(-0.5), np.int64(-2)):
        assert gym.make(env_id, format_penalty=value).unwrapped.format_penalty_value == float(value)


BAD = [
    # Bandit: payoffs and the probability are finite numbers, not bools or strings; names are lists of strings.
    ("ragen/Bandit-v0", {"high_prob": True}, "high_prob"),
    ("ragen/Bandit-v0", {"high_prob": NAN}, "high_prob"),
    ("ragen/Bandit-v0", {"high_prob": "0.5"}, "high_prob"),
    ("ragen/Bandit-v0", {"high_prob": 1.5}, "high_prob"),
    ("ragen/Bandit-v0", {"low_reward": INF}, "low_reward"),
    ("ragen/Bandit-v0", {"low_reward": False}, "low_reward"),
    ("ragen/Bandit-v0", {"high_reward": NAN}, "high_reward"),
    ("ragen/Bandit-v0", {"high_reward": None}, "high_reward"),
    ("ragen/Bandit-v0", {"high_miss_reward": "0"}, "high_miss_reward"),
    ("ragen/Bandit-v0", {"low_risk_names": [5]}, "low_risk_names"),
    ("ragen/Bandit-v0", {"low_risk_names": "Teacher"}, "low_risk_names"),
    ("ragen/Bandit-v0", {"high_risk_names": 7}, "high_risk_names"),
    ("ragen/Bandit-v0", {"high_risk_names": ["Gambler", None]}, "high_risk_names"),
    ("ragen/Bandit-v0", {"split": ["train"]}, "split"),
    # SearchQA
    ("ragen/SearchQA-v0", {"attribute_share": None}, "attribute_share"),
    ("ragen/SearchQA-v0", {"attribute_share": NAN}, "attribute_share"),
    ("ragen/SearchQA-v0", {"attribute_share": True}, "attribute_share"),
    ("ragen/SearchQA-v0", {"attribute_share": "x"}, "attribute_share"),
    ("ragen/SearchQA-v0", {"kb_seed": -1}, "kb_seed"),
    ("ragen/SearchQA-v0", {"dataset": 5}, "dataset"),
    ("ragen/SearchQA-v0", {"dataset": "q.jsonl", "corpus": 5}, "corpus"),
    # WebShop
    ("ragen/WebShop-v0", {"catalog_seed": -1}, "catalog_seed"),
    ("ragen/WebShop-v0", {"categories": "electronics › audio › headphones"}, "categories"),
    ("ragen/WebShop-v0", {"categories": [["a"]]}, "categories"),
    ("ragen/WebShop-v0", {"products": 5}, "products"),
    # Countdown: the ranges are (low, high) pairs, checked before anything converts them.
    ("ragen/Countdown-v0", {"num_range": None}, "num_range"),
    ("ragen/Countdown-v0", {"num_range": 5}, "num_range"),
    ("ragen/Countdown-v0", {"num_range": "1-9"}, "num_range"),
    ("ragen/Countdown-v0", {"target_range": None}, "target_range"),
    ("ragen/Countdown-v0", {"target_range": (1.5, 9)}, "target_range"),
    ("ragen/Countdown-v0", {"dataset": 5}, "dataset"),
    # Code: a string is not a list of families, nor a bool a switch.
    ("ragen/Code-v0", {"families": "fizzbuzz"}, "families"),
    ("ragen/Code-v0", {"families": ["fizzbuzz", 3]}, "families"),
    ("ragen/Code-v0", {"families": [["fizzbuzz"]]}, "families"),
    ("ragen/Code-v0", {"hide_dataset": "no"}, "hide_dataset"),
    ("ragen/Code-v0", {"multi_turn_repair": "yes"}, "multi_turn_repair"),
    ("ragen/Code-v0", {"max_turns": "x"}, "max_turns"),
    ("ragen/Code-v0", {"dataset": 5}, "dataset"),
    # The base's switches, through an env that passes them on.
    ("ragen/Sokoban-v0", {"split_actions": "no"}, "split_actions"),
]


@pytest.mark.parametrize("env_id, kwargs, name", BAD, ids=[f"{i}-{n}-{v[n]!r}" for i, v, n in BAD])
def test_a_bad_argument_raises_a_value_error_naming_it_quickly(env_id, kwargs, name):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=name):
        gym.make(env_id, **kwargs)
    assert time.perf_counter() - t0 < 5.0


def test_an_error_on_families_names_the_accepted_families_not_characters():
    with pytest.raises(ValueError) as exc:
        gym.make("ragen/Code-v0", families="fizzbuzz")
    message = str(exc.value)
    assert "'fizzbuzz'" in message and "reverse_words" in message  # the value as given and the accepted names
    assert "'f', 'i'" not in message


def test_an_unreachable_countdown_target_range_fails_up_front():
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="target_range"):
        gym.make("ragen/Countdown-v0", target_range=(10**9, 10**9 + 1))
    assert time.perf_counter() - t0 < 2.0  # was 33 s: every one of 20,000 draws ran the solver in vain
    # 4 numbers of at most 3 reach at most 3**4 = 81 (3 * 3 * 3 * 3): a target range starting at 10,000 is refused.
    with pytest.raises(ValueError, match="target_range"):
        gym.make("ragen/Countdown-v0", num_range=(1, 3), target_range=(10_000, 10_001))


def test_reachable_countdown_configs_still_work():
    # 100 * 100 * 100 * 100 = 1e8 is the largest value of four numbers up to 100: a range there stays legal.
    gym.make("ragen/Countdown-v0", target_range=(10**8, 10**8))
    env = gym.make("ragen/Countdown-v0", num_count=3, num_range=[1, 4], target_range=[1, 16])  # lists, as TOML
    _, info = env.reset(seed=0)
    assert len(info["nums"]) == 3 and all(1 <= n <= 4 for n in info["nums"]) and 1 <= info["target"] <= 16


@pytest.mark.parametrize("env_id, kwargs", [
    ("ragen/Bandit-v0", {"high_prob": 1, "low_reward": np.float32(0.5), "high_reward": np.int64(2)}),
    ("ragen/Bandit-v0", {"low_risk_names": ("Monk",), "high_risk_names": ["Pirate"]}),
    ("ragen/SearchQA-v0", {"attribute_share": 1, "kb_seed": 0}),
    ("ragen/SearchQA-v0", {"attribute_share": np.float64(0.25)}),
    ("ragen/WebShop-v0", {"catalog_seed": 0, "categories": ("electronics › audio › headphones",)}),
    ("ragen/Code-v0", {"families": ("fizzbuzz",), "hide_dataset": np.bool_(False)}),
    ("ragen/Code-v0", {"multi_turn_repair": True, "max_turns": 2}),
])
def test_valid_arguments_still_pass(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)


def test_the_shared_checks():
    from ragen_envs.validation import require_bool, require_float, require_names, require_path

    assert require_float("x", 3) == 3.0 and isinstance(require_float("x", np.float32(0.5)), float)
    assert require_float("x", None, allow_none=True) is None
    for bad in (NAN, INF, -INF, True, np.bool_(True), "1", None, [1.0], 1j):
        with pytest.raises(ValueError, match="^x must be a finite number"):
            require_float("x", bad)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        require_float("x", 1.5, 0, 1)
    assert require_bool("b", np.bool_(True)) is True and require_bool("b", False) is False
    for bad in ("no", "", 0, 1, None, 0.0):
        with pytest.raises(ValueError, match="^b must be True or False"):
            require_bool("b", bad)
    assert require_names("n", ["a", "b"]) == ("a", "b") and require_names("n", None, allow_none=True) is None
    for bad in ("ab", [], (), [1], ["a", None], {"a": 1}, None, b"ab"):
        with pytest.raises(ValueError, match="^n must be"):
            require_names("n", bad)
    assert require_path("p", "f.json") == "f.json" and require_path("p", None, allow_none=True) is None
    for bad in (5, None, ["f"], b"f"):
        with pytest.raises(ValueError, match="^p must be"):
            require_path("p", bad)
