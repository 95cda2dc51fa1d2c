"""The verl glue without verl: estimator <-> trainer-mode handoff, per-step random draws, version module, imports.

``tests/integrations/test_integration_verl.py`` covers the pure tensor logic and, where verl 0.9.1 is installed,
the glue against real verl. This file runs the glue (``verl.register``, ``verl_trainer.RagenSNRTrainer``,
``verl_agent.register_agent_loop``) everywhere, against stand-ins of the few verl / TransferQueue names it
touches (``_verl_stand_ins``), so that what the trainer mode tells the estimator is tested on every machine.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import random
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl_fakes import FakeTQ

import ragen_core.integrations.verl as verl_pkg
from ragen_core.integrations import versions
from ragen_core.integrations.trl import version as trl_version
from ragen_core.integrations.verl import adapter as vglue
from ragen_core.integrations.verl import version as verl_version
from ragen_core.integrations.verl.core import (
    FilterSpec,
    StepHandoff,
    filter_rows,
    group_advantages,
    random_generator,
)

ROOT = Path(__file__).resolve().parents[2]
GLUE = ("ragen_core.integrations.verl.trainer", "ragen_core.integrations.verl.agent")


# ------------------------------------------------------------------------------------------------ stand-ins
@dataclass
class KVBatchMeta:
    """TransferQueue's batch handle: keys, per-key tags, partition; ``select_keys`` keeps tags with their keys."""

    keys: list
    tags: list = field(default_factory=list)
    partition_id: str = "train"

    def select_keys(self, keys: list) -> KVBatchMeta:
        pos = {k: i for i, k in enumerate(self.keys)}
        return KVBatchMeta(keys=list(keys), tags=[self.tags[pos[k]] for k in keys], partition_id=self.partition_id)


def _verl_stand_ins() -> dict[str, types.ModuleType]:
    """Modules named as verl 0.9.1's and TransferQueue's, holding only what the glue imports (same behaviour)."""
    mods: dict[str, types.ModuleType] = {}

    def mod(name: str) -> types.ModuleType:
        mods[name] = types.ModuleType(name)
        return mods[name]

    mod("verl"), mod("verl.trainer")
    ppo, core_algos = mod("verl.trainer.ppo"), mod("verl.trainer.ppo.core_algos")
    core_algos.ADV_ESTIMATOR_REGISTRY = {}

    def register_adv_est(name):  # verl: re-registering another function under a name is an error
        def decorator(fn):
            if name in core_algos.ADV_ESTIMATOR_REGISTRY and core_algos.ADV_ESTIMATOR_REGISTRY[name] != fn:
                raise ValueError(f"Adv estimator {name} has already been registered")
            core_algos.ADV_ESTIMATOR_REGISTRY[name] = fn
            return fn

        return decorator

    core_algos.register_adv_est = register_adv_est
    core_algos.get_adv_estimator_fn = lambda name: core_algos.ADV_ESTIMATOR_REGISTRY[name]
    ppo.core_algos = core_algos
    v1, trainer_base = mod("verl.trainer.ppo.v1"), mod("verl.trainer.ppo.v1.trainer_base")
    trainer_base.TRAINER_REGISTRY = {}

    class PPOTrainerSync:
        def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
            return batch

        def _update_actor(self, batch, metrics):
            return "updated"

        def _update_critic(self, batch, metrics):
            return "updated"

    def register_trainer(name):
        def decorator(cls):
            if trainer_base.TRAINER_REGISTRY.get(name) not in (None, cls):
                raise ValueError(f"Trainer name '{name}' is already registered")
            trainer_base.TRAINER_REGISTRY[name] = cls
            return cls

        return decorator

    v1.PPOTrainerSync, v1.register_trainer = PPOTrainerSync, register_trainer
    mod("verl.experimental"), mod("verl.experimental.agent_loop")
    agent_loop = mod("verl.experimental.agent_loop.agent_loop")
    agent_loop._agent_loop_registry = {}

    def register(agent_name):
        def decorator(subclass):
            agent_loop._agent_loop_registry[agent_name] = {"_target_": f"{subclass.__module__}.{subclass.__qualname__}"}
            return subclass

        return decorator

    agent_loop.AgentLoopBase, agent_loop.AgentLoopOutput, agent_loop.register = object, SimpleNamespace, register
    mod("transfer_queue").KVBatchMeta = KVBatchMeta
    return mods


