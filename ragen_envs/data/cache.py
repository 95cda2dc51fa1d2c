"""What envs build once per process from a file or a seed (search indexes, worlds, catalogues).

    CATALOGS = BuildCache()
    catalog = CATALOGS.get(file_version(path, "products"), lambda: Catalog(load_products(path)))

Keys are plain tuples: a generator's config and seed, or `file_version(path)`, which changes when
the file does, so an edited file is read again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class BuildCache(Generic[T]):
    """At most `size` built objects by key; when full, the oldest entry is dropped first."""

    def __init__(self, size: int = 4):
        self.size = size
        self._items: dict[Hashable, T] = {}

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The object of `key`, built with `build()` on first use."""
        if key not in self._items:
            if len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = build()
        return self._items[key]


def file_version(path: str | Path, what: str = "data") -> tuple[str, int, int]:
    """(resolved path, size, mtime in ns) of a file; ValueError "<path>: <what> file not found"."""
    resolved = Path(path).resolve()
    try:
        st = resolved.stat()
    except OSError:
        raise ValueError(f"{path}: {what} file not found") from None
    return str(resolved), st.st_size, st.st_mtime_ns
