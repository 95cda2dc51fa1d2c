"""The fused float32 decoding step (`decode_step_fused` in `csrc/decode_step.cpp`, the default compiled step for
float32 CPU decoding) against independent references.

The fused step writes its own loops for the RMSNorms, RoPE, the cache writes and the attention's two products, so its
sums are taken in another order than ATen's: its logits equal the reference up to float rounding, not bit for bit.
Checked here against transformers' own forward over the whole sequence (no cache at all) step by step, as rows drop
out; the keys and values it caches against the operator-for-operator step's; at several shapes (query groups of 1, 2
and 4, head dims 8-64, caches whose length is and is not a multiple of 8) against that step; across torch thread
counts bit for bit (each row and key/value head is one work item, computed the same way on any thread); and which
step a model gets (float32 only, the shapes the kernel takes, the switch refused when misspelt).
"""

from __future__ import annotations

import copy
import os
import shutil

import pytest
import torch
import transformers

from ragen_core.policy import HFPolicy, native
from ragen_core.policy.fast_qwen2 import FastQwen2
from ragen_core.policy.native import KERNEL, SWITCH
from ragen_core.policy.tiny import default_tiny_model_dir

HAVE_COMPILER = shutil.which(os.environ.get("CXX") or "c++") is not None
pytestmark = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on PATH: the Python step runs")
TOL = dict(rtol=1e-5, atol=2e-5)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The shipped tiny model (hidden 128, 2 layers, 4 heads, 2 key/value heads, vocabulary 1028)."""
    return HFPolicy.from_pretrained(default_tiny_model_dir(tmp_path_factory.mktemp("tiny-cache")))


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    monkeypatch.delenv(KERNEL, raising=False)


def _prompts(groups: int, per_group: int, seed: int, lo: int = 130, hi: int = 150, vocab: int = 1028):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(groups):
        n = int(torch.randint(lo, hi + 1, (1,), generator=gen))
        out += [torch.randint(5, vocab, (n,), generator=gen).tolist()] * per_group
    return out


def _schedule(rows: int, max_new: int, seed: int) -> torch.Tensor:
    """The step after which each row stops (row 0 runs to the end)."""
    last = torch.randint(1, max_new + 1, (rows,), generator=torch.Generator().manual_seed(seed))
    last[0] = max_new
    return last


def _model(hidden: int, heads: int, kv: int, layers: int = 2, vocab: int = 97, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                   max_position_embeddings=512, tie_word_embeddings=True)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # transformers initialises biases to 0 and norms to 1: make them count
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def test_float32_decoding_takes_the_fused_step_by_default(policy, monkeypatch):
    fast = FastQwen2(policy.model)
    assert fast.start_decoding(_prompts(1, 2, seed=1), 4, policy.pad_token_id).kernel == "fused"
    monkeypatch.setenv(KERNEL, " OPS ")
    assert fast.start_decoding(_prompts(1, 2, seed=1), 4, policy.pad_token_id).kernel == "ops"
    monkeypatch.setenv(KERNEL, "fused")
    assert "compiled step (fused; " in native.native_decode_status()
    monkeypatch.setenv(SWITCH, "0")
    assert fast.start_decoding(_prompts(1, 2, seed=1), 4, policy.pad_token_id).kernel == "python"


def test_other_dtypes_and_shapes_take_the_operator_step(policy):
    half = FastQwen2(copy.deepcopy(policy.model).to(torch.bfloat16))
    assert half.start_decoding(_prompts(1, 2, seed=1), 4, policy.pad_token_id).kernel == "ops"
    odd = FastQwen2(_model(hidden=24, heads=4, kv=2))  # head dim 6: not a multiple of 8
    assert odd.start_decoding(_prompts(1, 2, seed=1, lo=9, hi=12, vocab=97), 4, 0).kernel == "ops"


def test_a_misspelt_kernel_is_refused_with_the_values_it_takes(policy, monkeypatch):
    monkeypatch.setenv(KERNEL, "fast")
    with pytest.raises(ValueError, match="RAGEN2_DECODE_KERNEL='fast': expected one of fused, ops"):
        FastQwen2(policy.model).start_decoding(_prompts(1, 2, seed=1), 4, policy.pad_token_id)
    with pytest.raises(ValueError, match="kernel must be one of fused, ops"):
        native.native_decode_step("fast")


@torch.no_grad()
def test_every_step_equals_transformers_forward_over_the_whole_sequence(policy):
    """24 rows (6 prompts x 4) of 130-150 prompt tokens, 40 new tokens, rows stopping at random steps: at every step
    each live row's logits equal transformers' forward over its whole sequence so far (prompt + every token fed),
    with no cache, at the last position."""
    fast = FastQwen2(policy.model)
    prompts = _prompts(6, 4, seed=21)
    rows, max_new = len(prompts), 40
    state = fast.start_decoding(prompts, max_new, policy.pad_token_id)
    assert state.kernel == "fused"
    seqs = [list(p) for p in prompts]  # the last prompt token is the first one fed
    last = _schedule(rows, max_new, seed=5)
    gen = torch.Generator().manual_seed(6)
    live, tokens = torch.arange(rows), state.next_tokens
    checked = 0
    for step in range(max_new):
        got = state.step(live, tokens)
        for j, r in enumerate(live.tolist()):
            if j % 3 and step % 4:  # a third of the rows at most steps, every row every 4th step
                continue
            want = policy.model(torch.tensor([seqs[r]])).logits[0, -1]
            torch.testing.assert_close(got[j], want, **TOL)
            checked += 1
        tokens = torch.randint(0, got.shape[1], (live.numel(),), generator=gen)
        keep = last[live] > step + 1
        live, tokens = live[keep], tokens[keep]
        for r, t in zip(live.tolist(), tokens.tolist()):
            seqs[r].append(t)
        if not live.numel():
            break
    assert checked > 150


@torch.no_grad()
@pytest.mark.parametrize("hidden,heads,kv,prompt", [(128, 4, 2, (130, 150)), (64, 4, 4, (9, 17)),
                                                   (64, 8, 2, (20, 33)), (32, 4, 4, (1, 3)), (256, 4, 2, (40, 60)),
                                                   (64, 4, 2, (1, 1))])
def test_the_fused_step_equals_the_operator_step_at_other_shapes(hidden, heads, kv, prompt, monkeypatch):
    """Query groups of 1, 2 and 4 heads, head dims 8 to 64, prompts of 1-150 tokens (so caches of every length mod
    8; prompts of one token leave no prompt columns at all), shared by groups of 3 rows: every step's logits, and at
    the end every cache column, equal the operator-for-operator step's up to float rounding. The fused step keeps
    each distinct prompt's keys and values once, and its rows' decoded columns apart."""
    model = _model(hidden, heads, kv, seed=hidden + heads)
    fast = FastQwen2(model)
    prompts = _prompts(5, 3, seed=hidden, lo=prompt[0], hi=prompt[1], vocab=97)
    states = {}
    for kernel in ("fused", "ops"):
        monkeypatch.setenv(KERNEL, kernel)
        states[kernel] = fast.start_decoding(prompts, 30, 0)
        assert states[kernel].kernel == kernel
    last = _schedule(len(prompts), 30, seed=hidden)
    gen = torch.Generator().manual_seed(1)
    live, tokens = torch.arange(len(prompts)), states["ops"].next_tokens
    for _ in range(30):
        got, want = states["fused"].step(live, tokens), states["ops"].step(live, tokens)
        torch.testing.assert_close(got, want, **TOL)
        tokens = torch.randint(0, 97, (live.numel(),), generator=gen)
        keep = last[live] > states["ops"].steps
        live, tokens = live[keep], tokens[keep]
        if not live.numel():
            break
    a, b = states["fused"], states["ops"]
    assert a.prefix is not None and b.prefix is None
    assert a.cache[0][0].shape[2] == 30  # the fused layout keeps a row's decoded columns only
    if a.width:
        assert a.prefix[0][0].shape[0] <= 5  # each distinct prompt once (equal short ones merge)
    for (ka, va), (kp, vp), (kb, vb) in zip(a.cache, a.prefix, b.cache):
        # every slot (compacted the same way in both states): its prompt's columns, then its decoded ones
        full_k = torch.cat([kp.index_select(0, a.owner), ka[:, :, : a.steps]], dim=2)
        full_v = torch.cat([vp.index_select(0, a.owner), va[:, :, : a.steps]], dim=2)
        torch.testing.assert_close(full_k, kb[:, :, : b.width + b.steps], **TOL)
        torch.testing.assert_close(full_v, vb[:, :, : b.width + b.steps], **TOL)


@torch.no_grad()
def test_the_fused_step_gives_the_same_bits_on_any_number_of_threads(policy):
    fast = FastQwen2(policy.model)
    prompts = _prompts(4, 4, seed=8)
    before = torch.get_num_threads()
    out = {}
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            state = fast.start_decoding(prompts, 12, policy.pad_token_id)
            live, tokens, steps = torch.arange(16), state.next_tokens, []
            for _ in range(12):
                logits = state.step(live, tokens)
                steps.append(logits)
                tokens = logits.argmax(-1)
            out[threads] = torch.stack(steps)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out[1], out[2]) and torch.equal(out[1], out[3])


def test_a_misspelt_kernel_stops_a_command_before_it_starts(monkeypatch, capsys, tmp_path):
    """`ragen train` (and every command that trains or decodes) refuses the switch in one line, exit status 2, before
    it writes a run folder; a run would otherwise stop at its first decoding."""
    from ragen_core.apps.cli import main

    monkeypatch.setenv(KERNEL, "fast")
    assert main(["train", "bandit_tiny", "run.steps=1", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "ragen train: error: RAGEN2_DECODE_KERNEL='fast': expected one of fused, ops"
    assert not (tmp_path / "run").exists()
