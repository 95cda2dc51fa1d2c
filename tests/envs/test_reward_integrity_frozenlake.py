"""Reward integrity of FrozenLake: only a committed move reaches the goal.

From a state one move from the goal (deterministic ice, generated maps), generated variants
(hypothesis) wrap the winning move m with another move o: negations ("not m"), hedges ("m or o",
"m, o", "m/o"), qualifiers, homoglyph or misspelled names, m only in <think>, two <answer> blocks.
None may succeed, and none may earn more than committing to the losing move o does.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.frozenlake.env import FrozenLakeEnv

#: Examples per generated test (the report counts these).
EXAMPLES = 150
MOVES = ("Left", "Down", "Right", "Up")

#: {m}: the winning move, {o}: another move.
HOSTILE = (
    "not {m}",
    "no {m}",
    "don't {m}",
    "{m} is wrong",
    "maybe {m}",
    "{m}?",
    "{m} or {o}",
    "{o} or {m}",
    "either {m} or {o}",
    "{m}, {o}",
    "{m} {o}",
    "{m}/{o}",
    "{m} | {o}",
    "{m} and {o}",
    "{m} (not {o})",
    "{m}{m}",
    "{m}-{o}",
)
#: Letter -> lookalike from another script (Cyrillic / Greek).
HOMOGLYPHS = {"e": "е", "o": "о", "p": "р", "i": "і", "U": "Ս", "L": "Ⅼ", "D": "Ꭰ", "R": "Ꮢ", "g": "ɡ", "t": "τ"}


def _respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


def _env() -> FrozenLakeEnv:
    return FrozenLakeEnv(is_slippery=False, max_actions=None, max_turns=None)


_ENV = _env()


def _at(state: tuple[int, tuple[str, ...], str]) -> FrozenLakeEnv:
    """The env in `state` (seed, moves so far, winning move): reset and replay (cheaper than deepcopy)."""
    seed, moves, _ = state
    _ENV.reset(seed=seed)
    for move in moves:
        _ENV.step(_respond(move))
    return _ENV


def _one_from_goal(seed: int) -> tuple[int, tuple[str, ...], str] | None:
    """(seed, moves, winning move) of a deterministic map one oracle move from the goal, or None."""
    moves: list[str] = []
    for _ in range(40):
        env = _at((seed, tuple(moves), ""))
        move = env.oracle_action()
        _, _, terminated, truncated, info = env.step(_respond(move))
        if info["success"]:
            return seed, tuple(moves), move
        if terminated or truncated:
            return None
        moves.append(move)
    return None


def _losing_move(state) -> tuple[str, float]:
    """A move that does not win from `state`, and its reward (what a committed wrong answer earns)."""
    for other in MOVES:
        if other != state[2]:
            _, reward, _, _, info = _at(state).step(_respond(other))
            if not info["success"]:
                return other, reward
    raise AssertionError("every move wins")


STATES = [s for s in (_one_from_goal(seed) for seed in range(12)) if s is not None]


def _check(state, response: str, committed_wrong: float) -> None:
    _, reward, _, _, info = _at(state).step(response)
    assert not info["success"] and reward <= committed_wrong, (response, reward, committed_wrong)


@given(state=st.sampled_from(STATES), template=st.sampled_from(HOSTILE), upper=st.booleans())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_wrapped_negated_or_hedged_moves_do_not_reach_the_goal(state, template, upper):
    move = state[2]
    other, committed_wrong = _losing_move(state)
    m = move.upper() if upper else move
    _check(state, "<think>t</think><answer>" + template.replace("{m}", m).replace("{o}", other) + "</answer>",
           committed_wrong)  # fmt: skip


@given(state=st.sampled_from(STATES), data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_lookalike_or_misspelled_moves_do_not_reach_the_goal(state, data):
    move = state[2]
    other, committed_wrong = _losing_move(state)
    i = data.draw(st.integers(0, len(move) - 1))
    kind = data.draw(st.sampled_from(["homoglyph", "drop", "swap", "double"]))
    if kind == "homoglyph":
        if move[i] not in HOMOGLYPHS:
            return
        bad = move[:i] + HOMOGLYPHS[move[i]] + move[i + 1 :]
    elif kind == "drop":
        bad = move[:i] + move[i + 1 :]
    elif kind == "swap":
        if i == len(move) - 1 or move[i] == move[i + 1]:
            return
        bad = move[:i] + move[i + 1] + move[i] + move[i + 2 :]
    else:
        bad = move[: i + 1] + move[i] + move[i + 1 :]
    _check(state, _respond(bad), committed_wrong)


def test_the_winning_move_outside_the_answer_does_not_count():
    assert len(STATES) >= 5
    for state in STATES:
        move = state[2]
        other, committed_wrong = _losing_move(state)
        for response in (
            f"<think>{move}</think><answer>{other}</answer>",
            f"<think>t</think><answer>{other}</answer><answer>{move}</answer>",
            f"<think>t</think><answer>{other}</answer> {move}",
            f"<think>t</think><answer>{move}</answer><answer>{other}</answer>",
        ):
            _check(state, response, committed_wrong)
        # the committed winning move does win (the check can fail)
        assert _at(state).step(_respond(move))[4]["success"]
