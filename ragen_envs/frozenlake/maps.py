"""FrozenLake maps: Gymnasium's list-of-strings format, seeded random generation, validation.

A map (`desc`) is a list of equal-length strings over the tiles

    S  start (shown as frozen ice in the text observation)
    F  frozen ice
    H  hole
    G  goal

as in `gymnasium.envs.toy_text.frozen_lake`. Random maps follow RAGEN's generator: every tile is
frozen with probability `p` (else a hole), then a start and a distinct goal cell are drawn
uniformly and written over the board; the draw is repeated until a path of non-hole tiles joins
the start to the goal (4-neighbourhood). The accepted maps are therefore distributed as
"RAGEN's board conditioned on being solvable". Unlike Gymnasium's `generate_random_map`, start
and goal are not fixed to the corners; unlike RAGEN's, the draws come only from the generator
passed in (no global state, no `hash()`-derived retry seeds).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from ragen_envs.validation import require_int

TILES = "SFHG"


def validate_desc(desc: Sequence[str] | np.ndarray) -> list[str]:
    """Check a map and return it as a list of strings.

    Accepts Gymnasium's formats: a list of strings, or a 2-D array of 1-character strings/bytes.
    Requirements: rectangular, at least 1x2, only the tiles S F H G, at least one S and one G
    (several S tiles are allowed, as in Gymnasium: the start is drawn uniformly among them).
    A path from start to goal is *not* required for a user map (Gymnasium does not require it).

    Raises:
        ValueError: naming what is wrong.
    """
    if isinstance(desc, str):
        raise ValueError("desc must be a list of strings (one per row), e.g. ['SFFF', 'FHFH', 'FFFH', 'HFFG']")
    rows: list[str] = []
    try:
        for row in desc:
            if isinstance(row, (bytes, np.bytes_)):
                rows.append(bytes(row).decode("ascii"))
            elif isinstance(row, str):
                rows.append(str(row))
            else:  # a row of an array of single characters
                rows.append("".join(c.decode("ascii") if isinstance(c, (bytes, np.bytes_)) else str(c) for c in row))
    except (TypeError, UnicodeDecodeError) as err:
        raise ValueError(f"desc must be a list of strings over {TILES!r}: {err}") from None
    if not rows or not rows[0]:
        raise ValueError("desc must have at least one non-empty row")
    width = len(rows[0])
    if any(len(r) != width for r in rows):
        raise ValueError(f"desc must be rectangular; row lengths are {[len(r) for r in rows]}")
    if len(rows) * width < 2:
        raise ValueError("desc must have at least two cells (a start and a goal)")
    bad = sorted({c for r in rows for c in r} - set(TILES))
    if bad:
        raise ValueError(f"desc may only contain the tiles {TILES!r} (start, frozen, hole, goal); found {bad}")
    text = "".join(rows)
    if "S" not in text:
        raise ValueError("desc needs at least one start tile 'S'")
    if "G" not in text:
        raise ValueError("desc needs at least one goal tile 'G'")
    return rows


def has_path(desc: Sequence[str]) -> bool:
    """True when some start tile reaches some goal tile through non-hole tiles (4-neighbourhood)."""
    nrow, ncol = len(desc), len(desc[0])
    frontier = deque((r, c) for r in range(nrow) for c in range(ncol) if desc[r][c] == "S")
    seen = set(frontier)
    while frontier:
        r, c = frontier.popleft()
        if desc[r][c] == "G":
            return True
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < nrow and 0 <= nc < ncol and (nr, nc) not in seen and desc[nr][nc] != "H":
                seen.add((nr, nc))
                frontier.append((nr, nc))
    return False


def _joined(hole: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> bool:
    """Whether `start` reaches `goal` through cells that are not holes (4-neighbourhood) on the (n, n) bool mask
    `hole`, the start and goal cells counting as ice whatever `hole` says there: `has_path` of the map that
    writes S and G over those cells, without building its strings."""
    nrow, ncol = hole.shape
    seen = {start}
    frontier = [start]
    while frontier:
        r, c = frontier.pop()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if (nr, nc) == goal:
                return True
            if 0 <= nr < nrow and 0 <= nc < ncol and (nr, nc) not in seen and not hole[nr, nc]:
                seen.add((nr, nc))
                frontier.append((nr, nc))
    return False


def check_random_map_args(size: object, p: object) -> tuple[int, float]:
    """(size, p) of a random map as (int, float), else ValueError naming the argument."""
    size = require_int("size", size, 2)
    if isinstance(p, bool) or not (isinstance(p, (int, float, np.integer, np.floating)) and 0.0 < float(p) <= 1.0):
        raise ValueError(f"p (probability of a frozen tile) must be in (0, 1], got {p!r}")
    return size, float(p)


def generate_random_map(
    rng: np.random.Generator | int,
    size: int = 4,
    p: float = 0.9,
    *,
    max_tries: int = 100_000,
) -> list[str]:
    """A random `size` x `size` map with a path from start to goal (RAGEN's distribution).

    Args:
        rng: the generator every draw comes from (an int is a seed for `np.random.default_rng`).
        size: side length, >= 2.
        p: probability that a tile is frozen (0 < p <= 1); holes have probability 1 - p.
        max_tries: rejection-sampling budget. The acceptance rate is ~1 for RAGEN's 4x4, p = 0.9;
            it only gets small for large maps with small p.

    Returns:
        The map as a list of `size` strings over "SFHG" with exactly one S and one G.

    Raises:
        ValueError: bad arguments. RuntimeError: no solvable map within `max_tries` draws.
    """
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        rng = np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}")
    size, p = check_random_map_args(size, p)
    max_tries = require_int("max_tries", max_tries, 1)
    tiles = np.array(["F", "H"])
    for _ in range(max_tries):
        hole = rng.random((size, size)) >= p
        start = tuple(int(x) for x in rng.integers(size, size=2))
        goal = tuple(int(x) for x in rng.integers(size, size=2))
        if start == goal:
            continue
        # The path test runs on the hole mask and the map's strings are built only for the accepted draw: at
        # size 127 with few frozen tiles about 4,000 draws are needed, and building each one's strings made a
        # reset take about 25 s. Same draws and same test (`has_path` of the written map), so the same maps.
        if _joined(hole, start, goal):
            board = tiles[hole.astype(np.int64)]
            board[start] = "S"
            board[goal] = "G"
            return ["".join(row) for row in board]
    raise RuntimeError(f"no solvable {size}x{size} map with p={p} in {max_tries} draws; raise p or max_tries")