@pytest.fixture
def fake_verl(monkeypatch):
    """verl 0.9.1 stand-ins in ``sys.modules`` and fresh glue modules built on them; everything restored after."""
    for name, module in _verl_stand_ins().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(versions, "metadata", SimpleNamespace(version=lambda dist: "0.9.1",
                                                                  PackageNotFoundError=LookupError))
    saved = {name: (sys.modules.get(name), getattr(verl_pkg, name.rsplit(".", 1)[1], None)) for name in GLUE}

    def forget() -> None:
        for name in GLUE:
            sys.modules.pop(name, None)
            if hasattr(verl_pkg, name.rsplit(".", 1)[1]):
                delattr(verl_pkg, name.rsplit(".", 1)[1])

    forget()
    try:
        yield sys.modules["verl.trainer.ppo.core_algos"]
    finally:
        forget()
        for name, (module, attr) in saved.items():
            if module is not None:
                sys.modules[name] = module
            if attr is not None:
                setattr(verl_pkg, name.rsplit(".", 1)[1], attr)


def make_batch(seed: int, p: int = 8, g: int = 4, t: int = 6):
    """Right-padded verl rows, outcome reward on the last valid token, uids shuffled (as the pinned runs)."""
    rng = random.Random(seed)
    uids = [f"u{i}" for i in range(p) for _ in range(g)]
    rng.shuffle(uids)
    b = len(uids)
    rewards, mask = torch.zeros(b, t), torch.zeros(b, t)
    for row in range(b):
        n = rng.randint(1, t)
        mask[row, :n] = 1
        rewards[row, n - 1] = rng.choice((0.0, 0.25, 0.5, 1.0, 2.0))
    return rewards, mask, np.array(uids, dtype=object)


def trainer_on(verl_trainer, rewards, mask, uids, ragen_filter: dict):
    """A ``RagenSNRTrainer`` without ``__init__`` over a FakeTQ holding the batch; returns (trainer, keys, tq)."""
    keys = [f"{u}_{i}_0" for i, u in enumerate(uids)]
    rows = {k: {"uid": uids[i], "rm_scores": rewards[i, : int(mask[i].sum())],
                "response_mask": mask[i, : int(mask[i].sum())]} for i, k in enumerate(keys)}
    tq = FakeTQ(rows)
    verl_trainer.tq = tq
    trainer = object.__new__(verl_trainer.RagenSNRTrainer)
    trainer.config = SimpleNamespace(algorithm={"ragen_filter": ragen_filter})
    return trainer, keys, tq


def sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def zero_rows(adv: torch.Tensor) -> list[int]:
    return (adv.abs().sum(1) == 0).nonzero().flatten().tolist()


# ------------------------------------------------------------------------------------------------ per-step draws
def test_random_generator_keeps_the_trainer_formula_and_never_touches_the_global_rng():
    for seed, step in ((0, 1), (7, 3), (123, 10_000)):
        spec = FilterSpec(strategy="random", value=0.5, seed=seed)
        ours = torch.rand(16, generator=random_generator(spec, step))
        # the formula the trainer mode used before it moved into verl_core (seed * 1_000_003 + global step)
        ref = torch.rand(16, generator=torch.Generator().manual_seed(seed * 1_000_003 + step))
        assert torch.equal(ours, ref)
        assert torch.equal(torch.rand(16, generator=random_generator(spec, step)), ours)  # same spec+step
    assert random_generator(FilterSpec(), 5) is None  # top_p needs no generator
    state = torch.get_rng_state()
    random_generator(FilterSpec(strategy="random", value=0.5), 9)
    assert torch.equal(torch.get_rng_state(), state)


def test_step_handoff_counts_calls_and_prefers_the_trainer_step():
    h = StepHandoff()
    assert [h.next_step() for _ in range(3)] == [1, 2, 3]
    h.begin_step(40)
    assert (h.removed, h.step) == (False, 40)
    assert h.next_step() == 40 and h.step is None and h.calls == 4  # the trainer's step is used once
    assert h.next_step() == 5


