"""The policy API with more inputs a researcher may get wrong: token ids outside the vocabulary or not integers,
score / attention masks of the wrong shape or values, empty batches, sampling arguments of the wrong type, chat
messages that are not a list, and the tiny-model builder's sizes. Each gets a ValueError or TypeError naming the
argument, on both decoding / scoring paths (the lean forward and transformers'), and valid inputs are unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy()


@pytest.fixture(scope="module")
def prompt(policy):
    return policy.encode_chat([{"role": "user", "content": "x"}])


@pytest.fixture(params=[True, False], ids=["fast", "transformers"])
def fast(request, policy):
    """Run the test on the lean forward and on transformers' forward (restored afterwards)."""
    before = policy.fast
    policy.fast = request.param
    yield request.param
    policy.fast = before


def vocab(policy) -> int:
    return policy.model.get_input_embeddings().weight.shape[0]


# ------------------------------------------------------------------------------------------------ token ids
@pytest.mark.parametrize("bad", [-1, "V"])
def test_generate_refuses_prompt_ids_outside_the_vocabulary(policy, prompt, fast, bad):
    bad = vocab(policy) if bad == "V" else bad
    with pytest.raises(ValueError, match=rf"prompts.*token ids in \[0, {vocab(policy)}\).*{bad}"):
        policy.generate([prompt, [*prompt, bad]], max_new_tokens=2)


@pytest.mark.parametrize("bad", [1.5, 2.0, True, "a", None])
def test_generate_refuses_prompt_entries_that_are_not_integers(policy, prompt, fast, bad):
    # 1.5 used to be truncated to token 1 without a word
    with pytest.raises(TypeError, match="prompts"):
        policy.generate([[*prompt, bad]], max_new_tokens=2)


def test_generate_refuses_a_string_or_a_flat_id_list_as_prompts(policy, prompt):
    with pytest.raises(TypeError, match="prompts must be a list of token-id lists"):
        policy.generate("hello", max_new_tokens=2)
    with pytest.raises(TypeError, match="prompts must be a list of token-id lists"):
        policy.generate(prompt, max_new_tokens=2)
    with pytest.raises(TypeError, match="prompts must be a list of token-id lists"):
        policy.generate(["hello"], max_new_tokens=2)


def test_generate_takes_tensor_and_array_prompts_as_plain_ids(policy, prompt, fast):
    want = policy.generate([prompt], max_new_tokens=3, generator=torch.Generator().manual_seed(3))
    for rows in (torch.tensor([prompt]), [np.asarray(prompt)], [torch.tensor(prompt)]):
        got = policy.generate(rows, max_new_tokens=3, generator=torch.Generator().manual_seed(3))
        assert got == want
        assert all(type(i) is int for i in got[0].prompt_ids)
    with pytest.raises(TypeError, match="prompts"):
        policy.generate([torch.tensor(prompt, dtype=torch.float32)], max_new_tokens=2)


def test_forward_logprobs_refuses_ids_outside_the_vocabulary(policy, prompt, fast):
    for bad in (-1, vocab(policy)):
        ids, mask = policy.pad([prompt, [*prompt, 5]])
        ids[1, -1] = bad
        with pytest.raises(ValueError, match=rf"input_ids.*\[0, {vocab(policy)}\).*{bad} at \[1, {len(prompt)}\]"):
            policy.forward_logprobs(ids, mask)
        with pytest.raises(ValueError, match=rf"sequences.*\[0, {vocab(policy)}\).*{bad}"):
            policy.pad([prompt, [*prompt, bad]])


def test_forward_logprobs_refuses_non_integer_ids_and_non_tensors(policy, prompt, fast):
    ids, mask = policy.pad([prompt])
    with pytest.raises(TypeError, match="input_ids must be an integer tensor"):
        policy.forward_logprobs(ids.float(), mask)
    with pytest.raises(TypeError, match="input_ids must be a torch.Tensor"):
        policy.forward_logprobs(ids.tolist(), mask)
    with pytest.raises(TypeError, match="attention_mask must be a torch.Tensor"):
        policy.forward_logprobs(ids, mask.tolist())


def test_cross_score_refuses_ids_outside_the_vocabulary(policy, prompt):
    with pytest.raises(ValueError, match=r"prompts.*\[0, "):
        policy.cross_score([[*prompt, vocab(policy)]], [[[1, 2]]])
    with pytest.raises(ValueError, match=r"traces.*\[0, "):
        policy.cross_score([prompt], [[[1, -3]]])


