"""Learning test that can fail: on ragen/Bandit-v0, RL makes a tiny model prefer the better arm.

The warm start uses RANDOM arms (it teaches the answer format, not the answer), so the validation preference for
the better arm starts near chance; GRPO with SNR-aware filtering must then push it well above chance within a
bounded number of steps. Everything is seeded (model init, rollouts, payoffs), so the outcome is reproducible.
A trainer that ignores rewards, flips the advantage sign or never updates fails this test.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import ragen_envs  # noqa: F401
from ragen_core.config import load_config
from ragen_core.policy import HFPolicy, build_tiny_model
from ragen_core.train import Trainer


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def bandit_corpus() -> list[str]:
    env = gym.make("ragen/Bandit-v0")
    texts = []
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        texts += [info["instructions"], obs]
    return texts


def test_grpo_learns_the_better_bandit_arm(tmp_path):
    model_dir = build_tiny_model(tmp_path / "model", corpus=bandit_corpus(), hidden=64, layers=2, heads=4,
                                 kv_heads=2, seed=0)
    policy = HFPolicy.from_pretrained(model_dir)
    cfg = load_config(None, [
        "env.id=ragen/Bandit-v0",
        # The risky arm pays 1 with probability 0.5 (mean 0.5 > 0.1): still noisy, but a clear better arm.
        "env.kwargs.high_prob=0.5",
        # One name per list (shown in a random order): a model this small cannot yet copy names out of a
        # 300-token prompt; what is tested is that RL finds the better of the two answers.
        'env.kwargs.low_risk_names=["Teacher"]', 'env.kwargs.high_risk_names=["Gambler"]',
        "env.per_rollout_option=payoff_seed",
        "rollout.groups=8", "rollout.group_size=8", "rollout.max_turns=1", "rollout.max_new_tokens=40",
        "algo.name=grpo", "algo.lr=1e-3", "algo.mini_batch_size=64", "algo.micro_batch_size=32",
        "run.steps=12", "run.progress=false", "run.device=cpu", "run.seed=0",
        "filter.strategy=top_p", "filter.value=0.9",
        "mi.every=0", "eval.every=12", "eval.episodes=64", "eval.greedy=false",
        "warm_start.sft_episodes=96", "warm_start.policy=random", "warm_start.epochs=8", "warm_start.lr=5e-3",
        "warm_start.batch_size=8",
    ])
    history = Trainer(cfg, tmp_path / "run", policy=policy).fit()
    val = [r["val/success"] for r in history if r.get("val/success") is not None]
    train = [r for r in history if "rollout/success" in r]
    assert len(val) == 2, val
    before, after = val
    # Validation samples (temperature 1), so val/success estimates the probability of picking the better arm.
    # The warm start alone is near chance (it saw both arms equally often) ...
    assert 0.2 <= before <= 0.8, before
    # ... and the format is learned, so rewards vary and filtering keeps groups.
    assert train[0]["rollout/format_valid"] >= 0.8
    # RL moves the (sampled) preference well above chance.
    assert after >= 0.75 and after - before >= 0.2, (before, after)
    first = sum(r["rollout/success"] for r in train[:3]) / 3
    last = sum(r["rollout/success"] for r in train[-3:]) / 3
    assert last > first + 0.1, (first, last)
