"""Seeded Sudoku puzzles with a unique solution, by digging holes into a random full grid.

    puzzle, solution = generate_puzzle(np.random.default_rng(0), n=9, givens=30)

The full grid is a random completion of the empty board (`solver.random_solution`). Cells are then
emptied in a random order; an emptied cell is put back when the puzzle would lose its unique solution
(`solver.count_solutions(puzzle) == 1`, an exact search), or, with `technique="singles"`, when naked and
hidden singles alone would no longer solve it. Digging stops at exactly `givens` filled cells. Emptying more
cells can only add solutions, so once a cell has been put back it stays necessary: one pass reaches a
minimal puzzle, and a grid whose minimal puzzle has more than `givens` cells is replaced by a new grid
(up to `max_tries` grids, then RuntimeError naming the knob).
"""

from __future__ import annotations

import numpy as np

from ragen_envs.sudoku.solver import box_side, count_solutions, random_solution, singles_solve

TECHNIQUES = ("any", "singles")

#: Givens per difficulty name and side (RAGEN's easy / medium / hard clue counts for 4x4 and 9x9).
DIFFICULTY_GIVENS: dict[int, dict[str, int]] = {
    4: {"easy": 10, "medium": 8, "hard": 6},
    9: {"easy": 36, "medium": 30, "hard": 26},
    16: {"easy": 160, "medium": 140, "hard": 128},
}
#: Fewest givens accepted per side: below these random grids almost never dig down far enough
#: (4 is the proven minimum for 4x4). 9x9 minimal puzzles from random digging have 22-29 givens, 22 in about 2%
#: of grids (measured: 4 of 250 with technique="singles", 4 of 150 with "any"), so 22 failed `max_tries` = 200
#: grids in about 4% of resets ("singles"; 0.5% "any"), each after half a minute; 23 or fewer in about 16%.
#: 16x16 needs 128 (the "hard" count): below it the uniqueness checks of the last cells dug are exact searches of
#: 100,000 positions and more (at 120, 2 of 25 resets took 9 and over 10 s; at 128 no check of 40 resets passed
#: 4,000 positions).
MIN_GIVENS = {4: 4, 9: 23, 16: 128}


def check_givens(n: int, givens: int) -> int:
    """`givens` as an int in [MIN_GIVENS[n], n * n - 1], else ValueError: at most n * n - 1, since a puzzle with
    every cell given is already solved (its start would be a success that no placement could change)."""
    box_side(n)
    if n not in MIN_GIVENS:
        raise ValueError(f"size must be one of {sorted(MIN_GIVENS)}, got {n}")
    top = n * n - 1
    if isinstance(givens, bool) or not isinstance(givens, (int, np.integer)) or not MIN_GIVENS[n] <= givens <= top:
        raise ValueError(f"givens must be an integer in [{MIN_GIVENS[n]}, {top}] for a {n}x{n} board, got {givens!r}")
    return int(givens)


def generate_puzzle(
    rng: np.random.Generator, n: int, givens: int, technique: str = "any", max_tries: int = 200
) -> tuple[list[int], list[int]]:
    """(puzzle, solution) as flat row-major lists (0 = empty), the puzzle with exactly `givens` digits and a
    unique solution (with `technique="singles"`: solvable by naked and hidden singles alone).

    All draws come from `rng`. Raises RuntimeError when `max_tries` grids never dig down to `givens`.
    """
    givens = check_givens(n, givens)
    if technique not in TECHNIQUES:
        raise ValueError(f"technique must be one of {TECHNIQUES}, got {technique!r}")
    for _ in range(max_tries):
        solution = random_solution(rng, n)
        puzzle = list(solution)
        filled = n * n
        for i in rng.permutation(n * n):
            if filled == givens:
                break
            keep, puzzle[i] = puzzle[i], 0
            ok = singles_solve(puzzle, n) is not None if technique == "singles" else count_solutions(puzzle, n) == 1
            if ok:
                filled -= 1
            else:
                puzzle[i] = keep
        if filled == givens:
            return puzzle, solution
    raise RuntimeError(
        f"no {n}x{n} puzzle with {givens} givens (technique={technique!r}) in {max_tries} grids; use more givens"
    )
