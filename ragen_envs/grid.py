"""Cells and moves of a grid in the words of the grid envs' demonstrators (Sokoban, FrozenLake).

Cells are (row, col), zero-indexed from the top-left corner, written ``(r, c)``; the four moves are the action
names ``Up``, ``Down``, ``Left``, ``Right`` (Up decreases the row, Left the column).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: Each move in running text ("I move up").
DIRECTION_WORDS: dict[str, str] = {"Up": "up", "Down": "down", "Left": "left", "Right": "right"}
_OFFSETS: dict[str, tuple[int, int]] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def coords(cells: Iterable[Any]) -> str:
    """The cells as ``(r, c), (r, c)``, sorted (each cell any pair of integers, numpy ones included)."""
    ordered = sorted(tuple(int(x) for x in c) for c in cells)
    return ", ".join(f"({r}, {c})" for r, c in ordered)


def moved(cell: tuple[int, int], action: str) -> tuple[int, int]:
    """The cell one `action` away from `cell` (no bounds: the caller knows its grid)."""
    dr, dc = _OFFSETS[action]
    return cell[0] + dr, cell[1] + dc


# Text-size bounds, shared by the grid envs' checks that every observation fits MAX_OBSERVATION_CHARS.
def grid_chars(nrow: int, ncol: int) -> int:
    """Characters of a grid drawn one symbol per cell, rows joined by newlines."""
    return nrow * (ncol + 1) - 1


def coords_chars(nrow: int, ncol: int, count: int) -> int:
    """The most characters `coords` writes for `count` cells of an `nrow` x `ncol` grid (each at its widest,
    ``(nrow - 1, ncol - 1)``); 0 for no cell."""
    return count * len(f"({nrow - 1}, {ncol - 1})") + 2 * max(count - 1, 0)


def largest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] with `fits(n)` (`fits` true up to some n, false beyond), or None; by bisection,
    so a bound as large as the observation limit costs a few dozen calls."""
    if not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low
