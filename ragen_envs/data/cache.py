"""What envs build once per process from a file or a seed (search indexes, worlds, catalogues).

    CATALOGS = BuildCache()
    catalog = CATALOGS.get(file_version(path, "products"), lambda: Catalog(load_products(path)))
    index = INDEXES.get_for_file(path, lambda: build_index(path), "corpus")

Keys are plain tuples: a generator's config and seed, or `file_version(path)`, which changes when
the file's content does, so an edited file is read again. `file_version` is the file's identity and
stat times (device, inode, size, mtime and ctime in ns) and, while the file was changed less than
`RACY_SECONDS` ago, a digest of its bytes: file systems stamp times with a coarse clock (a few ms),
so two same-size writes within one tick leave the same stat behind, and only the content can tell
them apart (git's "racily clean" rule). ctime cannot be set back by `touch -r`, `cp -p`, `tar` or
`rsync -t`, which copy an old mtime onto new content.

`get_for_file` also keeps a build out of the cache when the file changed while it was being read
(the build saw a mix of versions, or a version its key does not name). The cache is safe to use from
several threads.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

#: A file changed less than this many seconds ago is keyed by its content too (module docstring).
RACY_SECONDS = 2.0


class BuildCache(Generic[T]):
    """At most `size` built objects by key; when full, the oldest entry is dropped first."""

    def __init__(self, size: int = 4):
        self.size = size
        self._items: dict[Hashable, T] = {}
        # Two threads dropping "the oldest" entry at once would both pop the same key (KeyError).
        self._lock = threading.Lock()

    def _lookup(self, key: Hashable) -> tuple[bool, T | None]:
        with self._lock:
            if key in self._items:
                return True, self._items[key]
            return False, None

    def _store(self, key: Hashable, value: T) -> T:
        """Keep `value` under `key` (the first one stored wins when two threads built it)."""
        with self._lock:
            if key in self._items:
                return self._items[key]
            while len(self._items) >= max(1, self.size):
                self._items.pop(next(iter(self._items)))
            self._items[key] = value
            return value

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The object of `key`, built with `build()` on first use (outside the lock: builds of
        different keys may run at once)."""
        found, value = self._lookup(key)
        if found:
            return value  # type: ignore[return-value]
        return self._store(key, build())

    def get_for_file(
        self, path: str | Path, build: Callable[[], T], what: str = "data", scope: Hashable = None
    ) -> T:
        """The object built from the file `path` by `build()`, cached under `file_version(path, what)`
        (and `scope`, when given: whatever else the build depends on, e.g. the catalogue a goals file is
        read against; it is compared with `==`, so an object without its own `__eq__` counts by identity).

        A build during which the file changed is returned but not kept: it may hold another version
        than the key names, and a later call must not be given it."""
        key = self._file_key(path, what, scope)
        found, value = self._lookup(key)
        if found:
            return value  # type: ignore[return-value]
        value = build()
        if self._file_key(path, what, scope) != key:
            return value
        return self._store(key, value)

    @staticmethod
    def _file_key(path: str | Path, what: str, scope: Hashable) -> Hashable:
        version = file_version(path, what)
        return version if scope is None else (version, scope)

    def get_for_file_or_build(
        self, path: str | Path, build: Callable[[], T], what: str = "data", scope: Hashable = None
    ) -> T:
        """`get_for_file`, except that a file whose version cannot be taken (missing, a directory, unreadable)
        goes to `build()` uncached, so that the loader reports the problem in its own words.

        The data-set envs load their files through this: each env instance used to read and validate the
        whole file again (a 100,000-record file: 2-3 s and a copy of the records per env)."""
        try:
            file_version(path, what)
        except ValueError:
            return build()
        return self.get_for_file(path, build, what, scope)


def file_digest(path: str | Path) -> str:
    """The SHA-256 of the file's bytes, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_version(path: str | Path, what: str = "data") -> tuple[str, int, int, int, int, int, str | None]:
    """(resolved path, device, inode, size, mtime ns, ctime ns, digest or None) of a file: equal for
    two calls only when the content is (module docstring); the first element is the resolved path.

    Raises:
        ValueError: "<path>: <what> file not found", or the path is not a readable file (a directory,
            a symlink loop, no permission), naming the path.
    """
    try:
        resolved = Path(path).resolve()
        st = resolved.stat()
    except FileNotFoundError:
        raise ValueError(f"{path}: {what} file not found") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise ValueError(f"{path}: cannot read the {what} file ({exc})") from None
    if not resolved.is_file():
        raise ValueError(f"{path}: the {what} file is not a regular file")
    changed = max(st.st_mtime_ns, st.st_ctime_ns) / 1e9
    digest = None
    if time.time() - changed < RACY_SECONDS:
        try:
            digest = file_digest(resolved)
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the {what} file ({exc})") from None
    return str(resolved), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest


__all__ = ["RACY_SECONDS", "BuildCache", "file_digest", "file_version"]
