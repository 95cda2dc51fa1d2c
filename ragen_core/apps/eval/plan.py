"""What `ragen eval` plays: the env ids, each env's settings (an :class:`EnvPlan`), and the evaluation seeds.

Where an env's settings come from (docs/eval.md, "Settings"):

- a run folder (MODEL) or ``--config CONFIG|PRESET|RUN_DIR``: that config's ``[env]`` and ``[rollout]`` for its
  env id, so that ``ragen eval RUN_DIR`` plays its env exactly as the run's validation does;
- any other model, or an env id other than the config's: the env's registered defaults (no kwargs: the task as
  ``ragen envs`` describes it) with the paper's rollout (:class:`ragen_core.rollout.RolloutOptions`' defaults: 5
  turns, full context, 128 new tokens, the system prompt on), except that an env whose shipped preset
  (``configs/<env>_tiny.toml``) allows more turns keeps that many (2048: 30, Sudoku: 10, WebShop: 6: their tasks
  need more than 5 answers), and the preset's ``env.per_rollout_option`` (the Bandit's payoff seed) is kept, since
  it is part of the env's meaning, not of a model's.

Sampling (``--temperature``, ``--top-p``, ``--max-tokens``) overrides what the config says; temperature 0 is
greedy decoding (argmax), which :class:`~ragen_core.rollout.RolloutSettings` spells ``greedy=True``.

Seeds: ``--episodes N`` seeds per env from ``--seed S`` (default :data:`EVAL_SEED`), each played ``--group-size G``
times (one group per seed). :data:`EVAL_SEED` is chosen outside every seed stream of every shipped config (validation
from 123, warm start from 777, the MI probe from 5000, training from 10000 up): see :func:`seed_overlaps`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragen_core.apps.arguments import comma_list
from ragen_core.rollout import RolloutSettings
from ragen_core.training.config import ConfigError, TrainConfig, load_config
from ragen_core.training.trainer import seed_streams

__all__ = ["EVAL_SEED", "EVAL_SEED_STOP", "SUITE", "EnvPlan", "Key", "Sampling", "config_for_env", "default_config",
           "group_keys", "load_config_arg", "make_plan", "plan_from_json", "registered_ids", "resolve_env_ids",
           "seed_overlaps", "seed_streams"]

#: The first evaluation seed: above the validation (123 + eval.episodes), warm-start (777 + sft_episodes, at most
#: 4777 in the shipped configs) and probe seeds (5000 + 4 x probe_prompts, at most 5127), below the train stream
#: (10000 up). tests/apps/eval checks this against every shipped config.
EVAL_SEED = 6000
#: The evaluation range ends where the train stream starts: --episodes N from EVAL_SEED stays held out for
#: N <= EVAL_SEED_STOP - EVAL_SEED (4000).
EVAL_SEED_STOP = 10000
#: The --envs value that means every registered id the model can take.
SUITE = "suite"


@dataclass(frozen=True, order=True)
class Key:
    """One episode of an evaluation: ``(env id, seed, sample)``, ``sample`` in 0..G-1 (its index in the group)."""

    env: str
    seed: int
    sample: int


@dataclass(frozen=True)
class Sampling:
    """The sampling flags: None keeps the config's value. ``temperature == 0`` is greedy decoding."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None


@dataclass
class EnvPlan:
    """How one env is played: the env (id, kwargs, per-rollout reset option), the rollout settings, and where they
    came from (``source``: "run RUN_DIR", "config PATH" or "env defaults"). ``greedy`` is in ``settings``;
    :attr:`temperature` is what a server is sent (0 for greedy)."""

    env_id: str
    env_kwargs: dict[str, Any]
    per_rollout_option: str
    settings: RolloutSettings
    source: str

    @property
    def temperature(self) -> float:
        return 0.0 if self.settings.greedy else float(self.settings.temperature)

    def to_json(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "env_kwargs": self.env_kwargs, "per_rollout_option": self.per_rollout_option,
                "settings": {**dataclasses.asdict(self.settings), "stop": list(self.settings.stop)},
                "source": self.source}


def plan_from_json(data: dict[str, Any]) -> EnvPlan:
    """The :class:`EnvPlan` that :meth:`EnvPlan.to_json` wrote (``eval.json``: a resumed evaluation plays with the
    settings it started with, whatever the config files say now)."""
    settings = dict(data["settings"])
    settings["stop"] = tuple(settings.get("stop", ()))
    return EnvPlan(env_id=data["env_id"], env_kwargs=dict(data["env_kwargs"]),
                   per_rollout_option=str(data["per_rollout_option"]), settings=RolloutSettings(**settings),
                   source=str(data["source"]))


