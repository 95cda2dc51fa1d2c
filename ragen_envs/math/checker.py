"""Answer checks with a hard limit on CPU time, in any thread: a worker process that can be killed.

`ragen_envs.math.answer.check_answer` parses model text with math-verify and sympy. Its cost guards
(`answer_guard`, and the answer grammar's token bound) refuse the known ways to stall a parser, but they are
heuristics, and an in-process timeout cannot stop sympy inside one long C call (`\\binom{10^{60}}{10^{30}}`
ignores Python signal handlers for minutes). So the env never calls the checker directly:
`check_answer_bounded` sends the (candidate, gold) pair to a long-lived worker process and lets it spend at
most `timeout` seconds of CPU time on the answer.

The verdict must not depend on how busy the machine is, so every limit is on CPU time, never wall time:

- the worker switches off math-verify's own `signal.alarm` timeouts (`answer.set_signal_timeouts(False)`):
  they count wall seconds, and on a loaded machine they cut a check (0.0, no error) that an idle machine
  cut at the CPU limit instead (-0.1, "timeout");
- the worker reports the CPU time each check took (`time.process_time`), and a check that took more than
  `timeout` is a timeout even when its reply came (the caller may have been too busy to look earlier);
- while waiting, the caller reads the worker's CPU time from /proc and kills it (SIGKILL: no handler of the
  checked code is involved) once it passes `timeout`;
- the kernel backs this up: before each check the worker sets its RLIMIT_CPU to a little more than
  `timeout` seconds beyond what it has used, so it is stopped even when the caller is starved of CPU.

A worker that is not computing (stopped, or starved by a busy machine) is waited for: only a generous
wall-clock backstop (`_WALL_FACTOR x timeout + _WALL_SLACK_S`) ends a worker that makes no progress at all,
and it is reported as a checker failure, not as the answer's timeout. After a kill the next check starts a
fresh worker; the caller gets `CheckResult(None, "timeout")` and applies its penalty.

    caller thread ──json line──▶ worker process (python, imports sympy + math-verify once)
                 ◀──json line──  check_answer(candidate, gold) in its main thread, and its CPU seconds

One worker per process, shared by every env and thread of the process under a lock (checks are
serialised): 128 envs (a validation batch, a vector env, the trainer's pool) start one worker, not 128. It is
started lazily, or ahead of time by `start_worker()` / a `WorkerLease`, which each `MathEnv` holds from its
construction (and takes again at a reset after `close()`), so that the first answer does not wait for it.
When the last lease is released (every env closed or garbage-collected) the worker is stopped once it has
been idle `_IDLE_STOP_S` seconds (2; a daemon thread looks twice a second), so that closing an env and
making the next does not start a worker for each; a later env or check starts a fresh one. A check made
without an env (`check_answer_bounded` called directly) keeps it until envs come and go again. It is also
stopped at interpreter exit, and it exits by itself when its stdin closes (the process that started it
died). Its start-up (importing sympy and math-verify and warming their caches, about a second of CPU) is
not counted in `timeout`; it is bounded by `_STARTUP_CPU_S` seconds of the worker's CPU time.

Restarts and forks:

- a worker that died outside a check (killed by a user or the OOM killer) is replaced: a check that finds it
  dead (its request cannot be written, or no reply comes and it did not die of its CPU limit) is asked again,
  once, of a fresh worker, so the verdict is the answer's own; only a second failure is "checker failed";
- a forked child (an async vector env's worker, a data loader) never talks to its parent's worker: at the
  fork the child drops the parent's worker, points its copies of the pipe ends at /dev/null (so it neither
  writes into the parent's protocol nor keeps the parent's worker alive after the parent is gone) and gets a
  fresh lock (a lock held by another thread of the parent at the fork would never be released in the child),
  and its first check starts its own worker.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import NamedTuple

__all__ = ["CHECK_TIMEOUT_S", "CheckResult", "WorkerLease", "check_answer_bounded", "start_worker"]

#: Default hard limit on one answer check, in seconds of the worker's CPU time.
CHECK_TIMEOUT_S = 4.0
#: Wall-clock backstop of one check, for a worker that makes no progress at all (stopped or hung):
#: _WALL_FACTOR x timeout + _WALL_SLACK_S seconds. Generous, so that a busy machine never reaches it.
_WALL_FACTOR = 30.0
_WALL_SLACK_S = 60.0
#: How often the worker's CPU time is read while waiting.
_POLL_S = 0.05
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: CPU seconds the worker may spend starting (imports and warm-up take about one) before it is an error,
#: and the wall-clock backstop of its start.
_STARTUP_CPU_S = 60.0
_STARTUP_WALL_S = 900.0
#: Slack of the kernel's CPU limit over `timeout` (RLIMIT_CPU counts whole seconds; the caller's own
#: limit is the precise one).
_RLIMIT_SLACK_S = 1
_READY = "ready"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# The worker's interpreter: isolated mode (`-I`, i.e. `-E -P -s`) minus `-E`, which would also ignore PYTHONHASHSEED
# and so hash str with a fresh random key in every worker: sympy iterates sets and dicts keyed by hashes, and a
# verdict must be a function of the answer alone. `-E` is replaced by dropping every PYTHON* variable of the
# caller's environment (`_worker_env`); PYTHONSAFEPATH is `-P` (Python >= 3.11: on older ones `-c` puts "" first
# on sys.path, which `_WORKER_CODE` removes).
_WORKER_FLAGS = ("-s",)
_WORKER_PYTHON_ENV = {"PYTHONHASHSEED": "0", "PYTHONSAFEPATH": "1"}
_WORKER_CODE = (
    "import sys; sys.path[:] = [p for p in sys.path if p]; sys.path.insert(0, sys.argv[1]); "
    "from ragen_envs.math.checker import _serve; _serve()"
)


def _worker_env() -> dict[str, str]:
    """The caller's environment without its PYTHON* variables (what `-E` ignored), plus `_WORKER_PYTHON_ENV`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(_WORKER_PYTHON_ENV)
    return env


