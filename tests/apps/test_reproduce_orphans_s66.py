"""A study that dies without stopping its runs (SIGKILL, the kernel's OOM kill, a crash) must not leave them
training unwatched: each run notices that the process that started it is gone and stops as on Ctrl-C, at its last
checkpoint, so that a later ``ragen reproduce`` continues it. Real processes: a study of two real (tiny) runs is
killed with SIGKILL while they train; what is checked is that no process of it is left and that each run stopped
through its trainer (its log says so, it wrote no ``done.json``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# The stop tests' study (two runs of a tiny bandit config, forked from the warm process) and their /proc helpers.
from test_reproduce_stop_s65_local import CONFIG, DRIVER, NAMES, _alive, _default_signals, _descendants, _read

from ragen_core.apps.reproduce.lifeline import lifeline, stop_when_cut
from ragen_core.apps.reproduce.runner import finished_records
from ragen_core.apps.reproduce.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]

#: Runs that cannot end by themselves within the test (the stop tests' runs end within seconds, after 5 empty
#: steps): one that is still training once its study is gone was not stopped.
LONG = CONFIG.replace("steps = 400", "steps = 1000000") + "[filter]\nmax_empty_steps = 0\n"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")]


def _popen(tmp_path: Path, script: str, *args: str) -> subprocess.Popen:
    """`script` (Python source) run with `args` in its own process group, as a terminal starts a command; its
    output goes to ``tmp_path/err.txt`` (not to a pipe: a process left behind would hold the pipe open)."""
    (tmp_path / "bandit.toml").write_text(LONG)
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    with open(tmp_path / "err.txt", "w") as err:
        return subprocess.Popen([sys.executable, str(path), *args], cwd=ROOT, stdout=err, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_default_signals,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def _wait_for_runs(proc: subprocess.Popen, runs: Path, limit_s: float = 120) -> list[int]:
    """Until both runs have logged an RL step; the processes below the study then (its runs, the warm process)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if all('"perf/step_s"' in _read(runs / n / "metrics.jsonl") for n in NAMES):
            return _descendants(proc.pid)
        time.sleep(0.1)
    _kill_all(proc.pid)
    raise AssertionError(f"the runs did not start: {_read(runs.parent.parent / 'err.txt')[-3000:]}")


def _left_after(pids: list[int], limit_s: float = 60) -> list[int]:
    """The processes of `pids` still running after at most `limit_s` seconds (polled: none left ends the wait)."""
    deadline = time.monotonic() + limit_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids)


def _kill_all(pgid: int) -> None:
    """Whatever the test left of the study's process group (its runs share it): nothing stays behind."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_processes(pids: list[int], runs: Path) -> dict[str, int]:
    """run name -> the process among `pids` that writes its train.log (the run, not the warm process)."""
    found = {}
    for pid in pids:
        for name in NAMES:
            try:
                if os.readlink(f"/proc/{pid}/fd/1") == str(runs / name / "train.log"):
                    found[name] = pid
            except OSError:
                continue
    return found


def test_a_study_killed_with_sigkill_leaves_no_run_training(tmp_path):
    """SIGKILL to the study's process used to leave both runs training on (parented to init, with the warm
    process that forked them kept alive by them), writing into the study's folder with nobody to count them."""
    proc = _popen(tmp_path, DRIVER, str(tmp_path / "bandit.toml"), str(tmp_path / "cache"), "--out",
                  str(tmp_path / "out"), "--workers", "2", "--no-progress")
    runs = tmp_path / "out" / "runs"
    try:
        below = _wait_for_runs(proc, runs)
        assert set(_run_processes(below, runs)) == set(NAMES), "each run is a process of its own"
        os.kill(proc.pid, signal.SIGKILL)  # the study alone, as the OOM killer ends it
        proc.wait(timeout=60)
        left = _left_after(below)
    finally:
        _kill_all(proc.pid)
    assert left == [], f"still running after the study was killed: {left}"
    for name in NAMES:  # each stopped by its trainer at its last checkpoint, none counted as finished
        assert "interrupted at step" in (runs / name / "train.log").read_text()
        assert not (runs / name / "done.json").exists()
        assert (runs / name / "checkpoints" / "latest.pt").is_file()
    specs = [RunSpec("bandit", "a", s, str(tmp_path / "bandit.toml"),
                     (f"run.seed={s}", "run.progress=false", f'warm_start.cache_dir="{tmp_path / "cache"}"'))
             for s in (0, 1)]
    assert finished_records(specs, runs) == ([], NAMES)


#: A fresh run's process (``execute_run`` without the warm process: Windows, and each Ray task) under a parent that
#: is then killed with SIGKILL; argv: config, cache, runs folder.
FRESH_PARENT = """
import sys
from ragen_core.apps.reproduce.runner import execute_run
from ragen_core.apps.reproduce.spec import RunSpec

if __name__ == "__main__":
    config, cache, runs = sys.argv[1:4]
    execute_run(RunSpec("bandit", "a", 0, config, ("run.seed=0", "run.progress=false",
                                                   f'warm_start.cache_dir="{cache}"')), runs)
"""


def test_a_fresh_run_stops_when_the_process_that_started_it_is_killed(tmp_path):
    """The same for a run started as a fresh ``python`` (no warm process): it used to train on, parented to init."""
    runs = tmp_path / "runs"
    proc = _popen(tmp_path, FRESH_PARENT, str(tmp_path / "bandit.toml"), str(tmp_path / "cache"), str(runs))
    name = NAMES[0]
    try:
        deadline = time.monotonic() + 120
        while '"perf/step_s"' not in _read(runs / name / "metrics.jsonl") and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"the run did not start: {_read(tmp_path / 'err.txt')[-3000:]}")
            time.sleep(0.1)
        below = _descendants(proc.pid)
        assert below, "the run is a process of its own"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        left = _left_after(below)
    finally:
        _kill_all(proc.pid)
    assert left == [], f"still running after its parent was killed: {left}"
    assert "interrupted at step" in (runs / name / "train.log").read_text()
    assert not (runs / name / "done.json").exists()


def test_a_lifeline_signals_once_its_last_write_end_closes():
    """The watcher sends its signal when the pipe's write end closes, not before (the study still holds it)."""
    got: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    read, write = lifeline()
    try:
        thread = stop_when_cut(read, signal.SIGUSR1)
        thread.join(0.5)
        assert thread.is_alive() and got == []  # the write end is open: nothing to do
        os.close(write)
        thread.join(30)
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:  # the handler runs in this (the main) thread
            time.sleep(0.05)
        assert not thread.is_alive() and got == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)
