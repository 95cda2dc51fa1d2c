"""Fixtures shared by the app tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _default_sigint() -> None:
    """In the child before it runs: Ctrl-C's default action. A suite started in the background (`make test &`,
    nohup) ignores SIGINT, and an ignored signal stays ignored across exec, so an interrupt a test sends would never
    arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def default_sigint() -> Callable[[], None]:
    """A ``preexec_fn`` for a child that a test will interrupt: Ctrl-C's default action restored (above)."""
    return _default_sigint


@pytest.fixture
def start_quick_study() -> Callable[[Path], subprocess.Popen]:
    """A function that starts ``ragen reproduce --quick --envs sokoban --workers 1`` (the module's own entry, as a
    terminal would, in a session of its own so that a test can signal its whole process group) with its output in
    `tmp / "out"` and its warm-start cache in `tmp / "cache"`; its stderr and stdout are pipes of text."""

    def start(tmp: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "ragen_core.apps.reproduce.cli", "--quick", "--envs", "sokoban", "--workers", "1",
             "--out", str(tmp / "out"), "--warm-cache", str(tmp / "cache"), "--no-progress"], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=_default_sigint)

    return start


@pytest.fixture
def interrupt_group() -> Callable[[subprocess.Popen, float], str]:
    """A function that sends Ctrl-C to a started study's process group (as a terminal does), waits up to `timeout`
    seconds for it to end (killing the group if it has not) and returns its stderr."""

    def interrupt(proc: subprocess.Popen, timeout: float) -> str:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        return err

    return interrupt
