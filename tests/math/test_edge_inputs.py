"""Inputs at the edges of the math layer: equal non-dyadic rewards, NaN or inf on padding, float16 token counts,
non-finite rewards, top-p thresholds met exactly, integer dtypes, mismatched shapes.

Each case has an independent reference: exact rational arithmetic, a plain loop over the valid entries only, or
the float path of the same call.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from ragen_core.math import advantages as A
from ragen_core.math import filtering as F
from ragen_core.math import losses as Lo
from ragen_core.math import metrics as Me
from ragen_core.math import mi as M


# ---------------------------------------------------------------- equal rewards that are not dyadic
@pytest.mark.parametrize("value", [0.1, -0.1, 0.7, 1 / 3])
@pytest.mark.parametrize("g", [3, 6, 7, 12])
def test_equal_rewards_have_variance_exactly_zero(value, g):
    rewards = torch.full((4, g), value, dtype=torch.float64)
    assert torch.equal(F.reward_variance(rewards), torch.zeros(4, dtype=torch.float64))
    result = F.filter_groups(rewards)
    assert result.empty and result.kept.numel() == 0
    assert result.zero_fraction == 1.0 and math.isnan(result.rv_heterogeneity)


def test_flat_group_never_outranks_a_zero_group_by_rounding():
    # Groups 0 and 1 are both flat (variance 0): the smallest-first tie goes to the lower index.
    rewards = torch.tensor([[0.1, 0.1, 0.1], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    kept = F.filter_groups(rewards, "top_k_abs", 1, order="smallest").kept.tolist()
    assert kept == [0]


def test_nan_reward_keeps_its_group_variance_nan():
    rewards = torch.tensor([[0.1, math.nan, 0.1], [0.0, 1.0, 1.0]], dtype=torch.float64)
    v = F.reward_variance(rewards)
    assert math.isnan(float(v[0])) and float(v[1]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("row", [[math.inf, math.inf], [-math.inf, -math.inf], [math.inf, 1.0], [math.inf, -math.inf]])
def test_an_infinite_reward_makes_its_group_variance_nan_never_zero(row):
    """A group of equal infinities is not flat (an infinity equals itself, but has no finite spread): NaN, as
    (inf - inf)^2 gives, so no filter keeps it and no advantage is computed from it."""
    v = F.reward_variance(torch.tensor([row, [0.0, 1.0]], dtype=torch.float64))
    assert math.isnan(float(v[0])) and float(v[1]) == pytest.approx(0.5)


# ---------------------------------------------------------------- the top-p threshold met exactly
def _exact_top_p(scores: list[Fraction], rho: Fraction) -> int:
    ranked = sorted(scores, reverse=True)
    total, cum = sum(ranked), Fraction(0)
    for k, s in enumerate(ranked, start=1):
        cum += s
        if cum >= rho * total:
            return k
    return len(ranked)


def test_top_p_on_equal_scores_matches_exact_arithmetic():
    mismatches = []
    for p in range(1, 41):
        for hundredths in range(1, 101):
            rho = Fraction(hundredths, 100)
            want = _exact_top_p([Fraction(1)] * p, rho)
            got = F.select_groups(torch.ones(p, dtype=torch.float64), "top_p", hundredths / 100).kept.numel()
            if got != want:
                mismatches.append((p, hundredths, got, want))
    assert mismatches == []


def test_top_p_on_binary_reward_variances_matches_exact_arithmetic():
    # Groups of 4 binary rewards: variances 0, 1/4 and 1/3 (k successes: k (4 - k) / 12). All multisets of 16.
    import itertools

    levels = [Fraction(0), Fraction(1, 4), Fraction(1, 3)]
    rows = {Fraction(0): [0.0] * 4, Fraction(1, 4): [1.0, 0.0, 0.0, 0.0], Fraction(1, 3): [1.0, 1.0, 0.0, 0.0]}
    mismatches = []
    for combo in itertools.combinations_with_replacement(levels, 16):
        if sum(combo) == 0:
            continue
        rewards = torch.tensor([rows[v] for v in combo])
        for rho in (Fraction(1, 2), Fraction(3, 4), Fraction(9, 10)):
            got = F.filter_groups(rewards, "top_p", float(rho)).kept.numel()
            if got != _exact_top_p(list(combo), rho):
                mismatches.append((combo, rho, got))
    assert mismatches == []


def test_random_strategy_keeps_as_many_as_exact_top_p():
    gen = torch.Generator().manual_seed(0)
    got = F.select_groups(torch.ones(25, dtype=torch.float64), "random", 0.28, generator=gen).kept.numel()
    assert got == 7


def test_variances_of_another_length_are_refused():
    with pytest.raises(ValueError, match="variances must be"):
        F.select_groups(torch.tensor([3.0, 1.0, 0.0, 2.0]), variances=torch.tensor([1.0, 2.0]))


# ---------------------------------------------------------------- NaN and inf on padding
def _valid_only_reference(loss: torch.Tensor, mask: torch.Tensor, mode: str, c: float) -> float:
    """The aggregation by a plain loop over the valid entries only."""
    per_row = []
    for b in range(loss.shape[0]):
        vals = [float(loss[b, t]) for t in range(loss.shape[1]) if mask[b, t] != 0]
        if vals:
            per_row.append(vals)
    if not per_row:
        return 0.0
    if mode == "token-mean":
        flat = [v for row in per_row for v in row]
        return sum(flat) / len(flat)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in per_row) / len(per_row)
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in per_row) / len(per_row)
    return sum(sum(r) for r in per_row) / (c * len(per_row))


@pytest.mark.parametrize("mode", A.LOSS_AGG_MODES)
@pytest.mark.parametrize("junk", [math.nan, math.inf, -math.inf])
def test_aggregate_loss_ignores_whatever_padding_holds(mode, junk):
    gen = torch.Generator().manual_seed(1)
    loss = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    mask = (torch.rand(5, 7, generator=gen) > 0.4).to(torch.long)
    mask[2] = 0  # a row without a valid token
    loss = torch.where(mask != 0, loss, torch.full_like(loss, junk)).requires_grad_(True)
    out = A.aggregate_loss(loss, mask, mode)
    assert float(out.detach()) == pytest.approx(_valid_only_reference(loss.detach(), mask, mode, 7.0), rel=1e-12)
    out.backward()
    assert bool(torch.isfinite(loss.grad).all())
    assert bool((loss.grad[mask == 0] == 0).all())


def test_aggregate_loss_of_finite_float32_is_the_plain_formula_bit_for_bit():
    gen = torch.Generator().manual_seed(2)
    loss = torch.randn(6, 9, generator=gen)
    mask = (torch.rand(6, 9, generator=gen) > 0.3).to(torch.float32)
    plain = (loss * mask).sum() / mask.sum()
    assert torch.equal(A.aggregate_loss(loss, mask, "token-mean"), plain)
    assert torch.equal(A.masked_mean(loss, mask), plain)


def test_ppo_loss_and_gradient_ignore_minus_inf_logprobs_on_padding():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    lp = torch.tensor([[-1.0, -2.0, -math.inf], [-0.5, -math.inf, math.nan]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.9, -math.inf], [-0.4, math.nan, -math.inf]])
    adv = torch.tensor([[1.0, -1.0, math.nan], [0.5, math.inf, 0.0]])
    loss, stats = Lo.ppo_policy_loss(lp, old, adv, mask)
    # The same tokens with zeros on the padding: the reference.
    z = mask == 0
    lp0 = lp.detach().masked_fill(z, 0.0).requires_grad_(True)
    ref, ref_stats = Lo.ppo_policy_loss(lp0, old.masked_fill(z, 0.0), adv.masked_fill(z, 0.0), mask)
    assert float(loss.detach()) == float(ref.detach()) and math.isfinite(float(loss.detach()))
    assert stats == ref_stats
    loss.backward()
    ref.backward()
    assert torch.equal(lp.grad, lp0.grad)


def test_value_loss_ignores_nan_on_padding():
    mask = torch.tensor([[1, 0]])
    values = torch.tensor([[0.5, math.nan]], requires_grad=True)
    loss, _ = Lo.value_loss(values, torch.tensor([[0.4, math.inf]]), torch.tensor([[1.0, math.nan]]), mask)
    assert float(loss.detach()) == pytest.approx(0.5 * max((0.5 - 1.0) ** 2, (0.5 - 1.0) ** 2))
    loss.backward()
    assert values.grad.tolist() == [[pytest.approx(-0.5), 0.0]]


def test_masked_whiten_and_mean_ignore_inf_on_padding():
    mask = torch.tensor([[1, 1, 0]])
    x = torch.tensor([[1.0, 2.0, math.inf]])
    assert float(A.masked_mean(x, mask)) == 1.5
    w = A.masked_whiten(x, mask, eps=0.0)
    assert w.tolist() == [[-1.0, 1.0, 0.0]]


def test_masked_token_entropy_ignores_nan_logits_on_padding():
    logits = torch.zeros(1, 2, 4)
    logits[0, 1] = math.nan
    assert float(Me.masked_token_entropy(logits, torch.tensor([[1, 0]]))) == pytest.approx(math.log(4))


# ---------------------------------------------------------------- float16 token counts
def test_float16_token_mean_over_many_tokens():
    loss = torch.full((70, 1000), 1e-3, dtype=torch.float16, requires_grad=True)
    out = A.aggregate_loss(loss, torch.ones(70, 1000))
    assert float(out) == pytest.approx(float(torch.tensor(1e-3, dtype=torch.float16)), rel=1e-3)
    out.backward()
    assert float(loss.grad[0, 0]) > 0
    lp = torch.zeros(70, 1000, dtype=torch.float16)
    ppo, _ = Lo.ppo_policy_loss(lp, lp, torch.full_like(lp, 0.5), torch.ones(70, 1000))
    assert float(ppo) == pytest.approx(-0.5)
    assert float(A.masked_mean(torch.ones(300, 300, dtype=torch.float16), torch.ones(300, 300))) == 1.0


# ---------------------------------------------------------------- non-finite rewards and settings
@pytest.mark.parametrize("estimator", [A.grpo, A.dr_grpo, A.rloo])
@pytest.mark.parametrize("junk", [math.nan, math.inf])
def test_group_estimators_refuse_non_finite_rewards_alike(estimator, junk):
    rewards = torch.tensor([[1.0, junk, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match=r"group\(s\) \[0\]"):
        estimator(rewards)


def test_grpo_refuses_nan_eps():
    with pytest.raises(ValueError, match="eps"):
        A.grpo(torch.tensor([[0.0, 1.0]]), eps=math.nan)


# ---------------------------------------------------------------- integer dtypes
def test_gae_of_integer_inputs_is_the_float_result():
    rewards = torch.tensor([[0, 0, 1]])
    ints = A.gae(rewards, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), gamma=0.9)
    floats = A.gae(rewards.float(), torch.zeros(1, 3), torch.ones(1, 3), gamma=0.9)
    for got, want in zip(ints, floats):
        assert got.is_floating_point() and torch.allclose(got, want)
    assert ints[0][0].tolist() == [pytest.approx(0.81), pytest.approx(0.9), 1.0]


def test_mi_proxies_of_integer_scores_is_the_float_result():
    L = torch.tensor([[[-1, -2]], [[-2, -1]]])
    got = M.mi_proxies(L, torch.ones(2, 1))
    want = M.mi_proxies(L.to(torch.float64), torch.ones(2, 1))
    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, nan_ok=True), key
