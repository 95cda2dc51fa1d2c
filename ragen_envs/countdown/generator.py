"""Procedural Countdown instances, each proven solvable by the exhaustive solver.

An instance is `{"target": int, "nums": [int, ...]}` (the public Countdown format, e.g. RAGEN's /
TinyZero's `Countdown-Tasks-3to4`), plus `"solution"`, an expression the solver found.

Sampling (rejection, so the distribution is explicit): draw `num_count` numbers uniformly from
`num_range` (with replacement) and a target uniformly from `target_range`, all from the caller's
`np.random.Generator`; keep the pair when `CountdownSolver.solve` finds an expression, otherwise draw
again. The result is uniform over the solvable (numbers, target) pairs. RAGEN's data is 3-4 numbers
filtered for solvability the same way.

Difficulty knobs (`CountdownConfig`):

- `num_count`: 3 to 6 numbers (an int, or an inclusive (low, high) range drawn per instance); more numbers
  mean a larger search for the agent, but also more reachable targets.
- `num_range`: inclusive range of the numbers (default 1-100).
- `target_range`: inclusive range of the target (default 1-100). A wide target range with few numbers
  makes most draws unsolvable; `max_tries` draws and `max_work` solver work bound the rejection loop (ValueError
  when exceeded). A target
  range above anything the numbers can reach (`reach_bound`) is refused when the config is built, and a draw
  whose target is above its numbers' bound skips the solver, so an impossible config fails at once.

Solvable fraction of draws with the default ranges, measured (1000/500/150/60 draws): 4% for 3
numbers, 15% for 4, 66% for 5, 100% for 6. The solver costs about 2, 8.5, 50 and 220 ms per draw on a
heavily shared core (roughly 4x less on an idle one), so a 6-number episode is dominated by its proof.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ragen_envs.countdown.expression import MAX_LITERAL_DIGITS
from ragen_envs.countdown.solver import CountdownSolver
from ragen_envs.validation import require_int, require_int_range

MIN_NUMS, MAX_NUMS = 3, 6
#: Work units (`CountdownSolver.work`, about 10 us each) charged to every draw for what the solver does not
#: count: drawing the numbers and target, building the solver and its single-number tables. Without it the
#: budget missed the fixed cost of each redraw, and a config whose every draw fails cheaply (four numbers near
#: 10^11) took twice the time its budget stood for.
DRAW_WORK = 10
#: The largest number an instance can hold: an answer writes each number as an integer literal of at most
#: MAX_LITERAL_DIGITS digits, so a larger one could never be used and no answer could earn the reward.
MAX_NUMBER = 10**MAX_LITERAL_DIGITS - 1


@dataclass(frozen=True)
class CountdownConfig:
    """Difficulty knobs of the generator (validated on construction; see the module docstring).

    Attributes:
        num_count: how many numbers, 3-6, or an inclusive (low, high) range within 3-6.
        num_range: inclusive range of each number (1 <= low <= high <= MAX_NUMBER = 10^12 - 1, as an answer can
            write them).
        target_range: inclusive range of the target (low >= 0).
        max_tries: draws before giving up with ValueError.
        max_work: solver work (`CountdownSolver.work`) of all the draws of one instance before giving up with
            ValueError (default 1,000,000: about 10 s). Draws that are mostly unsolvable cost the solver up to a
            second each with 6 numbers, so `max_tries` alone let such a config run for hours.
    """

    num_count: int | tuple[int, int] = 4
    num_range: tuple[int, int] = (1, 100)
    target_range: tuple[int, int] = (1, 100)
    max_tries: int = 20_000
    max_work: int = 1_000_000

    def __post_init__(self) -> None:
        _, c_hi = require_int_range("num_count", self.num_count, MIN_NUMS, MAX_NUMS)
        # Stored as tuples of ints (a list from a TOML config would make the frozen config unhashable).
        object.__setattr__(self, "num_range",
                           require_int_range("num_range", self.num_range, 1, MAX_NUMBER, allow_int=False))
        object.__setattr__(self, "target_range",
                           require_int_range("target_range", self.target_range, 0, allow_int=False))
        require_int("max_tries", self.max_tries, 1)
        require_int("max_work", self.max_work, 1)
        reach = reach_bound([self.num_range[1]] * c_hi)
        if self.target_range[0] > reach:
            # Checked up front: otherwise every one of the max_tries draws runs the solver in vain (half a minute).
            raise ValueError(
                f"no solvable Countdown instance exists: target_range={self.target_range} is unreachable, since "
                f"{c_hi} numbers of at most {self.num_range[1]} make no value above {reach}; target_range must "
                "start at or below that"
            )

    @property
    def count_range(self) -> tuple[int, int]:
        return require_int_range("num_count", self.num_count, MIN_NUMS, MAX_NUMS)


def reach_bound(nums: list[int]) -> int:
    """An upper bound on the value of any expression of `nums` (each >= 1) with + - * /: 2^(n-1) * prod(nums).

    Why: every subexpression's value is a fraction p/q in lowest terms or not, with |p| and |q| at most H(S) for
    its numbers S, where H({x}) = x and combining two parts (sum, difference, product or quotient of p1/q1 and
    p2/q2) gives a numerator and denominator of at most 2 H(S1) H(S2); so |value| <= |p| <= 2^(n-1) prod(nums),
    since |q| >= 1. Loose (4 numbers up to 100 give 8e8; the true maximum is 1e8) but never too small.
    """
    bound = 2 ** (len(nums) - 1)
    for x in nums:
        bound *= int(x)
    return bound


def generate_countdown(rng: np.random.Generator, config: CountdownConfig | None = None) -> dict[str, Any]:
    """One solvable instance `{"target", "nums", "solution"}` drawn from `rng`.

    Raises:
        ValueError: no solvable draw within `config.max_tries` (the ranges make the task (nearly) impossible).
    """
    config = config or CountdownConfig()
    c_lo, c_hi = config.count_range
    n_lo, n_hi = config.num_range
    t_lo, t_hi = config.target_range
    work = draws = 0
    while draws < config.max_tries and work < config.max_work:
        draws += 1
        work += DRAW_WORK
        count = int(rng.integers(c_lo, c_hi + 1))
        nums = [int(x) for x in rng.integers(n_lo, n_hi + 1, size=count)]
        target = int(rng.integers(t_lo, t_hi + 1))
        # A target above the draw's reach_bound has no solution: skip the solver (the draws stay the same).
        if target > reach_bound(nums):
            continue
        solver = CountdownSolver(nums)
        solution = solver.solve(target)
        work += solver.work
        if solution is not None:
            return {"target": target, "nums": nums, "solution": solution}
    spent = f"{draws} draws" if work < config.max_work else f"{draws} draws (solver work {work}, over max_work)"
    raise ValueError(
        f"no solvable Countdown instance in {spent} with num_count={config.num_count}, "
        f"num_range={config.num_range}, target_range={config.target_range}; widen the number range or "
        "narrow the target range"
    )


def generate_dataset(n: int, seed: int = 0, config: CountdownConfig | None = None) -> list[dict[str, Any]]:
    """`n` instances from `np.random.default_rng(seed)` (e.g. to write a JSONL file)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    return [generate_countdown(rng, config) for _ in range(n)]
