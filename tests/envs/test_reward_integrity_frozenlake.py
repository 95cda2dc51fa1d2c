"""Reward integrity of FrozenLake: only a committed move reaches the goal.

From a state one move from the goal (deterministic ice, generated maps), generated variants
(hypothesis) wrap the winning move m with another move o: negations ("not m"), hedges ("m or o",
"m, o", "m/o"), qualifiers, homoglyph or misspelled names, m only in <think>, two <answer> blocks.
None may succeed, and none may earn more than committing to the losing move o does.
"""

from __future__ import annotations

from one_winning_move import State, WinningMoveProbe, one_move_tests, respond

from ragen_envs.frozenlake.env import FrozenLakeEnv

#: Examples per generated test (the report counts these).
EXAMPLES = 150
PROBE = WinningMoveProbe(FrozenLakeEnv(is_slippery=False, max_actions=None, max_turns=None),
                         moves=("Left", "Down", "Right", "Up"))


def _one_from_goal(seed: int) -> State | None:
    """(seed, moves, winning move) of a deterministic map one oracle move from the goal, or None."""
    moves: list[str] = []
    for _ in range(40):
        env = PROBE.at((seed, tuple(moves), ""))
        move = env.oracle()[0]
        _, _, terminated, truncated, info = env.step(respond(move))
        if info["success"]:
            return seed, tuple(moves), move
        if terminated or truncated:
            return None
        moves.append(move)
    return None


STATES = [s for s in (_one_from_goal(seed) for seed in range(12)) if s is not None]
globals().update(one_move_tests(PROBE, STATES, EXAMPLES))
