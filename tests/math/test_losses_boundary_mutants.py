"""Tests that kill the mutants of ragen_core/math/losses.py that the first full mutmut run left alive (see
docs/theory_report/mutation.md): every tensor argument is shape-checked (a mask or value tensor of another shape
would broadcast silently), the policy loss's log-ratio clamp shows in its approx_kl statistic, the dual clip
counts as active only where it changes the loss, and k3 stays finite for a token of probability zero."""

from __future__ import annotations

import math

import pytest
import torch

from ragen_core.math.losses import kl_penalty, ppo_policy_loss, value_loss

SHAPES = r"^shapes must match: "


def test_policy_loss_checks_the_shape_of_the_mask() -> None:
    x = torch.zeros(2, 3)
    # checked up front, naming the caller's arguments (the loss aggregation's own check names its internals)
    with pytest.raises(ValueError, match=SHAPES + r"\{'log_probs': \(2, 3\), .*'mask': \(2, 1\)\}$"):
        ppo_policy_loss(x, x, x, torch.ones(2, 1))


@pytest.mark.parametrize("bad", ["values", "old_values", "mask"])
def test_value_loss_checks_the_shape_of_every_tensor(bad: str) -> None:
    args = {name: torch.zeros(2, 3) for name in ("values", "old_values", "returns", "mask")}
    args[bad] = torch.zeros(2, 1)
    with pytest.raises(ValueError, match=SHAPES + r"\{'values': .*'mask': .*\}$"):
        value_loss(**args)


def test_policy_loss_clamps_the_log_ratio_at_minus_20() -> None:
    # approx_kl is the mean of old - new log-prob after the clamp: 50 nats apart count as 20
    new = torch.tensor([[-60.0, -1.0]])
    old = torch.tensor([[-10.0, -1.0]])
    _, stats = ppo_policy_loss(new, old, torch.ones(1, 2), torch.ones(1, 2))
    assert stats["approx_kl"] == pytest.approx(10.0, abs=1e-6)  # (20 + 0) / 2
    _, stats = ppo_policy_loss(old, new, torch.ones(1, 2), torch.ones(1, 2))
    assert stats["approx_kl"] == pytest.approx(-10.0, abs=1e-6)  # (-20 + 0) / 2


def test_dual_clip_is_active_only_where_it_lowers_the_loss() -> None:
    # A = -1, r = 2 (exact): the clipped surrogate is max(2, 1.28) = 2; the dual clip bound is -c * A = c
    log_ratio = torch.full((1, 1), math.log(2.0))
    adv = torch.full((1, 1), -1.0)
    mask = torch.ones(1, 1)
    loss, stats = ppo_policy_loss(log_ratio, torch.zeros(1, 1), adv, mask, dual_clip_c=2.0)
    assert float(loss) == pytest.approx(2.0) and stats["dual_clipfrac"] == 0.0  # bound equal: no change
    loss, stats = ppo_policy_loss(log_ratio, torch.zeros(1, 1), adv, mask, dual_clip_c=1.5)
    assert float(loss) == pytest.approx(1.5) and stats["dual_clipfrac"] == 1.0


def test_k3_of_a_token_with_probability_zero_is_the_clamp_not_nan() -> None:
    # d = -inf: without the clamp of -d, exp(inf) - 1 - inf is NaN
    out = kl_penalty(torch.tensor([-math.inf, -30.0]), torch.tensor([0.0, 0.0]), "k3")
    assert out.tolist() == [10.0, 10.0]
