"""The tiny offline model: a causal LM of well under a million parameters that needs no download.

`build_tiny_model(out_dir)` writes a directory that loads through the same path as a real model
(`HFPolicy.from_pretrained(out_dir)`, i.e. `AutoModelForCausalLM` + `AutoTokenizer`):

- **Tokenizer**: byte-level BPE trained with the `tokenizers` library on the envs' text (see
  `default_corpus`), so every Unicode string round-trips (`√`, grids, newlines). Special tokens
  `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (EOS) and `<image>` (vision placeholder); the
  response-format tags `<think>`, `</think>`, `<answer>`, `</answer>` are added as ordinary
  (non-special) single tokens, so they survive decoding and `</answer>` is one token. A Qwen-style
  chat template (`<|im_start|>role\\ncontent<|im_end|>\\n`, generation prompt `<|im_start|>assistant\\n`)
  is saved with the tokenizer.
- **Model**: `Qwen2ForCausalLM` from a `Qwen2Config` (RoPE, RMSNorm, SwiGLU, grouped-query attention,
  tied input/output embeddings), weights initialised by transformers' own init under a forked,
  explicitly seeded torch RNG (the global RNG state is left untouched).

Sizes (parameters counted once for the tied embeddings; measured with the default corpus, whose
BPE vocabulary is ~950 tokens, below the `vocab_size=1024` bound):

    default  hidden=128, layers=2, heads=4 (kv 2), mlp=4*hidden   0.62 M (text)
             hidden=192, layers=4                                   2.4 M (text), 2.59 M (vision)
    tests    hidden=32, layers=2                                   0.06 M
             hidden=64, layers=2                                   0.18 M (text), 0.24 M (vision)
    vision   + patch encoder: Conv2d(3, hidden, 16, stride 16), position embedding, LayerNorm, Linear

A build (tokenizer training + init + save) takes 0.3-2 s on one CPU core.

- **Vision** (`vision=True`): `TinyVisionForCausalLM` (model type `ragen_tiny_vision`, registered with
  `AutoConfig` / `AutoModelForCausalLM` when this module is imported). An image (uint8 HxWx3, e.g. a
  `ragen/Sokoban-Vision-v0` frame, 16 px per tile) is resized to `image_size` (96 px: a 6x6 room is
  not resized at all), cut into 16x16 patches (one patch per tile) and mapped to
  `image_seq_len = (image_size / 16)^2` prefix embeddings. In the prompt, each `<image>` placeholder
  is expanded to `image_seq_len` copies of the `<image>` token (`HFPolicy.encode_chat` does this) and
  the model replaces those embeddings by the patch embeddings (`pixel_values` argument). The
  `<image>` token can never be sampled: its logit is set to -1e9 inside the model, so generation
  and teacher-forced scoring see the same distribution.

- **Transformers VLMs** (Qwen2-VL, Idefics3/SmolVLM, ...): not supported by `HFPolicy` yet. Checked
  with transformers 5.24: a tiny `Qwen2VLForConditionalGeneration` builds from a `Qwen2VLConfig`
  offline and `Qwen2VLImageProcessor` runs offline, so building one is possible; what is missing is
  the driving code. Its forward needs the processor's outputs (`image_grid_thw`, `mm_token_type_ids`,
  a tokenizer with its vision tokens expanded to the image's patch count) and computes 3-D M-RoPE
  positions itself, keeping `rope_deltas` between the prefill and the decode steps. That does not
  fit the explicit left-padded, KV-cached loop with explicit 1-D `position_ids` that `HFPolicy` uses
  to get exact log-probs, and it would need its own tests against `model.generate`. So `HFPolicy`
  feeds images only to models that follow the tiny model's image-prefix convention (see `HFPolicy`
  docs). A backend for real VLMs (through their processor, or vLLM's multi-modal inputs) is future work.

Everything is seeded and deterministic: the same arguments give byte-identical tokenizer files and
identical weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

#: Bump when the build recipe changes: it is part of the cache key of `default_tiny_model_dir`.
TINY_FORMAT_VERSION = 2

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END, IMAGE_TOKEN)
#: The response-format tags, one ordinary token each (kept by `decode(skip_special_tokens=True)`).
FORMAT_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

#: Qwen-style chat template without a default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

VISION_MODEL_TYPE = "ragen_tiny_vision"


# --------------------------------------------------------------------------------------------- corpus
_ACTION_NAMES = ("Up", "Down", "Left", "Right")

_BUILTIN_TEXT = """\
You are a helpful assistant. You are solving a puzzle step by step.
You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.
When you are right next to a box, you can push it by moving in the same direction.
You cannot push a box through a wall, and you cannot pull a box.
The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>
Symbols: # Wall | _ Floor | O Target | X Box | P You | √ Box on Target | S You on Target
You are walking on a frozen lake. Reach the goal without falling into a hole.
The ice is slippery: you may move in a direction other than the one you chose.
Symbols: _ Frozen | O Hole | G Goal | P Player | X Player fell into hole | √ Player on goal
You are choosing between two slot machines. One arm is low-risk and one arm is high-risk.
Valid actions: Up, Down, Left, Right (case-insensitive).
Answer in the format: <think> [your thoughts] </think> <answer> [your answer] </answer>
You can give up to 2 actions per turn, separated by "||", e.g. <answer> Up || Left </answer>.
You can make up to 10 actions in total.
A missing or malformed answer, or an invalid action, costs -0.1; \
if no action is valid the state does not change.
Your answer had no valid action; the state is unchanged.
Turn 1:
State:
Board size: 6 rows x 6 cols (zero-indexed).
Targets: (1, 1)
Boxes: (3, 1)
Player: (4, 2)
Grid Map:
######
#O####
#__###
#X_###
#_P_##
######
You have 10 actions left. Always output: <think> [your thoughts] </think> <answer> [your answer] </answer> \
with no extra text. Strictly follow this format. Max response length: 100 words (tokens).
Reward: -0.1
Turn 2:
State:
P_O_
_O__
____
___G
You have 8 actions left.
Reward: 0.0
<think> The box is left of the target, so I push it right. </think> <answer> Right || Up </answer>
<think> The goal is down and to the right; I avoid the hole. </think> <answer> Down || Right </answer>
Target: 24, nums: [2, 3, 4, 6]. Use each number once with + - * / and parentheses.
<answer> (6 - 2) * (3 + 3) </answer> The answer is: 42
"""


def _synthetic_text(rng: np.random.Generator, n: int = 64) -> list[str]:
    """Random grids in the envs' symbols and well-formed responses (used with or without the envs)."""
    out = []
    for _ in range(n):
        h, w = (int(x) for x in rng.integers(4, 9, size=2))
        grid = rng.choice(list("#_OXP√SG"), size=(h, w), p=[0.3, 0.4, 0.06, 0.06, 0.06, 0.04, 0.04, 0.04])
        out.append("\n".join("".join(row) for row in grid))
        acts = " || ".join(str(a) for a in rng.choice(_ACTION_NAMES, size=int(rng.integers(1, 3))))
        out.append(
            f"<think> I move {acts.split(' || ')[0].lower()} towards the target. </think> "
            f"<answer> {acts} </answer>"
        )
        out.append(
            f"Turn {int(rng.integers(1, 6))}:\nYou have {int(rng.integers(0, 11))} actions left.\n"
            f"Reward: {float(rng.choice([-0.1, 0.0, 0.9, 1.0, 10.9])):g}"
        )
    return out


