"""The default tiny model is pinned: built from the shipped corpus of `TINY_CORPUS_VERSION`, whatever the envs say.

The recorded digests (`TINY_MODEL_SHA256`) are those of the models main built at 6bd8167, when the corpus was still
generated from the envs at each build (the same tokenizer.json and model.safetensors, byte for byte).
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from ragen_core.policy import build_tiny_model, default_tiny_model_dir, tiny
from ragen_core.policy.tiny import (
    TINY_CORPUS_SHA256,
    TINY_CORPUS_VERSION,
    TINY_MODEL_SHA256,
    corpus_digest,
    generate_corpus,
    load_tiny_corpus,
    tiny_model_digest,
)

KINDS = ("text", "vision")

WHAT_TO_BUMP = (
    "the default tiny model (tokenizer, chat template or initial weights) is no longer the recorded one, so every "
    "pinned tiny number would move. If that is intended: a new corpus is a new version (python "
    "scripts/write_tiny_corpus.py, then bump TINY_CORPUS_VERSION and add its digest to TINY_CORPUS_SHA256); a new "
    "recipe (tokenizer training, config, init) bumps TINY_FORMAT_VERSION; either way record the digests the script "
    "prints in TINY_MODEL_SHA256 (ragen_core/policy/tiny.py) and say where recorded numbers move. If it is not "
    "intended, undo the change (a transformers/tokenizers upgrade that changes what is saved also shows here)."
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The default models, text and vision, built into a fresh cache."""
    root = tmp_path_factory.mktemp("pinned-cache")
    return {kind: default_tiny_model_dir(root, vision=kind == "vision") for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_model_is_the_recorded_one(built, kind):
    got = tiny_model_digest(built[kind])
    assert got == TINY_MODEL_SHA256[kind], f"{kind} model digest {got} != recorded {TINY_MODEL_SHA256[kind]}: " + (
        WHAT_TO_BUMP
    )


def test_the_shipped_corpus_is_the_recorded_version():
    corpus = load_tiny_corpus()
    assert corpus.version == TINY_CORPUS_VERSION and TINY_CORPUS_VERSION in TINY_CORPUS_SHA256
    assert corpus.sha256 == corpus_digest(corpus.texts) == TINY_CORPUS_SHA256[TINY_CORPUS_VERSION]
    assert corpus.texts[0] == tiny._BUILTIN_TEXT  # the built-in sample is part of the file
    assert "ragen/Sokoban-v0" in corpus.env_ids and "ragen/FrozenLake-v0" in corpus.env_ids
    # shipped with the package (pyproject.toml's package data), beside the module that reads it
    assert tiny.corpus_path().parent == tiny.CORPUS_DIR and tiny.CORPUS_DIR.parent.name == "policy"


def test_the_meta_records_the_corpus_version_and_digest(built, tmp_path):
    corpus = load_tiny_corpus()
    for kind in KINDS:
        meta = json.loads((built[kind] / "ragen_tiny.json").read_text())
        assert meta["corpus_version"] == TINY_CORPUS_VERSION
        assert meta["corpus_sha256"] == TINY_CORPUS_SHA256[TINY_CORPUS_VERSION]
        assert meta["env_ids_in_corpus"] == list(corpus.env_ids)
        assert meta["vision"] is (kind == "vision") and meta["vocab_size"] == 1028
    custom = json.loads((build_tiny_model(tmp_path, corpus=["hello world"] * 3, hidden=32) / "ragen_tiny.json")
                        .read_text())
    assert custom["corpus_version"] is None and custom["env_ids_in_corpus"] == []
    assert custom["corpus_sha256"] == corpus_digest([tiny._BUILTIN_TEXT, *["hello world"] * 3])


def test_the_build_is_deterministic_and_the_cache_is_build_tiny_model(built, tmp_path):
    """Built again (here, in this process) the same digest; `default_tiny_model_dir` is `build_tiny_model(out)`."""
    for kind in KINDS:
        again = build_tiny_model(tmp_path / kind, vision=kind == "vision")
        assert tiny_model_digest(again) == tiny_model_digest(built[kind])


def test_editing_or_dropping_an_env_changes_no_model(built, tmp_path, monkeypatch):
    import ragen_envs.registration as registration
    from ragen_envs.sokoban.env import SokobanEnv

    before = generate_corpus(seeds=(0,), steps=1)
    monkeypatch.setattr(registration, "ENV_SPECS",
                        tuple(s for s in registration.ENV_SPECS if s.id != "ragen/FrozenLake-v0"))
    monkeypatch.setattr(SokobanEnv, "_task_instructions", lambda self: "Push every box onto a target. (reworded)")
    after = generate_corpus(seeds=(0,), steps=1)
    assert after != before and "ragen/FrozenLake-v0" not in after[1]  # the edits reach the envs' text ...
    assert any("(reworded)" in t for t in after[0])

    def no_env(*args, **kwargs):
        raise AssertionError("the default tiny model must not step an env")

    monkeypatch.setattr(tiny, "_env_text", no_env)
    monkeypatch.setattr(tiny, "generate_corpus", no_env)
    for kind in KINDS:  # ... but not the default model: same folder, same digest, in a fresh cache
        path = default_tiny_model_dir(tmp_path, vision=kind == "vision")
        assert path.name == built[kind].name
        assert tiny_model_digest(path) == TINY_MODEL_SHA256[kind], WHAT_TO_BUMP


def test_the_cache_folder_follows_the_corpus_file(tmp_path, monkeypatch):
    """Keyed by the corpus file's bytes: the same texts re-compressed are a new folder with the same model; a
    shipped version whose texts were edited is refused; a version without a file says so."""
    small = dict(hidden=32, layers=1, heads=2, kv_heads=1)
    first = default_tiny_model_dir(tmp_path / "cache", **small)
    data = json.loads(gzip.decompress(tiny.corpus_path().read_bytes()))
    alt = tmp_path / "alt"
    alt.mkdir()
    (alt / tiny.corpus_path().name).write_bytes(gzip.compress(json.dumps(data).encode(), compresslevel=1, mtime=0))
    monkeypatch.setattr(tiny, "CORPUS_DIR", alt)
    second = default_tiny_model_dir(tmp_path / "cache", **small)
    assert second != first and tiny_model_digest(second) == tiny_model_digest(first)

    data["texts"][5] += " edited"
    (alt / tiny.corpus_path().name).write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))
    with pytest.raises(ValueError, match="never edited"):
        default_tiny_model_dir(tmp_path / "cache", **small)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([first.name, second.name])

    monkeypatch.setattr(tiny, "TINY_CORPUS_VERSION", TINY_CORPUS_VERSION + 1)
    with pytest.raises(FileNotFoundError, match="corpus"):
        default_tiny_model_dir(tmp_path / "cache", **small)


