"""The tiny offline model: build, size, tokenizer round trips, reload, determinism, vision prefix."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import Qwen2ForCausalLM

from ragen_core.policy import HFPolicy, build_tiny_model, default_tiny_model_dir, load_policy
from ragen_core.policy.tiny import (
    FORMAT_TOKENS,
    IMAGE_TOKEN,
    TinyVisionForCausalLM,
    count_parameters,
    generate_corpus,
)

SMALL = dict(hidden=32, layers=2, heads=4, kv_heads=2)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), **SMALL)


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return HFPolicy.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    return HFPolicy.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tinyv"), vision=True, **SMALL))


def test_default_size_is_in_documented_range(tmp_path):
    path = build_tiny_model(tmp_path)
    meta = json.loads((path / "ragen_tiny.json").read_text())
    model = Qwen2ForCausalLM.from_pretrained(path)
    n = count_parameters(model)
    assert n == meta["parameters"]
    # module docstring: "default ... 0.62 M"
    assert 500_000 <= n <= 750_000
    # tied embeddings counted once: exactly embed + layers + final norm
    cfg = model.config
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert n == sum(p.numel() for name, p in model.named_parameters())  # named_parameters dedups ties
    assert cfg.hidden_size == 128 and cfg.num_hidden_layers == 2


def test_small_model_reloads_through_hfpolicy(tiny, tiny_dir):
    assert isinstance(tiny.model, Qwen2ForCausalLM)
    assert count_parameters(tiny.model) < 200_000
    assert tiny.image_token is None and not tiny.supports_images
    tok = tiny.tokenizer
    assert tok.chat_template and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    ids = tiny.encode_chat([{"role": "user", "content": "Turn 1:\nState:\n#P√#"}])
    assert (
        tiny.decode(ids, skip_special_tokens=False)
        == "<|im_start|>user\nTurn 1:\nState:\n#P√#<|im_end|>\n<|im_start|>assistant\n"
    )
    gens = tiny.generate([ids, ids], max_new_tokens=5, generator=torch.Generator().manual_seed(0))
    assert all(0 < len(g.response_ids) <= 5 for g in gens)


def test_format_tags_are_single_kept_tokens(tiny):
    tok = tiny.tokenizer
    for tag in FORMAT_TOKENS:
        ids = tok(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, tag
        assert tok.decode(ids, skip_special_tokens=True) == tag
    text = "<think> push the box </think> <answer> Up || Left </answer>"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True) == text


def test_env_text_round_trips(tiny):
    """Today's env text (not the pinned corpus the tokenizer was trained on) round-trips and compresses."""
    texts, used = generate_corpus(seeds=(0, 1), steps=2)
    tok = tiny.tokenizer
    for t in texts:
        assert tok.decode(tok(t, add_special_tokens=False)["input_ids"], skip_special_tokens=True) == t
    # the tokenizer learned the env text: it compresses it well below one token per byte
    sample = "\n".join(texts[:20])
    assert len(tok(sample, add_special_tokens=False)["input_ids"]) < 0.6 * len(sample.encode())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_any_unicode_round_trips(tiny, text):
    """Lossless up to Unicode NFC: the model type is Qwen2, whose tokenizer class normalises to NFC
    (as real Qwen tokenizers do), so e.g. U+FB2A comes back as its canonical decomposition."""
    import unicodedata

    tok = tiny.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text)


def test_nfc_normalisation_is_the_only_change(tiny):
    text = "\ufb2a"  # a composition exclusion: NFC maps it to U+05E9 U+05C1
    tok = tiny.tokenizer
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == "\u05e9\u05c1"


@pytest.mark.parametrize(
    "text", ["√", "Box on target: √ ✓ 箱子 🎁", "tab\tnew\nline  double  space", "#__###\n#X_###"]
)
def test_specific_unicode_round_trips(tiny, text):
    tok = tiny.tokenizer
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_build_is_deterministic_and_seeded(tmp_path):
    a = build_tiny_model(tmp_path / "a", **SMALL)
    b = build_tiny_model(tmp_path / "b", **SMALL)
    c = build_tiny_model(tmp_path / "c", seed=1, **SMALL)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    ma, mb, mc = (Qwen2ForCausalLM.from_pretrained(p) for p in (a, b, c))
    sa, sb, sc = ma.state_dict(), mb.state_dict(), mc.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_build_leaves_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path, corpus=["hello world"] * 3, **SMALL)
    assert torch.equal(torch.rand(3), expected)


def test_custom_corpus_and_bad_sizes(tmp_path):
    path = build_tiny_model(tmp_path / "c", corpus=["Zebra quagga zebra quagga"] * 50, **SMALL)
    tok = HFPolicy.from_pretrained(path).tokenizer
    assert len(tok(" quagga", add_special_tokens=False)["input_ids"]) == 1
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_model(tmp_path / "x", hidden=30, heads=4)
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_model(tmp_path / "x", vocab_size=100, **SMALL)
    with pytest.raises(ValueError, match="patch_size"):
        build_tiny_model(tmp_path / "x", vision=True, image_size=100, **SMALL)


def test_default_dir_is_cached(tmp_path):
    p1 = default_tiny_model_dir(tmp_path, **SMALL)
    stamp = (p1 / "model.safetensors").stat().st_mtime_ns
    p2 = default_tiny_model_dir(tmp_path, **SMALL)
    assert p1 == p2 and (p2 / "model.safetensors").stat().st_mtime_ns == stamp
    assert p1.parent == tmp_path and [d.name for d in tmp_path.iterdir()] == [p1.name]
    assert default_tiny_model_dir(tmp_path, hidden=64, layers=2) != p1
    pol = load_policy(p1)
    assert isinstance(pol, HFPolicy)


