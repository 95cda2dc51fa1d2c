"""Combinations of RL settings a researcher turns on through the config: DAPO's dynamic sampling with the filter off,
config sections of the wrong type given from Python, and `[algo]` keys set to a value the run never reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.math.filtering import FilterSpec
from ragen_core.policy import HFPolicy
from ragen_core.training.config import ConfigError, TrainConfig, config_to_dict, load_config
from ragen_core.training.trainer import Trainer, ignored_settings

ENV_ID = register("test/ComboParity-v0", ParityEnv)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def _cfg(*overrides: str) -> TrainConfig:
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.steps=1", "run.progress=false", "run.device=cpu", "algo.lr=1e-3",
            "algo.mini_batch_size=8", "algo.micro_batch_size=4", "eval.every=0", "mi.every=0", "run.rollouts_steps=0"]
    return load_config(None, base + list(overrides))


def _weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


# ---------------------------------------------------------------------------------------------- dynamic sampling
def test_dynamic_sampling_with_the_filter_off_drops_zero_variance_groups(model_dir, tmp_path):
    # Every group earns the same reward (constant=true): DAPO's rule drops them all, the refill rounds find nothing
    # either, and the step has nothing to train. Before, the first batch's groups were all "kept" (filter off), so
    # no refill round ran and the step trained on groups whose advantages were all zero: dynamic sampling did
    # nothing at all.
    cfg = _cfg("algo.name=dapo", "algo.dynamic_sampling=true", "algo.max_refill_rounds=1", "filter.enabled=false",
               "env.kwargs.constant=true", "filter.max_empty_steps=0")
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    row = trainer.train_step()
    assert row["filter/zero_fraction"] == 1.0
    assert row["filter/refill_rounds"] == 1.0
    assert row["filter/skipped"] == 1.0 and "loss/policy" not in row


def test_dynamic_sampling_with_the_filter_off_trains_only_groups_with_signal(model_dir, tmp_path):
    # Parity rewards vary in some groups and not in others: every group the update sees has reward variance.
    cfg = _cfg("algo.name=dapo", "algo.dynamic_sampling=true", "algo.max_refill_rounds=3", "filter.enabled=false",
               "run.seed=4", "rollout.groups=4")
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    seen = []
    for _ in range(3):
        row = trainer.train_step()
        seen.append(row)
        if row["filter/skipped"] == 0.0:
            assert row["filter/kept_zero_adv_share"] == 0.0
    assert any(r["filter/zero_fraction"] > 0 for r in seen), "the test needs a batch with a zero-variance group"


# ---------------------------------------------------------------------------------------------- Python API
@pytest.mark.parametrize("change, key", [
    (lambda c: setattr(c.filter, "spec", {"strategy": "top_k", "value": 0.5}), "filter.spec"),
    (lambda c: setattr(c.filter, "spec", None), "filter.spec"),
    (lambda c: setattr(c, "algo", None), "algo"),
    (lambda c: setattr(c, "rollout", {"groups": 2}), "rollout"),
])
def test_a_section_of_the_wrong_type_is_a_config_error(change, key, tmp_path):
    cfg = _cfg()
    change(cfg)
    with pytest.raises(ConfigError, match=rf"^{key} must be"):
        cfg.validate()
    with pytest.raises(ConfigError, match=rf"^{key} must be"):
        config_to_dict(cfg)
    with pytest.raises(ConfigError, match=rf"^{key} must be"):
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_replaced_filter_spec_of_the_right_type_is_accepted():
    cfg = _cfg()
    cfg.filter.spec = dataclasses.replace(cfg.filter.spec, strategy="top_k", value=0.5)
    assert config_to_dict(cfg.validate())["filter"]["strategy"] == "top_k"
    cfg.filter.spec = FilterSpec("random", 0.5)
    assert config_to_dict(cfg.validate())["filter"]["strategy"] == "random"


def test_a_section_changed_on_a_built_trainer_is_a_config_error(model_dir, tmp_path):
    trainer = Trainer(_cfg("algo.name=grpo"), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    trainer.cfg.filter.spec = {"strategy": "top_k"}
    with pytest.raises(ConfigError, match=r"^filter.spec must be a FilterSpec"):
        trainer.train_step()


# ---------------------------------------------------------------------------------------------- ignored settings
@pytest.mark.parametrize("overrides, key", [
    (("algo.name=grpo", "algo.gamma=0.9"), "algo.gamma"),
    (("algo.name=rloo", "algo.lam=0.5"), "algo.lam"),
    (("algo.name=dr_grpo", "algo.value_clip=0.2"), "algo.value_clip"),
    (("algo.name=grpo", "algo.kl_estimator=k2"), "algo.kl_estimator"),
    (("algo.optimizer=sgd", "algo.adam_eps=1e-5"), "algo.adam_eps"),
    (("algo.name=grpo", "algo.max_refill_rounds=5"), "algo.max_refill_rounds"),
    (("algo.name=grpo", "algo.target_kl=0.01", "algo.mini_batch_size=24"), "algo.target_kl"),
    (("algo.name=grpo", "algo.target_kl=0.01", "algo.mini_batch_size=48", "rollout.context=single_turn"),
     "algo.target_kl"),
])
def test_a_key_the_run_never_reads_is_named(overrides, key):
    lines = ignored_settings(_cfg(*overrides))
    assert len(lines) == 1 and lines[0].startswith(f"{key}=") and "has no effect" in lines[0]


@pytest.mark.parametrize("overrides", [
    ("algo.name=ppo", "algo.gamma=0.9", "algo.lam=0.5", "algo.value_clip=0.2"),
    ("algo.kl_coef=0.1", "algo.kl_estimator=k2"),
    ("algo.adam_eps=1e-5",),
    ("algo.name=dapo", "algo.dynamic_sampling=true", "algo.max_refill_rounds=5"),
    ("algo.target_kl=0.01", "algo.epochs=2", "algo.mini_batch_size=24"),  # a second epoch: a second update
    ("algo.target_kl=0.01", "algo.mini_batch_size=11"),  # 12 rows at most: two mini-batches
    ("algo.target_kl=0.01", "algo.mini_batch_size=23", "rollout.context=single_turn"),  # 24 turn rows at most
    ("algo.target_kl=0.01", "algo.mini_batch_size=24", "algo.recompute_old_logprobs=false"),  # sampling log-probs
    ("model.critic_lr=1e-4", "algo.name=grpo"),  # the shipped GRPO configs set it for a ppo override
])
def test_a_key_the_run_reads_is_not_named(overrides):
    assert ignored_settings(_cfg(*overrides)) == []


def test_no_shipped_config_sets_a_key_it_never_reads():
    for path in sorted(CONFIGS.glob("*.toml")):
        assert ignored_settings(load_config(path)) == [], path.name


def test_the_trainer_warns_and_the_warning_is_true(model_dir, tmp_path):
    # One epoch of one mini-batch: target_kl is named, and a run with it trains the very weights a run without it
    # trains (what "has no effect" claims).
    common = ("algo.name=grpo", "filter.enabled=false", "algo.mini_batch_size=64", "run.seed=2")
    weights = []
    for name, extra in (("plain", ()), ("capped", ("algo.target_kl=1e-9",))):
        cfg = _cfg(*common, *extra)
        with pytest.warns(UserWarning, match=r"algo.target_kl=1e-09 has no effect") if extra else _no_warning():
            trainer = Trainer(cfg, tmp_path / name, policy=HFPolicy.from_pretrained(model_dir))
        row = trainer.train_step()
        assert row["loss/updates"] == 1.0 and row["loss/kl_early_stop"] == 0.0
        weights.append(_weights(trainer))
    assert all(torch.equal(a, b) for a, b in zip(*weights))


class _no_warning:
    """A context in which a UserWarning fails the test."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error", UserWarning)

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        return False


