"""Reward integrity of 2048: only a committed move that merges the two halves of the target wins.

Generated boards (hypothesis) hold two target/2 tiles side by side (in a row or a column) among random
smaller tiles, so the moves along that line (m) merge them into the target and the two others (o) do not.
Generated variants wrap m with o: negations ("not m"), hedges ("m or o", "m, o", "m/o"), qualifiers,
lookalike or misspelled names, m only in <think>, two <answer> blocks. None may succeed, none may earn
more than committing to the least-paid other move does, and none changes the board.
"""

from __future__ import annotations

import numpy as np
from hedge_templates import MOVE_HOMOGLYPHS, OUTSIDE_THE_ANSWER, WITHOUT_AN_ANSWER, fill, misspell, with_hedges
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.game2048 import Game2048Env

#: Examples per generated test (the report counts these).
EXAMPLES = 150
TARGET = 256
SIZE = 4

HOSTILE = with_hedges(
    "move {m}",
    "{m}!",
    "swipe {m}",
    "{m} then {o}",
    "merge",
    "win",
    "{n}",
)
#: Non-target tiles: never target/2, so only the planted pair can make the target.
SMALL = st.sampled_from([0, 0, 0, 0, 2, 4, 8, 16, 32, 64])


@st.composite
def boards(draw):
    """(board, winning moves, other moves): a board with one pair of target/2 tiles, side by side."""
    cells = draw(st.lists(SMALL, min_size=SIZE * SIZE, max_size=SIZE * SIZE))
    board = np.array(cells, dtype=np.int64).reshape(SIZE, SIZE)
    horizontal = draw(st.booleans())
    r = draw(st.integers(0, SIZE - 1 if horizontal else SIZE - 2))
    c = draw(st.integers(0, SIZE - 2 if horizontal else SIZE - 1))
    r2, c2 = (r, c + 1) if horizontal else (r + 1, c)
    board[r, c] = board[r2, c2] = TARGET // 2
    wins, others = (("Left", "Right"), ("Up", "Down")) if horizontal else (("Up", "Down"), ("Left", "Right"))
    return board.tolist(), wins, others


_ENV = Game2048Env(size=SIZE, target=TARGET)


def _respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


def _step(board, response: str):
    _ENV.reset(seed=0, options={"board": board})
    before = _ENV.board.copy()
    _, reward, _, _, info = _ENV.step(response)
    return reward, info, before


def _bar(board, others) -> float:
    """The least a committed other move earns (a move that changes nothing earns the penalty)."""
    rewards = []
    for o in others:
        reward, info, _ = _step(board, _respond(o))
        assert not info["success"]
        rewards.append(reward)
    return min(rewards)


def _check(board, others, response: str) -> None:
    bar = _bar(board, others)  # a few resets from a given board: cheap, so not cached
    reward, info, before = _step(board, response)
    assert not info["success"] and reward <= bar, (response, reward, bar)
    assert np.array_equal(_ENV.board, before)


@given(case=boards(), template=st.sampled_from(HOSTILE), pick=st.integers(0, 3), upper=st.booleans())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_wrapped_negated_or_hedged_moves_do_not_win(case, template, pick, upper):
    board, wins, others = case
    m, o = wins[pick % 2], others[pick // 2]
    if upper:
        m = m.upper()
    _check(board, others, _respond(template.format(m=m, o=o, n=TARGET)))
    # the committed winning move does win (the check can fail)
    _, info, _ = _step(board, _respond(wins[pick % 2]))
    assert info["success"]


@given(case=boards(), data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_lookalike_or_misspelled_moves_do_not_win(case, data):
    board, wins, others = case
    m = data.draw(st.sampled_from(wins))
    i = data.draw(st.integers(0, len(m) - 1))
    bad = misspell(m, i, data.draw(st.sampled_from(["homoglyph", "drop", "swap", "double"])), MOVE_HOMOGLYPHS)
    if bad is not None:
        _check(board, others, _respond(bad))


@given(case=boards())
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_winning_move_outside_the_answer_does_not_count(case):
    board, wins, others = case
    m, o = wins[0], others[0]
    for response in fill(OUTSIDE_THE_ANSWER + WITHOUT_AN_ANSWER, m, o):
        # the answer that counts is o: no more than committing to o
        committed_o, _, _ = _step(board, _respond(o))
        reward, info, _ = _step(board, response)
        assert not info["success"] and reward <= committed_o, response
