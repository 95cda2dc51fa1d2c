"""Advantage estimators and loss aggregation against hand-written loops."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.advantages import (
    LOSS_AGG_MODES,
    aggregate_loss,
    dr_grpo,
    expand_to_tokens,
    gae,
    grpo,
    masked_whiten,
    place_on_last_token,
    rloo,
    trajectory_token_weights,
)

# --------------------------------------------------------------------------------------------------------------
# References
# --------------------------------------------------------------------------------------------------------------


def ref_gae_row(rewards: list[float], values: list[float], mask: list[int], gamma: float, lam: float):
    """Textbook GAE over the valid tokens of one row (gaps skipped), written as a plain loop."""
    idx = [t for t, m in enumerate(mask) if m]
    adv = [0.0] * len(mask)
    ret = [0.0] * len(mask)
    last = 0.0
    for n in range(len(idx) - 1, -1, -1):
        t = idx[n]
        next_v = values[idx[n + 1]] if n + 1 < len(idx) else 0.0
        delta = rewards[t] + gamma * next_v - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
        ret[t] = last + values[t]
    return adv, ret


def ref_std(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def ref_agg(loss: list[list[float]], mask: list[list[int]], mode: str, c: float | None = None) -> float:
    rows = [(lr, mr) for lr, mr in zip(loss, mask) if sum(mr) > 0]
    if mode == "token-mean":
        num = sum(x for lr, mr in rows for x, m in zip(lr, mr) if m)
        return num / sum(sum(mr) for _, mr in rows)
    per_seq = []
    for lr, mr in rows:
        s = sum(x for x, m in zip(lr, mr) if m)
        if mode == "seq-mean-token-mean":
            s /= sum(mr)
        elif mode == "seq-mean-token-sum-norm":
            s /= c if c is not None else len(mr)
        per_seq.append(s)
    return sum(per_seq) / len(per_seq)


def random_batch(seed: int, b: int = 4, t: int = 7, gaps: bool = True):
    rnd = random.Random(seed)
    rewards = [[rnd.uniform(-1, 1) if rnd.random() < 0.3 else 0.0 for _ in range(t)] for _ in range(b)]
    values = [[rnd.uniform(-1, 1) for _ in range(t)] for _ in range(b)]
    mask = []
    for _ in range(b):
        start, n = rnd.randrange(0, 3), rnd.randrange(1, t - 2)
        row = [1 if start <= i < start + n else 0 for i in range(t)]
        if gaps:
            row = [m if rnd.random() > 0.2 else 0 for m in row]
        mask.append(row)
    return rewards, values, mask


# --------------------------------------------------------------------------------------------------------------
# GAE
# --------------------------------------------------------------------------------------------------------------


@given(st.integers(0, 10_000), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
@settings(max_examples=60, deadline=None)
def test_gae_matches_loop(seed, gamma, lam):
    rewards, values, mask = random_batch(seed)
    adv, ret = gae(torch.tensor(rewards, dtype=torch.float64), torch.tensor(values, dtype=torch.float64),
                   torch.tensor(mask), gamma=gamma, lam=lam)
    for b in range(len(mask)):
        ra, rr = ref_gae_row(rewards[b], values[b], mask[b], gamma, lam)
        assert adv[b].tolist() == pytest.approx(ra, abs=1e-12)
        assert ret[b].tolist() == pytest.approx(rr, abs=1e-12)


def test_gae_outcome_reward_on_last_token():
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 1, 0]])
    seq_r = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    placed = place_on_last_token(seq_r, mask)
    assert placed.tolist() == [[0, 0, 1.0, 0], [0, 0, 0, -2.0], [0, 0, 0.5, 0]]
    values = torch.zeros(3, 4, dtype=torch.float64)
    adv, ret = gae(seq_r, values, mask, gamma=1.0, lam=1.0)
    # gamma = lambda = 1, V = 0: every valid token's advantage is the outcome reward
    assert adv.tolist() == [[1, 1, 1, 0], [0, -2, -2, -2], [0.5, 0, 0.5, 0]]
    assert torch.equal(adv, ret)


def test_gae_lambda_zero_is_td_error():
    rewards, values, mask = random_batch(7, gaps=False)
    r, v, m = (torch.tensor(x, dtype=torch.float64) for x in (rewards, values, mask))
    adv, _ = gae(r, v, m, gamma=0.9, lam=0.0)
    for b in range(len(mask)):
        idx = [t for t, x in enumerate(mask[b]) if x]
        for n, t in enumerate(idx):
            nv = values[b][idx[n + 1]] if n + 1 < len(idx) else 0.0
            assert adv[b, t].item() == pytest.approx(rewards[b][t] + 0.9 * nv - values[b][t])


def test_gae_bad_arguments():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="gamma"):
        gae(z, z, z, gamma=1.5)
    with pytest.raises(ValueError, match="lam"):
        gae(z, z, z, lam=-0.1)
    with pytest.raises(ValueError, match="shapes"):
        gae(z, z, torch.zeros(2, 4))


# --------------------------------------------------------------------------------------------------------------
# GRPO, Dr.GRPO, RLOO
# --------------------------------------------------------------------------------------------------------------

reward_rows = st.lists(st.lists(st.floats(-5, 5), min_size=2, max_size=6).map(tuple), min_size=1, max_size=5)


@given(reward_rows.filter(lambda rows: len({len(r) for r in rows}) == 1))
@settings(max_examples=60, deadline=None)
def test_grpo_matches_loop(rows):
    r = torch.tensor(rows, dtype=torch.float64)
    a = grpo(r, eps=1e-6)
    d = dr_grpo(r)
    lo = rloo(r)
    for i, row in enumerate(rows):
        mean = sum(row) / len(row)
        sd = ref_std(list(row))
        g = len(row)
        for k, x in enumerate(row):
            assert a[i, k].item() == pytest.approx((x - mean) / (sd + 1e-6), abs=1e-9)
            assert d[i, k].item() == pytest.approx(x - mean, abs=1e-12)
            others = [row[j] for j in range(g) if j != k]
            assert lo[i, k].item() == pytest.approx(x - sum(others) / (g - 1), abs=1e-9)


def test_grpo_zero_variance_group_gets_zero_advantage():
    a = grpo(torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]))
    assert a[0].tolist() == [0.0, 0.0, 0.0]
    assert a[1].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-5)
    # also without the eps guard: 0 / 0 must not turn into NaN
    b = grpo(torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]), eps=0.0)
    assert b[0].tolist() == [0.0, 0.0, 0.0]
    assert b[1].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-6)


def test_rloo_is_scaled_dr_grpo():
    r = torch.tensor([[0.0, 1.0, 1.0, 3.0]], dtype=torch.float64)
    assert torch.allclose(rloo(r), dr_grpo(r) * 4 / 3)


def test_group_estimators_bad_arguments():
    with pytest.raises(ValueError, match="G >= 2"):
        grpo(torch.zeros(3, 1))
    assert dr_grpo(torch.ones(3, 1)).tolist() == [[0.0]] * 3
    with pytest.raises(ValueError, match="G >= 2"):
        rloo(torch.zeros(3, 1))
    with pytest.raises(ValueError, match=r"\[P, G\]"):
        grpo(torch.zeros(3))
    with pytest.raises(ValueError, match="eps"):
        grpo(torch.zeros(2, 2), eps=-1.0)


def test_expand_to_tokens():
    adv = torch.tensor([[1.0, -1.0], [2.0, 0.5]])
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 0], [1, 1, 1]])
    out = expand_to_tokens(adv, mask)
    assert out.tolist() == [[1, 1, 0], [0, -1, -1], [2, 0, 0], [0.5, 0.5, 0.5]]
    with pytest.raises(ValueError, match="rows"):
        expand_to_tokens(adv, mask[:3])


def test_masked_whiten():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, 5.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 0], [1, 1, 1]])
    vals = [1.0, 2.0, 3.0, 4.0, 5.0]
    mean = sum(vals) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / 5)
    w = masked_whiten(x, m, eps=0.0)
    assert w[0, 2].item() == 0.0
    assert w[1].tolist() == pytest.approx([(v - mean) / sd for v in vals[2:]])


# --------------------------------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("seed", range(5))
def test_aggregate_loss_matches_loop(mode, seed):
    rnd = random.Random(seed)
    b, t = 5, 6
    loss = [[rnd.uniform(-2, 2) for _ in range(t)] for _ in range(b)]
    mask = [[int(rnd.random() < 0.6) for _ in range(t)] for _ in range(b)]
    mask[0] = [0] * t  # an empty row is left out of the sequence means
    mask[1][0] = 1
    got = aggregate_loss(torch.tensor(loss, dtype=torch.float64), torch.tensor(mask), mode)
    assert got.item() == pytest.approx(ref_agg(loss, mask, mode), abs=1e-12)
    if mode == "seq-mean-token-sum-norm":
        got = aggregate_loss(torch.tensor(loss, dtype=torch.float64), torch.tensor(mask), mode, norm_constant=64)
        assert got.item() == pytest.approx(ref_agg(loss, mask, mode, c=64), abs=1e-12)


def test_aggregate_loss_gradient_flows_only_through_valid_tokens():
    loss = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 1]])
    aggregate_loss(loss, mask, "seq-mean-token-mean").backward()
    expected = torch.tensor([[1 / 2, 1 / 2, 0, 0], [1 / 4] * 4, [0, 0, 0, 1]], dtype=torch.float64) / 3
    assert torch.allclose(loss.grad, expected)


def test_aggregate_loss_bad_arguments():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="mode"):
        aggregate_loss(z, z, "sum")
    with pytest.raises(ValueError, match="norm_constant"):
        aggregate_loss(z, torch.ones(2, 3), "seq-mean-token-sum-norm", norm_constant=0)
    assert aggregate_loss(z, z, "token-mean").item() == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_trajectory_token_weights_give_the_mean_over_trajectories_of_token_means(seed):
    rnd = random.Random(seed)
    r, t = 9, 7
    row_traj = [rnd.randrange(4) for _ in range(r)]  # rows of one trajectory are scattered, as after filtering
    mask = [[int(rnd.random() < 0.5) for _ in range(t)] for _ in range(r)]
    loss = [[rnd.uniform(-2, 2) for _ in range(t)] for _ in range(r)]
    # plain loop: each trajectory's tokens over all its rows, averaged; then the mean over trajectories
    per_traj: dict[int, list[float]] = {}
    for b in range(r):
        per_traj.setdefault(row_traj[b], []).extend(loss[b][c] for c in range(t) if mask[b][c])
    means = [sum(v) / len(v) for v in per_traj.values() if v]
    want = sum(means) / len(means)
    w = trajectory_token_weights(torch.tensor(row_traj), torch.tensor(mask))
    got = aggregate_loss(torch.tensor(loss, dtype=torch.float64) * w.double(), torch.tensor(mask), "token-mean")
    assert got.item() == pytest.approx(want, abs=1e-6)
    assert float(w[torch.tensor(mask) == 0].abs().sum()) == 0.0


def test_trajectory_weights_cancel_the_length_bias_of_zero_mean_group_advantages():
    # One group: a success of 1 row x 2 tokens (A = +1) and a failure of 3 rows x 4 tokens (A = -1).
    row_traj = torch.tensor([0, 1, 1, 1])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])
    adv = torch.tensor([1.0, -1.0, -1.0, -1.0])[:, None] * mask
    assert aggregate_loss(adv, mask, "token-mean").item() == pytest.approx((2 - 12) / 14)  # net push away
    w = trajectory_token_weights(row_traj, mask)
    assert aggregate_loss(adv * w, mask, "token-mean").item() == pytest.approx(0.0, abs=1e-7)
    assert trajectory_token_weights(row_traj, torch.zeros_like(mask)).abs().sum() == 0
    with pytest.raises(ValueError, match="row_traj must be"):
        trajectory_token_weights(row_traj[:2], mask)
