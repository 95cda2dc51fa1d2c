"""Demonstrators: how the warm start reads an env's scripted turns, the same way for every env.

The warm start (:mod:`ragen_core.training.sft`) writes responses ``<think> reasoning </think> <answer> actions
</answer>`` whose reasoning refers to the actual state, so that it depends on the input (high I(X;Z),
docs/science.md section 1). The env writes them itself, through the hooks that :class:`ragen_envs.base.TextAgentEnv`
declares (each with a default there); nothing here knows any env:

- :func:`oracle_turn`: the env's ``oracle_step(reasoning) -> (reasoning, [actions])``, the oracle's turn;
- :func:`random_turn`: its ``random_step(rng) -> (reasoning, [action])``, the random policy's turn;
- :func:`noise_answer`: its ``noise_answer(kind, rng) -> answer``, what a noisy demonstrator answers instead.

An env without a demonstrator (its ``oracle_step`` is the base class's, or an object without the hooks) is a
ValueError that names it. How to give a new env its demonstrator: docs/architecture.md, "Adding an env".
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["noise_answer", "oracle_turn", "random_turn"]


def _hook(env: Any, name: str) -> tuple[Any, Any]:
    """(the unwrapped env, its hook `name`); a ValueError naming the env when it has none."""
    u = getattr(env, "unwrapped", env)
    hook = getattr(u, name, None)
    if not callable(hook):
        raise ValueError(f"{type(u).__name__} has no demonstrator: it defines no {name}() hook "
                         "(ragen_envs.base.TextAgentEnv declares the hooks); use warm_start.policy='random'")
    return u, hook


def oracle_turn(env: Any, reasoning: str) -> tuple[str, list[str]]:
    """(reasoning text, the oracle's action(s) for this turn) in the style `reasoning` (``"full"`` / ``"plan"``;
    an env with one style ignores it): the env's ``oracle_step``. A ValueError naming the env when it has none."""
    u, step = _hook(env, "oracle_step")
    try:
        text, acts = step(reasoning=reasoning)
    except NotImplementedError as err:
        raise ValueError(f"{type(u).__name__} has no demonstrator ({err}); use warm_start.policy='random'") from err
    return str(text), [str(a) for a in acts]


def random_turn(env: Any, rng: np.random.Generator) -> tuple[str, list[str]]:
    """(reasoning text, [one uniformly random valid action]): the env's ``random_step``, every draw from `rng`."""
    text, acts = _hook(env, "random_step")[1](rng)
    return str(text), [str(a) for a in acts]


def noise_answer(env: Any, kind: str, rng: np.random.Generator) -> str:
    """What a noisy demonstrator answers instead of the oracle's action (`kind`: ``"first"`` the habit,
    ``"random"`` a random answer drawn from `rng`): the env's ``noise_answer``."""
    return str(_hook(env, "noise_answer")[1](kind, rng))