def test_mask_mode_random_draws_afresh_each_step_and_reproducibly():
    """The random arm drops as many groups as top-p, uniformly and independently per step.

    Before the fix, mask mode seeded ``spec.seed`` on every call: every step drew the same groups.
    """
    rewards, mask, uids = make_batch(5)
    cfg = {"ragen_filter": {"mode": "mask", "strategy": "random", "value": 0.5, "seed": 7}}
    spec = FilterSpec(strategy="random", value=0.5, seed=7, mode="mask")
    n_top_p = filter_rows(rewards, mask, uids, FilterSpec(value=0.5)).groups.n_kept
    state = torch.get_rng_state()
    est, again = vglue.RagenSNREstimator(), vglue.RagenSNREstimator()
    draws = []
    for step in range(1, 7):
        adv, _ = est(token_level_rewards=rewards, response_mask=mask, index=uids, config=cfg)
        ref = filter_rows(rewards, mask, uids, spec, random_generator(spec, step))
        assert ref.groups.n_kept == n_top_p  # as many groups as top-p keeps
        assert torch.all(adv[~ref.row_mask] == 0)
        kept = ref.rows
        assert torch.equal(adv[kept], group_advantages(rewards[kept], mask[kept], uids[kept.numpy()]))
        assert torch.equal(again(token_level_rewards=rewards, response_mask=mask, index=uids, config=cfg)[0], adv)
        draws.append(tuple(sorted(ref.groups.kept.tolist())))
    assert draws[0] != draws[1] and len(set(draws)) >= 4  # identical scores, different draws (6 steps, C(8,4))
    assert torch.equal(torch.get_rng_state(), state)
    # a one-off call (no handoff) is step 1
    one_off, _ = vglue.ragen_snr_advantage(rewards, mask, uids, config=cfg)
    assert torch.equal(one_off, vglue.RagenSNREstimator()(rewards, mask, uids, config=cfg)[0])


# ------------------------------------------------------------------------------------------------ pinned outputs
# Produced by the code before this refactor (commit dfe9f89: module global _STATE, version check inside verl.py)
# with these stand-ins, make_batch(5) and the loop of test_trainer_and_estimator_outputs_are_unchanged; the
# estimator after the trainer gives the same advantages (sha256 of the float32 bytes, first 16 hex digits).
PINNED_TRAINER = {
    ("random", 1): ([1, 2, 7, 14, 15, 21, 26, 28], "725538e3fbf7fb86", 0.30278884462151395),
    ("random", 2): ([3, 6, 10, 13, 17, 19, 22, 31], "729312f9bd436330", 0.06972111553784861),
    ("random", 3): ([5, 8, 9, 11, 24, 27, 29, 30], "87afc5cb803995bc", 0.2948207171314741),
    ("random", 4): ([3, 6, 10, 13, 17, 19, 22, 31], "729312f9bd436330", 0.06972111553784861),
    ("top_p", 1): ([1, 4, 8, 14, 15, 16, 21, 23, 24, 25, 27, 30], "f3f812202eb46083", 0.8027888446215139),
}
# mask mode without the random strategy (the only mask-mode draws the fix leaves alone), same batch
PINNED_MASK = {
    "top_p": ({"mode": "mask", "top_p": 0.6}, "5cd1a03ff6f3a487"),
    "rloo_off": ({"mode": "mask", "enable": False, "estimator": "rloo"}, "e3be58a8bf95d11e"),
}


def test_trainer_and_estimator_outputs_are_unchanged(fake_verl):
    vglue.register()
    from ragen_core.integrations.verl import trainer as verl_trainer

    est = fake_verl.ADV_ESTIMATOR_REGISTRY[vglue.ADV_ESTIMATOR_NAME]
    rewards, mask, uids = make_batch(5)
    for name, filt in (("random", {"strategy": "random", "value": 0.5, "seed": 7}), ("top_p", {"top_p": 0.7})):
        trainer, keys, _ = trainer_on(verl_trainer, rewards, mask, uids, filt)
        for step in (1, 2, 3, 4):
            if (name, step) not in PINNED_TRAINER:
                continue
            trainer.global_steps = step
            metrics: dict = {}
            tags = [{"i": i} for i in range(len(keys))]
            out = trainer._balance_batch(KVBatchMeta(keys=keys, tags=tags), metrics)
            kept = [keys.index(k) for k in out.keys]
            idx = torch.tensor(kept)
            adv, ret = est(token_level_rewards=rewards[idx], response_mask=mask[idx], index=uids[kept],
                           config=trainer.config.algorithm)
            want_kept, want_sha, want_ratio = PINNED_TRAINER[(name, step)]
            assert (kept, sha(adv), metrics["ragen_filter/selected_variance_ratio"]) == (want_kept, want_sha,
                                                                                         want_ratio)
            assert out.tags == [{"i": i} for i in kept] and torch.equal(adv, ret)
    for cfg, want in PINNED_MASK.values():
        for _ in range(3):
            assert sha(est(rewards, mask, uids, config={"ragen_filter": cfg})[0]) == want