# ------------------------------------------------------------------------------------------------ masks and shapes
def test_forward_logprobs_refuses_a_score_mask_of_another_shape(policy, prompt, fast):
    ids, mask = policy.pad([prompt])
    for shape in ((1, 3), (ids.shape[1],), (2, ids.shape[1])):
        with pytest.raises(ValueError, match=rf"score_mask must be \[B, T\] = \[1, {ids.shape[1]}\]"):
            policy.forward_logprobs(ids, mask, score_mask=torch.ones(shape, dtype=torch.bool))
    with pytest.raises(TypeError, match="score_mask must be a torch.Tensor"):
        policy.forward_logprobs(ids, mask, score_mask=[[True] * ids.shape[1]])


@pytest.mark.parametrize("value", [0.5, 2])
def test_forward_logprobs_refuses_score_mask_values_other_than_0_and_1(policy, prompt, fast, value):
    # the two paths used to disagree: one read the mask as bool, the other multiplied the log-probs by it
    ids, mask = policy.pad([prompt])
    with pytest.raises(ValueError, match="score_mask must hold only 0/1"):
        policy.forward_logprobs(ids, mask, score_mask=torch.full(ids.shape, value))


def test_a_0_1_score_mask_of_any_dtype_is_the_bool_mask(policy, prompt, fast):
    ids, mask = policy.pad([prompt])
    keep = torch.zeros(ids.shape, dtype=torch.bool)
    keep[:, 3:] = True
    with torch.no_grad():
        want = policy.forward_logprobs(ids, mask, score_mask=keep).logprobs
        for dtype in (torch.long, torch.float32):
            got = policy.forward_logprobs(ids, mask, score_mask=keep.to(dtype)).logprobs
            assert torch.equal(got, want)
    assert bool((want[:, :3] == 0).all()) and bool((want[:, 3:] != 0).all())


def test_forward_logprobs_refuses_attention_mask_values_other_than_0_and_1(policy, prompt, fast):
    ids, mask = policy.pad([prompt])
    with pytest.raises(ValueError, match="attention_mask must hold only 0/1"):
        policy.forward_logprobs(ids, mask * 2)


def test_forward_logprobs_refuses_zero_columns(policy, prompt, fast):
    ids, mask = policy.pad([prompt])
    with pytest.raises(ValueError, match=r"input_ids has 0 columns \(T = 0\)"):
        policy.forward_logprobs(ids[:, :0], mask[:, :0])


def test_forward_logprobs_of_no_rows_is_empty_on_both_paths(policy, prompt, fast):
    ids, mask = policy.pad([prompt])
    out = policy.forward_logprobs(ids[:0], mask[:0], with_entropy=True)
    assert out.logprobs.shape == (0, ids.shape[1]) and out.entropy.shape == (0, ids.shape[1])


@pytest.mark.parametrize("temperature", [float("inf"), "1", None, True])
def test_forward_logprobs_refuses_a_temperature_that_is_not_a_finite_positive_number(policy, prompt, temperature):
    ids, mask = policy.pad([prompt])
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        policy.forward_logprobs(ids, mask, temperature=temperature)


# ------------------------------------------------------------------------------------------------ sampling arguments
@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-1.0), "temperature must be a finite number >= 0"),
    (dict(temperature=float("inf")), "temperature must be a finite number >= 0"),
    (dict(temperature="1"), "temperature must be a finite number >= 0"),
    (dict(temperature=None), "temperature must be a finite number >= 0"),
    (dict(top_p=0.0), r"top_p must be a number in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be a number in \(0, 1\]"),
    (dict(top_p="0.5"), r"top_p must be a number in \(0, 1\]"),
    (dict(top_p=True), r"top_p must be a number in \(0, 1\]"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    (dict(max_new_tokens=2.0), "max_new_tokens must be an integer >= 1"),
])
def test_generate_refuses_sampling_arguments_out_of_range(policy, prompt, kwargs, match):
    with pytest.raises(ValueError, match=match):
        policy.generate([prompt], **{"max_new_tokens": 2, **kwargs})


