"""Demonstrators: how the warm start reads an env's scripted turns, the same way for every env.

The warm start (:mod:`ragen_core.training.sft`) writes responses ``<think> reasoning </think> <answer> actions
</answer>`` whose reasoning refers to the actual state, so that it depends on the input (high I(X;Z),
docs/science.md section 1). The env writes them itself, through the hooks that :class:`ragen_envs.base.TextAgentEnv`
declares (each with a default there); nothing here knows any env:

- :func:`oracle_turn`: the env's ``oracle_step(reasoning) -> (reasoning, [actions])``, the oracle's turn;
- :func:`random_turn`: its ``random_step(rng) -> (reasoning, [action])``, the random policy's turn;
- :func:`noise_answer`: its ``noise_answer(kind, rng) -> answer``, what a noisy demonstrator answers instead.

An env without a demonstrator (its ``oracle_step`` is the base class's, or an object without the hooks) is a
ValueError that names it, and so is a hook that answers out of its contract: a turn that is not a pair
``(reasoning text, list of action strings)`` (a bare string in place of the list used to be split into one
"action" per character), a reasoning or an answer that is not a string. How to give a new env its demonstrator:
docs/architecture.md, "Adding an env".
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FILLER_WORDS", "NOISE_ACTIONS", "REASONING_STYLES", "TEMPLATE_ANSWERS", "noise_answer", "oracle_turn",
           "random_turn"]

#: Reasoning styles of the Sokoban oracle (`warm_start.reasoning`).
REASONING_STYLES = ("full", "plan")


#: What a noisy demonstrator answers instead of the oracle's action (`warm_start.noise_action`).
NOISE_ACTIONS = ("random", "first")

#: What the demonstrator answers after its template (`warm_start.template_answer`): its usual answer, the oracle's
#: move for the state it sees (a template that pays), or the move the template's own reference level implies (an
#: answer that follows the reasoning, whatever the state).
TEMPLATE_ANSWERS = ("demonstrator", "oracle", "reference")

#: The words of the input-independent opening (`warm_start.filler_words`): common words of the envs' text,
#: so that each is one or two tokens of the tiny model's vocabulary; eight of them, log 8 = 2.08 nats per draw.
FILLER_WORDS = ("so", "then", "now", "well", "ok", "first", "here", "next")


def _hook(env: Any, name: str) -> tuple[Any, Any]:
    """(the unwrapped env, its hook `name`); a ValueError naming the env when it has none."""
    u = getattr(env, "unwrapped", env)
    hook = getattr(u, name, None)
    if not callable(hook):
        raise ValueError(f"{type(u).__name__} has no demonstrator: it defines no {name}() hook "
                         "(ragen_envs.base.TextAgentEnv declares the hooks); use warm_start.policy='random'")
    return u, hook


def _checked_turn(u: Any, name: str, turn: Any) -> tuple[str, list[str]]:
    """The ``(reasoning, [actions])`` a hook `name` of env `u` returned, as ``(str, list of str)``; a ValueError
    naming the env and the hook when it is out of that contract (a string of actions would otherwise be iterated
    character by character, and a reasoning of None written as the text "None")."""
    where = f"{type(u).__name__}.{name}()"
    if not isinstance(turn, (tuple, list)) or len(turn) != 2:
        raise ValueError(f"{where} must return a pair (reasoning text, list of action strings); "
                         f"got {type(turn).__name__} {turn!r:.60}")
    text, acts = turn
    if not isinstance(text, str):
        raise ValueError(f"{where} must return its reasoning as a string; got {type(text).__name__} {text!r:.60}")
    if not isinstance(acts, (list, tuple)) or not all(isinstance(a, str) for a in acts):
        raise ValueError(f"{where} must return its actions as a list of strings (one per action, [\"Up\"] not "
                         f"\"Up\"); got {type(acts).__name__} {acts!r:.60}")
    return text, list(acts)


def oracle_turn(env: Any, reasoning: str) -> tuple[str, list[str]]:
    """(reasoning text, the oracle's action(s) for this turn) in the style `reasoning` (``"full"`` / ``"plan"``;
    an env with one style ignores it): the env's ``oracle_step``. A ValueError naming the env when it has none."""
    u, step = _hook(env, "oracle_step")
    try:
        turn = step(reasoning=reasoning)
    except NotImplementedError as err:
        raise ValueError(f"{type(u).__name__} has no demonstrator ({err}); use warm_start.policy='random'") from err
    return _checked_turn(u, "oracle_step", turn)


def random_turn(env: Any, rng: np.random.Generator) -> tuple[str, list[str]]:
    """(reasoning text, [one uniformly random valid action]): the env's ``random_step``, every draw from `rng`."""
    u, step = _hook(env, "random_step")
    return _checked_turn(u, "random_step", step(rng))


def noise_answer(env: Any, kind: str, rng: np.random.Generator) -> str:
    """What a noisy demonstrator answers instead of the oracle's action (`kind`: ``"first"`` the habit,
    ``"random"`` a random answer drawn from `rng`): the env's ``noise_answer``."""
    u, hook = _hook(env, "noise_answer")
    answer = hook(kind, rng)
    if not isinstance(answer, str):  # str() would write a list as "['Up']" into the demonstration
        raise ValueError(f"{type(u).__name__}.noise_answer() must return the answer as a string; "
                         f"got {type(answer).__name__} {answer!r:.60}")
    return answer
