"""Exact Sokoban search: a step-optimal solver and the backward distance map used by the generator.

Both searches run breadth-first over full states `(player, boxes)`, so path lengths are counted in
env steps (every Up/Down/Left/Right, walking or pushing, costs 1), the quantity the env's reward and
action budget count. A state is one Python int, `boxes_bitmask << PLAYER_BITS | player`, over the
cells of the grid padded with one ring of wall (so a neighbour index never leaves the grid).

- `solve` searches forward from the level and stops at the first layer that holds a solved state,
  so the returned action list is a shortest one. Pushing a box onto a *dead square* (a cell from
  which no push sequence can bring a box to any target, even with every other box removed) is
  pruned: such states can never be solved, so pruning keeps optimality.
- `goal_distances` searches backward from every solved state (boxes on the targets, the player on
  any free cell) with reverse moves (step back, or step back pulling the box in front); layer `d`
  holds exactly the states whose shortest solution has `d` steps. Every state it reaches is
  solvable by construction, so the generator needs no dead-lock test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ragen_envs.sokoban.level import Level, Position, parse_xsb
from ragen_envs.validation import require_int

#: Env action names, in the order of `Board.dirs`.
ACTION_NAMES: tuple[str, ...] = ("Up", "Down", "Left", "Right")

DEFAULT_MAX_STATES = 1_000_000


class Board:
    """The static part of a level, flattened for search.

    Cell index of (row, col): `(row + 1) * width + col + 1` in a grid padded with one wall ring
    (`width = W + 2`). `floor[i]` is True for non-wall cells; `dirs` are the index steps of
    Up, Down, Left, Right.
    """

    __slots__ = ("height", "width", "size", "floor", "dirs", "player_bits", "player_mask", "_squares")

    def __init__(self, walls: np.ndarray):
        h, w = walls.shape
        self.height, self.width = h + 2, w + 2
        self.size = self.height * self.width
        padded = np.ones((self.height, self.width), dtype=bool)
        padded[1:-1, 1:-1] = walls
        self.floor: list[bool] = (~padded).ravel().tolist()
        self.dirs: tuple[int, int, int, int] = (-self.width, self.width, -1, 1)
        self.player_bits = self.size.bit_length()
        self.player_mask = (1 << self.player_bits) - 1
        self._squares: list[list[tuple[int, int, int]]] | None = None

    @property
    def squares(self) -> list[list[tuple[int, int, int]]]:
        """`squares[i]`: for each 2x2 block holding cell i, its other three cells (interior cells only)."""
        if self._squares is None:
            wd = self.width
            sq: list[list[tuple[int, int, int]]] = [[] for _ in range(self.size)]
            for i in range(self.size):
                if not self.floor[i]:
                    continue
                for dr in (-wd, wd):
                    for dc in (-1, 1):
                        sq[i].append((i + dr, i + dc, i + dr + dc))
            self._squares = sq
        return self._squares

    def index(self, pos: Position) -> int:
        return (pos[0] + 1) * self.width + pos[1] + 1

    def position(self, index: int) -> Position:
        return (index // self.width - 1, index % self.width - 1)

    def mask(self, cells: Iterable[Position]) -> int:
        m = 0
        for pos in cells:
            m |= 1 << self.index(pos)
        return m

    def cells(self, mask: int) -> list[int]:
        """Indices of the set bits of `mask`, ascending."""
        out = []
        while mask:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
        return out

    def live_cells(self, targets: Iterable[int]) -> list[bool]:
        """`live[i]`: a lone box at cell i can be pushed onto some target (reverse pulls from targets).

        Pushing a box from c to c + d needs the player at c - d, so c is a predecessor of c + d when
        both c and c - d are floor.
        """
        live = [False] * self.size
        stack = list(targets)
        for t in stack:
            live[t] = True
        floor = self.floor
        while stack:
            y = stack.pop()
            for d in self.dirs:
                c = y - d
                if floor[c] and floor[c - d] and not live[c]:
                    live[c] = True
                    stack.append(c)
        return live


def push_move(floor: list[bool], box_floor: list[bool], player: int, boxes: int, d: int) -> tuple[int, int] | None:
    """Sokoban's move rule on the flat state: the one copy, used by the env and by `solve`.

    The player at cell `player` moves by the index step `d` (one of `Board.dirs`); `boxes` is the box
    bitmask. Walking needs `floor` at the next cell; a box there is pushed one cell further when that
    cell is in `box_floor` and holds no box (one box at a time, never pulled). Returns (player, boxes)
    after the move, or None when it is blocked (by a wall or by a box that cannot move). The env
    passes its floor twice; `solve` passes its live cells as `box_floor`, pruning dead squares.
    """
    q = player + d
    if not floor[q]:
        return None
    if (boxes >> q) & 1:
        r = q + d
        if not box_floor[r] or (boxes >> r) & 1:
            return None
        return q, boxes ^ (1 << q) ^ (1 << r)
    return q, boxes


def _as_level(level: str | Level) -> Level:
    if isinstance(level, Level):
        return level
    if isinstance(level, str):
        return parse_xsb(level)
    raise ValueError(f"level must be XSB text (str) or a Level, got {type(level).__name__}")


def solve(level: str | Level, max_states: int = DEFAULT_MAX_STATES) -> list[str] | None:
    """A shortest solution of a Sokoban level, in env steps.

    Args:
        level: XSB text (validated by `parse_xsb`) or a `Level`.
        max_states: search budget, in distinct states stored (memory is about 150 bytes a state).

    Returns:
        the action names ("Up", "Down", "Left", "Right") of a shortest solution (`[]` when the level is
        already solved), or None when no solution exists or none was found within `max_states` states.
    """
    max_states = require_int("max_states", max_states, 1)
    lv = _as_level(level)
    board = Board(lv.walls)
    tmask = board.mask(lv.targets)
    bmask = board.mask(lv.boxes)
    if bmask == tmask:
        return []
    live = board.live_cells(board.cells(tmask))
    pb, pm = board.player_bits, board.player_mask
    floor, dirs = board.floor, board.dirs

    squares = board.squares
    start = (bmask << pb) | board.index(lv.player)
    parent: dict[int, int] = {start: -1}
    frontier = [start]
    while frontier:
        nxt: list[int] = []
        for s in frontier:
            p = s & pm
            b = s >> pb
            for d in dirs:
                moved = push_move(floor, live, p, b, d)
                if moved is None:
                    continue  # wall, or a box against a wall, a dead square or a second box
                q, nb = moved
                ns = (nb << pb) | q
                if ns in parent:
                    continue
                if nb != b:  # a push: the box went from q to r
                    r = q + d
                    if not (tmask >> r) & 1 and _frozen_square(r, nb, floor, squares):
                        continue
                    parent[ns] = s
                    if nb == tmask:
                        return _path(parent, ns, board)
                else:
                    parent[ns] = s
                nxt.append(ns)
        if len(parent) > max_states:
            return None
        frontier = nxt
    return None


def _frozen_square(r: int, boxes: int, floor: list[bool], squares: list[tuple[int, int, int]]) -> bool:
    """True when the box just pushed to `r` (not a target) closes a 2x2 block of walls and boxes.

    No box of such a block can ever move again, and `r` holds a box off target, so the state is dead.
    """
    for a, b, c in squares[r]:
        if (
            (not floor[a] or (boxes >> a) & 1)
            and (not floor[b] or (boxes >> b) & 1)
            and (not floor[c] or (boxes >> c) & 1)
        ):
            return True
    return False


def _path(parent: dict[int, int], state: int, board: Board) -> list[str]:
    by_delta = dict(zip(board.dirs, ACTION_NAMES))
    pm = board.player_mask
    actions = []
    while parent[state] != -1:
        prev = parent[state]
        actions.append(by_delta[(state & pm) - (prev & pm)])
        state = prev
    actions.reverse()
    return actions


@dataclass(frozen=True)
class DistanceLayers:
    """Result of `goal_distances`.

    Attributes:
        board: the flattened room.
        layers: `layers[d]` lists the states (ints, see the module docstring) whose shortest solution
            has exactly `d` steps, in a deterministic order. Every layer kept is complete.
        pulled: `pulled[d][i]` is True when `layers[d][i]` was first reached by a pull, i.e. its
            shortest solution starts with a push (the player stands next to a box).
        complete: True when the search exhausted every state reachable backward from the goal
            (then `len(layers) - 1` is the largest optimal solution length of this room and targets).
    """

    board: Board
    layers: list[list[int]]
    pulled: list[list[bool]]
    complete: bool

    def level(self, walls: np.ndarray, targets: frozenset[Position], state: int) -> Level:
        """The `Level` of one state of the layers."""
        board = self.board
        boxes = frozenset(board.position(i) for i in board.cells(state >> board.player_bits))
        return Level(
            walls=walls, targets=targets, boxes=boxes, player=board.position(state & board.player_mask)
        )


def goal_distances(
    walls: np.ndarray,
    targets: Iterable[Position],
    max_depth: int | None = None,
    max_states: int = DEFAULT_MAX_STATES,
) -> DistanceLayers:
    """Backward breadth-first search from the solved states: exact distance-to-goal layers.

    Args:
        walls: bool (H, W) room.
        targets: target positions; the search puts one box on each.
        max_depth: stop after layer `max_depth` (None: no depth limit).
        max_states: stop after the first layer that brings the number of stored states past this.

    Returns:
        `DistanceLayers`; states in layer d have optimal solution length exactly d (reverse moves
        correspond one to one to forward steps, and the search starts from every solved state).
    """
    max_states = require_int("max_states", max_states, 1)
    board = Board(np.asarray(walls, dtype=bool))
    floor, dirs = board.floor, board.dirs
    pb, pm = board.player_bits, board.player_mask
    tmask = board.mask(targets)
    first = [(tmask << pb) | p for p in range(board.size) if floor[p] and not (tmask >> p) & 1]
    seen = set(first)
    layers, pulled = [first], [[False] * len(first)]
    complete = False
    while True:
        if max_depth is not None and len(layers) > max_depth:
            break
        nxt: list[int] = []
        nxt_pulled: list[bool] = []
        for s in layers[-1]:
            p = s & pm
            b = s >> pb
            for d in dirs:
                q = p - d  # the player stood at q and stepped (p - q) = d forward
                if not floor[q] or (b >> q) & 1:
                    continue
                box = p + d
                if (b >> box) & 1:
                    # The forward step could have pushed this box from p to p + d.
                    ns = (((b ^ (1 << box)) | (1 << p)) << pb) | q
                    if ns not in seen:
                        seen.add(ns)
                        nxt.append(ns)
                        nxt_pulled.append(True)
                ns = s - p + q
                if ns not in seen:
                    seen.add(ns)
                    nxt.append(ns)
                    nxt_pulled.append(False)
        if not nxt:
            complete = True
            break
        # `nxt` is complete here (the whole previous layer was expanded), so it is kept either way.
        layers.append(nxt)
        pulled.append(nxt_pulled)
        if len(seen) > max_states:
            break
    return DistanceLayers(board=board, layers=layers, pulled=pulled, complete=complete)
