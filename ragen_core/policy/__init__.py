"""Policies: the `Policy` protocol and its backends.

- `HFPolicy`: any transformers causal LM from a local directory (`HFPolicy.from_pretrained`).
- `build_tiny_model` / `default_tiny_model_dir`: the tiny offline model (text or vision) that loads
  through the same path; `load_policy` builds/loads it in one call.
- `default_tiny_base_dir` (`ragen_core.policy.tiny_base`): the tiny model pre-trained to copy and look up
  ("tiny-base"), built once per machine (about 28 CPU-minutes) and cached.
- `VLLMPolicy` (optional extra `vllm`, GPU only): `from ragen_core.policy.vllm import VLLMPolicy`;
  importing this package never imports vllm.
"""

from __future__ import annotations

import os

import torch

from ragen_core.policy.base import Generation, ImageList, Policy, PolicyOutput
from ragen_core.policy.hf import HFPolicy, pad_batch, sample_from_logits
from ragen_core.policy.tiny import build_tiny_model, default_tiny_model_dir
from ragen_core.policy.tiny_base import default_tiny_base_dir

#: Special values of `load_policy`'s `path` that build (or reuse) the cached tiny model.
TINY = "tiny"
TINY_VISION = "tiny-vision"
#: The tiny model pre-trained on generated copy / lookup / grid / chat text (`ragen_core.policy.tiny_base`).
TINY_BASE = "tiny-base"
#: Every special value of `load_policy`'s `path`.
TINY_PATHS = (TINY, TINY_VISION, TINY_BASE)


def load_policy(
    path: str | os.PathLike = TINY,
    *,
    backend: str = "hf",
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
    **kwargs,
) -> Policy:
    """Load a policy by path; `"tiny"` / `"tiny-vision"` / `"tiny-base"` mean a cached tiny model (built on first use).

    Args:
        path: a local model directory, or "tiny" / "tiny-vision" (the tiny model, random weights) or "tiny-base" (the
            tiny model pre-trained to copy and look up: `ragen_core.policy.tiny_base`; its first use on a machine
            builds it, about 28 CPU-minutes).
        backend: "hf" (`HFPolicy`) or "vllm" (`VLLMPolicy`, GPU only, optional extra).
        device, dtype: as in `HFPolicy.from_pretrained`.
        kwargs: passed to the backend's `from_pretrained` (e.g. `cache_dir` is not accepted here;
            call `default_tiny_model_dir(cache_dir)` and pass its path).
    """
    if str(path) in (TINY, TINY_VISION):
        path = default_tiny_model_dir(vision=str(path) == TINY_VISION)
    elif str(path) == TINY_BASE:
        path = default_tiny_base_dir()
    if backend == "hf":
        return HFPolicy.from_pretrained(path, device=device, dtype=dtype, **kwargs)
    if backend == "vllm":
        from ragen_core.policy.vllm import VLLMPolicy

        return VLLMPolicy.from_pretrained(path, device=device, dtype=dtype, **kwargs)
    raise ValueError(f"backend must be 'hf' or 'vllm', got {backend!r}")


__all__ = [
    "TINY",
    "TINY_BASE",
    "TINY_PATHS",
    "TINY_VISION",
    "Generation",
    "HFPolicy",
    "ImageList",
    "Policy",
    "PolicyOutput",
    "build_tiny_model",
    "default_tiny_base_dir",
    "default_tiny_model_dir",
    "load_policy",
    "pad_batch",
    "sample_from_logits",
]
