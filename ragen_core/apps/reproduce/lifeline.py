"""A run's lifeline to the study that started it: a run stops when that study's process is gone.

Ctrl-C or SIGTERM to a study stops its runs (:func:`ragen_core.apps.reproduce.runner.stop_running`), but a study
that dies without a word (SIGKILL, the kernel's out-of-memory kill, a crash) sends them nothing. Its runs are not
its children either (a forked run's parent is the warm process, which the runs themselves keep alive), so they
would train on, unwatched, in the study's folder. Instead each run holds the read end of a pipe whose write end only
the study holds (:func:`lifeline`): when the study's process ends, however it ends, the kernel closes its end, the
run reads end-of-file and sends itself Ctrl-C's SIGINT (:func:`stop_when_cut`), so it stops as a stopped study stops
it, at its last checkpoint, and a later ``ragen reproduce`` continues it. A pipe, not the study's process id: an id
can be reused, and a dead process that is not yet reaped still looks alive.

POSIX only (Linux, macOS): on Windows a run has no lifeline, and one whose study was killed trains on to its end
(its folder gets no ``done.json``, so the next study does not count it).
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["SUPPORTED", "lifeline", "stop_when_cut"]

#: Whether runs get a lifeline here: a pipe end can be passed to a child process (not on Windows).
SUPPORTED = os.name == "posix"


def lifeline() -> tuple[int, int]:
    """A new pipe ``(read end, write end)``, neither inherited by child processes unless passed explicitly: the
    study keeps the write end while the run lives and gives the run the read end."""
    return os.pipe()


def stop_when_cut(read: int, signum: int = signal.SIGINT) -> threading.Thread:
    """Watch the lifeline's read end `read` (a file descriptor this process owns) from a daemon thread: once every
    write end is closed (the study's process has ended) send this process `signum` (Ctrl-C's SIGINT: the run stops
    at its last checkpoint). The thread; it ends then, or with the process."""

    def watch() -> None:
        try:
            while os.read(read, 1):  # nothing is ever written: only the end of the file comes
                pass
        except OSError:  # the descriptor was closed or is not a pipe: not a lifeline, nothing to watch
            return
        os.close(read)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=watch, name="ragen-lifeline", daemon=True)
    thread.start()
    return thread
