"""The trainer's policy-gradient estimate equals the exact REINFORCE gradient of a tiny categorical policy.

Reference: J(theta) = sum_s p_theta(s) R(s), enumerated over every sequence s and differentiated by autograd
(no sampling, no advantage, no loss code of ours). Estimate: the trainer's own path at ratio 1 (old log-probs =
current, detached): `compute_advantages` -> `losses.ppo_policy_loss` -> `aggregate_loss`, on a batch in which
every sequence appears exactly N * p(s) times (the logits are logs of integers, so every p(s) is a multiple of
1/N and the "sample" is the exact expectation). Then

    grad(loss) = -c * grad J   for a constant c > 0 that depends only on the advantage normalisation,

for every estimator that is unbiased (GRPO / Dr.GRPO / PPO with a zero critic, token-mean or sequence-sum
aggregation). Sequence-mean-of-token-mean divides each sequence by its own length and is NOT parallel to grad J
when lengths vary: that bias is pinned too, so a change that silently swaps the aggregation is caught.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from ragen_core.math import losses
from ragen_core.training.algorithms import compute_advantages

VOCAB = 3
STOP = 2  # token 2 ends the sequence after the first position (variable lengths)
# Integer weights: p(first) = w1 / 4, p(second | first) = w2[first] / 4.
W1 = torch.tensor([1.0, 1.0, 2.0])
W2 = torch.tensor([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 1.0]])  # row STOP is never used
N = 16  # every sequence probability is a multiple of 1/16


class Tabular(torch.nn.Module):
    """Logits for the first token and for the second token given the first (tabular softmax policy)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Parameter(W1.double().log())
        self.second = torch.nn.Parameter(W2.double().log())

    def logp_first(self) -> torch.Tensor:
        return torch.log_softmax(self.first, -1)

    def logp_second(self) -> torch.Tensor:
        return torch.log_softmax(self.second, -1)


def sequences() -> list[tuple[int, ...]]:
    out = []
    for a in range(VOCAB):
        if a == STOP:
            out.append((a,))
        else:
            out += [(a, b) for b in range(VOCAB)]
    return out


def reward(s: tuple[int, ...]) -> float:
    # Arbitrary, not aligned with the policy: (0, 1) is best, stopping early is mediocre.
    table = {(0, 0): 0.0, (0, 1): 3.0, (0, 2): 1.0, (1, 0): 2.0, (1, 1): -1.0, (1, 2): 0.0, (2,): 1.5}
    return table[s]


def seq_prob(model: Tabular, s: tuple[int, ...]) -> torch.Tensor:
    lp = model.logp_first()[s[0]]
    if len(s) == 2:
        lp = lp + model.logp_second()[s[0], s[1]]
    return lp.exp()


def exact_gradient() -> torch.Tensor:
    model = Tabular()
    J = sum(seq_prob(model, s) * reward(s) for s in sequences())
    J.backward()
    return torch.cat([model.first.grad.flatten(), model.second.grad.flatten()])


def estimated_gradient(algo: str, mode: str) -> torch.Tensor:
    model = Tabular()
    batch: list[tuple[int, ...]] = []
    with torch.no_grad():
        for s in sequences():
            count = float(seq_prob(model, s)) * N
            assert abs(count - round(count)) < 1e-9, "probabilities must be multiples of 1/N"
            batch += [s] * round(count)
    assert len(batch) == N
    T = 2
    logp = torch.zeros(N, T, dtype=torch.float64)
    mask = torch.zeros(N, T, dtype=torch.long)
    token_rewards = torch.zeros(N, T)
    rows_lp = []
    for b, s in enumerate(batch):
        row = [model.logp_first()[s[0]]]
        if len(s) == 2:
            row.append(model.logp_second()[s[0], s[1]])
        rows_lp.append(torch.stack(row + [torch.zeros((), dtype=torch.float64)] * (T - len(row))))
        mask[b, : len(s)] = 1
        token_rewards[b, len(s) - 1] = reward(s)
    logp = torch.stack(rows_lp)
    returns_pg = torch.tensor([[reward(s) for s in batch]], dtype=torch.float32)  # one group of N
    rows = {"loss_mask": mask, "row_traj": torch.arange(N), "token_rewards": token_rewards}
    values = torch.zeros(N, T) if algo == "ppo" else None
    adv, _ = compute_advantages(algo, rows, returns_pg, values=values)
    loss, stats = losses.ppo_policy_loss(logp, logp.detach(), adv.double(), mask, loss_agg_mode=mode,
                                         norm_constant=float(T))
    assert stats["clipfrac"] == 0.0 and stats["approx_kl"] == 0.0  # ratio exactly 1
    loss.backward()
    return -torch.cat([model.first.grad.flatten(), model.second.grad.flatten()])


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


@pytest.mark.parametrize("algo,mode", list(itertools.product(
    ["ppo", "grpo", "dr_grpo"], ["token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])))
def test_unbiased_estimators_point_along_the_exact_gradient(algo, mode):
    g = exact_gradient()
    est = estimated_gradient(algo, mode)
    assert g.norm() > 0.1
    # Parallel and in the same direction: est = c * g with c > 0.
    c = float(est @ g / (g @ g))
    assert c > 0
    assert torch.allclose(est, c * g, atol=1e-6, rtol=1e-5), (est, g)
    if algo == "dr_grpo" and mode == "seq-mean-token-sum":
        # A = R - E[R] and 1/N sum over the exact sample: the estimate IS the gradient (c = 1).
        assert c == pytest.approx(1.0, abs=1e-6)


def test_per_sequence_token_mean_is_biased_when_lengths_vary():
    g = exact_gradient()
    est = estimated_gradient("dr_grpo", "seq-mean-token-mean")
    assert _cosine(est, g) < 0.999  # not the REINFORCE direction (the short sequence is over-weighted)
