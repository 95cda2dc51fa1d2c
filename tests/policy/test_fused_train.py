"""`model.fused_training`: the compiled training pieces (`ragen_core.policy.fused_train`, the `train_*` operators of
`ragen_core/policy/csrc/decode_step.cpp`) against independent references.

- each compiled piece against its float64 formula written out here (and its backward against autograd of that
  formula), at odd row counts, the shipped widths and saturating inputs;
- the lean forward with the fused layers against transformers' forward (`HFPolicy.fast = False`): log-probs,
  entropies and every parameter's gradient, with shared prompts, score masks and a prefix whose last layer runs
  keys and values only, at the shipped tiny model's shapes;
- the trainer: the switch reaches the policy and AdamW, and a setting it cannot run is a config error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ragen_core.policy import fused_train
from ragen_core.policy.fused_train import fused_training_problem

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="module")
def lib():
    try:
        return fused_train.ops()
    except RuntimeError as exc:  # no C++ compiler: the switch is refused (tested below), nothing else to test
        pytest.skip(str(exc))


def _randn(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


# ------------------------------------------------------------------------------------- the pieces, one by one
def _rms64(h, w, eps):
    h = h.double()
    return w.double() * h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("n, d", [(1, 8), (37, 128), (130, 128), (5, 512)])
def test_rms_norm_forward_and_backward_equal_the_formula(lib, n, d):
    h, w, dy, res = _randn(n, d, seed=1, scale=3.0), _randn(d, seed=2), _randn(n, d, seed=3), _randn(n, d, seed=4)
    y, r = lib.train_rms_forward(h, w, 1e-6)
    torch.testing.assert_close(y.double(), _rms64(h, w, 1e-6), rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(r.double(), 1 / torch.sqrt(h.double().pow(2).mean(-1) + 1e-6), rtol=2e-6, atol=0)
    h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
    dh_ref, dw_ref = torch.autograd.grad(_rms64(h64, w64, 1e-6), (h64, w64), dy.double())
    for residual in (None, res):
        dh, dw = lib.train_rms_backward(dy, h, w, r, residual)
        want = dh_ref + (0 if residual is None else residual.double())
        torch.testing.assert_close(dh.double(), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dw.double(), dw_ref, rtol=1e-5, atol=1e-5)


def _swiglu64(gu):
    g, u = gu.double().chunk(2, -1)
    return g * torch.sigmoid(g) * u


@pytest.mark.parametrize("n, inter", [(1, 8), (37, 512), (64, 40)])
def test_swiglu_forward_and_backward_equal_the_formula(lib, n, inter):
    gu = _randn(n, 2 * inter, seed=5, scale=4.0)
    gu[0, :4] = torch.tensor([-100.0, 100.0, -88.5, 0.0])  # past the exponential's clamp, and zero
    da = _randn(n, inter, seed=6)
    a = lib.train_swiglu_forward(gu)
    torch.testing.assert_close(a.double(), _swiglu64(gu), rtol=3e-6, atol=1e-6)
    gu64 = gu.double().requires_grad_()
    (want,) = torch.autograd.grad(_swiglu64(gu64), gu64, da.double())
    got = lib.train_swiglu_backward(da, gu)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def _rope64(x, cos, sin):
    x = x.double()
    return x * cos.double() + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin.double()


@pytest.mark.parametrize("b, t, hq, hk, d", [(1, 1, 4, 2, 16), (3, 11, 4, 2, 32), (2, 7, 0, 2, 32), (2, 5, 6, 3, 64)])
def test_rope_split_and_its_backward_equal_the_formula(lib, b, t, hq, hk, d):
    heads = hq + 2 * hk
    qkv = _randn(b * t, heads * d, seed=7)
    angles = _randn(b * t, d // 2, seed=8, scale=3.0)
    cos = torch.cat([angles.cos(), angles.cos()], -1)
    sin = torch.cat([-angles.sin(), angles.sin()], -1)
    q, k, v = lib.train_rope_split(qkv, cos, sin, b, t, hq, hk, d)
    x = qkv.view(b, t, heads, d)
    c, s = cos.view(b, t, 1, d), sin.view(b, t, 1, d)
    rot = _rope64(x[:, :, : hq + hk], c, s)
    torch.testing.assert_close(q.double(), rot[:, :, :hq].transpose(1, 2), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k.double(), rot[:, :, hq:].transpose(1, 2), rtol=1e-6, atol=1e-6)
    assert torch.equal(v, x[:, :, hq + hk :].transpose(1, 2))
    # backward: gradients given in the layout attention returns them ([B, T, H, d] memory, [B, H, T, d] view)
    dq = _randn(b, t, hq, d, seed=9).transpose(1, 2)
    dk, dv = _randn(b, hk, t, d, seed=10), _randn(b, hk, t, d, seed=11)
    x64 = x.double().requires_grad_()
    rot64 = _rope64(x64[:, :, : hq + hk], c, s)
    outs = [rot64[:, :, :hq].transpose(1, 2), rot64[:, :, hq:].transpose(1, 2), x64[:, :, hq + hk :].transpose(1, 2)]
    for grads in ((dq, dk, dv), (dq, None, dv), (None, dk, None)):
        if hq == 0 and grads[0] is not None:
            grads = (None, *grads[1:])
        pairs = [(o, g.double()) for o, g in zip(outs, grads, strict=True) if g is not None and o.numel()]
        (want,) = torch.autograd.grad([o for o, _ in pairs], x64, [g for _, g in pairs], retain_graph=True)
        got = lib.train_rope_merge(*grads, cos, sin, b, t, hq, hk, d)
        torch.testing.assert_close(got.view(b, t, heads, d).double(), want, rtol=1e-6, atol=1e-6)


def test_the_pieces_refuse_what_they_cannot_take(lib):
    with pytest.raises(RuntimeError, match="multiple of 8 columns"):
        lib.train_rms_forward(torch.ones(3, 12), torch.ones(12), 1e-6)
    with pytest.raises(RuntimeError, match="float32"):
        lib.train_rms_forward(torch.ones(3, 16, dtype=torch.float64), torch.ones(16, dtype=torch.float64), 1e-6)
    with pytest.raises(RuntimeError, match="head dim a multiple of 16"):
        lib.train_rope_split(torch.ones(2, 4 * 8), torch.ones(2, 8), torch.ones(2, 8), 1, 2, 2, 1, 8)


# ------------------------------------------------------------------------------------- the layers in a model
@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    """A tiny model of the shipped shapes: hidden 128, 4 query and 2 key/value heads of 32, MLP 512."""
    return make_tiny_policy("Say go. value 12", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=512)


def _rows(gen, lengths, shared):
    b, t = len(lengths), max(lengths)
    ids, mask = torch.zeros(b, t, dtype=torch.long), torch.zeros(b, t, dtype=torch.long)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(5, 200, (n,), generator=gen)
        mask[r, :n] = 1
    for r in range(1, shared):
        cut = min(int(0.7 * lengths[0]), lengths[r])
        ids[r, :cut] = ids[0, :cut]
    return ids, mask


@pytest.mark.parametrize("case", ["prompt and response", "every position", "shared prompts"])
def test_fused_layers_give_transformers_logprobs_entropies_and_gradients(lib, policy, case):
    gen = torch.Generator().manual_seed(len(case))
    lengths = [150, 143, 171, 96, 160]
    ids, mask = _rows(gen, lengths, shared=4 if case == "shared prompts" else 0)
    score = None
    if case != "every position":
        score = torch.zeros_like(mask)
        for r, n in enumerate(lengths):
            score[r, int(0.75 * n) : n] = 1  # a prompt of 3/4 of the row, as the warm start's
    weights = torch.randn(ids.shape, generator=gen)

    def run():
        policy.model.zero_grad(set_to_none=True)
        out = policy.forward_logprobs(ids, mask, with_entropy=True, score_mask=score)
        ((out.logprobs * weights).sum() + 0.1 * out.entropy.sum()).backward()
        return out, [p.grad.clone() for p in policy.model.parameters()]

    policy.fast = False
    try:
        (ref, ref_grads) = run()
    finally:
        policy.fast = True
    policy.fused_training = True
    try:
        assert policy._fast_model().fused_training
        got, got_grads = run()
    finally:
        policy.fused_training = False
    torch.testing.assert_close(got.logprobs, ref.logprobs, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(got.entropy, ref.entropy, rtol=1e-5, atol=2e-5)
    # Gradients within float32 rounding of their own scale (the operator path's own distance from transformers' is
    # 3e-7 to 6e-7 of the largest entry at these shapes; a wrong derivative is off by the scale itself).
    names = [n for n, _ in policy.model.named_parameters()]
    for name, a, b in zip(names, ref_grads, got_grads, strict=True):
        scale = float(a.abs().max())
        assert float((b - a).abs().max()) <= 5e-6 * scale, name


def test_fused_layers_are_taken_only_when_switched_on(lib, policy, monkeypatch):
    calls = []
    real = fused_train.FinishLayer.apply
    monkeypatch.setattr(fused_train.FinishLayer, "apply", lambda *a: calls.append(1) or real(*a))
    ids, mask = _rows(torch.Generator().manual_seed(0), [12, 9], 0)
    policy.forward_logprobs(ids, mask)
    assert calls == []
    policy.fused_training = True
    try:
        policy.forward_logprobs(ids, mask)
    finally:
        policy.fused_training = False
    assert len(calls) == 2  # one per layer: the continuation runs both layers' MLPs


def test_generation_runs_with_the_fused_layers_in_its_prefill(lib, policy):
    """The prefill of generation goes through `_qkv` and `_finish_layer` too: with the switch on it still samples
    valid tokens, and greedy decoding picks transformers' tokens where the top two logits are far apart."""
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    policy.fused_training = True
    try:
        fused = policy.generate(prompts, max_new_tokens=6, greedy=True)
    finally:
        policy.fused_training = False
    plain = policy.generate(prompts, max_new_tokens=6, greedy=True)
    assert [g.response_ids for g in fused] == [g.response_ids for g in plain]


