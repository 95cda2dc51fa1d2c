"""Policy/value losses and KL estimators: values against per-token loops, gradients by finite differences."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.advantages import aggregate_loss
from ragen_core.math.losses import kl_penalty, ppo_policy_loss, value_loss
from ragen_core.math.metrics import token_entropy

# --------------------------------------------------------------------------------------------------------------
# PPO policy loss
# --------------------------------------------------------------------------------------------------------------


def ref_ppo_token(logp: float, old: float, adv: float, lo: float, hi: float, c: float | None) -> float:
    ratio = math.exp(logp - old)
    l1 = -adv * ratio
    l2 = -adv * min(max(ratio, 1 - lo), 1 + hi)
    loss = max(l1, l2)
    if c is not None and adv < 0:
        loss = min(loss, -c * adv)
    return loss


@given(st.integers(0, 10_000), st.sampled_from([None, 3.0]), st.sampled_from([(0.2, 0.28), (0.2, 0.2), (0.1, 0.5)]))
@settings(max_examples=50, deadline=None)
def test_ppo_loss_matches_token_loop(seed, c, clip):
    rnd = random.Random(seed)
    b, t = 3, 5
    logp = [[rnd.uniform(-3, 0) for _ in range(t)] for _ in range(b)]
    old = [[x + rnd.uniform(-1.5, 1.5) for x in row] for row in logp]
    adv = [[rnd.uniform(-2, 2) for _ in range(t)] for _ in range(b)]
    mask = [[int(rnd.random() < 0.7) for _ in range(t)] for _ in range(b)]
    mask[0][0] = 1
    loss, stats = ppo_policy_loss(*(torch.tensor(x, dtype=torch.float64) for x in (logp, old, adv)),
                                  torch.tensor(mask), clip_eps_low=clip[0], clip_eps_high=clip[1], dual_clip_c=c)
    per_tok = [ref_ppo_token(logp[i][j], old[i][j], adv[i][j], clip[0], clip[1], c)
               for i in range(b) for j in range(t) if mask[i][j]]
    assert loss.item() == pytest.approx(sum(per_tok) / len(per_tok), abs=1e-12)
    assert 0.0 <= stats["clipfrac"] <= 1.0


def test_ppo_asymmetric_clip_and_dual_clip_cases():
    def one(ratio: float, adv: float, c: float | None = 3.0) -> float:
        lp = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
        loss, _ = ppo_policy_loss(lp, torch.zeros(1, 1, dtype=torch.float64),
                                  torch.tensor([[adv]], dtype=torch.float64), torch.ones(1, 1), dual_clip_c=c)
        return loss.item()

    assert one(1.25, 1.0) == pytest.approx(-1.25)  # inside the clip-higher range (1 + 0.28)
    assert one(1.40, 1.0) == pytest.approx(-1.28)  # clipped at 1 + eps_high
    assert one(0.70, -1.0) == pytest.approx(0.80)  # clipped at 1 - eps_low
    assert one(0.70, 1.0) == pytest.approx(-0.70)  # pessimistic branch: unclipped
    assert one(5.0, -1.0) == pytest.approx(3.0)  # dual clip caps the loss at c * |A|
    assert one(5.0, -1.0, c=None) == pytest.approx(5.0)


def test_ppo_gradient_matches_finite_differences():
    gen = torch.Generator().manual_seed(0)
    b, t = 2, 6
    old = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 2
    # ratios kept away from the clip kinks (1 - 0.2, 1 + 0.28) and the dual-clip kink (3)
    ratios = torch.tensor([[0.5, 0.9, 1.1, 1.5, 4.0, 1.0], [0.6, 1.2, 2.0, 0.95, 5.0, 0.7]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 0.5, 2.0, -1.5, -0.3], [-0.4, 1.2, -2.0, 0.7, 1.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    logp = (old + ratios.log()).requires_grad_(True)

    def f(x):
        return ppo_policy_loss(x, old, adv, mask, loss_agg_mode="seq-mean-token-mean")[0]

    assert torch.autograd.gradcheck(f, (logp,), eps=1e-6, atol=1e-7)
    f(logp).backward()
    # clipped tokens (A > 0, ratio > 1.28) and dual-clipped tokens (A < 0, ratio > 3) carry no gradient
    assert logp.grad[0, 3].item() == 0.0 and logp.grad[0, 4].item() == 0.0
    assert logp.grad[1, 2].item() != 0.0  # A < 0, ratio 2: pessimistic unclipped branch, below the dual cap
    assert logp.grad[0, 5].item() == 0.0  # masked
    assert logp.grad[0, 0].item() != 0.0


def test_ppo_bad_arguments():
    z = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="clip_eps_low"):
        ppo_policy_loss(z, z, z, z, clip_eps_low=1.0)
    with pytest.raises(ValueError, match="clip_eps_high"):
        ppo_policy_loss(z, z, z, z, clip_eps_high=-0.1)
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_policy_loss(z, z, z, z, dual_clip_c=1.0)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        ppo_policy_loss(z, z, z, z, loss_agg_mode="mean")
    with pytest.raises(ValueError, match="shapes"):
        ppo_policy_loss(z, z, torch.zeros(2, 3), z)


# --------------------------------------------------------------------------------------------------------------
# KL estimators
# --------------------------------------------------------------------------------------------------------------


def test_kl_estimators_match_formulas():
    lp = torch.tensor([-1.0, -0.2, -1.0, -0.5], dtype=torch.float64)
    ref = torch.tensor([-1.5, -0.2, -0.1, -2.0], dtype=torch.float64)
    for i in range(4):
        d = lp[i].item() - ref[i].item()
        assert kl_penalty(lp, ref, "k1")[i].item() == pytest.approx(d)
        assert kl_penalty(lp, ref, "k2")[i].item() == pytest.approx(0.5 * d * d)
        assert kl_penalty(lp, ref, "k3")[i].item() == pytest.approx(math.exp(-d) - 1 + d)
    assert torch.equal(kl_penalty(lp, ref, "k3"), kl_penalty(lp, ref, "low-var-kl"))
    assert bool((kl_penalty(lp, ref, "k3") >= 0).all())


def test_k3_is_clamped():
    out = kl_penalty(torch.tensor([-100.0]), torch.tensor([0.0]), "k3")
    assert out.item() == 10.0 and math.isfinite(out.item())


@given(st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_k1_and_k3_are_unbiased_by_exact_enumeration(seed):
    # E_{z ~ pi}[k1] = E_{z ~ pi}[k3] = KL(pi || ref), enumerated over a small vocabulary (ratios kept
    # moderate: the [-10, 10] clamp of k3 makes it biased for extreme ratios, by design)
    gen = torch.Generator().manual_seed(seed)
    pi = torch.softmax(0.4 * torch.randn(6, generator=gen, dtype=torch.float64), 0)
    ref = torch.softmax(0.4 * torch.randn(6, generator=gen, dtype=torch.float64), 0)
    kl = sum(pi[v].item() * math.log(pi[v].item() / ref[v].item()) for v in range(6))
    k1 = kl_penalty(pi.log(), ref.log(), "k1")
    k3 = kl_penalty(pi.log(), ref.log(), "k3")
    assert float((pi * k1).sum()) == pytest.approx(kl, abs=1e-12)
    assert float((pi * k3).sum()) == pytest.approx(kl, abs=1e-9)


def test_kl_bad_kind():
    with pytest.raises(ValueError, match="kind"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")


# --------------------------------------------------------------------------------------------------------------
# Entropy bonus and value loss
# --------------------------------------------------------------------------------------------------------------


def ref_entropy(row: list[float]) -> float:
    m = max(row)
    z = sum(math.exp(x - m) for x in row)
    ps = [math.exp(x - m) / z for x in row]
    return -sum(p * math.log(p) for p in ps if p > 0)


def entropy_term(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The trainer's entropy bonus: token-mean of the per-token entropies."""
    return aggregate_loss(token_entropy(logits), mask, "token-mean")


