"""The registry of the suite: every id under the `ragen/` namespace, with a one-line description.

`import ragen_envs` calls `register_all()`; `gym.make("ragen_envs:ragen/Sokoban-v0")` imports the
package first and so works without the explicit import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class EnvSpec:
    """One registered id: where the class lives, its default kwargs and a one-line description."""

    id: str
    entry_point: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)


ENV_SPECS: tuple[EnvSpec, ...] = (
    EnvSpec(
        "ragen/Sokoban-v0",
        "ragen_envs.sokoban.env:SokobanEnv",
        "Push every box onto a target (6x6, 1 box, 10 actions; irreversible planning).",
    ),
    EnvSpec(
        "ragen/Sokoban-Vision-v0",
        "ragen_envs.sokoban.env:SokobanEnv",
        "Sokoban with an RGB image of the room next to the text state.",
        {"vision": True},
    ),
    EnvSpec(
        "ragen/FrozenLake-v0",
        "ragen_envs.frozenlake.env:FrozenLakeEnv",
        "Reach the goal on a slippery 4x4 lake without falling into a hole (stochastic navigation).",
    ),
    EnvSpec(
        "ragen/FrozenLake-Vision-v0",
        "ragen_envs.frozenlake.env:FrozenLakeEnv",
        "FrozenLake with an RGB image of the lake next to the text state.",
        {"vision": True},
    ),
    EnvSpec(
        "ragen/PocketCube-v0",
        "ragen_envs.pocketcube.env:PocketCubeEnv",
        "Solve a scrambled 2x2x2 Rubik's cube with face turns (U, R', F2, ...); exact optimal distances.",
    ),
    EnvSpec(
        "ragen/PocketCube-Vision-v0",
        "ragen_envs.pocketcube.env:PocketCubeEnv",
        "PocketCube with an RGB image of the cube's net next to the text state.",
        {"vision": True},
    ),
    EnvSpec(
        "ragen/Bandit-v0",
        "ragen_envs.bandit:BanditEnv",
        "Pick one of two named arms once: a safe arm (0.1) or a risky one (1.0 w.p. 0.25).",
    ),
    EnvSpec(
        "ragen/Countdown-v0",
        "ragen_envs.countdown.env:CountdownEnv",
        "Combine the given numbers with + - * / into an expression equal to the target.",
    ),
    EnvSpec(
        "ragen/MetaMathQA-v0",
        "ragen_envs.math.env:MathEnv",
        "Solve a word or algebra problem; retry after a wrong answer for half the reward.",
    ),
    EnvSpec(
        "ragen/Code-v0",
        "ragen_envs.code.env:CodeEnv",
        "Write a Python program that passes hidden tests, judged in a sandbox (DeepCoder/TACO style).",
    ),
    EnvSpec(
        "ragen/SearchQA-v0",
        "ragen_envs.searchqa.env:SearchQAEnv",
        "Answer a single- or multi-hop question by searching a BM25-indexed corpus, then finishing.",
    ),
    EnvSpec(
        "ragen/WebShop-v0",
        "ragen_envs.webshop.env:WebShopEnv",
        "Find and buy the product matching an instruction (search, click, options, Buy Now).",
    ),
    EnvSpec(
        "ragen/Sudoku-v0",
        "ragen_envs.sudoku.env:SudokuEnv",
        "Fill a 4x4 or 9x9 Sudoku with a unique solution, one placement R<row>C<col>=<digit> at a time.",
    ),
    EnvSpec(
        "ragen/2048-v0",
        "ragen_envs.game2048.env:Game2048Env",
        "Slide and merge tiles to build the target tile (2048 on 4x4 by default); reward = the game's score.",
    ),
)


def register_all() -> None:
    """Register every id of ENV_SPECS with Gymnasium (idempotent)."""
    for spec in ENV_SPECS:
        if spec.id in gym.registry:
            continue
        gym.register(id=spec.id, entry_point=spec.entry_point, kwargs=dict(spec.kwargs))


def env_ids() -> list[str]:
    """All registered ids of the suite, in registry order."""
    return [spec.id for spec in ENV_SPECS]


def describe(env_id: str) -> str:
    """The one-line description of a registered id."""
    for spec in ENV_SPECS:
        if spec.id == env_id:
            return spec.description
    raise KeyError(f"unknown env id {env_id!r}; known ids: {', '.join(env_ids())}")


def accepted_kwargs(env_id: str) -> list[str]:
    """The keyword arguments `gym.make(env_id, ...)` accepts, sorted: exactly the names the env's constructor
    takes, and the registered spec's kwargs.

    The constructor's named parameters count; a base class's ``__init__`` counts only where the constructor passes
    unknown names on to it (a ``**kwargs`` parameter, as SokobanEnv's ``**protocol_kwargs``), and so on up the
    MRO. A subclass with a closed signature (Bandit, Countdown, Code, ...) sets the base's `max_actions`,
    `max_actions_per_turn` or `turn_limit` itself, and `gym.make` with those names raises TypeError: listing
    them would advertise knobs that do not exist (docs/envs.md) and make `kwarg_error` suggest them."""
    import inspect

    spec = gym.spec(env_id)
    entry = spec.entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    names: set[str] = set()
    for klass in getattr(cls, "__mro__", (cls,)):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue  # this class inherits __init__: the next class up the MRO defines the signature
        try:
            params = list(inspect.signature(init).parameters.values())
        except (TypeError, ValueError):
            break
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break  # a closed signature: nothing reaches the base classes' parameters
    names |= set(spec.kwargs or {})
    return sorted(names)


def kwarg_error(env_id: str, kwargs: dict[str, Any], exc: Exception) -> str:
    """One line for a `gym.make` failure on env kwargs: an unknown name gets the closest accepted ones ("did you
    mean ...?") and the list of accepted names; any other error its own message, without gymnasium's repetition of
    the kwargs."""
    import difflib

    why = str(exc).split(" was raised from the environment creator")[0]
    unknown = [k for k in kwargs if f"unexpected keyword argument '{k}'" in why]
    if not unknown:
        return why
    accepted = accepted_kwargs(env_id)
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, accepted, n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else "no close match"
        parts.append(f"{env_id} has no kwarg {name!r} ({hint})")
    return "; ".join(parts) + f"; it accepts: {', '.join(accepted)}"
