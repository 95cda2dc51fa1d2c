"""Sokoban levels: the standard XSB text format, validation, and RAGEN's text symbols.

A level is a rectangular grid (rows top to bottom, columns left to right, both zero-indexed;
a position is `(row, col)`). XSB, the format of every Sokoban level collection:

    #  wall          (space), -, _  floor
    .  target        $  box           *  box on target
    @  player        +  player on target

RAGEN's text symbols (what the env shows the model):

    #  wall   _  floor   O  target   X  box   √  box on target   P  player   S  player on target

Rules of a valid level (`parse_xsb` raises a `ValueError` naming the problem and the position):

- only the characters above; ragged lines are padded on the right with floor;
- exactly one player; as many boxes as targets, and at least one;
- closed: the grid edge counts as wall, so a level needs no outer wall row, but every box that
  is not on a target and every empty target must lie in the player's region (the cells the player
  could reach if boxes were air); anything walled off could never be solved.

Floor cells outside the player's region (e.g. the leading spaces of an XSB line) are kept as floor in
XSB (so `to_xsb(parse_xsb(text))` gives the text back) but are shown as wall to the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

Position = tuple[int, int]

#: XSB characters accepted as floor; the first one is written back.
XSB_FLOOR = (" ", "-", "_")
XSB_WALL, XSB_TARGET, XSB_BOX, XSB_BOX_ON_TARGET, XSB_PLAYER, XSB_PLAYER_ON_TARGET = (
    "#",
    ".",
    "$",
    "*",
    "@",
    "+",
)

#: RAGEN's text symbols, by tile name.
RAGEN_SYMBOLS: dict[str, str] = {
    "wall": "#",
    "floor": "_",
    "target": "O",
    "box": "X",
    "box_on_target": "√",
    "player": "P",
    "player_on_target": "S",
}

#: The legend shown in the instructions, in RAGEN's order.
RAGEN_LEGEND = "#: wall, _: empty floor, O: target, X: box, √: box on target, P: player, S: player on target"


@dataclass(frozen=True)
class Level:
    """One Sokoban position: a static room plus the movable pieces.

    Attributes:
        walls: bool array (H, W), True where a wall is. The grid edge also acts as wall.
        targets: target positions, (row, col).
        boxes: box positions, (row, col).
        player: the player position, (row, col).
    """

    walls: np.ndarray
    targets: frozenset[Position]
    boxes: frozenset[Position]
    player: Position

    @property
    def shape(self) -> tuple[int, int]:
        """(H, W): rows and columns of the grid."""
        return (int(self.walls.shape[0]), int(self.walls.shape[1]))

    @property
    def is_solved(self) -> bool:
        """True when every box stands on a target."""
        return self.boxes == self.targets

    def region(self) -> np.ndarray:
        """bool (H, W): cells the player could reach if boxes were air (4-connected, walls block)."""
        return player_region(self.walls, self.player)

    def to_xsb(self) -> str:
        """The level in XSB (see `to_xsb`)."""
        return to_xsb(self)

    def to_ragen_grid(self) -> str:
        """The level in RAGEN's symbols (see `to_ragen_grid`)."""
        return to_ragen_grid(self)


def player_region(walls: np.ndarray, player: Position) -> np.ndarray:
    """bool (H, W): the 4-connected non-wall cells reachable from `player` (the grid edge blocks)."""
    h, w = walls.shape
    seen = np.zeros((h, w), dtype=bool)
    stack = [player]
    seen[player] = True
    while stack:
        r, c = stack.pop()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < h and 0 <= nc < w and not seen[nr, nc] and not walls[nr, nc]:
                seen[nr, nc] = True
                stack.append((nr, nc))
    return seen


def _fmt(positions: Iterable[Position]) -> str:
    return ", ".join(f"({r}, {c})" for r, c in sorted(positions))


def validate(level: Level) -> None:
    """Raise ValueError naming the problem and position when `level` breaks a rule of the module docstring."""
    h, w = level.shape
    if h < 1 or w < 1:
        raise ValueError("empty level: the grid has no cells")
    for name, cells in (("target", level.targets), ("box", level.boxes), ("player", (level.player,))):
        for r, c in cells:
            if not (0 <= r < h and 0 <= c < w):
                raise ValueError(f"{name} at ({r}, {c}) is outside the {h}x{w} grid")
            if level.walls[r, c]:
                raise ValueError(f"{name} at ({r}, {c}) is on a wall")
    if level.player in level.boxes:
        raise ValueError(f"the player at {level.player} stands on a box")
    if not level.boxes:
        raise ValueError("the level has no box (it needs boxes == targets >= 1)")
    if len(level.boxes) != len(level.targets):
        raise ValueError(
            f"{len(level.boxes)} boxes but {len(level.targets)} targets (they must be equal); "
            f"boxes at {_fmt(level.boxes)}; targets at {_fmt(level.targets)}"
        )
    region = player_region(level.walls, level.player)
    for r, c in sorted(level.boxes - level.targets):
        if not region[r, c]:
            raise ValueError(
                f"box at ({r}, {c}) is walled off from the player (the level is not closed around it)"
            )
    for r, c in sorted(level.targets - level.boxes):
        if not region[r, c]:
            raise ValueError(f"target at ({r}, {c}) is walled off from the player (no box can reach it)")


