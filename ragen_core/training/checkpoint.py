"""Checkpoints of a training run: the counters, the RNG streams, and atomic save / load of the whole state.

A checkpoint is the trainer's ``state_dict()`` (``ragen_core.training.trainer.Trainer.state_dict``), one
``torch.save`` file::

    step, next_seed_offset, empty_streak, empty_total, regulariser_only_total      (TrainState, flattened)
    model, optimizer, critic, critic_optimizer, reference  (state dicts; None where the run has none)
    ema                                                    (MI-ZScore-EMA)
    rng                                                    (RNGStreams: sample, update, filter, torch, cuda)

``checkpoints/latest.pt`` is replaced atomically after every save; ``step_NNNNNN.pt`` copies (byte copies of it,
written atomically too) are kept every `run.keep_every` steps. A state whose model or critic weights hold a NaN or
an inf (a run that diverged) is never written (:class:`NonFiniteError`) nor resumed from (:class:`CheckpointError`),
so ``latest.pt`` keeps the last good state.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ragen_core.training.config import ConfigError

__all__ = ["TrainState", "RNGStreams", "LATEST", "CheckpointError", "NonFiniteError", "nonfinite_weights",
           "save_checkpoint", "load_checkpoint"]

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


class NonFiniteError(ConfigError, FloatingPointError):
    """Training produced a NaN or an inf (a loss, a gradient norm, the advantages, the weights): the run stops
    before it reaches the weights or a checkpoint. A ConfigError, since the way out is a setting (a smaller
    learning rate, gradient clipping, smaller rewards): ``ragen train`` prints its one line; a FloatingPointError
    for code that catches numeric failures."""


#: The parts of a checkpoint that hold trained weights (the reference is a frozen copy of an earlier model).
_WEIGHTS = ("model", "critic")


def nonfinite_weights(state: dict[str, Any]) -> str | None:
    """``"part: tensor name"`` of the first weight tensor of `state` (its model, then its critic) that holds a NaN
    or an inf; None when every one is finite."""
    for part in _WEIGHTS:
        weights = state.get(part)
        for name, t in (weights.items() if isinstance(weights, dict) else ()):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return f"{part}: {name}"
    return None


def save_checkpoint(run_dir: str | Path, state: dict[str, Any], step: int, keep_every: int = 0) -> Path:
    """Write `state` to ``checkpoints/latest.pt`` atomically (and a numbered copy every `keep_every` steps,
    atomically too: a damaged ``latest.pt`` is repaired by copying the newest numbered one over it, so a copy cut
    short by a crash or a full disk must never be left under its final name).

    NonFiniteError, writing nothing, when a weight of `state` is NaN or inf: ``latest.pt`` keeps the last good
    state instead of one no run can continue from."""
    bad = nonfinite_weights(state)
    if bad is not None:
        raise NonFiniteError(f"the weights hold NaN or inf ({bad}), so they were not saved")
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
    the file cannot be read or holds NaN or inf weights, as one written before that was refused may; the file is
    left as it is)."""
    path = Path(run_dir) / LATEST
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")

    def way_out() -> str:
        copies = sorted(path.parent.glob("step_*.pt"))
        return (f"copy a numbered checkpoint over it to resume from there (latest: {copies[-1].name})" if copies
                else "no numbered copy exists (run.keep_every), so start the run again")

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or "model" not in state or "step" not in state:
            raise ValueError("it does not hold a training state")
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, UnpicklingError, EOFError, ... on damage
        detail = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        raise CheckpointError(f"{path} cannot be read ({type(e).__name__}{': ' + detail if detail else ''}): "
                              f"the file is damaged or incomplete; {way_out()}") from None
    bad = nonfinite_weights(state)
    if bad is not None:  # a run resumed from it would train (and log) NaNs from its first step
        raise CheckpointError(f"{path} holds NaN or inf weights ({bad}): the run had diverged when it was saved "
                              f"(step {state['step']}); {way_out()}")
    return state