# ------------------------------------------------------------------------------------------------ the handoff
def test_trainer_tells_the_registered_estimator_its_step_and_the_removal(fake_verl):
    vglue.register()
    from ragen_core.integrations.verl import trainer as verl_trainer

    est = fake_verl.get_adv_estimator_fn(vglue.ADV_ESTIMATOR_NAME)
    assert isinstance(est, vglue.RagenSNREstimator)
    rewards, mask, uids = make_batch(6)
    # mask mode: nothing removed; the estimator draws with the trainer's global step, not its own call count
    cfg = {"mode": "mask", "strategy": "random", "value": 0.5, "seed": 3}
    trainer, keys, tq = trainer_on(verl_trainer, rewards, mask, uids, cfg)
    trainer.global_steps = 17
    out = trainer._balance_batch(KVBatchMeta(keys=keys, tags=[{}] * len(keys)), {})
    assert out.keys == keys and tq.cleared == [] and est.handoff.step == 17 and not est.handoff.removed
    adv, _ = est(rewards, mask, uids, config=trainer.config.algorithm)
    spec = FilterSpec.from_config(cfg)
    assert zero_rows(adv) == zero_rows(vglue.ragen_snr_advantage(rewards, mask, uids, config={"ragen_filter": cfg},
                                                                 handoff=StepHandoff(step=17))[0])
    ref = filter_rows(rewards, mask, uids, spec, random_generator(spec, 17))
    assert torch.all(adv[~ref.row_mask] == 0) and est.handoff.step is None and est.handoff.calls == 1
    # remove mode: the trainer removes, the estimator accepts once, then refuses a step the trainer did not see
    trainer.config = SimpleNamespace(algorithm={"ragen_filter": {"top_p": 0.7}})
    trainer.global_steps = 18
    out = trainer._balance_batch(KVBatchMeta(keys=keys, tags=[{}] * len(keys)), {})
    assert est.handoff.removed and len(out.keys) < len(keys)
    kept = [keys.index(k) for k in out.keys]
    adv, _ = est(rewards[kept], mask[kept], uids[kept], config=trainer.config.algorithm)
    assert torch.equal(adv, group_advantages(rewards[kept], mask[kept], uids[kept]))
    assert not est.handoff.removed
    with pytest.raises(RuntimeError, match="ragen_snr_sync"):
        est(rewards, mask, uids, config=trainer.config.algorithm)
    # register() is idempotent: the same estimator (and handoff) stays registered
    vglue.register()
    assert fake_verl.get_adv_estimator_fn(vglue.ADV_ESTIMATOR_NAME) is est


def test_register_fills_the_three_registries(fake_verl):
    vglue.register()
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    from ragen_core.integrations.verl import agent as verl_agent
    from ragen_core.integrations.verl import trainer as verl_trainer

    assert TRAINER_REGISTRY[vglue.TRAINER_MODE] is verl_trainer.RagenSNRTrainer
    target = _agent_loop_registry[vglue.AGENT_LOOP_NAME]["_target_"]
    assert target == f"{verl_agent.__name__}.RagenEnvAgentLoop"
    assert target == "ragen_core.integrations.verl.agent.RagenEnvAgentLoop"
    text = (ROOT / "scripts/verl/agent_loop.yaml").read_text()
    assert f"_target_: {target}" in text and f"name: {vglue.AGENT_LOOP_NAME}" in text