def _split_lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    return lines


def parse_xsb(text: str) -> Level:
    """Parse and validate one level in XSB.

    Args:
        text: the level, one grid row per line (blank lines before and after are ignored;
            lines may be ragged: they are padded on the right with floor).

    Returns:
        the validated `Level`.

    Raises:
        ValueError: naming the character or rule and the (row, col) position at fault.
    """
    if not isinstance(text, str):
        raise ValueError(f"an XSB level must be a str, got {type(text).__name__}")
    lines = _split_lines(text)
    if not lines:
        raise ValueError("empty level: the XSB text has no rows")
    h, w = len(lines), max(len(line) for line in lines)
    walls = np.zeros((h, w), dtype=bool)
    targets: set[Position] = set()
    boxes: set[Position] = set()
    players: list[Position] = []
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            if ch == XSB_WALL:
                walls[r, c] = True
            elif ch in XSB_FLOOR:
                pass
            elif ch == XSB_TARGET:
                targets.add((r, c))
            elif ch == XSB_BOX:
                boxes.add((r, c))
            elif ch == XSB_BOX_ON_TARGET:
                boxes.add((r, c))
                targets.add((r, c))
            elif ch == XSB_PLAYER:
                players.append((r, c))
            elif ch == XSB_PLAYER_ON_TARGET:
                players.append((r, c))
                targets.add((r, c))
            else:
                raise ValueError(
                    f"unknown character {ch!r} at ({r}, {c}); XSB uses '#' wall, ' ' or '-' or '_' floor, "
                    "'.' target, '$' box, '*' box on target, '@' player, '+' player on target"
                )
    if not players:
        raise ValueError("the level has no player ('@' or '+'); it needs exactly one")
    if len(players) > 1:
        raise ValueError(f"the level has {len(players)} players, at {_fmt(players)}; it needs exactly one")
    level = Level(walls=walls, targets=frozenset(targets), boxes=frozenset(boxes), player=players[0])
    validate(level)
    return level


def to_xsb(level: Level) -> str:
    """The level in XSB: one line per row, trailing floor stripped, no final newline."""
    h, w = level.shape
    rows = [[XSB_WALL if level.walls[r, c] else XSB_FLOOR[0] for c in range(w)] for r in range(h)]
    for r, c in level.targets:
        rows[r][c] = XSB_TARGET
    for r, c in level.boxes:
        rows[r][c] = XSB_BOX_ON_TARGET if (r, c) in level.targets else XSB_BOX
    pr, pc = level.player
    rows[pr][pc] = XSB_PLAYER_ON_TARGET if level.player in level.targets else XSB_PLAYER
    return "\n".join("".join(row).rstrip() for row in rows)


def to_ragen_grid(level: Level) -> str:
    """The level in RAGEN's symbols, H lines of W characters.

    Floor outside the player's region is shown as wall: the model should not plan through it.
    """
    h, w = level.shape
    shown_wall = level.walls | ~player_region(level.walls, level.player)
    rows = [
        [RAGEN_SYMBOLS["wall"] if shown_wall[r, c] else RAGEN_SYMBOLS["floor"] for c in range(w)]
        for r in range(h)
    ]
    for r, c in level.targets:
        rows[r][c] = RAGEN_SYMBOLS["target"]
    for r, c in level.boxes:
        rows[r][c] = RAGEN_SYMBOLS["box_on_target"] if (r, c) in level.targets else RAGEN_SYMBOLS["box"]
    pr, pc = level.player
    rows[pr][pc] = (
        RAGEN_SYMBOLS["player_on_target"] if level.player in level.targets else RAGEN_SYMBOLS["player"]
    )
    return "\n".join("".join(row) for row in rows)


_RAGEN_TO_XSB = {
    RAGEN_SYMBOLS["wall"]: XSB_WALL,
    RAGEN_SYMBOLS["floor"]: XSB_FLOOR[0],
    RAGEN_SYMBOLS["target"]: XSB_TARGET,
    RAGEN_SYMBOLS["box"]: XSB_BOX,
    RAGEN_SYMBOLS["box_on_target"]: XSB_BOX_ON_TARGET,
    RAGEN_SYMBOLS["player"]: XSB_PLAYER,
    RAGEN_SYMBOLS["player_on_target"]: XSB_PLAYER_ON_TARGET,
}


def parse_ragen_grid(text: str) -> Level:
    """Parse a grid written in RAGEN's symbols (e.g. the `Grid Map:` of an observation) and validate it."""
    if not isinstance(text, str):
        raise ValueError(f"a RAGEN grid must be a str, got {type(text).__name__}")
    out = []
    for r, line in enumerate(_split_lines(text)):
        row = []
        for c, ch in enumerate(line):
            if ch not in _RAGEN_TO_XSB:
                raise ValueError(
                    f"unknown character {ch!r} at ({r}, {c}); RAGEN's symbols are {RAGEN_LEGEND}"
                )
            row.append(_RAGEN_TO_XSB[ch])
        out.append("".join(row))
    return parse_xsb("\n".join(out))
