"""Tests that kill the mutants of ragen_core/math/mi.py's cache and reference paths that the first full mutmut run
left alive (see docs/theory_report/mutation.md): the invalid-scores check of a trace impossible under every
prompt, how ``_expand_cache`` treats every kind of KV-cache layer
(plain layers expanded as stride-0 views; other layers, layers without tensors and legacy caches without
``layers`` through their own methods), text inputs of the naive reference, and that the reference moves its
inputs to the model's device (checked on the ``meta`` device, which needs no accelerator)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

from ragen_core.math.mi import _expand_cache, cross_score, cross_score_naive

transformers = pytest.importorskip("transformers")


class _Layer:
    """A stand-in cache layer that records ``batch_repeat_interleave`` calls."""

    def __init__(self, keys=None, values=None) -> None:
        if keys is not None:
            self.keys, self.values = keys, values
        self.calls: list[int] = []

    def batch_repeat_interleave(self, batch: int) -> None:
        # rebinds the attribute, as transformers' layers rebind keys / values (the copy shares the old list)
        self.calls = [*self.calls, batch]


class DynamicLayer(_Layer):  # the name is what marks a plain full-attention layer
    pass


def _kv() -> torch.Tensor:
    return torch.arange(2 * 1 * 3 * 4, dtype=torch.float32).reshape(1, 2, 3, 4)


def test_plain_layers_are_expanded_as_views_and_the_prompt_cache_is_untouched() -> None:
    layer = DynamicLayer(_kv(), _kv() + 1)
    cache = types.SimpleNamespace(layers=[layer])
    out = _expand_cache(cache, 3)
    (new,) = out.layers
    assert new.keys.shape == (3, 2, 3, 4) and new.keys.stride(0) == 0 and new.calls == []
    assert torch.equal(new.values[2], _kv()[0] + 1)
    assert layer.keys.shape == (1, 2, 3, 4) and cache.layers[0] is layer


@pytest.mark.parametrize("layer", [
    _Layer(_kv(), _kv()),      # another layer type (e.g. sliding window) with 4-D tensors
    _Layer(),                  # a layer type without keys / values attributes
    DynamicLayer(None, None),  # a plain layer that holds no tensors yet
], ids=["other-type", "no-attributes", "plain-empty"])
def test_other_layers_use_their_own_batch_repeat(layer: _Layer) -> None:
    out = _expand_cache(types.SimpleNamespace(layers=[layer]), 3)
    assert out.layers[0].calls == [3]
    assert layer.calls == []  # the copy was repeated, not the prompt cache's layer


def test_a_cache_without_layers_expands_its_key_and_value_lists() -> None:
    legacy = types.SimpleNamespace(key_cache=[_kv()], value_cache=[_kv() + 1])
    out = _expand_cache(legacy, 2)
    assert out.key_cache[0].shape == (2, 2, 3, 4) and torch.equal(out.value_cache[0][1], _kv()[0] + 1)
    assert legacy.key_cache[0].shape == (1, 2, 3, 4)


def test_an_unknown_layer_type_is_a_clear_error() -> None:
    class SlidingLayer:
        pass

    with pytest.raises(ValueError, match=r"^cannot expand a KV cache layer of type SlidingLayer$"):
        _expand_cache(types.SimpleNamespace(layers=[SlidingLayer()]), 2)


class _OpaqueCache:
    """A cache with neither ``layers`` nor ``key_cache``: only its own in-place ``batch_repeat_interleave``."""

    def __init__(self) -> None:
        self.rows = [1]

    def batch_repeat_interleave(self, batch: int) -> None:
        self.rows[:] = self.rows * batch  # in place: a shallow copy would change the prompt cache too


def test_any_other_cache_is_deep_copied_then_repeated() -> None:
    prompt_cache = _OpaqueCache()
    out = _expand_cache(prompt_cache, 3)
    assert out.rows == [1, 1, 1] and prompt_cache.rows == [1]


def _tiny() -> torch.nn.Module:
    cfg = transformers.Qwen2Config(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return transformers.Qwen2ForCausalLM(cfg).eval()


class _CharTokenizer:
    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": [ord(c) % 61 for c in text]}


@pytest.mark.parametrize("batch_tokens", [None, 64])
def test_naive_reference_tokenises_text_with_the_tokenizer(batch_tokens: int | None) -> None:
    model, tok = _tiny(), _CharTokenizer()
    prompts, responses = ["ab", "xyz"], [["c", "de"], ["f", "gh"]]
    ids_p = [tok(p)["input_ids"] for p in prompts]
    ids_r = [[tok(r)["input_ids"] for r in row] for row in responses]
    text = cross_score_naive(model, prompts, responses, batch_tokens, tokenizer=tok)
    ids = cross_score_naive(model, ids_p, ids_r, batch_tokens)
    assert torch.equal(text, ids)


class _DeviceProbe(torch.nn.Module):
    """A model whose parameters live on ``meta``; it records the device (and the dtype of the attention mask) of
    every input it is given, and returns a stand-in KV cache so that the cache-reuse path reaches its second
    forward call."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1, device="meta"))
        self.devices: list[torch.device] = []
        self.mask_dtypes: list[torch.dtype] = []
        self.calls = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None, past_key_values=None):
        self.calls += 1
        self.devices.append(input_ids.device)
        for t in (attention_mask, position_ids):
            if t is not None:
                self.devices.append(t.device)
        if attention_mask is not None:
            self.mask_dtypes.append(attention_mask.dtype)
        logits = torch.zeros(*input_ids.shape, 7, device=input_ids.device)
        return types.SimpleNamespace(logits=logits, past_key_values=_OpaqueCache())


