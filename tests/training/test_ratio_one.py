"""The first PPO mini-batch has ratio exactly 1, for every algorithm x context mode (and a vision env).

Before any optimiser step the training forward (train mode, mini-batch order, micro-batch padding, the
temperature-scaled logits) must give the same log-probs as the sampler did (`old_logprobs` of the rollout, kept
with `algo.recompute_old_logprobs=false`). A mismatch means the trainer is not scoring what was sampled: wrong
temperature, a shifted token boundary between turns, a padding or position error, the stop string or the
chat-template bridge counted on the wrong side, images not fed. Every such bug shows up here as
`approx_kl != 0` or a clipped token on the very first mini-batch.
"""

from __future__ import annotations

import pytest
from stand_in_envs import ValueEnv, register

from ragen_core.policy import HFPolicy
from ragen_core.training import trainer as train_mod
from ragen_core.training.algorithms import ALGORITHMS
from ragen_core.training.config import load_config
from ragen_core.training.trainer import Trainer

ENV_ID = "test/Echo-v0"


class EchoEnv(ValueEnv):
    """Three-turn stand-in env whose observation changes every turn (so turn boundaries matter)."""

    TURNS = 3

    def _execute(self, action):
        self.value += 1
        return float(self.np_random.random() < 0.5), False


register(ENV_ID, EchoEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say go. go")


def first_minibatch_log_ratio(monkeypatch, policy, cfg, run_dir) -> dict[str, float]:
    """Run one training step; return max |log ratio|, approx_kl and clipfrac of the first policy-loss call."""
    seen: list[dict[str, float]] = []
    real = train_mod.losses.ppo_policy_loss

    def spy(log_probs, old_log_probs, advantages, mask, **kw):
        loss, stats = real(log_probs, old_log_probs, advantages, mask, **kw)
        if not seen:
            m = mask != 0
            seen.append({"max_abs": float((log_probs.detach() - old_log_probs)[m].abs().max()),
                         "tokens": float(m.sum()), **stats})
        return loss, stats

    monkeypatch.setattr(train_mod.losses, "ppo_policy_loss", spy)
    Trainer(cfg, run_dir, policy=policy).fit()
    assert seen, "the update never ran"
    return seen[0]


COMMON = ["rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=3", "rollout.max_new_tokens=6",
          # T != 1: the trainer must score at the sampling temperature.
          "rollout.temperature=0.7", "run.steps=1", "run.progress=false", "run.device=cpu", "algo.lr=1e-2",
          # Two mini-batches: the second one sees a changed model; only the first must be exact.
          "algo.mini_batch_size=6", "algo.micro_batch_size=4", "algo.recompute_old_logprobs=false",
          "eval.every=0", "mi.every=0", "filter.enabled=false"]


@pytest.mark.parametrize("context", ["full", "window:1", "single_turn"])
@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_first_minibatch_ratio_is_one(monkeypatch, model_dir, tmp_path, algo, context):
    cfg = load_config(None, [f"env.id={ENV_ID}", f"algo.name={algo}", f'rollout.context="{context}"', *COMMON])
    stats = first_minibatch_log_ratio(monkeypatch, HFPolicy.from_pretrained(model_dir), cfg, tmp_path)
    assert stats["tokens"] > 0
    assert stats["max_abs"] < 1e-4, stats
    assert abs(stats["approx_kl"]) < 1e-5 and stats["clipfrac"] == 0.0, stats


def test_first_minibatch_ratio_is_one_with_images(monkeypatch, make_tiny_model, tmp_path):
    model_dir = make_tiny_model("Up Down Left Right", vision=True)
    cfg = load_config(None, ['env.id="ragen/Sokoban-Vision-v0"', "env.kwargs={max_solution_len = 2}",
                             'rollout.context="full"', "algo.name=ppo", *COMMON])
    stats = first_minibatch_log_ratio(monkeypatch, HFPolicy.from_pretrained(model_dir), cfg, tmp_path / "run")
    assert stats["max_abs"] < 1e-4, stats
    assert stats["clipfrac"] == 0.0, stats


def test_a_wrong_scoring_temperature_is_caught(monkeypatch, model_dir, tmp_path):
    """The check above can fail: scoring at T = 1 what was sampled at T = 0.7 moves the ratio."""
    monkeypatch.setattr(Trainer, "_temp_kw", lambda self: {})
    cfg = load_config(None, [f"env.id={ENV_ID}", "algo.name=grpo", *COMMON])
    stats = first_minibatch_log_ratio(monkeypatch, HFPolicy.from_pretrained(model_dir), cfg, tmp_path)
    assert stats["max_abs"] > 1e-2, stats
