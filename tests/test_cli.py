"""The `ragen` command line: envs listing and the terminal game loop."""

from __future__ import annotations

import io
import subprocess
import sys

from ragen_core import cli
from ragen_core.play import play, wrap_response
from ragen_envs.registration import ENV_SPECS


def test_envs_lists_every_id_with_its_description(capsys):
    assert cli.main(["envs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(ENV_SPECS)
    for spec, line in zip(ENV_SPECS, out):
        assert line.startswith(spec.id) and spec.description in line


def test_console_script_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-c", "from ragen_core.cli import main; raise SystemExit(main(['envs']))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "ragen/Sokoban-v0" in proc.stdout


def test_wrap_response_only_wraps_bare_actions():
    assert wrap_response("Up || Left") == "<think>typed by a person</think><answer>Up || Left</answer>"
    full = "<think>x</think><answer>Up</answer>"
    assert wrap_response(full) == full


def _scripted(lines):
    feed = iter(lines)

    def read_line(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return read_line


def test_play_shows_state_reward_and_info_then_quits():
    out = io.StringIO()
    status = play("ragen/Sokoban-v0", seed=3, read_line=_scripted(["Up", "fly away", "?", "q"]), out=out)
    text = out.getvalue()
    assert status == 0
    assert "Grid Map" in text or "#" in text
    assert text.count("reward:") == 2
    assert "action_is_valid=True" in text or "action_is_valid=False" in text
    assert "format_penalty" in text


def test_play_reports_unknown_ids():
    out = io.StringIO()
    assert play("ragen/Nope-v0", read_line=_scripted([]), out=out) == 2
    assert "ragen envs" in out.getvalue()


def test_play_handles_end_of_input():
    out = io.StringIO()
    assert play("ragen/Bandit-v0", seed=0, read_line=_scripted([]), out=out) == 0


def test_play_accepts_env_kwargs_from_the_command_line():
    assert cli._parse_kwargs(["max_actions=4", "obs_format=grid"]) == {"max_actions": 4, "obs_format": "grid"}


def test_delegated_commands_receive_their_options(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        cli.main(["diagnose", "--help"])
    assert exc.value.code == 0
    assert "--model" in capsys.readouterr().out  # the diagnose parser's own help, not ragen's


def test_diagnose_runs_on_the_shipped_sample(capsys):
    from pathlib import Path

    sample = Path(__file__).resolve().parent.parent / "examples" / "rollouts_sample.jsonl"
    assert cli.main(["diagnose", str(sample)]) == 0
    assert "RV heterogeneity" in capsys.readouterr().out