class CheckResult(NamedTuple):
    """The outcome of one bounded check.

    Attributes:
        rule: which equivalence rule accepted the answer (as `check_answer`), None when it is wrong.
        error: None when the check ran to completion; "refused: <why>" for an answer the cost guards
            refuse (it is simply wrong); "timeout" when the check needed more than its CPU limit;
            "checker failed: <why>" when the worker died or made no progress at all.
    """

    rule: str | None
    error: str | None


class _CpuLimit(Exception):
    """The worker spent more CPU time on a request than it was allowed."""


class _NoProgress(Exception):
    """The wall-clock backstop passed: the worker made no progress at all."""


class _Worker:
    def __init__(self) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, *_WORKER_FLAGS, "-c", _WORKER_CODE, _PACKAGE_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_worker_env(),
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

    def read_line(self, cpu_limit: float, wall_limit: float) -> str:
        """One line from the worker.

        Raises:
            _CpuLimit: the worker spent more than `cpu_limit` seconds of CPU time since this call (read from
                /proc; where it cannot be read, the worker's RLIMIT_CPU ends it instead).
            _NoProgress: `wall_limit` seconds passed first.
            EOFError: the worker exited.
        """
        deadline = time.monotonic() + wall_limit
        cpu_start = self.cpu_seconds()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _NoProgress
                if not sel.select(min(left, _POLL_S)):
                    used = self.cpu_seconds()
                    over = cpu_start is not None and used is not None and used - cpu_start > cpu_limit
                    if over and not sel.select(0):  # a reply that came meanwhile decides by its own CPU time
                        raise _CpuLimit
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError("the checker process exited")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace")

    def died_of_cpu_limit(self) -> bool:
        """Whether the worker was ended by its RLIMIT_CPU (SIGXCPU)."""
        try:
            code = self.proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            return False
        return hasattr(signal, "SIGXCPU") and code == -signal.SIGXCPU

    def detach(self) -> None:
        """In a forked child: point the child's copies of the pipe ends at /dev/null, without closing the file
        objects (another thread of the parent may have held their locks at the fork). The parent's worker
        then sees its stdin close when the parent is gone, and nothing the child does reaches it."""
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
        except OSError:
            return
        try:
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    os.dup2(devnull, f.fileno())
                except (OSError, ValueError, AttributeError):  # ValueError: already closed
                    pass
        finally:
            os.close(devnull)

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
#: Tokens of the `WorkerLease`s held now (a set: adding and discarding are atomic, so a lease released by the
#: garbage collector, which may run inside a check holding `_lock`, takes no lock).
_leases: set[int] = set()
_lease_tokens = itertools.count()
#: The last lease was released while a check held `_lock`: the worker is stopped when that check ends.
_stop_pending = False
#: Seconds the worker is kept after the last lease is released, so that a process that closes an env and makes
#: the next one (a test suite, a make/check/close loop) does not start a worker for each (about a second of
#: CPU each); 0 stops it at the release.
_IDLE_STOP_S = 2.0
#: When the last lease was released (time.monotonic()), None while a lease is held or the worker was stopped.
_idle_since: float | None = None
#: The thread that stops an idle worker (`_reap_if_idle` every `_REAP_POLL_S`), started with the first lease.
_reaper: threading.Thread | None = None
_REAP_POLL_S = 0.5
#: Workers of a parent process, inherited by this forked child: detached, never used, never closed here.
_inherited: list[_Worker] = []


