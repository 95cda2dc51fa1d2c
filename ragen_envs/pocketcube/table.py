"""The exact optimal distance of every pocket-cube state: a BFS table, built once and cached on disk.

`distance_table()` returns an int8 array of 3,674,160 entries, `table[index]` = the fewest face turns (half-turn
metric: a quarter or a half turn of one face counts 1) that solve the state of that index
(`ragen_envs.pocketcube.cube.encode`; any orientation of the whole cube counts as solved).

Build: a level-by-level breadth-first search from the solved state over the corner coordinates with the 9 moves
U, U', U2, R, R', R2, F, F', F2 (the DBL corner fixed, which quotients out whole-cube rotations; see `cube`),
vectorised in numpy: a level's frontier is an index array, its successors are two table gathers per move. The
result is checked before it is used or stored: its distance histogram must equal the known one (God's number
11; `KNOWN_HISTOGRAM`) and `check_distances` proves it is the exact distance (below).

Cache: `<root>/pocketcube/distances-v1.npy` (3,674,160 bytes) and a JSON with its SHA-256, histogram and build
time, where `<root>` is the `cache_dir` argument, else `$RAGEN2_CACHE`, else `~/.cache/ragen2` (the tiny model's
cache). Written to a temporary file and renamed (readers never see half a table), under a file lock (concurrent
processes build it once); read back memory-mapped, so processes share one copy in the page cache. A file whose
hash or histogram is wrong is rebuilt; a cache folder that cannot be written leaves the table in memory only.
The folder `<root>/pocketcube` is created when missing, parents included (as any cache root: the default one
usually does not exist yet), so a `cache_dir` that names no existing folder becomes one on first use.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from ragen_envs.pocketcube.cube import N_STATES, N_TWIST, corner_move_tables

#: Number of states at distance 0, 1, ..., 11 in the half-turn metric (God's number of the 2x2x2: 11).
KNOWN_HISTOGRAM: tuple[int, ...] = (1, 9, 54, 321, 1847, 9992, 50136, 227536, 870072, 1887748, 623800, 2644)
GODS_NUMBER = len(KNOWN_HISTOGRAM) - 1
#: Bump when the index layout or the build changes: part of the file name, so stale tables are never read.
TABLE_FORMAT = 1

_LOADED: dict[str, np.ndarray] = {}


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder of the table files: `<cache_dir or $RAGEN2_CACHE or ~/.cache/ragen2>/pocketcube`."""
    root = Path(cache_dir or os.environ.get("RAGEN2_CACHE") or Path.home() / ".cache" / "ragen2")
    return root / "pocketcube"


