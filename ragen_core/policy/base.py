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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

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
            prompts: token-id lists (from `encode_chat`), each non-empty.
            max_new_tokens: per response, >= 1.
            temperature: > 0 for sampling (0 is accepted and means greedy).
            top_p: nucleus mass in (0, 1].
            stop: stop strings (or one string), matched on the decoded response; empty strings are ignored.
            generator: torch.Generator for the draws (same generator state -> same samples).
            images: one list of uint8 HxWx3 arrays per prompt (vision models).
            greedy: argmax decoding.
        """
        prompts = check_generate_args(prompts, max_new_tokens, temperature, top_p)
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


def check_generate_args(
    prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float
) -> list[list[int]]:
    """Validate the arguments of `Policy.generate` (one contract for every backend); return the prompts as lists.

    Raises ValueError for `max_new_tokens` not an integer >= 1, `temperature` < 0 (0 means greedy), `top_p`
    outside (0, 1], or an empty prompt.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    prompts = [list(p) for p in prompts]
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i} is empty; encode_chat() a conversation first")
    return prompts
