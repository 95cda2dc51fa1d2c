"""An evaluation's definition, ``eval.json`` in its folder: what the command line asked for, resolved once.

``ragen eval`` writes it before the first episode; ``ragen eval --resume DIR`` reads it back, so a resumed
evaluation plays the same envs, seeds and settings whatever the config files say by then. Only what does not change
an episode may be given again with ``--resume``: :data:`RESUME_FLAGS`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ragen_core.apps.eval.plan import (
    EVAL_SEED,
    SUITE,
    EnvPlan,
    Key,
    Sampling,
    config_for_env,
    group_keys,
    load_config_arg,
    make_plan,
    plan_from_json,
    resolve_env_ids,
    seed_overlaps,
)
from ragen_core.limits import MAX_BATCH, max_new_tokens_problem, path_positions
from ragen_core.training.config import seed_range_problem

__all__ = ["EVAL_JSON", "RESERVED_BODY", "RESUME_FLAGS", "EvalSpec", "SpecError", "api_key", "base_url_problem",
           "build_spec", "default_out_dir", "load_spec", "model_kind"]

#: The definition file of an evaluation folder.
EVAL_JSON = "eval.json"
#: What ``--resume`` may change: how episodes are fetched, never which or how they are played.
RESUME_FLAGS = ("workers", "timeout", "max_retries", "base_url", "api_key_env", "device")
#: Default concurrent episodes: requests in flight (server) / episodes per batched generate (in process).
DEFAULT_WORKERS = {"server": 8, "local": 64}
#: Request fields ``--extra-body`` may not set: the evaluation's own (model, the episode's messages, its sampling
#: and stop strings, each recorded in ``eval.json``; ``max_completion_tokens`` is the newer name of ``max_tokens``),
#: and what the client cannot read (``stream``: server-sent events) or would throw away (``n``: other choices).
RESERVED_BODY = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop",
                 "stream", "n")
#: The placeholder key sent when no variable holds one (a local server takes any).
NO_KEY = "EMPTY"


class SpecError(ValueError):
    """A command line that cannot be evaluated (one line for the user)."""


@dataclass
class EvalSpec:
    """Everything an evaluation is (module docstring). ``plans`` maps env id -> :meth:`EnvPlan.to_json`;
    ``refused`` env id -> why it is not played."""

    backend: str  # "local" or "server"
    model: str | None
    base_url: str | None
    model_name: str | None
    api_key_env: str | None
    envs: list[str]
    episodes: int
    seed: int
    group_size: int
    workers: int
    timeout: float
    max_retries: int
    device: str
    mi_groups: int
    extra_body: dict[str, Any] = field(default_factory=dict)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    created: str = ""

    @property
    def label(self) -> str:
        """The model as the summary names it."""
        return f"{self.model_name} at {self.base_url}" if self.backend == "server" else str(self.model)

    def env_plans(self) -> dict[str, EnvPlan]:
        """The plans of the envs that are played (refused ones left out), in order."""
        return {e: plan_from_json(self.plans[e]) for e in self.envs if e not in self.refused}

    def keys(self) -> list[Key]:
        """Every episode of the evaluation, env by env, seed-major."""
        return [k for e in self.envs if e not in self.refused
                for k in group_keys(e, self.seed, self.episodes, self.group_size)]

    def save(self, folder: Path) -> None:
        tmp = folder / (EVAL_JSON + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")
        tmp.replace(folder / EVAL_JSON)


def load_spec(folder: Path) -> EvalSpec:
    """The ``eval.json`` of an evaluation folder. Raises SpecError when it is not one."""
    path = Path(folder) / EVAL_JSON
    if not path.is_file():
        raise SpecError(f"--resume {folder}: no {EVAL_JSON} there (is it an evaluation folder?)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return EvalSpec(**{f.name: data[f.name] for f in fields(EvalSpec) if f.name in data})
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise SpecError(f"--resume {folder}: {EVAL_JSON} is damaged ({type(e).__name__}: {e})") from None


def base_url_problem(url: str) -> str | None:
    """Why `url` cannot be a server's API root (one line), or None: an http(s) URL with a host, not an endpoint
    (``.../chat/completions``: the client appends that itself)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as e:
        return f"--base-url {url!r} is not a URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--base-url {url!r} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/v1"
    if parts.path.rstrip("/").endswith("/chat/completions"):
        return (f"--base-url {url!r} is an endpoint, not the API root: give the URL up to the API path "
                "(e.g. http://127.0.0.1:8000/v1)")
    return None


