"""TextAgentEnv behaviour on a minimal env defined here (independent of the real tasks)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from ragen_envs.base import INVALID_NOTICE, TextAgentEnv
from ragen_envs.protocol import FORMAT_PENALTY


class Corridor(TextAgentEnv):
    """A corridor of cells 0..length; start at a random cell < length, goal at `length`."""

    ACTIONS = ("Left", "Right")
    ROLE = "You walk along a corridor."

    def __init__(self, length: int = 5, **kwargs):
        super().__init__(**kwargs)
        self.length = length
        self.pos = 0

    def _reset_task(self, options):
        self.pos = int(self.np_random.integers(0, self.length))
        return {"start": self.pos}

    def _execute(self, action):
        self.pos = max(0, self.pos - 1) if action == "Left" else min(self.length, self.pos + 1)
        done = self.pos == self.length
        return (1.0 if done else -0.1), done

    def _state_text(self):
        return "".join("P" if i == self.pos else ("G" if i == self.length else "_") for i in range(self.length + 1))

    def _task_instructions(self):
        return "Reach G. P is you, _ is floor."

    def _is_success(self):
        return self.pos == self.length


def respond(answer: str) -> str:
    return f"<think>go</think><answer>{answer}</answer>"


REQUIRED_INFO = {"action_is_valid", "actions_executed", "success", "format_penalty", "actions_left", "turn"}


def test_reset_info_has_instructions_and_required_keys():
    env = Corridor(max_actions=4)
    obs, info = env.reset(seed=3)
    assert REQUIRED_INFO <= set(info)
    text = info["instructions"]
    for needle in ("corridor", "Reach G", "Left, Right", "<think>", "||", "up to 4 actions", "-0.1"):
        assert needle in text
    assert obs == env._state_text()


def test_actions_run_in_order_and_rewards_add_up():
    env = Corridor(length=5, max_actions=10)
    env.reset(seed=0)
    env.pos = 1
    obs, reward, terminated, truncated, info = env.step(respond("Right || Right"))
    assert env.pos == 3
    assert reward == pytest.approx(-0.2)
    assert info["actions_executed"] == ["Right", "Right"]
    assert info["action_is_valid"] and info["format_penalty"] == 0.0
    assert info["actions_left"] == 8 and info["turn"] == 1
    assert not terminated and not truncated


def test_invalid_response_leaves_state_unchanged_and_costs_the_penalty():
    env = Corridor()
    env.reset(seed=1)
    before = env._state_text()
    obs, reward, terminated, truncated, info = env.step("I refuse to answer")
    assert env._state_text() == before
    assert obs.startswith(INVALID_NOTICE) and obs.endswith(before)
    assert reward == FORMAT_PENALTY
    assert not info["action_is_valid"] and info["actions_executed"] == []
    assert info["format_error"]


def test_partially_valid_answer_runs_valid_actions_and_is_penalised():
    env = Corridor(length=9)
    env.reset(seed=0)
    env.pos = 2
    _, reward, _, _, info = env.step(respond("Right || Fly"))
    assert env.pos == 3
    assert reward == pytest.approx(-0.1 + FORMAT_PENALTY)
    assert info["dropped_actions"] == ["Fly"]


def test_action_budget_truncates_and_stops_mid_turn():
    env = Corridor(length=20, max_actions=3)
    env.reset(seed=0)
    env.pos = 0
    env.step(respond("Right || Right"))
    _, _, terminated, truncated, info = env.step(respond("Right || Right"))
    assert env.pos == 3  # the 4th action exceeds the budget of 3 and is not executed
    assert info["actions_executed"] == ["Right"]
    assert truncated and not terminated


def test_goal_terminates_and_later_actions_of_the_turn_are_ignored():
    env = Corridor(length=3, max_actions=10)
    env.reset(seed=0)
    env.pos = 2
    _, reward, terminated, truncated, info = env.step(respond("Right || Left"))
    assert terminated and not truncated and info["success"]
    assert info["actions_executed"] == ["Right"]
    assert reward == pytest.approx(1.0)


def test_stepping_after_the_end_is_a_defined_no_op():
    env = Corridor(length=3)
    env.reset(seed=0)
    env.pos = 2
    env.step(respond("Right"))
    obs, reward, terminated, truncated, info = env.step(respond("Left"))
    assert env.pos == 3 and reward == 0.0 and terminated and info["episode_over"]


def test_max_turns_truncates():
    env = Corridor(length=50, max_turns=2)
    env.reset(seed=0)
    assert not env.step("nonsense")[3]
    assert env.step("nonsense")[3]


class Quiz(Corridor):
    """Corridor with a task turn limit and every optional hook, each call recorded."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls: list[str] = []
        self.forfeited = False

    def _begin_step(self):
        self.calls.append("begin")
        self.before = self.pos

    def _step_info(self, info):
        self.calls.append("info")
        return {"moved": self.pos != self.before, "forfeited": self.forfeited}

    def _on_turn_limit(self):
        self.calls.append("limit")
        self.forfeited = True


