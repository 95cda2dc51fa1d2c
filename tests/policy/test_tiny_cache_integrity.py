"""The cached default tiny model is checked against the digest its build recorded, and against the pinned one.

A cache folder is shared by every run of a machine; a truncated or edited file there used to be loaded as it was
(an edited weight silently trained another model), and a default model built by other library versions (other
tokenizer or weight bytes) silently gave numbers that differ from the recorded ones.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from ragen_core.policy import HFPolicy, default_tiny_model_dir, tiny
from ragen_core.policy.tiny import (
    TINY_MODEL_SHA256,
    CorruptTinyModelError,
    TinyModelMismatchWarning,
    tiny_model_digest,
)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache holding the default text model, built once for the module (copied by each test)."""
    root = tmp_path_factory.mktemp("tiny-integrity")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinyModelMismatchWarning)
        folder = default_tiny_model_dir(root)
    return root, folder.name


@pytest.fixture
def cache(built_cache, tmp_path, monkeypatch):
    """A private copy of the built cache; this process's memo of checked folders emptied."""
    root, name = built_cache
    copy = tmp_path / "cache"
    shutil.copytree(root, copy)
    monkeypatch.setattr(tiny, "_VERIFIED", {})
    return copy, copy / name


def _flip_a_weight_byte(folder):
    path = folder / "model.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x01  # inside the last tensor's data
    path.write_bytes(bytes(raw))


def test_the_build_records_its_digest_and_that_it_is_the_pinned_model(cache):
    root, folder = cache
    meta = json.loads((folder / "ragen_tiny.json").read_text())
    assert meta["sha256"] == tiny_model_digest(folder) == TINY_MODEL_SHA256["text"]
    assert meta["pinned"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert default_tiny_model_dir(root) == folder  # a cache hit, verified, no warning


def test_an_edited_weight_is_refused_with_the_folder_to_delete(cache):
    root, folder = cache
    _flip_a_weight_byte(folder)
    with pytest.raises(CorruptTinyModelError, match="modified or damaged") as err:
        default_tiny_model_dir(root)
    assert str(folder) in str(err.value) and "rm -r" in str(err.value)


@pytest.mark.parametrize("damage", ["truncate weights", "garble meta", "delete tokenizer"])
def test_a_damaged_folder_is_refused_not_loaded(cache, damage):
    root, folder = cache
    if damage == "truncate weights":
        path = folder / "model.safetensors"
        path.write_bytes(path.read_bytes()[:5])
    elif damage == "garble meta":
        (folder / "ragen_tiny.json").write_text("{not json")
    else:
        (folder / "tokenizer.json").unlink()
    with pytest.raises(CorruptTinyModelError, match=str(folder)):
        default_tiny_model_dir(root)


def test_deleting_the_folder_as_told_rebuilds_the_same_model(cache):
    root, folder = cache
    _flip_a_weight_byte(folder)
    with pytest.raises(CorruptTinyModelError):
        default_tiny_model_dir(root)
    shutil.rmtree(folder)
    tiny._VERIFIED.clear()
    again = default_tiny_model_dir(root)
    assert again == folder and tiny_model_digest(again) == TINY_MODEL_SHA256["text"]
    HFPolicy.from_pretrained(again)  # loads


def test_a_default_build_that_is_not_the_pinned_model_warns_and_says_so(tmp_path, monkeypatch):
    """Other library versions can build other bytes: simulated by a pinned digest this build does not give."""
    monkeypatch.setattr(tiny, "TINY_MODEL_SHA256", {"text": "0" * 64, "vision": "0" * 64})
    monkeypatch.setattr(tiny, "_VERIFIED", {})
    with pytest.warns(TinyModelMismatchWarning, match="not the pinned one") as record:
        folder = default_tiny_model_dir(tmp_path)
    assert "transformers" in str(record[0].message) and "tokenizers" in str(record[0].message)
    meta = json.loads((folder / "ragen_tiny.json").read_text())
    assert meta["pinned"] is False and meta["sha256"] == tiny_model_digest(folder)


def test_non_default_build_arguments_are_not_compared_with_the_pinned_model(tmp_path, monkeypatch):
    monkeypatch.setattr(tiny, "_VERIFIED", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinyModelMismatchWarning)
        folder = default_tiny_model_dir(tmp_path, hidden=32, heads=2, layers=1)
    meta = json.loads((folder / "ragen_tiny.json").read_text())
    assert meta["pinned"] is None and meta["sha256"] == tiny_model_digest(folder)
    _flip_a_weight_byte(folder)
    tiny._VERIFIED.clear()
    with pytest.raises(CorruptTinyModelError):  # still checked against its own recorded digest
        default_tiny_model_dir(tmp_path, hidden=32, heads=2, layers=1)


def test_a_folder_built_before_digests_were_recorded_is_checked_against_the_pinned_model(cache):
    root, folder = cache
    meta = json.loads((folder / "ragen_tiny.json").read_text())
    del meta["sha256"], meta["pinned"]
    (folder / "ragen_tiny.json").write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default_tiny_model_dir(root)  # the pinned bytes: no warning
    _flip_a_weight_byte(folder)
    tiny._VERIFIED.clear()
    with pytest.warns(TinyModelMismatchWarning):
        default_tiny_model_dir(root)