def api_key(api_key_env: str | None, given: str = "--api-key-env") -> str:
    """The API key: the variable `api_key_env` names, else ``OPENAI_API_KEY`` when set, else :data:`NO_KEY`.

    Raises:
        SpecError: the named variable is not set or empty, or a key holds whitespace or characters outside
            printable ASCII (an HTTP header cannot carry it; a trailing newline is the usual cause).
    """
    var = api_key_env or "OPENAI_API_KEY"
    key = os.environ.get(var, "")
    if api_key_env and not key:
        raise SpecError(f"{given} {api_key_env}: that environment variable is not set (or is empty)")
    if not key:
        return NO_KEY
    if not re.fullmatch(r"[\x21-\x7e]+", key):
        raise SpecError(f"the API key in ${var} holds whitespace or characters other than printable ASCII (a "
                        "trailing newline?): an HTTP header cannot carry it")
    return key


def model_kind(model: str) -> str:
    """``tiny`` (tiny, tiny-vision or tiny-base: the built-in models), ``run`` (a run folder), ``folder`` (a
    transformers model folder). Raises SpecError otherwise."""
    from ragen_core.apps.export import is_run_dir
    from ragen_core.policy import TINY_PATHS

    if model in TINY_PATHS:
        return "tiny"
    path = Path(model).expanduser()
    if is_run_dir(path):
        return "run"
    if (path / "config.toml").is_file():
        raise SpecError(f"{model} is a run folder without a checkpoint (checkpoints/latest.pt): nothing to evaluate")
    if path.is_dir() and (path / "config.json").is_file():
        return "folder"
    raise SpecError(f"MODEL {model!r} must be a transformers model folder (with config.json), a run folder, tiny, "
                    "tiny-vision or tiny-base; "
                    "for a server give --base-url URL --model-name NAME instead")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "model"


def default_out_dir(spec: EvalSpec, root: Path = Path("evals")) -> Path:
    """``evals/<model>``, or the first free ``evals/<model>-N``."""
    name = _slug(spec.model_name or "") if spec.backend == "server" else _slug(Path(str(spec.model)).name)
    base = root / name
    if not base.exists():
        return base
    i = 1
    while Path(f"{base}-{i}").exists():
        i += 1
    return Path(f"{base}-{i}")


def _count_problem(episodes: int, group_size: int) -> str | None:
    """Why ``--episodes`` x ``--group-size`` episodes per env cannot be played (one line), or None: more than
    :data:`ragen_core.limits.MAX_BATCH`, the most a run's validation (``eval.episodes``) or one training step plays;
    an evaluation lists every episode before the first one is played, and in process no batch is then larger than
    the limit whatever ``--workers`` says."""
    if episodes * group_size <= MAX_BATCH:
        return None
    return (f"--episodes {episodes} x --group-size {group_size} = {episodes * group_size} episodes per env; at most "
            f"{MAX_BATCH} (the most a run's validation or a training step plays: ragen_core.limits.MAX_BATCH)")


def _tokens_problem(args: Any, kind: str, config: Any, max_new_tokens: int, source: str) -> str | None:
    """Why an in-process model cannot generate `max_new_tokens` per turn (``--max-tokens``, else the setting of
    `source`), or None: more than the model's positions (:func:`ragen_core.limits.max_new_tokens_problem`), known
    without loading it for tiny, a model folder, or a run folder (its ``model.path``). A server's model is its own
    to check (it answers a request over its context with an error, recorded per episode)."""
    if kind == "server":
        return None
    path = config.model.path if kind == "run" else str(Path(args.model).expanduser())
    name = "--max-tokens" if args.max_tokens is not None else f"rollout.max_new_tokens ({source})"
    return max_new_tokens_problem(name, max_new_tokens, path_positions("tiny" if kind == "tiny" else path),
                                  f"MODEL {args.model}")


