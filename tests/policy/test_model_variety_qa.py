"""Users' own small models through `HFPolicy`, against plain per-sequence transformers forwards.

Every model here is built from a transformers config with random weights, saved with a tokenizer and reloaded through
`HFPolicy.from_pretrained` (or wrapped by `HFPolicy(...)` after a change a user makes in memory). The reference is
always a plain computation that shares no code with the policy: ``model(input_ids).logits`` of one unpadded sequence,
log-softmax, read at the next token; a greedy loop that re-encodes the whole sequence every step.

Defects these tests pin (before -> now):
- the lean forward (`fast_qwen2`) read the parameters of a Qwen2 whose modules a user changed, skipping the change:
  a forward hook, a LoRA-like subclass of a projection, a forward set on an instance, ``config.num_hidden_layers``
  below the layers held, a RoPE type changed on the rotary module -> silently wrong log-probs; now such a model goes
  through transformers' forward (`unsupported_reason` says why);
- GPT-2 (a learned position table) given more tokens than its positions -> IndexError inside torch's embedding (a
  device-side assert on CUDA); now a ValueError naming max_position_embeddings before the model runs;
- `cross_score` on a Qwen2 (the lean forward) with traces that are not one group per prompt of equal size -> a
  RuntimeError in a reshape; now the ValueError the transformers path gives.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from ragen_core.math import mi
from ragen_core.policy import HFPolicy
from ragen_core.policy.fast_qwen2 import unsupported_reason
from ragen_core.policy.tiny import build_tokenizer

CORPUS = ["<think> the box is left of the target </think> <answer> Up || Left </answer>",
          "Reward: -0.1 Right Down"] * 20
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=128)
TOL = 2e-5


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=300)


def _ids(tok) -> dict:
    return dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)


def _model(cls, cfg):
    """A model of `cls` with weights large enough for peaked, tie-free distributions."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.3)
    return model.eval()


def _load(tmp_path, tok, cls, cfg, **kwargs) -> HFPolicy:
    """Save the model and tokenizer, load them back as a user would."""
    _model(cls, cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return HFPolicy.from_pretrained(tmp_path, **kwargs)


def _plain(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[t] | ids[:t]) for t >= 1 of one unpadded sequence, float64."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)


def _seqs(n=(20, 13, 7)) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(5, 250, (k,), generator=g).tolist() for k in n]


def _assert_scores_plain(policy: HFPolicy, side: str = "right") -> None:
    """forward_logprobs, all positions and a score_mask, equal the plain forward of each sequence."""
    seqs = _seqs()
    ids, mask = policy.pad(seqs, side=side)
    keep = mask.clone()
    keep[:, :6] = 0  # score only from position 6 on
    for score_mask in (None, keep):
        out = policy.forward_logprobs(ids, mask, with_entropy=True, score_mask=score_mask)
        for b, s in enumerate(seqs):
            got = out.logprobs[b][mask[b].bool()].detach().double()
            want = torch.cat([torch.zeros(1, dtype=torch.float64), _plain(policy.model, s)])
            if score_mask is not None:
                want = want * keep[b][mask[b].bool()]
            torch.testing.assert_close(got, want, rtol=0, atol=TOL)
            assert torch.isfinite(out.entropy).all()


def _assert_cross_score_plain(policy: HFPolicy) -> None:
    s = _seqs()
    prompts, traces = [s[0][:8], s[1][:5]], [[s[2][:4], s[1][:3]], [s[0][:2], s[2][:5]]]
    L, lengths = policy.cross_score(prompts, traces)
    for i, group in enumerate(traces):
        for k, z in enumerate(group):
            assert int(lengths[i, k]) == len(z)
            for j, x in enumerate(prompts):
                want = _plain(policy.model, x + z)[-len(z):].sum().item()
                assert abs(L[i, k, j].item() - want) < 1e-4, (i, k, j)


