"""QA of the small apps: `ragen play`, `ragen export`, `ragen envs`, `ragen configs` and the env demo, with the
inputs their first tests left out.

- `ragen play ID --seed S key=value` (the README's order) takes the kwargs; an id that is not a text env, an env
  that cannot be built or started with the kwargs, an unknown id (with the closest ids) and an empty kwarg name are
  one `config error:` line and status 2; bytes that are not UTF-8 on a strictly decoded stdin are not a traceback;
- `ragen export` writes a folder that transformers loads and that generates the run's policy's tokens; a model
  folder replaced since the run, or a damaged one, is one line saying so (not "cannot read the checkpoint" or
  "cannot write"); an export that fails while writing leaves `--out` as it was, never half-written;
- `python -m ragen_core.apps.envs | head` and `... configs | head` end quietly, as `ragen envs` does;
- `ragen configs NAME` suggests the closest preset; the env demo says which episodes its turn cap cut.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_core.apps import configs as configs_mod
from ragen_core.apps import env_demo
from ragen_core.apps import play as play_mod
from ragen_core.apps.export import EXPORT_INFO
from ragen_core.apps.export import main as export_main

ROOT = Path(__file__).resolve().parents[2]
BANDIT_CORPUS = "Bandit arm teacher engineer gambler Choose one arm <answer> </answer>"


def _one_line(text: str) -> str:
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return text.strip()


def _scripted(lines):
    feed = iter(lines)

    def read_line(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return read_line


def _play(env_id: str, **kwargs) -> tuple[int, str]:
    out = io.StringIO()
    status = play_mod.play(env_id, seed=kwargs.pop("seed", 0), kwargs=kwargs, read_line=_scripted(["q"]), out=out)
    return status, out.getvalue()


# ------------------------------------------------------------------------------------------------ play
def test_play_takes_kwargs_after_the_seed_as_documented(monkeypatch, capsys):
    """`ragen play ID [--seed S] [key=value ...]` (README): the kwargs after --seed were 'unrecognized arguments'."""
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    assert play_mod.main(["ragen/Sokoban-v0", "--seed", "4", "dim_room=(7,8)"]) == 0
    out = capsys.readouterr().out
    assert "ragen/Sokoban-v0, seed 4" in out and "Board size: 7 rows x 8 cols" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    assert play_mod.main(["ragen/Sokoban-v0", "dim_room=(7,8)", "--seed", "4", "num_boxes=1"]) == 0
    assert "Board size: 7 rows x 8 cols" in capsys.readouterr().out


def test_play_refuses_an_env_that_is_not_a_text_env():
    status, out = _play("CartPole-v1")  # a KeyError traceback ('instructions') before
    assert status == 2
    line = _one_line(out)
    assert line.startswith("config error: CartPole-v1 is not a text env") and "ragen envs" in line


@pytest.mark.parametrize("kwargs, says", [
    ({"min_solution_len": 100}, "lower min_solution_len"),  # RuntimeError of the level generator, in gym.make
    ({"render_mode": "human"}, "cannot start an episode (seed 0): pygame is not installed"),  # at the first reset
])
def test_play_says_in_one_line_why_an_env_cannot_run_with_these_kwargs(kwargs, says):
    if "render_mode" in kwargs and __import__("importlib").util.find_spec("pygame") is not None:
        pytest.skip("pygame is installed: the human window opens")
    status, out = _play("ragen/Sokoban-v0", **kwargs)
    assert status == 2
    line = _one_line(out)
    assert line.startswith(f"config error: ragen/Sokoban-v0 with {kwargs}: ") and says in line


@pytest.mark.parametrize("env_id, meant", [("Sokoban-v0", "ragen/Sokoban-v0"), ("ragen/Sokoban", "ragen/Sokoban-v0"),
                                           ("ragen/sudoku-v0", "ragen/Sudoku-v0"), ("2048-v0", "ragen/2048-v0"),
                                           ("ragen/WebShop-v1", "ragen/WebShop-v0")])
def test_an_unknown_id_gets_the_closest_registered_id(env_id, meant):
    status, out = _play(env_id)
    assert status == 2
    assert f"(did you mean {meant!r}" in _one_line(out)


def test_an_empty_kwarg_name_is_a_config_error(capsys):
    with pytest.raises(ValueError, match="no name before '='"):
        play_mod.parse_kwargs(["=3"])
    assert play_mod.main(["ragen/Sokoban-v0", "=3"]) == 2
    assert "config error: env kwarg '=3' has no name" in _one_line(capsys.readouterr().err)


def test_undecodable_typed_bytes_are_not_a_traceback():
    """A strictly decoding UTF-8 stdin (any UTF-8 locale; PYTHONIOENCODING here) and a Latin-1 byte typed or piped
    in: UnicodeDecodeError out of input() before; now the line is read with U+FFFD and refused as an action."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "ragen_core.apps.play", "ragen/Sokoban-v0", "--seed", "1"],
                          input=b"Up\n\xff\xe9 Left\nq\n", capture_output=True, cwd=ROOT, env=env, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0 and "Traceback" not in err, err
    out = proc.stdout.decode("utf-8")
    assert out.count("reward:") == 2 and "refused '\ufffd\ufffd Left'" in out


