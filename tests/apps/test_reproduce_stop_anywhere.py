"""A study's Ctrl-C or SIGTERM may land on any bytecode of its main thread, and every run is still either finished,
stopped or not started, and said to be so.

CI found a study Ctrl-C'd in its first second that printed "0 of 4 runs finished ... 0 not started" while its first
run, which no stop reached, trained to its end before the process exited. The interrupt had been raised in the main
thread while the pool was starting its worker thread: Python's resource tracker clears the worker thread's signal
mask when the warm process starts, so the worker took the signal, and the main thread raised KeyboardInterrupt at
its next bytecode, masked or not. The pool never recorded that thread, so its shutdown did not wait for it, and the
stop was cleared while its run started. run_local's handlers now only record a signal (``_stop_requests``); its loop
acts on it.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from ragen_core.apps.reproduce import runner
from ragen_core.apps.reproduce.runner import NOT_STARTED, Interrupted, run_local
from ragen_core.apps.reproduce.spec import RunSpec


@pytest.fixture
def ctrl_c_raises():
    """SIGINT as an interactive Python has it (a suite started with nohup ignores it); restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class StandInRun:
    """An ``execute`` for run_local that behaves as a training run does towards a stop: it is not started once the
    study is stopping, and once started it trains for `seconds` unless the stop reaches it (it looks every 10 ms).
    The first run to start sends `signum` to the process, from its worker thread with that signal unblocked (as the
    warm process's start leaves a worker thread's mask), and says so on `sent`."""

    def __init__(self, signum: int, seconds: float = 1.0):
        self.signum = signum
        self.seconds = seconds
        self.sent = threading.Event()
        self.trained: list[str] = []
        self.stopped: list[str] = []

    def __call__(self, spec: RunSpec, runs_dir) -> dict:
        if runner._STOPPING.is_set():
            raise RuntimeError(f"run {spec.name} {NOT_STARTED}")
        if not self.sent.is_set():
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {self.signum})
            os.kill(os.getpid(), self.signum)  # the kernel gives it to this thread: the main thread masks it
            self.sent.set()
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            if runner._STOPPING.is_set():
                self.stopped.append(spec.name)
                raise RuntimeError(f"run {spec.name} stopped at its last checkpoint (exit 130)")
            time.sleep(0.01)
        self.trained.append(spec.name)
        return {"name": spec.name}


def _pool_threads_started_after(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t is not threading.current_thread()]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_taken_while_the_pool_starts_its_worker_leaves_no_run_training(tmp_path, monkeypatch, signum,
                                                                                ctrl_c_raises):
    """The signal is handled by the main thread right after the pool's Thread.start() returns (the moment CI's
    study was hit): the pool has not recorded that thread yet."""
    run = StandInRun(signum)
    real_start = threading.Thread.start

    def start_then_wait_for_the_signal(self):
        real_start(self)
        if self.name.startswith("ThreadPoolExecutor"):
            assert run.sent.wait(10), "the stand-in run never started"
            time.sleep(0.05)  # the signal's C handler has run in the worker: the main thread acts at its next step

    monkeypatch.setattr(threading.Thread, "start", start_then_wait_for_the_signal)
    before = set(threading.enumerate())
    specs = [RunSpec("bandit", "a", s, "x.toml", ()) for s in range(4)]
    previous_term = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stop:
        run_local(specs, tmp_path, workers=1, progress=False, execute=run)
    for t in _pool_threads_started_after(before):  # a thread the stop left running would train its run here
        t.join(10)
    assert run.trained == [], "a run that no stop reached trained to its end"
    assert stop.value.signum == signum
    names = sorted(s.name for s in specs)
    assert sorted(stop.value.stopped + stop.value.not_started) == names  # each run is accounted for, once
    assert stop.value.stopped == run.stopped
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the study's handlers are taken back
    assert signal.getsignal(signal.SIGTERM) == previous_term
    assert not runner._STOPPING.is_set()


def test_a_stop_that_comes_as_the_last_run_ends_still_stops_the_study(tmp_path, ctrl_c_raises):
    """The loop ends when every run has; a Ctrl-C recorded by then must not be dropped (exit 0 with a report)."""

    def execute(spec, runs_dir):
        os.kill(os.getpid(), signal.SIGINT)  # this worker masks it: the main thread takes it, in its wait
        time.sleep(0.2)
        return {"name": spec.name}

    with pytest.raises(Interrupted) as stop:
        run_local([RunSpec("bandit", "a", 0, "x.toml", ())], tmp_path, workers=1, progress=False, execute=execute)
    assert stop.value.stopped == [] and stop.value.not_started == []


