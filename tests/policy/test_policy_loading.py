"""`HFPolicy.from_pretrained` refuses folders it would load into a broken policy, before anything runs on it.

Before: a checkpoint missing a weight (a partial file, a config.json of another architecture) loaded with that
weight at its random initialisation (transformers only logs it); a folder without its tokenizer files loaded a
tokenizer of one token that encodes every text to nothing; a CUDA device on a CPU-only torch was an AssertionError
inside torch after the weights were read.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from ragen_core.policy import HFPolicy
from ragen_core.policy.tiny import default_tiny_model_dir


@pytest.fixture(scope="module")
def tiny_dir():
    return default_tiny_model_dir()


@pytest.fixture
def copy(tiny_dir, tmp_path):
    """A private copy of the tiny model's folder to damage."""
    out = tmp_path / "model"
    shutil.copytree(tiny_dir, out)
    return out


def _drop_tensor(folder, part):
    weights = load_file(folder / "model.safetensors")
    name = next(k for k in weights if part in k)
    del weights[name]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return name


def test_the_intact_folders_load(tiny_dir):
    for folder in (tiny_dir, default_tiny_model_dir(vision=True)):
        policy = HFPolicy.from_pretrained(folder)
        assert policy.encode_chat([{"role": "user", "content": "Hello"}])


def test_a_checkpoint_missing_a_weight_is_refused_naming_it(copy):
    name = _drop_tensor(copy, "layers.1.mlp.down_proj")
    with pytest.raises(ValueError, match="lacks 1 weight") as err:
        HFPolicy.from_pretrained(copy)
    assert name in str(err.value) and "at random" in str(err.value)


def test_a_config_of_another_architecture_is_refused(copy):
    cfg = json.loads((copy / "config.json").read_text())
    cfg.update(model_type="bert", architectures=["BertLMHeadModel"], is_decoder=True)
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="lacks .* weight"):
        HFPolicy.from_pretrained(copy)


def test_unused_weights_in_the_file_only_warn(copy):
    weights = load_file(copy / "model.safetensors")
    weights["extra.unused.weight"] = torch.zeros(2)
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    with pytest.warns(UserWarning, match="not used by the model"):
        HFPolicy.from_pretrained(copy)


def test_a_folder_without_tokenizer_files_is_refused(copy):
    (copy / "tokenizer.json").unlink()
    (copy / "tokenizer_config.json").unlink()
    with pytest.raises(ValueError, match="encodes no text"):
        HFPolicy.from_pretrained(copy)


def test_a_tokenizer_whose_text_ids_the_model_does_not_embed_is_refused(copy):
    """An embedding cut below the ids plain text encodes to (a tokenizer and a model that are not a pair)."""
    cfg = json.loads((copy / "config.json").read_text())
    rows = 300
    weights = load_file(copy / "model.safetensors")
    full = cfg["vocab_size"]
    weights = {k: (v[:rows].clone() if v.ndim == 2 and v.shape[0] == full else v) for k, v in weights.items()}
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    cfg["vocab_size"] = rows
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"embeds only {rows} ids"):
        HFPolicy.from_pretrained(copy)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a torch without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_a_cuda_device_without_cuda_is_refused_before_loading(tiny_dir, device):
    with pytest.raises(ValueError, match="no usable CUDA"):
        HFPolicy.from_pretrained(tiny_dir, device=device)


@pytest.mark.parametrize("device", ["tpu7", "", 3.5])
def test_a_device_that_is_no_device_is_refused(tiny_dir, device):
    with pytest.raises(ValueError, match="device must be"):
        HFPolicy.from_pretrained(tiny_dir, device=device)