def _get_worker() -> _Worker:
    global _worker
    if _worker is None or not _worker.alive():
        if _worker is not None:
            _worker.kill()
        _worker = _Worker()
    return _worker


def _discard_worker(worker: _Worker) -> None:
    global _worker
    worker.kill()
    if _worker is worker:
        _worker = None


def start_worker() -> None:
    """Start the worker process now (without waiting), so the first check does not pay its start-up."""
    with _lock:
        _get_worker()


def _stop_if_unused(now: float | None = None) -> None:
    """Stop the worker when no lease holds it: at once (`now` None; a check running then stops it when it ends),
    or, for the reaper, when it has been idle `_IDLE_STOP_S` seconds at `now` (a check running: a later pass)."""
    global _stop_pending, _idle_since
    if _leases:
        return
    if not _lock.acquire(blocking=False):
        if now is None:
            _stop_pending = True
        return
    try:
        if _leases:
            return
        if now is not None and (_idle_since is None or now - _idle_since < _IDLE_STOP_S):
            return  # taken again, or used by a check without an env, since the reaper looked
        _stop_pending = False
        _idle_since = None
        if _worker is not None:
            _discard_worker(_worker)
    finally:
        _lock.release()


def _release(token: int) -> None:
    """The end of a lease (also run by the garbage collector, so it takes no lock and starts no thread)."""
    global _idle_since
    _leases.discard(token)
    if _leases:
        return
    if _IDLE_STOP_S <= 0:
        _stop_if_unused()
    else:
        _idle_since = time.monotonic()  # `_reaper` stops the worker once it has been idle `_IDLE_STOP_S`


def _reap_if_idle(now: float) -> None:
    """Stop the worker if no lease has held it, and no check without an env has used it, since
    `now - _IDLE_STOP_S`."""
    since = _idle_since
    if since is not None and not _leases and now - since >= _IDLE_STOP_S:
        _stop_if_unused(now)


def _reap_forever() -> None:
    while True:
        time.sleep(_REAP_POLL_S)
        _reap_if_idle(time.monotonic())


def _start_reaper() -> None:
    global _reaper
    if _reaper is None or not _reaper.is_alive():  # not alive: none yet, or this is a forked child
        _reaper = threading.Thread(target=_reap_forever, name="math-checker-reaper", daemon=True)
        _reaper.start()


