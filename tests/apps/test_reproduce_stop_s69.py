"""A stopped study must end, with one line, whatever moment its Ctrl-C lands on.

CI found a study that never ended after Ctrl-C: its run had printed its one line and returned 130, but its process
waited 120 s on a watchdog thread that the interrupt had left running (provenance's ``git diff`` timer, started just
before the interrupt and never cancelled), and the study waited on it. Hunting for it found three more of the same
class, each tested here on real processes:

- the exit status of a forked run, read by two threads at once (the run's waiting thread, and the stop in the main
  thread), came back as 255 for one of them;
- a Ctrl-C in a study's first seconds (while its warm process imports, or builds the compiled decoding step) ended
  the warm process in a KeyboardInterrupt traceback;
- a run whose process started while the stop was being sent was never stopped.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragen_core.apps.reproduce import runner
from ragen_core.apps.reproduce.runner import NOT_STARTED, _Forked, _wait
from ragen_core.apps.reproduce.spec import RunSpec
from ragen_core.training import provenance

ROOT = Path(__file__).resolve().parents[2]


def _live_non_daemon_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not threading.main_thread()]


# ------------------------------------------------------------------------------------- provenance's git watchdog
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_ctrl_c_while_the_git_watchdog_starts_leaves_no_thread_that_holds_the_process(tmp_path, monkeypatch):
    """Thread.start() waits for the new thread: a Ctrl-C landing there raised out of start() before the ``try`` that
    cancels the timer, and the timer (not a daemon) kept the interrupted run's process from exiting for 120 s."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    (repo / "a.txt").write_text("two\n")
    real_start = threading.Timer.start
    started: list[threading.Timer] = []

    def start_then_ctrl_c(self):
        real_start(self)
        started.append(self)
        raise KeyboardInterrupt  # as if Ctrl-C landed in start()'s wait for the thread

    before = set(_live_non_daemon_threads())
    monkeypatch.setattr(threading.Timer, "start", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        provenance._write_patch(repo, tmp_path, "code.patch", timeout=60.0)
    assert started, "the watchdog was not started: the test no longer reaches the moment it checks"
    started[0].join(5)  # a cancelled timer ends at once; one left running would wait its 60 s
    assert not [t for t in _live_non_daemon_threads() if t not in before]
    assert not (tmp_path / "code.patch").exists() and not list(tmp_path.glob(".code.patch.*.tmp"))


def test_every_watchdog_left_by_an_interrupted_patch_is_a_daemon(tmp_path, monkeypatch):
    """Whatever the moment of the interrupt, no thread _write_patch starts can hold the process open."""
    made: list[threading.Timer] = []
    real_init = threading.Timer.__init__

    def record(self, *a, **k):
        real_init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(threading.Timer, "__init__", record)
    provenance._write_patch(ROOT, tmp_path, None)
    assert made and all(t.daemon for t in made)


# ------------------------------------------------------------------------------------- a forked run's exit status
def _forkserver() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver here")
    return runner.warm_context()


@pytest.mark.slow
def test_a_forked_runs_exit_status_is_read_right_while_another_thread_signals_it():
    """Before: in 40 quick children, each waited on by one thread while another sent it signal 0 (what stop_running
    does), about one in five came back as exit 255, not its own 7."""
    ctx = _forkserver()
    wrong: list[int] = []
    for _ in range(40):
        child = _Forked(ctx.Process(target=os._exit, args=(7,)))
        child.process.start()
        codes: list[int] = []

        def waiter(child=child, codes=codes):
            while True:
                try:
                    codes.append(child.wait(0.2))
                    return
                except subprocess.TimeoutExpired:
                    pass

        def signaller(child=child):
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                child.send_signal(0)

        threads = [threading.Thread(target=waiter, daemon=True), threading.Thread(target=signaller, daemon=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads), "a thread hung on the run's exit status"
        wrong += [c for c in codes + [child.poll()] if c != 7]
    assert wrong == []


def test_a_studys_worker_threads_block_ctrl_c_so_the_main_thread_takes_it(tmp_path):
    """Found by Ctrl-C in a study's first seconds on a loaded machine (two CPU-bound processes beside it: 4 of 6
    studies let their first run train to its end). A signal that a worker thread received was acted on only when
    the main thread's wait for a run returned; and a Ctrl-C landing while the pool started a worker thread left a
    thread that the pool's shutdown did not wait for, so the stop was cleared while its run started. run_local now
    starts its workers with SIGINT and SIGTERM blocked (they keep the mask) and wakes twice a second."""
    masks: list[set] = []

    def execute(spec, runs_dir):
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, set()))
        return {"name": spec.name}

    specs = [RunSpec("bandit", "a", s, "x.toml", ()) for s in range(3)]
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    runner.run_local(specs, tmp_path, workers=2, progress=False, execute=execute)
    assert len(masks) == 3 and all({signal.SIGINT, signal.SIGTERM} <= m for m in masks)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before  # the main thread's mask is restored


