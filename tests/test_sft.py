"""Supervised warm start: scripted responses are well-formed, refer to the actual state, solve the task (oracle),
and fine-tuning on them lowers the negative log-likelihood."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import ragen_envs  # noqa: F401
from ragen_core.config import load_config
from ragen_core.policy import HFPolicy, build_tiny_model
from ragen_core.rollout import RolloutSettings, make_envs
from ragen_core.sft import collect_sft_batch, oracle_response, random_response, sft_train, warm_start
from ragen_envs.protocol import parse_response, vocabulary_matcher


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    d = build_tiny_model(tmp_path_factory.mktemp("tiny"), corpus=["Player Box target (1, 2) Up Down Left Right"],
                         hidden=32, layers=2, heads=2, kv_heads=1)
    return HFPolicy.from_pretrained(d)


def test_sokoban_oracle_response_refers_to_the_state():
    env = gym.make("ragen/Sokoban-v0")
    for seed in range(5):
        env.reset(seed=seed)
        u = env.unwrapped
        text = oracle_response(env)
        parsed = parse_response(text, vocabulary_matcher(u.ACTIONS), max_actions=2)
        assert parsed.format_error is None and not parsed.dropped
        assert list(parsed.actions) == u.oracle_actions()[:2]
        r, c = u.player_position
        assert f"I am at ({r}, {c})" in parsed.think
        for tr, tc in u.target_positions:
            assert f"({tr}, {tc})" in parsed.think
        first = parsed.actions[0].lower()
        assert first in parsed.think


def test_oracle_episodes_solve_sokoban_and_frozenlake(policy):
    for env_id, kwargs in (("ragen/Sokoban-v0", {}), ("ragen/FrozenLake-v0", {"is_slippery": False})):
        envs = make_envs(env_id, 8, kwargs)
        batch = collect_sft_batch(policy, envs, list(range(500, 508)), RolloutSettings(max_turns=10))
        assert batch.format_valid.min() == 1.0
        assert batch.success.float().mean() >= 0.75, env_id  # the solver's plan fits the action budget


def test_bandit_oracle_and_random_responses():
    env = gym.make("ragen/Bandit-v0")
    rng = np.random.default_rng(0)
    picks = set()
    for seed in range(10):
        env.reset(seed=seed)
        u = env.unwrapped
        text = oracle_response(env)
        assert f"<answer> {u.oracle_arm()} </answer>" in text
        kind = "risky" if u.oracle_arm() == u.high_arm else "steady"
        assert f"<think> {u.oracle_arm()} sounds {kind}. </think>" in text  # reasoning about this episode's arm
        rnd = random_response(env, rng)
        _, reward, _, _, info = env.step(rnd)
        assert info["format_error"] is None
        picks.add(info["arm_kind"])
    assert picks == {"low", "high"}


def test_sft_lowers_nll(policy):
    envs = make_envs("ragen/Bandit-v0", 8)
    batch = collect_sft_batch(policy, envs, list(range(8)), RolloutSettings(max_turns=1))
    m = batch.loss_mask != 0

    def nll() -> float:
        with torch.no_grad():
            lp = policy.forward_logprobs(batch.input_ids, batch.attention_mask).logprobs
        return float(-(lp * m).sum() / m.sum())

    before = nll()
    stats = sft_train(policy, batch, epochs=6, lr=1e-2, batch_size=4, generator=torch.Generator().manual_seed(0))
    after = nll()
    assert after < before - 1.0
    assert stats["sft/loss_last"] < stats["sft/loss_first"]


def test_warm_start_from_config(policy):
    cfg = load_config(None, ["env.id=ragen/Bandit-v0", "warm_start.sft_episodes=4", "warm_start.epochs=1",
                             "warm_start.policy=random", "rollout.max_turns=1"])
    stats = warm_start(policy, cfg)
    assert stats["sft/episodes"] == 4 and stats["sft/tokens"] > 0
    with pytest.raises(ValueError, match="oracle"):
        from ragen_core.sft import scripted_responder

        scripted_responder("expert")
