"""`HFPolicy`: the `Policy` protocol over any transformers causal LM loaded from a local path.

    policy = HFPolicy.from_pretrained("path/to/model", device="cpu", dtype=None)   # or "bfloat16"
    prompt = policy.encode_chat([{"role": "system", "content": ...}, {"role": "user", "content": ...}])
    gen = torch.Generator().manual_seed(0)
    gens = policy.generate([prompt] * 8, max_new_tokens=64, temperature=1.0, generator=gen)
    out = policy.forward_logprobs(input_ids, attention_mask, with_entropy=True)   # with grad

Prompt layout: the tokenizer's chat template when it has one; otherwise the fallback layout
(`FALLBACK_TEMPLATE`) `"{role}: {content}\\n\\n"` per message and the generation prompt `"assistant: "`.

Generation (`generate`): prompts are left-padded into one batch, the prompt is prefilled once and
then one token per step is decoded with the KV cache. Positions are `cumsum(attention_mask) - 1`, so
a padded sequence sees the same positions as it would alone. Per step, for each sequence:

    greedy:   token = argmax(logits);  logprob = log softmax(logits)[token]      (temperature 1, no top-p)
    sampled:  q = softmax(logits / T), restricted to the top-p nucleus and renormalised;
              token ~ q (drawn with `generator`);  logprob = log q[token]

A sequence stops at an EOS id (the tokenizer's EOS, the generation config's EOS ids and
`<|im_end|>` / `<|endoftext|>` when they exist; the EOS token is not part of the response), or when
the decoded response contains one of the stop strings: the text is cut right after the stop string
and the ids end with the token that completed it (if that token also carries characters after the
stop string, those are in the ids but not in `text`), or after `max_new_tokens` ("length").

Positions: models that compute them (RoPE, ALiBi) take prompts of any length. A model that looks them up in a
learned table (GPT-2's `wpe`: :func:`learned_position_limit`) has `max_position_embeddings` of them: a generation
whose prompt + `max_new_tokens` - 1 tokens, a scored sequence or a cross-scored prompt + trace longer than that is a
ValueError before the model runs (not an IndexError inside it).

Images: models that follow the image-prefix convention of the tiny vision model (config attribute
`image_token_id`, config property `image_seq_len`, method `prepare_pixel_values(list of HxWx3
uint8) -> [N, 3, S, S]`, forward argument `pixel_values`) accept images. Put the placeholder
`policy.image_token` in a message where the image goes; `encode_chat` expands each placeholder to
`image_seq_len` tokens. Other models raise ValueError on non-empty image lists. `images` is one list per
sequence (a `[N, H, W, 3]` array counts as a list of N images); a bare image in place of a sequence's list is a
ValueError, not a list of its rows. `cross_score` takes no images, so prompts or traces holding image tokens are a
ValueError there (they would be scored without their pictures). Transformers VLMs driven through their processor
are not supported (see `ragen_core.policy.tiny`'s docstring for why).
"""

from __future__ import annotations

import inspect
import math
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ragen_core.math.mi import learned_position_limit
from ragen_core.policy.base import (
    Generation,
    ImageList,
    Policy,
    PolicyOutput,
    SamplingRequest,
    is_number,
    model_vocab_size,
    token_id_lists,
)
from ragen_core.policy.fast_qwen2 import FastQwen2, unsupported_reason