def table_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the cached table (`.npy`; its metadata is the `.json` beside it)."""
    return cache_root(cache_dir) / f"distances-v{TABLE_FORMAT}.npy"


def build_distance_table() -> np.ndarray:
    """BFS over the 3,674,160 states: int8 [N_STATES] distances (module docstring). About 1-3 s on one core."""
    perm_moves, twist_moves = (np.ascontiguousarray(t.T.astype(np.int64)) for t in corner_move_tables())
    perm_moves *= N_TWIST  # row m: the perm part of the successor's index under move m
    dist = np.full(N_STATES, -1, np.int8)
    dist[0] = 0
    frontier = np.array([0], np.int64)
    depth = 0
    while frontier.size:
        perm, twist = np.divmod(frontier, N_TWIST)
        found = []
        for m in range(len(perm_moves)):
            nxt = perm_moves[m].take(perm) + twist_moves[m].take(twist)
            nxt = nxt[dist.take(nxt) < 0]
            # Marks them seen, so later moves of this level skip them; a move is a bijection, so `nxt`
            # has no repeats and the concatenated frontier none either.
            dist[nxt] = depth + 1
            found.append(nxt)
        frontier = np.concatenate(found)
        depth += 1
    return dist


def histogram(dist: np.ndarray) -> list[int]:
    """Number of states at each distance 0..max (an unreached state, -1, makes it fail `check_distances`)."""
    return np.bincount(np.asarray(dist, np.int64) + 1)[1:].tolist() if (np.asarray(dist) >= 0).all() else [-1]


def check_distances(dist: np.ndarray) -> None:
    """Raise ValueError unless `dist` is the exact distance table.

    Checks: the histogram is `KNOWN_HISTOGRAM`; only the solved state (index 0) has distance 0; along every
    one of the 9 moves the distance changes by at most 1 (so dist(s) <= the true distance); and every other
    state has a neighbour one closer (a path of dist(s) moves to the only 0, so dist(s) >= it): together,
    dist(s) is exactly the length of a shortest solution. Reads the table 10 times (about a second).
    """
    dist = np.asarray(dist)
    if dist.shape != (N_STATES,) or dist.dtype != np.int8:
        raise ValueError(f"distance table must be int8 of shape ({N_STATES},); got {dist.dtype} {dist.shape}")
    hist = histogram(dist)
    if hist != list(KNOWN_HISTOGRAM):
        raise ValueError(f"distance histogram {hist} differs from the known {list(KNOWN_HISTOGRAM)}")
    if dist[0] != 0:
        raise ValueError("the solved state (index 0) must have distance 0")
    perm_moves, twist_moves = (np.ascontiguousarray(t.T.astype(np.int64)) for t in corner_move_tables())
    perm, twist = np.divmod(np.arange(N_STATES, dtype=np.int64), N_TWIST)
    d = dist.astype(np.int16)
    has_lower = d == 0
    for m in range(len(perm_moves)):
        nb = d.take(perm_moves[m].take(perm) * N_TWIST + twist_moves[m].take(twist))
        if (np.abs(nb - d) > 1).any():
            raise ValueError(f"move {m} changes some distance by more than 1")
        has_lower |= nb == d - 1
    if not has_lower.all():
        raise ValueError(f"{int((~has_lower).sum())} states have no neighbour one move closer to solved")


def _sha256(dist: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(dist).tobytes()).hexdigest()


def _read(path: Path) -> np.ndarray | None:
    """The cached table if its file, hash and histogram are right, else None."""
    meta_path = path.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text())
        dist = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if dist.shape != (N_STATES,) or dist.dtype != np.int8 or meta.get("sha256") != _sha256(dist):
        return None
    if histogram(dist) != list(KNOWN_HISTOGRAM):
        return None
    return dist


def _write(path: Path, dist: np.ndarray, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, dist)
    meta = {
        "format": TABLE_FORMAT,
        "states": N_STATES,
        "sha256": _sha256(dist),
        "histogram": histogram(dist),
        "build_seconds": round(seconds, 3),
        "bytes": int(tmp.stat().st_size),
    }
    meta_tmp = tmp.with_suffix(".json.tmp")
    meta_tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(meta_tmp, path.with_suffix(".json"))  # the metadata first: a table is only read with its hash
    os.replace(tmp, path)


class _FileLock:
    """An exclusive advisory lock (fcntl; a no-op where fcntl does not exist or the folder is not writable)."""

    def __init__(self, path: Path):
        self.path, self.handle = path, None

    def __enter__(self) -> _FileLock:
        try:
            import fcntl

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, "a+")
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        except (ImportError, OSError):
            self.handle = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            import fcntl

            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()


def distance_table(cache_dir: str | os.PathLike | None = None, *, rebuild: bool = False) -> np.ndarray:
    """The distance table, from this process's memory, else the disk cache, else built (and cached).

    Args:
        cache_dir: root of the cache (default `$RAGEN2_CACHE` or `~/.cache/ragen2`); the files go in its
            `pocketcube/` folder.
        rebuild: build and store it again even when a valid cached copy exists.
    Returns:
        int8 [3,674,160], read-only.
    """
    path = table_path(cache_dir)
    key = str(path.resolve())
    if not rebuild and key in _LOADED:
        return _LOADED[key]
    with _FileLock(path.with_suffix(".lock")):
        dist = None if rebuild else _read(path)
        if dist is None:
            start = time.perf_counter()
            dist = build_distance_table()
            seconds = time.perf_counter() - start
            check_distances(dist)
            try:
                _write(path, dist, seconds)
            except OSError:
                pass  # a read-only cache: keep the table in memory only
            dist.setflags(write=False)
    _LOADED[key] = dist
    return dist


def table_metadata(cache_dir: str | os.PathLike | None = None) -> dict:
    """The cached table's metadata (sha256, histogram, build_seconds, bytes); {} when there is none."""
    try:
        return json.loads(table_path(cache_dir).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}
