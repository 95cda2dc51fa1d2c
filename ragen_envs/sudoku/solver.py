"""An exact Sudoku solver and the cheap "singles" solver, on flat boards.

A board of side `n = b * b` (4, 9, 16) is a flat sequence of `n * n` ints in row-major order:
`board[r * n + c]` is the digit at row r, column c (0-indexed), 0 for an empty cell. Digits are
1..n; each row, column and b x b box must hold every digit once.

`count_solutions` is a complete depth-first search (bitmask candidates, the cell with the fewest
candidates first), so its answer is exact: it stops only at `limit` solutions or when the search
space is exhausted. `tests/envs/test_sudoku.py` checks it against brute-force enumeration of every
completion of 4x4 boards.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from math import isqrt

import numpy as np


def box_side(n: int) -> int:
    """b with b * b == n; ValueError when n is not a square >= 4."""
    b = isqrt(n) if isinstance(n, int) and n > 0 else 0
    if b < 2 or b * b != n:
        raise ValueError(f"the board side must be a square >= 4 (4, 9, 16), got {n!r}")
    return b


@cache
def peers(n: int) -> tuple[tuple[int, ...], ...]:
    """For every cell index, the sorted indices of the other cells of its row, column and box."""
    b = box_side(n)
    out = []
    for i in range(n * n):
        r, c = divmod(i, n)
        br, bc = r - r % b, c - c % b
        cells = {r * n + k for k in range(n)} | {k * n + c for k in range(n)}
        cells |= {(br + dr) * n + bc + dc for dr in range(b) for dc in range(b)}
        cells.discard(i)
        out.append(tuple(sorted(cells)))
    return tuple(out)


def conflicts(board: Sequence[int], n: int) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of peer cells holding the same non-zero digit."""
    p = peers(n)
    return [(i, j) for i in range(n * n) if board[i] for j in p[i] if j > i and board[j] == board[i]]


def is_solved(board: Sequence[int], n: int) -> bool:
    """Every cell holds a digit in 1..n and no two peers hold the same digit (a complete, valid grid)."""
    return len(board) == n * n and all(1 <= int(v) <= n for v in board) and not conflicts(board, n)