def test_a_new_version_is_written_once_and_read_back(tmp_path):
    texts = [tiny._BUILTIN_TEXT, "Turn 1:\nState:\n#P_O#", "<think> go </think> <answer> Up </answer>"]
    path = tiny.write_tiny_corpus(texts, 99, env_ids=["ragen/Sokoban-v0"], directory=tmp_path)
    assert path.name == "tiny_corpus_v99.json.gz"
    first = path.read_bytes()
    with pytest.raises(FileExistsError):
        tiny.write_tiny_corpus(texts, 99, directory=tmp_path)
    corpus = load_tiny_corpus(99, tmp_path)  # unrecorded: read without the digest check
    assert list(corpus.texts) == texts and corpus.env_ids == ("ragen/Sokoban-v0",)
    tiny.write_tiny_corpus(texts, 99, env_ids=["ragen/Sokoban-v0"], directory=tmp_path, overwrite=True)
    assert path.read_bytes() == first  # byte-reproducible (no time stamp)
    model = build_tiny_model(tmp_path / "m", corpus, hidden=32)
    assert json.loads((model / "ragen_tiny.json").read_text())["corpus_version"] == 99
    with pytest.raises(ValueError, match="version"):
        tiny.corpus_path(0)
    shutil.copy(path, tmp_path / "tiny_corpus_v98.json.gz")
    with pytest.raises(ValueError, match="not a tiny-model corpus of version 98"):
        load_tiny_corpus(98, tmp_path)