def _env_text(env_id: str, seeds: Sequence[int], steps: int, rng: np.random.Generator) -> list[str]:
    import gymnasium as gym

    env = gym.make(env_id, disable_env_checker=True)
    try:
        actions = tuple(getattr(env.unwrapped, "ACTIONS", ())) or _ACTION_NAMES
        texts: list[str] = []
        for seed in seeds:
            obs, info = env.reset(seed=int(seed))
            texts.append(str(info.get("instructions", "")))
            texts.append(obs["text"] if isinstance(obs, dict) else str(obs))
            for _ in range(steps):
                picked = [str(a) for a in rng.choice(actions, size=int(rng.integers(1, 3)))]
                response = (
                    f"<think> Let me try {picked[0]}. </think> <answer> {' || '.join(picked)} </answer>"
                )
                texts.append(response)
                obs, reward, terminated, truncated, info = env.step(response)
                texts.append(obs["text"] if isinstance(obs, dict) else str(obs))
                texts.append(f"Reward: {float(reward):g}")
                if terminated or truncated:
                    break
        return texts
    finally:
        env.close()


def default_corpus(
    seeds: Sequence[int] = (0, 1, 2, 3, 4, 5), steps: int = 4, seed: int = 0
) -> tuple[list[str], list[str]]:
    """The text the tiny tokenizer is trained on.

    A built-in sample (instructions, grids, the RAGEN turn layout, responses in the
    `<think> ... </think> <answer> ... </answer>` format, action names) plus, for every id in
    `ragen_envs.registration.ENV_SPECS` that can be made, the instructions and observations of
    `len(seeds)` seeded episodes stepped `steps` times with random well-formed responses.
    Envs that fail to import or run are skipped (they may not exist yet), never fatal.

    Returns:
        (texts, env_ids_used): the corpus and the env ids that contributed to it.
    """
    rng = np.random.default_rng(seed)
    texts = [_BUILTIN_TEXT, *_synthetic_text(rng)]
    used: list[str] = []
    try:
        import ragen_envs  # noqa: F401  (registers the ids)
        from ragen_envs.registration import ENV_SPECS
    except Exception:  # the env package is optional for building a tokenizer
        return texts, used
    for spec in ENV_SPECS:
        try:
            env_texts = _env_text(spec.id, seeds, steps, rng)
        except Exception:
            continue  # an env that does not build yet; the built-in sample covers its symbols
        texts.extend(env_texts)
        used.append(spec.id)
    return texts, used