# ------------------------------------------------------------------------------------- the switch
def test_the_trainer_passes_the_switch_to_the_policy_and_adamw(lib, tmp_path):
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    def one_step(on: bool):
        cfg = load_config(ROOT / "configs" / "bandit_tiny.toml",
                          [f"model.fused_training={str(on).lower()}", "run.steps=1", "run.progress=false",
                           "warm_start.sft_episodes=32", "eval.every=0", "mi.every=0", 'warm_start.cache_dir=""'])
        trainer = Trainer(cfg, tmp_path / f"run-{on}")
        assert trainer.policy.fused_training is on
        assert bool(trainer.optimizer.defaults["fused"]) is on
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.fit()  # the warm start (SFT), the step-0 measurements and one RL step
        moved = sum(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters(), strict=True))
        lines = (tmp_path / f"run-{on}" / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines], moved

    (plain, moved_plain), (fused, moved_fused) = one_step(False), one_step(True)
    assert moved_fused == moved_plain > 0
    # The warm start's first epoch: the same batches from the same weights, so the same losses to float rounding
    # (the trajectories part later, which is why this switch is off by default).
    assert fused[0]["sft/loss_first"] == pytest.approx(plain[0]["sft/loss_first"], rel=1e-4)
    assert [set(m) for m in fused] == [set(m) for m in plain]
    assert [{k for k, v in m.items() if v is None or v != v} for m in fused] == \
        [{k for k, v in m.items() if v is None or v != v} for m in plain]  # no NaN where the operator path has none