class WorkerLease:
    """A claim on the shared worker: it runs while some lease is held (`MathEnv` holds one per env).

    Taking a lease starts the worker (without waiting for it); the last lease released (`release()`, or the
    lease garbage-collected with its env) stops it. Checks do not need a lease: `check_answer_bounded` starts
    the worker itself, and a worker no lease ever held runs until the interpreter exits. A lease pickles (and
    copies) as a fresh lease.
    """

    def __init__(self) -> None:
        self._token: int | None = None
        self._finalizer: weakref.finalize | None = None
        self.acquire()

    @property
    def held(self) -> bool:
        return self._token is not None

    def acquire(self) -> None:
        """Hold the worker (again, after `release()`) and start it if it is not running."""
        global _stop_pending, _idle_since
        if self._token is None:
            token = next(_lease_tokens)
            _leases.add(token)
            self._token = token
            self._finalizer = weakref.finalize(self, _release, token)
            self._finalizer.atexit = False  # `_stop_worker` ends the worker at exit
        _stop_pending = False
        _idle_since = None
        _start_reaper()
        worker = _worker
        if worker is None or not worker.alive():  # else running: no need to wait for a check to take the lock
            start_worker()

    def release(self) -> None:
        """Give the worker up (idempotent); the last lease released stops it."""
        finalizer, self._token, self._finalizer = self._finalizer, None, None
        if finalizer is not None:
            finalizer()  # runs `_release(token)` once

    def __reduce__(self) -> tuple:
        return (WorkerLease, ())


@atexit.register
def _stop_worker() -> None:
    if _worker is not None:
        _worker.kill()


def _after_fork_in_child() -> None:
    """A forked child keeps nothing of its parent's worker but a detached copy (module docstring)."""
    global _lock, _worker, _stop_pending, _idle_since
    _lock = threading.Lock()
    _stop_pending = False
    _idle_since = None
    if _worker is not None:
        _worker.detach()
        _inherited.append(_worker)  # kept: collecting it would close (and flush) the copied pipe objects
        _worker = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _wait_until_ready(worker: _Worker) -> None:
    """Wait for a new worker's "ready" line (bounded by its CPU time, with a wall-clock backstop).

    Raises:
        RuntimeError: the worker did not start (a broken installation: math-verify or sympy missing).
    """
    if worker.ready:
        return
    try:
        line = worker.read_line(cpu_limit=_STARTUP_CPU_S, wall_limit=_STARTUP_WALL_S)
    except (_CpuLimit, _NoProgress, EOFError, OSError) as exc:
        line = f"{type(exc).__name__}: {exc}"
    if line != _READY:
        _discard_worker(worker)
        raise RuntimeError(f"the math answer checker process did not start ({line!r})")
    worker.ready = True


def check_answer_bounded(candidate: str, gold: str, timeout: float = CHECK_TIMEOUT_S) -> CheckResult:
    """`check_answer(candidate, gold)` bounded by `timeout` seconds of the worker's CPU time (module docstring).

    Never raises for any candidate text; raises RuntimeError only when the worker cannot start at all.
    """
    global _stop_pending, _idle_since
    from ragen_envs.math.answer import answer_guard

    if not isinstance(candidate, str) or not isinstance(gold, str):
        return CheckResult(None, "refused: not a string")
    reason = answer_guard(candidate)
    if reason is not None:
        return CheckResult(None, f"refused: {reason}")
    request = (json.dumps({"candidate": candidate, "gold": gold, "timeout": timeout}) + "\n").encode()
    with _lock:
        if not _leases:
            _idle_since = None  # a check without an env: the worker stays (until exit, or envs come and go)
        try:
            result = _ask(request, timeout)
        finally:
            if _stop_pending and not _leases and _worker is not None:
                _discard_worker(_worker)  # the last lease went while this check ran
            _stop_pending = False
    return result


