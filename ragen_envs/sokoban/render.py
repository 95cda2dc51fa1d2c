"""Sokoban pictures: 16x16 sprites drawn once in memory, tiled with one gather.

Tile ids (as gym-sokoban's room codes, plus player-on-target):

    0 wall   1 floor   2 target   3 box on target   4 box   5 player   6 player on target

`render_tiles(ids)` maps an int (H, W) array of tile ids to a uint8 image (16 H, 16 W, 3).
No image file is read: the sprites are a few rectangles and discs drawn with NumPy.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

TILE = 16
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)
NUM_TILES = 7

_FLOOR_RGB = (40, 40, 44)
_TARGET_RGB = (220, 60, 60)
_BOX_RGB = (196, 140, 64)
_BOX_EDGE_RGB = (120, 78, 28)
_BOX_ON_TARGET_RGB = (90, 190, 90)
_PLAYER_RGB = (70, 150, 235)


def _disc(cy: float, cx: float, radius: float) -> np.ndarray:
    yy, xx = np.mgrid[0:TILE, 0:TILE]
    return (yy + 0.5 - cy) ** 2 + (xx + 0.5 - cx) ** 2 <= radius**2


def _floor() -> np.ndarray:
    tile = np.empty((TILE, TILE, 3), dtype=np.uint8)
    tile[:] = _FLOOR_RGB
    return tile


def _with_target(tile: np.ndarray) -> np.ndarray:
    ring = _disc(8, 8, 5.5) & ~_disc(8, 8, 3.5)
    tile = tile.copy()
    tile[ring] = _TARGET_RGB
    return tile


def _wall() -> np.ndarray:
    tile = np.empty((TILE, TILE, 3), dtype=np.uint8)
    tile[:] = (150, 72, 52)
    mortar = (95, 95, 95)
    tile[[0, 7, 8, 15], :] = mortar  # brick rows of 6 px with 2 px mortar
    tile[1:7, [3, 11]] = mortar
    tile[9:15, [7, 15]] = mortar
    return tile


def _box(fill: tuple[int, int, int]) -> np.ndarray:
    tile = _floor()
    tile[1:15, 1:15] = _BOX_EDGE_RGB
    tile[3:13, 3:13] = fill
    idx = np.arange(3, 13)
    tile[idx, idx] = _BOX_EDGE_RGB  # a cross brace, so boxes read as crates at 16 px
    tile[idx, 15 - idx] = _BOX_EDGE_RGB
    return tile


def _player(background: np.ndarray) -> np.ndarray:
    tile = background.copy()
    tile[_disc(4.5, 8, 3)] = (250, 210, 170)  # head
    body = np.zeros((TILE, TILE), dtype=bool)
    body[8:14, 4:12] = True
    tile[body] = _PLAYER_RGB
    tile[14:16, 5:7] = (30, 30, 90)  # feet
    tile[14:16, 9:11] = (30, 30, 90)
    return tile


@lru_cache(maxsize=1)
def sprites() -> np.ndarray:
    """uint8 (NUM_TILES, 16, 16, 3), indexed by tile id; built once per process, read-only."""
    floor = _floor()
    target = _with_target(floor)
    out = np.stack(
        [
            _wall(),
            floor,
            target,
            _box(_BOX_ON_TARGET_RGB),
            _box(_BOX_RGB),
            _player(floor),
            _player(target),
        ]
    )
    out.setflags(write=False)
    return out


def render_tiles(tile_ids: np.ndarray) -> np.ndarray:
    """uint8 (16 H, 16 W, 3) picture of an int (H, W) array of tile ids."""
    ids = np.asarray(tile_ids)
    if ids.ndim != 2:
        raise ValueError(f"tile_ids must be a 2-D array, got shape {ids.shape}")
    # NumPy would read -1 as the last sprite (player on target) instead of refusing it.
    if ids.dtype.kind not in "iu" or (ids.size and (int(ids.min()) < 0 or int(ids.max()) >= NUM_TILES)):
        low, high = (ids.min(), ids.max()) if ids.size else (None, None)
        raise ValueError(f"tile_ids must hold integer tile ids 0-{NUM_TILES - 1}, got dtype {ids.dtype} with values "
                         f"{low} to {high}")
    h, w = ids.shape
    blocks = sprites()[ids]  # (H, W, 16, 16, 3)
    return np.ascontiguousarray(blocks.transpose(0, 2, 1, 3, 4)).reshape(h * TILE, w * TILE, 3)


def level_tiles(level, frame: tuple[int, int] | None = None) -> np.ndarray:
    """int8 (H, W) tile ids of a `Level`, placed top-left in a wall-filled `frame` (default: its own shape).

    Floor outside the player's region is drawn as wall, as in the text grid.
    """
    h, w = level.shape
    fh, fw = frame if frame is not None else (h, w)
    if fh < h or fw < w:
        raise ValueError(f"a {h}x{w} level does not fit a {fh}x{fw} frame")
    ids = np.full((fh, fw), WALL, dtype=np.int8)
    inner = np.where(level.walls | ~level.region(), WALL, FLOOR).astype(np.int8)
    for r, c in level.targets:
        inner[r, c] = TARGET
    for r, c in level.boxes:
        inner[r, c] = BOX_ON_TARGET if (r, c) in level.targets else BOX
    inner[level.player] = PLAYER_ON_TARGET if level.player in level.targets else PLAYER
    ids[:h, :w] = inner
    return ids


def render_level(level, frame: tuple[int, int] | None = None) -> np.ndarray:
    """uint8 (16 H, 16 W, 3) picture of a `Level` (see `level_tiles` for `frame`)."""
    return render_tiles(level_tiles(level, frame))
