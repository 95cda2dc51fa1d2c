"""A cache of warm-started weights, shared by runs that differ only after the warm start.

A study trains many variants of one config per seed (no filter, top-p, random drop, quartiles, ...). Their warm
starts are identical, since :func:`ragen_core.training.sft.warm_start` reads only the model, env, rollout and warm-start
sections and ``run.seed``, and it is the most expensive part of a small run (FrozenLake: 7 of 11 minutes). With
``warm_start.cache_dir`` set, the first run of a (config, seed) writes the warm-started weights and the SFT
metrics under a key that hashes everything the warm start reads; later runs load them instead of training.

A file lock per key makes concurrent runs of the same key wait for the first one rather than train twice.
The cache is on the local file system: runs on several machines need a shared folder (or no cache).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["cache_key", "cached_warm_start"]

#: Bump when the warm start's algorithm changes, so that stale weights are never reused.
_FORMAT = 1


def cache_key(cfg: Any) -> str:
    """Hex SHA-256 of every input of the warm start: model, env, rollout and warm-start sections, run.seed,
    run.device, the torch version, this cache's format and, for the built-in tiny model, its pinned identity (recipe
    and corpus versions, the recorded model digests), so that a new tiny model never reads an old warm start."""
    from ragen_core.policy.tiny import TINY_CORPUS_VERSION, TINY_FORMAT_VERSION, TINY_MODEL_SHA256

    inputs = {
        "format": _FORMAT,
        "torch": torch.__version__,
        "seed": cfg.run.seed,
        "device": cfg.run.device,
        "model": dataclasses.asdict(cfg.model),
        "env": dataclasses.asdict(cfg.env),
        "rollout": dataclasses.asdict(cfg.rollout),
        "warm_start": {k: v for k, v in dataclasses.asdict(cfg.warm_start).items() if k != "cache_dir"},
    }
    if str(cfg.model.path).startswith("tiny"):
        inputs["tiny"] = {"format": TINY_FORMAT_VERSION, "corpus": TINY_CORPUS_VERSION, "sha256": TINY_MODEL_SHA256}
    blob = json.dumps(inputs, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()


def cached_warm_start(policy: Any, cfg: Any, device: torch.device | None = None) -> dict[str, float]:
    """:func:`ragen_core.training.sft.warm_start`, through the cache in ``cfg.warm_start.cache_dir`` (empty: no cache).

    Returns the SFT metrics with ``sft/cached`` = 1.0 when the weights were loaded, 0.0 when trained here.
    The timing metrics of a hit are the loading time (``perf/sft_s``) and the original run's
    (``perf/sft_s_original``).
    """
    import time

    from ragen_core.training.sft import warm_start

    folder = str(cfg.warm_start.cache_dir or "")
    if not folder:
        return {**warm_start(policy, cfg, device=device), "sft/cached": 0.0}
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(cfg)
    path = root / f"{key}.pt"
    with _lock(root / f"{key}.lock"):
        if path.is_file():
            t0 = time.perf_counter()
            blob = torch.load(path, map_location="cpu", weights_only=True)
            policy.model.load_state_dict(blob["model"])
            metrics = {k: float(v) for k, v in blob["metrics"].items()}
            metrics["perf/sft_s_original"] = metrics.get("perf/sft_s", 0.0)
            metrics["perf/sft_s"] = time.perf_counter() - t0
            return {**metrics, "sft/cached": 1.0}
        metrics = warm_start(policy, cfg, device=device)
        state = {k: v.detach().to("cpu") for k, v in policy.model.state_dict().items()}
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"model": state, "metrics": metrics, "key": key}, tmp)
        os.replace(tmp, path)  # atomic: a reader sees the whole file or none
        return {**metrics, "sft/cached": 0.0}


class _lock:
    """An exclusive advisory lock on a file (fcntl; a no-op where fcntl does not exist)."""

    def __init__(self, path: Path):
        self.path = path
        self.handle = None

    def __enter__(self) -> _lock:
        try:
            import fcntl
        except ImportError:  # Windows: no concurrent runs of one key are coordinated there
            return self
        self.handle = open(self.path, "a+")
        fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            import fcntl

            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()
