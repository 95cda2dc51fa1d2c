"""The metrics schema (ragen_core.training.metrics): every key a run writes is in it, with a unit and a producer; the
filter logs the same keys on and off; the producers outside the trainer agree with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ragen_core.apps.train import main
from ragen_core.math.filtering import filter_groups
from ragen_core.math.mi import flatten_proxies, mi_proxies
from ragen_core.policy import HFPolicy
from ragen_core.training.config import load_config
from ragen_core.training.metrics import (
    MI_PROXIES,
    SCHEMA,
    STEP,
    Collapse,
    Filter,
    Loss,
    Perf,
    Probe,
    Rollout,
    Sft,
    Val,
    lookup,
    unknown_keys,
)
from ragen_core.training.trainer import Trainer

NAMESPACES = (Rollout, Filter, Loss, Collapse, Probe, Val, Perf, Sft)


def _constants(cls: type) -> dict[str, str]:
    return {name: value for name, value in vars(cls).items()
            if name.isupper() and isinstance(value, str) and name not in ("PREFIX", "LOGGED_BY", "SCOPE")}


def test_every_key_has_one_constant_in_its_namespace_with_a_unit_and_a_producer():
    keys = [STEP, *(v for cls in NAMESPACES for v in _constants(cls).values())]
    assert sorted(keys) == sorted(SCHEMA)  # every constant is in the schema, every schema key is a constant, once
    for cls in NAMESPACES:
        assert all(key.startswith(cls.PREFIX) for key in _constants(cls).values()), cls.__name__
    for metric in SCHEMA.values():
        assert metric.unit and metric.logged_by and metric.description, metric.key


def test_numbered_keys_resolve_to_their_entry_and_nothing_else_does():
    assert lookup("rollout/reward_share_turn3").key == Rollout.REWARD_SHARE_TURN
    assert lookup("rollout/reward_share_turn12") is lookup("rollout/reward_share_turn1")
    for key in ("rollout/reward_share_turn", "rollout/reward_share_turnx", "rollout/nope", "loss/policy2"):
        assert lookup(key) is None, key
    assert unknown_keys([{STEP: 1, Loss.POLICY: 0.0, "loss/nope": 1.0}]) == {"loss/nope"}


def test_the_mi_proxies_are_what_mi_proxies_returns():
    gen = torch.Generator().manual_seed(0)
    L = -torch.rand(9, 2, 9, generator=gen) * 10  # 9 prompts: Recall@2, @4 and @8 are all defined
    stats = mi_proxies(L, torch.full((9, 2), 4))
    assert set(flatten_proxies(stats, prefix=Collapse.PREFIX)) == {Collapse.PREFIX + name for name in MI_PROXIES}


def test_the_filter_decision_keys_are_what_filter_groups_logs():
    res = filter_groups(torch.tensor([[0.0, 1.0], [1.0, 1.0], [float("nan"), 0.0]]), strategy="top_p", value=0.9)
    assert set(res.as_metrics(Filter.PREFIX)) == set(Filter.DECISION)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("Bandit arm teacher engineer gambler Choose one arm <answer> </answer>")


@pytest.mark.parametrize("group_size", [1, 2])
def test_the_filter_logs_the_same_keys_on_and_off(model_dir, tmp_path, group_size):
    """The filter's decision keys, whether it filters, is off, or cannot run (one rollout per group: a config error
    for `ragen train`, but a config built in code reaches the trainer's own guard)."""
    policy = HFPolicy.from_pretrained(model_dir)
    decided = {}
    for enabled in (True, False):
        cfg = load_config(None, ["env.id=ragen/Bandit-v0", "rollout.groups=3", f"rollout.group_size={group_size}",
                                 "rollout.max_turns=1", "rollout.max_new_tokens=8", "run.device=cpu",
                                 "eval.episodes=1", f"filter.enabled={str(enabled and group_size >= 2).lower()}"])
        trainer = Trainer(cfg, tmp_path / str(enabled), policy=policy)
        cfg.filter.enabled = enabled  # after the Trainer's own config check, which refuses it with one rollout
        _, metrics = trainer.filter_with_metrics(trainer.collect())
        decided[enabled] = metrics
    assert list(decided[True]) == list(decided[False]) == list(Filter.DECISION)
    assert decided[False][Filter.KEPT_FRACTION] == 1.0


def test_every_key_a_run_writes_is_in_the_schema(model_dir, tmp_path):
    """A short `ragen train` with a warm start, a critic and a reference, the in-batch MI and the held-out probe."""
    run_dir = tmp_path / "run"
    config = tmp_path / "base.toml"
    config.write_text("[run]\nseed = 3\n")
    status = main([str(config), f"model.path={model_dir}", "env.id=ragen/Bandit-v0", "rollout.groups=3",
                   "rollout.group_size=2", "rollout.max_turns=1", "rollout.max_new_tokens=8",
                   "rollout.system_prompt=false", "run.steps=2", "run.device=cpu", "run.progress=false",
                   "algo.name=ppo", "algo.kl_coef=0.01", "algo.lr=1e-3", "algo.mini_batch_size=4",
                   "algo.micro_batch_size=4", "filter.enabled=false", "eval.episodes=2", "eval.every=1", "mi.every=1",
                   "mi.probe_prompts=3", "mi.probe_group_size=2", "warm_start.sft_episodes=4", "warm_start.epochs=1",
                   "warm_start.batch_size=4", "--run-dir", str(run_dir)])
    assert status == 0
    rows = [json.loads(x) for x in Path(run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    written = {k for r in rows for k in r}
    assert unknown_keys(rows) == set()
    # The run reached every kind of record: warm start, validation, probe, in-batch MI, an update with a critic
    # and a reference.
    for key in (Sft.LOSS_LAST, Val.SUCCESS, Probe.RETRIEVAL_MARGIN, Collapse.MI_SEQ_EST, Loss.VALUE, Loss.KL,
                Filter.NAN_GROUPS, Rollout.REWARD_SHARE_TURN.format(k=1)):
        assert key in written, key