def test_tolerate_undecodable_input_reads_bad_bytes_as_replacement_characters():
    stream = io.TextIOWrapper(io.BytesIO(b"\xffUp\n"), encoding="utf-8", errors="strict")
    play_mod.tolerate_undecodable_input(stream)
    assert stream.readline() == "\ufffdUp\n"
    play_mod.tolerate_undecodable_input(io.StringIO("q\n"))  # no reconfigure (a test's stream): left as it is


# ------------------------------------------------------------------------------------------------ envs, configs
@pytest.mark.parametrize("argv", [["ragen_core.apps.envs"], ["ragen_core.apps.envs", "--markdown"],
                                  ["ragen_core.apps.configs"]])
def test_python_m_listing_into_a_closed_pipe_ends_quietly(argv):
    """`python -m ragen_core.apps.envs | head -0`: a BrokenPipeError traceback and status 1 before."""
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode()


@pytest.mark.parametrize("name, meant", [("bandit-tiny", "bandit_tiny"), ("Sokoban_Tiny", "sokoban_tiny"),
                                         ("configs/bandit_tiny.toml", "bandit_tiny"), ("bandit_tin", "bandit_tiny")])
def test_configs_suggests_the_closest_preset(name, meant, capsys):
    assert configs_mod.main([name]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"config error: no shipped preset {name!r} (did you mean {meant!r}?); presets: ")


def test_configs_with_an_empty_name_is_not_the_listing(capsys):
    assert configs_mod.main([""]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and _one_line(cap.err).startswith("config error: no shipped preset ''")


# ------------------------------------------------------------------------------------------------ env demo
def test_the_demo_says_which_episodes_its_turn_cap_cut():
    import gymnasium as gym

    env = gym.make("ragen/2048-v0")
    cut = env_demo.play_episode(env, env_demo.oracle_answer, seed=1000, max_turns=3)
    assert cut.cut and not cut.success
    assert env_demo.run_episode(env, env_demo.oracle_answer, seed=1000, max_turns=3) == (cut.success, cut.total)
    bandit = gym.make("ragen/Bandit-v0")
    assert not env_demo.play_episode(bandit, env_demo.oracle_answer, seed=0, max_turns=3).cut
    note = env_demo.cut_note("ragen/2048-v0", {"oracle": 2, "random": 0}, 2, 20)
    assert note.startswith("ragen/2048-v0: 2 of 2 oracle episodes stopped at 20 turns") and "--max-turns" in note
    assert env_demo.cut_note("ragen/Bandit-v0", {"oracle": 0, "random": 0}, 2, 20) is None
    with pytest.raises(SystemExit):
        env_demo.main(["--max-turns", "0"])


# ------------------------------------------------------------------------------------------------ export
@pytest.fixture(scope="module")
def tiny_run(make_tiny_model, tmp_path_factory) -> Path:
    """A one-step tiny Bandit run (a real checkpoint to export), trained here in a few seconds."""
    from ragen_core.apps.train import main as train_main

    folder = tmp_path_factory.mktemp("small_apps_export")
    config = folder / "base.toml"
    config.write_text("[run]\nseed = 3\n")
    run_dir = folder / "run"
    args = [f"model.path={make_tiny_model(BANDIT_CORPUS)}", "env.id=ragen/Bandit-v0", "rollout.groups=2",
            "rollout.group_size=2", "rollout.max_turns=1", "rollout.max_new_tokens=8", "run.steps=1",
            "run.device=cpu", "run.progress=false", "algo.name=grpo", "algo.mini_batch_size=4",
            "algo.micro_batch_size=4", "eval.episodes=2", "eval.every=1", "mi.every=0",
            "warm_start.sft_episodes=2", "warm_start.epochs=1", "warm_start.batch_size=2"]
    assert train_main([str(config), *args, "--run-dir", str(run_dir)]) == 0
    return run_dir


def _copy_run_with_model(run: Path, dest: Path, model_path: Path) -> Path:
    """A copy of `run` whose config.toml names `model_path` (the model folder replaced or moved since the run)."""
    import shutil

    from ragen_core.training.config import load_config

    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("model"))
    old = str(load_config(run / "config.toml").model.path)
    text = (dest / "config.toml").read_text()
    assert f'"{old}"' in text
    (dest / "config.toml").write_text(text.replace(f'"{old}"', f'"{model_path}"'))
    return dest


