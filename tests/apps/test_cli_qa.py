"""`ragen play | export | reproduce | verify` check their arguments and output paths before doing anything, with
one line and exit status 2; `ragen verify` handles Ctrl-C with one line and exit status 130."""

from __future__ import annotations

import os

import pytest

from ragen_core.apps import play
from ragen_core.apps.export import main as export_main
from ragen_core.apps.reproduce.cli import main as reproduce_main


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_play_refuses_a_negative_seed(capsys):
    assert play.main(["ragen/Sokoban-v0", "--seed", "-1"]) == 2
    cap = capsys.readouterr()
    assert "--seed must be an integer >= 0; got -1" in _one_line(cap.out + cap.err)


@pytest.fixture()
def fake_run(tmp_path):
    """A folder that looks like a run (config.toml, checkpoints/latest.pt) but holds nothing loadable: the output
    path must be checked before anything is loaded from it."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text("")
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    return run


def test_export_checks_out_before_loading_the_policy(tmp_path, fake_run, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, says in ((afile, "it is a file, not a folder"), (afile / "model", f"{afile} is a file, not a folder")):
        assert export_main([str(fake_run), "--out", str(out)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert line.startswith(f"ragen export: --out {out}: ") and says in line
    assert afile.read_text() == "x"


@pytest.mark.parametrize("argv, says", [(["--workers", "0"], "--workers must be an integer >= 1; got 0"),
                                        (["--workers", "-3"], "--workers must be an integer >= 1; got -3"),
                                        (["--envs", ""], "--envs: no env given"),
                                        (["--out", "afile"], "--out afile: it is a file, not a folder"),
                                        (["--report-dir", "afile/x"], "--report-dir afile/x: afile is a file")])
def test_reproduce_checks_every_argument_before_printing_or_creating_anything(tmp_path, monkeypatch, capsys, argv,
                                                                              says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    assert reproduce_main(["--quick", *argv]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and says in _one_line(cap.err)
    assert sorted(os.listdir(tmp_path)) == ["afile"]  # no runs/ folder


def test_verify_checks_its_output_paths_before_running_the_checks(tmp_path, monkeypatch, capsys):
    import theory_checks.__main__ as verify

    def never(**kwargs):
        raise AssertionError("the checks ran before the output paths were checked")

    monkeypatch.setattr(verify, "run_all", never)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for argv, says in ((["--json", str(afile / "x.json")], f"{afile} is a file, not a folder"),
                       (["--json", str(tmp_path)], "it is a folder, not a file"),
                       (["--report", str(afile)], "it is a file, not a folder")):
        assert verify.main(["--quick", *argv], prog="ragen verify") == 2
        line = _one_line(capsys.readouterr().err)
        assert line.startswith(f"ragen verify: {argv[0]} ") and says in line


def test_verify_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    import theory_checks.__main__ as verify

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "run_all", interrupted)
    assert verify.main(["--quick"], prog="ragen verify") == 130
    assert capsys.readouterr().err.strip() == "ragen verify: interrupted"
