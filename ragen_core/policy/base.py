"""The `Policy` protocol: what the rollout and the trainer need from a language-model backend.

Backends (`HFPolicy`, the tiny offline model, `VLLMPolicy`) implement it; everything above
(rollouts, trainer, cross-scoring) talks to this interface only.

Token conventions:
- A *prompt* is a list of token ids that ends with the assistant header of the chat template
  (what `encode_chat(messages)` returns); a *response* is the ids generated after it.
- `forward_logprobs` scores full sequences: `logprobs[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`
  for t >= 1 and 0 at t = 0, so a response token's log-prob sits at the token's own position.
- Images (vision envs) travel as one list of uint8 HxWx3 arrays per sequence, in the order they
  occur in the conversation; text-only backends reject non-empty image lists with a ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ragen_core.limits import max_new_tokens_problem, model_positions
from ragen_envs.validation import require_bool

ImageList = list[np.ndarray]


@dataclass
class Generation:
    """One sampled response.

    Attributes:
        text: decoded response (special tokens removed), ending at the stop string if one was hit.
        prompt_ids: the prompt's token ids.
        response_ids: generated token ids (the stop string's tokens included, EOS excluded).
        response_logprobs: log-prob of each generated token under the sampling distribution
            (after temperature / top-p), same length as `response_ids`; for greedy decoding, the
            model's log-prob at temperature 1.
        finish_reason: "stop" (stop string or EOS) or "length" (max_new_tokens reached).
    """

    text: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    finish_reason: str


@dataclass
class PolicyOutput:
    """Teacher-forced scores of a padded batch, all `[B, T]` float32.

    `logprobs[b, t]` = log p(input_ids[b, t] | prefix) (0 at t = 0 and at padding);
    `entropy[b, t]` = entropy of the next-token distribution that produced position t
    (None unless requested).
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SamplingRequest:
    """The checked arguments of :meth:`Policy.generate`, as a backend's ``_sample(prompts, request)`` gets them.

    Attributes:
        max_new_tokens, temperature, top_p, generator, images: as passed to `generate`.
        stop: the non-empty stop strings, as a tuple.
        greedy: argmax decoding: asked for, or ``temperature == 0``.
    """

    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    generator: torch.Generator | None
    images: Sequence[ImageList] | None
    greedy: bool


@runtime_checkable
class Policy(Protocol):
    """The interface every backend implements (see the module docstring for conventions).

    A backend that subclasses it inherits :meth:`generate` (the argument checks, one contract for every backend)
    and implements ``_sample(prompts, request: SamplingRequest) -> list[Generation]`` for a non-empty batch of
    checked prompts; any other object with these members is a `Policy` too.
    """

    #: The `torch.nn.Module` the trainer optimises (a transformers causal LM or compatible).
    model: torch.nn.Module
    #: A transformers tokenizer (pad/eos ids set; `decode`, `__call__`).
    tokenizer: Any
    #: Whether the backend may use its lean forward where the model allows it (`HFPolicy`: True by default); set by
    #: the trainer from `model.fast_forward`. A backend without a lean forward ignores it (this default, False).
    fast: bool = False
    #: Train the lean forward's layers through fused kernels (:mod:`ragen_core.policy.fused_train`), set by the
    #: trainer from `model.fused_training`; backends without a lean forward ignore it.
    fused_training: bool = False

    @property
    def device(self) -> torch.device: ...

    def encode_chat(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a chat (list of {"role", "content"}), ending with the assistant header."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] = ("</answer>",),
        generator: torch.Generator | None = None,
        images: Sequence[ImageList] | None = None,
        greedy: bool = False,
    ) -> list[Generation]:
        """Sample one response per prompt (batched, KV-cached).

        Args:
            prompts: token-id lists (from `encode_chat`; 1-D integer tensors / arrays too), each non-empty, every id
                in ``[0, vocab size)``.
            max_new_tokens: per response, >= 1 and at most the model's positions (its ``max_position_embeddings``,
                when its config says: :mod:`ragen_core.limits`; the prompt is not counted).
            temperature: a finite number > 0 for sampling (0 is accepted and means greedy).
            top_p: nucleus mass in (0, 1].
            stop: stop strings (or one string), matched on the decoded response; empty strings are ignored.
            generator: None or a torch.Generator for the draws (same generator state -> same samples).
            images: one list of uint8 HxWx3 arrays per prompt (vision models).
            greedy: argmax decoding (True or False).

        Bad arguments raise ValueError (a value out of range) or TypeError (a value of the wrong kind), naming the
        argument, before anything is computed. No prompts (an empty list) give no generations (an empty list).
        """
        model = getattr(self, "model", None)
        prompts = check_generate_args(prompts, max_new_tokens, temperature, top_p, vocab_size=model_vocab_size(model),
                                      positions=model_positions(getattr(model, "config", None)))
        check_generator(generator)
        greedy = require_bool("greedy", greedy)
        if not prompts:
            return []
        stop = stop_strings(stop)
        if images is not None and len(images) != len(prompts):  # checked here, whichever path decodes
            raise ValueError(f"images must have one list per sequence ({len(prompts)}), got {len(images)}")
        request = SamplingRequest(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                  stop=stop, generator=generator, images=images,
                                  greedy=greedy or temperature == 0)
        return self._sample(prompts, request)

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
        """Teacher-forced log-probs (and entropies) of a right-padded batch `[B, T]`, with grad.

        Args:
            input_ids, attention_mask: `[B, T]` long (mask 1 on real tokens).
            images: one list of uint8 HxWx3 arrays per sequence (vision models), as in `generate`.
            with_entropy: also return `entropy` `[B, T]`.
            temperature: divides the logits first (scores a temperature-T rollout without top-p).
            with_hidden: put the last layer's hidden states `[B, T, H]` in `extras["hidden"]` (for a value head).
            score_mask: `[B, T]` bool, the positions whose log-prob (and entropy) the caller reads (the trainer's
                loss mask, the warm start's, the probe's reasoning span); the others come back 0, and a backend may
                skip computing them. None: every position.
        """
        ...


def stop_strings(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """Stop strings as a tuple without empty ones: one string is one stop string (not its characters), None is
    none; anything but strings is a TypeError naming the bad entry."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    stops = tuple(stop)
    bad = [s for s in stops if not isinstance(s, str)]
    if bad:
        raise TypeError(f"stop strings must be str; got {bad[0]!r} ({type(bad[0]).__name__})")
    return tuple(s for s in stops if s)


def is_number(value: object) -> bool:
    """A real number that is not a bool (`top_p=True` is a mistake, not 1.0)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def model_vocab_size(model: Any) -> int | None:
    """The number of token ids `model` can embed (its input embedding's rows), or None when it cannot tell."""
    get = getattr(model, "get_input_embeddings", None)
    try:
        emb = get() if callable(get) else None
    except (NotImplementedError, AttributeError):  # a model without an input embedding of its own
        emb = None
    weight = getattr(emb, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.ndim == 2:
        return int(weight.shape[0])
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else None


def _integer_dtype(dtype: torch.dtype) -> bool:
    """An integer torch dtype (not bool, not floating, not complex)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _id_row(name: str, i: int, row: Any) -> list[int]:
    """Row `i` of the token-id lists `name` as a list of Python ints; TypeError for anything else."""
    if isinstance(row, (torch.Tensor, np.ndarray)):
        integer = np.issubdtype(row.dtype, np.integer) if isinstance(row, np.ndarray) else _integer_dtype(row.dtype)
        if row.ndim != 1 or not integer:
            raise TypeError(f"{name} must be token-id lists; entry {i} is a {row.ndim}-D {row.dtype} "
                            f"{type(row).__name__} (a 1-D integer one is accepted)")
        return row.tolist()
    if isinstance(row, (str, bytes, dict)) or not isinstance(row, Iterable):
        hint = " (one prompt goes in a list: [prompt])" if is_number(row) else ""
        raise TypeError(f"{name} must be a list of token-id lists (one per sequence); entry {i} is "
                        f"{type(row).__name__} {row!r:.40}{hint}")
    ids = list(row)
    if all(type(x) is int for x in ids):  # the common case, checked fast
        return ids
    out = []
    for j, x in enumerate(ids):
        if isinstance(x, np.integer) or (isinstance(x, torch.Tensor) and x.ndim == 0 and _integer_dtype(x.dtype)):
            x = int(x)
        if type(x) is not int:
            raise TypeError(f"{name} must hold integer token ids; entry {i} has {x!r} ({type(x).__name__}) "
                            f"at position {j}")
        out.append(x)
    return out


def token_id_lists(name: str, seqs: Any, vocab_size: int | None = None) -> list[list[int]]:
    """`seqs` (token-id lists, or 1-D integer tensors / arrays, or a 2-D integer tensor) as lists of Python ints.

    TypeError names `name` for a string, a flat list of ids or an entry that is not an integer (a float id used to
    be truncated to an int); ValueError for an id outside ``[0, vocab_size)`` (the embedding would raise an
    IndexError deep inside the model). Empty lists pass (the caller decides whether they may be empty).
    """
    if isinstance(seqs, (str, bytes, dict)) or not isinstance(seqs, Iterable):
        raise TypeError(f"{name} must be a list of token-id lists (one per sequence), got {type(seqs).__name__} "
                        f"{seqs!r:.40}")
    rows = [_id_row(name, i, row) for i, row in enumerate(seqs)]
    if vocab_size is not None:
        for i, ids in enumerate(rows):
            if ids and (min(ids) < 0 or max(ids) >= vocab_size):
                j, bad = next((j, x) for j, x in enumerate(ids) if not 0 <= x < vocab_size)
                raise ValueError(f"{name} must hold token ids in [0, {vocab_size}) (the model's vocabulary); entry "
                                 f"{i} has {bad} at position {j}")
    return rows


def check_generator(generator: Any) -> None:
    """TypeError unless `generator` is None or a `torch.Generator` (a seed or a numpy generator is not one)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator (torch.Generator().manual_seed(seed)), got "
                        f"{type(generator).__name__} {generator!r:.40}")


def check_generate_args(
    prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float, *,
    vocab_size: int | None = None, positions: int | None = None,
) -> list[list[int]]:
    """Validate the arguments of `Policy.generate` (one contract for every backend); return the prompts as lists of
    Python ints (:func:`token_id_lists`).

    Raises ValueError for `max_new_tokens` not an integer >= 1 or above the model's `positions` (when given: a
    decoding cache is laid out for prompt + max_new_tokens positions before the first token), `temperature` not a
    finite number >= 0 (0 means greedy), `top_p` not a number in (0, 1], an empty prompt or a token id outside
    ``[0, vocab_size)`` (when given), and TypeError for prompts that are not token-id lists.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    problem = max_new_tokens_problem("max_new_tokens", int(max_new_tokens), positions)
    if problem is not None:
        raise ValueError(problem)
    if not (is_number(temperature) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    if not (is_number(top_p) and 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
    prompts = token_id_lists("prompts", prompts, vocab_size)
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i} is empty; encode_chat() a conversation first")
    return prompts
