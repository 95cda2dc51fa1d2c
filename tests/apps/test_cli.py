"""The `ragen` command line: envs listing, the terminal game loop, delegated commands, the configs' examples."""

from __future__ import annotations

import builtins
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_core.apps import cli
from ragen_core.apps import play as play_mod
from ragen_core.apps.play import play, wrap_response
from ragen_envs.registration import ENV_SPECS


def test_envs_lists_every_id_with_its_description(capsys):
    assert cli.main(["envs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(ENV_SPECS)
    for spec, line in zip(ENV_SPECS, out):
        assert line.startswith(spec.id) and spec.description in line


def test_console_script_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-c", "from ragen_core.apps.cli import main; raise SystemExit(main(['envs']))"],
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
    assert play_mod.parse_kwargs(["max_actions=4", "obs_format=grid"]) == {"max_actions": 4, "obs_format": "grid"}


def test_delegated_commands_receive_their_options(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["diagnose", "--help"])
    assert exc.value.code == 0
    assert "--model" in capsys.readouterr().out  # the diagnose parser's own help, not ragen's


def test_diagnose_runs_on_the_shipped_sample(capsys):
    sample = Path(__file__).resolve().parents[2] / "examples" / "rollouts_sample.jsonl"
    assert cli.main(["diagnose", str(sample)]) == 0
    assert "RV heterogeneity" in capsys.readouterr().out


ROOT = Path(__file__).resolve().parents[2]


def _run_python(code: str, cwd: Path, *extra_path: Path) -> subprocess.CompletedProcess:
    """`python -c code` in `cwd` (so the repository root is not on sys.path unless given in `extra_path`)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in extra_path)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_bench_runs_from_a_checkout_in_any_directory(tmp_path):
    """The console script has no checkout on sys.path; `ragen bench` finds the benchmarks next to ragen_core."""
    if cli.checkout_root() != ROOT:
        pytest.skip("ragen_core is imported from an installed copy, not from this checkout")
    proc = _run_python("from ragen_core.apps.cli import main; main(['bench', '--help'])", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout  # run_all's own parser


def test_bench_without_a_checkout_says_it_needs_one(tmp_path):
    """An installed wheel has ragen_core without benchmarks/ next to it: a clear message, status 2."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "ragen_core", site / "ragen_core", ignore=shutil.ignore_patterns("__pycache__"))
    proc = _run_python("import ragen_core.apps.cli as c; print(c.__file__); raise SystemExit(c.main(['bench']))",
                       tmp_path, site)
    assert proc.stdout.startswith(str(site)), proc.stdout  # the copy, not the checkout
    assert proc.returncode == 2, proc.stderr
    assert "needs a source checkout" in proc.stderr and "make bench" in proc.stderr


def test_enable_line_editing_imports_readline_where_it_exists(monkeypatch):
    if importlib.util.find_spec("readline") is None:  # Windows
        assert play_mod.enable_line_editing() is False
    else:
        assert play_mod.enable_line_editing() is True
        assert "readline" in sys.modules
    monkeypatch.setitem(sys.modules, "readline", None)  # what an interpreter without readline does
    assert play_mod.enable_line_editing() is False


def test_play_reads_with_input_and_line_editing_by_default(monkeypatch):
    calls = []
    monkeypatch.setattr(play_mod, "enable_line_editing", lambda: calls.append("editing") or True)
    monkeypatch.setattr(builtins, "input", _scripted(["q"]))
    assert play("ragen/Bandit-v0", seed=0, out=io.StringIO()) == 0
    assert calls == ["editing"]


@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_config_comments_name_their_own_file(config):
    """A config's `ragen train configs/X.toml` example runs that config, not another one."""
    named = re.findall(r"configs/[\w.\-]+\.toml", config.read_text())
    assert all(n == f"configs/{config.name}" for n in named), named


@pytest.mark.parametrize("env_id", ["ragen/PocketCube-v0", "ragen/Sudoku-v0", "ragen/2048-v0", "ragen/Sokoban-v0",
                                    "ragen/SearchQA-v0", "ragen/WebShop-v0", "ragen/MetaMathQA-v0", "ragen/Code-v0"])
def test_play_shows_an_example_the_env_accepts(env_id):
    import gymnasium as gym

    from ragen_core.apps.play import example_action, wrap_response

    env = gym.make(env_id)
    env.reset(seed=0)
    example = example_action(env)
    _, _, _, _, info = env.step(wrap_response(example))
    assert info["format_error"] is None or not info["format_error"], (env_id, example, info)
    assert not info["dropped_actions"], (env_id, example)
    out = io.StringIO()
    play(env_id, seed=0, read_line=_scripted(["q"]), out=out)
    assert f"e.g. {example}" in out.getvalue()


def test_play_question_mark_shows_the_state_again_and_ctrl_c_is_one_line():
    out = io.StringIO()
    play("ragen/Sokoban-v0", seed=3, read_line=_scripted(["?", "q"]), out=out)
    text = out.getvalue()
    assert text.count("Player") >= 2  # the state printed at the start and after `?`

    def interrupt(prompt: str) -> str:
        raise KeyboardInterrupt

    out = io.StringIO()
    assert play("ragen/Sokoban-v0", seed=3, read_line=interrupt, out=out) == 130
    assert out.getvalue().rstrip().endswith("(interrupted: bye)")


def test_a_misspelt_env_kwarg_gets_the_closest_names():
    out = io.StringIO()
    assert play("ragen/Sokoban-v0", kwargs={"dim_rom": (5, 5)}, read_line=_scripted([]), out=out) == 2
    line = out.getvalue().strip()
    assert len(line.splitlines()) == 1 and "did you mean 'dim_room'?" in line and "it accepts:" in line
    out = io.StringIO()
    play("ragen/Sudoko-v0", read_line=_scripted([]), out=out)
    assert "?." not in out.getvalue() and "Sudoku" in out.getvalue()


def test_play_says_why_a_piece_was_refused():
    out = io.StringIO()
    play("ragen/PocketCube-v0", seed=0, read_line=_scripted(["U3 || R", "q"]), out=out)
    assert "refused 'U3': '3' after the face is not part of a turn" in out.getvalue()