def test_the_export_loads_in_transformers_and_generates_the_policys_tokens(tiny_run, tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragen_core.policy import load_policy
    from ragen_core.training.checkpoint import load_checkpoint
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import policy_path

    out = tmp_path / "exported"
    assert export_main([str(tiny_run), "--out", str(out)]) == 0
    capsys.readouterr()
    cfg = load_config(tiny_run / "config.toml")
    policy = load_policy(policy_path(cfg), dtype=cfg.model.dtype)
    policy.model.load_state_dict(load_checkpoint(tiny_run)["model"])
    model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    ids = tokenizer("Choose one arm <answer>", return_tensors="pt").input_ids
    assert torch.equal(ids, policy.tokenizer("Choose one arm <answer>", return_tensors="pt").input_ids)
    with torch.no_grad():
        ours = model.generate(ids, max_new_tokens=12, do_sample=False)
        theirs = policy.model.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(ours, theirs)


def test_a_model_folder_that_does_not_fit_the_checkpoint_is_named(tiny_run, make_tiny_model, tmp_path, capsys):
    """The config's model folder replaced by a wider model: "cannot read the checkpoint ...: Error(s) in loading
    state_dict for Qwen2ForCausalLM:" before (a line naming nothing, and the checkpoint is fine)."""
    wider = make_tiny_model(BANDIT_CORPUS, hidden=64)
    run = _copy_run_with_model(tiny_run, tmp_path / "run", wider)
    assert export_main([str(run)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"the checkpoint of {run} does not fit the model its config.toml names (model.path = '{wider}'" in line
    assert "size mismatch for " in line and "more)" in line
    assert not (run / "model").exists()


def test_a_damaged_model_folder_is_not_reported_as_a_write_failure(tiny_run, make_tiny_model, tmp_path, capsys):
    damaged = make_tiny_model(BANDIT_CORPUS)
    (damaged / "config.json").write_text("{")
    run = _copy_run_with_model(tiny_run, tmp_path / "run", damaged)
    assert export_main([str(run)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"ragen export: cannot load the model {run / 'config.toml'} names (model.path = ")
    assert "cannot write" not in line


@pytest.mark.parametrize("before", ["absent", "empty", "earlier export"])
def test_an_export_that_fails_while_writing_leaves_out_as_it_was(tiny_run, tmp_path, monkeypatch, capsys, before):
    """A full disk while the tokenizer is written: the folder was left half-written (weights, no tokenizer, no
    ragen_export.json), which the next export then refused as "not empty"; now --out is as it was before."""
    from transformers import PreTrainedTokenizerBase

    out = tmp_path / "out"
    if before == "empty":
        out.mkdir()
    if before == "earlier export":
        assert export_main([str(tiny_run), "--out", str(out)]) == 0
    tree = {p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else None

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(PreTrainedTokenizerBase, "save_pretrained", disk_full)
        assert export_main([str(tiny_run), "--out", str(out)]) == 2
    assert "No space left on device" in _one_line(capsys.readouterr().err)
    assert ({p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else None) == tree
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if before == "absent" else ["out"])  # nothing hidden
    assert export_main([str(tiny_run), "--out", str(out)]) == 0  # and the next export goes through
    assert (out / EXPORT_INFO).is_file() and (out / "tokenizer.json").is_file()


def test_the_env_demo_on_an_install_without_rich_says_which_extra(monkeypatch, capsys):
    """On a base install (the envs only) the demo failed with ModuleNotFoundError: rich."""
    from ragen_core.apps import env_demo, install

    real = install.missing_train_modules
    monkeypatch.setattr(install, "missing_train_modules", lambda modules=(): ["rich"] if "rich" in modules else
                        real(modules))
    assert env_demo.main(["--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "missing: rich" in err and "ragen2[train]" in err