def test_turn_limit_terminates_and_calls_the_hooks():
    env = Quiz(length=50, turn_limit=2)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(respond("Right"))
    assert not terminated and not truncated and info["moved"] and not info["forfeited"]
    assert env.calls == ["begin", "info"]
    obs, reward, terminated, truncated, info = env.step("nonsense")
    assert terminated and not truncated  # the task is over: terminated, never truncated
    assert info["forfeited"] and not info["moved"] and reward == FORMAT_PENALTY
    assert obs.startswith(INVALID_NOTICE)
    assert env.calls == ["begin", "info", "begin", "limit", "info"]
    # The no-op step after the end still runs _begin_step and _step_info, never _on_turn_limit again.
    _, reward, terminated, _, info = env.step(respond("Right"))
    assert terminated and reward == 0.0 and info["episode_over"] and info["forfeited"] and not info["moved"]
    assert env.calls[-2:] == ["begin", "info"] and env.calls.count("limit") == 1
    env.reset(seed=0)
    assert not env.step(respond("Left"))[2]


def test_turn_limit_does_not_fire_when_the_last_turn_ends_the_task():
    env = Quiz(length=3, turn_limit=1)
    env.reset(seed=0)
    env.pos = 2
    _, reward, terminated, truncated, info = env.step(respond("Right"))
    assert terminated and not truncated and info["success"] and reward == pytest.approx(1.0)
    assert "limit" not in env.calls and not info["forfeited"]


def test_turn_limit_wins_over_max_turns_on_the_same_turn():
    env = Corridor(length=50, max_turns=2, turn_limit=2)
    env.reset(seed=0)
    env.step("nonsense")
    _, _, terminated, truncated, _ = env.step("nonsense")
    assert terminated and not truncated


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"action_format": "json"}, "action_format"),
        ({"max_actions_per_turn": 0}, "max_actions_per_turn"),
        ({"max_actions": 0}, "max_actions"),
        ({"max_turns": -1}, "max_turns"),
        ({"turn_limit": 0}, "turn_limit"),
        ({"turn_limit": True}, "turn_limit"),
        ({"format_penalty": 0.5}, "format_penalty"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_bad_constructor_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Corridor(**kwargs)


def test_gymnasium_env_checker_passes():
    check_env(Corridor(max_actions=10), skip_render_check=True)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_return_current_strings(mode):
    """Async + shared memory used to return the first observation forever (Gymnasium 1.4)."""
    gym.register("ragen_test/Corridor-v0", entry_point=Corridor, kwargs={"length": 6, "max_actions": 50})
    try:
        venv = gym.make_vec("ragen_test/Corridor-v0", num_envs=2, vectorization_mode=mode)
        try:
            obs, _ = venv.reset(seed=[5, 6])
            reference = [Corridor(length=6, max_actions=50) for _ in range(2)]
            expected = [ref.reset(seed=s)[0] for ref, s in zip(reference, [5, 6])]
            assert list(obs) == expected
            for answer in ["Right", "Left || Left", "Right || Right"]:
                obs, rewards, term, trunc, _ = venv.step([respond(answer)] * 2)
                for i, ref in enumerate(reference):
                    if term[i] or trunc[i]:
                        continue  # autoreset: the next observation belongs to a new episode
                    expected_obs, expected_r, *_ = ref.step(respond(answer))
                    assert obs[i] == expected_obs
                    assert rewards[i] == pytest.approx(expected_r)
        finally:
            venv.close()
    finally:
        gym.registry.pop("ragen_test/Corridor-v0")


# ------------------------------------------------------------------------------------------ the env-trainer contract
def test_the_contract_is_declared_with_defaults_that_read_as_absent():
    """Every public name the core reads is declared on the base class; the optional ones default to what the
    core's `getattr(..., default)` reads from an env without them."""
    import numpy as np

    env = Corridor(max_actions=4, max_actions_per_turn=3)
    env.reset(seed=0)
    assert env.STEP_REWARD is None and env.random_action is None and env.is_final_action is None
    assert not callable(getattr(env, "random_action", None)) and not callable(getattr(env, "is_final_action", None))
    assert (env.action_format, env.format_penalty_value, env.max_actions_per_turn, env.vision) == (
        "tagged", FORMAT_PENALTY, 3, False)
    with pytest.raises(NotImplementedError, match="Corridor has no oracle"):
        env.oracle()
    with pytest.raises(NotImplementedError, match="Corridor defines no oracle_step"):
        env.oracle_step()
    # The default random turn and noise answers draw from ACTIONS, the same draw as the warm start always made.
    rng, replay = np.random.default_rng(4), np.random.default_rng(4)
    text, (action,) = env.random_step(rng)
    assert action == Corridor.ACTIONS[int(replay.integers(2))] and text == f"I try {action}."
    assert env.noise_answer("first", rng) == "Left"
    assert env.noise_answer("random", rng) == Corridor.ACTIONS[int(replay.integers(2))]
    assert env._actions_this_turn() == 3
    env.step(respond("Left || Left || Left"))
    assert env._actions_this_turn() == 1  # the budget has one action left


def test_the_random_hooks_of_an_env_without_actions():
    """Without ACTIONS the defaults draw from `random_action(rng)`; with neither, a ValueError names the env."""
    import numpy as np

    class Free(Corridor):
        ACTIONS = ()

    with pytest.raises(ValueError, match="Free has no action vocabulary"):
        Free().random_step(np.random.default_rng(0))
    with pytest.raises(ValueError, match="Free has no action vocabulary"):
        Free().noise_answer("first", np.random.default_rng(0))

    class Drawn(Free):
        def random_action(self, rng):
            return f"go {int(rng.integers(10))}"

    assert Drawn().random_step(np.random.default_rng(0)) == ("I try go 8.", ["go 8"])
    assert Drawn().noise_answer("random", np.random.default_rng(0)) == "go 8"
    with pytest.raises(ValueError, match="Drawn has no fixed action list"):
        Drawn().noise_answer("first", np.random.default_rng(0))