# ------------------------------------------------------------------------------------------------ version module
def test_verl_version_module_mirrors_trl_version(monkeypatch):
    monkeypatch.delenv("RAGEN2_ALLOW_UNTESTED_VERL", raising=False)
    check = verl_version.check_verl_version
    assert vglue.check_verl_version is check  # the adapter's public names are the version module's
    assert vglue.UnsupportedVerlVersionError is verl_version.UnsupportedVerlVersionError
    assert issubclass(verl_version.UnsupportedVerlVersionError, ImportError)
    for ok in ("0.9.1", "0.9.2", "0.9.10.post1", "0.9.3rc1"):
        assert check(ok) == ok
    for bad in ("0.9.0", "0.8.5", "0.10.0", "1.0.0rc1", "0.9"):
        with pytest.raises(verl_version.UnsupportedVerlVersionError,
                           match=r"verl>=0\.9\.1,<0\.10\.0 \(tested: 0\.9\.1\).*found verl==.*try it anyway"):
            check(bad)
    from ragen_core.integrations.versions import format_release, release

    expected = {"1.16.0": (1, 16, 0), "0.9.1": (0, 9, 1), "1.17.0.dev0": (1, 17, 0), "2": (2, 0, 0),
                "1.x.3": (1, 0, 0), "10.2.3.4": (10, 2, 3), "1.0.0rc1": (1, 0, 0)}
    for version, parts in expected.items():
        assert release(version) == parts
        assert format_release(parts) == ".".join(map(str, parts))
    # one check for both adapters: each module's check is a shared VersionGate's (messages differ only by name)
    assert isinstance(verl_version.VERL_GATE, versions.VersionGate) and check == verl_version.VERL_GATE.check
    assert isinstance(trl_version.TRL_GATE, versions.VersionGate)
    assert trl_version.check_trl_version == trl_version.TRL_GATE.check
    assert (verl_version.VERL_GATE.override_env, trl_version.TRL_GATE.override_env) == (
        "RAGEN2_ALLOW_UNTESTED_VERL", "RAGEN2_ALLOW_UNTESTED_TRL")
    monkeypatch.setenv("RAGEN2_ALLOW_UNTESTED_VERL", "1")
    with pytest.warns(RuntimeWarning, match="RAGEN2_ALLOW_UNTESTED_VERL=1: trying anyway"):
        assert check("0.10.0") == "0.10.0"
    def missing(dist):
        raise LookupError(dist)

    monkeypatch.setattr(versions, "metadata", SimpleNamespace(version=missing, PackageNotFoundError=LookupError))
    with pytest.raises(verl_version.UnsupportedVerlVersionError, match="verl is not installed"):
        check()


def test_glue_refuses_a_wrong_verl_before_importing_it(fake_verl, monkeypatch):
    monkeypatch.delenv("RAGEN2_ALLOW_UNTESTED_VERL", raising=False)
    monkeypatch.setattr(versions, "metadata", SimpleNamespace(version=lambda d: "0.10.1",
                                                                  PackageNotFoundError=LookupError))
    for name in GLUE:
        with pytest.raises(verl_version.UnsupportedVerlVersionError, match="found verl==0.10.1"):
            importlib.import_module(name)
    with pytest.raises(verl_version.UnsupportedVerlVersionError, match="found verl==0.10.1"):
        vglue.register()
    assert fake_verl.ADV_ESTIMATOR_REGISTRY == {}


# ------------------------------------------------------------------------------------------------ import direction
def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_verl_glue_imports_point_one_way():
    """``verl.adapter`` (register) imports the trainer and agent modules; nothing below imports the adapter (or
    the package's names, which are the adapter's) back, and the verl-free layer never reaches the glue."""
    base = ROOT / "ragen_core" / "integrations" / "verl"
    top = "ragen_core.integrations.verl"
    for name in ("trainer", "agent", "core", "mi", "env", "version"):
        imported = _imports(base / f"{name}.py")
        assert f"{top}.adapter" not in imported and top not in imported, name
    for name in ("core", "mi", "env", "version"):  # the verl-free layer never reaches up
        assert not {f"{top}.trainer", f"{top}.agent"} & _imports(base / f"{name}.py"), name
    assert {f"{top}.trainer", f"{top}.agent", f"{top}.core", f"{top}.version"} <= _imports(base / "adapter.py")


def test_each_verl_module_imports_alone():
    """In a fresh interpreter each module imports first (the glue modules on the stand-ins), the adapter last."""
    code = f"""
import importlib, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import {Path(__file__).stem} as tests
import importlib.metadata
import ragen_core.integrations as pkg
real = importlib.metadata.version
importlib.metadata.version = lambda dist: "0.9.1" if dist == "verl" else real(dist)
sys.modules.update(tests._verl_stand_ins())
for name in ("trainer", "agent", "mi", "core", "version", "adapter"):
    for m in [m for m in sys.modules if m.startswith("ragen_core.integrations.verl")]:
        del sys.modules[m]
    if hasattr(pkg, "verl"):
        delattr(pkg, "verl")
    importlib.import_module("ragen_core.integrations.verl." + name)
    if name != "adapter":
        assert "ragen_core.integrations.verl.adapter" not in sys.modules, name
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