# ---------------------------------------------------------------------------------------------- micro-batches
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
                                  "traj-mean-token-mean"])
def test_the_micro_batch_size_leaves_the_update_unchanged(model_dir, tmp_path, monkeypatch, mode):
    """`algo.micro_batch_size` is memory only: the update of the same rows with micro-batches of 3 rows equals the
    one computed in a single pass (the reference: one forward and backward over the whole mini-batch), here with an
    entropy bonus and a row without a generated token (an empty response). Before, the sequence-mean modes weighted
    a micro-batch by its share of all rows (the empty one included) and the token-mean entropy bonus by rows too:
    micro-batches of 3 moved the gradient norm by 4-5%."""
    captured = {}
    real = Trainer.update

    def capture(self, rows, images):
        captured.setdefault("rows", {k: v.clone() for k, v in rows.items()})
        captured.setdefault("images", images)
        return real(self, rows, images)

    monkeypatch.setattr(Trainer, "update", capture)
    cfg = _cfg("algo.name=grpo", f'algo.loss_agg_mode="{mode}"', "algo.entropy_coef=0.01", "algo.optimizer=sgd",
               "algo.grad_clip=0", "algo.mini_batch_size=64", "algo.micro_batch_size=64", "run.seed=3",
               "filter.enabled=false", 'rollout.context="single_turn"')
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    start = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.train_step()
    monkeypatch.setattr(Trainer, "update", real)
    rows = captured["rows"]
    assert rows["loss_mask"].shape[0] >= 8
    rows["loss_mask"][1] = 0  # a row with no generated token
    deltas = {}
    for micro in (64, 3):
        trainer.model.load_state_dict(start)
        trainer.cfg.algo.micro_batch_size = micro
        trainer.update({k: v.clone() for k, v in rows.items()}, captured["images"])
        deltas[micro] = torch.cat([(p.detach() - start[k]).flatten()
                                   for k, p in trainer.model.state_dict().items()])
    assert deltas[64].abs().max() > 0
    torch.testing.assert_close(deltas[3], deltas[64], rtol=1e-4, atol=1e-7)


def test_advantage_metrics_are_null_without_a_trained_token(model_dir, tmp_path):
    """Every response empty (the model's first token ends it): no token is trained, and the advantage statistics
    over trained tokens are undefined: null, as docs/train.md says of undefined metrics (they logged 0.0)."""
    from ragen_core.policy.base import Generation

    class Mute(HFPolicy):  # a policy whose every answer is empty; the trainer's metrics are what is tested
        def _sample(self, prompts, request):
            return [Generation("", list(p), [], [], "stop") for p in prompts]

    cfg = _cfg("algo.name=grpo", 'algo.loss_agg_mode="traj-mean-token-mean"', "filter.enabled=false")
    trainer = Trainer(cfg, tmp_path / "run", policy=Mute.from_pretrained(model_dir))
    row = trainer.train_step()
    assert row["perf/tokens_trained"] == 0.0
    for key in ("loss/advantage_mean", "loss/advantage_std", "loss/weighted_advantage_mean"):
        assert key in row and row[key] is None, key
