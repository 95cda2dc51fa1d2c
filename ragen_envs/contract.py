"""The env-trainer contract's defaults, in one place (docs/protocol.md, `ragen_envs.base`).

Every `ragen/` env is a `TextAgentEnv` and declares the contract's attributes; the constants below are the
defaults of its constructor (`TextAgentEnv.__init__` reads them) and what a caller assumes of an env that does not
declare one (an object that is not a TextAgentEnv). The callers read an env through the functions below, never
with a literal of their own: the rollout (`ragen_core.episode`: the format reminder, `safe_step`), the TRL adapter
(`ragen_core.integrations.trl.env`), the verl adapter (through `ragen_core.episode.ChatEpisode`), `ragen play`
and the trainer (which policy a vision env needs).

A caller that wants another value for an env that does not declare the attribute passes ``default=`` and says why
where it does; the functions look the constants up when called, so the tests can move them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragen_envs import protocol

__all__ = ["FORMAT_PENALTY", "MAX_ACTIONS_PER_TURN", "ACTION_FORMAT", "VISION", "unwrapped", "format_penalty",
           "max_actions_per_turn", "action_format", "vision", "observes_images"]

#: The reward of a malformed answer or an invalid action (`format_penalty=`; the parser's FORMAT_PENALTY).
FORMAT_PENALTY: float = protocol.FORMAT_PENALTY
#: The most actions one answer may hold (`max_actions_per_turn=`).
MAX_ACTIONS_PER_TURN: int = 2
#: The answer format (`action_format=`): "tagged" is <think> then <answer>.
ACTION_FORMAT: protocol.ActionFormat = "tagged"
#: Whether an observation is ``{"text": str, "image": uint8 HxWx3}`` (`vision=`).
VISION: bool = False


def unwrapped(env: Any) -> Any:
    """The env under its Gymnasium wrappers (`env.unwrapped`), or `env` itself when it has no such attribute."""
    return getattr(env, "unwrapped", env)


def format_penalty(env: Any, default: float | None = None) -> float:
    """The env's `format_penalty_value`; `default` (None: FORMAT_PENALTY) when it declares none."""
    return float(getattr(unwrapped(env), "format_penalty_value", FORMAT_PENALTY if default is None else default))


def max_actions_per_turn(env: Any, default: int | None = None) -> int:
    """The env's `max_actions_per_turn`; `default` (None: MAX_ACTIONS_PER_TURN) when it declares none or a falsy
    value."""
    fallback = MAX_ACTIONS_PER_TURN if default is None else default
    return int(getattr(unwrapped(env), "max_actions_per_turn", fallback) or fallback)


def action_format(env: Any) -> str:
    """The env's `action_format`; ACTION_FORMAT when it declares none."""
    return getattr(unwrapped(env), "action_format", ACTION_FORMAT)


def vision(env: Any) -> bool:
    """Whether the env's observations carry a picture (its `vision`); VISION when it declares none."""
    return bool(getattr(unwrapped(env), "vision", VISION))


def observes_images(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether ``gym.make(env_id, **env_kwargs)`` has image observations, without building it: its `vision=`
    keyword from `env_kwargs`, else from the registered spec's kwargs (the ``-Vision-`` ids set it), else VISION.
    The id is looked up as `gym.make` does (``"module:id"`` imports the module); an unregistered one is
    `ragen_envs.registration.UnknownEnvId`, a ValueError in one line."""
    from ragen_envs.registration import find_spec

    kwargs = {**dict(find_spec(env_id).kwargs or {}), **dict(env_kwargs or {})}
    return bool(kwargs.get("vision", VISION))
