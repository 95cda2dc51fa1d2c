"""Every tensor argument of the math layer's public functions refuses complex numbers with one line naming it.

Before, ``gae`` (and others that read their arguments through the shared reader) cast a complex reward to float and
went on with a warning: the imaginary part was dropped silently from the result. The check now lives in the one
reader every public function uses (``ragen_core.math._args.as_tensor``), so a function added later inherits it;
this test walks each public function's tensor arguments, one at a time.
"""

from __future__ import annotations

import pytest
import torch

from ragen_core.math.advantages import (
    aggregate_loss,
    dr_grpo,
    expand_to_tokens,
    gae,
    grpo,
    masked_mean,
    masked_whiten,
    place_on_last_token,
    rloo,
    trajectory_token_weights,
)
from ragen_core.math.filtering import reward_variance, rv_statistics, select_groups
from ragen_core.math.losses import ppo_policy_loss, value_loss
from ragen_core.math.metrics import masked_token_entropy, rv_heterogeneity, token_entropy
from ragen_core.math.mi import mi_proxies, mi_seq_null

B, T = 4, 3
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)


def _r(*shape: int) -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, int(torch.tensor(shape).prod())).reshape(shape)


CASES = [
    (gae, dict(rewards=_r(B), values=_r(B, T), mask=MASK), ["rewards", "values", "mask"]),
    (grpo, dict(rewards=_r(2, 2)), ["rewards"]),
    (dr_grpo, dict(rewards=_r(2, 2)), ["rewards"]),
    (rloo, dict(rewards=_r(2, 2)), ["rewards"]),
    (expand_to_tokens, dict(advantages=_r(B), mask=MASK), ["advantages", "mask"]),
    (place_on_last_token, dict(seq_rewards=_r(B), mask=MASK), ["seq_rewards", "mask"]),
    (masked_mean, dict(x=_r(B, T), mask=MASK), ["x", "mask"]),
    (masked_whiten, dict(x=_r(B, T), mask=MASK), ["x", "mask"]),
    (aggregate_loss, dict(loss_mat=_r(B, T), mask=MASK), ["loss_mat", "mask"]),
    (trajectory_token_weights, dict(row_traj=torch.tensor([0, 0, 1, 1]), loss_mask=MASK), ["loss_mask"]),
    (ppo_policy_loss, dict(log_probs=-_r(B, T).abs(), old_log_probs=-_r(B, T).abs(), advantages=_r(B, T), mask=MASK),
     ["log_probs", "old_log_probs", "advantages", "mask"]),
    (value_loss, dict(values=_r(B, T), old_values=_r(B, T), returns=_r(B, T), mask=MASK),
     ["values", "old_values", "returns", "mask"]),
    (token_entropy, dict(logits=_r(B, T, 5)), ["logits"]),
    (masked_token_entropy, dict(logits=_r(B, T, 5), mask=MASK), ["logits", "mask"]),
    (rv_heterogeneity, dict(rewards_or_variances=_r(3, 2)), ["rewards_or_variances"]),
    (reward_variance, dict(rewards=_r(3, 2)), ["rewards"]),
    (rv_statistics, dict(variances=_r(3).abs()), ["variances"]),
    (select_groups, dict(scores=_r(4).abs()), ["scores"]),
    (mi_proxies, dict(L=-_r(3, 2, 3).abs(), lengths=torch.full((3, 2), 4.0)), ["L", "lengths"]),
    (mi_seq_null, dict(L=-_r(3, 2, 3).abs(), n_perm=19), ["L"]),
]


@pytest.mark.parametrize("fn, kwargs, name", [(f, k, n) for f, k, names in CASES for n in names],
                         ids=[f"{f.__name__}-{n}" for f, _, names in CASES for n in names])
def test_a_complex_argument_is_refused_by_name(fn, kwargs, name) -> None:
    fn(**kwargs)  # the real arguments are valid: the refusal below is about the dtype alone
    bad = dict(kwargs, **{name: kwargs[name].to(torch.complex64) + 1j})
    with pytest.raises(ValueError, match=rf"^{name} must be real numbers; got dtype torch\.complex64"):
        fn(**bad)


@pytest.mark.parametrize("as_given", [lambda t: t.tolist(), lambda t: t.numpy()], ids=["list", "ndarray"])
def test_complex_numbers_in_a_list_or_array_are_refused_too(as_given) -> None:
    rewards = torch.tensor([1.0 + 2j, 0.0, 1.0, 1.0], dtype=torch.complex64)
    with pytest.raises(ValueError, match=r"^rewards must be real numbers; got dtype torch\.complex"):
        gae(as_given(rewards), _r(B, T), MASK)


def test_gae_of_real_rewards_is_unchanged_by_the_check() -> None:
    # Against a plain loop of the recursion (gamma = lam = 1: the advantage is the return-to-go minus the value).
    rewards, values = _r(B), _r(B, T)
    adv, _ = gae(rewards, values, MASK)
    for b in range(B):
        last = int(MASK[b].nonzero().max())
        for t in range(T):
            want = float(rewards[b]) - float(values[b, t]) if MASK[b, t] else 0.0
            assert float(adv[b, t]) == pytest.approx(want, abs=1e-6), (b, t, last)
