"""The sandbox package's layout: its modules' old import paths (`ragen_envs.code.sandbox_boot`, ...) still
import, warn, and are the very module objects of the new paths; the launch script is found by path.

No sandbox run here (tests/envs/test_sandbox.py runs them, every one through `sandbox/launch.py`).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import ragen_envs.code
from ragen_envs.code import MOVED_SANDBOX_MODULES, sandbox
from ragen_envs.code.sandbox import cgroup, inside, rootfs, seccomp

OLD_TO_NEW = {
    "ragen_envs.code.sandbox_boot": inside,
    "ragen_envs.code.sandbox_cgroup": cgroup,
    "ragen_envs.code.sandbox_rootfs": rootfs,
    "ragen_envs.code.sandbox_seccomp": seccomp,
}


def _forget(monkeypatch, old: str) -> None:
    """Undo an earlier import of `old` (in this process) so that importing it runs the finder again."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    monkeypatch.delattr(ragen_envs.code, old.rpartition(".")[2], raising=False)


def test_the_table_is_the_moved_modules():
    assert MOVED_SANDBOX_MODULES == {old: new.__name__ for old, new in OLD_TO_NEW.items()}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_old_path_imports_warns_and_is_the_new_module(monkeypatch, old):
    new = OLD_TO_NEW[old]
    _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new.__name__}") as caught:
        module = importlib.import_module(old)
    assert module is new and sys.modules[old] is new
    assert new.__name__.startswith("ragen_envs.code.sandbox.") and new.__spec__.name == new.__name__
    assert len([w for w in caught if issubclass(w.category, DeprecationWarning)]) == 1


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_old_from_import_form(monkeypatch, old):
    """`from ragen_envs.code import sandbox_boot` (the spelling the tests used) gives the new module too."""
    _forget(monkeypatch, old)
    name = old.rpartition(".")[2]
    with pytest.warns(DeprecationWarning, match=name):
        namespace: dict = {}
        exec(f"from ragen_envs.code import {name}", namespace)
    assert namespace[name] is OLD_TO_NEW[old]


def test_monkeypatching_an_old_path_patches_the_new_module(monkeypatch):
    _forget(monkeypatch, "ragen_envs.code.sandbox_boot")
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("ragen_envs.code.sandbox_boot")
    monkeypatch.setattr(old, "EXIT_SETUP", -1)
    assert inside.EXIT_SETUP == -1


def test_the_launch_script_is_not_an_import_path():
    """`sandbox_launch` was a script run by path: importing it (old or new name) would run the bootstrap."""
    assert "ragen_envs.code.sandbox_launch" not in MOVED_SANDBOX_MODULES
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ragen_envs.code.sandbox_launch")


def test_the_launch_script_is_next_to_inside_and_runs_it_by_path():
    """`sandbox._LAUNCH` is the package's launch.py, and run by path with `-I -S` (as the sandbox runs it)
    it imports the bootstrap as the top-level module `inside` and hands it the arguments: here too few,
    so `inside.main` fails on them, which shows it ran and that nothing else of the project was needed."""
    launch = Path(sandbox._LAUNCH)
    assert launch == Path(inside.__file__).resolve().with_name("launch.py") and launch.is_file()
    assert launch.parent.name == "sandbox" and launch.parent.parent == Path(ragen_envs.code.__file__).resolve().parent
    proc = subprocess.run([sys.executable, "-I", "-S", str(launch)], capture_output=True, text=True, timeout=60,
                          cwd="/", env={})  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "IndexError" in proc.stderr and 'inside.py", line' in proc.stderr and "in main" in proc.stderr
