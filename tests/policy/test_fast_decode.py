"""KV-cached decoding of the lean forward (`FastQwen2.start_decoding`, `DecodeState.step`) against the previous
implementation of the step (`_ReferenceDecodeState` below, kept verbatim as the reference) and transformers' own
generation path (`HFPolicy.fast = False`).

At the shipped tiny model's shapes (hidden 128, 2 layers, 4 heads, 2 key/value heads, head dim 32, vocabulary
1028), with prompts of ~130-150 tokens (several lengths, so the transformers path left-pads them and the lean one
masks its prefix padding), prompts shared by groups of rows, and rows that finish at different steps (so the cache
compacts): the logits equal the previous step's bit for bit, and generation samples the same token ids (greedy,
temperature 1.0, and temperature 1.0 with top-p 0.9) as both references from the same generator seed.
"""

from __future__ import annotations

import copy

import pytest
import torch

from benchmarks.micro.bench_decode import BaselineDecodeState
from ragen_core.policy import HFPolicy, fast_qwen2
from ragen_core.policy.fast_qwen2 import FastQwen2
from ragen_core.policy.native import KERNEL
from ragen_core.policy.tiny import default_tiny_model_dir

TOL = dict(rtol=1e-5, atol=2e-5)


#: The decoding step as it was before the preallocated layout (commit 6bd8167), verbatim: rebuilds the mask each
#: step and copies the whole cache whenever a row finishes. The reference the new step must equal bit for bit; it
#: lives with the benchmark that times the two side by side.
_ReferenceDecodeState = BaselineDecodeState


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The shipped tiny model (`default_tiny_model_dir`), built into a fresh folder."""
    pol = HFPolicy.from_pretrained(default_tiny_model_dir(tmp_path_factory.mktemp("tiny-cache")))
    cfg = pol.model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (128, 2, 4, 2)
    assert cfg.vocab_size == 1028
    return pol


def _prompts(groups: int, per_group: int, seed: int, vocab: int = 1028) -> list[list[int]]:
    """`groups` random prompts of 130-150 tokens, each repeated `per_group` times (in the rollout's order: a group's
    rows are adjacent)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(groups):
        n = int(torch.randint(130, 151, (1,), generator=gen))
        out += [torch.randint(5, vocab, (n,), generator=gen).tolist()] * per_group
    return out


