"""The tiny base model's cache as a user meets it: bad recipes, odd cache folders, a build interrupted and resumed,
two processes, an unwritable cache, and what a first use shows while it builds.

Every build here is a recipe of a few steps (the full build takes about half an hour and never runs here).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from ragen_core.policy import tiny, tiny_base
from ragen_core.policy.tiny_base import DEFAULT_RECIPE, BaseRecipe, default_tiny_base_dir, recipe_digest

#: A few steps at a small batch: every code path of a build, in a few seconds.
SMALL = dataclasses.replace(DEFAULT_RECIPE, steps=6, batch_size=4, warmup=2)


def _name(recipe: BaseRecipe) -> str:
    """The cache folder's name, as docs and docstring define it: the recipe digest and the torch version."""
    key = json.dumps({"recipe": recipe_digest(recipe), "torch": torch.__version__}, sort_keys=True)
    return f"tiny-base-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


@pytest.fixture(autouse=True)
def _small_builds(monkeypatch):
    monkeypatch.setattr(tiny_base, "BUILD_EVAL_N", 2)
    monkeypatch.setattr(tiny, "_VERIFIED", {})  # every test checks its folders itself
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache root holding the SMALL recipe's base model."""
    root = tmp_path_factory.mktemp("tb-qa-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiny_base, "BUILD_EVAL_N", 2)
        default_tiny_base_dir(root, SMALL, log=lambda m: None)
    return root


def _no_build(*a, **k):
    raise AssertionError("the base model must not be built here")


# ------------------------------------------------------------------------------------------------ the recipe
@pytest.mark.parametrize("change, field", [
    ({"mix": (("lookup", 0.0),)}, "mix"),  # was: numpy's "Probabilities contain NaN" at the first batch
    ({"mix": (("lookup", float("nan")), ("copy", 1.0))}, "mix"),
    ({"steps": 2.5}, "steps"),  # was: TypeError inside example_stream
    ({"batch_size": 4.0}, "batch_size"),
    ({"data_seed": -1}, "data_seed"),  # was: numpy's "expected non-negative integer"
    ({"lr": -1e-3}, "lr"),  # was: AdamW's error, after the tiny model's build
    ({"lr": float("inf")}, "lr"),
    ({"warmup": -5}, "warmup"),
    ({"clip": 0.0}, "clip"),  # was: accepted, every update zeroed
    ({"stages": ((1.0, 10, 10), (0.35, 3, 10))}, "stages"),  # was: accepted, the second stage never reached
    ({"stages": ((0.5, 3.5, 10), (1.0, 10, 10))}, "stages"),
    ({"model": (("hiddenx", 64),)}, "model"),  # was: TypeError in build_tiny_model, after the cache folder was made
    ({"model": {"hiddenx": 64}}, "model"),
])
def test_a_bad_recipe_is_one_error_naming_its_field(change, field):
    with pytest.raises(ValueError, match=rf"^{field} must "):
        dataclasses.replace(SMALL, **change)


def test_odd_but_valid_recipes_still_build_their_text():
    for change in ({"stages": ((0.5, 3, 10),)}, {"model": {"hidden": 32}}, {"mix": (("copy", 1), ("grid", 0))},
                   {"clip": 1e-9}, {"lr": 0}):
        recipe = dataclasses.replace(SMALL, **change)
        assert len(list(tiny_base.example_stream(recipe))) == SMALL.steps
    assert recipe_digest(DEFAULT_RECIPE) == tiny_base.TINY_BASE_RECIPE_SHA256  # the checks changed no value


# ------------------------------------------------------------------------------------------------ odd cache folders
def test_a_partly_written_cache_folder_is_refused_before_any_build(built, tmp_path, monkeypatch):
    """A folder of the model's name without its meta file (a partial copy, a half-deleted folder): the build used
    to run to its end (half an hour for the default recipe) and then fail to rename onto it (ENOTEMPTY)."""
    root = tmp_path / "cache"
    shutil.copytree(built, root)
    (root / _name(SMALL) / "ragen_tiny_base.json").unlink()
    monkeypatch.setattr(tiny_base, "build_tiny_base_model", _no_build)
    with pytest.raises(tiny.CorruptTinyModelError, match=r"has no ragen_tiny_base\.json.*rm -r"):
        default_tiny_base_dir(root, SMALL)
    (root / _name(SMALL)).rename(root / "x")
    (root / _name(SMALL)).write_text("not a folder")
    with pytest.raises(tiny.CorruptTinyModelError, match="has no ragen_tiny_base.json"):
        default_tiny_base_dir(root, SMALL)


def test_a_folder_built_from_another_recipe_is_refused_not_loaded(built, tmp_path, monkeypatch):
    """Its files match its own recorded digest, so the digest check alone loaded it as the other recipe's model."""
    other = dataclasses.replace(SMALL, steps=5)
    root = tmp_path / "cache"
    root.mkdir()
    shutil.copytree(built / _name(SMALL), root / _name(other))
    monkeypatch.setattr(tiny_base, "build_tiny_base_model", _no_build)
    with pytest.raises(tiny.CorruptTinyModelError, match="built from another recipe"):
        default_tiny_base_dir(root, other)
    assert default_tiny_base_dir(built, SMALL) == built / _name(SMALL)  # its own name: loaded as before


def test_an_unwritable_cache_is_one_error_naming_it_and_the_variable(tmp_path, monkeypatch):
    """A cache root that is a file (as an unwritable folder, which root ignores): one OSError saying what to do,
    for `cache_dir` and for `$RAGEN2_CACHE`."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tiny_base, "build_tiny_base_model", _no_build)
    for where, cache_dir in ((blocker, blocker), (blocker / "sub", None)):
        monkeypatch.setenv("RAGEN2_CACHE", str(blocker / "sub"))
        with pytest.raises(OSError, match=r"cannot build the tiny base model in the cache folder .*RAGEN2_CACHE") as e:
            default_tiny_base_dir(cache_dir, SMALL)
        assert str(where) in str(e.value)


# ------------------------------------------------------------------------------------------------ building
def test_a_first_use_says_what_it_builds_and_removes_killed_builds(tmp_path, capsys):
    """Without a `log` (`load_policy("tiny-base")`) the build used to be silent for half an hour; the temporary
    folders of killed builds stayed forever."""
    name = _name(SMALL)
    orphan = tmp_path / f".{name}-k1lled"
    orphan.mkdir()
    (orphan / "model.safetensors").write_bytes(b"half")
    path = default_tiny_base_dir(tmp_path, SMALL)
    err = capsys.readouterr().err
    assert f"building the tiny base model into {path}" in err and f"step {SMALL.steps}/{SMALL.steps}" in err
    assert not orphan.exists() and sorted(p.name for p in tmp_path.iterdir()) == [f".{name}.lock", name]


def test_an_interrupted_build_goes_on_to_the_same_model(tmp_path, capsys):
    """Ctrl-C at step 150 of 150 (after the progress of step 100 was kept): the next call trains steps 101-150
    only, and the model is bit for bit the uninterrupted one. A saved progress that cannot be read is said and
    the build starts over (the reference build below)."""
    recipe = BaseRecipe(steps=150, batch_size=2, warmup=5, model=(("hidden", 32),))
    name = _name(recipe)
    ref_root = tmp_path / "ref"
    (ref_root / f".{name}.progress").mkdir(parents=True)
    (ref_root / f".{name}.progress" / "pretrain_state.pt").write_bytes(b"garbage")
    ref = default_tiny_base_dir(ref_root, recipe, log=lambda m: None)
    assert "is not used, it cannot be read" in capsys.readouterr().err

    root = tmp_path / "cache"
    steps: list[int] = []

    def stop_at_the_end(m):
        steps.append(m["step"])
        if m["step"] == recipe.steps:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        default_tiny_base_dir(root, recipe, log=stop_at_the_end)
    assert steps == [100, 150] and not (root / name).exists()
    steps.clear()
    path = default_tiny_base_dir(root, recipe, log=lambda m: steps.append(m["step"]))
    assert steps == [150]  # resumed after step 100
    assert tiny.tiny_model_digest(path) == tiny.tiny_model_digest(ref)
    meta, ref_meta = (json.loads((p / "ragen_tiny_base.json").read_text()) for p in (path, ref))
    assert meta["last"]["loss"] == ref_meta["last"]["loss"] and meta["sha256"] == ref_meta["sha256"]
    assert sorted(p.name for p in root.iterdir()) == [f".{name}.lock", name]  # the progress is gone once built


def test_a_second_caller_says_it_waits_for_the_first_build(built, tmp_path, capsys, monkeypatch):
    """Another process holds the build lock (flock: a second open file is another holder, even in one process);
    the caller says so, waits, and takes the folder the other build left, without building."""
    root = tmp_path / "cache"
    root.mkdir()
    name = _name(SMALL)
    monkeypatch.setattr(tiny_base, "build_tiny_base_model", _no_build)
    got: list = []
    with open(root / f".{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        caller = threading.Thread(target=lambda: got.append(default_tiny_base_dir(root, SMALL)), daemon=True)
        caller.start()
        deadline = time.monotonic() + 20
        while "waiting for another process" not in capsys.readouterr().err:
            assert time.monotonic() < deadline and caller.is_alive(), "the waiting caller said nothing"
            time.sleep(0.05)
        shutil.copytree(built / name, root / name)  # the other process's build, renamed into place
    caller.join(20)
    assert got == [root / name]


def test_ragen_train_says_in_one_line_that_the_tiny_base_cache_cannot_be_written(tmp_path, monkeypatch, capsys):
    """`model.path = "tiny-base"` with a cache location that is a file: the build's OSError names the folder and
    what to do; ragen train printed it as a traceback from inside the Trainer. Now one line, exit 2, no folder left."""
    from ragen_core.apps import train as train_app

    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("RAGEN2_CACHE", str(blocker))
    root = Path(__file__).resolve().parents[2]
    status = train_app.main([str(root / "configs" / "sudoku_tiny.toml"), "--run-dir", str(tmp_path / "run"),
                             "run.steps=1"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert "cannot load the model: cannot build the tiny base model in the cache folder" in err
    assert "RAGEN2_CACHE" in err and not (tmp_path / "run").exists()


def test_ragen_eval_takes_tiny_base_as_a_model_and_refuses_it_on_images():
    """`ragen eval tiny-base` was refused ("must be a transformers model folder ... or tiny") though every config
    of the agentic envs trains from it; it is a built-in model like tiny. It is a text model: an env that shows
    images is refused by name (building it, half an hour, is not needed to say so)."""
    from ragen_core.apps.eval.local import ModelSource
    from ragen_core.apps.eval.spec import model_kind

    assert model_kind("tiny-base") == "tiny"
    with pytest.raises(ValueError, match="tiny-base is a text model; ragen/Sokoban-Vision-v0 shows images"):
        ModelSource("tiny-base").folder_for("ragen/Sokoban-Vision-v0", {})
