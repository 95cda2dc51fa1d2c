"""QA of how the `ragen` command line behaves in terminals and pipes, run as a user runs it: in a subprocess, with
real pipes.

- a reader that closes the pipe before Python flushes its buffered stdout (`ragen envs | head -0`, `ragen --version
  | true`) ends a listing with status 0 and nothing on stderr (it was "Exception ignored ... BrokenPipeError" and
  status 120: the earlier fix caught the error only while the command ran, and a piped stdout is block-buffered
  unless PYTHONUNBUFFERED is set);
- a command whose output must not pass for complete (`ragen verify | head`) ends with one line on stderr and status
  141 (it was a BrokenPipeError traceback and status 1); `--help` into a closed pipe is quiet for every command;
  a BrokenPipeError that is not the reader's doing (stdout still open) still propagates;
- Ctrl-C while a command's modules import is one line and status 130 (it was a KeyboardInterrupt traceback);
- text that stdout's encoding cannot write (an ASCII locale) is written as backslash escapes (it was a
  UnicodeEncodeError traceback: `ragen configs webshop_tiny`, a `ragen play` refusal quoting a typed 'é');
- `ragen play`'s `config error:` line is on stderr, the game alone on stdout (it was on stdout: `ragen play nope >
  game.txt` showed nothing and left the error in the file);
- `ragen`, `python -m ragen_core.apps.cli` and the package metadata agree (`--version`, a listing);
- the env demo prints the env's text verbatim in a colour terminal (rich read it as markup and bolded its digits).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAGEN = Path(sys.executable).with_name("ragen")
CLI = [sys.executable, "-m", "ragen_core.apps.cli"]


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: stdout block-buffered into a pipe (no PYTHONUNBUFFERED), no coverage."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "PYTHONIOENCODING")}
    env.update(extra)
    return env


def _into_closed_pipe(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    """Run `argv` with stdout a pipe whose reader is gone before the first byte (`| head -0`, `| true`)."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(**env))
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, proc.returncode, b"", err.decode("utf-8", "replace"))


def _run(argv: list[str], stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, input=stdin, capture_output=True, env=_env(**env), timeout=300)


# ------------------------------------------------------------------------------------------------ closed pipes
@pytest.mark.parametrize("argv", [
    [str(RAGEN), "envs"], [str(RAGEN), "configs"], [str(RAGEN), "configs", "bandit_tiny"], [str(RAGEN), "--version"],
    [str(RAGEN), "--help"], [*CLI, "envs", "--markdown"], [sys.executable, "-m", "ragen_core.apps.configs"],
    [str(RAGEN), "train", "--help"],
])
def test_a_listing_into_a_closed_pipe_ends_quietly_with_status_0(argv):
    proc = _into_closed_pipe(argv)
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr)


def test_a_command_whose_output_was_cut_says_so_in_one_line_and_exits_141():
    """`ragen verify --quick | head -0`: the checks' first progress line meets the closed pipe."""
    proc = _into_closed_pipe([str(RAGEN), "verify", "--quick"], OMP_NUM_THREADS="1")
    assert proc.returncode == 141, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("ragen verify: stopped: its output was closed"), proc.stderr


_GUARDED = """
import sys
from ragen_core.apps.cli import guarded

def call():
    print("x" * 100_000)  # more than a pipe holds: the write itself meets the closed reader
    return 0

def elsewhere():
    raise BrokenPipeError(32, "a worker's pipe")

sys.exit(guarded("ragen demo", call if sys.argv[1] == "stdout" else elsewhere, quiet_on_closed_pipe=False))
"""


def test_a_broken_pipe_that_is_not_stdout_still_propagates():
    """Only the reader's closing is a closed pipe: a socket's or worker's BrokenPipeError stays a traceback."""
    cut = _into_closed_pipe([sys.executable, "-c", _GUARDED, "stdout"])
    assert cut.returncode == 141 and cut.stderr.startswith("ragen demo: stopped"), cut.stderr
    other = _run([sys.executable, "-c", _GUARDED, "elsewhere"])
    assert other.returncode == 1 and b"BrokenPipeError: [Errno 32] a worker's pipe" in other.stderr, other.stderr


# ------------------------------------------------------------------------------------------------ Ctrl-C
_INTERRUPTED_IMPORT = """
import os, signal, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a suite started in the background ignores SIGINT
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the command's modules import (torch takes seconds)
time.sleep(60)
"""


