"""HFPolicy against independent references: plain per-sequence forwards without padding or cache.

The model here is a Llama built from a config (not the tiny Qwen2 of `tiny.py`), saved with a
tokenizer and chat template and reloaded through `HFPolicy.from_pretrained`, so the backend is
exercised on a second architecture.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ragen_core.policy import Generation, HFPolicy, Policy, pad_batch, sample_from_logits
from ragen_core.policy.tiny import build_tokenizer

CORPUS = [
    "<think> the box is left of the target </think> <answer> Up || Left </answer>",
    "Turn 1:\nState:\n######\n#O####\n#__###\n#X_###\n#_P_##\n######\nYou have 10 actions left.",
    "Reward: -0.1 √ Right Down",
] * 20


def _token_config(tok) -> dict:
    """The model-config fields that must agree with the tokenizer: vocabulary size and special ids (no BOS)."""
    return dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)


def _save_llama(path, *, chat_template: bool = True, seed: int = 0):
    tok = build_tokenizer(CORPUS, vocab_size=400)
    if not chat_template:
        tok.chat_template = None
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        **_token_config(tok),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
        # larger weights than the default init make the distributions peaked enough that greedy and
        # sampled paths differ visibly, and ties in argmax impossible in practice
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 2:
                    p.normal_(0.0, 0.2)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = _save_llama(tmp_path_factory.mktemp("llama"))
    return HFPolicy.from_pretrained(path, device="cpu")


def _prompts(policy):
    users = ["Turn 1:\nState:\n#_P\n", "Up", "You have 10 actions left. √ Reward: -0.1\n#X_#\n#O_#"]
    return [
        policy.encode_chat([{"role": "system", "content": "Play."}, {"role": "user", "content": u}])
        for u in users
    ]


def _ref_logprobs(model, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    """Plain forward of one unpadded sequence: log p(ids[t] | ids[:t]) for t >= 1, float64."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double() / temperature
    lp = torch.log_softmax(logits[:-1], -1)
    return lp.gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)


# ---------------------------------------------------------------------------------------- loading
def test_reload_is_a_policy_with_chat_template(policy):
    assert isinstance(policy, Policy)
    assert isinstance(policy.model, LlamaForCausalLM)
    assert policy.device == torch.device("cpu")
    ids = policy.encode_chat([{"role": "user", "content": "hi √"}])
    text = policy.decode(ids, skip_special_tokens=False)
    assert text == "<|im_start|>user\nhi √<|im_end|>\n<|im_start|>assistant\n"
    no_prompt = policy.encode_chat([{"role": "user", "content": "hi √"}], add_generation_prompt=False)
    assert ids[: len(no_prompt)] == no_prompt and len(ids) > len(no_prompt)
    assert policy.tokenizer.convert_tokens_to_ids("<|im_end|>") in policy.eos_token_ids


