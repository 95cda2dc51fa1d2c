"""`model.gradient_checkpointing = true` turns on transformers' activation checkpointing through the installed
version's own method, without the deprecation warning of the alias that transformers v6 removes, and a model
without it gets a warning instead of silence."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer, _enable_activation_checkpointing

ROOT = Path(__file__).resolve().parents[2]


def test_the_setting_turns_checkpointing_on_without_a_deprecation_warning(tmp_path):
    cfg = load_config(ROOT / "configs" / "bandit_tiny.toml",
                      ["model.gradient_checkpointing=true", "run.progress=false", 'warm_start.cache_dir=""'])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(cfg, str(tmp_path / "run"))
    deprecated = [str(w.message) for w in caught if "checkpointing_enable" in str(w.message)]
    assert deprecated == []
    model = trainer.model
    on = getattr(model, "is_activation_checkpointing", None)
    assert (on if on is not None else model.is_gradient_checkpointing) is True


def test_off_by_default(tmp_path):
    cfg = load_config(ROOT / "configs" / "bandit_tiny.toml", ["run.progress=false", 'warm_start.cache_dir=""'])
    model = Trainer(cfg, str(tmp_path / "run")).model
    on = getattr(model, "is_activation_checkpointing", None)
    assert (on if on is not None else model.is_gradient_checkpointing) is False


def test_a_model_without_checkpointing_gets_a_warning():
    with pytest.warns(UserWarning, match=r"model.gradient_checkpointing = true is ignored: Linear has no activation"):
        _enable_activation_checkpointing(torch.nn.Linear(2, 2))


def test_the_older_method_is_used_where_the_new_one_is_missing():
    calls = []

    class Older(torch.nn.Module):
        def gradient_checkpointing_enable(self):
            calls.append("old")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _enable_activation_checkpointing(Older())
    assert calls == ["old"]