def test_entropy_bonus_matches_loop_and_gradcheck():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    got = entropy_term(logits, mask)
    vals = [ref_entropy(logits[b, t].tolist()) for b in range(2) for t in range(3) if mask[b, t]]
    assert got.item() == pytest.approx(sum(vals) / len(vals), abs=1e-12)
    assert torch.autograd.gradcheck(lambda x: entropy_term(x, mask), (logits,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_entropy_bonus_stable_in_low_precision(dtype):
    logits = torch.tensor([[[3e4, 2.99e4, -3e4, 0.0], [1.0, 1.0, 1.0, 1.0]]]).to(dtype)
    mask = torch.ones(1, 2)
    got = entropy_term(logits, mask)
    assert got.dtype == torch.float32 and math.isfinite(got.item())
    rounded = logits.double()[0].tolist()
    ref = (ref_entropy(rounded[0]) + ref_entropy(rounded[1])) / 2
    assert got.item() == pytest.approx(ref, abs=1e-4)


def ref_value_token(v: float, old: float, ret: float, c: float) -> float:
    v_clip = old + min(max(v - old, -c), c)
    return 0.5 * max((v - ret) ** 2, (v_clip - ret) ** 2)


def test_value_loss_matches_loop_and_gradcheck():
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    values = (old + torch.tensor([[0.1, 0.9, -0.7, 0.3]] * 3, dtype=torch.float64)).requires_grad_(True)
    returns = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 1, 1]])
    loss, stats = value_loss(values, old, returns, mask, clip_range=0.5)
    ref = [ref_value_token(values[i, j].item(), old[i, j].item(), returns[i, j].item(), 0.5)
           for i in range(3) for j in range(4) if mask[i, j]]
    assert loss.item() == pytest.approx(sum(ref) / len(ref), abs=1e-12)
    assert 0.0 <= stats["vf_clipfrac"] <= 1.0
    assert torch.autograd.gradcheck(lambda v: value_loss(v, old, returns, mask)[0], (values,))
    unclipped, _ = value_loss(values, old, returns, mask, clip_range=None)
    ref_u = [0.5 * (values[i, j].item() - returns[i, j].item()) ** 2 for i in range(3) for j in range(4) if mask[i, j]]
    assert unclipped.item() == pytest.approx(sum(ref_u) / len(ref_u))


def test_value_loss_bad_arguments():
    z = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="clip_range"):
        value_loss(z, z, z, z, clip_range=0.0)


def test_ppo_loss_with_dr_grpo_constant_normaliser_matches_a_plain_loop():
    import torch

    from ragen_core.math.losses import ppo_policy_loss

    g = torch.Generator().manual_seed(3)
    lp, old, adv = (torch.randn(3, 5, generator=g) * 0.1 for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.float32)
    c = 7.0
    loss, _ = ppo_policy_loss(lp, old, adv, mask, dual_clip_c=None, loss_agg_mode="seq-mean-token-sum-norm",
                              norm_constant=c)
    total = 0.0
    for b in range(3):
        row = 0.0
        for t in range(5):
            if mask[b, t]:
                r = float(torch.exp(lp[b, t] - old[b, t]))
                a = float(adv[b, t])
                row += max(-a * r, -a * min(max(r, 0.8), 1.28))
        total += row / c
    assert abs(float(loss) - total / 3) < 1e-6
