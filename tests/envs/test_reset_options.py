"""`reset(options=...)` reads only the keys an env declares (`RESET_OPTIONS`); anything else is refused, before the
env's random generator is reseeded.

Before: a misspelt key was ignored (`{"levle": ...}` played a random level; `env.per_rollout_option = "payoff_sed"`
trained a Bandit whose rollouts all shared one payoff draw), `options=5` was a TypeError from `dict()` deep in the
base class, and a refused reset had already reseeded the running episode's generator.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401  (registers the envs)

ENV_IDS = sorted(e for e in gym.registry if e.startswith("ragen/"))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_env_declares_the_reset_options_it_reads(env_id):
    env = gym.make(env_id)
    reads = env.unwrapped.RESET_OPTIONS
    assert isinstance(reads, frozenset) and all(isinstance(k, str) for k in reads), reads
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_an_option_the_env_does_not_read_is_refused_naming_it(env_id):
    env = gym.make(env_id)
    reads = sorted(env.unwrapped.RESET_OPTIONS)
    misspelt = (reads[0] + "s") if reads else "level"
    with pytest.raises(ValueError, match=f"has no reset option '{misspelt}'") as err:
        env.reset(seed=1, options={misspelt: 1})
    if reads:
        assert f"did you mean '{reads[0]}'" in str(err.value)
    env.close()


@pytest.mark.parametrize("options", [5, ["level"], "level", {1: "x"}])
def test_options_that_are_not_a_dict_of_names_are_a_type_error(options):
    env = gym.make("ragen/Sokoban-v0")
    with pytest.raises(TypeError, match="options must be a dict of reset options"):
        env.reset(seed=1, options=options)


def test_a_refused_reset_leaves_the_running_episode_and_its_generator_as_they_were():
    env, twin = gym.make("ragen/FrozenLake-v0"), gym.make("ragen/FrozenLake-v0")
    obs, _ = env.reset(seed=7)
    twin.reset(seed=7)
    with pytest.raises(ValueError):
        env.reset(seed=123, options={"dsc": "SFFG"})
    state = env.unwrapped.np_random.bit_generator.state
    assert state == twin.unwrapped.np_random.bit_generator.state
    for action in ("<answer>Right</answer>", "<answer>Down</answer>"):
        a, b = env.step(action), twin.step(action)
        assert a[0] == b[0] and a[1:4] == b[1:4]


def test_none_and_the_declared_options_still_reset():
    env = gym.make("ragen/Bandit-v0")
    first = env.reset(seed=3, options=None)[0]
    assert env.reset(seed=3, options={})[0] == first
    env.reset(seed=3, options={"payoff_seed": 11})
    assert np.isfinite(env.step("<answer>" + env.unwrapped.ACTIONS[0] + "</answer>")[1]) if env.unwrapped.ACTIONS \
        else True


def test_a_per_rollout_option_the_env_does_not_read_is_a_config_error_before_the_run(tmp_path, capsys):
    from ragen_core.apps.train import main

    run_dir = tmp_path / "run"
    rc = main(["bandit_tiny", "env.per_rollout_option=payoff_sed", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("config error: env.per_rollout_option 'payoff_sed'"), err
    assert "did you mean 'payoff_seed'" in err
    assert not (run_dir / "metrics.jsonl").exists()
