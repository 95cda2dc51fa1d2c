"""Reward-integrity tests shared by the grid envs whose states have one winning move (FrozenLake, Sokoban).

A test file builds a :class:`WinningMoveProbe` on its env, finds states ``(seed, moves so far, winning move m)``
and adds the three tests of :func:`one_move_tests` to its namespace. The tests check that no response that
fails to commit to m wins or earns more than committing to a losing move o does: m wrapped with o in a hedge
or negation (:data:`HOSTILE`), m misspelled or written with lookalike letters, m outside the (single) answer.
Each also checks that the committed m does win, so none of them can pass vacuously.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hedge_templates import HEDGES, MOVE_HOMOGLYPHS, OUTSIDE_THE_ANSWER, fill, misspell
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: The shared hedges without "{o} {m}": in these envs that is a two-move plan, o then m, which may legally win.
HOSTILE = tuple(t for t in HEDGES if t != "{o} {m}")

State = tuple[int, tuple[str, ...], str]


def respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


class WinningMoveProbe:
    """One env instance, put into a state by reset and replay (cheaper than a deepcopy per example)."""

    def __init__(self, env: Any, moves: Sequence[str]):
        self.env, self.moves = env, tuple(moves)

    def at(self, state: State) -> Any:
        seed, moves, _ = state
        self.env.reset(seed=seed)
        for move in moves:
            self.env.step(respond(move))
        return self.env

    def losing_move(self, state: State) -> tuple[str, float]:
        """A move that does not win from `state`, and its reward (what a committed wrong answer earns)."""
        for other in self.moves:
            if other != state[2]:
                _, reward, _, _, info = self.at(state).step(respond(other))
                if not info["success"]:
                    return other, reward
        raise AssertionError("every move wins")

    def check(self, state: State, response: str, committed_wrong: float) -> None:
        _, reward, _, _, info = self.at(state).step(response)
        assert not info["success"] and reward <= committed_wrong, (response, reward, committed_wrong)


def one_move_tests(probe: WinningMoveProbe, states: Sequence[State], examples: int) -> dict[str, Callable]:
    """The three tests, by name, for ``globals().update(...)`` in a test module."""
    run = settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])

    @given(state=st.sampled_from(states), template=st.sampled_from(HOSTILE), upper=st.booleans())
    @run
    def test_wrapped_negated_or_hedged_moves_do_not_win(state, template, upper):
        other, committed_wrong = probe.losing_move(state)
        m = state[2].upper() if upper else state[2]
        answer = template.replace("{m}", m).replace("{o}", other)
        probe.check(state, f"<think>t</think><answer>{answer}</answer>", committed_wrong)

    @given(state=st.sampled_from(states), data=st.data())
    @run
    def test_lookalike_or_misspelled_moves_do_not_win(state, data):
        move = state[2]
        other, committed_wrong = probe.losing_move(state)
        i = data.draw(st.integers(0, len(move) - 1))
        bad = misspell(move, i, data.draw(st.sampled_from(["homoglyph", "drop", "swap", "double"])), MOVE_HOMOGLYPHS)
        if bad is not None:
            probe.check(state, respond(bad), committed_wrong)

    def test_the_winning_move_outside_the_answer_does_not_count():
        assert len(states) >= 5
        for state in states:
            move = state[2]
            other, committed_wrong = probe.losing_move(state)
            for response in fill(OUTSIDE_THE_ANSWER, move, other):
                probe.check(state, response, committed_wrong)
            # the committed winning move does win (the check can fail)
            assert probe.at(state).step(respond(move))[4]["success"]

    return {f.__name__: f for f in (test_wrapped_negated_or_hedged_moves_do_not_win,
                                     test_lookalike_or_misspelled_moves_do_not_win,
                                     test_the_winning_move_outside_the_answer_does_not_count)}