@pytest.mark.parametrize("override, why", [
    ("model.fast_forward=false", "model.fast_forward is false"),
    ("model.dtype=bfloat16", "float32 weights"),
])
def test_a_setting_the_fused_step_cannot_run_is_a_config_error(lib, tmp_path, override, why):
    from ragen_core.training.config import ConfigError, load_config
    from ragen_core.training.trainer import Trainer

    cfg = load_config(ROOT / "configs" / "bandit_tiny.toml",
                      ["model.fused_training=true", override, "run.progress=false"])
    with pytest.raises(ConfigError, match=f"model.fused_training = true cannot run here: .*{why}"):
        Trainer(cfg, tmp_path / "run")


def test_a_model_of_unsupported_sizes_is_named(make_tiny_policy):
    pol = make_tiny_policy("go", hidden=32, layers=1, heads=4, kv_heads=2)  # head dim 8
    assert "head dim of a multiple of 16" in fused_training_problem(pol.model, "cpu")
    assert "CPU only" in fused_training_problem(pol.model, "meta")


def test_ragen_eval_scores_a_fused_run_as_its_validations_did(lib, tmp_path, make_tiny_model):
    """`ragen eval` of a run trained with the switch takes the fused layers (its validations' rounding); where they
    cannot run, a warning says so and the operator path scores it."""
    from ragen_core.apps.eval.local import ModelSource
    from ragen_core.training.config import load_config

    cfg = load_config(ROOT / "configs" / "bandit_tiny.toml", ["model.fused_training=true"])
    shipped_shape = make_tiny_model("Say go.", hidden=128, heads=4, kv_heads=2, intermediate=512)
    assert ModelSource(str(shipped_shape), run_config=cfg).load("ragen/Bandit-v0", {}).policy.fused_training
    plain = load_config(ROOT / "configs" / "bandit_tiny.toml", [])
    assert not ModelSource(str(shipped_shape), run_config=plain).load("ragen/Bandit-v0", {}).policy.fused_training
    head_dim_8 = make_tiny_model("Say go.", hidden=32, heads=4, kv_heads=2)
    with pytest.warns(UserWarning, match=r"model.fused_training = true, which cannot run here \(.*head dim"):
        loaded = ModelSource(str(head_dim_8), run_config=cfg).load("ragen/Bandit-v0", {})
    assert not loaded.policy.fused_training
