"""Checkpoints of a training run: the counters, the RNG streams, and atomic save / load of the whole state.

A checkpoint is the trainer's ``state_dict()`` (``ragen_core.training.trainer.Trainer.state_dict``), one
``torch.save`` file::

    step, next_seed_offset, empty_streak, empty_total, regulariser_only_total      (TrainState, flattened)
    model, optimizer, critic, critic_optimizer, reference  (state dicts; None where the run has none)
    ema                                                    (MI-ZScore-EMA)
    rng                                                    (RNGStreams: sample, update, filter, torch, cuda)

``checkpoints/latest.pt`` is replaced atomically after every save; ``step_NNNNNN.pt`` copies (byte copies of it,
written atomically too) are kept every `run.keep_every` steps.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["TrainState", "RNGStreams", "LATEST", "CheckpointError", "save_checkpoint", "load_checkpoint"]

#: The checkpoint a run resumes from, relative to the run folder.
LATEST = Path("checkpoints") / "latest.pt"


@dataclass
class TrainState:
    """The counters of a run (saved flat at the top level of every checkpoint)."""

    step: int = 0
    #: Train seeds are env.train_seed + offset, one per group, never reused.
    next_seed_offset: int = 0
    empty_streak: int = 0
    empty_total: int = 0
    #: Steps that updated on the regularisers alone (`filter.empty_step = "regularise"`).
    regulariser_only_total: int = 0

    def state_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in dataclasses.fields(self):  # a counter added later is 0 in an older checkpoint
            setattr(self, f.name, int(state.get(f.name, f.default)))


class RNGStreams:
    """The run's explicit RNG streams (all checkpointed, with torch's global CPU / CUDA states).

    ``sample``: rollout sampling; ``update``: mini-batch order; ``filter``: the random filter strategy.
    The project's own code draws only from these; torch's global generators (CPU and CUDA) are seeded too
    (``seed + 3``), because torch >= 2.13 seeds them at random at start-up and anything a user plugs in
    (a policy with dropout, a custom sampler) would otherwise make two runs of one config differ.
    """

    def __init__(self, seed: int):
        self.sample = torch.Generator(device="cpu").manual_seed(seed)
        self.update = torch.Generator(device="cpu").manual_seed(seed + 1)
        self.filter = torch.Generator(device="cpu").manual_seed(seed + 2)
        torch.manual_seed(seed + 3)  # the global CPU and CUDA generators

    def state_dict(self) -> dict[str, Any]:
        return {
            "sample": self.sample.get_state(),
            "update": self.update.get_state(),
            "filter": self.filter.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sample.set_state(state["sample"])
        self.update.set_state(state["update"])
        self.filter.set_state(state["filter"])
        torch.set_rng_state(state["torch"])
        if state["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: str | Path, state: dict[str, Any], step: int, keep_every: int = 0) -> Path:
    """Write `state` to ``checkpoints/latest.pt`` atomically (and a numbered copy every `keep_every` steps,
    atomically too: a damaged ``latest.pt`` is repaired by copying the newest numbered one over it, so a copy cut
    short by a crash or a full disk must never be left under its final name)."""
    path = Path(run_dir) / LATEST
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace_with(path, lambda tmp: torch.save(state, tmp))
    if keep_every and step and step % keep_every == 0:
        _replace_with(path.parent / f"step_{step:06d}.pt", lambda tmp: shutil.copyfile(path, tmp))
    return path


def _replace_with(path: Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` beside `path`, then rename it over `path`; a write that fails leaves `path` as it was and no
    temporary file behind."""
    tmp = path.with_name(path.stem + ".tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


class CheckpointError(RuntimeError):
    """A checkpoint file that exists but cannot be read (truncated, overwritten, not a checkpoint): the message is
    one line saying which file and what to do."""


def load_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint` (FileNotFoundError when the run has none, CheckpointError when
    the file cannot be read; the file is left as it is)."""
    path = Path(run_dir) / LATEST
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or "model" not in state or "step" not in state:
            raise ValueError("it does not hold a training state")
        return state
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, UnpicklingError, EOFError, ... on damage
        copies = sorted(path.parent.glob("step_*.pt"))
        what = (f"copy a numbered checkpoint over it to resume from there (latest: {copies[-1].name})" if copies
                else "no numbered copy exists (run.keep_every), so start the run again")
        detail = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        raise CheckpointError(f"{path} cannot be read ({type(e).__name__}{': ' + detail if detail else ''}): "
                              f"the file is damaged or incomplete; {what}") from None
