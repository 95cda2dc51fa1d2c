"""Which weights a model holds: one hash, so that a rollouts file can name the policy that sampled it and a scorer
can tell whether it is that policy.

    weights_sha256(model) -> "3f1c..."     SHA-256 over every parameter and buffer, by name, in name order

The hash covers each tensor's name, dtype, shape and bytes (on the CPU, contiguous), so the same weights give the
same hash in any process and any device, and a single changed value gives another.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = ["weights_sha256"]


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 (hex) of `model`'s state dict (module docstring). Tied weights count once per name."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
