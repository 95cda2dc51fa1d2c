"""The sandbox package's layout: the launch script is found by path, never imported.

No sandbox run here (tests/envs/test_sandbox.py runs them, every one through `sandbox/launch.py`).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import ragen_envs.code
from ragen_envs.code.sandbox import inside, runner


def test_the_launch_script_is_not_an_import_path():
    """`sandbox_launch` was a script run by path: importing it (old or new name) would run the bootstrap."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ragen_envs.code.sandbox_launch")


def test_the_launch_script_is_next_to_inside_and_runs_it_by_path():
    """`sandbox.runner.LAUNCH` is the package's launch.py, and run by path with `-I -S` (as the sandbox runs it)
    it imports the bootstrap as the top-level module `inside` and hands it the arguments: here too few,
    so `inside.main` fails on them, which shows it ran and that nothing else of the project was needed."""
    launch = Path(runner.LAUNCH)
    assert launch == Path(inside.__file__).resolve().with_name("launch.py") and launch.is_file()
    assert launch.parent.name == "sandbox" and launch.parent.parent == Path(ragen_envs.code.__file__).resolve().parent
    proc = subprocess.run([sys.executable, "-I", "-S", str(launch)], capture_output=True, text=True, timeout=60,
                          cwd="/", env={})  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "IndexError" in proc.stderr and 'inside.py", line' in proc.stderr and "in main" in proc.stderr