# ------------------------------------------------------------------------------------------ tokenizer
def build_tokenizer(corpus: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `corpus` and wrap it as a transformers fast tokenizer.

    Ids 0..3 are the special tokens of `SPECIAL_TOKENS`; the format tags are appended as ordinary
    added tokens; the Qwen-style `CHAT_TEMPLATE` is attached. `vocab_size` is an upper bound (BPE
    stops earlier when the corpus has no more pairs seen at least twice).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    min_vocab = 256 + len(SPECIAL_TOKENS)
    if vocab_size < min_vocab:
        raise ValueError(
            f"vocab_size must be >= {min_vocab} (256 byte symbols + special tokens), got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in FORMAT_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        extra_special_tokens={"image_token": IMAGE_TOKEN},
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )


# --------------------------------------------------------------------------------------- vision model
class TinyVisionConfig(Qwen2Config):
    """`Qwen2Config` plus the image-prefix fields: `image_token_id`, `patch_size`, `image_size`."""

    model_type = VISION_MODEL_TYPE

    def __init__(self, image_token_id: int = 3, patch_size: int = 16, image_size: int = 96, **kwargs: Any):
        self.image_token_id = image_token_id
        self.patch_size = patch_size
        self.image_size = image_size
        super().__init__(**kwargs)

    @property
    def image_seq_len(self) -> int:
        """Number of prefix embeddings (and `<image>` tokens) per image: (image_size / patch_size)^2."""
        return (self.image_size // self.patch_size) ** 2


class PatchImageEncoder(nn.Module):
    """uint8-derived pixels `[N, 3, S, S]` (float in [-0.5, 0.5]) -> embeddings `[N, (S/p)^2, hidden]`.

    Conv2d with kernel = stride = patch size (one linear map per patch), plus a learned position
    embedding per patch, LayerNorm and a linear projection into the LM's embedding space.
    """

    def __init__(self, config: TinyVisionConfig):
        super().__init__()
        hidden = config.hidden_size
        self.patch = nn.Conv2d(3, hidden, kernel_size=config.patch_size, stride=config.patch_size)
        self.pos = nn.Parameter(torch.zeros(config.image_seq_len, hidden))
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch(pixel_values)  # [N, H, S/p, S/p]
        x = x.flatten(2).transpose(1, 2) + self.pos  # [N, K, H], patches in row-major order
        return self.proj(self.norm(x))


class TinyVisionForCausalLM(Qwen2ForCausalLM):
    """The tiny LM with a patch-embedding image encoder (see the module docstring).

    `forward(input_ids, ..., pixel_values=None)`: when `pixel_values` `[N, 3, S, S]` is given, the
    embeddings at the `N * image_seq_len` positions where `input_ids == image_token_id` (in batch-major
    order) are replaced by the encoder's patch embeddings. Without `pixel_values` the `<image>` token
    uses its ordinary embedding (decode steps of a KV-cached generation never contain it).
    """

    config_class = TinyVisionConfig

    def __init__(self, config: TinyVisionConfig):
        super().__init__(config)
        self.vision_encoder = PatchImageEncoder(config)
        self.post_init()

    def prepare_pixel_values(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """uint8 HxWx3 arrays -> `[N, 3, S, S]` float pixels in [-0.5, 0.5] on the model's device.

        Images are resized to `image_size` (nearest, so tile colours stay exact; a 96x96 image is
        unchanged). Raises ValueError for anything that is not an HxWx3 array.
        """
        size = self.config.image_size
        out = []
        for i, img in enumerate(images):
            arr = np.asarray(img)
            if arr.ndim != 3 or arr.shape[2] != 3:
                raise ValueError(f"image {i} must be an HxWx3 uint8 array, got shape {arr.shape}")
            t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.uint8)).permute(2, 0, 1).float()
            if t.shape[1:] != (size, size):
                t = nn.functional.interpolate(t[None], size=(size, size), mode="nearest")[0]
            out.append(t / 255.0 - 0.5)
        if not out:
            return torch.zeros(0, 3, size, size, device=self.device, dtype=self.dtype)
        return torch.stack(out).to(device=self.device, dtype=self.dtype)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        inputs_embeds=None,
        pixel_values=None,
        **kwargs,
    ):
        if inputs_embeds is None:
            if input_ids is None:
                raise ValueError("TinyVisionForCausalLM.forward needs input_ids or inputs_embeds")
            inputs_embeds = self.get_input_embeddings()(input_ids)
            if pixel_values is not None and pixel_values.shape[0] > 0:
                feats = self.vision_encoder(pixel_values.to(inputs_embeds.dtype))  # [N, K, H]
                slots = input_ids == self.config.image_token_id
                if int(slots.sum()) != feats.shape[0] * feats.shape[1]:
                    raise ValueError(
                        f"{int(slots.sum())} <image> tokens in input_ids but {feats.shape[0]} images x "
                        f"{feats.shape[1]} patches; each image needs exactly {feats.shape[1]} tokens"
                    )
                inputs_embeds = inputs_embeds.masked_scatter(
                    slots[..., None], feats.reshape(-1, feats.shape[-1])
                )
        out = super().forward(
            input_ids=None,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        # The placeholder must never be generated: mask it inside the model so that sampling and
        # teacher-forced scoring agree (a finite value keeps p * logit = 0 instead of NaN).
        idx = torch.tensor([self.config.image_token_id], device=out.logits.device)
        out.logits = out.logits.index_fill(-1, idx, -1e9)
        return out


AutoConfig.register(VISION_MODEL_TYPE, TinyVisionConfig, exist_ok=True)
AutoModelForCausalLM.register(TinyVisionConfig, TinyVisionForCausalLM, exist_ok=True)


# ---------------------------------------------------------------------------------------------- build
def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[id(p)] = p.numel()
    return sum(seen.values())


def build_tiny_model(
    out_dir: str | os.PathLike,
    corpus: Iterable[str] | None = None,
    *,
    vocab_size: int = 1024,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int | None = 2,
    intermediate: int | None = None,
    max_positions: int = 4096,
    vision: bool = False,
    image_size: int = 96,
    patch_size: int = 16,
    seed: int = 0,
) -> Path:
    """Build, save and return the directory of a tiny causal LM with its tokenizer (module docstring).

    Args:
        out_dir: where to save (created; existing files with the same names are overwritten).
        corpus: tokenizer training text; None -> `default_corpus()`. A given corpus is used together
            with the built-in format sample, so the format tags and symbols are always covered.
        vocab_size: BPE vocabulary upper bound (the model's vocabulary is the tokenizer's length).
        hidden, layers, heads, kv_heads, intermediate: transformer sizes (`intermediate` defaults to
            4 * hidden; `kv_heads` None means `heads`). `hidden` must be divisible by `heads`.
        vision: build `TinyVisionForCausalLM` (image-prefix model) instead of `Qwen2ForCausalLM`.
        image_size, patch_size: vision only; images are resized to image_size^2, patch_size divides it.
        seed: weight-initialisation seed (the tokenizer is deterministic given the corpus).

    Returns:
        Path to the saved directory (loadable with `HFPolicy.from_pretrained`).
    """
    if hidden < 1 or layers < 1 or heads < 1 or hidden % heads:
        raise ValueError(
            f"need hidden >= 1, layers >= 1 and hidden divisible by heads; got {hidden=}, {layers=}, {heads=}"
        )
    kv = heads if kv_heads is None else kv_heads
    if kv < 1 or heads % kv:
        raise ValueError(f"kv_heads must divide heads ({heads}), got {kv_heads}")
    if (hidden // heads) % 2:
        raise ValueError(f"head dim hidden/heads must be even for RoPE, got {hidden // heads}")
    if vision and (patch_size < 1 or image_size % patch_size):
        raise ValueError(f"patch_size must divide image_size, got {patch_size=} {image_size=}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    if corpus is None:
        texts, used = default_corpus()
    else:
        texts, used = [_BUILTIN_TEXT, *(str(t) for t in corpus)], []
    tokenizer = build_tokenizer(texts, vocab_size=vocab_size)
    intermediate = intermediate or 4 * hidden

    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        use_sliding_window=False,
    )
    if vision:
        config = TinyVisionConfig(
            image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
            patch_size=patch_size,
            image_size=image_size,
            **common,
        )
        model_cls = TinyVisionForCausalLM
    else:
        config = Qwen2Config(**common)
        model_cls = Qwen2ForCausalLM
    # transformers initialises weights from the global torch RNG; fork it so that the build is
    # seeded and the caller's RNG state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "format_version": TINY_FORMAT_VERSION,
        "parameters": count_parameters(model),
        "vocab_size": len(tokenizer),
        "vision": vision,
        "env_ids_in_corpus": used,
        "corpus_sha256": _corpus_digest(texts),
        "args": dict(
            hidden=hidden,
            layers=layers,
            heads=heads,
            kv_heads=kv,
            intermediate=intermediate,
            vocab_size=vocab_size,
            max_positions=max_positions,
            image_size=image_size,
            patch_size=patch_size,
            seed=seed,
        ),
    }
    (out / "ragen_tiny.json").write_text(json.dumps(meta, indent=2))
    return out


def _corpus_digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def default_tiny_model_dir(
    cache_dir: str | os.PathLike | None = None, *, vision: bool = False, **build_kwargs: Any
) -> Path:
    """Return a cached tiny model directory, building it on first use.

    The cache lives under `cache_dir` (default `$RAGEN2_CACHE` or `~/.cache/ragen2`) in a folder
    named after a SHA-256 of the build arguments, the recipe version and the default corpus, so a
    change of the envs' text gives a new model rather than a stale one. Built into a temporary
    folder and renamed, so concurrent callers never see a half-written model.
    """
    root = Path(cache_dir or os.environ.get("RAGEN2_CACHE") or Path.home() / ".cache" / "ragen2")
    texts, _ = default_corpus()
    key = json.dumps(
        {"v": TINY_FORMAT_VERSION, "vision": vision, "args": build_kwargs, "corpus": _corpus_digest(texts)},
        sort_keys=True,
        default=str,
    )
    name = f"tiny-{'vision-' if vision else ''}{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    target = root / name
    if (target / "ragen_tiny.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        build_tiny_model(tmp, None, vision=vision, **build_kwargs)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "ragen_tiny.json").exists():  # lost a race only if the winner finished
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
