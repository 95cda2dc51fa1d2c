"""What a run leaves on disk, when it is damaged, shared or odd: the warm-start and step-0 cache (damaged entries,
a folder that cannot be one, `~`, a lock held by a process that waits or was killed), numbered checkpoints cut
short, the provenance of a checkout that is not ragen's, and the strict JSON of ``metrics.jsonl``."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ragen_core.apps.train import main
from ragen_core.policy import load_policy
from ragen_core.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ragen_core.training.config import ConfigError, load_config
from ragen_core.training.provenance import git_state
from ragen_core.training.report import RunLog
from ragen_core.training.warm_cache import cache_key, cached_step0, cached_warm_start, step0_key

ROOT = Path(__file__).resolve().parents[2]
#: A tiny Bandit run: an 8-episode warm start, one step.
BASE = ["env.id=ragen/Bandit-v0", "model.path=tiny", "rollout.groups=2", "rollout.group_size=2",
        "rollout.max_turns=1", "rollout.max_new_tokens=8", "rollout.system_prompt=false", "run.steps=1",
        "run.progress=false", "run.device=cpu", "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=4",
        "algo.micro_batch_size=4", "eval.episodes=2", "eval.every=1", "mi.every=0",
        "warm_start.sft_episodes=8", "warm_start.batch_size=8", "warm_start.epochs=1"]


def _cfg(cache: Path | str, *extra: str):
    return load_config(None, BASE + [f"warm_start.cache_dir={cache}", *extra])


def _weights(policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def _fresh_warm_start(cfg) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    policy = load_policy("tiny")
    metrics = cached_warm_start(policy, cfg)
    return metrics, _weights(policy)


# ------------------------------------------------------------------ damaged cache entries

def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a torch file")


def _edit_a_weight(path: Path) -> None:
    """A weight changed after the entry was written (a flipped bit; torch's files do not check their data)."""
    blob = torch.load(path, weights_only=True)
    name = next(iter(blob["model"]))
    blob["model"][name].view(-1)[0] += 1.0
    torch.save(blob, path)


def _another_models_weights(path: Path) -> None:
    blob = torch.load(path, weights_only=True)
    blob["model"] = {"layer.weight": torch.zeros(2)}
    torch.save(blob, path)


@pytest.mark.parametrize("damage", [_truncate, _garbage, _edit_a_weight, _another_models_weights])
def test_a_damaged_warm_start_entry_is_trained_again_and_replaced_never_loaded(tmp_path, damage):
    cfg = _cfg(tmp_path / "cache")
    first, weights = _fresh_warm_start(cfg)
    entry = tmp_path / "cache" / f"{cache_key(cfg)}.pt"
    assert first["sft/cached"] == 0.0 and entry.is_file()
    damage(entry)
    with pytest.warns(RuntimeWarning, match=f"{entry.name} cannot be used"):
        again, rebuilt = _fresh_warm_start(cfg)
    assert again["sft/cached"] == 0.0  # trained here, from the policy's own start, not from the damaged file
    assert rebuilt.keys() == weights.keys() and all(torch.equal(rebuilt[k], weights[k]) for k in weights)
    hit, loaded = _fresh_warm_start(cfg)  # the entry was replaced by a whole one
    assert hit["sft/cached"] == 1.0 and all(torch.equal(loaded[k], weights[k]) for k in weights)
    assert sorted(p.name for p in entry.parent.iterdir()) == sorted([entry.name, f"{cache_key(cfg)}.lock"])


def _edit_a_number(path: Path) -> None:
    path.write_text(path.read_text().replace("0.25", "0.75"))


@pytest.mark.parametrize("damage", [_truncate, _garbage, _edit_a_number,
                                    lambda p: p.write_text('{"metrics": {}, "success": []}'),
                                    lambda p: p.write_text("[1, 2]")])
def test_a_damaged_step0_entry_is_measured_again_and_replaced(tmp_path, damage):
    cfg = _cfg(tmp_path / "cache")
    truth = {"metrics": {"val/success": 0.25}, "success": [0, 1, 0, 0]}
    assert cached_step0(cfg, "validation", lambda: truth) == (truth, False)
    entry = tmp_path / "cache" / f"{step0_key(cfg, 'validation')}.step0.json"
    damage(entry)
    with pytest.warns(RuntimeWarning, match=f"{entry.name} cannot be used"):
        assert cached_step0(cfg, "validation", lambda: truth) == (truth, False)
    assert cached_step0(cfg, "validation", lambda: pytest.fail("measured twice")) == (truth, True)


def test_step0_values_with_nan_and_infinities_round_trip(tmp_path):
    cfg = _cfg(tmp_path / "cache")
    value = {"probe/token_entropy_template": math.nan, "probe/x": math.inf, "probe/y": -0.1}
    cached_step0(cfg, "probe", lambda: value)
    got, hit = cached_step0(cfg, "probe", lambda: pytest.fail("measured twice"))
    assert hit and math.isnan(got["probe/token_entropy_template"]) and got["probe/x"] == math.inf
    assert got["probe/y"] == -0.1


# ------------------------------------------------------------------ the cache folder itself

def test_a_cache_folder_that_cannot_be_one_is_a_config_error_naming_the_key(tmp_path):
    a_file = tmp_path / "cache"
    a_file.write_text("I am a file")
    for folder in (a_file, a_file / "below"):
        with pytest.raises(ConfigError, match=r"warm_start\.cache_dir .*(is a file|cannot be made)"):
            cached_step0(_cfg(folder), "probe", lambda: {"x": 1.0})
    with pytest.raises(ConfigError, match="warm_start.cache_dir"):
        cached_warm_start(load_policy("tiny"), _cfg(a_file))


def test_ragen_train_with_a_file_as_its_cache_folder_says_so_in_one_line(tmp_path, capsys):
    a_file = tmp_path / "cache"
    a_file.write_text("")
    run_dir = tmp_path / "run"
    assert main(["bandit_tiny", *BASE, f"warm_start.cache_dir={a_file}", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "config error: warm_start.cache_dir" in err and "is a file" in err and "Traceback" not in err
    assert not run_dir.exists()  # a start that failed before its first checkpoint leaves nothing behind


def test_the_cache_folder_expands_home_and_takes_spaces_and_unicode(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    cfg = _cfg("~/ca che é 日本")
    cached_step0(cfg, "probe", lambda: {"x": 1.0})
    assert (tmp_path / "home" / "ca che é 日本" / f"{step0_key(cfg, 'probe')}.step0.json").is_file()
    assert not (tmp_path / "~").exists()  # not a folder named "~" in the current one
    assert cached_step0(cfg, "probe", lambda: pytest.fail("measured twice")) == ({"x": 1.0}, True)


# ------------------------------------------------------------------ concurrent runs of one key

_HOLDER = """
import sys, time
from pathlib import Path
from ragen_core.training.config import load_config
from ragen_core.training.warm_cache import cached_step0
cfg = load_config(None, {base!r} + ["warm_start.cache_dir={cache}"])
def compute():
    print("computing", flush=True)
    while not Path("{go}").exists():
        time.sleep(0.02)
    return {{"x": 42.0}}
print(cached_step0(cfg, "probe", compute), flush=True)
"""


def _holder(tmp_path: Path, cache: Path) -> subprocess.Popen:
    """A process filling the probe entry of `cache`: it takes the key's lock, says "computing", and finishes when
    the file ``go`` appears."""
    code = textwrap.dedent(_HOLDER.format(base=BASE, cache=cache, go=tmp_path / "go"))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout.readline().strip() == "computing"
    return proc


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=fn()), daemon=True)
    thread.start()
    return thread, out


def test_a_second_process_of_one_key_says_it_waits_and_reads_the_first_ones_value(tmp_path, capfd):
    cache = tmp_path / "cache"
    holder = _holder(tmp_path, cache)
    try:
        thread, out = _in_thread(lambda: cached_step0(_cfg(cache), "probe", lambda: pytest.fail("measured twice")))
        deadline = time.monotonic() + 20
        while "waiting for another process" not in capfd.readouterr().err:
            assert time.monotonic() < deadline, "no line says the run waits for the lock"
            time.sleep(0.05)
        assert thread.is_alive()  # it waits for the holder instead of measuring too
        (tmp_path / "go").write_text("")
        thread.join(30)
        assert out["result"] == ({"x": 42.0}, True)
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_whose_holder_was_killed_blocks_nothing(tmp_path):
    cache = tmp_path / "cache"
    holder = _holder(tmp_path, cache)
    thread, out = _in_thread(lambda: cached_step0(_cfg(cache), "probe", lambda: {"x": 7.0}))
    time.sleep(0.3)
    os.kill(holder.pid, signal.SIGKILL)  # killed while it holds the lock, its lock file left behind
    holder.wait()
    thread.join(30)
    assert not thread.is_alive() and out["result"] == ({"x": 7.0}, False)
    assert not list(cache.glob("*.tmp*"))


# ------------------------------------------------------------------ checkpoints

class _FailsOnSecondPickle:
    """Pickles once, then fails (a disk that fills up during the second write of one state)."""

    calls = 0

    def __reduce__(self):
        _FailsOnSecondPickle.calls += 1
        if _FailsOnSecondPickle.calls > 1:
            raise OSError(28, "No space left on device")
        return (dict, ())


def _state(step: int, **extra) -> dict:
    return {"step": step, "model": {"w": torch.full((3,), float(step))}, **extra}


def test_a_numbered_checkpoint_is_never_left_cut_short(tmp_path):
    save_checkpoint(tmp_path, _state(2), 2, keep_every=2)
    _FailsOnSecondPickle.calls = 0
    try:
        save_checkpoint(tmp_path, _state(4, extra=_FailsOnSecondPickle()), 4, keep_every=2)
    except OSError:
        pass
    folder = tmp_path / "checkpoints"
    for copy in sorted(folder.glob("step_*.pt")):
        assert torch.load(copy, weights_only=False)["step"] in (2, 4), copy.name  # every copy whole
    assert not list(folder.glob("*.tmp")), "a temporary file was left behind"


def test_a_failed_save_leaves_the_last_checkpoint_and_no_temporary_file(tmp_path):
    save_checkpoint(tmp_path, _state(1), 1)
    _FailsOnSecondPickle.calls = 1  # fails on its first pickle from here
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, _state(2, extra=_FailsOnSecondPickle()), 2)
    assert load_checkpoint(tmp_path)["step"] == 1
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest.pt"]


def test_a_damaged_latest_checkpoint_points_to_a_numbered_copy_that_resumes(tmp_path):
    for step in (2, 4, 5):
        save_checkpoint(tmp_path, _state(step), step, keep_every=2)
    latest = tmp_path / "checkpoints" / "latest.pt"
    _truncate(latest)
    with pytest.raises(CheckpointError, match="step_000004.pt"):
        load_checkpoint(tmp_path)
    shutil.copyfile(tmp_path / "checkpoints" / "step_000004.pt", latest)
    state = load_checkpoint(tmp_path)
    assert state["step"] == 4 and torch.equal(state["model"]["w"], torch.full((3,), 4.0))


# ------------------------------------------------------------------ provenance

def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_provenance_names_a_commit_only_for_code_that_checkout_tracks(tmp_path):
    repo = tmp_path / "project"
    (repo / ".venv" / "site-packages" / "ragen_core").mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(repo))
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    commit = _git(repo, "rev-parse", "HEAD")
    installed = repo / ".venv" / "site-packages" / "ragen_core"
    (installed / "provenance.py").write_text("")
    # A package installed in another project's virtual environment is not that project's commit.
    assert git_state(installed) == (None, None)
    assert git_state(repo) == (commit, False)
    (repo / "a.py").write_text("x = 2\n")
    assert git_state(repo) == (commit, True)
    assert git_state(tmp_path) == (None, None)  # no checkout at all


# ------------------------------------------------------------------ metrics.jsonl

def test_metrics_lines_are_strict_json_with_nan_and_infinities_as_null(tmp_path):
    """What metrics.py documents: NaN and infinities are null, so strict readers (json.loads rejecting NaN, pandas)
    read every line."""
    log = RunLog(tmp_path)
    log.start()
    log.log({"step": 1, "a": math.nan, "b": math.inf, "c": -math.inf, "d": np.float32("nan"), "e": 0.5})
    text = (tmp_path / "metrics.jsonl").read_text()

    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    rows = [json.loads(line, parse_constant=reject) for line in text.splitlines()]
    assert rows == [{"step": 1, "a": None, "b": None, "c": None, "d": None, "e": 0.5}]
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_json(tmp_path / "metrics.jsonl", lines=True)
    assert frame["e"].tolist() == [0.5] and frame["a"].isna().all()
