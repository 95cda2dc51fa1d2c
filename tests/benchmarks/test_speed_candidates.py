"""The speed candidates benchmark measures real alternatives: its one-pass lean forward computes transformers'
log-probs and gradients (so its timing is of the same work), and its shared-head count is the common prompt prefix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmarks.bench_speed_candidates import one_pass_token_logprobs, shared_head
from ragen_core.policy.fast_qwen2 import FastQwen2


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("Say go. value 12", hidden=32, layers=2, heads=4, kv_heads=2)


def _batch(gen: torch.Generator, lengths: list[int], prompt: list[int]):
    """Right-padded random rows whose first prompt[r] tokens are unscored (a prompt) and the rest scored."""
    b, t = len(lengths), max(lengths)
    ids = torch.zeros(b, t, dtype=torch.long)
    mask = torch.zeros(b, t, dtype=torch.long)
    score = torch.zeros(b, t, dtype=torch.bool)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(5, 200, (n,), generator=gen)
        mask[r, :n] = 1
        score[r, prompt[r] : n] = True
    return ids, mask, score


def _reference(model, ids, mask, score):
    """log p(token t | tokens < t) from transformers' own forward, at the scored positions, 0 elsewhere."""
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    out = torch.zeros(ids.shape, dtype=torch.float32)
    out[:, 1:] = lp
    keep = score & mask.bool()
    keep[:, 0] = False
    return out * keep


@pytest.mark.parametrize("lengths,prompt", [([30, 22, 27, 9], [20, 5, 26, 1]), ([12, 12], [11, 3]), ([8], [1])])
def test_one_pass_equals_transformers_in_value_and_gradient(policy, lengths, prompt):
    model = policy.model
    ids, mask, score = _batch(torch.Generator().manual_seed(sum(lengths)), lengths, prompt)
    fast = FastQwen2(model)
    model.zero_grad(set_to_none=True)
    ref = _reference(model, ids, mask, score)
    ref.sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    got, entropy = one_pass_token_logprobs(fast, ids, mask, score)
    assert entropy is None
    torch.testing.assert_close(got, ref.detach(), rtol=1e-5, atol=2e-5)
    assert bool((got != 0).sum() == (ref != 0).sum())
    got.sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    model.zero_grad(set_to_none=True)


def test_one_pass_refuses_what_it_does_not_compute(policy):
    ids, mask, score = _batch(torch.Generator().manual_seed(0), [6], [2])
    with pytest.raises(NotImplementedError):
        one_pass_token_logprobs(FastQwen2(policy.model), ids, mask, score, with_entropy=True)


def test_shared_head_is_the_longest_prefix_common_to_every_prompt():
    ids = torch.tensor([[1, 2, 3, 4, 9, 9], [1, 2, 3, 5, 9, 0], [1, 2, 7, 7, 7, 9]])
    loss = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]])
    head = shared_head(SimpleNamespace(input_ids=ids, loss_mask=loss))
    assert head == {"rows": 3, "prompt_tokens_mean": (4 + 4 + 5) / 3, "common_head_tokens": 2}