@pytest.mark.parametrize("batch_tokens", [None, 64])
def test_naive_reference_moves_its_inputs_to_the_model_device(batch_tokens: int | None) -> None:
    model = _DeviceProbe()
    try:
        cross_score_naive(model, [[1, 2]], [[[3], [4, 5]]], batch_tokens)
    except (RuntimeError, NotImplementedError):
        pass  # reading a number out of a meta tensor fails after the forward calls; they are what is checked
    assert model.devices and all(d.type == "meta" for d in model.devices)


def test_cache_reuse_path_moves_its_inputs_to_the_model_device() -> None:
    model = _DeviceProbe()
    try:
        cross_score(model, [[1, 2]], [[[3], [4, 5]]], 64)
    except (RuntimeError, NotImplementedError):
        pass  # reading a number out of a meta tensor fails after the forward calls; they are what is checked
    assert model.calls == 2  # the prompt, then one chunk of traces on the expanded cache
    assert all(d.type == "meta" for d in model.devices) and len(model.devices) == 4
    assert model.mask_dtypes == [torch.long]  # a 0/1 integer mask over prompt + trace, like a tokenizer's


def test_cache_reuse_asks_for_the_cache_even_when_the_model_config_disables_it() -> None:
    model = _tiny()
    model.config.use_cache = False
    prompts, responses = [[1, 2, 3], [4, 5]], [[[6, 7], [8]], [[9], [10, 11, 12]]]
    fast = cross_score(model, prompts, responses, 64)
    ref = cross_score_naive(model, prompts, responses)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-4)


def test_integer_ids_of_any_width_score_the_same() -> None:
    model = _tiny()
    prompts = [np.array([1, 2, 3], dtype=np.int32), torch.tensor([4, 5], dtype=torch.int16)]
    responses = [[np.array([6, 7], dtype=np.int32), [8]], [[9], torch.tensor([10, 11, 12], dtype=torch.int32)]]
    as_long = [[1, 2, 3], [4, 5]], [[[6, 7], [8]], [[9], [10, 11, 12]]]
    for fn in (lambda *a: cross_score(*a, 64), cross_score_naive):
        assert torch.equal(fn(model, prompts, responses), fn(model, *as_long))


def test_traces_are_batched_longest_first() -> None:
    # one prompt of 1 token, traces of 4, 3, 1, 1, 1 tokens, a budget of 8 tokens per call (rows x (1 + width)):
    # longest first the chunks are [4], [3, 1], [1, 1] (widths 4, 3, 1: 4 + 6 + 2 = 12 padded positions);
    # shortest first they would be [1, 1, 1], [3], [4] (3 + 3 + 4 = 10)
    model = _tiny()
    stats: dict[str, float] = {}
    cross_score(model, [[1]], [[[2, 3, 4, 5], [6, 7, 8], [9], [10], [11]]], 8, stats=stats)
    assert stats["forward_calls"] == 1 + 3
    assert stats["padded_positions"] == 1 + 12


def test_a_trace_impossible_under_every_prompt_is_reported_as_such() -> None:
    # one row of -inf (trace 1 of prompt 0) among finite rows: named by the invalid-scores check, not by the later
    # own-prompt check; a -inf under another prompt alone is valid
    from ragen_core.math.mi import mi_proxies

    L = torch.zeros(2, 2, 2, dtype=torch.float64)
    L[0, 1] = -math.inf
    L[1, 0, 0] = -math.inf
    with pytest.raises(ValueError, match=r"^L has NaN, \+inf or all -inf scores in 1 row\(s\) \(i, k\) = \(0, 1\) "):
        mi_proxies(L, torch.ones(2, 2))
