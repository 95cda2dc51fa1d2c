"""Reward integrity of Sokoban: only a committed move solves the level.

From generated levels one push from solved (`min_solution_len=max_solution_len=1`), generated variants
(hypothesis) wrap the winning move m with another move o: negations ("not m"), hedges ("m or o",
"m, o", "m/o"), qualifiers, homoglyph or misspelled names, m only in <think>, two <answer> blocks.
None may succeed, and none may earn more than committing to the losing move o does.
"""

from __future__ import annotations

from one_winning_move import State, WinningMoveProbe, one_move_tests

from ragen_envs.sokoban.env import SokobanEnv

#: Examples per generated test (the report counts these).
EXAMPLES = 150
PROBE = WinningMoveProbe(SokobanEnv(min_solution_len=1, max_solution_len=1), moves=("Up", "Down", "Left", "Right"))


def _one_push_from_solved(seed: int) -> State | None:
    """(seed, no moves, winning move) of a level solved by one push."""
    plan = PROBE.at((seed, (), "")).oracle()
    return (seed, (), plan[0]) if plan and len(plan) == 1 else None


STATES = [s for s in (_one_push_from_solved(seed) for seed in range(12)) if s is not None]
globals().update(one_move_tests(PROBE, STATES, EXAMPLES))