def test_a_study_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path):
    """``nohup ragen reproduce &``: SIGINT ignored; the study must not start handling it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        seen: list = []

        def execute(spec, runs_dir):
            seen.append(signal.getsignal(signal.SIGINT))
            return {"name": spec.name}

        run_local([RunSpec("bandit", "a", 0, "x.toml", ())], tmp_path, workers=1, progress=False, execute=execute)
        assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_the_stop_line_accounts_for_every_run(tmp_path, delay, start_quick_study, interrupt_group):
    """The command's line: finished + stopped + not started is every run, whatever the moment of the Ctrl-C (a
    Ctrl-C before run_local had begun said "0 not started" of 4 runs none of which had started)."""
    proc = start_quick_study(tmp_path)
    proc.stderr.readline()
    time.sleep(delay)
    err = interrupt_group(proc, 120)
    assert proc.returncode == 130, err[-3000:]
    line = re.search(r"(\d+) of (\d+) runs finished .*?, (?:stopped none|stopped (\d+) at [^)]*\)), (\d+) not started",
                     err)
    assert line, err[-3000:]
    finished, total, stopped, not_started = (int(g or 0) for g in line.groups())
    assert finished + stopped + not_started == total, line.group(0)
    assert finished == len(list((tmp_path / "out" / "runs").glob("*/done.json")))


_WORKER_MASK_AFTER_WARM_START = """
import json, signal, threading
from ragen_core.apps.reproduce import runner

masks = []

def worker():
    runner.warm_context()  # the first in this process: starts the resource tracker and the warm process
    masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, set()))

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # as run_local's workers start
t = threading.Thread(target=worker)
t.start()
t.join()
print(json.dumps(sorted(int(s) for s in masks[0])))
"""


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(), reason="no forkserver")
def test_a_worker_thread_keeps_ctrl_c_blocked_after_it_starts_the_warm_process():
    """Python's resource tracker unblocks SIGINT and SIGTERM in the thread that starts it (run_local's first worker):
    that worker then took the terminal's Ctrl-C, and the main thread acted on it only at its next wake-up, while the
    worker could start the next run. In a fresh process, so that the tracker is started by this call."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _WORKER_MASK_AFTER_WARM_START], cwd=root, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    blocked = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {int(signal.SIGINT), int(signal.SIGTERM)} <= blocked, out.stdout


@pytest.mark.slow
def test_a_ctrl_c_while_ray_tasks_are_submitted_leaves_no_task_unstopped(tmp_path, monkeypatch, ctrl_c_raises):
    """run_ray submitted its tasks in one comprehension: a Ctrl-C raised inside it left the tasks already submitted
    out of the ones the stop reaches (their stop files were never written), and on a cluster not started by the
    study they trained to their end. Here the Ctrl-C comes after the second of four submissions."""
    ray = pytest.importorskip("ray")
    from ragen_core.apps.reproduce.runner import run_ray

    def execute(spec, runs_dir):  # a closure: Ray pickles it by value; stops when its stop file appears
        import time as _time
        from pathlib import Path as _Path

        stop = _Path(runs_dir) / f".{spec.name}.stop"
        if stop.exists():
            raise RuntimeError(f"run {spec.name} was not started: the study was stopped")
        (_Path(runs_dir) / f"{spec.name}.started").write_text("")
        end = _time.monotonic() + 20
        while _time.monotonic() < end:
            if stop.exists():
                raise RuntimeError(f"run {spec.name} stopped at its last checkpoint (exit 130)")
            _time.sleep(0.05)
        (_Path(runs_dir) / f"{spec.name}.trained").write_text("")
        return {"name": spec.name}

    real_remote = ray.remote
    submitted: list[int] = []

    def remote(*args, **kwargs):
        make = real_remote(*args, **kwargs)

        def wrap(fn):
            task = make(fn)

            class Submit:
                def remote(self, *a, **k):
                    ref = task.remote(*a, **k)
                    submitted.append(1)
                    if len(submitted) == 2:
                        os.kill(os.getpid(), signal.SIGINT)
                        time.sleep(0.05)  # the handler runs here, inside the submissions
                    return ref

            return Submit()

        return wrap

    monkeypatch.setattr(ray, "remote", remote)
    specs = [RunSpec("bandit", "a", s, "x.toml", ()) for s in range(4)]
    with pytest.raises(Interrupted) as stop:
        run_ray(specs, tmp_path, "local", progress=False, execute=execute,
                init_kwargs={"num_cpus": 2, "include_dashboard": False})
    assert len(submitted) == 4
    assert not list(tmp_path.glob("*.trained")), "a task that no stop reached trained to its end"
    names = sorted(s.name for s in specs)
    assert sorted(stop.value.stopped + stop.value.not_started) == names
    assert not list(tmp_path.glob(".*.stop"))  # removed again: the next study on these folders runs them