def _assert_greedy_plain(policy: HFPolicy, n: int = 6) -> None:
    prompts = [s[:k] for s, k in zip(_seqs(), (9, 3, 6))]
    for gen, prompt in zip(policy.generate(prompts, max_new_tokens=n, greedy=True, stop=()), prompts):
        seq, want = list(prompt), []
        for _ in range(n):
            with torch.no_grad():
                t = int(policy.model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
            if t in policy.eos_token_ids:
                break
            want.append(t)
            seq.append(t)
        assert gen.response_ids == want


# ------------------------------------------------------------------------------ Qwen2 variants: exact or fall back
QWEN2_VARIANTS = {
    "untied output layer": (dict(tie_word_embeddings=False), True),
    "head_dim != hidden / heads": (dict(head_dim=16), True),
    "GQA 1:1": (dict(num_key_value_heads=4), True),
    "GQA 4:1": (dict(num_key_value_heads=1), True),
    "GQA 8:1": (dict(num_attention_heads=8, num_key_value_heads=1), True),
    "rms_norm_eps and rope_theta": (dict(rms_norm_eps=1e-2, rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 50.0}), True),
    "linear RoPE scaling": (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}), False),
    "yarn RoPE": (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0,
                                        "original_max_position_embeddings": 8}), False),
    "sliding layers": (dict(use_sliding_window=True, sliding_window=4, max_window_layers=1), False),
    "window past every layer": (dict(use_sliding_window=True, sliding_window=4, max_window_layers=2), True),
}


@pytest.mark.parametrize("name", list(QWEN2_VARIANTS))
def test_qwen2_variants_score_like_the_plain_forward(tok, tmp_path, name):
    extra, fast = QWEN2_VARIANTS[name]
    policy = _load(tmp_path, tok, Qwen2ForCausalLM, Qwen2Config(**{**SIZES, **_ids(tok), **extra}))
    assert (unsupported_reason(policy.model) is None) == fast
    _assert_scores_plain(policy)
    _assert_cross_score_plain(policy)


def _hooked(model):
    model.model.layers[0].mlp.register_forward_hook(lambda mod, args, out: out * 0.5)
    return model


class _LoraLike(torch.nn.Linear):
    """A projection plus a low-rank-like update, as LoRA's layers are: its forward is not nn.Linear's."""

    def forward(self, x):
        return super().forward(x) + 0.3 * x[..., : self.out_features]


def _lora_like(model):
    old = model.model.layers[1].self_attn.q_proj
    new = _LoraLike(old.in_features, old.out_features, bias=True)
    new.load_state_dict(old.state_dict())
    model.model.layers[1].self_attn.q_proj = new
    return model


def _instance_forward(model):
    mlp = model.model.layers[1].mlp
    plain = mlp.forward
    mlp.forward = lambda x: plain(x) * 2.0  # as accelerate's offloading hooks wrap a module's forward
    return model


def _fewer_layers(model):
    model.config.num_hidden_layers = 1  # transformers runs layers[:1]
    return model


def _rope_changed(model):
    model.model.rotary_emb.rope_type = "dynamic"
    return model


ALTERED = {"forward hook": (_hooked, "has hooks"), "LoRA-like subclass": (_lora_like, "_LoraLike"),
           "forward on an instance": (_instance_forward, "forward of its own"),
           "config runs fewer layers": (_fewer_layers, "num_hidden_layers = 1 of 2"),
           "rotary type changed": (_rope_changed, "'dynamic'")}


@pytest.mark.parametrize("name", list(ALTERED))
def test_a_changed_qwen2_goes_through_transformers(tok, name):
    """Before: the lean forward read the parameters and skipped the change (log-probs off by up to 0.98 nats)."""
    change, why = ALTERED[name]
    model = change(_model(Qwen2ForCausalLM, Qwen2Config(**SIZES, **_ids(tok))))
    assert why in unsupported_reason(model)
    policy = HFPolicy(model, copy.deepcopy(tok))
    _assert_scores_plain(policy)
    _assert_greedy_plain(policy)
    _assert_cross_score_plain(policy)