def build_spec(args: Any, notes: list[str]) -> EvalSpec:
    """The :class:`EvalSpec` of a fresh evaluation from parsed arguments; `notes` collects lines for the user
    (seed ranges that overlap a config's streams). Raises SpecError with a one-line message."""
    if args.model and args.base_url:
        raise SpecError("give MODEL or --base-url, not both")
    if not args.model and not args.base_url:
        raise SpecError("give MODEL (a transformers folder, a run folder or tiny) or --base-url URL --model-name NAME")
    backend = "server" if args.base_url else "local"
    if backend == "server":
        if not args.model_name:
            raise SpecError("--base-url needs --model-name NAME (the name the server serves the model under)")
        problem = base_url_problem(args.base_url)
        if problem is not None:
            raise SpecError(problem)
        api_key(args.api_key_env)  # a key that cannot be sent is refused before the folder is made
    elif args.model_name or args.api_key_env or args.extra_body:
        raise SpecError("--model-name, --api-key-env and --extra-body go with --base-url (a server), not with MODEL")
    extra_body: dict[str, Any] = {}
    if args.extra_body:
        try:
            extra_body = json.loads(args.extra_body)
        except json.JSONDecodeError as e:
            raise SpecError(f"--extra-body must be a JSON object: {e}") from None
        if not isinstance(extra_body, dict):
            raise SpecError(f"--extra-body must be a JSON object; got {type(extra_body).__name__}")
        reserved = [k for k in RESERVED_BODY if k in extra_body]
        if reserved:  # it would silently replace what eval.json and the summary say was played
            raise SpecError(f"--extra-body may not set {', '.join(reserved)}: the evaluation sets those itself "
                            "(--model-name, --temperature, --top-p, --max-tokens; stream and n are not read)")
    for name, low in (("episodes", 1), ("group_size", 1), ("workers", 1), ("max_retries", 0), ("mi_groups", 0)):
        value = getattr(args, name)
        if value is not None and value < low:
            raise SpecError(f"--{name.replace('_', '-')} must be >= {low}; got {value}")
    problem = _count_problem(128 if args.episodes is None else args.episodes, args.group_size or 1)
    if problem is not None:
        raise SpecError(problem)
    problem = seed_range_problem("--seed", EVAL_SEED if args.seed is None else args.seed,
                                 128 if args.episodes is None else args.episodes, "--episodes")
    if problem is not None:  # the seeds --seed .. --seed + --episodes - 1, each in [0, MAX_SEED]
        raise SpecError(problem)
    if args.timeout is not None and not args.timeout > 0:
        raise SpecError(f"--timeout must be > 0 seconds; got {args.timeout}")

    config, source = None, ""
    kind = model_kind(args.model) if backend == "local" else "server"
    if kind == "run":
        if args.config:
            raise SpecError("a run folder brings its own config.toml: drop --config")
        try:
            config, source = load_config_arg(str(Path(args.model).expanduser()))[0], f"run {args.model}"
        except ValueError as e:
            raise SpecError(str(e)) from None
    elif args.config:
        try:
            config, source = load_config_arg(args.config)
        except ValueError as e:
            raise SpecError(str(e)) from None
    try:
        # `--envs ''` is an empty list of ids (refused), not the default: only a missing --envs means the default.
        envs = resolve_env_ids(args.envs) if args.envs is not None else ([config.env.id] if config is not None else
                                                                         resolve_env_ids(SUITE))
    except ValueError as e:
        raise SpecError(str(e)) from None
    if args.config and config is not None and config.env.id not in envs:
        # --config sets up its own env only (config_for_env): with none of --envs being it, it would change nothing.
        raise SpecError(f"--config {args.config} sets up {config.env.id}, which --envs does not include: a config "
                        "applies to its own env id only (add it to --envs, or drop --config)")

    sampling = Sampling(args.temperature, args.top_p, args.max_tokens)
    seed = EVAL_SEED if args.seed is None else int(args.seed)
    episodes = 128 if args.episodes is None else int(args.episodes)
    plans: dict[str, dict[str, Any]] = {}
    for env_id in envs:
        cfg, src = config_for_env(env_id, config, source)
        try:
            plans[env_id] = make_plan(env_id, cfg, src, sampling).to_json()
        except ValueError as e:
            raise SpecError(str(e)) from None
        problem = _tokens_problem(args, kind, config, plans[env_id]["settings"]["max_new_tokens"], src)
        if problem is not None:
            raise SpecError(problem)
        overlap = seed_overlaps(range(seed, seed + episodes), cfg)
        if overlap:
            notes.append(f"note: {env_id}: seeds {seed}..{seed + episodes - 1} overlap the {', '.join(overlap)} "
                         f"seeds of its settings ({src})" + (": this replays that validation" if overlap ==
                                                             ["validation"] else ""))
    return EvalSpec(
        backend=backend, model=None if backend == "server" else str(args.model), base_url=args.base_url,
        model_name=args.model_name, api_key_env=args.api_key_env, envs=envs, episodes=episodes, seed=seed,
        group_size=args.group_size or 1, workers=args.workers or DEFAULT_WORKERS[backend],
        timeout=float(args.timeout or 120.0), max_retries=4 if args.max_retries is None else int(args.max_retries),
        device=args.device or "auto", mi_groups=32 if args.mi_groups is None else int(args.mi_groups),
        extra_body=extra_body, plans=plans,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
