"""`ragen eval` refuses what it cannot do before it writes anything: an --out that is a file, lies under one, or is
a non-empty folder holding no evaluation (a training run's); a --device torch cannot use; an empty --envs; a
--config for an env that is not played; and it says so when every requested env is refused. Each is one line and
exit status 2, and leaves the folder as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragen_core.apps.eval import main
from ragen_core.apps.eval.cli import build_parser
from ragen_core.apps.eval.spec import build_spec

QUICK = ["--episodes", "1", "--max-tokens", "8", "--mi-groups", "0", "--no-progress"]


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("ragen eval:") and "Traceback" not in err, err
    return lines[0]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_training_run_folder_or_any_other_non_empty_folder_is_refused_as_out(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "summary.md").write_text("# the run's own summary\n")
    (run / "config.toml").write_text("[env]\n")
    before = _tree(run)
    assert main(["tiny", "--envs", "Bandit-v0", *QUICK, "--out", str(run)]) == 2
    assert "not an evaluation" in _one_error_line(capsys.readouterr().err)
    assert _tree(run) == before


def test_an_out_that_is_a_file_or_under_one_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (afile, afile / "sub"):
        assert main(["tiny", "--envs", "Bandit-v0", *QUICK, "--out", str(out)]) == 2
        assert "is a file, not a folder" in _one_error_line(capsys.readouterr().err)
    assert afile.read_text() == "x"


def test_a_bad_device_leaves_nothing_so_the_corrected_command_runs(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    out = tmp_path / "ev"
    bad = ["bogus"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in bad:
        assert main(["tiny", "--envs", "Bandit-v0", *QUICK, "--out", str(out), "--device", device]) == 2
        assert f"--device {device}".replace("bogus", "'bogus'") in _one_error_line(capsys.readouterr().err)
        assert not out.exists()
    out.mkdir()  # an empty folder is as good as a new one
    assert main(["tiny", "--envs", "Bandit-v0", *QUICK, "--out", str(out), "--device", "cpu"]) == 0
    assert (out / "summary.json").is_file() and (out / "episodes.jsonl").is_file()


@pytest.mark.parametrize("envs", ["", " ", ","])
def test_an_empty_envs_is_refused_not_the_whole_suite(tmp_path, capsys, envs):
    out = tmp_path / "ev"
    assert main(["tiny", "--envs", envs, *QUICK, "--out", str(out)]) == 2
    assert "--envs: no env id given" in _one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_a_config_whose_env_is_not_played_is_refused(tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(["tiny", "--config", "bandit_tiny", "--envs", "Sokoban-v0", *QUICK, "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--config bandit_tiny" in line and "ragen/Bandit-v0" in line and not out.exists()
    # with its env among --envs it applies to that env, and the others keep their defaults (as documented)
    args = build_parser().parse_args(["tiny", "--config", "bandit_tiny", "--envs", "Bandit-v0,Sokoban-v0"])
    spec = build_spec(args, [])
    assert spec.plans["ragen/Bandit-v0"]["source"].startswith("config ")
    assert spec.plans["ragen/Sokoban-v0"]["source"] == "env defaults"


def test_a_run_folder_whose_config_does_not_load_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    (run / "config.toml").write_text("[rollout]\ngroup_size = 'many'\n")
    assert main([str(run), *QUICK, "--out", str(tmp_path / "ev")]) == 2
    _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "ev").exists()


def test_when_every_env_is_refused_nothing_is_evaluated_and_the_status_says_so(tmp_path, capsys):
    from ragen_core.policy import default_tiny_model_dir

    text_only = default_tiny_model_dir(vision=False)  # a transformers folder without an image token
    out = tmp_path / "ev"
    assert main([str(text_only), "--envs", "Sokoban-Vision-v0", *QUICK, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ragen/Sokoban-Vision-v0 refused" in err and "nothing was evaluated" in err and "Traceback" not in err
    assert not out.exists()  # nothing played: the folder made for it is removed, the command can be run again
