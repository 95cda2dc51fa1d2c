"""Reward integrity of Sudoku: only a committed placement that completes the grid is paid.

From generated states one placement from solved (seeded puzzles solved by the oracle but for one cell),
generated variants (hypothesis) wrap the winning placement m with another placement o: negations, hedges
("m or o", "m, o", "m/o"), qualifiers, two digits for the cell, lookalike digits and letters, misspellings,
m only in <think>, two <answer> blocks. None may succeed, and none may earn more than committing to a wrong
placement does. A second generated test plays random placements (right, wrong, erasing, malformed) for
several turns and checks that reward is paid exactly when the grid is the solution.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from hedge_templates import OUTSIDE_THE_ANSWER, WITHOUT_AN_ANSWER, fill, misspell, with_hedges
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.sudoku import SudokuEnv

#: Examples per generated test (the report counts these).
EXAMPLES = 150

#: {m}: the winning placement, {o}: another placement, {d}: a wrong digit, {cell}: the winning cell (R2C3).
HOSTILE = with_hedges(
    "{cell}={v}{d}",
    "{cell}={v},{d}",
    "{cell}={v}/{d}",
    "{cell}={v} or {d}",
    "{cell}={d} or {v}",
    "{cell}=[{v}]",
    "{cell}={v}.0",
    "{cell}=+{v}",
    "{cell}=-{v}",
    "{cell}={v}!",
    "{cell}=={v}",
    "{cell}:={v}",
    "{cell} {v}",
    "{cell}{v}",
    "{cell}=0{v}",
    "{m} = {m}",
    "solve",
    "{cell}=?",
    "{cell}=*",
    "all",
)
#: Lookalikes of what a placement is made of: Arabic-Indic, fullwidth and superscript digits, Cyrillic/Greek letters.
DIGIT_LOOKALIKES = (0x0660, 0xFF10, 0x2070, 0x1D7CE)  # add the digit (superscripts 1-3 are irregular; fine)
LETTER_LOOKALIKES = {"R": ("Р", "Ꭱ", "ʀ"), "C": ("С", "Ϲ", "ᑕ")}


def _respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


_ENV = SudokuEnv(difficulty="hard", max_actions=None)


def _at(state) -> SudokuEnv:
    """The env in `state` (seed, puzzle, placements so far, winning placement): the seed's puzzle given as an
    option (no second generation) and the placements replayed through `step`."""
    seed, puzzle, moves, _ = state
    _ENV.reset(seed=seed, options={"puzzle": puzzle})
    for m in moves:
        _ENV.step(_respond(m))
    return _ENV


def _one_from_solved(seed: int):
    _ENV.reset(seed=seed)
    puzzle = list(_ENV.puzzle)
    plan = _ENV.oracle()
    return seed, tuple(puzzle), tuple(plan[:-1]), plan[-1]


STATES = [_one_from_solved(seed) for seed in range(12)]


def _parts(state) -> tuple[str, str, int, int]:
    m = state[3]
    cell, v = m.split("=")
    return m, cell, int(v), int(v) % 4 + 1


@functools.cache
def _committed_wrong(state) -> float:
    """The least a committed placement earns from `state`: a wrong digit at the winning cell, and an erase of
    the last own placement (both well-formed answers that do not solve)."""
    m, cell, v, d = _parts(state)
    rewards = []
    for wrong in (f"{cell}={d}", state[2][-1].split("=")[0] + "=0"):
        _, r, _, _, info = _at(state).step(_respond(wrong))
        assert not info["success"]
        rewards.append(r)
    return min(rewards)


def _check(state, response: str, bar: float) -> None:
    env = _at(state)
    _, reward, _, _, info = env.step(response)
    assert not info["success"] and reward <= bar, (response, reward, bar)
    assert env.board.count(0) == 1  # the last cell is still empty


def _other(state) -> str:
    """Another placement: a wrong digit at the winning cell."""
    m, cell, v, d = _parts(state)
    return f"{cell}={d}"


@given(state=st.sampled_from(STATES), template=st.sampled_from(HOSTILE), lower=st.booleans(),
       spaced=st.booleans())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_wrapped_negated_or_hedged_placements_do_not_solve(state, template, lower, spaced):
    m, cell, v, d = _parts(state)
    if lower:
        m, cell = m.lower(), cell.lower()
    if spaced:
        m = m.replace("=", " = ")
    answer = template.format(m=m, o=_other(state), cell=cell, v=v, d=d)
    _check(state, _respond(answer), _committed_wrong(state))


@given(state=st.sampled_from(STATES), data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_lookalike_or_misspelled_placements_do_not_solve(state, data):
    m, cell, v, d = _parts(state)
    kind = data.draw(st.sampled_from(["digit", "letter", "drop", "swap", "double", "transpose"]))
    i = data.draw(st.integers(0, len(m) - 1))
    if kind == "digit":
        digits = [k for k, ch in enumerate(m) if ch.isdigit()]
        k = data.draw(st.sampled_from(digits))
        bad = m[:k] + chr(data.draw(st.sampled_from(DIGIT_LOOKALIKES)) + int(m[k])) + m[k + 1 :]
    elif kind == "letter":
        letter = data.draw(st.sampled_from(["R", "C"]))
        bad = m.replace(letter, data.draw(st.sampled_from(LETTER_LOOKALIKES[letter])), 1)
    elif kind in ("drop", "swap", "double"):
        bad = misspell(m, i, kind, {})
        if bad is None:
            return
    else:  # row and column exchanged: a different cell (a given or a clash), unless on the diagonal
        r, c = re.fullmatch(r"R(\d+)C(\d+)", cell).groups()
        if r == c:
            return
        bad = f"R{c}C{r}={v}"
    _check(state, _respond(bad), _committed_wrong(state))


def test_the_winning_placement_outside_the_answer_does_not_count():
    for state in STATES:
        m, cell, v, d = _parts(state)
        other = _other(state)
        bar = _committed_wrong(state)
        for response in fill(OUTSIDE_THE_ANSWER + WITHOUT_AN_ANSWER, m, other):
            _check(state, response, bar)
        # the committed winning placement does solve (the check can fail)
        _, reward, term, _, info = _at(state).step(_respond(m))
        assert info["success"] and term and reward == 1.0


# Random answers: 1-2 placements each of a random cell and digit 0..5 (out of range included), or junk.
_PIECE = st.one_of(
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)).map(lambda t: f"R{t[0]}C{t[1]}={t[2]}"),
    st.sampled_from(["", "solve", "R1C1", "=", "R1C1=1=2"]),
)


@given(state=st.sampled_from(STATES), oracle_first=st.integers(0, 8),
       answers=st.lists(st.lists(_PIECE, min_size=1, max_size=2), min_size=1, max_size=12))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_play_is_paid_exactly_for_the_solution(state, answers, oracle_first):
    """Some oracle placements (to get near the end), then random answers: success iff the board is the
    solution, reward 1 only on the step that completes it, every other step at most 0."""
    env = _at((state[0], state[1], (), ""))
    solution = [v for row in env.solution for v in row]
    givens = [i for i, v in enumerate(env.puzzle) if v]
    for action in env.oracle()[:oracle_first]:
        env.step(_respond(action))
    for pieces in answers:
        _, reward, term, _, info = env.step(_respond(" || ".join(pieces)))
        assert info["success"] == (env.board == solution)
        assert all(env.board[i] == env.puzzle[i] for i in givens)
        if info["success"]:
            assert term and np.isclose(reward, 1.0 + info["format_penalty"])
            break
        assert reward <= 0.0
