"""One ``ragen/`` env episode as a chat, the text side of the verl agent loop (docs/protocol.md), without verl.

:class:`EnvEpisode` holds a Gymnasium env and the conversation that RAGEN's rollout builds: it is a
``ragen_core.episode.ChatEpisode``, the same one ``ragen_core.rollout`` plays. The system message is the env's
``info["instructions"]``, each user turn is ``ragen_core.episode.user_turn_text`` (previous reward, turn number,
state, actions left, format reminder), each assistant message is the raw model response, which the env parses
itself (through ``safe_step``: a malformed answer costs the env's format penalty; an env that raises ends the
episode with that penalty instead of the agent loop). The episode return is the sum of the per-turn rewards; the
agent loop reports it as verl's ``reward_score`` (placed on the last response token,
``reward_placement = "last_token"``).

A dataset row for verl names the episode in ``extra_info``: ``{"env_id": "ragen/Sokoban-v0", "seed": 10000,
"env_kwargs": {...}, "max_turns": 5, "length_limit": 400, "system_prompt": true}`` (:func:`episode_from_extra_info`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import ragen_envs  # noqa: F401  (registers the ragen/ ids)
from ragen_core.episode import ChatEpisode
from ragen_core.integrations._views import read_only

__all__ = ["EnvEpisode", "episode_from_extra_info"]

_EXTRA_KEYS = ("env_id", "seed", "env_kwargs", "max_turns", "length_limit", "system_prompt")


class EnvEpisode:
    """A ``ragen/`` env played as a chat.

    Args:
        env_id: a registered id (``ragen_envs.env_ids()``).
        seed: the reset seed; the G rollouts of a group share it (docs/protocol.md).
        env_kwargs: keyword arguments of ``gym.make``.
        max_turns: most assistant turns (the env may end the episode earlier).
        length_limit: the "Max response length" told to the model, in tokens.
        system_prompt: send ``info["instructions"]`` as a system message.
        control_tokens: the rollout tokenizer's special tokens (``ragen_core.rollout.control_tokens``), escaped
            where an observation or the instructions spell them, as this package's rollout does (the agent loop
            passes its tokenizer's); empty: none is.

    ``turn``, ``total_reward``, ``turn_rewards``, ``done`` and ``success`` are the episode's so far.
    """

    def __init__(self, env_id: str, seed: int, env_kwargs: Mapping[str, Any] | None = None, max_turns: int = 5,
                 length_limit: int = 400, system_prompt: bool = True,
                 control_tokens: Sequence[str] = ()) -> None:
        if not isinstance(env_id, str) or env_id not in gym.registry:
            raise ValueError(f"env_id must be a registered ragen/ id (see `ragen envs`); got {env_id!r}")
        seed, max_turns, length_limit = (_count(name, v, 0 if name == "seed" else 1) for name, v in (
            ("seed", seed), ("max_turns", max_turns), ("length_limit", length_limit)))
        self.env = gym.make(env_id, **dict(env_kwargs or {}))
        self.seed, self.max_turns, self.length_limit = seed, max_turns, length_limit
        self.system_prompt = bool(system_prompt)
        self.chat = ChatEpisode(self.env, length_limit=length_limit, system_prompt=self.system_prompt,
                                max_turns=max_turns, control_tokens=control_tokens)

    turn = read_only("chat.turn", "Assistant turns played so far.")
    total_reward = read_only("chat.total_reward", "The sum of the per-turn rewards so far.")
    turn_rewards = read_only("chat.rewards", "The reward of each turn played, in order.")
    done = read_only("chat.done", "Whether the episode has ended (terminated, truncated or out of turns).")
    success = read_only("chat.success", "Whether the episode ended in success (the env's info['success']).")

    def start(self) -> list[dict[str, str]]:
        """Reset the env; return the opening messages (system, if asked, and the first user turn)."""
        return self.chat.reset(self.seed).messages()

    def step(self, response: str) -> dict[str, str] | None:
        """Play one assistant response; return the next user message, or None when the episode is over."""
        if self.done:
            raise RuntimeError("the episode is over; start a new EnvEpisode")
        user = self.chat.step(response).user
        if user is None:
            self.env.close()
        return user


def episode_from_extra_info(extra_info: Mapping[str, Any] | None, control_tokens: Sequence[str] = ()) -> EnvEpisode:
    """Build an :class:`EnvEpisode` from a dataset row's ``extra_info`` (module docstring); unknown keys are
    ignored only if they are not ours to read (verl adds ``index`` and others). ``seed``, ``max_turns`` and
    ``length_limit`` must be integers (numpy integers included; ValueError naming the key otherwise).
    `control_tokens`: as :class:`EnvEpisode` takes them."""
    if not isinstance(extra_info, Mapping) or "env_id" not in extra_info or "seed" not in extra_info:
        raise ValueError("the dataset row's extra_info must be a mapping with at least 'env_id' and 'seed' "
                         f"(keys read: {', '.join(_EXTRA_KEYS)}); got {extra_info!r}")
    kw = {k: extra_info[k] for k in _EXTRA_KEYS if k in extra_info and extra_info[k] is not None}
    for key in ("seed", "max_turns", "length_limit"):
        if key in kw:
            kw[key] = _count(f"extra_info[{key!r}]", kw[key], 0 if key == "seed" else 1)
    return EnvEpisode(**kw, control_tokens=control_tokens)


def _count(name: str, value: Any, low: int) -> int:
    """`value` as a Python int >= `low` (numpy integers, as a parquet row may hold, included); ValueError naming
    `name` otherwise: a bool, a float (seed 10.7 is a mistake, not seed 10) or a string."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low:
        return int(value)
    raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