# --------------------------------------------------------------------------------------------- the step itself
@pytest.mark.parametrize("kernel", ["ops", "fused"])
@pytest.mark.parametrize("rows,groups,max_new", [(32, 8, 64), (128, 32, 100), (7, 7, 40)])
def test_step_logits_equal_the_previous_step_bit_for_bit(policy, rows, groups, max_new, kernel, monkeypatch):
    """Both states fed the same tokens and the same shrinking row sets (rows drop out at random steps, several at
    once, down to one row): every step's logits are equal bit for bit (the fused float32 step: equal up to float
    rounding, its sums being taken in another order)."""
    monkeypatch.setenv(KERNEL, kernel)
    fast = FastQwen2(policy.model)
    prompts = _prompts(groups, rows // groups, seed=rows)
    new = fast.start_decoding(prompts, max_new, policy.pad_token_id)
    old = _start(fast, _ReferenceDecodeState, prompts, max_new, policy.pad_token_id)
    assert torch.equal(new.next_tokens, old.next_tokens)
    gen = torch.Generator().manual_seed(rows + 1)
    last = torch.randint(1, max_new + 1, (rows,), generator=gen)  # the step after which each row stops
    last[0] = max_new  # one row runs to the end
    live, tokens, moved = torch.arange(rows), new.next_tokens, False
    assert new.kernel in (kernel, "python")  # the Python step where no compiler is found
    for step in range(max_new):
        got, want = new.step(live, tokens), old.step(live, tokens)
        if new.kernel == "fused":
            torch.testing.assert_close(got, want, **TOL)
        else:
            assert torch.equal(got, want), f"step {step}: max |diff| {float((got - want).abs().max())}"
        assert new.n == live.numel()  # exactly the rows still decoding are computed
        moved |= new._where is not None
        tokens = torch.randint(0, got.shape[1], (live.numel(),), generator=gen)
        keep = last[live] > step + 1
        live, tokens = live[keep], tokens[keep]
        if not live.numel():
            break
    assert moved, "no row ever moved: the compaction was not exercised"


def _start(fast: FastQwen2, state_class, prompts, max_new, pad_id):
    """`fast.start_decoding(...)` with `state_class` as the decoding state."""
    real = fast_qwen2.DecodeState
    fast_qwen2.DecodeState = state_class
    try:
        return fast.start_decoding(prompts, max_new, pad_id)
    finally:
        fast_qwen2.DecodeState = real


def test_a_step_past_the_capacity_raises(policy):
    fast = FastQwen2(policy.model)
    state = fast.start_decoding(_prompts(2, 2, seed=5), 2, policy.pad_token_id)
    rows, tok = torch.arange(4), state.next_tokens
    for _ in range(2):
        tok = state.step(rows, tok).argmax(-1)
    with pytest.raises(RuntimeError, match="new tokens"):
        state.step(rows, tok)


# --------------------------------------------------------------------------------------------- generation
@pytest.fixture(scope="module")
def sharpened(policy):
    """The shipped model with its matrices scaled 6x: greedy decoding then depends on the context (the untrained
    model repeats its first token), and sampling is more peaked, as a trained model's is."""
    model = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(6.0)
    return HFPolicy(model, policy.tokenizer)


@pytest.mark.parametrize("kernel", ["ops", "fused"])
@pytest.mark.parametrize("model,mode", [("shipped", "temperature 1"), ("shipped", "top-p 0.9"),
                                        ("sharpened", "greedy"), ("sharpened", "temperature 1"),
                                        ("sharpened", "top-p 0.9")])
def test_generation_samples_the_same_tokens_as_both_references(policy, sharpened, model, mode, kernel, monkeypatch):
    """32 rows (8 prompts x 4), 64 new tokens, the same generator seed: the new decoding, the previous one and
    transformers' path give the same token ids and finish reasons, and log-probs equal to the previous decoding's
    exactly (its logits are the same bits; the fused float32 step's within float32 rounding) and to transformers'
    within float32 rounding. EOS ids are picked from a first run so that rows stop at different steps, many early:
    the cache compacts several times."""
    monkeypatch.setenv(KERNEL, kernel)
    base = policy if model == "shipped" else sharpened
    prompts = _prompts(8, 4, seed=11)
    kw = dict(max_new_tokens=64, greedy=mode == "greedy", temperature=1.0,
              top_p=0.9 if mode == "top-p 0.9" else 1.0)

    def run(pol: HFPolicy, stop=("</answer>",)):
        return pol.generate(prompts, generator=torch.Generator().manual_seed(3), stop=stop, **kw)

    first = run(HFPolicy(base.model, base.tokenizer, eos_token_ids=[]), stop=())
    # Stop tokens: one token from every third row, at staggered positions.
    eos = {first[r].response_ids[(5 * r + 3) % 60] for r in range(0, 32, 3)}
    pol = HFPolicy(base.model, base.tokenizer, eos_token_ids=sorted(eos))
    new = run(pol)
    pol.fast = False
    hf = run(pol)
    pol.fast = True
    monkeypatch.setattr(fast_qwen2, "DecodeState", _ReferenceDecodeState)
    old = run(pol)
    lengths = [len(g.response_ids) for g in new]
    assert len(set(lengths)) >= 4 and sum(n < 32 for n in lengths) >= 8, lengths  # rows stop at different steps
    for ref in (old, hf):
        assert [g.response_ids for g in new] == [g.response_ids for g in ref]
        assert [g.finish_reason for g in new] == [g.finish_reason for g in ref]
    if kernel == "ops":
        assert [g.response_logprobs for g in new] == [g.response_logprobs for g in old]
    for a, b in zip(hf + old, new + new):
        torch.testing.assert_close(torch.tensor(b.response_logprobs), torch.tensor(a.response_logprobs), **TOL)
