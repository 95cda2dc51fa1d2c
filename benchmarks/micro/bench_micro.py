"""Micro-benchmarks (pytest-benchmark). Not collected by `make test` (pytest's testpaths = tests, and these files
are named bench_*.py); run them with `python -m benchmarks.micro.run`, which saves/compares the baseline stored in
benchmarks/micro/baseline.

Each benchmark checks its result too, so a change that makes a function fast by breaking it fails here.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_core.math.filtering import compact, filter_groups
from ragen_core.math.mi import mi_proxies
from ragen_envs.protocol import parse_response, vocabulary_matcher

RESPONSE = "<think>The box is left of the target, so I push it right.</think><answer>Right || Down</answer>"
MATCHER = vocabulary_matcher(["Up", "Down", "Left", "Right"])


def _rewards(p: int, g: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q = torch.rand(p, 1, generator=gen)
    q = torch.where(torch.rand(p, 1, generator=gen) < 0.5, q.round(), q)
    return (torch.rand(p, g, generator=gen) < q).to(torch.float32)


def test_parse_response(benchmark):
    out = benchmark(parse_response, RESPONSE, MATCHER)
    assert list(out.actions) == ["Right", "Down"]


#: The four moves in turn, so that steps move (a repeated "Up" runs into the top wall and stays there: FrozenLake's
#: start is on the top row, so every step was an ineffective move).
STEP_RESPONSES = [f"<think>go</think><answer>{a}</answer>" for a in ("Up", "Right", "Down", "Left")]
#: Timed steps per env (pedantic rounds of one step each; --benchmark-max-time does not apply to them).
ENV_STEP_ROUNDS = 2000


def env_step_bench(env):
    """(setup, step, teardown, state) for `benchmark.pedantic`: `step` is one `env.step` and nothing else. Untimed
    around it, `setup` resets the env when the last step ended the episode (a reset costs tens of steps: timed inside
    the step, as before, it set the mean and the ops/s of every tenth call) and `teardown` counts the step, and
    whether the env took its action as valid, in `state`."""
    state = {"steps": 0, "valid": 0, "resets": 0, "done": True, "last": None}

    def setup():
        if state["done"]:
            env.reset(seed=state["resets"])
            state["resets"] += 1
            state["done"] = False

    def step():
        state["last"] = env.step(STEP_RESPONSES[state["steps"] % len(STEP_RESPONSES)])

    def teardown():
        _, _, term, trunc, info = state["last"]
        state["steps"] += 1
        state["valid"] += bool(info.get("action_is_valid"))
        state["done"] = bool(term or trunc)

    return setup, step, teardown, state


@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
def test_env_step(benchmark, env_id):
    env = gym.make(env_id)
    setup, step, teardown, state = env_step_bench(env)
    benchmark.pedantic(step, setup=setup, teardown=teardown, rounds=ENV_STEP_ROUNDS, warmup_rounds=10)
    if benchmark.disabled:  # --benchmark-disable runs the step once, without its teardown
        teardown()
    assert state["steps"] >= 1 and state["valid"] == state["steps"]


@pytest.mark.parametrize("p", [8, 1024])
def test_filter_groups_top_p(benchmark, p):
    rewards = _rewards(p, 16)
    res = benchmark(filter_groups, rewards, "top_p", 0.9)
    assert 1 <= res.n_kept <= p


def test_compact_8x16(benchmark):
    gen = torch.Generator().manual_seed(0)
    b, t = 128, 512
    lengths = torch.randint(200, t + 1, (b,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    batch = {"input_ids": torch.randint(0, 1000, (b, t), generator=gen) * mask, "attention_mask": mask,
             "loss_mask": mask.clone(), "old_logprobs": torch.zeros(b, t)}
    kept = filter_groups(_rewards(8, 16), "top_p", 0.9).kept
    out = benchmark(compact, batch, kept, 16)
    assert out["input_ids"].shape[0] == kept.numel() * 16


def test_mi_proxies_8x16(benchmark):
    gen = torch.Generator().manual_seed(0)
    p, g = 8, 16
    L = -torch.rand(p, g, p, generator=gen) * 50
    L[torch.arange(p), :, torch.arange(p)] += 60  # matched prompts score higher
    lengths = torch.full((p, g), 32)
    stats = benchmark(mi_proxies, L, lengths)
    assert stats["retrieval_acc"] > 0.5
