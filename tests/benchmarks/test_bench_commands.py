"""benchmarks.bench_commands: the load it records beside its times."""

from pathlib import Path

import pytest

from benchmarks import bench_commands


def test_load_average_is_the_first_field_of_proc_loadavg(monkeypatch, tmp_path):
    fake = tmp_path / "loadavg"
    fake.write_text("2.37 1.90 1.50 3/456 7890\n")
    real_path = bench_commands.Path
    monkeypatch.setattr(bench_commands, "Path", lambda p: real_path(fake) if p == "/proc/loadavg" else real_path(p))
    assert bench_commands._load_average() == pytest.approx(2.37)


def test_load_average_is_none_where_it_cannot_be_read(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_commands, "Path", lambda p: Path(tmp_path / "missing"))
    assert bench_commands._load_average() is None


def test_demo_summary_keeps_the_summary_block_and_drops_pip_noise():
    out = ("[3/4] training\n  step 1\n[4/4] summary\n  RL steps: 58\n  wall time 9.5 min\n"
           "WARNING: Location 'file:///opt/x' is ignored\n  /tmp/pip-build-env/setuptools.py:354: Warning\n  !!\n")
    assert bench_commands.demo_summary(out) == "[4/4] summary\n  RL steps: 58\n  wall time 9.5 min"
    assert bench_commands.demo_summary("no summary here\n") == "no summary here"