def test_a_ctrl_c_sent_while_runs_are_submitted_arrives_as_they_are():
    """Inside the block a Ctrl-C waits, blocked, and is delivered to this thread as the block ends."""
    reached: list[bool] = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a suite run with nohup ignores SIGINT
    try:
        with pytest.raises(KeyboardInterrupt):
            with runner._signals_blocked():
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
                time.sleep(0.05)
                reached.append(True)  # the Ctrl-C waited
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached == [True]


# ------------------------------------------------------------------------------------- runs that start during a stop
def test_once_a_study_is_stopping_no_run_starts_and_one_starting_is_sent_ctrl_c(tmp_path, default_sigint):
    """stop_running() used to reach only the runs already registered: a worker thread that was starting its run
    (the warm process still importing) registered it afterwards, and it trained to its end. The stand-in run starts
    with Ctrl-C's default action, as the study's runs set theirs: a suite started in the background (nohup) ignores
    SIGINT, and its children would inherit that and sleep the interrupt out."""
    spec = RunSpec("bandit", "a", 0, str(tmp_path / "none.toml"), ())
    try:
        runner.stop_running()
        with pytest.raises(RuntimeError, match=NOT_STARTED):
            runner.execute_run(spec, tmp_path / "runs")
        assert not (tmp_path / "runs" / spec.name / "train.log").exists()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=default_sigint)
        t = time.monotonic()
        status = _wait("late", child, tmp_path / "no-stop-file")
        assert time.monotonic() - t < 30 and status != 0  # stopped by Ctrl-C (KeyboardInterrupt), not slept out
    finally:
        runner._STOPPING.clear()


def test_a_stop_of_an_earlier_study_does_not_keep_the_next_from_running(tmp_path):
    """run_local clears the stop when it starts and when it ends (one process may run several studies)."""
    runner.stop_running()
    ran: list[str] = []

    def execute(spec, runs_dir):
        ran.append(spec.name)
        return {"name": spec.name}

    specs = [RunSpec("bandit", "a", s, "x.toml", ()) for s in (0, 1)]
    assert [r["name"] for r in runner.run_local(specs, tmp_path, workers=1, progress=False, execute=execute)] \
        == [s.name for s in specs]
    assert sorted(ran) == sorted(s.name for s in specs) and not runner._STOPPING.is_set()


# ------------------------------------------------------------------------------------- Ctrl-C in its first seconds
@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 1.5, 3.0])
def test_ctrl_c_in_a_studys_first_seconds_gives_one_line_and_no_traceback(tmp_path, delay, start_quick_study,
                                                                          interrupt_group):
    """The warm process imports torch and the trainer (and builds the compiled decoding step once per machine) before
    it forks the first run; Python's forkserver ignores Ctrl-C only after that. A terminal's Ctrl-C then (to the
    whole process group) printed the warm process's KeyboardInterrupt traceback under the study's line."""
    out = tmp_path / "out"
    proc = start_quick_study(tmp_path)
    first = proc.stderr.readline()  # "study: 4 runs ...": the runs are being started now
    time.sleep(delay)
    err = first + interrupt_group(proc, 120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert "interrupted; no further run was started: 0 of 4 runs finished" in err
    runs = out / "runs"
    assert not list(runs.glob("*/done.json"))
    for log in runs.glob("*/train.log"):  # a run forked during the stop stopped at once, in one line
        assert "Traceback" not in log.read_text()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc (Linux)")
def test_the_warm_process_runs_with_ctrl_c_and_sigterm_blocked():
    """warm_context blocked SIGTERM around the server's start, but Python's resource tracker, started inside that
    start, unblocked SIGINT and SIGTERM again before the server was spawned: its mask was empty."""
    _forkserver()
    pid = multiprocessing.forkserver._forkserver._forkserver_pid
    blocked = int(Path(f"/proc/{pid}/status").read_text().split("SigBlk:")[1].split()[0], 16)
    assert blocked & (1 << (signal.SIGINT - 1)) and blocked & (1 << (signal.SIGTERM - 1)), hex(blocked)