#: Prompt layout for tokenizers without a chat template (documented in the module docstring).
FALLBACK_TEMPLATE = "{role}: {content}\n\n"
FALLBACK_GENERATION_PROMPT = "assistant: "

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """None / torch.dtype / one of `_DTYPES`' names -> torch.dtype (None means the checkpoint's default)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ValueError(f"dtype must be None, a torch.dtype or one of {sorted(_DTYPES)}, got {dtype!r}")


def sample_from_logits(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of `logits` `[B, V]`; returns (tokens `[B]` long, logprobs `[B]` float32).

    See the module docstring for the two rules (greedy / temperature + nucleus). The nucleus keeps the
    smallest prefix of tokens, sorted by probability, whose mass reaches `top_p` (at least one token).
    `uniform` `[B, 1]`: the rows' uniform draws, already made (by default one per row from `generator`).
    ValueError for `logits` not `[B, V]`, or (when sampling) a `temperature` that is not a finite number > 0 or a
    `top_p` outside (0, 1].
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(f"logits must be a [B, V] tensor, got {getattr(logits, 'shape', type(logits).__name__)}")
    if not greedy:
        if not (is_number(temperature) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0 when sampling, got {temperature!r}")
        if not (is_number(top_p) and 0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
    logits = logits.float()
    if greedy:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / temperature, -1)
    if top_p < 1.0:
        sorted_logp, order = logp.sort(-1, descending=True)
        sorted_p = sorted_logp.exp()
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logp = torch.log_softmax(logp.masked_fill(drop, float("-inf")), -1)
    # Inverse-CDF draw: token = first index whose cumulative probability exceeds u * total, u ~ U[0, 1).
    # Exact for the categorical distribution, one uniform per row, and several times faster on a CPU than
    # torch.multinomial (which draws an exponential per vocabulary entry).
    cdf = logp.exp().cumsum(-1)
    u = uniform.to(device=cdf.device, dtype=cdf.dtype) if uniform is not None else draw_uniform(
        cdf.shape[0], generator, cdf.device)
    tokens = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=cdf.shape[-1] - 1)
    # A token of probability 0 is never picked: searchsorted(right=True) skips flat steps of the CDF.
    return tokens.squeeze(-1), logp.gather(-1, tokens).squeeze(-1)


def draw_uniform(rows: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """`[rows, 1]` float32 uniforms in [0, 1) from `generator` (on its device), moved to `device`: the one draw per
    row of :func:`sample_from_logits`."""
    gen_device = generator.device if generator is not None else device
    return torch.rand(rows, 1, generator=generator, device=gen_device, dtype=torch.float32).to(device)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """Cut `text` right after the earliest-ending occurrence of any stop string (the generation's stop rule)."""
    ends = [text.find(s) + len(s) for s in stop if s in text]
    return text[: min(ends)] if ends else text


def pad_batch(
    sequences: Sequence[Sequence[int]],
    pad_id: int,
    side: str = "right",
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token-id lists into (`input_ids` `[B, T]`, `attention_mask` `[B, T]`), long tensors.

    `side` is "right" (what `forward_logprobs` documents) or "left" (what generation uses). The sequences must be
    integer token ids (:func:`ragen_core.policy.base.token_id_lists`; a float id is a TypeError, not truncated).
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    sequences = token_id_lists("sequences", sequences)
    if len(sequences) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    T = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), T), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(sequences), T), dtype=torch.long)
    for b, seq in enumerate(sequences):
        n = len(seq)
        if n == 0:
            continue
        sl = slice(0, n) if side == "right" else slice(T - n, T)
        ids[b, sl] = torch.as_tensor(seq, dtype=torch.long)
        mask[b, sl] = 1
    return ids.to(device), mask.to(device)


def _forward_param_names(model: torch.nn.Module) -> set[str]:
    """Names of `model.forward`'s parameters, including those of the base classes' forwards (a
    subclass that takes **kwargs still accepts what its parent's forward names)."""
    names: set[str] = set()
    for cls in type(model).__mro__:
        fwd = cls.__dict__.get("forward")
        if fwd is None:
            continue
        try:
            names |= set(inspect.signature(fwd).parameters)
        except (TypeError, ValueError):
            continue
    return names


class _Decoding:
    """The per-row state of one batched decoding: responses and their log-probs so far, the text of rows cut at a
    stop string, each row's finish reason, and the rows still generating."""

    def __init__(self, prompts: list[list[int]], stop: tuple[str, ...]):
        n = len(prompts)
        self.prompts = prompts
        self.stop = stop
        self.responses: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list[float]] = [[] for _ in range(n)]
        self.texts: list[str | None] = [None] * n
        self.reasons = ["length"] * n
        self.active = list(range(n))
        # A stop string spans at most len(stop) tokens (each token carries >= 1 byte of it), so decoding a short
        # tail each step finds it the step it is completed.
        self.window = max((len(s.encode("utf-8")) for s in stop), default=0) + 2


def per_sequence_images(images: Any, batch: int) -> list[list[Any]] | None:
    """`images` of :meth:`HFPolicy.generate` / :meth:`HFPolicy.forward_logprobs` as one list per sequence (None
    stays None: no images anywhere).

    Entry b is a list or tuple of sequence b's images, None (no image) or a ``[N, H, W, 3]`` array / tensor (N
    images). A single image (an ``H x W x 3`` array, a PIL image) in place of the list is a ValueError: iterating
    it would give its rows, and ``x or []`` on an array used to fail with numpy's "truth value is ambiguous".
    The images themselves are checked by the model (`prepare_pixel_values`).
    """
    if images is None:
        return None
    if isinstance(images, (str, bytes)) or not hasattr(images, "__len__"):
        raise TypeError(f"images must be one list of images per sequence, got {type(images).__name__}")
    if len(images) != batch:
        raise ValueError(f"images must have one list per sequence ({batch}), got {len(images)}")
    out = []
    for b, x in enumerate(images):
        if x is None:
            out.append([])
        elif isinstance(x, (list, tuple)):
            out.append(list(x))
        elif isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 4:
            out.append(list(x))
        else:
            shape = f" of shape {tuple(x.shape)}" if hasattr(x, "shape") else ""
            raise ValueError(f"images[{b}] must be the list of sequence {b}'s images, got one {type(x).__name__}"
                             f"{shape}; wrap a single image in a list (images=[[image], ...])")
    return out


