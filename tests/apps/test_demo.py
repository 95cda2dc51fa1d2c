"""`make demo`: its settings are those of configs/sokoban_tiny.toml; its gain line is a paired interval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.apps.demo import DEMO_ONLY, DEMO_OVERRIDES, paired_gain
from ragen_core.math.stats import paired_ci
from ragen_core.training.config import config_to_dict, load_config

ROOT = Path(__file__).resolve().parents[2]


def _flat(cfg) -> dict[str, object]:
    return {f"{sec}.{k}": v for sec, values in config_to_dict(cfg).items() for k, v in values.items()}


def test_demo_runs_the_shipped_sokoban_config():
    demo = _flat(load_config(None, DEMO_OVERRIDES))
    shipped = _flat(load_config(ROOT / "configs" / "sokoban_tiny.toml"))
    differ = sorted(k for k in demo if demo[k] != shipped[k])
    assert differ == sorted(k for k in DEMO_ONLY if demo[k] != shipped[k]), differ
    assert demo["run.steps"] <= shipped["run.steps"]


def test_paired_gain_reads_the_first_and_last_validation(tmp_path):
    seeds = list(range(123, 131))
    before = [0, 0, 1, 0, 0, 1, 0, 0]
    after = [1, 0, 1, 1, 1, 1, 0, 1]
    lines = [{"step": 0, "seeds": seeds, "success": before}, {"step": 10, "seeds": seeds, "success": [0] * 8},
             {"step": 20, "seeds": seeds, "success": after}]
    (tmp_path / "val_outcomes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    n, step, gain, lo, hi = paired_gain(tmp_path)
    assert (n, step) == (8, 20)
    assert (gain, lo, hi) == pytest.approx(paired_ci(before, after))
    assert gain == pytest.approx(4 / 8)


def test_paired_gain_needs_a_validation_after_rl(tmp_path):
    assert paired_gain(tmp_path) is None
    (tmp_path / "val_outcomes.jsonl").write_text(json.dumps({"step": 0, "seeds": [1], "success": [1]}) + "\n")
    assert paired_gain(tmp_path) is None
