"""KV-reuse cross-scoring against the naive per-pair re-encoding (docs/science.md section 2), tiny models in fp32."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from ragen_core.math.mi import cross_score, cross_score_naive, mi_proxies  # noqa: E402

VOCAB = 61
TOL = 1e-4


def tiny_model(kind: str, attn: str = "sdpa") -> torch.nn.Module:
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=128, attn_implementation=attn)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        if kind == "qwen2":  # grouped-query attention (2 KV heads for 4 query heads)
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(num_key_value_heads=2, **common))
        else:
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_key_value_heads=4, **common))
    return model.eval()


# The equality tests run on three attention set-ups; the rest on the first only (keeps the suite fast).
_MODELS: dict = {}


def _get(kind: str, attn: str) -> torch.nn.Module:
    if (kind, attn) not in _MODELS:
        _MODELS[kind, attn] = tiny_model(kind, attn)
    return _MODELS[kind, attn]


@pytest.fixture(scope="module", params=[("qwen2", "sdpa"), ("qwen2", "eager"), ("llama", "sdpa")],
                ids=["qwen2-sdpa", "qwen2-eager", "llama-sdpa"])
def model(request):
    return _get(*request.param)


@pytest.fixture(scope="module")
def qwen():
    return _get("qwen2", "sdpa")


def make_batch(seed: int, p: int = 3, g: int = 2, prompt_lens=(3, 9, 5), response_lens=None):
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, VOCAB, (prompt_lens[i % len(prompt_lens)],), generator=gen) for i in range(p)]
    if response_lens is None:
        response_lens = [[int(torch.randint(1, 8, (1,), generator=gen)) for _ in range(g)] for _ in range(p)]
    responses = [[torch.randint(0, VOCAB, (response_lens[i][k],), generator=gen) for k in range(g)]
                 for i in range(p)]
    return prompts, responses


@pytest.fixture(scope="module")
def batch_and_reference(model):
    prompts, responses = make_batch(0, response_lens=[[1, 6], [4, 4], [7, 2]])
    return prompts, responses, cross_score_naive(model, prompts, responses)


@pytest.mark.parametrize("batch_tokens", [1, 15, 10_000])
def test_kv_reuse_equals_naive(model, batch_and_reference, batch_tokens):
    prompts, responses, reference = batch_and_reference
    L = cross_score(model, prompts, responses, batch_tokens=batch_tokens)
    assert L.shape == (3, 2, 3)
    assert torch.allclose(L, reference, atol=TOL, rtol=0), (L - reference).abs().max()


def test_naive_batched_equals_naive_per_pair(model, batch_and_reference):
    prompts, responses, reference = batch_and_reference
    L = cross_score_naive(model, prompts, responses, batch_tokens=30)
    assert torch.allclose(L, reference, atol=TOL, rtol=0)


def test_reference_against_hand_rolled_scoring(qwen):
    model = qwen
    # one pair scored by the most literal route: full forward, log-softmax, sum over the trace tokens
    prompts, responses = make_batch(3, p=2, g=1)
    L = cross_score_naive(model, prompts, responses)
    x, z = prompts[1], responses[0][0]
    seq = torch.cat([x, z])
    with torch.no_grad():
        logp = torch.log_softmax(model(seq[None]).logits[0].double(), -1)
    expected = sum(logp[len(x) - 1 + t, int(z[t])].item() for t in range(len(z)))
    assert L[0, 0, 1].item() == pytest.approx(expected, abs=TOL)


def test_padded_tensor_inputs_left_and_right(model, batch_and_reference):
    prompts, responses, reference = batch_and_reference
    p, g = len(prompts), len(responses[0])
    tx = max(len(x) for x in prompts) + 2
    tz = max(len(z) for grp in responses for z in grp) + 1
    # prompts left-padded, responses right-padded for group 0 and left-padded otherwise; pad id 0 is a real
    # token id, so only the masks can tell padding apart
    x_ids = torch.zeros(p, tx, dtype=torch.long)
    x_mask = torch.zeros(p, tx, dtype=torch.long)
    for i, x in enumerate(prompts):
        x_ids[i, tx - len(x):] = x
        x_mask[i, tx - len(x):] = 1
    z_ids = torch.zeros(p, g, tz, dtype=torch.long)
    z_mask = torch.zeros(p, g, tz, dtype=torch.long)
    for i in range(p):
        for k, z in enumerate(responses[i]):
            sl = slice(0, len(z)) if i == 0 else slice(tz - len(z), tz)
            z_ids[i, k, sl] = z
            z_mask[i, k, sl] = 1
    L = cross_score(model, x_ids, z_ids, batch_tokens=20, prompt_mask=x_mask, response_mask=z_mask)
    assert torch.allclose(L, reference, atol=TOL, rtol=0)


def test_equal_prompt_lengths_and_many_chunks(model):
    prompts, responses = make_batch(5, p=2, g=3, prompt_lens=(6,))
    reference = cross_score_naive(model, prompts, responses)
    assert torch.allclose(cross_score(model, prompts, responses, batch_tokens=25), reference, atol=TOL, rtol=0)


def test_each_prompt_encoded_once_and_work_is_the_physical_floor(qwen):
    model = qwen
    prompts, responses = make_batch(1, p=3, g=2)
    stats: dict = {}
    L, lengths = cross_score(model, prompts, responses, batch_tokens=10_000, return_lengths=True, stats=stats)
    p = len(prompts)
    assert lengths.tolist() == [[len(z) for z in grp] for grp in responses]
    assert stats["prompt_tokens"] == sum(len(x) for x in prompts)  # each prompt once
    assert stats["response_tokens"] == p * int(lengths.sum())  # P * sum |z|: the floor
    assert stats["forward_calls"] == 2 * p  # one prompt pass + one batch of all P*G traces, per prompt
    naive: dict = {}
    cross_score_naive(model, prompts, responses, stats=naive)
    g = len(responses[0])
    assert naive["prompt_tokens"] == p * g * sum(len(x) for x in prompts)
    assert naive["forward_calls"] == p * p * g


def test_empty_response_scores_zero(qwen):
    model = qwen
    prompts, responses = make_batch(2, p=2, g=2)
    responses[1][0] = torch.zeros(0, dtype=torch.long)
    L = cross_score(model, prompts, responses, batch_tokens=12)
    ref = cross_score_naive(model, prompts, responses)
    assert L[1, 0].tolist() == [0.0, 0.0]
    assert torch.allclose(L, ref, atol=TOL, rtol=0)


def test_training_flag_restored_and_no_grad(qwen):
    model = qwen
    prompts, responses = make_batch(4, p=2, g=1)
    model.train()
    try:
        L = cross_score(model, prompts, responses)
        assert model.training
        assert not L.requires_grad
    finally:
        model.eval()


def test_proxies_from_scored_batch_satisfy_identity(model, batch_and_reference):
    prompts, responses, _ = batch_and_reference
    L, lengths = cross_score(model, prompts, responses, return_lengths=True)
    s = mi_proxies(L, lengths)
    assert s["marginal_entropy_est"] == pytest.approx(s["cond_entropy_est"] + s["mi_est"], abs=1e-9)
    assert s["mi_seq_est"] <= s["mi_upper_bound"]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"batch_tokens": 0}, "batch_tokens"),
        ({"batch_tokens": 2.5}, "batch_tokens"),
    ],
)
def test_bad_budget(qwen, kwargs, fragment):
    model = qwen
    prompts, responses = make_batch(0, p=2, g=1)
    with pytest.raises(ValueError, match=fragment):
        cross_score(model, prompts, responses, **kwargs)


def test_bad_inputs(qwen):
    model = qwen
    prompts, responses = make_batch(0, p=2, g=2)
    with pytest.raises(ValueError, match="one group per prompt"):
        cross_score(model, prompts, responses[:1])
    with pytest.raises(ValueError, match="same number"):
        cross_score(model, prompts, [responses[0], responses[1][:1]])
    with pytest.raises(ValueError, match="empty"):
        cross_score(model, [prompts[0], torch.zeros(0, dtype=torch.long)], responses)
    with pytest.raises(ValueError, match="tokenizer"):
        cross_score(model, ["a prompt", "another"], [["x", "y"], ["z", "w"]])
    with pytest.raises(ValueError, match="prompt_mask"):
        cross_score(model, prompts, responses, prompt_mask=torch.ones(2, 3))


@pytest.mark.parametrize("scorer", [cross_score, cross_score_naive])
@pytest.mark.parametrize("where, bad", [("prompt", VOCAB), ("response", -1), ("response", VOCAB + 7)])
def test_token_ids_outside_the_vocabulary_are_one_error_naming_them(qwen, scorer, where, bad):
    """Called directly (not through a policy, which checks its ids), an id past the embedding was an IndexError deep
    in the model, and a negative one could read another row."""
    prompts, responses = make_batch(1)
    if where == "prompt":
        prompts[1] = torch.cat([prompts[1], torch.tensor([bad])])
        name = "prompts[1]"
    else:
        responses[2][1] = torch.cat([torch.tensor([bad]), responses[2][1]])
        name = r"responses\[2\]\[1\]"
    with pytest.raises(ValueError, match=rf"{'prompts.1.' if where == 'prompt' else name} holds token id {bad}, "
                                         rf"outside the model's vocabulary \[0, {VOCAB}\)"):
        scorer(qwen, prompts, responses)
