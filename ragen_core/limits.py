"""The size limits of what the code can do, in one place: the upper bounds of the counts and lengths that a config
key or a command-line flag sets, each the largest value the code can run, with the reason where it is defined.

- :data:`MAX_BATCH`: episodes played as one batch (one ``rollout()`` call: P groups x G rollouts, a validation's
  ``eval.episodes``, the MI probe's prompts x samples, the demonstrations a warm start keeps as one batch, an
  evaluation's episodes per env);
- :data:`MAX_TURNS`: turns of one episode (``rollout.max_turns``);
- :data:`MAX_FILLER_WORDS`: the warm start's input-independent opening words (``warm_start.filler_words``);
- :func:`model_positions` / :func:`path_positions`: the positions a model has, the bound of ``max_new_tokens``
  (``rollout.max_new_tokens``, ``ragen eval --max-tokens``, ``Policy.generate``): :func:`max_new_tokens_problem`.

The rule for new tokens: a response has at most as many tokens as the model has positions (its
``max_position_embeddings``), checked wherever the model is known (a config whose ``model.path`` is a tiny model or a
model folder, ``ragen eval`` with an in-process model, every ``generate`` call). The prompt is not counted: Qwen2's
rotary positions run past the table, and a multi-turn prompt grows past it in runs that work today; what the bound
rules out is a decoding cache preallocated for more positions than the model has (``--max-tokens 100000000000``
was an out-of-memory traceback), so one row's cache holds at most its prompt + the model's positions.

This module imports nothing heavy (no torch, no transformers): configs are checked without loading a model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragen_envs.base import UNBUDGETED_MAX_TURNS
from ragen_envs.spaces import MAX_RESPONSE_CHARS

__all__ = ["MAX_BATCH", "MAX_TURNS", "MAX_FILLER_WORDS", "TINY_NAMES", "TINY_POSITIONS", "model_positions",
           "path_positions", "max_new_tokens_problem"]

#: The most episodes played as one batch, 2**16 - 1: a batch's rows go through one batched ``generate`` (and one
#: forward per micro-batch), and torch's CUDA attention kernels (flash, memory-efficient: what
#: ``scaled_dot_product_attention`` picks on a GPU) put the batch on a launch-grid axis of at most 65,535 blocks, so
#: a larger batch fails there with "CUDA error: invalid configuration argument" (pytorch/pytorch#146704). The
#: envs, the seeds and the rows of a batch are built before its first turn: a count beyond this was an
#: out-of-memory traceback or hours of env construction before anything ran.
MAX_BATCH = 2**16 - 1
#: The most turns of one episode: ragen_envs' own turn cap for an env without a budget or a task limit
#: (``ragen_envs.base.UNBUDGETED_MAX_TURNS``, 10,000, documented there as above any rollout's ``max_turns``). A
#: rollout keeps a ``[episodes, max_turns]`` table of turn rewards and logs one metric per turn, both sized by
#: ``max_turns`` whatever the episodes play.
MAX_TURNS = UNBUDGETED_MAX_TURNS
#: The most opening filler words of a warm-start demonstration: each is at least 2 characters and a space
#: (``ragen_core.training.sft.FILLER_WORDS``), and the envs read the first ``MAX_RESPONSE_CHARS`` (16,384) characters
#: of a response only (``ragen_envs.spaces``); more words would push the demonstrated answer out of what the env
#: reads.
MAX_FILLER_WORDS = MAX_RESPONSE_CHARS // 3
#: The largest float32 (``np.finfo(np.float32).max``): the batch's rewards and the optimisers' learning rates are
#: float32, where a larger finite number becomes inf (a reward) or an overflow traceback (a learning rate).
FLOAT32_MAX = 3.4028234663852886e38
#: The built-in tiny models (``ragen_core.policy.TINY_PATHS``) and their positions (``build_tiny_model``'s
#: ``max_positions``; tests/apps/test_sizes.py checks both against the policy package).
TINY_NAMES = ("tiny", "tiny-vision", "tiny-base")
TINY_POSITIONS = 4096

#: The config fields that give a transformers model's positions, first found wins (GPT-2's name is n_positions).
_POSITION_FIELDS = ("max_position_embeddings", "n_positions")


def _field(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _stretched(config: Any, positions: int) -> int:
    """The positions a rope scaling stretches the context to (``rope_scaling``, transformers 5's
    ``rope_parameters``): its ``original_max_position_embeddings`` (else `positions`, the config's own) times its
    ``factor``; `positions` without one."""
    for name in ("rope_scaling", "rope_parameters"):
        scaling = _field(config, name)
        factor = scaling.get("factor") if isinstance(scaling, Mapping) else None
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
            base = scaling.get("original_max_position_embeddings")
            return max(positions, int((base if _count(base) else positions) * factor))
    return positions


def model_positions(config: Any) -> int | None:
    """The positions a transformers model has, from its config (a ``PretrainedConfig`` or the dict of its
    ``config.json``): ``max_position_embeddings`` (or ``n_positions``), else its ``text_config``'s (a vision-language
    model), or the longer context a rope scaling stretches it to. None when it does not say."""
    if config is None:
        return None
    for name in _POSITION_FIELDS:
        value = _field(config, name)
        if _count(value):
            return _stretched(config, value)
    text = _field(config, "text_config")
    return model_positions(text) if text is not None and text is not config else None


def path_positions(path: str | os.PathLike | None) -> int | None:
    """The positions of the model a ``model.path`` (or ``ragen eval`` MODEL) names: :data:`TINY_POSITIONS` for a
    tiny model, :func:`model_positions` of a folder's ``config.json``; None when it cannot tell without loading
    anything (no such folder, no config.json, a config that does not say)."""
    if path is None:
        return None
    if str(path) in TINY_NAMES:
        return TINY_POSITIONS
    config = Path(path).expanduser() / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return model_positions(data) if isinstance(data, dict) else None


def max_new_tokens_problem(name: str, value: int, positions: int | None, model: str = "the model") -> str | None:
    """Why `value` new tokens (given as `name`) cannot be generated by a model of `positions` positions (one line),
    or None: more new tokens than the model has positions (module docstring); None when `positions` is unknown."""
    if positions is None or value <= positions:
        return None
    return (f"{name} must be an integer in [1, {positions}] ({model} has {positions} positions, its "
            f"max_position_embeddings: a response cannot be longer); got {value}")
