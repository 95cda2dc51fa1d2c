"""The `ragen train` commands the training docs show parse and pass every config check (no training), in the order
a reader runs them, and the docs' list of resume keys is the code's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from ragen_core.apps import train as train_app
from ragen_core.training.config import RESUME_KEYS, dump_toml
from ragen_core.training.trainer import check_runnable

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "train.md", ROOT / "docs" / "training.md"]


def shown_commands(page: Path) -> list[list[str]]:
    """The `ragen train ...` command lines of the page's fenced code blocks (line continuations joined, comments
    dropped), as argument lists after `ragen train`."""
    commands = []
    # Fences open and close at the start of a line, whatever their language: a pattern for bash fences alone paired a
    # Python block's closing fence with the next opening one and skipped the commands between them.
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", page.read_text(), flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["ragen", "train"]:
                commands.append(words[2:])
    return commands


def test_the_docs_show_train_commands_and_the_extraction_finds_them():
    commands = [c for page in PAGES for c in shown_commands(page)]
    assert len(commands) >= 6
    assert ["--resume", "runs/sokoban-tiny"] in commands


def test_every_train_command_in_the_docs_passes_the_config_checks(tmp_path, monkeypatch, capsys):
    """Each command as `ragen train` checks it before training (`_prepare`): the arguments, the config and its
    overrides, the resume rules; a new run then leaves a run folder with its config and a step-0 checkpoint, as a
    real start does after its warm start, for the resume commands that follow it. Only what the docs cannot provide
    is skipped: the model folder and the env (`preflight`, replaced by the trainer's own checks)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.setattr(train_app, "preflight", lambda cfg: check_runnable(_on_cpu(cfg)))
    ran = 0
    for page in PAGES:
        for argv in shown_commands(page):
            args = train_app.build_parser().parse_intermixed_args(argv)  # as `main` parses
            try:
                cfg, run_dir, _ = train_app._prepare(args)
            except Exception as e:  # noqa: BLE001 - the failing command, named
                pytest.fail(f"{page.name}: `ragen train {shlex.join(argv)}` fails: {type(e).__name__}: {e}")
            if not args.resume:
                (run_dir / "checkpoints").mkdir(parents=True)
                (run_dir / "config.toml").write_text(dump_toml(cfg))
                torch.save({"step": 0, "model": {}}, run_dir / "checkpoints" / "latest.pt")
            ran += 1
    assert ran >= 6


def _on_cpu(cfg):
    cfg.run.device = "cpu"  # a GPU config's device is not this machine's to check
    return cfg


def test_the_docs_list_of_resume_keys_is_the_codes():
    text = (ROOT / "docs" / "train.md").read_text()
    block = text.split("<!-- resume-keys:start -->", 1)[1].split("<!-- resume-keys:end -->", 1)[0]
    assert re.findall(r"`([a-z_]+\.[a-z_]+)`", block) == list(RESUME_KEYS)


def test_help_lists_the_same_resume_keys(capsys):
    with pytest.raises(SystemExit):
        train_app.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for key in RESUME_KEYS:
        assert key in out, key


def test_overrides_may_follow_a_flag(tmp_path, capsys):
    """`ragen train CONFIG --run-dir D key=value` is the order most command lines accept; argparse's default parse
    refused it ("unrecognized arguments"). The override must reach the config: a bad value is its config error."""
    status = train_app.main(["sokoban_tiny", "--run-dir", str(tmp_path / "run"), "run.steps=-3"])
    assert status == 2
    assert "run.steps" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