class HFPolicy(Policy):
    """`Policy` over a transformers causal LM (see the module docstring).

    Args:
        model: a transformers causal LM (`model(input_ids, attention_mask, position_ids, <cache>,
            use_cache) -> .logits`), already on its device and dtype.
        tokenizer: its tokenizer; a missing pad token is set to the EOS token.
        eos_token_ids: ids that end a response (default: see the module docstring).

    Attributes:
        model, tokenizer: what the trainer optimises / decodes with.
        image_token: the placeholder string for images, or None for text-only models.
        pad_token_id, eos_token_ids.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, eos_token_ids: Sequence[int] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token is None:
                raise ValueError("the tokenizer has neither a pad nor an EOS token; set one of them")
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_token_id: int = int(tokenizer.pad_token_id)
        self.eos_token_ids: frozenset[int] = frozenset(
            int(i) for i in (eos_token_ids if eos_token_ids is not None else self._default_eos_ids())
        )
        names = _forward_param_names(model)
        # transformers 5.x calls the KV cache `cache` (`past_key_values` is deprecated);
        # 4.x calls it `past_key_values`.
        self._cache_kw = "cache" if "cache" in names else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in names
        cfg = getattr(model, "config", None)
        self._image_token_id = (
            getattr(cfg, "image_token_id", None) if hasattr(model, "prepare_pixel_values") else None
        )
        self._image_seq_len = int(getattr(cfg, "image_seq_len", 0) or 0)
        self.image_token: str | None = (
            tokenizer.convert_ids_to_tokens(int(self._image_token_id))
            if self._image_token_id is not None
            else None
        )
        #: Use the lean forward (`ragen_core.policy.fast_qwen2`) where the model allows it; False: transformers'
        #: forward everywhere (what the equivalence tests compare against).
        self.fast = True
        self._fast_cache: FastQwen2 | None = None
        self._stop_tokens: dict[tuple[str, ...], frozenset[int] | None] = {}
        self._positions: tuple[torch.nn.Module, int | None] | None = None  # (model, its learned table's size)

    # ------------------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
        attn_implementation: str | None = None,
        trust_remote_code: bool = False,
        eos_token_ids: Sequence[int] | None = None,
    ) -> HFPolicy:
        """Load model and tokenizer from a local directory (no network: `local_files_only=True`).

        Args:
            path: a directory written by `save_pretrained` (a real model or `build_tiny_model`).
            device: "cpu", "cuda", "cuda:1", ...
            dtype: None (checkpoint default; float32 for the tiny model), "bfloat16", "float16", "float32".
            attn_implementation: passed to transformers ("sdpa", "eager", "flash_attention_2").

        Raises ValueError, before anything is computed with it, for a folder whose checkpoint lacks weights the
        model needs (transformers would initialise them at random and only log it: a model of another architecture,
        a damaged or partial file), whose tokenizer encodes no text (its files missing) or encodes plain text to ids
        the model does not embed, and for a CUDA device where this torch has none. Weights in the file that the
        model does not use only warn.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        import ragen_core.policy.tiny  # noqa: F401  (registers the tiny vision model type)

        if not os.path.isdir(path):
            raise ValueError(
                f"{path!s} is not a directory; HFPolicy loads local checkpoints only (no download)"
            )
        where = _usable_device(device)
        kwargs: dict[str, Any] = {"local_files_only": True, "trust_remote_code": trust_remote_code}
        torch_dtype = resolve_dtype(dtype)
        if torch_dtype is not None:
            kwargs["dtype"] = torch_dtype
        if attn_implementation is not None:
            kwargs["attn_implementation"] = attn_implementation
        model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
        check_loaded_weights(path, info)
        model.to(where)
        tokenizer = AutoTokenizer.from_pretrained(
            path, local_files_only=True, trust_remote_code=trust_remote_code
        )
        check_tokenizer_fits(path, tokenizer, model)
        return cls(model, tokenizer, eos_token_ids=eos_token_ids)

    def _default_eos_ids(self) -> list[int]:
        ids: list[int] = []
        if self.tokenizer.eos_token_id is not None:
            ids.append(int(self.tokenizer.eos_token_id))
        gen_cfg = getattr(self.model, "generation_config", None)
        gen_eos = getattr(gen_cfg, "eos_token_id", None)
        if gen_eos is not None:
            ids.extend([gen_eos] if isinstance(gen_eos, int) else list(gen_eos))
        vocab = self.tokenizer.get_vocab()
        for name in ("<|im_end|>", "<|endoftext|>"):
            if name in vocab:
                ids.append(int(vocab[name]))
        return ids

    # ------------------------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def supports_images(self) -> bool:
        return self._image_token_id is not None

    @property
    def vocab_size(self) -> int | None:
        """The number of token ids the model embeds (valid ids are ``[0, vocab_size)``; None when unknown)."""
        return model_vocab_size(self.model)

    def encode_chat(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of a chat; with `add_generation_prompt` they end with the assistant header.

        Each `image_token` in a message becomes `image_seq_len` image tokens (vision models only). `messages` must
        be a non-empty list (or tuple) of ``{"role": str, "content": str}`` dicts: TypeError / ValueError otherwise.
        """
        if not isinstance(messages, (list, tuple)):
            hint = " (wrap one message in a list: [message])" if isinstance(messages, dict) else ""
            raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__} "
                            f"{messages!r:.60}{hint}")
        if not messages:
            raise ValueError("messages is empty; a chat needs at least one {'role', 'content'} message")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {m!r}")
            if not isinstance(m["role"], str) or not isinstance(m["content"], str):
                # the chat template would fail inside Jinja, saying a key that is there is missing
                raise ValueError(f"message {i}: 'role' and 'content' must be strings, got role {m['role']!r} "
                                 f"and content of type {type(m['content']).__name__}")
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": m["role"], "content": m["content"]} for m in messages],
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )
        else:
            text = "".join(FALLBACK_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages)
            if add_generation_prompt:
                text += FALLBACK_GENERATION_PROMPT
        if self.image_token is not None and self._image_seq_len > 1:
            text = text.replace(self.image_token, self.image_token * self._image_seq_len)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def pad(
        self, sequences: Sequence[Sequence[int]], side: str = "right"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`pad_batch` with this policy's pad id, on its device (ids outside the vocabulary are a ValueError)."""
        sequences = token_id_lists("sequences", sequences, self.vocab_size)
        return pad_batch(sequences, self.pad_token_id, side=side, device=self.device)

    def _fast_model(self) -> FastQwen2 | None:
        """The lean forward of the current `self.model` (the trainer may swap models, e.g. a reference copy),
        or None when it is off or the model does not fit it."""
        if not self.fast or unsupported_reason(self.model) is not None:
            return None
        if self._fast_cache is None or self._fast_cache.model is not self.model:
            self._fast_cache = FastQwen2(self.model)
        self._fast_cache.fused_training = bool(self.fused_training)
        return self._fast_cache

    def _position_limit(self) -> int | None:
        """:func:`learned_position_limit` of the current `self.model` (found once per model: the trainer may swap
        models)."""
        if self._positions is None or self._positions[0] is not self.model:
            self._positions = (self.model, learned_position_limit(self.model))
        return self._positions[1]

    def _check_positions(self, tokens: int, what: str) -> None:
        """ValueError, before the model runs, when `what` needs more positions (`tokens` tokens given to the model
        at once) than its learned position table has; models that compute their positions take any length."""
        limit = self._position_limit()
        if limit is not None and tokens > limit:
            raise ValueError(f"{what} needs {tokens} positions, but {type(self.model).__name__} embeds only {limit} "
                             f"(a learned position table: config max_position_embeddings = {limit}); shorten it")

    def cross_score(
        self, prompts: Sequence[Sequence[int]], traces: Sequence[Sequence[Sequence[int]]], batch_tokens: int = 8192
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L [P, G, P], lengths [P, G])`` of :func:`ragen_core.math.mi.cross_score` (`return_lengths=True`) for
        token-id prompts and traces: on the lean forward where the model allows it, else that function. Ids outside
        the vocabulary are a ValueError, entries that are not token ids a TypeError; so are, on either path, traces
        that are not one group per prompt of G >= 1 traces each, and (models with a learned position table) a
        longest prompt + longest trace past its positions."""
        vocab = self.vocab_size
        token_id_lists("prompts", prompts, vocab)
        if isinstance(traces, (str, bytes)) or not isinstance(traces, (Sequence, torch.Tensor)):
            raise TypeError(f"traces must be P groups of token-id lists, got {type(traces).__name__}")
        for i, group in enumerate(traces):
            token_id_lists(f"traces[{i}]", group, vocab)
        if len(prompts) and len(traces) != len(prompts):  # the same rule and words on both paths as mi's
            raise ValueError(f"traces must hold one group per prompt (P={len(prompts)} groups); got {len(traces)}")
        sizes = {len(group) for group in traces}
        if len(sizes) > 1 or 0 in sizes:
            raise ValueError(f"every prompt group needs the same number G >= 1 of traces; got sizes {sorted(sizes)}")
        self._refuse_image_tokens(prompts, traces)
        longest = max((len(z) for group in traces for z in group), default=0)
        if len(prompts) and longest:  # every trace is scored after every prompt, with all its tokens fed
            self._check_positions(max(len(x) for x in prompts) + longest,
                                  f"cross-scoring the longest prompt ({max(len(x) for x in prompts)} tokens) with the "
                                  f"longest trace ({longest} tokens)")
        fast = self._fast_model()
        was_training = self.model.training
        self.model.eval()
        try:
            if fast is not None and prompts and all(len(x) for x in prompts):
                return fast.cross_score(prompts, traces, batch_tokens=batch_tokens)
            from ragen_core.math.mi import cross_score

            return cross_score(self.model, prompts, traces, batch_tokens=batch_tokens, return_lengths=True)
        finally:
            self.model.train(was_training)

    # ---------------------------------------------------------------------------------- images
    def _refuse_image_tokens(self, prompts: Sequence[Sequence[int]], traces: Sequence[Sequence[Sequence[int]]]) -> None:
        """ValueError when a vision model is asked to cross-score a prompt or trace holding its image token:
        cross-scoring takes no pictures, so the image tokens would keep their bare embedding and the scores would be
        those of another input (the trainer, the probe and `ragen diagnose` skip or refuse such batches)."""
        if self._image_token_id is None:
            return
        tok = int(self._image_token_id)
        for what, seqs in (("prompt", prompts), *((f"trace of group {i}", g) for i, g in enumerate(traces))):
            for j, seq in enumerate(seqs):
                if tok in (seq.tolist() if isinstance(seq, torch.Tensor) else list(seq)):
                    raise ValueError(f"cross_score: {what} {j} holds the image token {self.image_token!r}; "
                                     "cross-scoring takes no images, so it would score that input without its "
                                     "picture (vision prompts cannot be cross-scored)")

    def _image_kwargs(self, images: Sequence[ImageList] | None, batch: int, input_ids: torch.Tensor) -> dict:
        """Validate per-sequence image lists and turn them into the model's `pixel_values`.

        For a vision model the number of image tokens of every sequence must be
        `len(images[b]) * image_seq_len` (`images=None` means no images anywhere).
        """
        per_seq = per_sequence_images(images, batch) or [[] for _ in range(batch)]
        flat = [img for imgs in per_seq for img in imgs]
        if not self.supports_images:
            if flat:
                raise ValueError(
                    f"{type(self.model).__name__} is a text-only model; got {len(flat)} images "
                    "(use a model built with build_tiny_model(..., vision=True))"
                )
            return {}
        counts = (input_ids == self._image_token_id).sum(-1).tolist()
        for b, imgs in enumerate(per_seq):
            want = len(imgs) * self._image_seq_len
            if counts[b] != want:
                raise ValueError(
                    f"sequence {b} has {counts[b]} image tokens ({self._image_seq_len} per image) but {len(imgs)} "
                    f"image(s) were given for it, which need {want}; give one image per policy.image_token placed "
                    "in its messages, in order"
                )
        if not flat:
            return {}
        return {"pixel_values": self.model.prepare_pixel_values(flat)}

    # ------------------------------------------------------------------------------- generation
    def _forward(self, input_ids, attention_mask, position_ids, cache, last_only: bool, **extra):
        kwargs = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **extra,
        )
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if last_only and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(**kwargs)
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits[:, -1, :], new_cache

    @torch.no_grad()
    def _sample(self, prompts: list[list[int]], request: SamplingRequest) -> list[Generation]:
        """`Policy.generate` after its checks: batched, left-padded, KV-cached (module docstring)."""
        r = request
        images = per_sequence_images(r.images, len(prompts))
        longest = max(len(p) for p in prompts)  # the last new token is never fed back
        self._check_positions(longest + r.max_new_tokens - 1,
                              f"generating max_new_tokens={r.max_new_tokens} after a prompt of {longest} tokens")
        was_training = self.model.training
        self.model.eval()
        try:
            fast = self._fast_model() if not any(images or []) else None
            if fast is not None:
                return self._generate_fast(
                    fast, prompts, r.max_new_tokens, r.temperature, r.top_p, r.stop, r.generator, r.greedy
                )
            return self._generate(
                prompts, r.max_new_tokens, r.temperature, r.top_p, r.stop, r.generator, images, r.greedy
            )
        finally:
            self.model.train(was_training)

    def _generate(self, prompts, max_new_tokens, temperature, top_p, stop, generator, images, greedy):
        B = len(prompts)
        device = self.device
        input_ids, attn = pad_batch(prompts, self.pad_token_id, side="left", device=device)
        extra = self._image_kwargs(images, B, input_ids)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(input_ids, attn, positions, None, True, **extra)

        dec = _Decoding(prompts, stop)
        next_tok = torch.full((B,), self.pad_token_id, dtype=torch.long, device=device)
        for step in range(max_new_tokens):
            tokens, lps = sample_from_logits(
                logits, temperature=temperature or 1.0, top_p=top_p, greedy=greedy, generator=generator
            )
            tok_list, lp_list = tokens.tolist(), lps.tolist()
            dec.active = [b for b in dec.active if self._take_token(dec, b, tok_list[b], lp_list[b], True)]
            if not dec.active or step == max_new_tokens - 1:
                break
            # finished rows keep being fed (the pad id) so the batch stays rectangular; ignored
            next_tok.fill_(self.pad_token_id)
            next_tok[dec.active] = tokens[dec.active]
            attn = torch.cat([attn, attn.new_ones((B, 1))], dim=1)
            positions = positions[:, -1:] + 1
            logits, cache = self._forward(next_tok[:, None], attn, positions, cache, True)
        return self._generations(dec)

    def _generate_fast(self, fast, prompts, max_new_tokens, temperature, top_p, stop, generator, greedy):
        """:meth:`_generate` on the lean forward: each distinct prompt is computed once, and each step computes
        only the rows still generating. The draws are :meth:`_generate`'s (one uniform per sequence per step,
        finished ones included), so the same logits give the same tokens."""
        B = len(prompts)
        device = self.device
        state = fast.start_decoding(prompts, max_new_tokens, self.pad_token_id)
        dec = _Decoding(prompts, stop)
        may_stop = self._stop_completing_tokens(stop)
        logits = state.step(torch.arange(B, device=device), state.next_tokens)
        for step in range(max_new_tokens):
            u = None if greedy else draw_uniform(B, generator, device)
            rows = torch.tensor(dec.active, device=device)
            tokens, lps = sample_from_logits(
                logits, temperature=temperature or 1.0, top_p=top_p, greedy=greedy, generator=generator,
                uniform=None if u is None else u[rows],
            )
            tok_list, lp_list = tokens.tolist(), lps.tolist()
            still, fed = [], []
            for j, b in enumerate(dec.active):
                t = tok_list[j]
                if self._take_token(dec, b, t, lp_list[j], may_stop is None or t in may_stop):
                    still.append(b)
                    fed.append(t)
            dec.active = still
            if not dec.active or step == max_new_tokens - 1:
                break
            logits = state.step(torch.tensor(dec.active, device=device), torch.tensor(fed, device=device))
        return self._generations(dec)

    def _take_token(self, dec: _Decoding, b: int, token: int, logprob: float, may_stop: bool) -> bool:
        """Row `b` of a decoding takes a sampled token; False when the row is finished: at an EOS id (not part of
        the response), or when the token completes a stop string (checked only where `may_stop`)."""
        if token in self.eos_token_ids:
            dec.reasons[b] = "stop"
            return False
        dec.responses[b].append(token)
        dec.logprobs[b].append(logprob)
        if dec.stop and may_stop:
            tail = self.tokenizer.decode(dec.responses[b][-dec.window:], skip_special_tokens=True)
            if any(s in tail for s in dec.stop):
                dec.reasons[b] = "stop"
                dec.texts[b] = cut_at_stop(self.decode(dec.responses[b]), dec.stop)
                return False
        return True

    def _generations(self, dec: _Decoding) -> list[Generation]:
        """The finished decoding as one `Generation` per prompt (the text cut at a stop string, else decoded)."""
        return [
            Generation(
                text=text if text is not None else self.decode(response),
                prompt_ids=prompt,
                response_ids=response,
                response_logprobs=logprobs,
                finish_reason=reason,
            )
            for prompt, response, logprobs, text, reason in zip(dec.prompts, dec.responses, dec.logprobs, dec.texts,
                                                                 dec.reasons)
        ]

    def _stop_completing_tokens(self, stop: Sequence[str]) -> frozenset[int] | None:
        """The token ids that can complete a stop string: those whose text holds a stop string's last character,
        or is a partial character ('\ufffd' alone). Only such a token can make a stop string appear in the decoded
        tail for the first time, so the others need no decode. None (check every token) when the tokenizer
        rewrites text across tokens (`clean_up_tokenization_spaces`) or a stop string ends in whitespace."""
        key = tuple(stop)
        if key not in self._stop_tokens:
            lasts = {s[-1] for s in stop}
            if getattr(self.tokenizer, "clean_up_tokenization_spaces", False) or any(c.isspace() for c in lasts):
                self._stop_tokens[key] = None
            else:
                ids = set()
                for i in range(len(self.tokenizer)):
                    text = self.tokenizer.decode([i], skip_special_tokens=True)
                    if "\ufffd" in text or any(c in text for c in lasts):
                        ids.add(i)
                self._stop_tokens[key] = frozenset(ids)
        return self._stop_tokens[key]

    # ------------------------------------------------------------------------------- scoring
    def _check_scoring_inputs(
        self,
        input_ids: Any,
        attention_mask: Any,
        score_mask: Any,
        temperature: Any,
        images: Sequence[ImageList] | None,
    ) -> torch.Tensor | None:
        """Validate :meth:`forward_logprobs`' inputs (its docstring lists the errors); return `score_mask` as a
        bool tensor (None stays None). The value checks read the tensors once (one device sync)."""
        for name, x in (("input_ids", input_ids), ("attention_mask", attention_mask), ("score_mask", score_mask)):
            if x is not None and not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor [B, T] (see pad()), got {type(x).__name__}")
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must be an integer tensor of token ids, got dtype {input_ids.dtype}")
        if input_ids.ndim != 2 or input_ids.shape != attention_mask.shape:
            raise ValueError(
                f"input_ids and attention_mask must both be [B, T]; got {tuple(input_ids.shape)} and "
                f"{tuple(attention_mask.shape)}"
            )
        if input_ids.shape[1] == 0:
            raise ValueError(f"input_ids has 0 columns (T = 0), shape {tuple(input_ids.shape)}; every sequence needs "
                             "at least one token")
        if score_mask is not None and score_mask.shape != input_ids.shape:
            raise ValueError(f"score_mask must be [B, T] = {list(input_ids.shape)} like input_ids, got "
                             f"{list(score_mask.shape)}")
        if not (is_number(temperature) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
        if images is not None and len(images) != input_ids.shape[0]:
            raise ValueError(f"images must have one list per sequence ({input_ids.shape[0]}), got {len(images)}")
        if input_ids.numel() == 0:
            return None if score_mask is None else score_mask.bool()
        vocab = self.vocab_size
        checks = [((attention_mask != 0) & (attention_mask != 1)).any()]
        if vocab is not None:
            checks.append(((input_ids < 0) | (input_ids >= vocab)).any())
        if score_mask is not None and score_mask.dtype != torch.bool:
            checks.append(((score_mask != 0) & (score_mask != 1)).any())
        bad = torch.stack([c.to(input_ids.device) for c in checks]).tolist()
        if bad[0]:
            raise ValueError("attention_mask must hold only 0/1 (1 on real tokens), got values "
                             f"{sorted(set(attention_mask.unique().tolist()))[:8]}")
        if vocab is not None and bad[1]:
            b, t = ((input_ids < 0) | (input_ids >= vocab)).nonzero()[0].tolist()
            raise ValueError(f"input_ids must hold token ids in [0, {vocab}) (the model's vocabulary, padding "
                             f"included); got {int(input_ids[b, t])} at [{b}, {t}]")
        if score_mask is not None and score_mask.dtype != torch.bool:
            if bad[-1]:
                raise ValueError(f"score_mask must hold only 0/1 (or be bool), got values "
                                 f"{sorted(set(score_mask.unique().tolist()))[:8]}")
            score_mask = score_mask != 0
        return score_mask

    def _empty_scores(self, t: int, with_entropy: bool, with_hidden: bool) -> PolicyOutput:
        """The :class:`PolicyOutput` of a batch of no rows and `t` columns: empty `[0, t]` tensors (and an empty
        `[0, t, H]` hidden state when asked)."""
        zeros = torch.zeros(0, t, dtype=torch.float32, device=self.device)
        extras: dict[str, Any] = {}
        if with_hidden:
            emb = self.model.get_input_embeddings().weight
            extras["hidden"] = emb.new_zeros(0, t, emb.shape[1])
        return PolicyOutput(logprobs=zeros, entropy=zeros.clone() if with_entropy else None, extras=extras)

    def forward_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        images: Sequence[ImageList] | None = None,
        with_entropy: bool = False,
        temperature: float = 1.0,
        with_hidden: bool = False,
        score_mask: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """Teacher-forced log-probs (and entropies) of a padded batch `[B, T]`, with grad.

        With logits `z[b, t-1]` (float32, divided by `temperature`) predicting position t:

            logprobs[b, t] = z[b, t-1, x_t] - logsumexp(z[b, t-1])                  (0 at t = 0 and padding)
            entropy[b, t]  = logsumexp(z) - sum_v softmax(z)_v z_v  of z[b, t-1]     (same zeros)

        (the entropy form avoids log 0; -inf logits are clamped to the float32 minimum first).
        Right padding is the documented layout; left padding gives the same values, since positions
        are `cumsum(attention_mask) - 1`.

        Args:
            input_ids, attention_mask: `[B, T]` long (mask 1 on real tokens).
            images: one list of images per sequence (vision models), as in `generate`.
            with_entropy: also return `entropy`.
            temperature: divide the logits first (to score the sampling distribution of a
                temperature-T rollout without top-p).
            with_hidden: put the last layer's hidden states `[B, T, H]` in `extras["hidden"]`
                (for a value head).
            score_mask: `[B, T]` bool (or 0/1 of any dtype), the positions whose log-prob (and entropy) are
                needed; the others are 0. Right-padded batches of models the lean forward runs
                (`ragen_core.policy.fast_qwen2`) then compute only what those positions need.

        Bad inputs raise before the model runs (:meth:`_check_scoring_inputs`): a ValueError for a shape other than
        `[B, T]` with T >= 1, a mask value other than 0/1, an id outside ``[0, vocab_size)``, a temperature that is
        not a finite number > 0 or an image list per sequence that does not match B, a sequence longer than the
        positions of a learned position table (GPT-2's; :func:`learned_position_limit`); a TypeError for a
        non-tensor or non-integer `input_ids`. A batch of B = 0 rows scores to empty `[0, T]` tensors.
        """
        score_mask = self._check_scoring_inputs(input_ids, attention_mask, score_mask, temperature, images)
        images = per_sequence_images(images, input_ids.shape[0])
        if input_ids.shape[0] == 0:
            return self._empty_scores(input_ids.shape[1], with_entropy, with_hidden)
        if self._position_limit() is not None:  # (a device sync only for models with a position table)
            self._check_positions(int(attention_mask.sum(-1).max()),
                                  "input_ids: the longest sequence (its attention_mask's 1s)")
        device = self.device
        input_ids = input_ids.to(device)
        attention_mask = attention_mask.to(device).long()
        fast = None if (with_hidden or any(images or [])) else self._fast_model()
        if fast is not None and not bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any()):
            logprobs, entropy = fast.token_logprobs(
                input_ids, attention_mask, score_mask, temperature=temperature, with_entropy=with_entropy,
                pad_id=self.pad_token_id,
            )
            return PolicyOutput(logprobs=logprobs, entropy=entropy, extras={})
        extra = self._image_kwargs(images, input_ids.shape[0], input_ids)
        if with_hidden:
            extra["output_hidden_states"] = True
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=False,
            **extra,
        )
        z = out.logits[:, :-1].float()
        if temperature != 1.0:
            z = z / temperature
        z = z.clamp(min=torch.finfo(torch.float32).min)
        lse = torch.logsumexp(z, -1)  # [B, T-1]
        valid = (attention_mask[:, 1:] * attention_mask[:, :-1]).to(z.dtype)
        tok_lp = (z.gather(-1, input_ids[:, 1:, None]).squeeze(-1) - lse) * valid
        zeros = tok_lp.new_zeros(input_ids.shape[0], 1)
        logprobs = torch.cat([zeros, tok_lp], dim=1)
        entropy = None
        if with_entropy:
            ent = (lse - (torch.softmax(z, -1) * z).sum(-1)) * valid
            entropy = torch.cat([zeros, ent], dim=1)
        if score_mask is not None:
            keep = score_mask.to(logprobs.device).to(logprobs.dtype)  # bool: 1.0 where kept
            logprobs = logprobs * keep
            entropy = entropy * keep if entropy is not None else None
        extras: dict[str, Any] = {}
        if with_hidden:
            extras["hidden"] = out.hidden_states[-1]
        return PolicyOutput(logprobs=logprobs, entropy=entropy, extras=extras)


def _usable_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device, refused with its reason when this torch cannot use it (a CUDA device without
    CUDA raised an AssertionError deep in torch, after the weights were loaded)."""
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r} ({err})") from None
    if where.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this torch ({torch.__version__}) has no usable CUDA device; "
                             "use device='cpu'")
        if where.index is not None and where.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return where


