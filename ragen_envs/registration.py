"""The registry of the suite: every id under the `ragen/` namespace, with a one-line description.

`import ragen_envs` calls `register_all()`; `gym.make("ragen_envs:ragen/Sokoban-v0")` imports the
package first and so works without the explicit import.

Envs of other packages: `register_all()` then loads every entry point of the group ``ragen_envs``
(`ENTRY_POINT_GROUP`), so that a package installed next to this one makes its ids known to every `ragen` command
(`ragen train` with its id as `env.id`, `ragen eval`, `ragen play`) without being imported by name. In the
package's ``pyproject.toml``:

    [project.entry-points.ragen_envs]
    my_envs = "my_envs.registration"          # a module whose import calls gymnasium.register(...)
    # or "my_envs:register", a function that does

`find_spec(env_id)` is the lookup for the toolkit's own checks: Gymnasium's ``"module:id"`` form imports the module
first, as `gym.make` does, and an unknown id is one line with the closest registered ids.
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


#: The entry-point group whose entries register envs of other packages (module docstring).
ENTRY_POINT_GROUP = "ragen_envs"


class UnknownEnvId(gym.error.Error, ValueError):
    """An env id that no registered env has (:func:`find_spec`); a ValueError, as any bad argument of the toolkit,
    and a Gymnasium error, as `gym.spec` raises. `reason`: why, without the closest ids (for a caller that names
    them its own way)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = message if reason is None else reason


def register_all() -> None:
    """Register every id of ENV_SPECS with Gymnasium (idempotent), then load the envs of other packages
    (:func:`load_entry_points`)."""
    for spec in ENV_SPECS:
        if spec.id in gym.registry:
            continue
        gym.register(id=spec.id, entry_point=spec.entry_point, kwargs=dict(spec.kwargs))
    load_entry_points()


_LOADED: set[str] = set()


def load_entry_points() -> list[str]:
    """Load each entry point of the group ENTRY_POINT_GROUP once per process: import its module, and call the
    object it names when that is a function (``my_envs:register``); that registers the package's ids with
    Gymnasium. Returns the entry points loaded by this call.

    One that fails (an import error, a function that raises) is a warning naming it and the error, in one line,
    not an error: a broken package next to this one must not break ``import ragen_envs`` for every other env; its
    ids then stay unknown and using one is :func:`find_spec`'s error."""
    import warnings
    from importlib.metadata import entry_points

    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        key = f"{ep.name} = {ep.value}"
        if key in _LOADED:
            continue
        _LOADED.add(key)
        try:
            target = ep.load()
            if callable(target) and not isinstance(target, type):
                target()
        except Exception as exc:  # noqa: BLE001 - any error of another package's code: reported, not raised
            first = str(exc).splitlines()[0] if str(exc) else ""
            warnings.warn(f"ragen_envs: the env entry point {key!r} failed ({type(exc).__name__}: {first}); its "
                          f"env ids are not registered", RuntimeWarning, stacklevel=2)
            continue
        loaded.append(key)
    return loaded


def find_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of `env_id`, as `gym.make(env_id)` finds it: ``"module:id"`` imports the module first
    (where a package registers its ids), then looks the id up.

    Raises UnknownEnvId (one line: Gymnasium's reason, and the closest registered ids where Gymnasium names none,
    ``Sokoban-v0`` -> ``ragen/Sokoban-v0``) for an id no env has, and for a module that cannot be imported (naming
    it); a TypeError for an id that is not a str."""
    import difflib
    import importlib

    if not isinstance(env_id, str):
        raise TypeError(f"an env id must be a str like 'ragen/Sokoban-v0', got {type(env_id).__name__} {env_id!r:.40}")
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownEnvId(f"env id {env_id!r}: its module {module!r} cannot be imported ({exc})") from None
    try:
        return gym.spec(name)
    except gym.error.Error as exc:
        why = str(exc).splitlines()[0]
        why += "" if why.endswith((".", "?", "!")) else "."
        close = [] if "Did you mean" in why else difflib.get_close_matches(name, list(gym.registry), n=2, cutoff=0.6)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownEnvId(f"unknown env id {env_id!r}: {why}{hint}", reason=why) from None


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

    spec = find_spec(env_id)
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
