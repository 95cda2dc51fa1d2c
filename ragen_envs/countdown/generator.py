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
  makes most draws unsolvable; `max_tries` bounds the rejection loop (ValueError when exceeded).

Solvable fraction of draws with the default ranges, measured (1000/500/150/60 draws): 4% for 3
numbers, 15% for 4, 66% for 5, 100% for 6. The solver costs about 2, 8.5, 50 and 220 ms per draw on a
heavily shared core (roughly 4x less on an idle one), so a 6-number episode is dominated by its proof.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ragen_envs.countdown.solver import CountdownSolver
from ragen_envs.validation import require_int, require_int_range

MIN_NUMS, MAX_NUMS = 3, 6


@dataclass(frozen=True)
class CountdownConfig:
    """Difficulty knobs of the generator (validated on construction; see the module docstring).

    Attributes:
        num_count: how many numbers, 3-6, or an inclusive (low, high) range within 3-6.
        num_range: inclusive range of each number (low >= 1).
        target_range: inclusive range of the target (low >= 0).
        max_tries: draws before giving up with ValueError.
    """

    num_count: int | tuple[int, int] = 4
    num_range: tuple[int, int] = (1, 100)
    target_range: tuple[int, int] = (1, 100)
    max_tries: int = 20_000

    def __post_init__(self) -> None:
        require_int_range("num_count", self.num_count, MIN_NUMS, MAX_NUMS)
        require_int_range("num_range", self.num_range, 1, allow_int=False)
        require_int_range("target_range", self.target_range, 0, allow_int=False)
        require_int("max_tries", self.max_tries, 1)

    @property
    def count_range(self) -> tuple[int, int]:
        return require_int_range("num_count", self.num_count, MIN_NUMS, MAX_NUMS)


def generate_countdown(rng: np.random.Generator, config: CountdownConfig | None = None) -> dict[str, Any]:
    """One solvable instance `{"target", "nums", "solution"}` drawn from `rng`.

    Raises:
        ValueError: no solvable draw within `config.max_tries` (the ranges make the task (nearly) impossible).
    """
    config = config or CountdownConfig()
    c_lo, c_hi = config.count_range
    n_lo, n_hi = config.num_range
    t_lo, t_hi = config.target_range
    for _ in range(config.max_tries):
        count = int(rng.integers(c_lo, c_hi + 1))
        nums = [int(x) for x in rng.integers(n_lo, n_hi + 1, size=count)]
        target = int(rng.integers(t_lo, t_hi + 1))
        solution = CountdownSolver(nums).solve(target)
        if solution is not None:
            return {"target": target, "nums": nums, "solution": solution}
    raise ValueError(
        f"no solvable Countdown instance in {config.max_tries} draws with num_count={config.num_count}, "
        f"num_range={config.num_range}, target_range={config.target_range}; widen the number range or "
        "narrow the target range"
    )


def generate_dataset(n: int, seed: int = 0, config: CountdownConfig | None = None) -> list[dict[str, Any]]:
    """`n` instances from `np.random.default_rng(seed)` (e.g. to write a JSONL file)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    return [generate_countdown(rng, config) for _ in range(n)]