@pytest.mark.parametrize("generator", [0, np.random.default_rng(0), "seed"])
def test_generate_refuses_a_generator_that_is_not_a_torch_generator(policy, prompt, generator):
    with pytest.raises(TypeError, match="generator must be None or a torch.Generator"):
        policy.generate([prompt], max_new_tokens=2, generator=generator)


def test_generate_refuses_a_greedy_flag_that_is_not_a_bool(policy, prompt):
    with pytest.raises(ValueError, match="greedy must be True or False"):
        policy.generate([prompt], max_new_tokens=2, greedy="no")


def test_generate_of_no_prompts_is_no_generations(policy):
    assert policy.generate([], max_new_tokens=2) == []


# ------------------------------------------------------------------------------------------------ chat messages
@pytest.mark.parametrize("messages", ["hello", {"role": "user", "content": "x"}, None, 5])
def test_encode_chat_needs_a_list_of_messages(policy, messages):
    with pytest.raises(TypeError, match="messages must be a list of"):
        policy.encode_chat(messages)


def test_encode_chat_refuses_an_empty_conversation(policy):
    with pytest.raises(ValueError, match="messages is empty"):
        policy.encode_chat([])


# ------------------------------------------------------------------------------------------------ the tiny builder
@pytest.mark.parametrize("kwargs, name", [
    (dict(hidden=32.0), "hidden"), (dict(hidden=True), "hidden"), (dict(layers=1.5), "layers"),
    (dict(layers=True), "layers"), (dict(heads=2.0), "heads"), (dict(kv_heads=1.0), "kv_heads"),
    (dict(vocab_size=300.0), "vocab_size"), (dict(intermediate=-4), "intermediate"),
    (dict(intermediate=64.5), "intermediate"), (dict(max_positions=0), "max_positions"),
    (dict(max_positions=1.5), "max_positions"), (dict(seed=1.5), "seed"), (dict(seed=True), "seed"),
    (dict(vision="yes"), "vision"), (dict(vision=True, image_size=96.0), "image_size"),
    (dict(vision=True, patch_size=16.0), "patch_size"),
])
def test_build_tiny_model_names_a_bad_size(tmp_path, kwargs, name):
    from ragen_core.policy import build_tiny_model

    with pytest.raises(ValueError, match=rf"^{name} must be"):
        build_tiny_model(tmp_path, ["x"], **{"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 1, **kwargs})
    assert not any(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.parametrize("corpus", ["some text", 5, ["ok", 3]])
def test_build_tiny_model_needs_a_corpus_of_strings(tmp_path, corpus):
    from ragen_core.policy import build_tiny_model

    # a bare string used to be read as its characters, one text each
    with pytest.raises(TypeError, match="corpus must be"):
        build_tiny_model(tmp_path, corpus, hidden=32, layers=2, heads=2, kv_heads=1)


def test_build_tiny_model_needs_a_path(tmp_path):
    from ragen_core.policy import build_tiny_model

    with pytest.raises(ValueError, match="out_dir must be a file path"):
        build_tiny_model(5, ["x"], hidden=32, layers=2, heads=2, kv_heads=1)


def test_tiny_vision_model_refuses_ids_outside_the_vocabulary(make_tiny_policy):
    vision = make_tiny_policy(vision=True)
    v = vision.model.get_input_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=rf"input_ids.*\[0, {v}\).*{v}"):
        vision.model(input_ids=torch.tensor([[1, v]]))


@pytest.mark.parametrize("kwargs, match", [(dict(temperature=0.0), "temperature must be a finite number > 0"),
                                           (dict(temperature=-1.0), "temperature must be a finite number > 0"),
                                           (dict(top_p=0.0), r"top_p must be a number in \(0, 1\]")])
def test_sample_from_logits_refuses_a_sampling_rule_out_of_range(kwargs, match):
    from ragen_core.policy import sample_from_logits

    # temperature 0 used to divide the logits by zero and draw from NaNs
    with pytest.raises(ValueError, match=match):
        sample_from_logits(torch.zeros(2, 5), **kwargs)
    tokens, _ = sample_from_logits(torch.tensor([[0.0, 3.0, 1.0]]), greedy=True, **kwargs)  # greedy reads neither
    assert tokens.tolist() == [1]
    with pytest.raises(ValueError, match=r"logits must be a \[B, V\] tensor"):
        sample_from_logits(torch.zeros(5))
