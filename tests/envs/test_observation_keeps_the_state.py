"""Whatever the response, every env's observation still shows the state (all registered ids).

An observation is cut at MAX_OBSERVATION_CHARS. Envs that wrote one line per refused answer piece above the
board (Sudoku, 2048) lost the board and the "no valid action" notice to a response of a few hundred
`||` pieces (`"x||" * 300`: 16,384 characters of refusals, the board gone), also when a valid action ran.

The check is differential, per id and hostile response: from the same reset seed, the hostile step's
observation must end with the observation of a clean step that executes the same actions (the actions
the hostile step executed, or an empty answer when it executed none), i.e. with the same state text and
notice, and may add at most HEAD_ROOM characters above it (the capped refusal lines). The clean step
never has refusals, so it is an independent rendering of the same state; Sudoku and 2048 also have a
direct check of the board in their own test files.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import ragen_envs
from ragen_envs.spaces import MAX_OBSERVATION_CHARS, MAX_RESPONSE_CHARS

#: Every id of the suite, as Gymnasium's registry lists it.
IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("ragen/"))
#: The most characters a hostile response may add above the state (a few capped refusal lines).
HEAD_ROOM = 1_000
THINK = "<think>t</think>"
#: Characters of a response around its answer text.
FRAME = len(f"{THINK}<answer></answer>")


def _respond(answer: str) -> str:
    return f"{THINK}<answer>{answer}</answer>"


def _fill(unit: str, room: int = MAX_RESPONSE_CHARS - FRAME) -> str:
    """`unit` repeated to fill `room` characters (cut at the end)."""
    return (unit * (room // len(unit) + 1))[:room]


def _hostile_answers(valid: str | None) -> dict[str, str]:
    """Answer texts (each response at most MAX_RESPONSE_CHARS, but the last), by name; `valid` is an action."""
    answers = {
        "300 junk pieces": "x||" * 300,
        "junk pieces up to the response limit": _fill("x||"),
        "one junk piece up to the response limit": _fill("q"),
        "long junk pieces up to the response limit": _fill("lorem ipsum dolor sit amet " * 8 + "||"),
        "separators only": _fill("||"),
        "junk pieces over the response limit": "x||" * 20_000,
    }
    if valid is not None:
        room = MAX_RESPONSE_CHARS - FRAME - len(valid) - 4
        answers["a valid action, then junk pieces"] = f"{valid} || " + _fill("x||", room)
        answers["junk pieces, then a valid action"] = _fill("x||", room) + f" || {valid}"
        answers["a valid action repeated"] = _fill(f"{valid} || ")
    return answers


def _valid_action(env: gym.Env) -> str | None:
    """A valid first action of a split-answer env (the oracle's first answer, else the first action name)."""
    u = env.unwrapped
    if not u.split_actions:
        return None
    plan = u.oracle() if hasattr(u, "oracle") else None
    if plan:
        return plan[0]
    return u.ACTIONS[0] if u.ACTIONS else None


def _text(obs) -> str:
    return obs["text"] if isinstance(obs, dict) else obs


def test_all_fourteen_ids_are_checked():
    assert len(IDS) == 14 and set(IDS) == set(ragen_envs.registration.env_ids())


@pytest.mark.parametrize("env_id", IDS)
def test_hostile_responses_never_push_the_state_out_of_the_observation(env_id):
    env = gym.make(env_id)
    try:
        env.reset(seed=0)
        valid = _valid_action(env)
        for name, answer in _hostile_answers(valid).items():
            response = _respond(answer)
            env.reset(seed=0)
            obs, _, _, _, info = env.step(response)
            assert env.observation_space.contains(obs), name
            hostile = _text(obs)
            executed = info["actions_executed"]
            env.reset(seed=0)
            clean_obs, _, _, _, clean_info = env.step(_respond(" || ".join(executed)))
            assert clean_info["actions_executed"] == executed, (name, executed)
            clean = _text(clean_obs)
            assert hostile.endswith(clean), (env_id, name, len(hostile), hostile[-300:], clean[-300:])
            assert len(hostile) <= min(len(clean) + HEAD_ROOM, MAX_OBSERVATION_CHARS), (env_id, name, len(hostile))
            assert "[... truncated]" not in hostile, (env_id, name)
    finally:
        env.close()