def test_a_backward_hook_turns_the_lean_forward_off(tok):
    model = _model(Qwen2ForCausalLM, Qwen2Config(**SIZES, **_ids(tok)))
    assert unsupported_reason(model) is None
    model.lm_head.register_full_backward_hook(lambda mod, gin, gout: None)
    assert unsupported_reason(model) == "lm_head has hooks"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_qwen2_scores_like_transformers(tok, tmp_path, dtype):
    """The lean forward in half precision gives transformers' padded-batch numbers (the reference computes in the
    same dtype; half precision itself is far from float64)."""
    policy = _load(tmp_path, tok, Qwen2ForCausalLM, Qwen2Config(**SIZES, **_ids(tok)), dtype=dtype)
    assert unsupported_reason(policy.model) is None
    ids, mask = policy.pad(_seqs())
    fast = policy.forward_logprobs(ids, mask).logprobs.detach()
    policy.fast = False
    ref = policy.forward_logprobs(ids, mask).logprobs.detach()
    torch.testing.assert_close(fast, ref, rtol=0, atol=2e-2 if dtype == "bfloat16" else 2e-3)


def test_train_mode_with_attention_dropout_is_transformers_own(tok, tmp_path):
    policy = _load(tmp_path, tok, Qwen2ForCausalLM, Qwen2Config(**SIZES, **_ids(tok), attention_dropout=0.5))
    assert unsupported_reason(policy.model) == "attention dropout"
    _assert_scores_plain(policy)  # eval mode: no dropout
    policy.model.train()
    ids, mask = policy.pad(_seqs())
    torch.manual_seed(0)
    a = policy.forward_logprobs(ids, mask).logprobs
    torch.manual_seed(1)
    b = policy.forward_logprobs(ids, mask).logprobs
    assert not torch.equal(a, b)  # transformers' dropout ran: no lean forward stood in for it


# ------------------------------------------------------------------------------ other architectures
OTHERS = {
    "llama": (LlamaForCausalLM, lambda ids: LlamaConfig(**SIZES, **ids)),
    "mistral, window 4": (MistralForCausalLM, lambda ids: MistralConfig(**SIZES, sliding_window=4, **ids)),
    "qwen3": (Qwen3ForCausalLM, lambda ids: Qwen3Config(**SIZES, head_dim=8, **ids)),
    "gpt2": (GPT2LMHeadModel, lambda ids: GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128, **ids)),
}


@pytest.mark.parametrize("name", list(OTHERS))
def test_other_architectures_score_and_decode_like_the_plain_forward(tok, tmp_path, name):
    cls, config = OTHERS[name]
    policy = _load(tmp_path, tok, cls, config(_ids(tok)))
    assert "not a plain Qwen2ForCausalLM" in unsupported_reason(policy.model)
    for side in ("right", "left"):
        _assert_scores_plain(policy, side)
    _assert_greedy_plain(policy)
    _assert_cross_score_plain(policy)


# ------------------------------------------------------------------------------ positions, cross-score shapes
def test_gpt2_refuses_more_tokens_than_its_position_table_before_running(tok, tmp_path):
    """Before: IndexError inside torch's embedding (a device-side assert on CUDA)."""
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=16, **_ids(tok))
    policy = _load(tmp_path, tok, GPT2LMHeadModel, cfg)
    seq = list(range(10, 30))
    ids, mask = policy.pad([seq[:17], seq[:3]])
    with pytest.raises(ValueError, match="input_ids: the longest sequence .* needs 17 positions.*embeds only 16"):
        policy.forward_logprobs(ids, mask)
    with pytest.raises(ValueError, match="max_new_tokens=8 after a prompt of 10 tokens needs 17 positions"):
        policy.generate([seq[:10], seq[:2]], max_new_tokens=8)
    with pytest.raises(ValueError, match=r"longest prompt \(12 tokens\) with the longest trace \(5 tokens\)"):
        policy.cross_score([seq[:12]], [[seq[:5]]])
    # at the limit everything runs
    ids, mask = policy.pad([seq[:16]])
    assert policy.forward_logprobs(ids, mask).logprobs.shape == (1, 16)
    assert len(policy.generate([seq[:10]], max_new_tokens=7, greedy=True)[0].response_ids) <= 7
    assert policy.cross_score([seq[:12]], [[seq[:4]]])[0].shape == (1, 1, 1)