# ---------------------------------------------------------------------------------------------- env ids
def registered_ids() -> list[str]:
    """Every ``ragen/`` id, in registry order (what ``ragen envs`` lists)."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)

    return [name for name in gym.registry if name.startswith("ragen/")]


def resolve_env_ids(text: str) -> list[str]:
    """``--envs`` -> env ids: ``suite`` (every registered id; the caller drops those the model cannot take) or a
    comma-separated list of ids (``ragen/Sokoban-v0``; the ``ragen/`` prefix may be left out; a repeated id counts
    once). Raises ValueError naming an unknown id, or an empty entry
    (:func:`ragen_core.apps.arguments.comma_list`)."""
    ids = registered_ids()
    if text.strip() == SUITE:
        return ids
    by_lower = {i.lower(): i for i in ids} | {i.split("/", 1)[1].lower(): i for i in ids}
    out: list[str] = []
    for part in comma_list("--envs", text, "env id"):
        found = by_lower.get(part.lower())
        if found is None:
            raise ValueError(f"--envs: unknown env id {part!r} (`ragen envs` lists them, or use 'suite')")
        if found not in out:
            out.append(found)
    return out


# ---------------------------------------------------------------------------------------------- configs
def _preset_for(env_id: str) -> TrainConfig | None:
    """The shipped ``*_tiny`` preset whose env is `env_id` (None when there is none)."""
    from ragen_core.training.presets import list_presets

    for name, path, _ in list_presets():
        if name.endswith("_tiny"):
            cfg = load_config(path)
            if cfg.env.id == env_id:
                return cfg
    return None


def default_config(env_id: str) -> TrainConfig:
    """The settings for a model that is not a run, on `env_id` (module docstring): the env's defaults, the paper's
    rollout, the preset's turn budget when larger and its per-rollout option."""
    base = load_config(None, [f"env.id={env_id}"])
    preset = _preset_for(env_id)
    if preset is not None:
        base.rollout.max_turns = max(base.rollout.max_turns, preset.rollout.max_turns)
        base.env.per_rollout_option = preset.env.per_rollout_option
    return base


def config_for_env(env_id: str, config: TrainConfig | None, config_source: str) -> tuple[TrainConfig, str]:
    """The config `env_id` is played with: `config` when it is that env's config, else :func:`default_config`; and
    its source for the summary."""
    if config is not None and config.env.id == env_id:
        return config, config_source
    return default_config(env_id), "env defaults"


def make_plan(env_id: str, cfg: TrainConfig, source: str, sampling: Sampling) -> EnvPlan:
    """An :class:`EnvPlan` from a config's ``[env]`` and ``[rollout]`` with the sampling flags on top.

    Raises:
        ValueError: a sampling value out of range (the message names the flag).
    """
    over: dict[str, Any] = {}
    greedy = False  # the config's temperature (the paper's 1.0) unless --temperature says otherwise
    if sampling.temperature is not None:
        if not (math.isfinite(sampling.temperature) and sampling.temperature >= 0):
            raise ValueError(f"--temperature must be >= 0 and finite (0 = greedy); got {sampling.temperature}")
        greedy = sampling.temperature == 0
        if not greedy:
            over["temperature"] = float(sampling.temperature)
    if sampling.top_p is not None:
        if not 0 < sampling.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1]; got {sampling.top_p}")
        over["top_p"] = float(sampling.top_p)
    if sampling.max_tokens is not None:
        if sampling.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1; got {sampling.max_tokens}")
        over["max_new_tokens"] = int(sampling.max_tokens)
    settings = RolloutSettings.from_config(cfg.rollout, greedy=greedy, **over)
    return EnvPlan(env_id=env_id, env_kwargs=dict(cfg.env.kwargs), per_rollout_option=cfg.env.per_rollout_option,
                   settings=settings, source=source)


def load_config_arg(arg: str) -> tuple[TrainConfig, str]:
    """``--config CONFIG|PRESET|RUN_DIR`` -> (config, source). Raises ValueError with a one-line message."""
    from ragen_core.training.presets import resolve_config

    path = Path(arg).expanduser()
    if path.is_dir():
        if not (path / "config.toml").is_file():
            raise ValueError(f"--config {arg}: a folder without config.toml (give a config file, a preset name or "
                             "a run folder)")
        path = path / "config.toml"
    else:
        path, note = resolve_config(arg)
        if note:
            print(note, file=sys.stderr)
    try:
        return load_config(path), f"config {path}"
    except ConfigError as e:
        raise ValueError(f"--config {arg}: {e}") from None


# ---------------------------------------------------------------------------------------------- seeds
def seed_overlaps(seeds: range, cfg: TrainConfig) -> list[str]:
    """The names of `cfg`'s seed streams that `seeds` shares a seed with (empty when the range is held out)."""
    return [name for name, other in seed_streams(cfg).items()
            if seeds and other and max(seeds.start, other.start) < min(seeds.stop, other.stop)]


def group_keys(env_id: str, seed: int, episodes: int, group_size: int) -> list[Key]:
    """Every :class:`Key` of one env: seeds ``seed .. seed + episodes - 1``, G samples each, seed-major."""
    return [Key(env_id, s, k) for s in range(seed, seed + episodes) for k in range(group_size)]

