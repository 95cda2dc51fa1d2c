"""The math answer checker's worker process is shared per process: many envs start one worker; closing or
collecting the last env stops it; a worker killed from outside is replaced without changing the verdict; a
forked child starts its own worker and never uses (nor keeps alive) its parent's.

Verdicts are compared with an independent path: `check_answer` run directly in a fresh interpreter (no
worker protocol), and the verdicts the checker gave before the worker was shared (recorded from that code).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.math import checker
from ragen_envs.math.env import MathEnv

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts worker processes in /proc")

ROOT = Path(__file__).resolve().parents[2]

#: Right, wrong, malformed and adversarial answers (huge exponents, stalling bars, code-like text).
CASES = [
    ("0.5", "\\frac{1}{2}"), ("1/2", "0.5"), ("50%", "\\frac{1}{2}"), ("0.49", "\\frac{1}{2}"),
    ("x**2 + 5*x + 6", "x^2+5x+6"), ("(x+2)(x+3)", "x^2+5x+6"), ("12 dollars", "12"), ("x = 5", "5"),
    ("5 or 6", "5"), ("East", "east"), ("\\sqrt{12}", "2\\sqrt{3}"), ("13", "12"), ("", "12"),
    ("\\frac{1}{", "\\frac{1}{2}"), ("}{", "1"), ("9^{9^{9^{9}}}", "12"), ("(((9**64)**64)**64)**64", "12"),
    ("2^{99+1}", "12"), ("1||" * 170, "12"), ("__import__('os').system('true')", "0"),
    ("(1).__class__", "1"), ("lambda: 1", "1"), ("\\binom{10}{3}", "120"), ("1011_2", "1011_2"),
]  # fmt: skip

#: `check_answer_bounded` on CASES with the checker as it was before the worker was shared (one run of that
#: code, `[list(check_answer_bounded(a, g)) for a, g in CASES]`, pasted here).
VERDICTS_BEFORE = [
    ["latex", None], ["latex", None], ["percent", None], [None, None], ["sympy", None], [None, None],
    ["latex", None], ["latex", None], [None, None], ["text", None], ["latex", None], [None, None], [None, None],
    [None, None], [None, None], [None, "refused: an exponent that is not small"],
    [None, "refused: a power with about 524288 digits or more"], [None, "refused: an exponent that is not small"],
    [None, "refused: more than 8 '|' characters"], [None, None], [None, None], [None, None], [None, None],
    ["text", None],
]  # fmt: skip

STALL = "\\binom{10^{60}}{10^{30}}"  # passes the cost guards and stalls sympy (tests/envs/test_math_env.py)
STALL_GOLD = "\\sqrt{2}"


def _workers() -> list[int]:
    """Pids of the running (not zombie) checker workers whose parent is this process."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[1]) == me and fields[0] != b"Z" and b"ragen_envs.math.checker" in cmdline:
            found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rindex(b")") + 2 :].split()[0] != b"Z"


@pytest.fixture
def no_leases(monkeypatch):
    """This test's leases only (envs of other test modules may still hold the process's worker), and no idle
    time: the last lease released stops the worker at once (`test_an_idle_worker_is_kept_a_moment` has one)."""
    gc.collect()
    monkeypatch.setattr(checker, "_leases", set(), raising=False)
    monkeypatch.setattr(checker, "_IDLE_STOP_S", 0.0, raising=False)
    yield
    gc.collect()


def _fresh_interpreter_verdicts(cases) -> list[list]:
    """`answer_guard`, then `check_answer` run directly in a new interpreter: no worker, no protocol."""
    code = (
        "import json, sys\n"
        "from ragen_envs.math.answer import answer_guard, check_answer, set_signal_timeouts\n"
        "set_signal_timeouts(False)\n"
        "out = []\n"
        "for a, g in json.load(sys.stdin):\n"
        "    why = answer_guard(a)\n"
        "    out.append([None, 'refused: ' + why] if why else [check_answer(a, g), None])\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(cases), capture_output=True, text=True,
                          env=env, timeout=300, check=True)
    return json.loads(done.stdout)