def test_ctrl_c_while_a_command_imports_is_one_line_and_status_130(tmp_path):
    (tmp_path / "slow_command_qa.py").write_text(_INTERRUPTED_IMPORT)
    code = ("import sys; from ragen_core.apps import cli; "
            "cli.COMMANDS['slow'] = cli.Command('slow_command_qa', 'a command whose import is interrupted'); "
            "sys.exit(cli.main(['slow']))")
    proc = _run([sys.executable, "-c", code], PYTHONPATH=str(tmp_path))
    err = proc.stderr.decode()
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err)
    assert err.strip() == "ragen slow: interrupted", err


# ------------------------------------------------------------------------------------------------ encodings
def test_text_an_ascii_stdout_cannot_write_is_escaped_not_a_traceback():
    """The WebShop preset's categories hold '›' (U+203A)."""
    proc = _run([str(RAGEN), "configs", "webshop_tiny"], PYTHONIOENCODING="ascii")
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert b"electronics \\u203a audio" in proc.stdout


def test_play_quoting_a_typed_non_ascii_answer_on_an_ascii_stdout():
    proc = _run([str(RAGEN), "play", "ragen/Countdown-v0", "--seed", "0"], stdin="é\nq\n".encode(),
                PYTHONIOENCODING="ascii")
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert b"refused '\\ufffd" in proc.stdout  # read as U+FFFD (ASCII stdin), written as its escape


# ------------------------------------------------------------------------------------------------ play
@pytest.mark.parametrize("args, says", [
    (["ragen/Sokoban-v1"], "config error: cannot make 'ragen/Sokoban-v1'"),
    (["CartPole-v1"], "config error: CartPole-v1 is not a text env"),
    (["ragen/Sokoban-v0", "bogus=1"], "config error: ragen/Sokoban-v0 with {'bogus': 1}"),
    (["ragen/Sokoban-v0", "min_solution_len=99"], "no 6x6 room with 1 boxes reached"),
    pytest.param(["ragen/Sokoban-v0", "render_mode=human"], "cannot start an episode",
                 marks=pytest.mark.skipif(importlib.util.find_spec("pygame") is not None, reason="pygame would play")),
])
def test_play_config_errors_are_one_line_on_stderr_and_nothing_on_stdout(args, says):
    # (gymnasium warns that it wraps the env for human rendering: its warning, not the error, is left out)
    proc = _run([str(RAGEN), "play", *args], stdin=b"q\n", PYTHONWARNINGS="ignore")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b"", (proc.returncode, proc.stdout.decode())
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_play_end_of_input_and_quit_exit_0_with_the_game_on_stdout():
    for stdin in (b"", b"\n\n   \nUp\n", b"Up\nq\n"):
        proc = _run([str(RAGEN), "play", "ragen/Sokoban-v0", "--seed", "1"], stdin=stdin)
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()
        assert b"ragen/Sokoban-v0, seed 1" in proc.stdout


# ------------------------------------------------------------------------------------------------ entry points
def test_the_script_python_m_and_the_metadata_agree():
    version = f"ragen2 {importlib.metadata.version('ragen2')}\n".encode()
    assert _run([str(RAGEN), "--version"]).stdout == version == _run([*CLI, "--version"]).stdout
    assert _run([str(RAGEN), "envs"]).stdout == _run([*CLI, "envs"]).stdout != b""


# ------------------------------------------------------------------------------------------------ env demo
def test_the_env_demo_prints_the_envs_text_as_it_is_in_a_colour_terminal():
    """rich read the observation as markup and highlighted it: `Board size: ESC[1m6ESC[0m rows` in a terminal (and
    an observation holding `[/]` would be a MarkupError)."""
    proc = _run([sys.executable, "-m", "ragen_core.apps.env_demo", "--episodes", "1", "--max-turns", "1"],
                FORCE_COLOR="1", OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"\nBoard size: 6 rows x 6 cols (zero-indexed).\n" in proc.stdout, proc.stdout[:400]


@pytest.mark.parametrize("closed, stdin", [(0, b""), (1, b"Up\nq\n")])
def test_play_with_stdin_or_stdout_closed_ends_as_at_the_end_of_input(closed, stdin):
    """`ragen play ID <&-` / `>&-` (a daemon, a CI step without a terminal): input()'s RuntimeError "lost sys.stdin"
    / "lost sys.stdout" was a traceback; a closed stdin is the end of input, a closed stdout shows nothing."""
    proc = subprocess.run([str(RAGEN), "play", "ragen/Sokoban-v0", "--seed", "1"], cwd=ROOT, env=_env(),
                          input=None if closed == 0 else stdin, stdout=None if closed == 1 else subprocess.PIPE,
                          stderr=subprocess.PIPE, preexec_fn=lambda: os.close(closed), timeout=300)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()
    if closed == 0:
        assert b"ragen/Sokoban-v0, seed 1" in proc.stdout
