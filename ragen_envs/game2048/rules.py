"""The rules of 2048 on an n x n board of tile values (0 = empty): slide, merge, spawn.

A move slides every tile as far as it goes in the move's direction; two equal tiles that meet merge into
one tile of twice the value, and a tile made by a merge does not merge again in the same move, so a row
`[2, 2, 2, 2]` moved left becomes `[4, 4, 0, 0]` and `[4, 4, 8, 0]` becomes `[8, 8, 0, 0]`. Along a line
the tiles nearest the wall the move goes towards merge first (`[2, 2, 2, 0]` left is `[4, 2, 0, 0]`, right
is `[0, 0, 2, 4]`). The move's score is the sum of the merged tiles' new values. A move that changes
nothing is not a legal move. After a legal move one tile appears in an empty cell chosen uniformly at
random: a 2 with probability 0.9, a 4 with 0.1 (`spawn`: one draw for the cell, one for the value).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DIRECTIONS: tuple[str, ...] = ("Up", "Down", "Left", "Right")
FOUR_PROBABILITY = 0.1


def slide_row_left(row: Sequence[int]) -> tuple[list[int], int]:
    """One line moved towards index 0: (new line, score gained). Each tile merges at most once."""
    tiles = [int(v) for v in row if v]
    out: list[int] = []
    score = 0
    k = 0
    while k < len(tiles):
        if k + 1 < len(tiles) and tiles[k] == tiles[k + 1]:
            out.append(2 * tiles[k])
            score += 2 * tiles[k]
            k += 2
        else:
            out.append(tiles[k])
            k += 1
    return out + [0] * (len(row) - len(out)), score


def move(board: np.ndarray, direction: str) -> tuple[np.ndarray, int, bool]:
    """(new board, score gained, whether anything changed) for one move; `board` is not modified.

    `direction` is one of DIRECTIONS: Up moves tiles towards row 0, Left towards column 0.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    b = np.asarray(board)
    # View every move as "left" on a transformed board, then transform back.
    if direction == "Left":
        view = b
    elif direction == "Right":
        view = b[:, ::-1]
    elif direction == "Up":
        view = b.T
    else:
        view = b.T[:, ::-1]
    rows, score = [], 0
    for row in view.tolist():
        new, gained = slide_row_left(row)
        rows.append(new)
        score += gained
    out = np.array(rows, dtype=np.int64)
    if direction == "Right":
        out = out[:, ::-1]
    elif direction == "Up":
        out = out.T
    elif direction == "Down":
        out = out[:, ::-1].T
    out = np.ascontiguousarray(out)
    return out, score, not np.array_equal(out, b)


def legal_moves(board: np.ndarray) -> list[str]:
    """The directions that change the board, in DIRECTIONS order."""
    return [d for d in DIRECTIONS if move(board, d)[2]]


def spawn(board: np.ndarray, rng: np.random.Generator) -> tuple[int, int, int] | None:
    """Put a new tile in a uniformly random empty cell, in place: (row, col, value), or None when full.

    Draws: `rng.integers(number of empty cells)` picks the cell (row-major order of the empty cells),
    then `rng.random() < 0.1` makes it a 4, else a 2.
    """
    empty = np.flatnonzero(board.ravel() == 0)
    if empty.size == 0:
        return None
    cell = int(empty[int(rng.integers(empty.size))])
    value = 4 if rng.random() < FOUR_PROBABILITY else 2
    r, c = divmod(cell, board.shape[1])
    board[r, c] = value
    return r, c, value
