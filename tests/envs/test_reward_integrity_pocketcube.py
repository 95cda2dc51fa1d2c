"""Reward integrity of the pocket cube: only committed face turns that solve the cube succeed.

From levels one turn from solved (generated with `distance=1`, each has two solving turns: m and the opposite
face's turn, equal up to a whole-cube rotation), generated variants (hypothesis) wrap the solving turn m with a
non-solving turn o: negations, hedges ("m or o", "m, o", "m/o", "m o" in one piece), qualifiers, other
notations (R1, R3, R+, Ri, Rw, 2R, R²), homoglyph letters, misspelled turns, m only in <think>, after the
answer or in a second <answer> block. None may succeed, and none may earn more than committing to o does.

Then arbitrary answers built from turn names, near-misses and separators are checked against an independent
simulation: an episode succeeds exactly when the executed turns, replayed on the sticker model, leave every
face one colour, and every executed turn is a piece of the answer naming that turn exactly.
"""

from __future__ import annotations

import numpy as np
from hedge_templates import OUTSIDE_THE_ANSWER, WITHOUT_AN_ANSWER, fill, with_hedges
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.pocketcube import cube as C
from ragen_envs.pocketcube.env import PocketCubeEnv

#: Examples per generated test (the report counts these).
EXAMPLES = 200

#: {m}: the solving turn, {o}: a turn that does not solve.
HOSTILE = with_hedges(
    "({m})",
    "[{m}]",
    "{m} {m}",
    "turn {m}",
    "{m}.",
)
#: Other notations for a turn: none is an action here (the vocabulary is X, X', X2 and the documented aliases).
NOTATIONS = ("{f}1", "{f}3", "{f}+", "{f}-", "{f}i", "{f}w", "2{f}", "{f}\u00b2", "{f}''", "{f}`", "{f}^-1", "{f}2''",
             "{f}\u02b9", "{f}'3", "{f} '", "{f}2 2")
#: Letter -> lookalike from another script.
HOMOGLYPHS = {"U": "\u054d", "R": "\u13a1", "F": "\u03dc", "D": "\u13a0", "L": "\u216c", "B": "\u0412", "'": "\u02bc",
              "2": "\uff12"}


def _respond(answer: str) -> str:
    return f"<think>t</think><answer>{answer}</answer>"


_ENV = PocketCubeEnv(scramble_depth=1, distance=1, max_actions=None)


def _at(seed: int) -> PocketCubeEnv:
    _ENV.reset(seed=seed)
    return _ENV


def _level(seed: int) -> tuple[int, str, str, float]:
    """(seed, a solving turn, a non-solving turn, the reward of committing to the non-solving turn)."""
    env = _at(seed)
    solving = [m for m in C.MOVE_NAMES if C.is_solved(C.apply_moves(env.state, [m]))[0]]
    assert len(solving) == 2  # m and the opposite face's turn (equal up to a whole-cube rotation)
    m = solving[int(seed % 2)]
    o = next(x for x in C.MOVE_NAMES[::-1] if x not in solving and x[0] != m[0])
    _, reward, _, _, info = _at(seed).step(_respond(o))
    assert not info["success"]
    return seed, m, o, reward


LEVELS = [_level(seed) for seed in range(16)]


def _check(level, response: str) -> None:
    seed, _, _, committed_wrong = level
    _, reward, _, _, info = _at(seed).step(response)
    assert not info["success"] and reward <= committed_wrong, (response, reward, committed_wrong)


@given(level=st.sampled_from(LEVELS), template=st.sampled_from(HOSTILE), lower=st.booleans())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_wrapped_negated_or_hedged_turns_do_not_solve(level, template, lower):
    _, m, o, _ = level
    m = m.lower() if lower else m
    _check(level, _respond(template.replace("{m}", m).replace("{o}", o)))


@given(level=st.sampled_from(LEVELS), data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_other_notations_lookalikes_and_misspellings_do_not_solve(level, data):
    _, m, _, _ = level
    kind = data.draw(st.sampled_from(["notation", "homoglyph", "drop", "double", "suffix"]))
    if kind == "notation":
        bad = data.draw(st.sampled_from(NOTATIONS)).replace("{f}", m[0])
        assert bad not in C.MOVE_NAMES and bad not in PocketCubeEnv.ACTION_ALIASES
    elif kind == "homoglyph":
        i = data.draw(st.integers(0, len(m) - 1))
        bad = m[:i] + HOMOGLYPHS[m[i]] + m[i + 1 :]
    elif kind == "drop":
        if len(m) == 1:
            return
        bad = m[0]  # R' -> R: a real turn, but not one that solves
        if bad in C.MOVE_NAMES and C.is_solved(C.apply_moves(_at(level[0]).state, [bad]))[0]:
            return
    elif kind == "double":
        bad = m + m[-1]
    else:
        bad = m + data.draw(st.sampled_from(["x", "y", "z", "w", "0", "!", "'''"]))
    _check(level, _respond(bad))


def test_the_solving_turn_outside_the_answer_does_not_count():
    for level in LEVELS:
        _, m, o, _ = level
        for response in fill(OUTSIDE_THE_ANSWER + WITHOUT_AN_ANSWER, m, o):
            _check(level, response)
        assert _at(level[0]).step(_respond(m))[4]["success"]  # the committed solving turn does solve


PIECES = st.one_of(
    st.sampled_from(C.MOVE_NAMES),
    st.sampled_from(C.MOVE_NAMES).map(str.lower),
    st.sampled_from(["x", "y2", "Rw", "R3", "U 2", "F'2", "B\u2019", "D2'", "", "  ", "M", "S'", "E2", "r u"]),
    st.builds(lambda f, h: f + h, st.sampled_from(list("URFDLB")), st.sampled_from(["\u00b2", "\u02b9", "1", "+"])),
)
SEPARATORS = st.sampled_from([" || ", "||", " | ", ", ", " ", " or ", " then "])


@given(seed=st.integers(0, 2**16), depth=st.integers(1, 4), pieces=st.lists(PIECES, min_size=1, max_size=4),
       seps=st.lists(SEPARATORS, min_size=3, max_size=3))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_success_exactly_when_the_executed_turns_solve_the_cube(seed, depth, pieces, seps):
    env = PocketCubeEnv(scramble_depth=depth, distance=(1, depth), max_actions=None)
    env.reset(seed=seed)
    start = env.state.copy()
    answer = pieces[0] + "".join(sep + p for sep, p in zip(seps, pieces[1:]))
    _, reward, terminated, _, info = env.step(_respond(answer))
    executed = info["actions_executed"]
    # Reference parse: pieces between "||", blanks skipped; a piece is a turn when, whitespace collapsed and
    # ASCII-lower-cased, it is a turn's name or a documented alias; the first 2 such pieces are the plan.
    table = {n.lower(): n for n in C.MOVE_NAMES} | {k.lower(): v for k, v in PocketCubeEnv.ACTION_ALIASES.items()}
    plan = [table.get(" ".join(p.split()).lower()) for p in answer.split("||") if p.strip()]
    plan = [m for m in plan if m][:2]
    solved_at = next((k + 1 for k in range(len(plan)) if C.is_solved(C.apply_moves(start, plan[: k + 1]))[0]), None)
    assert executed == plan[:solved_at], (answer, executed, plan)
    solved = bool(C.is_solved(C.apply_moves(start, executed))[0])
    assert info["success"] == solved == terminated
    assert reward == (1.0 if solved else 0.0) + info["format_penalty"]
    assert np.array_equal(C.apply_moves(start, executed), env.state)
