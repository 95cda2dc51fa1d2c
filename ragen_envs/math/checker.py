"""Answer checks with a hard time limit, in any thread: a worker process that can be killed.

`ragen_envs.math.answer.check_answer` parses model text with math-verify and sympy. Its cost guards
(`answer_guard`) refuse the known ways to stall a parser, but they are heuristics, and math-verify's
own timeout uses `signal.alarm`, which only works in the main thread (in a thread pool or a vector
env's worker thread it is off). So the env never calls the checker directly: `check_answer_bounded`
sends the (candidate, gold) pair to a long-lived worker process and lets it spend at most `timeout`
seconds of CPU time on the answer (read from /proc; where there is no /proc, wall time). CPU time, not
wall time, so that a check's outcome does not depend on how busy the machine is: on a loaded machine a
check that needs 1 s of CPU can take 6 s of wall time, and a wall-clock limit would turn a correct
answer into a timeout penalty (seen with 6 processes on 2 cores). A wall-clock backstop of
`_WALL_FACTOR x timeout + _WALL_SLACK_S` still ends a worker that waits without computing. If the
limit passes, the worker is killed (SIGKILL: no signal handler of the checked code is involved) and
the next check starts a fresh one; the caller gets `CheckResult(None, "timeout")` and applies its
penalty.

    caller thread ──json line──▶ worker process (python, imports sympy + math-verify once)
                 ◀──json line──  check_answer(candidate, gold) in its main thread

One worker per process (created lazily, or ahead of time by `start_worker()`; a forked child, e.g. an
async vector env's worker, starts its own), shared by all threads under a lock, so checks are
serialised. Its start-up (importing sympy, about a second) is not counted in `timeout`. It exits when
its stdin closes, i.e. with the process that started it.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

__all__ = ["CHECK_TIMEOUT_S", "CheckResult", "check_answer_bounded", "start_worker"]

#: Default hard limit on one answer check, in seconds of the worker's CPU time.
CHECK_TIMEOUT_S = 4.0
#: Wall-clock backstop of one check: _WALL_FACTOR x timeout + _WALL_SLACK_S seconds.
_WALL_FACTOR = 10.0
_WALL_SLACK_S = 10.0
#: How often the worker's CPU time is read while waiting.
_POLL_S = 0.05
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: How long the worker may take to start (import sympy and math-verify) before it is an error.
_STARTUP_TIMEOUT_S = 120.0
_READY = "ready"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_WORKER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from ragen_envs.math.checker import _serve; _serve()"
)


class CheckResult(NamedTuple):
    """The outcome of one bounded check.

    Attributes:
        rule: which equivalence rule accepted the answer (as `check_answer`), None when it is wrong.
        error: None when the check ran to completion; "refused: <why>" for an answer the cost guards
            refuse (it is simply wrong); "timeout" when the hard limit passed; "checker failed: <why>"
            when the worker died.
    """

    rule: str | None
    error: str | None


class _Worker:
    def __init__(self) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _WORKER_CODE, _PACKAGE_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
        )
        self.buffer = b""
        self.ready = False

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the worker so far (Linux /proc), or None where it cannot be read."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                data = f.read()
            fields = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) ": state is fields[0]
            return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15 of stat)
        except (OSError, ValueError, IndexError):
            return None

    def read_line(self, deadline: float, cpu_limit: float | None = None) -> str | None:
        """One line from the worker, or None when the wall `deadline` passes first or the worker has spent
        more than `cpu_limit` seconds of CPU time since this call."""
        cpu_start = self.cpu_seconds() if cpu_limit is not None else None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(min(left, _POLL_S) if cpu_start is not None else left):
                    if cpu_start is not None:
                        used = self.cpu_seconds()
                        if used is not None and used - cpu_start > cpu_limit:
                            return None
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError("the checker process exited")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace")

    def kill(self) -> None:
        if self.owner != os.getpid():
            return  # a forked child must not kill its parent's worker
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


_lock = threading.Lock()
_worker: _Worker | None = None


def _get_worker() -> _Worker:
    global _worker
    if _worker is None or not _worker.alive():
        if _worker is not None:
            _worker.kill()
        _worker = _Worker()
    return _worker


def start_worker() -> None:
    """Start the worker process now (without waiting), so the first check does not pay its start-up."""
    with _lock:
        _get_worker()


@atexit.register
def _stop_worker() -> None:
    if _worker is not None:
        _worker.kill()


def check_answer_bounded(candidate: str, gold: str, timeout: float = CHECK_TIMEOUT_S) -> CheckResult:
    """`check_answer(candidate, gold)` bounded by `timeout` seconds of the worker's CPU time (module docstring).

    Never raises for any candidate text; raises RuntimeError only when the worker cannot start at all.
    """
    from ragen_envs.math.answer import answer_guard

    if not isinstance(candidate, str) or not isinstance(gold, str):
        return CheckResult(None, "refused: not a string")
    reason = answer_guard(candidate)
    if reason is not None:
        return CheckResult(None, f"refused: {reason}")
    request = (json.dumps({"candidate": candidate, "gold": gold}) + "\n").encode()
    global _worker
    with _lock:
        worker = _get_worker()
        try:
            if not worker.ready:
                line = worker.read_line(time.monotonic() + _STARTUP_TIMEOUT_S)
                if line != _READY:
                    worker.kill()
                    _worker = None
                    raise RuntimeError(f"the math answer checker process did not start ({line!r})")
                worker.ready = True
            worker.proc.stdin.write(request)
            worker.proc.stdin.flush()
            if worker.cpu_seconds() is None:  # no /proc: wall time is the limit
                line = worker.read_line(time.monotonic() + timeout)
            else:
                line = worker.read_line(time.monotonic() + _WALL_FACTOR * timeout + _WALL_SLACK_S, cpu_limit=timeout)
        except (OSError, EOFError, ValueError) as exc:
            worker.kill()
            _worker = None
            return CheckResult(None, f"checker failed: {exc}")
        if line is None:
            worker.kill()
            _worker = None
            return CheckResult(None, "timeout")
    try:
        reply = json.loads(line)
        return CheckResult(reply.get("rule"), reply.get("error"))
    except (ValueError, AttributeError) as exc:
        return CheckResult(None, f"checker failed: {exc}")


def _serve() -> None:
    """The worker's loop: one JSON request per line on stdin, one JSON reply per line on stdout."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything the libraries print goes to stderr (discarded), not into the protocol
    from ragen_envs.math.answer import check_answer

    check_answer("1", "1")  # warm the imports and caches before saying ready
    out.write(_READY + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply = {"rule": check_answer(request["candidate"], request["gold"]), "error": None}
        except Exception as exc:  # the reply must always come: the caller is waiting on it
            reply = {"rule": None, "error": f"checker failed: {type(exc).__name__}: {exc}"[:300]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
