"""bfloat16 training keeps its small updates: the optimiser steps float32 master copies of 16-bit weights
(ragen_core.training.sft.Float32Master), float32 runs keep the plain optimiser, and a bf16 run resumes identically."""

from __future__ import annotations

import types

import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.policy import HFPolicy
from ragen_core.training.config import TrainConfig, load_config
from ragen_core.training.sft import sft_train
from ragen_core.training.trainer import Trainer, make_optimizer

ENV_ID = "test/ParityS67-v0"
register(ENV_ID, ParityEnv)


def _algo(**kw):
    algo = TrainConfig().algo
    for k, v in kw.items():
        setattr(algo, k, v)
    return algo


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_bf16_weights_follow_a_float32_reference(optimizer):
    # Weights near 0.5: one bfloat16 step there is 2**-8 = 0.0039, so a pure-bf16 optimiser step of ~lr = 2e-5
    # rounds back to the same weight every time; 300 steps move a float32 weight by ~6e-3, more than one step.
    g = torch.Generator().manual_seed(0)
    w0 = (0.5 + 0.05 * torch.rand(64, generator=g))
    grads = [torch.randn(64, generator=g).abs() + 0.1 for _ in range(300)]
    lr = 2e-5 if optimizer == "adamw" else 2e-5 / 1.1
    p = torch.nn.Parameter(w0.to(torch.bfloat16))
    opt = make_optimizer([p], _algo(lr=lr, optimizer=optimizer, weight_decay=0.0))
    ref = torch.nn.Parameter(p.detach().float().clone())
    ref_opt = (torch.optim.AdamW([ref], lr=lr, weight_decay=0.0, eps=_algo().adam_eps) if optimizer == "adamw"
               else torch.optim.SGD([ref], lr=lr, weight_decay=0.0))
    for gr in grads:
        opt.zero_grad(set_to_none=True)
        p.grad = gr.to(torch.bfloat16)
        opt.step()
        ref.grad = gr.to(torch.bfloat16).float()
        ref_opt.step()
    assert p.dtype == torch.bfloat16
    moved = (ref.detach() - w0.to(torch.bfloat16).float()).abs()
    assert float(moved.min()) > 0.004  # the reference moved every weight by more than one bf16 step
    assert torch.equal(p.detach(), ref.detach().to(torch.bfloat16))  # the bf16 weights are the reference, rounded


def test_float32_parameters_get_the_plain_optimiser():
    p = torch.nn.Parameter(torch.ones(3))
    assert type(make_optimizer([p], _algo())) is torch.optim.AdamW
    assert type(make_optimizer([p], _algo(optimizer="sgd"))) is torch.optim.SGD


def test_master_state_round_trip_and_an_old_state_dict():
    def fresh():
        p = torch.nn.Parameter(torch.full((8,), 0.75).to(torch.bfloat16))
        return p, make_optimizer([p], _algo(lr=1e-5, weight_decay=0.0))

    def steps(p, opt, n):
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            p.grad = torch.ones_like(p)
            opt.step()

    p, opt = fresh()
    steps(p, opt, 100)
    state = opt.state_dict()
    assert state["float32_master"][0].dtype == torch.float32
    steps(p, opt, 300)
    q2, opt3 = fresh()
    # resume: weights from "the checkpoint" (after 100 steps), then the optimiser state
    p_b, opt_b = fresh()
    steps(p_b, opt_b, 100)
    q2.data.copy_(p_b.detach())
    opt3.load_state_dict(state)
    steps(q2, opt3, 300)
    assert torch.equal(q2.detach(), p.detach())
    assert float((p.detach().float() - 0.75).abs().max()) > 0  # 400 steps of 1e-5 crossed a bf16 step at 0.75
    # a state dict of a plain optimiser (no master copies): the copies start from the weights
    plain = {k: v for k, v in state.items() if k != "float32_master"}
    q3, opt4 = fresh()
    q3.data.copy_(p_b.detach())
    opt4.load_state_dict(plain)
    assert torch.equal(opt4.master[0], p_b.detach().float())


def test_sft_on_bfloat16_moves_the_norm_weights(make_tiny_model):
    # RMSNorm weights start at 1.0, where one bf16 step is 2**-7: warm-start updates of ~lr = 1e-3 each were
    # all rounded away; through float32 copies they add up.
    policy = HFPolicy.from_pretrained(make_tiny_model("value 12 Say anything. go"), dtype="bfloat16")
    norms = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "norm" in n}
    assert norms and all(t.dtype == torch.bfloat16 for t in norms.values())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 40, (8, 24), generator=g)
    ones = torch.ones_like(ids)
    loss_mask = ones.clone()
    loss_mask[:, :8] = 0
    batch = types.SimpleNamespace(input_ids=ids, attention_mask=ones, loss_mask=loss_mask, images=None)
    out = sft_train(policy, batch, epochs=8, lr=1e-3, batch_size=4, generator=torch.Generator().manual_seed(1))
    assert out["sft/loss_last"] < out["sft/loss_first"]
    moved = sum(int((p.detach() != norms[n]).sum()) for n, p in policy.model.named_parameters() if n in norms)
    assert moved > 0


def _cfg(*overrides: str) -> TrainConfig:
    base = [f"env.id={ENV_ID}", "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.steps=3", "run.progress=false", "run.device=cpu", "algo.lr=1e-6",
            "algo.name=ppo", "model.dtype=bfloat16", "filter.enabled=false", "algo.entropy_coef=0.01",
            "algo.mini_batch_size=8", "algo.micro_batch_size=4", "eval.episodes=4", "eval.every=0", "mi.every=0",
            "run.seed=3"]
    return load_config(None, base + list(overrides))


def test_bf16_trainer_checkpoints_its_float32_masters_and_resumes_identically(make_tiny_model, tmp_path):
    model_dir = make_tiny_model("value 12 Say anything. go")

    def policy():
        return HFPolicy.from_pretrained(model_dir, dtype="bfloat16")

    start = {n: p.detach().float().clone() for n, p in policy().model.named_parameters()}
    straight = Trainer(_cfg(), tmp_path / "a", policy=policy())
    hist_a = straight.fit()
    Trainer(_cfg("run.steps=2"), tmp_path / "b", policy=policy()).fit()
    hist_b = Trainer(_cfg(), tmp_path / "b", policy=policy(), resume=True).fit()
    ck = {d: torch.load(tmp_path / d / "checkpoints" / "latest.pt", weights_only=False) for d in "ab"}
    names = [n for n, _ in straight.model.named_parameters()]
    masters = ck["a"]["optimizer"]["float32_master"]
    assert len(masters) == len(names)
    for name, m in zip(names, masters):
        assert m.dtype == torch.float32
        assert ck["a"]["model"][name].dtype == torch.bfloat16
        assert torch.equal(m.to(torch.bfloat16), ck["a"]["model"][name]), name
    # lr 1e-6: the masters moved where most bf16 weights cannot yet
    moved = sum(int((m != start[n]).sum()) for n, m in zip(names, masters))
    assert moved > 0.5 * sum(m.numel() for m in masters)
    assert ck["a"]["critic_optimizer"]["float32_master"]  # the critic's backbone is bf16 too
    for name in ck["a"]["model"]:
        assert torch.equal(ck["a"]["model"][name], ck["b"]["model"][name]), name
    for x, y in zip(masters, ck["b"]["optimizer"]["float32_master"]):
        assert torch.equal(x, y)

    def strip(hist):
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in hist]

    assert strip(hist_a) == strip(hist_b)