def check_loaded_weights(path: str | os.PathLike, info: dict[str, Any]) -> None:
    """Refuse a checkpoint that left parameters at their random initialisation; warn of weights it did not use."""
    missing = list(info.get("missing_keys") or [])
    if missing:
        shown = ", ".join(sorted(missing)[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"{path!s}: the checkpoint lacks {len(missing)} weight(s) the model needs ({shown}); "
                         "transformers would initialise them at random. Is the folder complete, and is its "
                         "config.json the architecture its weights were saved from?")
    unexpected = list(info.get("unexpected_keys") or [])
    if unexpected:
        warnings.warn(f"{path!s}: {len(unexpected)} weight(s) in the checkpoint are not used by the model "
                      f"({', '.join(sorted(unexpected)[:5])})", stacklevel=3)


def check_tokenizer_fits(path: str | os.PathLike, tokenizer: Any, model: Any) -> None:
    """Refuse a tokenizer that encodes no text (an empty vocabulary: its files are missing) or that encodes plain
    text to ids the model cannot embed. (A tokenizer with a few more entries than the embedding, special tokens
    never fed, is common and allowed: every entry point checks the ids it is given.)"""
    ids = tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"{path!s}: the tokenizer encodes no text (a vocabulary of {len(tokenizer)}): are its files "
                         "(tokenizer.json, or vocab.json and merges.txt) missing from the folder?")
    rows = model_vocab_size(model)
    if rows is not None and max(ids) >= rows:
        raise ValueError(f"{path!s}: the tokenizer encodes plain text to id {max(ids)} but the model embeds only "
                         f"{rows} ids; they are not a pair")
