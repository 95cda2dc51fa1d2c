"""Learning tests that can fail: the shipped CPU configs, shortened, must turn reward into better behaviour.

Each test trains one shipped config (`configs/*_tiny.toml`) with a fixed seed and fewer RL steps, then compares
greedy validation success on held-out seeds before RL (after the warm start) and after. The warm start is a
noisy demonstrator (docs/training.md): its reasoning is the oracle's, its answer mostly a habit, so the warm-
started model's greedy answer ignores the state; only RL can make it follow the reasoning. A trainer that
ignores rewards, flips the advantage sign, scores the wrong tokens or never updates fails these tests.
Everything is seeded; no timing is asserted.
"""

from __future__ import annotations

from pathlib import Path

from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


def train(config: str, run_dir: Path, *overrides: str) -> list[dict]:
    cfg = load_config(ROOT / "configs" / config, ["run.progress=false", "run.seed=0", "run.max_minutes=0",
                                                   *overrides])
    return Trainer(cfg, run_dir).fit()


def validation(history: list[dict]) -> list[float]:
    return [r["val/success"] for r in history if r.get("val/success") is not None]


def test_grpo_learns_to_pull_the_arm_its_reasoning_calls_risky(tmp_path):
    history = train("bandit_tiny.toml", tmp_path, "run.steps=30", "eval.every=30", "mi.every=0")
    before, after = validation(history)[0], validation(history)[-1]
    # The warm-started model pulls the first arm shown (its habit): about half the time the risky one ...
    assert 0.3 <= before <= 0.75, before
    # ... and the format is learned, so rewards vary and filtering keeps groups.
    train_rows = [r for r in history if "rollout/success" in r]
    assert train_rows[0]["rollout/format_valid"] >= 0.7
    # RL makes the pull follow the reasoning.
    assert after >= 0.8 and after - before >= 0.2, (before, after)


def test_grpo_learns_easy_sokoban(tmp_path):
    history = train("sokoban_tiny.toml", tmp_path, "run.steps=20", "eval.every=20", "eval.episodes=64",
                    "mi.every=10")
    before, after = validation(history)[0], validation(history)[-1]
    assert before <= 0.35, before  # greedy: the habit move everywhere
    assert after - before >= 0.15, (before, after)
    # The reasoning was input-dependent all along (the MI proxies of the reasoning span are near their
    # ceiling); what RL changed is the action.
    mi = [r["collapse/retrieval_acc"] for r in history if isinstance(r.get("collapse/retrieval_acc"), float)]
    assert mi and min(mi) >= 0.5, mi
