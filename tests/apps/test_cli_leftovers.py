"""What the last review left open, for every entry point of each class:

- seeds have one upper bound, 2**32 - 1 (`MAX_SEED`), checked wherever a seed enters (the config's seed keys,
  `ragen eval --seed/--episodes`, `ragen reproduce --first-seed/--seeds`, `ragen play --seed`): a seed above it is
  one line and exit status 2 before anything is made, where it was a traceback in the middle of a run (torch's
  64-bit generator seeds) or accepted; numbers too large for a float or for Python's int parsing are config errors;
- `ragen export --out` takes a new or empty folder or an earlier export (replaced as a whole, nothing of the
  earlier one left mixed in); any other non-empty folder is refused and left as it was;
- a comma-separated list option with an empty entry (`--envs 'a,'`) says so, for `ragen reproduce`, `ragen eval`
  and `ragen bench` (whose `--only` / `--full` also refuse an empty list and unknown names).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch

from ragen_core.apps import play
from ragen_core.apps.arguments import comma_list
from ragen_core.apps.eval.cli import main as eval_main
from ragen_core.apps.export import EXPORT_INFO
from ragen_core.apps.export import main as export_main
from ragen_core.apps.reproduce.cli import main as reproduce_main
from ragen_core.apps.train import main as train_main
from ragen_core.training import config as config_mod
from ragen_core.training.config import MAX_SEED, SEED_KEYS, ConfigError, load_config, numeric_keys

TOP = 2**32 - 1  # the documented bound, written out: the tests do not read it from the code under test


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# ------------------------------------------------------------------------------------------------ seeds
def test_the_bound_is_the_documented_one_everywhere():
    assert MAX_SEED == TOP and play.MAX_SEED is MAX_SEED  # one definition (ragen_envs.validation: no torch)
    assert set(SEED_KEYS) == {key for key in numeric_keys() if key.endswith("seed")}


def test_the_bound_keeps_every_derived_torch_seed_in_range():
    """At the bound, the trainer's derived seeds (run.seed + offsets, the warm start's warm_start.seed +
    1_000_003 * run.seed, the probe's 1_000_003 * (run.seed + 1) + step) are seeds torch takes; one above what the
    bound lets through to torch (2**64) is what failed before."""
    for seed in (TOP + 3, TOP + 20_000 + 10**6, TOP + 1_000_003 * TOP, 1_000_003 * (TOP + 1) + 10**6):
        torch.Generator().manual_seed(seed)
    with pytest.raises((RuntimeError, ValueError)):
        torch.Generator().manual_seed(2**64)


@pytest.mark.parametrize("key", SEED_KEYS)
def test_every_seed_key_takes_the_bound_and_refuses_one_above(key):
    load_config(None, [f"{key}={TOP}", "env.train_seed=10000" if key == "env.val_seed" else "run.seed=0"])
    for bad in (TOP + 1, 2**64, 10**400):
        with pytest.raises(ConfigError) as err:
            load_config(None, [f"{key}={bad}"])
        text = str(err.value)
        assert text.startswith(f"{key} must be an integer in [0, {TOP}]") and len(text) < 200, text


@pytest.mark.parametrize("over", ["run.seed=18446744073709551616", "warm_start.seed=9223372036854775808",
                                  "run.seed=" + "1" * 5000, "algo.lr=" + str(10**400)])
def test_train_refuses_huge_numbers_in_one_line_before_the_run_folder(tmp_path, capsys, over):
    config = tmp_path / "base.toml"
    config.write_text("[run]\nseed = 3\n")
    out_dir = tmp_path / "runs"
    assert train_main([str(config), "model.path=tiny", "run.device=cpu", f"run.out_dir={out_dir}", over]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"config error: {over.split('=')[0]}") and len(line) < 300, line
    assert not out_dir.exists()


def test_a_config_file_with_a_huge_integer_is_one_config_error(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("[run]\nseed = " + "7" * 5000 + "\n")
    with pytest.raises(ConfigError, match="digits"):
        load_config(path)


def test_the_numbers_of_other_keys_read_as_before():
    assert config_mod.BOUNDS["rollout.top_p"].describe(integer=False) == "a finite number in (0, 1]"
    assert config_mod.BOUNDS["algo.dual_clip"].describe(integer=False) == "0 or a finite number > 1"
    assert config_mod.BOUNDS["mi.probe_prompts"].describe(integer=True) == "0 or an integer in [2, 65535]"
    assert load_config(None, ["run.steps=12", "algo.lr=3"]).algo.lr == 3.0


@pytest.mark.parametrize("argv, says", [
    (["--seed", str(TOP + 1), "--episodes", "1"], f"--seed must be an integer <= {TOP}"),
    (["--seed", str(TOP), "--episodes", "2"], f"--seed {TOP} with --episodes 2 reaches seed {TOP + 1}"),
    (["--seed", str(2**64)], f"--seed must be an integer <= {TOP}"),
    (["--seed", "-1"], "--seed must be an integer >= 0; got -1"),
])
def test_eval_refuses_seeds_above_the_bound_before_its_folder(tmp_path, capsys, argv, says):
    out = tmp_path / "ev"
    assert eval_main(["tiny", "--envs", "Bandit-v0", "--temperature", "0", "--out", str(out), *argv]) == 2
    assert says in _one_line(capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("argv, says", [
    (["--first-seed", str(TOP), "--seeds", "2"], f"--first-seed {TOP} with --seeds 2 reaches seed {TOP + 1}"),
    (["--first-seed", str(2**64), "--seeds", "1"], f"--first-seed must be an integer <= {TOP}"),
])
def test_reproduce_refuses_seeds_above_the_bound(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    assert reproduce_main(["--quick", "--report-only", "--out", str(tmp_path / "out"), *argv]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and says in _one_line(cap.err)
    assert os.listdir(tmp_path) == []


def test_play_takes_the_bound_and_refuses_one_above(capsys, monkeypatch):
    assert play.main(["ragen/Bandit-v0", "--seed", str(TOP + 1)]) == 2
    cap = capsys.readouterr()
    assert f"--seed must be an integer <= {TOP}" in _one_line(cap.out + cap.err)
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    assert play.main(["ragen/Bandit-v0", "--seed", str(TOP)]) == 0
    assert f"seed {TOP}" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ export
BANDIT_CORPUS = "Bandit arm teacher engineer gambler Choose one arm <answer> </answer>"


@pytest.fixture(scope="module")
def trained_run(make_tiny_model, tmp_path_factory) -> Path:
    """A one-step tiny Bandit run (a real checkpoint to export)."""
    folder = tmp_path_factory.mktemp("export")
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


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_refuses_a_folder_that_is_not_an_earlier_export(trained_run, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    before_run = _tree(trained_run)
    for out in (mine, trained_run):  # a folder of one's own; the run folder itself
        before = _tree(out)
        assert export_main([str(trained_run), "--out", str(out)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert line.startswith(f"ragen export: --out {out}: it is not empty") and "not an earlier export" in line
        assert _tree(out) == before
    assert _tree(trained_run) == before_run


def test_export_replaces_an_earlier_export_as_a_whole(trained_run, tmp_path, capsys):
    fresh, again = tmp_path / "fresh", tmp_path / "again"
    assert export_main([str(trained_run), "--out", str(fresh)]) == 0
    assert export_main([str(trained_run), "--out", str(again)]) == 0
    # files an earlier export of another model could hold: a weight shard, another tokenizer's vocabulary
    (again / "model-00002-of-00002.safetensors").write_bytes(b"stale")
    (again / "vocab.json").write_text("{}")
    assert export_main([str(trained_run), "--out", str(again)]) == 0
    capsys.readouterr()
    assert _tree(again) == _tree(fresh)  # the same files, byte for byte, and nothing left of the earlier one
    assert (again / EXPORT_INFO).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "fresh"]  # no temporary folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_main([str(trained_run), "--out", str(empty)]) == 0  # an empty folder is as good as a new one
    assert _tree(empty) == _tree(fresh)


# ------------------------------------------------------------------------------------------------ lists
@pytest.mark.parametrize("text, entry", [("a,", "entry 2 of 2"), (",a", "entry 1 of 2"), ("a,,b", "entry 2 of 3"),
                                         ("a, ,b", "entry 2 of 3")])
def test_comma_list_names_the_empty_entry(text, entry):
    with pytest.raises(ValueError) as err:
        comma_list("--envs", text, "env")
    assert str(err.value).startswith(f"--envs {text!r}: {entry} is empty")


def test_comma_list_reads_entries_and_refuses_none():
    assert comma_list("--envs", " a , b,a", "env") == ["a", "b", "a"]
    for text in ("", " ", ",", " , "):
        with pytest.raises(ValueError, match="^--envs: no env given$"):
            comma_list("--envs", text, "env")


@pytest.mark.parametrize("envs", ["sokoban,", ",sokoban", "sokoban,,frozenlake"])
def test_reproduce_says_which_envs_entry_is_empty(tmp_path, monkeypatch, capsys, envs):
    monkeypatch.chdir(tmp_path)
    assert reproduce_main(["--quick", "--envs", envs]) == 2
    cap = capsys.readouterr()
    line = _one_line(cap.err)
    assert cap.out == "" and f"--envs {envs!r}: entry" in line and "is empty" in line and "unknown" not in line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("envs", ["Bandit-v0,", "Bandit-v0,,Sokoban-v0"])
def test_eval_says_which_envs_entry_is_empty(tmp_path, capsys, envs):
    out = tmp_path / "ev"
    assert eval_main(["tiny", "--envs", envs, "--episodes", "1", "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--envs {envs!r}: entry" in line and "is empty" in line
    assert not out.exists()


@pytest.mark.parametrize("argv, says", [
    (["--only", "envs,"], "--only 'envs,': entry 2 of 2 is empty"),
    (["--only", ""], "--only: no benchmark name given"),  # it ran every benchmark (hours)
    (["--only", "typo"], "--only: unknown benchmark name 'typo'"),  # it ran nothing, then rewrote the tables
    (["--quick", "--full=envs"], "--full: unknown benchmark name 'envs'"),  # envs has no long full form
])
def test_bench_checks_its_lists_before_running_anything(monkeypatch, capsys, argv, says):
    from ragen_core.apps import cli

    if cli.checkout_root() is None:
        pytest.skip("ragen bench runs from a source checkout only")
    from benchmarks import run_all

    def never(argv):
        raise AssertionError("the benchmarks ran")

    monkeypatch.setattr(run_all, "main", never)
    assert cli.main(["bench", *argv]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"ragen bench: {says}")


@pytest.mark.parametrize("argv, says", [
    (["--only", "envs,"], "--only 'envs,': entry 2 of 2 is empty"),
    (["--only", ""], "--only: no benchmark name given"),
    (["--only", "typo"], "--only: unknown benchmark name 'typo'"),
])
def test_make_bench_checks_its_lists_too(monkeypatch, capsys, argv, says):
    """`make bench` runs `python -m benchmarks.run_all` without `ragen bench`: the same check, as a usage error
    (exit 2), before any benchmark runs or any table is rewritten."""
    from ragen_core.apps import cli

    if cli.checkout_root() is None:
        pytest.skip("the benchmarks live in a source checkout only")
    from benchmarks import readme_tables, run_all

    def never(*args, **kwargs):
        raise AssertionError("a benchmark ran or the tables were rewritten")

    monkeypatch.setattr(readme_tables, "main", never)
    monkeypatch.setattr(run_all.importlib, "import_module", never)
    with pytest.raises(SystemExit) as exit_:
        run_all.main(argv)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_make_demo_checks_its_overrides_as_ragen_train_does(tmp_path, capsys):
    """`make demo` (python -m ragen_core.apps.demo) takes key=value overrides: a bad one, or a warm start its env
    cannot demonstrate, is one `config error:` line before anything is made (it was a traceback)."""
    from ragen_core.apps import demo

    out = tmp_path / "runs"
    for over in (["run.seed=-1"], [f"run.seed={TOP + 1}"],
                 ["env.id=ragen/Countdown-v0", "env.kwargs={}", "warm_start.policy=random"]):
        assert demo.main(["--out", str(out), *over]) == 2
        cap = capsys.readouterr()
        assert _one_line(cap.err).startswith("config error: ") and cap.out == "", over
        assert not out.exists()