def test_fallback_layout_without_chat_template(tmp_path):
    pol = HFPolicy.from_pretrained(_save_llama(tmp_path, chat_template=False))
    ids = pol.encode_chat([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert pol.decode(ids, skip_special_tokens=False) == "system: S\n\nuser: U\n\nassistant: "


def test_bad_arguments_raise_value_error(policy, tmp_path):
    p = _prompts(policy)[:1]
    for kwargs in ({"max_new_tokens": 0}, {"top_p": 0.0}, {"top_p": 1.5}, {"temperature": -1.0}):
        with pytest.raises(ValueError):
            policy.generate(p, **kwargs)
    with pytest.raises(ValueError, match="empty"):
        policy.generate([[]])
    with pytest.raises(ValueError, match="text-only"):
        policy.generate(p, images=[[torch.zeros(16, 16, 3, dtype=torch.uint8).numpy()]])
    with pytest.raises(ValueError, match="one list per sequence"):
        policy.generate(p, images=[[], []])
    with pytest.raises(ValueError, match="directory"):
        HFPolicy.from_pretrained(tmp_path / "missing")
    with pytest.raises(ValueError, match="dtype"):
        HFPolicy.from_pretrained(tmp_path, dtype="int7")
    with pytest.raises(ValueError, match="role"):
        policy.encode_chat([{"content": "x"}])
    assert policy.generate([]) == []


# ------------------------------------------------------------------------------------- generation
def test_seeded_generation_is_reproducible(policy):
    prompts = _prompts(policy)
    kw = dict(max_new_tokens=12, temperature=1.0, top_p=0.9, stop=())
    a = policy.generate(prompts, generator=torch.Generator().manual_seed(7), **kw)
    b = policy.generate(prompts, generator=torch.Generator().manual_seed(7), **kw)
    c = policy.generate(prompts, generator=torch.Generator().manual_seed(8), **kw)
    assert all(isinstance(g, Generation) for g in a)
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert [g.response_logprobs for g in a] == [g.response_logprobs for g in b]
    assert [g.response_ids for g in a] != [g.response_ids for g in c]
    for g, p in zip(a, prompts):
        assert g.prompt_ids == p
        assert len(g.response_ids) == len(g.response_logprobs) <= 12
        assert g.finish_reason in ("stop", "length")


def test_sampled_logprobs_equal_teacher_forced_at_temperature_one(policy):
    """Sampled-token log-probs == an unpadded, uncached per-sequence forward; and == forward_logprobs."""
    prompts = _prompts(policy)
    gens = policy.generate(
        prompts,
        max_new_tokens=16,
        temperature=1.0,
        top_p=1.0,
        stop=(),
        generator=torch.Generator().manual_seed(0),
    )
    seqs = [g.prompt_ids + g.response_ids for g in gens]
    ids, mask = policy.pad(seqs)
    out = policy.forward_logprobs(ids, mask)
    assert out.logprobs.shape == ids.shape and out.logprobs.dtype == torch.float32 and out.entropy is None
    for b, g in enumerate(gens):
        n, L = len(g.response_ids), len(g.prompt_ids)
        assert n > 0
        ref = _ref_logprobs(policy.model, seqs[b])[L - 1 :]  # log-probs of the response tokens
        assert torch.allclose(torch.tensor(g.response_logprobs, dtype=torch.float64), ref, atol=1e-4)
        assert torch.allclose(out.logprobs[b, L : L + n].double(), ref, atol=1e-4)
        assert torch.all(out.logprobs[b, len(seqs[b]) :] == 0) and out.logprobs[b, 0] == 0


def test_temperature_scoring_matches_sampling_at_that_temperature(policy):
    prompts = _prompts(policy)
    gens = policy.generate(
        prompts, max_new_tokens=8, temperature=0.6, stop=(), generator=torch.Generator().manual_seed(1)
    )
    for g in gens:
        L = len(g.prompt_ids)
        ref = _ref_logprobs(policy.model, g.prompt_ids + g.response_ids, temperature=0.6)[L - 1 :]
        assert torch.allclose(torch.tensor(g.response_logprobs, dtype=torch.float64), ref, atol=1e-4)
        ids, mask = policy.pad([g.prompt_ids + g.response_ids])
        scored = policy.forward_logprobs(ids, mask, temperature=0.6).logprobs[0, L:]
        assert torch.allclose(scored.double(), ref, atol=1e-4)


def test_top_p_logprobs_are_those_of_the_renormalised_nucleus(policy):
    prompts = _prompts(policy)
    T, top_p = 0.8, 0.7
    gens = policy.generate(
        prompts,
        max_new_tokens=8,
        temperature=T,
        top_p=top_p,
        stop=(),
        generator=torch.Generator().manual_seed(3),
    )
    for g in gens:
        seq = g.prompt_ids + g.response_ids
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([seq])).logits[0].double()
        for k, (tok, lp) in enumerate(zip(g.response_ids, g.response_logprobs)):
            p = torch.softmax(logits[len(g.prompt_ids) - 1 + k] / T, -1).tolist()
            # brute-force nucleus: add tokens by decreasing probability until the mass reaches top_p
            order = sorted(range(len(p)), key=lambda i: -p[i])
            nucleus, mass = [], 0.0
            for i in order:
                nucleus.append(i)
                mass += p[i]
                if mass >= top_p:
                    break
            assert tok in nucleus
            assert lp == pytest.approx(math.log(p[tok] / mass), abs=1e-4)


def test_greedy_equals_plain_argmax_loop(policy):
    prompts = _prompts(policy)
    gens = policy.generate(prompts, max_new_tokens=10, greedy=True, stop=())
    for g in gens:
        seq, ref = list(g.prompt_ids), []
        for _ in range(10):
            with torch.no_grad():
                nxt = int(policy.model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
            if nxt in policy.eos_token_ids:
                break
            ref.append(nxt)
            seq.append(nxt)
        assert g.response_ids == ref
        assert g.finish_reason == ("length" if len(ref) == 10 else "stop")
        full = _ref_logprobs(policy.model, g.prompt_ids + g.response_ids)[len(g.prompt_ids) - 1 :]
        assert torch.allclose(torch.tensor(g.response_logprobs, dtype=torch.float64), full, atol=1e-4)
    # temperature 0 means greedy
    assert [
        g.response_ids for g in policy.generate(prompts, max_new_tokens=10, temperature=0.0, stop=())
    ] == [g.response_ids for g in gens]


def test_generation_does_not_depend_on_batch_padding(policy):
    prompts = _prompts(policy)
    batched = policy.generate(prompts, max_new_tokens=10, greedy=True, stop=())
    for p, g in zip(prompts, batched):
        alone = policy.generate([p], max_new_tokens=10, greedy=True, stop=())[0]
        assert alone.response_ids == g.response_ids
        assert alone.response_logprobs == pytest.approx(g.response_logprobs, abs=1e-5)


def test_forward_logprobs_left_right_padding_invariance(policy):
    seqs = [p + [5, 6, 7] for p in _prompts(policy)]
    right = policy.forward_logprobs(*policy.pad(seqs, side="right"), with_entropy=True)
    left = policy.forward_logprobs(*policy.pad(seqs, side="left"), with_entropy=True)
    T = right.logprobs.shape[1]
    for b, s in enumerate(seqs):
        ref = torch.cat([torch.zeros(1, dtype=torch.float64), _ref_logprobs(policy.model, s)])
        assert torch.allclose(right.logprobs[b, : len(s)].double(), ref, atol=1e-4)
        assert torch.allclose(left.logprobs[b, T - len(s) :].double(), ref, atol=1e-4)
        assert torch.allclose(left.entropy[b, T - len(s) :], right.entropy[b, : len(s)], atol=1e-4)
        assert torch.all(left.logprobs[b, : T - len(s) + 1] == 0) and torch.all(
            left.entropy[b, : T - len(s) + 1] == 0
        )


def test_absolute_position_model_is_padding_invariant(tmp_path):
    """GPT-2 (learned absolute positions): positions must come from the attention mask, not the slot."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = build_tokenizer(CORPUS, vocab_size=400)
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=256, **_token_config(tok))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        GPT2LMHeadModel(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    pol = HFPolicy.from_pretrained(tmp_path)
    prompts = _prompts(pol)
    batched = pol.generate(prompts, max_new_tokens=6, greedy=True, stop=())
    for p, g in zip(prompts, batched):
        alone = pol.generate([p], max_new_tokens=6, greedy=True, stop=())[0]
        assert alone.response_ids == g.response_ids
        ref = _ref_logprobs(pol.model, g.prompt_ids + g.response_ids)[len(p) - 1 :]
        assert torch.allclose(torch.tensor(g.response_logprobs, dtype=torch.float64), ref, atol=1e-4)
    seqs = [g.prompt_ids + g.response_ids for g in batched]
    left = pol.forward_logprobs(*pol.pad(seqs, side="left")).logprobs
    for b, s in enumerate(seqs):
        ref = _ref_logprobs(pol.model, s)
        assert torch.allclose(left[b, left.shape[1] - len(s) + 1 :].double(), ref, atol=1e-4)


def test_entropy_matches_direct_computation_and_has_grad(policy):
    seqs = [p + [9, 10] for p in _prompts(policy)]
    ids, mask = policy.pad(seqs)
    out = policy.forward_logprobs(ids, mask, with_entropy=True, with_hidden=True)
    assert out.entropy.shape == ids.shape
    assert out.extras["hidden"].shape == (*ids.shape, policy.model.config.hidden_size)
    for b, s in enumerate(seqs):
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([s])).logits[0].double()
        p = torch.softmax(logits, -1)
        h = -(p * torch.log(p)).sum(-1)  # direct -sum p log p of the distribution at t-1
        assert torch.allclose(out.entropy[b, 1 : len(s)].double(), h[:-1], atol=1e-4)
        assert out.entropy[b, 0] == 0 and torch.all(out.entropy[b, len(s) :] == 0)
    loss = -(out.logprobs.sum() + out.entropy.sum())
    loss.backward()
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    policy.model.zero_grad(set_to_none=True)


# --------------------------------------------------------------------------------- stop strings / EOS
class _Scripted(torch.nn.Module):
    """Wraps a causal LM and forces, at decode step k, the token script[k] (for every row)."""

    def __init__(self, inner, script):
        super().__init__()
        self.inner, self.script, self.calls = inner, list(script), 0
        self.config, self.generation_config = inner.config, inner.generation_config

    def forward(self, input_ids=None, cache=None, past_key_values=None, logits_to_keep=0, **kw):
        out = self.inner(input_ids=input_ids, cache=cache, logits_to_keep=logits_to_keep, **kw)
        if kw.get("use_cache") and self.calls < len(self.script):
            out.logits[:, -1, self.script[self.calls]] += 1e4
            self.calls += 1
        return out


def _scripted_policy(policy, text: str, extra_ids=()):
    script = policy.tokenizer(text, add_special_tokens=False)["input_ids"] + list(extra_ids)
    return HFPolicy(_Scripted(policy.model, script), policy.tokenizer), script


def test_stops_right_after_answer_tag(policy):
    pol, script = _scripted_policy(policy, "<think> go </think> <answer> Up </answer> and more text")
    n_stop = len(
        policy.tokenizer("<think> go </think> <answer> Up </answer>", add_special_tokens=False)["input_ids"]
    )
    g = pol.generate(_prompts(policy)[:1], max_new_tokens=40, generator=torch.Generator().manual_seed(0))[0]
    assert g.text == "<think> go </think> <answer> Up </answer>"
    assert g.response_ids == script[:n_stop]
    assert g.finish_reason == "stop"
    assert len(g.response_logprobs) == n_stop


def test_stop_string_inside_a_token_cuts_text_keeps_token(policy):
    pol, script = _scripted_policy(policy, "<answer> Up </answer> more")
    g = pol.generate(_prompts(policy)[:1], max_new_tokens=40, stop=("</ans",), greedy=True)[0]
    assert g.text == "<answer> Up </ans"
    assert policy.decode(g.response_ids) == "<answer> Up </answer>"
    assert g.finish_reason == "stop"


def test_eos_ends_response_and_is_excluded(policy):
    eos = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    pol, script = _scripted_policy(policy, " Up Up", extra_ids=[eos])
    g = pol.generate(_prompts(policy)[:1], max_new_tokens=40, greedy=True)[0]
    assert g.response_ids == script[:-1] and g.finish_reason == "stop" and g.text == " Up Up"


def test_length_finish_reason(policy):
    pol, _ = _scripted_policy(policy, " Up Up Up Up Up Up Up Up")
    g = pol.generate(_prompts(policy)[:1], max_new_tokens=3, greedy=True)[0]
    assert len(g.response_ids) == 3 and g.finish_reason == "length"


# ------------------------------------------------------------------------------------ sampling unit
def test_sample_from_logits_frequencies_follow_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    n = 4000
    toks, lps = sample_from_logits(logits.expand(n, 4), top_p=0.75, generator=g)
    counts += torch.bincount(toks, minlength=4)
    # nucleus {0, 1} (0.5 + 0.3 >= 0.75); renormalised 0.625 / 0.375; 4 sigma ~ 0.03
    assert counts[2] == counts[3] == 0
    assert abs(counts[0] / n - 0.625) < 0.035
    assert torch.allclose(lps[toks == 0], torch.tensor(math.log(0.625)), atol=1e-6)
    greedy, glp = sample_from_logits(logits, greedy=True)
    assert greedy.item() == 0 and glp.item() == pytest.approx(math.log(0.5), abs=1e-6)


def test_sample_from_logits_frequencies_and_zero_probability_tokens():
    # Zero-probability tokens at the start, middle and end are never drawn; the others follow p (4 sigma).
    p = torch.tensor([[0.0, 0.2, 0.0, 0.5, 0.3, 0.0]])
    n = 20000
    toks, lps = sample_from_logits(torch.log(p).expand(n, 6), generator=torch.Generator().manual_seed(1))
    freq = torch.bincount(toks, minlength=6).double() / n
    assert freq[0] == freq[2] == freq[5] == 0
    sigma = (p[0] * (1 - p[0]) / n).sqrt()
    assert ((freq - p[0]).abs() <= 4 * sigma + 1e-12).all(), freq
    assert torch.allclose(lps, torch.log(p[0, toks]).float())
    # Temperature: T = 2 flattens [0.8, 0.2] to [2/3, 1/3] (sqrt weights).
    toks, _ = sample_from_logits(torch.log(torch.tensor([[0.8, 0.2]])).expand(n, 2), temperature=2.0,
                                 generator=torch.Generator().manual_seed(2))
    assert abs(float((toks == 0).double().mean()) - 2 / 3) < 4 * (2 / 9 / n) ** 0.5


def test_pad_batch_layouts():
    ids, mask = pad_batch([[1, 2, 3], [4]], pad_id=0, side="left")
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = pad_batch([[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [4, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    with pytest.raises(ValueError):
        pad_batch([[1]], 0, side="middle")


def test_bfloat16_loads_and_scores(tmp_path):
    pol = HFPolicy.from_pretrained(_save_llama(tmp_path), dtype="bfloat16")
    assert pol.model.dtype == torch.bfloat16
    prompts = _prompts(pol)
    gens = pol.generate(prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(0), stop=())
    out = pol.forward_logprobs(*pol.pad([g.prompt_ids + g.response_ids for g in gens]), with_entropy=True)
    assert out.logprobs.dtype == torch.float32 and torch.isfinite(out.logprobs).all()
    assert torch.isfinite(out.entropy).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generation_matches_teacher_forcing(tmp_path):
    pol = HFPolicy.from_pretrained(_save_llama(tmp_path), device="cuda")
    gens = pol.generate(
        _prompts(pol), max_new_tokens=8, stop=(), generator=torch.Generator(device="cuda").manual_seed(0)
    )
    seqs = [g.prompt_ids + g.response_ids for g in gens]
    out = pol.forward_logprobs(*pol.pad(seqs))
    for b, g in enumerate(gens):
        L, n = len(g.prompt_ids), len(g.response_ids)
        assert torch.allclose(out.logprobs[b, L : L + n].cpu(), torch.tensor(g.response_logprobs), atol=1e-3)
