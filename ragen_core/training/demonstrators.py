"""Demonstrators: what the scripted warm-start policy writes about one env's state, one table entry per env.

The warm start (:mod:`ragen_core.training.sft`) writes responses ``<think> reasoning </think> <answer> actions
</answer>``
whose reasoning refers to the actual state, so that it depends on the input (high I(X;Z), docs/science.md
section 1). Where that reasoning comes from, in this order:

1. an env whose unwrapped object defines ``oracle_step() -> (reasoning, [actions])`` writes its own (PocketCube,
   2048, Sudoku, MetaMathQA, Code, SearchQA, WebShop; the hook for new envs, nothing here);
2. else the env's class, or a class it derives from, has an entry in :data:`DEMONSTRATORS` (Sokoban, FrozenLake,
   Bandit, Countdown): the reasoning is written here from the env's public state and its ``oracle()`` answer;
3. else there is no demonstrator and :func:`demonstrator_for` says so, naming the env.

An entry (:class:`Demonstrator`) is a few functions of the unwrapped env: the oracle's turn (required), and
optionally the random policy's turn, the answer a noisy demonstrator writes instead of the oracle's, and the list
of answers the "first"/"random" noise draws from. What an entry leaves out, :mod:`ragen_core.training.sft` does the same
way for every env (``I try <action>.`` over ``ACTIONS`` or the ``random_action(rng)`` hook).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ragen_envs.bandit import BanditEnv
from ragen_envs.countdown.env import CountdownEnv
from ragen_envs.frozenlake.env import FrozenLakeEnv
from ragen_envs.sokoban.env import SokobanEnv

__all__ = ["DEMONSTRATORS", "Demonstrator", "demonstrator_for", "find_demonstrator"]

_DIRECTION_WORDS = {"Up": "up", "Down": "down", "Left": "left", "Right": "right"}


@dataclass(frozen=True)
class Demonstrator:
    """The state-derived texts of one env (every function takes the unwrapped env first).

    Attributes:
        oracle_turn: ``(env, style, per_turn) -> (reasoning, actions)``: the oracle's reasoning in `style`
            (``"full"`` / ``"plan"``, :data:`ragen_core.training.sft.REASONING_STYLES`; an env with one style ignores
            it)
            and its action(s) for this turn, at most `per_turn` of them.
        random_turn: ``(env, rng) -> (reasoning, [action])``: the random policy's turn (one uniformly random
            valid action, reasoning about the state); None: ``I try <action>.`` over ``ACTIONS``.
        noise_answer: ``(env, kind, rng) -> answer``: what a noisy demonstrator answers instead of the oracle
            (`kind`: ``"first"`` the habit, ``"random"`` a random answer); None: from :attr:`vocabulary`.
        vocabulary: ``env -> [answers]``: the answers the env accepts, in the order it shows them (the first is
            the habit of ``noise_action="first"``); None: the env's ``ACTIONS``.
    """

    oracle_turn: Callable[[Any, str, int], tuple[str, list[str]]]
    random_turn: Callable[[Any, np.random.Generator], tuple[str, list[str]]] | None = None
    noise_answer: Callable[[Any, str, np.random.Generator], str] | None = None
    vocabulary: Callable[[Any], list[str]] | None = None


# ---------------------------------------------------------------------------------------------- shared pieces
def _coords(cells: Any) -> str:
    cells = sorted(tuple(int(x) for x in c) for c in cells)
    return ", ".join(f"({r}, {c})" for r, c in cells)


def _move(cell: tuple[int, int], action: str) -> tuple[int, int]:
    dr, dc = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}[action]
    return cell[0] + dr, cell[1] + dc


# ---------------------------------------------------------------------------------------------- Sokoban
def _sokoban_reasoning(u: SokobanEnv, actions: Sequence[str]) -> str:
    """Full style: ``I am at (2, 3). Box at (3, 2), target at (3, 1). I move down to (3, 3).`` (the move of
    `actions[0]`: a walk or a push, read off the board; ``Then <dir>.`` for a second action)."""
    player = tuple(int(x) for x in u.player_position)
    boxes_set = {tuple(int(x) for x in b) for b in u.box_positions}
    targets = u.target_positions
    left = sorted(boxes_set - {tuple(int(x) for x in t) for t in targets})
    parts = [f"I am at {_coords([player])}.",
             f"Box at {_coords(left or boxes_set)}, target at {_coords(targets)}."]
    if actions:
        nxt = _move(player, actions[0])
        if nxt in boxes_set:
            parts.append(
                f"Moving {_DIRECTION_WORDS[actions[0]]} pushes the box to {_coords([_move(nxt, actions[0])])}."
            )
        else:
            parts.append(f"I move {_DIRECTION_WORDS[actions[0]]} to {_coords([nxt])}.")
        if len(actions) > 1:
            parts.append(f"Then {_DIRECTION_WORDS.get(actions[1], actions[1])}.")
    return " ".join(parts)


def _first_push(
    player: tuple[int, int], boxes: set[tuple[int, int]], plan: Sequence[str]
) -> tuple[str, tuple[int, int]] | None:
    """(direction, cell the player pushes from) of the first push of `plan`, or None if it has no push."""
    for a in plan:
        nxt = _move(player, a)
        if nxt in boxes:
            return a, player
        player = nxt
    return None


def _sokoban_plan_reasoning(u: SokobanEnv, plan: Sequence[str], actions: Sequence[str],
                            name_walk: bool = True) -> str:
    """Short reasoning (``warm_start.reasoning="plan"``): the pieces, the solver's first push, the next move.

    E.g. ``Player (2, 2), box (1, 2), target (1, 4). Push Right from (1, 1). Go Left.`` ("Push now." when the
    next move is that push). Every cell is read off the current state; the push is the first push of the
    solver's shortest plan, so the text is a true (if abridged) account of why the answer is what it is.
    """
    player = tuple(int(x) for x in u.player_position)
    boxes_set = {tuple(int(x) for x in b) for b in u.box_positions}
    targets_set = {tuple(int(x) for x in t) for t in u.target_positions}
    left = sorted(boxes_set - targets_set) or sorted(boxes_set)
    free = sorted(targets_set - boxes_set) or sorted(targets_set)
    s = (f"Player {_coords([player])}, box{'es' if len(left) > 1 else ''} {_coords(left)}, "
         f"target{'s' if len(free) > 1 else ''} {_coords(free)}.")
    push = _first_push(player, boxes_set, plan)
    if push is not None:
        s += f" Push {push[0]} from {_coords([push[1]])}."
    if actions:
        if _move(player, actions[0]) in boxes_set:
            s += " Push now."
        elif name_walk:
            s += f" Go {actions[0]}."
    return s


def _sokoban_turn(u: SokobanEnv, style: str, per_turn: int) -> tuple[str, list[str]]:
    """The first `per_turn` moves of the solver's shortest plan (the first action when it has none: solved,
    or beyond its search limit), with the reasoning of `style`."""
    plan = list(u.oracle() or [])
    acts = plan[:per_turn] or [u.ACTIONS[0]]
    if style == "plan":
        return _sokoban_plan_reasoning(u, plan, acts), acts
    return _sokoban_reasoning(u, acts), acts


def _sokoban_random_turn(u: SokobanEnv, rng: np.random.Generator) -> tuple[str, list[str]]:
    a = u.ACTIONS[int(rng.integers(len(u.ACTIONS)))]
    return _sokoban_reasoning(u, [a]), [a]


# ---------------------------------------------------------------------------------------------- FrozenLake
def _frozenlake_reasoning(u: FrozenLakeEnv, action: str) -> str:
    """``I am at (r, c) and the goal is at (r, c). Moving <dir> goes to (r, c) and avoids the holes.`` (the cell
    the move aims at, before any slip)."""
    pos = tuple(int(x) for x in u.player_position)
    goal = [(r, c) for r, row in enumerate(u.desc) for c, ch in enumerate(row) if ch == "G"]
    return (f"I am at {_coords([pos])} and the goal is at {_coords(goal)}. "
            f"Moving {_DIRECTION_WORDS.get(action, action)} goes to {_coords([_move(pos, action)])} "
            "and avoids the holes.")


def _frozenlake_turn(u: FrozenLakeEnv, style: str, per_turn: int) -> tuple[str, list[str]]:
    a = u.oracle()[0]
    return _frozenlake_reasoning(u, a), [a]


def _frozenlake_random_turn(u: FrozenLakeEnv, rng: np.random.Generator) -> tuple[str, list[str]]:
    a = u.ACTIONS[int(rng.integers(len(u.ACTIONS)))]
    return _frozenlake_reasoning(u, a), [a]


# ---------------------------------------------------------------------------------------------- Bandit
def _bandit_reasoning(u: BanditEnv, arm: str) -> str:
    """Both arms, in the order shown, each with the kind its name suggests; the pick comes after, in the answer.

    E.g. ``Janitor sounds steady, Trader sounds risky.`` The reasoning reads the whole input before the choice, so
    the choice (the answer token) can depend on it: what RL has to learn after a random-arm warm start.
    """
    kinds = ["steady" if name == u.low_arm else "risky" for name in u.arm_names]
    return f"{u.arm_names[0]} sounds {kinds[0]}, {u.arm_names[1]} sounds {kinds[1]}."


def _bandit_turn(u: BanditEnv, style: str, per_turn: int) -> tuple[str, list[str]]:
    arm = u.oracle()[0]
    return _bandit_reasoning(u, arm), [arm]


def _bandit_random_turn(u: BanditEnv, rng: np.random.Generator) -> tuple[str, list[str]]:
    arm = u.arm_names[int(rng.integers(len(u.arm_names)))]
    return _bandit_reasoning(u, arm), [arm]


# ---------------------------------------------------------------------------------------------- Countdown
def _countdown_steps(expression: str) -> str:
    """The arithmetic of an expression, innermost operation first: ``(2 * 5) - 1`` -> ``2 * 5 = 10, 10 - 1 = 9.``

    Values are exact fractions (``8 / 3`` is written ``8/3``), as the env evaluates them.
    """
    ops = {ast.Add: ("+", lambda a, b: a + b), ast.Sub: ("-", lambda a, b: a - b),
           ast.Mult: ("*", lambda a, b: a * b), ast.Div: ("/", lambda a, b: a / b)}
    steps: list[str] = []

    def show(v: Fraction) -> str:
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            a, b = walk(node.left), walk(node.right)
            sym, fn = ops[type(node.op)]
            v = fn(a, b)
            steps.append(f"{show(a)} {sym} {show(b)} = {show(v)}")
            return v
        raise ValueError(f"not an arithmetic expression over integers: {expression!r}")

    walk(ast.parse(expression, mode="eval").body)
    return ", ".join(steps) + "."


def _countdown_guess(nums: Sequence[int], rng: np.random.Generator | None) -> str:
    """A lazy answer over the numbers: their sum in the order shown (rng None), or a random expression."""
    if rng is None:
        return " + ".join(str(n) for n in nums)
    order = [str(nums[int(i)]) for i in rng.permutation(len(nums))]
    expr = order[0]
    for x in order[1:]:
        op = "+-*/"[int(rng.integers(4))]
        expr = f"({expr}) {op} {x}" if rng.random() < 0.5 else f"{x} {op} ({expr})"
    return expr


def _countdown_turn(u: CountdownEnv, style: str, per_turn: int) -> tuple[str, list[str]]:
    answer = u.oracle()
    if not answer:
        raise ValueError(f"the Countdown instance target={u.target}, nums={u.nums} has no solution to demonstrate")
    return _countdown_steps(answer[0]), [answer[0]]


def _countdown_noise(u: CountdownEnv, kind: str, rng: np.random.Generator) -> str:
    """The habit: the sum of the numbers in the order shown; random: a random expression over them."""
    return _countdown_guess(u.nums, None if kind == "first" else rng)


# ---------------------------------------------------------------------------------------------- the table
#: The demonstrator of each env class (looked up along the class's MRO, so subclasses share their base's).
DEMONSTRATORS: dict[type, Demonstrator] = {
    SokobanEnv: Demonstrator(_sokoban_turn, random_turn=_sokoban_random_turn),
    FrozenLakeEnv: Demonstrator(_frozenlake_turn, random_turn=_frozenlake_random_turn),
    BanditEnv: Demonstrator(_bandit_turn, random_turn=_bandit_random_turn, vocabulary=lambda u: list(u.arm_names)),
    CountdownEnv: Demonstrator(_countdown_turn, noise_answer=_countdown_noise),
}


def find_demonstrator(env: Any) -> Demonstrator | None:
    """The table entry of `env` (a gym env or its unwrapped object), or None when its class has none."""
    u = getattr(env, "unwrapped", env)
    for cls in type(u).__mro__:
        if cls in DEMONSTRATORS:
            return DEMONSTRATORS[cls]
    return None


def demonstrator_for(env: Any) -> Demonstrator:
    """The table entry of `env`; a ValueError naming the env when there is none."""
    found = find_demonstrator(env)
    if found is None:
        name = type(getattr(env, "unwrapped", env)).__name__
        known = ", ".join(sorted(cls.__name__ for cls in DEMONSTRATORS))
        raise ValueError(f"{name} has no demonstrator: it defines no oracle_step() hook and has no entry in "
                         f"ragen_core.training.demonstrators.DEMONSTRATORS (entries: {known}); "
                         "use warm_start.policy='random'")
    return found
