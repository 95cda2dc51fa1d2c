"""benchmarks.bench_commands and the load average the timing benchmarks record beside their times."""

import builtins

import pytest

from benchmarks import bench_commands, machine


def _open_instead_of_proc_loadavg(path_to_use):
    def fake_open(path, *args, **kwargs):
        return builtins.open(path_to_use if path == "/proc/loadavg" else path, *args, **kwargs)
    return fake_open


def test_load_average_is_the_first_field_of_proc_loadavg(monkeypatch, tmp_path):
    fake = tmp_path / "loadavg"
    fake.write_text("2.37 1.90 1.50 3/456 7890\n")
    monkeypatch.setattr(machine, "open", _open_instead_of_proc_loadavg(fake), raising=False)
    assert machine.load_average() == pytest.approx(2.37)


def test_load_average_is_none_where_it_cannot_be_read(monkeypatch, tmp_path):
    monkeypatch.setattr(machine, "open", _open_instead_of_proc_loadavg(tmp_path / "missing"), raising=False)
    assert machine.load_average() is None
    (tmp_path / "garbled").write_text("not a number\n")
    monkeypatch.setattr(machine, "open", _open_instead_of_proc_loadavg(tmp_path / "garbled"), raising=False)
    assert machine.load_average() is None


def test_demo_summary_keeps_the_summary_block_and_drops_pip_noise():
    out = ("[3/4] training\n  step 1\n[4/4] summary\n  RL steps: 58\n  wall time 9.5 min\n"
           "WARNING: Location 'file:///opt/x' is ignored\n  /tmp/pip-build-env/setuptools.py:354: Warning\n  !!\n")
    assert bench_commands.demo_summary(out) == "[4/4] summary\n  RL steps: 58\n  wall time 9.5 min"
    assert bench_commands.demo_summary("no summary here\n") == "no summary here"
