"""What an installed user meets first: the shipped presets (`ragen configs`, `ragen train NAME`), `ragen --version`,
the one-line hint when the `train` extra is missing, the torch-free modules, and the numpy reward-variance
pre-check of `ragen diagnose` against the trainer's torch implementation."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragen_core.apps import cli
from ragen_core.apps.diagnose import main as diagnose_main
from ragen_core.apps.diagnose import rv_statistics_np, top_p_kept
from ragen_core.training import presets

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))


# ------------------------------------------------------------------------------------------- presets
def test_configs_lists_every_shipped_config_with_its_first_comment_line(capsys):
    assert cli.main(["configs"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert CONFIGS, "the checkout ships configs/*.toml"
    for path in CONFIGS:
        first = next(line for line in path.read_text().splitlines() if line.strip())
        assert first.startswith("#")
        line = next(x for x in out.splitlines() if x.split() and x.split()[0] == path.stem)
        assert first.lstrip("#").strip() in line
    # Not a terminal: one row per preset and nothing else (`ragen configs | cut -d' ' -f1` lists the names); the
    # footer (the count, where they are) is for a terminal
    assert sorted(x.split()[0] for x in out.splitlines()) == sorted(p.stem for p in CONFIGS)
    assert "presets in" not in out + captured.err


def test_configs_on_a_terminal_ends_with_the_count_and_the_folder(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert cli.main(["configs"]) == 0
    assert f"{len(CONFIGS)} presets in " in capsys.readouterr().out


def test_configs_name_prints_the_preset_and_rejects_unknown_names(capsys):
    assert cli.main(["configs", "bandit_tiny"]) == 0
    assert capsys.readouterr().out == (ROOT / "configs" / "bandit_tiny.toml").read_text()
    assert cli.main(["configs", "no_such_preset"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error:") and "bandit_tiny" in err and err.count("\n") == 1


def test_resolve_config_bare_names_files_and_configs_paths_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: as an installed user outside a checkout
    path, note = presets.resolve_config("bandit_tiny")
    assert path == presets.presets_dir() / "bandit_tiny.toml" and note == ""
    path, note = presets.resolve_config("configs/sokoban_tiny.toml")
    assert path.name == "sokoban_tiny.toml" and path.is_file() and "shipped preset sokoban_tiny" in note
    own = tmp_path / "mine.toml"
    own.write_text("[run]\nsteps = 1\n")
    assert presets.resolve_config(str(own)) == (own, "")
    (tmp_path / "bandit_tiny").write_text("[run]\nsteps = 3\n")  # an existing file wins over a preset name
    assert presets.resolve_config("bandit_tiny") == (Path("bandit_tiny"), "")
    for bad in ("nope", "configs/nope.toml", "elsewhere/bandit_tiny.toml", "../bandit_tiny"):
        with pytest.raises(ValueError, match="sokoban_tiny"):
            presets.resolve_config(bad)


def test_the_wheels_package_data_folder_is_preferred_to_the_checkout(tmp_path, monkeypatch):
    packaged = tmp_path / "_configs"
    packaged.mkdir()
    (packaged / "only_here.toml").write_text("# shipped in the wheel\n[run]\nsteps = 1\n")
    monkeypatch.setattr(presets, "PACKAGED", packaged)
    assert presets.presets_dir() == packaged
    assert presets.list_presets() == [("only_here", packaged / "only_here.toml", "shipped in the wheel")]
    monkeypatch.setattr(presets, "PACKAGED", tmp_path / "missing")
    monkeypatch.setattr(presets, "CHECKOUT", tmp_path / "missing_too")
    assert presets.presets_dir() is None and presets.list_presets() == []


def test_reproduce_gets_the_shipped_configs_only_outside_a_checkout(monkeypatch, capsys):
    from ragen_core.apps import install
    from ragen_core.apps.reproduce import cli as reproduce_cli

    seen: list[object] = []

    def stop(explicit, envs):  # what the study is built from; stop there (nothing runs)
        seen.append(explicit)
        raise FileNotFoundError("stop")

    monkeypatch.setattr(reproduce_cli, "find_configs_dir", stop)
    assert reproduce_cli.default_configs_dir() is None  # a checkout: its own configs/
    assert reproduce_cli.main(["--quick"]) == 2 and seen[-1] is None
    monkeypatch.setattr(install, "checkout_root", lambda: None)
    assert reproduce_cli.default_configs_dir() == str(presets.presets_dir())
    assert reproduce_cli.main(["--quick"]) == 2 and seen[-1] == str(presets.presets_dir())
    assert reproduce_cli.main(["--quick", "--configs-dir", "x"]) == 2 and seen[-1] == "x"
    assert reproduce_cli.main(["--quick", "--configs-dir=x"]) == 2 and seen[-1] == "x"
    assert cli.main(["reproduce", "--quick"]) == 2 and seen[-1] == str(presets.presets_dir())
    assert capsys.readouterr().err.count("ragen reproduce: stop") == 5


# ------------------------------------------------------------------------------------------- version, extras
def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"ragen2 {importlib.metadata.version('ragen2')}"


@pytest.mark.parametrize("command", ["train", "reproduce", "verify", "bench"])
def test_commands_that_need_the_train_extra_say_so_in_one_line(command, capsys, monkeypatch):
    monkeypatch.setattr(cli, "missing_train_modules", lambda modules=cli.TRAIN_EXTRA_MODULES: ["torch"])
    monkeypatch.setattr(importlib, "import_module", lambda name: pytest.fail(f"imported {name}"))
    assert cli.main([command, "bandit_tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ragen2[train]'" in err and "torch" in err


def test_a_missing_module_found_late_is_the_same_one_line(capsys, monkeypatch):
    def broken(name):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")

    monkeypatch.setattr(importlib, "import_module", broken)
    assert cli.main(["train", "bandit_tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ragen2[train]" in err and "matplotlib" in err


def test_diagnose_model_needs_a_local_folder_and_the_extra(tmp_path, capsys, monkeypatch):
    sample = ROOT / "examples" / "rollouts_sample.jsonl"
    for bad in ("tiny", str(tmp_path / "nonexistent")):
        assert diagnose_main([str(sample), "--model", bad]) == 2
        err = capsys.readouterr().err
        assert "local folder" in err and err.count("\n") == 1
    from ragen_core.apps import install

    monkeypatch.setattr(install, "missing_train_modules", lambda modules=install.TRAIN_EXTRA_MODULES: ["torch"])
    assert diagnose_main([str(sample), "--model", str(tmp_path)]) == 2
    assert "ragen2[train]" in capsys.readouterr().err


def test_play_bad_kwargs_are_one_config_error_line(capsys):
    for args in (["play", "ragen/Sokoban-v0", "bogus=1"], ["play", "ragen/Sokoban-v0", "num_boxes=abc"],
                 ["play", "ragen/Nope-v0"], ["play", "ragen/Sokoban-v0", "num_boxes"]):
        assert cli.main(args) == 2, args
        cap = capsys.readouterr()
        text = cap.out + cap.err
        assert text.startswith("config error:") and text.count("\n") == 1 and "Traceback" not in text, args


def test_torch_free_modules_import_no_torch():
    """The base install's modules: the envs, the CLI, play, presets and diagnose load no torch, transformers,
    rich or matplotlib (a fresh interpreter, so nothing is preloaded)."""
    code = ("import sys, ragen_envs, ragen_core.apps.cli, ragen_core.training.presets, ragen_core.apps.play, "
            "ragen_core.apps.diagnose, ragen_core.apps.env_demo\n"
            "print(sorted(m for m in ('torch', 'transformers', 'rich', 'matplotlib', 'tokenizers') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------- numpy pre-check
def _variance_cases(rng: np.random.Generator, n: int):
    """Random per-group variance vectors with the hard cases: ties, zeros, NaN, all-zero, one group."""
    yield np.array([0.0])
    yield np.array([0.0, 0.0, 0.0])
    yield np.array([math.nan, 0.25])
    yield np.array([0.25, 0.25, 0.25, 0.0])
    for _ in range(n):
        p = int(rng.integers(1, 20))
        v = rng.choice([0.0, 0.0, 0.25, 0.1875, 1.0, rng.random(), rng.random() * 1e-11], size=p)
        if rng.random() < 0.3:
            v[rng.integers(0, p)] = math.nan
        yield v.astype(np.float64)


def test_numpy_precheck_equals_the_trainers_torch_rule():
    torch = pytest.importorskip("torch")
    from ragen_core.math.filtering import rv_statistics, select_groups

    rng = np.random.default_rng(0)
    n = 0
    for v in _variance_cases(rng, 300):
        ref = rv_statistics(torch.tensor(v))
        got = rv_statistics_np(v)
        for k in ("rv_mean", "rv_std", "rv_heterogeneity", "zero_fraction", "n_groups", "n_nan"):
            assert got[k] == pytest.approx(ref[k], rel=1e-12, abs=1e-15, nan_ok=True), (k, v)
        for rho in (0.1, 0.5, 0.9, 1.0):
            for scores in (v, np.sqrt(v)):
                kept = select_groups(torch.tensor(scores), strategy="top_p", value=rho).kept.tolist()
                assert top_p_kept(scores, rho) == kept, (scores, rho)
                n += 1
    assert n > 2000


def test_ragen_help_lists_the_commands_of_the_table_in_order(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ragen ") and "{" + ",".join(cli.COMMANDS) + "}" in out
    for name, command in cli.COMMANDS.items():
        assert re.search(rf"^ +{name} +{re.escape(command.help)}$", out, re.M), name


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_module_has_main_argv_prog_and_its_parser(name):
    module = importlib.import_module(cli.COMMANDS[name].module)
    assert list(inspect.signature(module.main).parameters) == ["argv", "prog"]
    if name != "bench":  # the benchmarks' parser is benchmarks.run_all's own
        assert module.build_parser(f"ragen {name}").prog == f"ragen {name}"


def _needs_checkout(command: str) -> None:
    if command == "bench" and cli.checkout_root() is None:
        pytest.skip("ragen bench runs from a source checkout only")


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_answers_help_naming_the_ragen_command(command, capsys):
    _needs_checkout(command)
    with pytest.raises(SystemExit) as stop:
        cli.main([command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ragen {command} "), out[:200]
    assert "python -m" not in out.splitlines()[0]
    assert sys.argv[0] != f"ragen {command}"  # restored (the benchmarks' parser takes its name from argv[0])


#: What a command requires before a flag is judged (argparse reports a missing positional first).
_REQUIRED = {"play": ["ragen/Sokoban-v0"], "diagnose": ["rollouts.jsonl"], "export": ["RUN_DIR"]}


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_rejects_a_bad_flag_naming_the_ragen_command(command, capsys):
    # A bad argument stops before anything runs, with the usage line of the command the user typed
    # (theory_checks' own parser calls itself `python -m theory_checks`).
    _needs_checkout(command)
    with pytest.raises(SystemExit) as stop:
        cli.main([command, *_REQUIRED.get(command, []), "--no-such-flag"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: ragen {command} "), err[:200]
    assert err.endswith(f"ragen {command}: error: unrecognized arguments: --no-such-flag\n"), err[-200:]
    assert "theory_checks" not in err
    assert sys.argv[0] != f"ragen {command}"  # restored


def test_python_m_apps_train_is_the_train_command():
    """Scripts (the study's runner, the learning benchmark) start runs as `python -m ragen_core.apps.train`: the
    `ragen train` program, its usage and errors included."""
    proc = subprocess.run([sys.executable, "-m", "ragen_core.apps.train", "--no-such-flag"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("usage: ragen train ")
    assert "ragen train: error: unrecognized arguments: --no-such-flag" in proc.stderr


def test_a_closed_pipe_ends_the_listing_quietly(tmp_path, monkeypatch):
    """`ragen configs | head -1`: the reader closes the pipe early; the command ends with status 0, no traceback."""

    class ClosedPipe:
        def __init__(self, fd: int):
            self._fd = fd

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            return self._fd

    with open(tmp_path / "stdout", "w") as target:
        monkeypatch.setattr(sys, "stdout", ClosedPipe(target.fileno()))
        assert cli.main(["configs"]) == 0


def test_a_closed_pipe_ends_a_diagnosis_quietly(tmp_path):
    """`ragen diagnose FILE | head -1` (a real pipe, closed after the first line): status 0 and no traceback."""
    # 20,000 groups: the report's first line is printed before the statistics are computed, the rest after the
    # reader has gone
    rows = [{"group": g, "reward": float(k % 2)} for g in range(20_000) for k in range(2)]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.Popen([sys.executable, "-m", "ragen_core.apps.cli", "diagnose", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `head -1` does
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode()
