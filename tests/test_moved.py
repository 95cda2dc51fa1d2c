"""The old-import-path finder (ragen_envs._moved): one module object under both names, a DeprecationWarning
naming the new path, and no effect on any name outside its table."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from ragen_envs._moved import MovedModules, install


@pytest.fixture()
def moved(monkeypatch):
    """A finder mapping two made-up old names onto stdlib modules, removed again after the test."""
    finder = MovedModules({"ragen_envs._old_json": "json", "ragen_envs._old_colorsys": "colorsys"})
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    for name in finder.moves:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return finder


def test_old_name_is_the_new_module_and_warns(moved):
    import json

    with pytest.warns(DeprecationWarning, match=r"ragen_envs\._old_json moved to json"):
        old = importlib.import_module("ragen_envs._old_json")
    assert old is json
    # the new module keeps its own identity: nothing of the alias leaks into it
    assert json.__name__ == "json" and json.__spec__.name == "json"
    assert sys.modules["ragen_envs._old_json"] is json


def test_from_package_import_form_and_attribute(moved):
    import colorsys

    with pytest.warns(DeprecationWarning):
        from ragen_envs import _old_colorsys  # noqa: PLC0415  (the old spelling under test)
    assert _old_colorsys is colorsys
    assert _old_colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)


def test_names_outside_the_table_are_untouched(moved):
    assert moved.find_spec("ragen_envs.protocol") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ragen_envs._no_such_module")


def test_install_is_idempotent_per_table(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    table = {"ragen_envs._old_x": "json"}
    first = install(table)
    assert install(dict(table)) is first
    assert sum(isinstance(f, MovedModules) and f.moves == table for f in sys.meta_path) == 1
    assert sys.meta_path[0] is first


def test_warning_points_at_the_importing_line(moved):
    code = compile("import ragen_envs._old_json\n", "user_script.py", "exec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(code, {})
    assert [(w.category, w.filename, w.lineno) for w in caught] == [(DeprecationWarning, "user_script.py", 1)]


def test_forward_to_loads_the_module_on_first_use(monkeypatch):
    from types import ModuleType

    from ragen_envs._moved import forward_to

    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    pkg = ModuleType("fake_pkg")
    pkg.__getattr__ = forward_to("fake_pkg", "colorsys")
    with pytest.raises(AttributeError):
        pkg.__wrapped__  # noqa: B018  (a dunder probe, as copy/doctest make, must not load the module)
    assert "colorsys" not in sys.modules
    assert pkg.rgb_to_hsv(0.0, 1.0, 0.0)[0] == pytest.approx(1 / 3)
    assert pkg.__getattr__("__all__") == sys.modules["colorsys"].__all__
    with pytest.raises(AttributeError, match="fake_pkg.*no_such_name"):
        pkg.__getattr__("no_such_name")


def test_every_old_ragen_core_path_is_its_new_module():
    """In a fresh interpreter: each entry of ragen_core.MOVED imports under its old name as the very module of its
    new name, with one DeprecationWarning naming the new path (the verl glue modules need verl: skipped)."""
    import subprocess

    code = """
import importlib, warnings, ragen_core
needs_verl = {"ragen_core.integrations.verl_agent", "ragen_core.integrations.verl_trainer"}
bad = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for old, new in ragen_core.MOVED.items():
        if old in needs_verl:
            continue
        if importlib.import_module(old) is not importlib.import_module(new):
            bad.append(old)
messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
checked = [o for o in ragen_core.MOVED if o not in needs_verl]
assert not bad, bad
assert all(any(m.startswith(o + " moved to " + ragen_core.MOVED[o] + ";") for m in messages) for o in checked)
print(len(checked))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip()) >= 30