def test_verdicts_through_the_shared_worker_are_those_of_a_fresh_interpreter_and_of_before(no_leases):
    envs = [MathEnv() for _ in range(8)]  # eight envs on the one worker
    shared = [list(checker.check_answer_bounded(a, g)) for a, g in CASES]
    assert shared == _fresh_interpreter_verdicts(CASES)
    assert shared == VERDICTS_BEFORE
    for env in envs:
        env.close()


def test_many_envs_start_one_worker(no_leases, monkeypatch):
    started: list[int] = []
    real_init = checker._Worker.__init__

    def counting_init(self):
        real_init(self)
        started.append(self.proc.pid)

    monkeypatch.setattr(checker._Worker, "__init__", counting_init)
    if checker._worker is not None:
        checker._discard_worker(checker._worker)
    envs = [gym.make("ragen/MetaMathQA-v0") for _ in range(16)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    assert len(started) == 1 and _workers() == started
    _, reward, *_ = envs[3].step(f"<think>w</think><answer>{envs[3].unwrapped.gold}</answer>")
    assert reward == 1.0 and len(started) == 1
    for env in envs:
        env.close()


def test_closing_the_last_env_stops_the_worker_and_a_reset_takes_it_again(no_leases):
    a, b = MathEnv(), MathEnv()
    pid = checker._worker.proc.pid
    assert _running(pid)
    a.close()
    assert _running(pid)  # b still holds it
    b.close()
    b.close()  # idempotent
    assert not _running(pid) and _workers() == []
    a.reset(seed=0)  # a closed env that is reset takes the worker again
    assert _workers() != []
    _, reward, *_ = a.step(f"<think>w</think><answer>{a.gold}</answer>")
    assert reward == 1.0
    a.close()
    assert _workers() == []


def test_a_collected_env_releases_the_worker(no_leases):
    env = gym.make("ragen/MetaMathQA-v0")
    env.reset(seed=0)
    pid = checker._worker.proc.pid
    del env
    gc.collect()
    assert not _running(pid) and _workers() == []


def test_an_idle_worker_is_kept_a_moment_for_the_next_env_then_stopped(no_leases, monkeypatch):
    """Closing an env and making the next reuses the worker (no second start-up); once no env has held it for
    `_IDLE_STOP_S` seconds the reaper thread stops it."""
    monkeypatch.setattr(checker, "_IDLE_STOP_S", 3600.0)
    env = MathEnv()
    pid = checker._worker.proc.pid
    env.close()
    env = MathEnv()  # within the idle time: the same worker
    assert checker._worker.proc.pid == pid and _workers() == [pid]
    env.close()
    checker._reap_if_idle(time.monotonic() + 60)  # not idle long enough yet
    assert _running(pid)
    checker._reap_if_idle(time.monotonic() + 3600)
    assert not _running(pid) and _workers() == []
    env = MathEnv()
    pid = checker._worker.proc.pid
    monkeypatch.setattr(checker, "_IDLE_STOP_S", 0.05)
    monkeypatch.setattr(checker, "_REAP_POLL_S", 0.05)
    checker._start_reaper()
    del env
    gc.collect()
    deadline = time.monotonic() + 120  # the reaper thread's own pass (a generous bound for a busy machine)
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def test_the_last_env_closed_during_a_check_stops_the_worker_when_the_check_ends(no_leases):
    """The check is held up by stopping the worker (SIGSTOP: no CPU time, so no timeout); closing the last env
    meanwhile neither waits for it nor kills the worker under it: the check gets its verdict, then the worker
    is stopped."""
    env = MathEnv()
    assert checker.check_answer_bounded("1/2", "0.5").rule == "latex"  # a ready worker
    worker = checker._worker
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        result: list = []
        check = threading.Thread(target=lambda: result.append(checker.check_answer_bounded("0.5", "\\frac{1}{2}")))
        check.start()
        while check.is_alive() and not checker._lock.locked():
            time.sleep(0.001)
        closing = threading.Thread(target=env.close, daemon=True)
        closing.start()
        closing.join(timeout=60)
        assert not closing.is_alive()  # close() did not wait for the check
        assert _running(worker.proc.pid)
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    check.join(timeout=300)
    assert result == [checker.CheckResult("latex", None)]
    assert checker._worker is None and not _running(worker.proc.pid) and _workers() == []


def test_a_worker_killed_from_outside_is_replaced_and_the_verdict_is_the_answer_s(no_leases):
    """A worker killed while idle (a user's kill, the OOM killer) used to fail the next check ("checker failed":
    a right answer cost the format penalty) whenever the kill had not been reaped yet."""
    env = MathEnv()
    for _ in range(3):
        assert checker.check_answer_bounded("0.5", "\\frac{1}{2}") == checker.CheckResult("latex", None)
        os.kill(checker._worker.proc.pid, signal.SIGKILL)  # no wait: the next check may find it dying
        assert checker.check_answer_bounded("0.5", "\\frac{1}{2}") == checker.CheckResult("latex", None)
    env.reset(seed=0)
    os.kill(checker._worker.proc.pid, signal.SIGKILL)
    _, reward, _, _, info = env.step(f"<think>w</think><answer>{env.gold}</answer>")
    assert (reward, info["check_error"]) == (1.0, None)
    env.close()


def _in_fork(child) -> dict:
    """Run `child()` (returning a JSON-able dict) in a forked child; its result, or {"status": ...} when the
    child died (e.g. of the SIGALRM that ends a child stuck on a lock)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(read)
            signal.alarm(120)
            os.write(write, json.dumps(child()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    return json.loads(text) if text else {"status": status}


def test_a_forked_child_starts_its_own_worker_and_drops_the_parent_s_pipes(no_leases):
    env = MathEnv()
    assert checker.check_answer_bounded("1/2", "0.5").rule == "latex"
    parent_worker = checker._worker
    pipe = os.readlink(f"/proc/{parent_worker.proc.pid}/fd/0")  # the worker's stdin: "pipe:[inode]"

    def child() -> dict:
        fds = os.listdir("/proc/self/fd")
        holding = [fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}") and _link(fd) == pipe]
        verdict = list(checker.check_answer_bounded("0.5", "\\frac{1}{2}"))
        return {"holding": holding, "verdict": verdict, "worker": checker._worker.proc.pid,
                "kids": _workers()}

    got = _in_fork(child)
    assert got["holding"] == []  # the child does not hold (keep alive, or write into) the parent's worker stdin
    assert got["verdict"] == ["latex", None]
    assert got["worker"] != parent_worker.proc.pid and got["kids"] == [got["worker"]]
    assert checker._worker is parent_worker and _running(parent_worker.proc.pid)  # untouched by the child
    assert checker.check_answer_bounded("13", "12") == checker.CheckResult(None, None)
    env.close()


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_a_child_forked_during_a_check_of_another_thread_can_check(no_leases):
    """The lock a thread of the parent held at the fork is never released in the child: its first check used
    to wait forever."""
    env = MathEnv()
    assert checker.check_answer_bounded("1/2", "0.5").rule == "latex"
    thread = threading.Thread(target=checker.check_answer_bounded, args=(STALL, STALL_GOLD, 2.0))
    thread.start()
    while thread.is_alive() and not checker._lock.locked():
        time.sleep(0.001)
    assert thread.is_alive()
    got = _in_fork(lambda: {"verdict": list(checker.check_answer_bounded("0.5", "\\frac{1}{2}"))})
    thread.join(timeout=300)
    assert got == {"verdict": ["latex", None]}
    env.close()


def test_the_worker_ends_with_its_interpreter():
    code = ("from ragen_envs.math.env import MathEnv\n"
            "env = MathEnv(); env.reset(seed=0); env.step('<think>w</think><answer>' + env.gold + '</answer>')\n"
            "from ragen_envs.math import checker; print(checker._worker.proc.pid)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          check=True)
    assert not _running(int(done.stdout.split()[-1]))
