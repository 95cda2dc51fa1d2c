"""The tiny offline model: a causal LM of well under a million parameters that needs no download.

`build_tiny_model(out_dir)` writes a directory that loads through the same path as a real model
(`HFPolicy.from_pretrained(out_dir)`, i.e. `AutoModelForCausalLM` + `AutoTokenizer`):

- **Tokenizer**: byte-level BPE trained with the `tokenizers` library on a pinned corpus of the envs'
  text (see "Pinning" below), so every Unicode string round-trips (`√`, grids, newlines). Special tokens
  `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (EOS) and `<image>` (vision placeholder); the
  response-format tags `<think>`, `</think>`, `<answer>`, `</answer>` are added as ordinary
  (non-special) single tokens, so they survive decoding and `</answer>` is one token. A Qwen-style
  chat template (`<|im_start|>role\\ncontent<|im_end|>\\n`, generation prompt `<|im_start|>assistant\\n`)
  is saved with the tokenizer.
- **Model**: `Qwen2ForCausalLM` from a `Qwen2Config` (RoPE, RMSNorm, SwiGLU, grouped-query attention,
  tied input/output embeddings), weights initialised by transformers' own init under a forked,
  explicitly seeded torch RNG (the global RNG state is left untouched).

Sizes (parameters counted once for the tied embeddings; measured with the pinned corpus v1, whose
BPE vocabulary fills the `vocab_size=1024` bound: 1028 tokens with the four format tags):

    default  hidden=128, layers=2, heads=4 (kv 2), mlp=4*hidden   0.62 M (text)
             hidden=192, layers=4                                   2.4 M (text), 2.59 M (vision)
    tests    hidden=32, layers=2                                   0.06 M
             hidden=64, layers=2                                   0.18 M (text), 0.24 M (vision)
    vision   + patch encoder: Conv2d(3, hidden, 16, stride 16), position embedding, LayerNorm, Linear

A default build (reading the pinned corpus, tokenizer training, init, save) takes about 0.15 s on one CPU
core; generating a corpus from the envs (`generate_corpus`, only to write a new version) takes 2-4 s more.

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

**Pinning.** The default model (`build_tiny_model(out, corpus=None)`, `default_tiny_model_dir`, `"tiny"` in a
config) trains its tokenizer on a corpus shipped with the package, `data/tiny_corpus_v{N}.json.gz` of
`TINY_CORPUS_VERSION`, and never steps an env: editing an env's wording, or adding an env, changes no model.
The file's texts are checked against `TINY_CORPUS_SHA256` when read, and the built model's digest
(`tiny_model_digest`) is recorded in `TINY_MODEL_SHA256` (tests/policy/test_tiny_pinned.py checks it). A new
corpus is a new version: `python scripts/write_tiny_corpus.py` writes `tiny_corpus_v{N+1}.json.gz` from
today's envs (`generate_corpus`) and prints the digests to record; then bump `TINY_CORPUS_VERSION` and record
both digests. A change of the recipe (tokenizer training, config, init) bumps `TINY_FORMAT_VERSION` and records
new model digests. Version 1 is the text `generate_corpus()` (then named `default_corpus`) gave at commit 6bd8167.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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

from ragen_envs.validation import require_bool, require_int, require_path

#: Bump when the build recipe changes: it is part of the cache key of `default_tiny_model_dir`.
TINY_FORMAT_VERSION = 2

#: The tokenizer corpus of the default model: `data/tiny_corpus_v{TINY_CORPUS_VERSION}.json.gz`.
TINY_CORPUS_VERSION = 1
#: `corpus_digest` of each shipped corpus version's texts; a file that no longer matches is refused.
TINY_CORPUS_SHA256 = {
    1: "01a96e74c0ea5197bf4d2246b607daa6a64dca9ba6c83dec9b57153c174517a9",
}
#: `tiny_model_digest` of the default models (`build_tiny_model(out, vision=...)`, no other argument) built from
#: corpus `TINY_CORPUS_VERSION` by recipe `TINY_FORMAT_VERSION`. Record new values with each bump of either.
TINY_MODEL_SHA256 = {
    "text": "cb3b971081ad3b16922e8545610ca78ec1d9ff8ef233aee767f684ff195a4424",
    "vision": "61990f7e670bf163e94cc0b4c9a432314ddf82a371da40bfdbff72731bcb76c3",
}
#: Where the corpus files are shipped (package data).
CORPUS_DIR = Path(__file__).resolve().parent / "data"

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


def generate_corpus(
    seeds: Sequence[int] = (0, 1, 2, 3, 4, 5), steps: int = 4, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Generate a tokenizer corpus from today's envs (the source of a new `tiny_corpus_v{N}` file).

    A built-in sample (instructions, grids, the RAGEN turn layout, responses in the
    `<think> ... </think> <answer> ... </answer>` format, action names) plus, for every id in
    `ragen_envs.registration.ENV_SPECS` that can be made, the instructions and observations of
    `len(seeds)` seeded episodes stepped `steps` times with random well-formed responses.
    Envs that fail to import or run are skipped (they may not exist yet), never fatal.

    The default model does not read this (it reads the shipped file, `load_tiny_corpus`); version 1 of
    that file is this function's output with the default arguments at commit 6bd8167.

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


@dataclass(frozen=True)
class TinyCorpus:
    """A versioned tokenizer corpus (`load_tiny_corpus`): its texts are used as they are, built-in sample included.

    Attributes:
        version: the file's version (`tiny_corpus_v{version}.json.gz`).
        texts: the tokenizer's training text, in order.
        env_ids: the env ids whose text it holds (when it was generated).
        sha256: `corpus_digest(texts)`.
    """

    version: int
    texts: tuple[str, ...]
    env_ids: tuple[str, ...]
    sha256: str


def corpus_digest(texts: Iterable[str]) -> str:
    """SHA-256 of a corpus: each text's UTF-8 bytes followed by a NUL byte, in order."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def corpus_path(version: int = TINY_CORPUS_VERSION, directory: str | os.PathLike | None = None) -> Path:
    """The file of corpus `version`: `tiny_corpus_v{version}.json.gz` in `directory` (default: the shipped one)."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be an int >= 1, got {version!r}")
    return Path(directory or CORPUS_DIR) / f"tiny_corpus_v{version}.json.gz"


def load_tiny_corpus(version: int = TINY_CORPUS_VERSION, directory: str | os.PathLike | None = None) -> TinyCorpus:
    """Read corpus `version` (the shipped file unless `directory` is given); no env is imported or stepped.

    A version recorded in `TINY_CORPUS_SHA256` must match its digest: a shipped file edited in place raises
    ValueError (write a new version instead, `scripts/write_tiny_corpus.py`). An unrecorded version (one being
    prepared) is read without that check.
    """
    path = corpus_path(version, directory)
    if not path.is_file():
        raise FileNotFoundError(f"no tiny-model corpus version {version}: {path} does not exist")
    data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
    texts = data.get("texts") if isinstance(data, dict) else None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts) or data.get("version") != version:
        raise ValueError(f"{path} is not a tiny-model corpus of version {version} "
                         "(a JSON object with 'version' and 'texts', a list of strings)")
    digest = corpus_digest(texts)
    want = TINY_CORPUS_SHA256.get(version)
    if want is not None and digest != want:
        raise ValueError(
            f"{path} has corpus digest {digest}, but version {version} is recorded as {want} "
            "(TINY_CORPUS_SHA256): a shipped corpus is never edited; write a new version with "
            "scripts/write_tiny_corpus.py and bump TINY_CORPUS_VERSION"
        )
    return TinyCorpus(version=version, texts=tuple(texts), env_ids=tuple(data.get("env_ids", ())), sha256=digest)


def write_tiny_corpus(
    texts: Sequence[str], version: int, *, env_ids: Sequence[str] = (), directory: str | os.PathLike | None = None,
    generator: dict[str, Any] | None = None, overwrite: bool = False,
) -> Path:
    """Write `texts` as corpus `version` (gzipped JSON, byte-reproducible: no time stamp, no file name).

    Refuses to replace an existing file unless `overwrite` (a shipped version is never rewritten). Returns the path.
    """
    path = corpus_path(version, directory)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; a corpus version is written once (choose a new version)")
    texts = [str(t) for t in texts]
    data = {"version": version, "sha256": corpus_digest(texts), "env_ids": list(env_ids),
            "generator": generator or {}, "texts": texts}
    raw = json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, compresslevel=9, mtime=0) as gz:
        gz.write(raw)
    return path


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


def _check_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """ValueError naming the first token id outside ``[0, vocab_size)`` (the embedding would raise an IndexError)."""
    if input_ids.numel() and not bool(((input_ids >= 0) & (input_ids < vocab_size)).all()):
        where = ((input_ids < 0) | (input_ids >= vocab_size)).nonzero()[0].tolist()
        raise ValueError(f"input_ids must hold token ids in [0, {vocab_size}) (the model's vocabulary); got "
                         f"{int(input_ids[tuple(where)])} at {where}")


def image_array(image: Any, name: str = "image") -> np.ndarray:
    """`image` as a C-contiguous, writable uint8 ``(H, W, 3)`` array (H, W >= 1), or ValueError naming `name`.

    Taken: a uint8 array (as it is), an RGB PIL image, a tensor (any device), and integer arrays (lists) whose
    values all lie in 0-255 (converted exactly). Refused, since a cast would change the picture without a word:
    float images (``astype(uint8)`` truncates a [0, 1] image to black), values outside 0-255 (they would wrap),
    bools, other shapes (RGBA, grayscale, channels first) and empty images.
    """
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    try:
        arr = np.asarray(image)
    except (TypeError, ValueError) as err:  # a ragged nested list, an object numpy cannot read
        raise ValueError(f"{name} must be an HxWx3 uint8 array (RGB), got {type(image).__name__}: {err}") from err
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"{name} must be an HxWx3 uint8 array (RGB, channels last), got shape {arr.shape} "
                         f"({type(image).__name__}); convert a PIL image with image.convert('RGB')")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} is empty (shape {arr.shape}); an image needs at least one pixel")
    if arr.dtype != np.uint8:
        if arr.dtype.kind not in "iu":
            hint = " (a float image in [0, 1]: (image * 255).round().astype(np.uint8))" if arr.dtype.kind == "f" else ""
            raise ValueError(f"{name} must hold uint8 pixels 0-255, got dtype {arr.dtype}{hint}")
        low, high = int(arr.min()), int(arr.max())
        if low < 0 or high > 255:
            raise ValueError(f"{name} must hold pixels 0-255, got values {low} to {high} (dtype {arr.dtype})")
        arr = arr.astype(np.uint8)
    # Writable as well: torch warns on (and must not write through) a read-only buffer such as np.asarray(PIL).
    return np.require(arr, np.uint8, ["C", "W"])


def _check_pixel_values(pixel_values: torch.Tensor, size: int) -> None:
    """ValueError unless `pixel_values` is `[N, 3, size, size]` (what `prepare_pixel_values` makes): another size
    would give another number of patches than the position embedding has."""
    if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != (3, size, size):
        raise ValueError(f"pixel_values must be [N, 3, {size}, {size}] (the model's image_size; use "
                         f"prepare_pixel_values), got {list(pixel_values.shape)}")


def _check_image_runs(slots: torch.Tensor, per_image: int) -> None:
    """ValueError unless every run of consecutive image tokens in a row is a whole number of images.

    The patch embeddings fill the image tokens in order, so a stray image token (one typed into a text, or an
    image cut off) would shift every later image's patches by one position even when the total count matches.
    """
    if per_image <= 1:
        return  # every image token is a whole image
    edges = nn.functional.pad(slots.to(torch.int8), (1, 1)).diff(dim=-1)  # +1 where a run starts, -1 past its end
    starts, ends = (edges == 1).nonzero(), (edges == -1).nonzero()  # row-major, so the i-th start pairs the i-th end
    lengths = ends[:, 1] - starts[:, 1]
    bad = (lengths % per_image).nonzero()
    if bad.numel():
        j = int(bad[0, 0])
        raise ValueError(f"sequence {int(starts[j, 0])} has a run of {int(lengths[j])} <image> tokens at position "
                         f"{int(starts[j, 1])}, not a whole number of images ({per_image} tokens each): an image "
                         "token outside an image's placeholder (typed into a text?) would misalign the patches")


class TinyVisionForCausalLM(Qwen2ForCausalLM):
    """The tiny LM with a patch-embedding image encoder (see the module docstring).

    `forward(input_ids, ..., pixel_values=None)`: when `pixel_values` `[N, 3, S, S]` is given, the
    embeddings at the `N * image_seq_len` positions where `input_ids == image_token_id` (in batch-major
    order) are replaced by the encoder's patch embeddings. Without `pixel_values` the `<image>` token
    uses its ordinary embedding (decode steps of a KV-cached generation never contain it). ValueError when
    `pixel_values` is not `[N, 3, image_size, image_size]`, when the image-token count is not
    `N * image_seq_len`, or when a run of consecutive image tokens is not a whole number of images.
    """

    config_class = TinyVisionConfig

    def __init__(self, config: TinyVisionConfig):
        super().__init__(config)
        self.vision_encoder = PatchImageEncoder(config)
        self.post_init()

    def prepare_pixel_values(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """uint8 HxWx3 arrays -> `[N, 3, S, S]` float pixels in [-0.5, 0.5] on the model's device.

        Images are resized to `image_size`: an axis shorter than it is enlarged by repeating pixels (nearest, so
        tile colours stay exact; a 96x96 image is unchanged), an axis longer than it is shrunk by averaging the
        pixels each output pixel covers (area: nearest there drops whole rows and columns, and with them the
        player, a box or a target of a large room). An RGB PIL image, a CPU or GPU tensor and an integer array of
        values 0-255 are taken as that uint8 array. Raises ValueError naming the image for anything else
        (`image_array`).
        """
        size = self.config.image_size
        out = []
        for i, img in enumerate(images):
            t = torch.from_numpy(image_array(img, f"image {i}")).permute(2, 0, 1).float()
            h, w = t.shape[1:]
            if h < size or w < size:  # enlarge the short axes only
                t = nn.functional.interpolate(t[None], size=(max(h, size), max(w, size)), mode="nearest")[0]
            if t.shape[1] > size or t.shape[2] > size:  # then shrink the long ones (the others are `size` already)
                t = nn.functional.adaptive_avg_pool2d(t[None], (size, size))[0]
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
            embed = self.get_input_embeddings()
            _check_ids(input_ids, embed.weight.shape[0])
            inputs_embeds = embed(input_ids)
            if pixel_values is not None and pixel_values.shape[0] > 0:
                _check_pixel_values(pixel_values, self.config.image_size)
                feats = self.vision_encoder(pixel_values.to(inputs_embeds.dtype))  # [N, K, H]
                slots = input_ids == self.config.image_token_id
                if int(slots.sum()) != feats.shape[0] * feats.shape[1]:
                    raise ValueError(
                        f"{int(slots.sum())} <image> tokens in input_ids but {feats.shape[0]} images x "
                        f"{feats.shape[1]} patches; each image needs exactly {feats.shape[1]} tokens"
                    )
                _check_image_runs(slots, feats.shape[1])
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


def _check_build_args(out_dir: Any, *, vision: Any, kv_heads: Any, intermediate: Any, seed: Any,
                      **sizes: Any) -> None:
    """The argument checks of :func:`build_tiny_model` that need no arithmetic between them (its docstring)."""
    require_path("out_dir", out_dir)
    require_int("vocab_size", sizes.pop("vocab_size"), low=256 + len(SPECIAL_TOKENS))
    for name, value in sizes.items():  # hidden, layers, heads, max_positions, image_size, patch_size
        require_int(name, value, low=1)
    require_int("kv_heads", kv_heads, low=1, allow_none=True)
    require_int("intermediate", intermediate, low=0, allow_none=True)
    require_int("seed", seed)
    require_bool("vision", vision)


def _corpus_texts(corpus: Any) -> list[str]:
    """`corpus` as a list of texts: TypeError for a bare string (it would be read as its characters, one text each)
    or anything that is not an iterable of strings."""
    if isinstance(corpus, (str, bytes)) or not isinstance(corpus, Iterable):
        raise TypeError(f"corpus must be None, a TinyCorpus or a list of strings, got {type(corpus).__name__} "
                        f"{corpus!r:.40} (wrap one text in a list: [text])")
    texts = list(corpus)
    bad = next((t for t in texts if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(f"corpus must be a list of strings; it holds {bad!r} ({type(bad).__name__})")
    return texts


def build_tiny_model(
    out_dir: str | os.PathLike,
    corpus: Iterable[str] | TinyCorpus | None = None,
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
        corpus: tokenizer training text. None: the pinned corpus `load_tiny_corpus()` (version
            `TINY_CORPUS_VERSION`; no env is stepped). A `TinyCorpus` is used as it is (it holds the built-in
            sample). Any other iterable of strings is used together with the built-in format sample, so the
            format tags and symbols are always covered.
        vocab_size: BPE vocabulary upper bound (the model's vocabulary is the tokenizer's length).
        hidden, layers, heads, kv_heads, intermediate: transformer sizes, integers >= 1 (`intermediate` None or 0
            means 4 * hidden; `kv_heads` None means `heads`). `hidden` must be divisible by `heads`.
        max_positions: the model's position limit, an integer >= 1.
        vision: build `TinyVisionForCausalLM` (image-prefix model) instead of `Qwen2ForCausalLM`.
        image_size, patch_size: vision only; images are resized to image_size^2, patch_size divides it, and an
            image's (image_size / patch_size)^2 tokens fit max_positions.
        seed: weight-initialisation seed (the tokenizer is deterministic given the corpus).

    Returns:
        Path to the saved directory (loadable with `HFPolicy.from_pretrained`).

    Raises:
        ValueError naming the argument for a size that is not an integer in range (bools and floats included:
        `hidden=32.0` is refused, not truncated), a `vision` flag that is not a bool, or an `out_dir` that is not a
        path; TypeError for a `corpus` that is not an iterable of strings. Nothing is written then.
    """
    _check_build_args(out_dir, vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                      kv_heads=kv_heads, intermediate=intermediate, max_positions=max_positions, vision=vision,
                      image_size=image_size, patch_size=patch_size, seed=seed)
    if hidden % heads:
        raise ValueError(f"hidden must be divisible by heads; got {hidden=}, {heads=}")
    kv = heads if kv_heads is None else kv_heads
    if heads % kv:
        raise ValueError(f"kv_heads must divide heads ({heads}), got {kv_heads}")
    if (hidden // heads) % 2:
        raise ValueError(f"head dim hidden/heads must be even for RoPE, got {hidden // heads}")
    if vision and image_size % patch_size:
        raise ValueError(f"patch_size must divide image_size, got {patch_size=} {image_size=}")
    if vision and (image_size // patch_size) ** 2 > max_positions:
        # One image alone would pass the position limit; the encoder's position table would be as large (a huge
        # image_size with patch_size=1 asks for gigabytes before anything can fail).
        raise ValueError(f"an image of (image_size / patch_size)^2 = {(image_size // patch_size) ** 2} tokens does not "
                         f"fit max_positions={max_positions}; got {image_size=}, {patch_size=} (use a larger "
                         "patch_size or a smaller image_size)")
    if corpus is not None and not isinstance(corpus, TinyCorpus):
        corpus = _corpus_texts(corpus)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    if corpus is None:
        corpus = load_tiny_corpus()
    if isinstance(corpus, TinyCorpus):
        texts, used, version = list(corpus.texts), list(corpus.env_ids), corpus.version
    else:
        texts, used, version = [_BUILTIN_TEXT, *corpus], [], None
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
        "corpus_version": version,
        "corpus_sha256": corpus_digest(texts),
        "env_ids_in_corpus": used,
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


#: The files `tiny_model_digest` reads, in this order: the tokenizer (vocabulary, merges, added tokens) and the chat
#: template byte for byte, then the weights. The configs (they carry the transformers version) are not read.
DIGEST_FILES = ("tokenizer.json", "chat_template.jinja", "model.safetensors")


def _safetensors_tensors(path: Path) -> list[tuple[str, str, list[int], bytes]]:
    """(name, dtype, shape, raw bytes) of every tensor of a safetensors file, sorted by name (header metadata
    such as `{"format": "pt"}` and the layout of the file are left out)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = []
    for name in sorted(k for k in header if k != "__metadata__"):
        info = header[name]
        start, end = info["data_offsets"]
        out.append((name, str(info["dtype"]), [int(x) for x in info["shape"]], raw[base + start : base + end]))
    return out


def tiny_model_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a built tiny model: what makes it this model and no other.

    Hashed in this order: for each of `DIGEST_FILES`, its name and length-prefixed content; `tokenizer.json` and
    `chat_template.jinja` byte for byte, `model.safetensors` as its tensors sorted by name (name, dtype, shape,
    data). Equal digests mean the same tokenizer, template and initial weights. Raises FileNotFoundError when a
    file is missing.
    """
    root = Path(path)
    h = hashlib.sha256()

    def put(b: bytes) -> None:
        h.update(struct.pack("<Q", len(b)))
        h.update(b)

    for name in DIGEST_FILES:
        file = root / name
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing; is {root} a tiny model built by build_tiny_model?")
        put(name.encode())
        if name.endswith(".safetensors"):
            for tensor, dtype, shape, data in _safetensors_tensors(file):
                put(json.dumps([tensor, dtype, shape]).encode())
                put(data)
        else:
            put(file.read_bytes())
    return h.hexdigest()


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The project's cache folder: `cache_dir`, else `$RAGEN2_CACHE`, else `~/.cache/ragen2` (the tiny models, the
    tiny base models and the shared warm starts live under it)."""
    return Path(cache_dir or os.environ.get("RAGEN2_CACHE") or Path.home() / ".cache" / "ragen2")


def default_tiny_model_dir(
    cache_dir: str | os.PathLike | None = None, *, vision: bool = False, **build_kwargs: Any
) -> Path:
    """Return a cached tiny model directory, building it on first use.

    The cache lives under `cache_dir` (default `$RAGEN2_CACHE` or `~/.cache/ragen2`) in a folder
    named after a SHA-256 of the build arguments, the recipe version (`TINY_FORMAT_VERSION`), the corpus
    version (`TINY_CORPUS_VERSION`) and the SHA-256 of that corpus file's bytes. No env is stepped: the
    model is a function of the shipped corpus, not of today's envs. Built into a temporary folder and
    renamed, so concurrent callers never see a half-written model.

    The build records the model's digest (`tiny_model_digest`) in ``ragen_tiny.json`` (``"sha256"``), and
    whether it is the pinned default (``"pinned"``: the digest equals `TINY_MODEL_SHA256`; None for non-default
    `build_kwargs`). A default model that is not the pinned one (other tokenizers, transformers or torch versions
    can build other bytes) warns (`TinyModelMismatchWarning`): runs still work, but recorded tiny numbers will not
    reproduce bit for bit. A cached folder whose files no longer give its recorded digest (a truncated or edited
    file, a half-deleted folder) raises `CorruptTinyModelError` naming the folder to delete; it is rebuilt on the
    next call. Checked once per folder and process (about 6 ms).
    """
    root = cache_root(cache_dir)
    corpus_file = corpus_path(TINY_CORPUS_VERSION)
    if not corpus_file.is_file():
        raise FileNotFoundError(f"the tiny model's corpus {corpus_file} is missing (package data of ragen2)")
    key = json.dumps(
        {
            "v": TINY_FORMAT_VERSION,
            "vision": vision,
            "args": build_kwargs,
            "corpus_version": TINY_CORPUS_VERSION,
            "corpus_file": hashlib.sha256(corpus_file.read_bytes()).hexdigest(),
        },
        sort_keys=True,
        default=str,
    )
    name = f"tiny-{'vision-' if vision else ''}{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    target = root / name
    pinned = None if build_kwargs else TINY_MODEL_SHA256["vision" if vision else "text"]
    if (target / "ragen_tiny.json").exists():
        verify_cached_model(target, pinned)
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        build_tiny_model(tmp, None, vision=vision, **build_kwargs)
        _record_digest(tmp, pinned)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "ragen_tiny.json").exists():  # lost a race only if the winner finished
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class TinyModelMismatchWarning(UserWarning):
    """The default tiny model built here is not the pinned one (`TINY_MODEL_SHA256`): recorded tiny numbers
    will not reproduce bit for bit on this installation."""


class CorruptTinyModelError(RuntimeError):
    """A cached tiny model folder whose files no longer give the digest recorded when it was built."""


#: Folders checked by this process: path -> the recorded digest they matched (checked once per process).
_VERIFIED: dict[str, str] = {}


def _mismatch_message(where: Path, got: str, pinned: str) -> str:
    import tokenizers
    import transformers

    return (f"the default tiny model at {where} (digest {got[:12]}) is not the pinned one ({pinned[:12]}): this "
            f"installation (torch {torch.__version__}, transformers {transformers.__version__}, tokenizers "
            f"{tokenizers.__version__}) builds other tokenizer or weight bytes, so runs work but recorded tiny numbers "
            "(docs, committed results) will not reproduce bit for bit")


def _record_digest(folder: Path, pinned: str | None) -> None:
    """Write the freshly built model's digest (and whether it is the pinned default) into its ragen_tiny.json;
    warn when a default build is not the pinned model."""
    meta_file = folder / "ragen_tiny.json"
    meta = json.loads(meta_file.read_text())
    digest = tiny_model_digest(folder)
    meta["sha256"] = digest
    meta["pinned"] = None if pinned is None else digest == pinned
    meta_file.write_text(json.dumps(meta, indent=2))
    if pinned is not None and digest != pinned:
        warnings.warn(_mismatch_message(folder, digest, pinned), TinyModelMismatchWarning, stacklevel=3)


def verify_cached_model(folder: Path, pinned: str | None, meta_name: str = "ragen_tiny.json") -> None:
    """Check a cached folder against the digest its build recorded in `meta_name` (folders built before digests
    were recorded: against `pinned` if given, a warning only); `CorruptTinyModelError` if its files no longer give
    it. Also used for the cached tiny base models (`ragen_tiny_base.json`)."""
    key = str(folder)
    if key in _VERIFIED:
        return
    hint = f"delete the folder (rm -r '{folder}') and it is rebuilt on the next call"
    try:
        meta = json.loads((folder / meta_name).read_text())
        digest = tiny_model_digest(folder)
    except (OSError, ValueError, KeyError, struct.error) as err:  # a missing, truncated or garbled file
        raise CorruptTinyModelError(f"the cached tiny model at {folder} cannot be read ({err}); {hint}") from err
    recorded = meta.get("sha256") if isinstance(meta, dict) else None
    if recorded is not None and digest != recorded:
        raise CorruptTinyModelError(f"the cached tiny model at {folder} was modified or damaged after it was built "
                                    f"(digest {digest[:12]}, recorded {str(recorded)[:12]}); {hint}")
    if recorded is None and pinned is not None and digest != pinned:
        warnings.warn(_mismatch_message(folder, digest, pinned), TinyModelMismatchWarning, stacklevel=3)
    _VERIFIED[key] = digest
