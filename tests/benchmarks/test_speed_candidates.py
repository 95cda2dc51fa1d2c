"""The speed candidates benchmark measures real alternatives: its one-pass lean forward computes transformers'
log-probs and gradients (so its timing is of the same work), and its shared-head count is the common prompt prefix."""

from __future__ import annotations

import math
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


def test_the_c_attention_kernel_computes_decoding_attention():
    """The hand-written kernel the benchmark times is attention: softmax(q k^T * scale + bias) v per row and head,
    checked against a plain per-row loop (masked keys included)."""
    import numpy as np

    from benchmarks.bench_speed_candidates import _c_attention

    kernel = _c_attention()
    if kernel is None:
        pytest.skip("no C compiler")
    # loading it left the process's floating point alone: subnormal numbers survive (an -ffast-math build flushed
    # them to zero for every later test in the process)
    tiny = np.float32(1e-40)
    assert tiny * np.float32(1.0) != 0 and float(torch.tensor(1e-40) * 1.0) != 0.0
    gen = torch.Generator().manual_seed(0)
    n, hk, rep, d, cap, t = 3, 2, 2, 8, 12, 9
    q = torch.randn(n, hk, rep, d, generator=gen)
    kb, vb = torch.randn(n, hk, cap, d, generator=gen), torch.randn(n, hk, cap, d, generator=gen)
    bias = torch.zeros(n, cap)
    bias[1, :3] = float("-inf")  # row 1's padding
    got = kernel(q, kb, vb, bias, t, 0.25)
    for r in range(n):
        for h in range(hk):
            for j in range(rep):
                scores = [float(q[r, h, j] @ kb[r, h, x]) * 0.25 + float(bias[r, x]) for x in range(t)]
                top = max(scores)
                w = [math.exp(s - top) for s in scores]
                want = sum(wx * vb[r, h, x] for x, wx in enumerate(w)) / sum(w)
                torch.testing.assert_close(got[r, h, j], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tq,tk,masked", [(7, 7, False), (1, 9, False), (5, 12, True)])
def test_matmul_attention_equals_torchs_attention(policy, tq, tk, masked):
    from benchmarks.bench_speed_candidates import matmul_attend

    fast = FastQwen2(policy.model)
    gen = torch.Generator().manual_seed(tq * tk)
    q = torch.randn(2, fast.n_heads, tq, fast.head_dim, generator=gen)
    k, v = (torch.randn(2, fast.n_kv, tk, fast.head_dim, generator=gen) for _ in range(2))
    mask = None
    if masked:  # a prefix with padding, then causal continuation keys, as continuation_hidden builds it
        mask = torch.ones(2, 1, tq, tk, dtype=torch.bool)
        mask[1, :, :, 5:7] = False
        mask[:, :, :, tk - tq:] = torch.ones(tq, tq, dtype=torch.bool).tril()
    torch.testing.assert_close(matmul_attend(fast, q, k, v, mask), fast._attend(q, k, v, mask), rtol=1e-5, atol=1e-6)