def _ask(request: bytes, timeout: float) -> CheckResult:
    """Send one request to the worker (holding `_lock`) and read its verdict. A worker that dies without
    reaching its CPU limit (killed from outside before or during the check, or crashed) is replaced and the
    request asked once more, so that a worker's death outside the check does not decide the verdict."""
    for attempt in range(2):
        last = attempt == 1
        worker = _get_worker()
        try:
            _wait_until_ready(worker)
        except RuntimeError:
            if last:
                raise
            continue  # e.g. killed while it started: one fresh start before calling the installation broken
        try:
            worker.proc.stdin.write(request)
            worker.proc.stdin.flush()
            line = worker.read_line(cpu_limit=timeout, wall_limit=_WALL_FACTOR * timeout + _WALL_SLACK_S)
        except _CpuLimit:
            _discard_worker(worker)
            return CheckResult(None, "timeout")
        except _NoProgress:
            _discard_worker(worker)
            return CheckResult(None, f"checker failed: no reply within {_WALL_FACTOR * timeout + _WALL_SLACK_S:.0f} s")
        except (OSError, EOFError, ValueError) as exc:
            over_limit = worker.died_of_cpu_limit()
            _discard_worker(worker)
            if over_limit:
                return CheckResult(None, "timeout")
            if last:
                return CheckResult(None, f"checker failed: {exc}")
            continue
        return _reply(line, timeout)
    raise AssertionError("unreachable: the second attempt returns or raises")


def _reply(line: str, timeout: float) -> CheckResult:
    """The `CheckResult` of a worker's reply line: a check that took more than `timeout` CPU seconds is a
    timeout even though it finished (whether the caller saw it in time must not matter)."""
    try:
        reply = json.loads(line)
        if float(reply.get("cpu", 0.0)) > timeout:
            return CheckResult(None, "timeout")
        return CheckResult(reply.get("rule"), reply.get("error"))
    except (ValueError, TypeError, AttributeError) as exc:
        return CheckResult(None, f"checker failed: {exc}")


# ---------------------------------------------------------------------- the worker process
#: Checks run once before the worker says it is ready, so that sympy's and math-verify's lazy imports and
#: caches are not paid for (in CPU time, against the limit) by the first real answer.
_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("x**2 + 5*x + 6", "x^2+5x+6"),
    ("(x+2)(x+3)", "x^2+5x+6"),
    ("\\sqrt{12}", "2\\sqrt{3}"),
    ("12 dollars", "12"),
    ("x = 5", "5"),
    ("50%", "\\frac{1}{2}"),
    ("(2, 3)", "(2,3)"),
    ("east", "\\text{east}"),
)


def _limit_cpu(timeout: float) -> None:
    """Let the kernel end this process if the next check takes much more than `timeout` CPU seconds
    (RLIMIT_CPU is cumulative, so it is set `timeout` beyond what has been used so far)."""
    try:
        import resource
    except ImportError:  # not a Unix: the caller's limit (or its backstop) applies alone
        return
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(time.process_time() + timeout) + 1 + _RLIMIT_SLACK_S
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        pass


def _no_core_dumps() -> None:
    # SIGXCPU's default action dumps core; a killed check must not leave (or upload) a core file.
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass


def _serve() -> None:
    """The worker's loop: one JSON request per line on stdin, one JSON reply per line on stdout."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything the libraries print goes to stderr (discarded), not into the protocol
    _no_core_dumps()
    from ragen_envs.math.answer import check_answer, set_signal_timeouts

    set_signal_timeouts(False)  # wall-clock alarms would make the verdict depend on the load (module docstring)
    for candidate, gold in _WARM_UP:
        check_answer(candidate, gold)
    out.write(_READY + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            _limit_cpu(float(request.get("timeout", CHECK_TIMEOUT_S)))
            start = time.process_time()
            rule = check_answer(request["candidate"], request["gold"])
            reply = {"rule": rule, "error": None, "cpu": time.process_time() - start}
        except Exception as exc:  # the reply must always come: the caller is waiting on it
            reply = {"rule": None, "error": f"checker failed: {type(exc).__name__}: {exc}"[:300]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