@pytest.mark.parametrize("score", [mi.cross_score, mi.cross_score_naive])
def test_mi_cross_scoring_called_directly_refuses_pairs_past_a_position_table(tok, tmp_path, score):
    """The MI layer's own entry points (what diagnose, the probe and the TRL/verl adapters call) check the learned
    position table too: before, an IndexError inside torch's embedding."""
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=16, **_ids(tok))
    model = _load(tmp_path, tok, GPT2LMHeadModel, cfg).model
    seq = list(range(10, 30))
    with pytest.raises(ValueError, match=r"prompts\[1\] \(12 tokens\) with the longest trace \(5 tokens\) needs 17"):
        score(model, [seq[:3], seq[:12]], [[seq[:5]], [seq[:2]]])
    assert score(model, [seq[:3], seq[:12]], [[seq[:4]], [seq[:2]]]).shape == (2, 1, 2)  # 16 positions: runs


def test_rope_models_still_take_prompts_past_max_position_embeddings(tok, tmp_path):
    """Computed positions have no table: long prompts run (what ragen_core.limits documents)."""
    policy = _load(tmp_path, tok, Qwen2ForCausalLM, Qwen2Config(**{**SIZES, "max_position_embeddings": 16},
                                                                  **_ids(tok)))
    seq = list(range(10, 30))
    assert len(policy.generate([seq], max_new_tokens=4, greedy=True)[0].response_ids) <= 4
    ids, mask = policy.pad([seq])
    got = policy.forward_logprobs(ids, mask).logprobs[0, 1:].detach().double()
    torch.testing.assert_close(got, _plain(policy.model, seq), rtol=0, atol=TOL)


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_cross_score_groups_that_do_not_fit_the_prompts_are_one_value_error(tok, name):
    """Before: on the lean forward (qwen2) a RuntimeError in a reshape; transformers' path said what was wrong."""
    cls, cfg = (Qwen2ForCausalLM, Qwen2Config) if name == "qwen2" else (LlamaForCausalLM, LlamaConfig)
    policy = HFPolicy(_model(cls, cfg(**SIZES, **_ids(tok))), copy.deepcopy(tok))
    with pytest.raises(ValueError, match=r"one group per prompt \(P=2 groups\); got 1"):
        policy.cross_score([[5], [6]], [[[5, 6]]])
    with pytest.raises(ValueError, match=r"same number G >= 1 .* sizes \[1, 2\]"):
        policy.cross_score([[5], [6]], [[[5, 6]], [[5], [7]]])


# ------------------------------------------------------------------------------ tokenizer situations
def test_eos_ids_from_a_list_in_the_generation_config_stop_decoding(tok):
    model = _model(Qwen2ForCausalLM, Qwen2Config(**SIZES, vocab_size=len(tok), eos_token_id=None))
    prompt = _seqs()[0][:6]
    free = HFPolicy(model, copy.deepcopy(tok)).generate([prompt], max_new_tokens=8, greedy=True)[0]
    stop_at = next(i for i, t in enumerate(free.response_ids) if t not in (0, 2))  # not the tokenizer's own EOS
    model.generation_config.eos_token_id = [299, free.response_ids[stop_at]]
    policy = HFPolicy(model, copy.deepcopy(tok))
    gen = policy.generate([prompt], max_new_tokens=8, greedy=True)[0]
    assert gen.response_ids == free.response_ids[:stop_at] and gen.finish_reason == "stop"


def test_a_tokenizer_without_pad_pads_with_eos_and_one_without_both_is_refused(tok):
    model = _model(LlamaForCausalLM, LlamaConfig(**SIZES, vocab_size=len(tok)))
    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    policy = HFPolicy(model, no_pad)
    assert policy.pad_token_id == tok.eos_token_id
    _assert_scores_plain(policy, "left")
    neither = copy.deepcopy(tok)
    neither.pad_token = None
    neither.eos_token = None
    with pytest.raises(ValueError, match="neither a pad nor an EOS token"):
        HFPolicy(model, neither)
