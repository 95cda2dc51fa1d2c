"""Shapes and kinds the math layer's helpers used to take silently or crash on, found by walking every public
function's tensor arguments through edge inputs (empty, 0-d, 3-D, bool, broadcastable).

- ``masked_mean`` with a mask that broadcasts against ``x`` (``[1, T]`` for ``[B, T]``) divided the sum over
  ``B * T`` entries by the mask's own count of ``T``: a mean B times too large, with no error.
- ``place_on_last_token`` read the first B of too many rewards, and crashed with IndexError on a 0-d, 3-D or
  empty reward tensor or a mask of no columns.
- A bool tensor where a log-prob, value or advantage belongs (a mask passed in the wrong place) was torch's
  RuntimeError about subtracting bools.
"""

from __future__ import annotations

import pytest
import torch

from ragen_core.math.advantages import expand_to_tokens, masked_mean, masked_whiten, place_on_last_token
from ragen_core.math.losses import ppo_policy_loss, value_loss

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_masked_mean_against_a_plain_loop() -> None:
    kept = [float(X[b, t]) for b in range(2) for t in range(3) if MASK[b, t]]
    assert float(masked_mean(X, MASK)) == pytest.approx(sum(kept) / len(kept))


@pytest.mark.parametrize("fn", [masked_mean, masked_whiten])
@pytest.mark.parametrize("mask", [MASK[:1], MASK[:, :1], MASK[0]], ids=["[1, T]", "[B, 1]", "[T]"])
def test_a_mask_that_only_broadcasts_is_refused(fn, mask) -> None:
    with pytest.raises(ValueError, match=r"^shapes must match: \{'x': \(2, 3\), 'mask': "):
        fn(X, mask)


@pytest.mark.parametrize("rewards", [torch.tensor(1.0), torch.ones(3), torch.ones(1), torch.ones(2, 1),
                                     torch.ones(0)], ids=["0-d", "too many", "too few", "[B, 1]", "empty"])
def test_place_on_last_token_needs_one_reward_per_row(rewards) -> None:
    with pytest.raises(ValueError, match=r"^seq_rewards must be \[B\] with B=2 entries \(mask's rows\); got shape"):
        place_on_last_token(rewards, MASK)


@pytest.mark.parametrize("mask", [torch.tensor(1), torch.ones(2), torch.ones(1, 2, 3)], ids=["0-d", "1-D", "3-D"])
def test_place_on_last_token_and_expand_need_a_2d_mask(mask) -> None:
    with pytest.raises(ValueError, match=r"^mask must be \[B, T\]; got shape"):
        place_on_last_token(torch.ones(2), mask)
    with pytest.raises(ValueError, match=r"^mask must be \[B, T\]; got shape"):
        expand_to_tokens(torch.ones(2), mask)


def test_place_on_last_token_of_a_mask_without_columns_places_nothing() -> None:
    out = place_on_last_token(torch.tensor([1.0, 2.0]), torch.zeros(2, 0))
    assert out.shape == (2, 0) and out.dtype == torch.float32


def test_place_on_last_token_against_a_plain_loop() -> None:
    rewards = torch.tensor([0.5, -1.0])
    out = place_on_last_token(rewards, MASK)
    for b in range(2):
        last = max(t for t in range(3) if MASK[b, t])
        for t in range(3):
            assert float(out[b, t]) == (float(rewards[b]) if t == last else 0.0)


@pytest.mark.parametrize("name", ["log_probs", "old_log_probs", "advantages"])
def test_a_bool_in_place_of_a_number_names_the_argument_in_the_policy_loss(name) -> None:
    args = dict(log_probs=-X, old_log_probs=-X, advantages=X, mask=MASK)
    ppo_policy_loss(**args)
    with pytest.raises(ValueError, match=rf"^{name} must be real numbers, not bools"):
        ppo_policy_loss(**dict(args, **{name: X > 2}))


@pytest.mark.parametrize("name", ["values", "old_values", "returns"])
def test_a_bool_in_place_of_a_number_names_the_argument_in_the_value_loss(name) -> None:
    args = dict(values=X, old_values=X, returns=X, mask=MASK)
    value_loss(**args)
    with pytest.raises(ValueError, match=rf"^{name} must be real numbers, not bools"):
        value_loss(**dict(args, **{name: X > 2}))


def test_masked_whiten_refuses_bool_values() -> None:
    with pytest.raises(ValueError, match=r"^x must be real numbers, not bools"):
        masked_whiten(X > 2, MASK)


def test_rv_statistics_refuses_a_negative_variance() -> None:
    # It returned rv_mean -1.17 and a NaN heterogeneity for [-5, 0.5, 1]; select_groups refused the same scores.
    from ragen_core.math.filtering import rv_statistics
    from ragen_core.math.metrics import rv_heterogeneity

    with pytest.raises(ValueError, match=r"^variances must be non-negative \(a variance is >= 0\); got -5 at group"):
        rv_statistics(torch.tensor([-5.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match=r"^variances must be non-negative"):
        rv_heterogeneity(torch.tensor([0.5, -0.25]))
    stats = rv_statistics(torch.tensor([0.0, 0.5, 1.0, float("-inf")]))  # infinities are left out, as documented
    assert stats["n_nan"] == 1.0 and stats["rv_mean"] == pytest.approx(0.5)
