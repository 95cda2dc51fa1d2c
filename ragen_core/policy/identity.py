"""Which weights a model holds: one hash, so that a rollouts file can name the policy that sampled it and a scorer
can tell whether it is that policy.

    weights_sha256(model) -> "3f1c..."     SHA-256 over every parameter and buffer, by name, in name order

The hash covers each tensor's name, dtype, shape and bytes (on the CPU, contiguous), so the same weights give the
same hash in any process and any device, and a single changed value gives another. Models of more than
FULL_HASH_PARAMETERS parameters (real LLMs, hashed every training step by the trainer) hash the first
SAMPLE_BYTES bytes of each tensor instead: a fingerprint against mix-ups, not against deliberate collisions.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = ["FULL_HASH_PARAMETERS", "SAMPLE_BYTES", "weights_sha256"]

FULL_HASH_PARAMETERS = 50_000_000
SAMPLE_BYTES = 1 << 16


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 (hex) of `model`'s state dict (module docstring). Tied weights count once per name."""
    h = hashlib.sha256()
    state = model.state_dict()
    full = sum(t.numel() for t in state.values()) <= FULL_HASH_PARAMETERS
    for name, tensor in sorted(state.items()):
        t = tensor.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if not t.numel():
            continue
        flat = t.reshape(-1)
        if not full:
            flat = flat[: max(1, SAMPLE_BYTES // t.element_size())]
        h.update(flat.to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