@cache
def _where(n: int) -> tuple[tuple[int, int, int], ...]:
    """(row, column, box) of every cell index."""
    b = box_side(n)
    return tuple((i // n, i % n, (i // n // b) * b + (i % n) // b) for i in range(n * n))


class SearchBudgetExceeded(RuntimeError):
    """The exact search visited `max_nodes` positions without an answer (`count_solutions`, `solve`)."""


def _search(
    board: Sequence[int], n: int, limit: int, order: np.random.Generator | None, max_nodes: int | None = None
) -> tuple[int, list[int] | None]:
    """(number of solutions found, capped at `limit`; the first solution or None).

    `order`: when given, the candidates of each cell are tried in a random order drawn from it (the
    generator of full grids uses this); the count is the same either way.
    `max_nodes`: SearchBudgetExceeded once the search has visited more positions than this (None: no bound).
    The search is exponential in the worst case: a 16x16 board with 30 givens whose row holds 15 cells for 14
    digits runs for longer than any caller waits, while the hardest known 9x9 puzzles take about 125,000.
    """
    b = box_side(n)
    cells = [int(v) for v in board]
    if len(cells) != n * n or any(not 0 <= v <= n for v in cells):
        raise ValueError(f"a {n}x{n} board must be {n * n} digits in 0..{n}")
    full = (1 << n) - 1
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    empties: list[int] = []
    for i, v in enumerate(cells):
        r, c = divmod(i, n)
        if v == 0:
            empties.append(i)
            continue
        bit = 1 << (v - 1)
        k = (r // b) * b + c // b
        if rows[r] & bit or cols[c] & bit or boxes[k] & bit:
            return 0, None  # the givens already clash
        rows[r] |= bit
        cols[c] |= bit
        boxes[k] |= bit
    where = _where(n)
    found = 0
    first: list[int] | None = None
    budget = -1 if max_nodes is None else max_nodes  # counted down; -1 never reaches 0

    def dfs(open_cells: list[int]) -> None:
        nonlocal found, first, budget
        if budget == 0:
            raise SearchBudgetExceeded(f"the search visited {max_nodes} positions without an answer")
        budget -= 1
        if not open_cells:
            found += 1
            if first is None:
                first = list(cells)
            return
        best_pos, best_mask, best_count = -1, 0, n + 1
        for pos, i in enumerate(open_cells):
            r, c, k = where[i]
            mask = full & ~(rows[r] | cols[c] | boxes[k])
            count = mask.bit_count()
            if count < best_count:
                best_pos, best_mask, best_count = pos, mask, count
                if count <= 1:
                    break
        if best_count == 0:
            return
        i = open_cells[best_pos]
        rest = open_cells[:best_pos] + open_cells[best_pos + 1 :]
        r, c, k = where[i]
        bits = [1 << d for d in range(n) if best_mask >> d & 1]
        if order is not None and len(bits) > 1:
            bits = [bits[j] for j in order.permutation(len(bits))]
        for bit in bits:
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit
            cells[i] = bit.bit_length()
            dfs(rest)
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[k] &= ~bit
            cells[i] = 0
            if found >= limit:
                return

    dfs(empties)
    return found, first


def count_solutions(board: Sequence[int], n: int, limit: int = 2, *, max_nodes: int | None = None) -> int:
    """The number of completions of `board` into a solved grid, capped at `limit` (>= 1).

    `count_solutions(puzzle, n) == 1` is the uniqueness check of the generator. `max_nodes`: raise
    SearchBudgetExceeded after that many search positions (None: search to the end, however long).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    return _search(board, n, limit, None, max_nodes)[0]


def solve(board: Sequence[int], n: int, *, max_nodes: int | None = None) -> list[int] | None:
    """The first completion of `board` in the search order (the solution of a unique puzzle), or None
    (`max_nodes` as for `count_solutions`)."""
    return _search(board, n, 1, None, max_nodes)[1]


#: Search positions one try of `random_solution` may visit before it starts again, per cell of the board.
RESTART_NODES_PER_CELL = 20
#: Tries of `random_solution` before it gives up (each fails with a chance of about 4% at 16x16).
RESTART_TRIES = 200


def random_solution(rng: np.random.Generator, n: int) -> list[int]:
    """A random complete grid: the search from the empty board with candidates tried in random order.

    A randomised backtracking search has a heavy tail: most 16x16 grids take about 300 positions, but about 3% of
    tries run past 200,000 (minutes) once an early choice leaves no completion. So a try that visits more than
    RESTART_NODES_PER_CELL * n * n positions is abandoned and a new try continues with the same `rng` (a restart,
    the usual remedy for such tails). A try that completes in budget returns the same grid as the unbounded
    search; 4x4 tries never visit more than 17 positions and 9x9 ones about 110 (3,000 seeds each), far below
    their budgets of 320 and 1,620, so only 16x16 ever restarts.
    """
    budget = RESTART_NODES_PER_CELL * n * n
    for _ in range(RESTART_TRIES):
        try:
            grid = _search([0] * (n * n), n, 1, rng, budget)[1]
        except SearchBudgetExceeded:
            continue
        assert grid is not None  # the empty board always has solutions
        return grid
    raise RuntimeError(f"no {n}x{n} grid found in {RESTART_TRIES} tries of {budget:,} search positions")


def candidates(board: Sequence[int], n: int, i: int) -> list[int]:
    """The digits cell `i` may hold given its peers (its own digit ignored)."""
    used = {board[j] for j in peers(n)[i]}
    return [d for d in range(1, n + 1) if d not in used]


def singles_solve(board: Sequence[int], n: int) -> list[int] | None:
    """Fill the board with naked singles (a cell with one candidate) and hidden singles (a digit with one
    place in a row, column or box) only; the full grid when that solves it, else None.

    A puzzle this solves needs no guessing: the "singles" difficulty of the generator.
    """
    b = box_side(n)
    cells = [int(v) for v in board]
    units = [[r * n + c for c in range(n)] for r in range(n)] + [[r * n + c for r in range(n)] for c in range(n)]
    units += [
        [(br + dr) * n + bc + dc for dr in range(b) for dc in range(b)]
        for br in range(0, n, b)
        for bc in range(0, n, b)
    ]
    progress = True
    while progress:
        progress = False
        for i in range(n * n):
            if cells[i] == 0:
                cand = candidates(cells, n, i)
                if not cand:
                    return None
                if len(cand) == 1:
                    cells[i] = cand[0]
                    progress = True
        for unit in units:
            present = {cells[i] for i in unit}
            for d in range(1, n + 1):
                if d in present:
                    continue
                spots = [i for i in unit if cells[i] == 0 and d in candidates(cells, n, i)]
                if not spots:
                    return None
                if len(spots) == 1:
                    cells[spots[0]] = d
                    present.add(d)
                    progress = True
    return cells if is_solved(cells, n) else None
