"""One process at a time in a folder: an exclusive ``flock`` on the folder itself.

`ragen train` holds its run folder's and `ragen eval` its output folder's for as long as they write there. The lock
is the folder's open descriptor: closing it releases it, and so does the end of the process (SIGKILL included), so a
crashed run never leaves a folder that refuses every later one. No file is added to the folder.

``flock`` locks belong to the open descriptor, not to the process: a second descriptor of the same folder in the
same process is refused like another process. So the descriptors this process holds are recorded
(:func:`lock_folder`, released by :func:`release_folder`), and :func:`holding_folder` (what the Python
:class:`~ragen_core.training.trainer.Trainer` takes while it writes) takes the lock only where this process does not
hold it already: ``ragen train`` locks its run folder, then runs a Trainer in it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["FolderLocked", "holding_folder", "lock_folder", "release_folder"]

#: The folder locks this process holds: ``(st_dev, st_ino)`` of the folder -> its locked descriptor.
_HELD: dict[tuple[int, int], int] = {}


class FolderLocked(Exception):
    """Another process holds the folder's lock (the message names the folder, or says what to do)."""


def lock_folder(folder: Path) -> int | None:
    """Take the exclusive lock of `folder`; returns its descriptor (:func:`release_folder` releases it; closing it
    does too), or None where
    locks cannot be taken (no ``fcntl``: Windows; a file system without ``flock``, some network ones): no lock there.

    Raises:
        FolderLocked: another process holds it now.
    """
    try:
        import fcntl
    except ImportError:
        return None
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderLocked(str(folder)) from None
    except OSError:  # a file system without flock: unlocked, as before locks were taken
        os.close(fd)
        return None
    _HELD[_identity(os.fstat(fd))] = fd
    return fd


def release_folder(fd: int | None) -> None:
    """Release a lock :func:`lock_folder` returned (closing its descriptor); None (no lock taken) does nothing."""
    if fd is None:
        return
    for key, held in list(_HELD.items()):
        if held == fd:
            del _HELD[key]
    os.close(fd)


@contextmanager
def holding_folder(folder: Path, busy: str = "") -> Iterator[None]:
    """Hold `folder`'s lock for the ``with`` block: taken (:func:`lock_folder`) and released at its end, exceptions
    included, unless this process holds it already (then it stays with its holder: nothing is taken or released).

    Raises:
        FolderLocked: another process holds it now (the message: `busy`, or the folder).
    """
    if _held_here(Path(folder)):
        yield
        return
    try:
        fd = lock_folder(Path(folder))
    except FolderLocked:
        raise FolderLocked(busy or str(folder)) from None
    try:
        yield
    finally:
        release_folder(fd)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _held_here(folder: Path) -> bool:
    """Whether this process holds `folder`'s lock now. A recorded descriptor closed without
    :func:`release_folder` (``os.close``) is forgotten here: it no longer refers to the folder."""
    try:
        key = _identity(os.stat(folder))
    except OSError:
        return False
    fd = _HELD.get(key)
    if fd is None:
        return False
    try:
        if _identity(os.fstat(fd)) == key:
            return True
    except OSError:
        pass
    del _HELD[key]
    return False
