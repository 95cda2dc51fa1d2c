"""One process at a time in a folder: an exclusive ``flock`` on the folder itself.

`ragen train` holds its run folder's and `ragen eval` its output folder's for as long as they write there. The lock
is the folder's open descriptor: closing it releases it, and so does the end of the process (SIGKILL included), so a
crashed run never leaves a folder that refuses every later one. No file is added to the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FolderLocked", "lock_folder"]


class FolderLocked(Exception):
    """Another process holds the folder's lock (the message names the folder)."""


def lock_folder(folder: Path) -> int | None:
    """Take the exclusive lock of `folder`; returns its descriptor (close it to release the lock), or None where
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
    return fd
