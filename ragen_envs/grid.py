"""Cells and moves of a grid in the words of the grid envs' demonstrators (Sokoban, FrozenLake).

Cells are (row, col), zero-indexed from the top-left corner, written ``(r, c)``; the four moves are the action
names ``Up``, ``Down``, ``Left``, ``Right`` (Up decreases the row, Left the column).
"""

from __future__ import annotations

from collections.abc import Iterable
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
