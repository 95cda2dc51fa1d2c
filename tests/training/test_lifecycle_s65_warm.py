"""The warm start's numbers: a warm start whose loss or gradient norm turns NaN/inf stops before that optimiser step
(one line naming the step, the quantity and warm_start.lr); a finite one is bit-identical to the plain loop; the
warm-start cache never stores or loads weights that are not finite, and uses an entry only for the starting weights
it was trained from (a model folder replaced in place)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.policy import HFPolicy
from ragen_core.rollout import RolloutSettings, make_envs
from ragen_core.training.checkpoint import NonFiniteError
from ragen_core.training.config import ConfigError, load_config
from ragen_core.training.sft import collect_sft_batch, sft_train
from ragen_core.training.warm_cache import cache_key, cached_step0, cached_warm_start

ENV_ID = register("test/ParityWarmLifecycle-v0", ParityEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


@pytest.fixture(scope="module")
def batch(model_dir):
    policy = HFPolicy.from_pretrained(model_dir)
    envs = make_envs(ENV_ID, 8, {})
    return collect_sft_batch(policy, envs, list(range(8)), RolloutSettings(max_turns=1, max_new_tokens=8),
                             kind="random", rng=np.random.default_rng(0))


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def finite(state: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())


def cfg_for(model_dir: Path, cache: Path, *extra: str):
    return load_config(None, [f"env.id={ENV_ID}", f"model.path={model_dir}", "rollout.max_turns=1",
                              "rollout.max_new_tokens=8", "run.device=cpu", "run.progress=false",
                              "warm_start.sft_episodes=8", "warm_start.policy=random", "warm_start.batch_size=4",
                              "warm_start.epochs=1", f"warm_start.cache_dir={cache}", *extra])


# ------------------------------------------------------------------ a warm start that diverges

def test_a_diverging_warm_start_stops_before_the_optimiser_step(model_dir, batch):
    """warm_start.lr=1e30: the first step puts the weights near 1e30, the second step's loss is NaN. The warm
    start used to train on (NaN weights); it now stops before that step, whose weights stay finite."""
    policy = HFPolicy.from_pretrained(model_dir)
    with pytest.raises(NonFiniteError) as caught:
        sft_train(policy, batch, epochs=2, lr=1e30, batch_size=8, generator=torch.Generator().manual_seed(0))
    message = str(caught.value)
    assert isinstance(caught.value, ConfigError) and "\n" not in message
    assert "warm start diverged at its optimiser step 2 of 2" in message, message
    assert "loss = nan" in message and "lower warm_start.lr (now 1e+30)" in message, message
    assert finite(weights(policy.model))


def _old_sft_train(policy, batch, *, epochs, lr, batch_size, generator, device=None, schedule="constant"):
    """sft_train's loop as it was before the finiteness check (the arithmetic a finite warm start must keep)."""
    model = policy.model
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    n = batch.input_ids.shape[0]
    total = epochs * ((n + batch_size - 1) // batch_size)
    warmup = max(1, total // 20)

    def lr_at(k):
        if schedule == "constant":
            return lr
        return lr * min((k + 1) / warmup, max(0.0, (total - k) / max(total - warmup, 1)))

    k_step, dev = 0, device or policy.device
    losses = []
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        for s in range(0, n, batch_size):
            idx = perm[s: s + batch_size]
            am = batch.attention_mask[idx]
            t = int(am.sum(dim=1).max())
            ids, am, lm = batch.input_ids[idx, :t].to(dev), am[:, :t].to(dev), batch.loss_mask[idx, :t].to(dev)
            out = policy.forward_logprobs(ids, am, images=None, score_mask=lm != 0)
            m = (lm != 0).float()
            loss = -(out.logprobs.float() * m).sum() / m.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            for group in opt.param_groups:
                group["lr"] = lr_at(k_step)
            opt.step()
            k_step += 1
            losses.append(loss.item())
    model.eval()
    return losses


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_a_finite_warm_start_is_bit_identical_to_the_plain_loop(model_dir, batch, schedule):
    new, old = HFPolicy.from_pretrained(model_dir), HFPolicy.from_pretrained(model_dir)
    stats = sft_train(new, batch, epochs=2, lr=1e-3, batch_size=3, generator=torch.Generator().manual_seed(5),
                      schedule=schedule)
    losses = _old_sft_train(old, batch, epochs=2, lr=1e-3, batch_size=3, generator=torch.Generator().manual_seed(5),
                            schedule=schedule)
    a, b = weights(new.model), weights(old.model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert stats["sft/loss_last"] == float(np.mean(losses[len(losses) // 2:]))


# ------------------------------------------------------------------ the warm-start cache

def test_weights_that_are_not_finite_are_never_cached(model_dir, tmp_path):
    cfg = cfg_for(model_dir, tmp_path / "cache", "warm_start.lr=1e30", "warm_start.batch_size=8",
                  "warm_start.epochs=2")
    with pytest.raises(NonFiniteError, match="warm_start.lr"):
        cached_warm_start(HFPolicy.from_pretrained(model_dir), cfg)
    assert not list((tmp_path / "cache").glob("*.pt"))


def _entry_digest(state: dict[str, torch.Tensor], metrics: dict) -> str:
    """The SHA-256 a cache entry carries (every tensor's name, dtype, shape and bytes, then the metrics' JSON)."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(metrics, sort_keys=True).encode())
    return h.hexdigest()


def test_a_cached_entry_with_nan_weights_is_not_loaded(model_dir, tmp_path):
    """An entry written before the warm start stopped on NaN (its digest intact) is trained again, not loaded."""
    cfg = cfg_for(model_dir, tmp_path / "cache")
    good = HFPolicy.from_pretrained(model_dir)
    assert cached_warm_start(good, cfg)["sft/cached"] == 0.0
    trained = weights(good.model)
    entry = tmp_path / "cache" / f"{cache_key(cfg)}.pt"
    blob = torch.load(entry, weights_only=True)
    name = next(k for k, t in blob["model"].items() if t.is_floating_point())
    blob["model"][name].view(-1)[0] = float("nan")
    blob["sha256"] = _entry_digest(blob["model"], blob["metrics"])
    torch.save(blob, entry)
    policy = HFPolicy.from_pretrained(model_dir)
    with pytest.warns(RuntimeWarning, match="NaN or inf"):
        assert cached_warm_start(policy, cfg)["sft/cached"] == 0.0
    got = weights(policy.model)
    assert all(torch.equal(got[k], trained[k]) for k in trained)


def _replace_weights_in_place(model_dir: Path, scale: float) -> None:
    """The model folder's weights scaled by `scale`: same path, names and shapes, other values."""
    policy = HFPolicy.from_pretrained(model_dir)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.mul_(scale)
    policy.model.save_pretrained(model_dir)


def test_a_model_folder_replaced_in_place_trains_its_own_warm_start(model_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    cfg = cfg_for(folder, tmp_path / "cache")
    assert cached_warm_start(HFPolicy.from_pretrained(folder), cfg)["sft/cached"] == 0.0
    _replace_weights_in_place(folder, 1.5)
    fresh = HFPolicy.from_pretrained(folder)  # the reference: the new weights' warm start, no cache
    cached_warm_start(fresh, cfg_for(folder, ""))
    policy = HFPolicy.from_pretrained(folder)
    with pytest.warns(RuntimeWarning, match="other starting weights"):
        assert cached_warm_start(policy, cfg)["sft/cached"] == 0.0  # it used to load the old weights' warm start
    a, b = weights(policy.model), weights(fresh.model)
    assert all(torch.equal(a[k], b[k]) for k in a)
    again = HFPolicy.from_pretrained(folder)
    assert cached_warm_start(again, cfg)["sft/cached"] == 1.0  # the entry now holds the new weights' warm start


def test_a_step0_measurement_is_reused_only_for_the_weights_it_measured(model_dir, tmp_path):
    cfg = cfg_for(model_dir, tmp_path / "cache")
    one = HFPolicy.from_pretrained(model_dir).model
    other = HFPolicy.from_pretrained(model_dir).model
    with torch.no_grad():
        next(other.parameters()).mul_(2.0)
    assert cached_step0(cfg, "probe", lambda: {"x": 1.0}, one) == ({"x": 1.0}, False)
    assert cached_step0(cfg, "probe", lambda: pytest.fail("measured twice"), one) == ({"x": 1.0}, True)
    with pytest.warns(RuntimeWarning, match="measured on other weights"):
        assert cached_step0(cfg, "probe", lambda: {"x": 2.0}, other) == ({"x": 2.0}, False)