# ------------------------------------------------------------------------------------------- vision
def _room(seed: int, tiles: int = 6) -> np.ndarray:
    """A random 16-px-per-tile RGB picture (tiles x tiles), uint8."""
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, size=(tiles, tiles, 3), dtype=np.uint8)
    return np.kron(colours, np.ones((16, 16, 1), dtype=np.uint8))


def test_vision_model_type_and_prompt_expansion(vision):
    assert isinstance(vision.model, TinyVisionForCausalLM)
    assert vision.supports_images and vision.image_token == IMAGE_TOKEN
    k = vision.model.config.image_seq_len
    assert k == 36  # 96 px / 16 px per patch = 6 x 6
    ids = vision.encode_chat([{"role": "user", "content": f"State:\n{IMAGE_TOKEN}\nTurn 1"}])
    assert ids.count(vision.model.config.image_token_id) == k
    assert vision.decode(ids) == "user\nState:\n\nTurn 1\nassistant\n"


def test_vision_forward_uses_the_image_only_after_it(vision):
    prefix = vision.encode_chat([{"role": "user", "content": f"Look: {IMAGE_TOKEN} where is the box?"}])
    seq = (
        prefix
        + vision.tokenizer("<think> left </think> <answer> Left </answer>", add_special_tokens=False)[
            "input_ids"
        ]
    )
    ids, mask = vision.pad([seq, seq])
    out = vision.forward_logprobs(ids, mask, images=[[_room(0)], [_room(1)]], with_entropy=True)
    first_img = seq.index(vision.model.config.image_token_id)
    # positions up to (and including) the first image token cannot see the image; later ones do
    assert torch.allclose(out.logprobs[0, : first_img + 1], out.logprobs[1, : first_img + 1], atol=1e-6)
    after = slice(first_img + 36, len(seq))
    assert (out.logprobs[0, after] - out.logprobs[1, after]).abs().max() > 1e-4
    assert torch.isfinite(out.entropy).all()
    # the same image gives the same scores; a 64 px (4x4 tiles) image is resized, not rejected
    again = vision.forward_logprobs(ids, mask, images=[[_room(0)], [_room(0)]])
    assert torch.allclose(again.logprobs[0], out.logprobs[0], atol=1e-6)
    vision.forward_logprobs(ids[:1], mask[:1], images=[[_room(2, tiles=4)]])
    out.logprobs.sum().backward()
    assert vision.model.vision_encoder.patch.weight.grad.abs().sum() > 0
    vision.model.zero_grad(set_to_none=True)


def test_vision_generation_logprobs_match_scoring_and_image_token_never_sampled(vision):
    prompt = vision.encode_chat([{"role": "user", "content": f"{IMAGE_TOKEN} move"}])
    imgs = [[_room(3)], [_room(4)]]
    gens = vision.generate(
        [prompt, prompt], images=imgs, max_new_tokens=12, stop=(), generator=torch.Generator().manual_seed(0)
    )
    ids, mask = vision.pad([g.prompt_ids + g.response_ids for g in gens])
    out = vision.forward_logprobs(ids, mask, images=imgs)
    for b, g in enumerate(gens):
        assert vision.model.config.image_token_id not in g.response_ids
        L, n = len(prompt), len(g.response_ids)
        assert torch.allclose(out.logprobs[b, L : L + n], torch.tensor(g.response_logprobs), atol=1e-4)


def test_vision_image_count_mismatch_raises(vision):
    prompt = vision.encode_chat([{"role": "user", "content": f"{IMAGE_TOKEN} move"}])
    with pytest.raises(ValueError, match="image tokens"):
        vision.generate([prompt], images=[[_room(0), _room(1)]], max_new_tokens=2)
    with pytest.raises(ValueError, match="image tokens"):
        vision.generate([prompt], max_new_tokens=2)  # placeholder in the prompt but no image given
    text_only = vision.encode_chat([{"role": "user", "content": "move"}])
    assert len(vision.generate([text_only], max_new_tokens=2)[0].response_ids) <= 2
    with pytest.raises(ValueError, match="HxWx3"):
        vision.generate([prompt], images=[[np.zeros((96, 96), dtype=np.uint8)]], max_new_tokens=2)


def test_sokoban_vision_observation_feeds_the_tiny_model(vision):
    gym = pytest.importorskip("gymnasium")
    import ragen_envs  # noqa: F401

    try:
        env = gym.make("ragen/Sokoban-Vision-v0", disable_env_checker=True)
    except Exception as exc:  # the env is being written in parallel; skip until it exists
        pytest.skip(f"ragen/Sokoban-Vision-v0 not available yet: {exc}")
    obs, info = env.reset(seed=0)
    image = obs["image"]
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    prompt = vision.encode_chat(
        [
            {"role": "system", "content": info["instructions"]},
            {"role": "user", "content": f"Turn 1:\nState:\n{obs['text']}\n{IMAGE_TOKEN}"},
        ]
    )
    gens = vision.generate(
        [prompt], images=[[image]], max_new_tokens=8, generator=torch.Generator().manual_seed(0)
    )
    assert len(gens[0].response_ids) > 0
