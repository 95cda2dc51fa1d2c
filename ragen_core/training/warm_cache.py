"""A cache of warm-started weights, shared by runs that differ only after the warm start.

A study trains many variants of one config per seed (no filter, top-p, random drop, quartiles, ...). Their warm
starts are identical, since :func:`ragen_core.training.sft.warm_start` reads only the model, env, rollout and warm-start
sections and ``run.seed``, and it is the most expensive part of a small run (FrozenLake: 7 of 11 minutes). With
``warm_start.cache_dir`` set, the first run of a (config, seed) writes the warm-started weights and the SFT
metrics under a key that hashes everything the warm start reads; later runs load them instead of training. The
entry also records the digest of the weights it started from (:func:`starting_weights_digest`), and is used only
by a run that starts from the same weights: a model folder replaced in place (same path and shapes, other weights)
trains its warm start again and replaces the entry. Weights that hold a NaN or an inf are never stored nor loaded.

The step-0 measurements (the validation and the held-out probe before the first RL step) depend on the same inputs
plus the eval and probe settings, so they are shared the same way (:func:`cached_step0`): every arm of a seed
measures its starting point once.

A file lock per key makes concurrent runs of the same key wait for the first one rather than train twice (the
kernel releases it when its holder dies, SIGKILL included, so a lock file left behind blocks nothing). Entries are
written atomically and carry their key and a SHA-256 of their content: an entry that is truncated, overwritten or
edited is never used, but computed again and replaced (a RuntimeWarning names it); the temporary file a writer
killed mid-write leaves is removed by the next run of its key. A cache folder that cannot be
made or written in is a ConfigError naming ``warm_start.cache_dir``; ``~`` in it is the home folder.
The cache is on the local file system: runs on several machines need a shared folder (or no cache). The key
names the machine's arithmetic (CPU model, dispatch level and core, torch thread count, or GPU name:
:func:`machine_arithmetic`), so
machines that round differently share nothing and each run gets the numbers it would have computed itself.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib
import inspect
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from ragen_core.training.config import ConfigError

__all__ = ["cache_key", "cached_warm_start", "machine_arithmetic", "starting_weights_digest",
           "demonstration_code_digest", "training_code_digest", "step0_key", "cached_step0", "default_warm_cache_dir"]

#: Bump when the warm start's algorithm changes, so that stale weights are never reused.
_FORMAT = 1


def cache_key(cfg: Any) -> str:
    """Hex SHA-256 of every input of the warm start that the config names (the starting weights themselves are
    checked against the entry's record: :func:`cached_warm_start`): model, env, rollout and warm-start sections,
    run.seed,
    run.device, the machine's arithmetic (:func:`machine_arithmetic`: CPU model, dispatch level and core, and torch
    thread count, or GPU name), the torch version, this cache's format, the source of the demonstrations
    (:func:`demonstration_code_digest`), the source that turns them into weights and measures them
    (:func:`training_code_digest`) and, for the built-in tiny model, its pinned identity (recipe and corpus
    versions, the recorded model digests; for "tiny-base" also its pre-training recipe's digest), so that a new tiny
    model, an edited demonstrator or an edited forward never reads an old warm start: the cache can be shared by
    studies and by checkouts of different commits (`ragen reproduce` shares one by default)."""
    from ragen_core.policy.tiny import TINY_CORPUS_VERSION, TINY_FORMAT_VERSION, TINY_MODEL_SHA256
    from ragen_core.policy.tiny_base import TINY_BASE_RECIPE_SHA256

    inputs = {
        "format": _FORMAT,
        "torch": torch.__version__,
        "seed": cfg.run.seed,
        "device": cfg.run.device,
        "model": dataclasses.asdict(cfg.model),
        "env": dataclasses.asdict(cfg.env),
        "rollout": dataclasses.asdict(cfg.rollout),
        "warm_start": {k: v for k, v in dataclasses.asdict(cfg.warm_start).items() if k != "cache_dir"},
    }
    if str(cfg.model.path).startswith("tiny"):
        inputs["tiny"] = {"format": TINY_FORMAT_VERSION, "corpus": TINY_CORPUS_VERSION, "sha256": TINY_MODEL_SHA256}
    if str(cfg.model.path) == "tiny-base":  # and the base model's recipe (its weights are built per machine)
        inputs["tiny_base"] = TINY_BASE_RECIPE_SHA256
    inputs["code"] = demonstration_code_digest(cfg.env.id)
    inputs["training_code"] = training_code_digest()
    inputs["machine"] = machine_arithmetic(cfg.run.device)
    blob = json.dumps(inputs, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()


def machine_arithmetic(device: str) -> dict[str, Any]:
    """What decides the float rounding of a computation on `device` beside the code and the config: on the CPU its
    model name, the instruction set torch's kernels dispatch to and the core's family and model
    (:func:`ragen_core.training.provenance.cpu_arithmetic`: an AVX-512 core and one without gave a warm start that
    validated at 13.3% and 15.6%, docs/train.md, and a hypervisor can give both the same model name), and torch's
    thread count now (the run's ``run.threads``, in force when the warm start runs: a thread count splits sums in
    other places); on a GPU its name. Part of the cache key, so that a cache folder shared by machines, or by runs
    at other thread counts, never hands one of them weights it would not have computed itself. On the CPU also the
    decoding step (:func:`ragen_core.policy.native.decode_path`), which decides the step-0 validation's and probe's
    sampled tokens that the cache stores beside the weights."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return {"gpu": torch.cuda.get_device_name(torch.device(device))}
    from ragen_core.policy.native import decode_path
    from ragen_core.training.provenance import cpu_arithmetic, cpu_model

    return {"cpu": cpu_model(), "cpu_arithmetic": cpu_arithmetic(), "threads": torch.get_num_threads(),
            "decoding": decode_path()}


def starting_weights_digest(model: torch.nn.Module, path: str | Path | None = None) -> str:
    """Hex SHA-256 naming the weights a warm start starts from (or a step-0 measurement measures).

    :func:`ragen_core.policy.identity.weights_sha256` of `model` as loaded: every tensor's name, dtype, shape and
    bytes for models up to ``FULL_HASH_PARAMETERS`` (50M) parameters, the tiny ones and small LLMs (hashing 50M
    float32 parameters reads 200 MB: well under a second, once per run). Above that it hashes the first 64 KiB of
    each tensor only (reading a 7B model's 14 GB again at every start would cost tens of seconds), so for those the
    digest adds the name, size and modification time (ns) of every file of the model folder `path` (weights, config,
    tokenizer): a folder replaced in place, by a copy or a new download, changes them, even where the new weights
    happen to share every tensor's first bytes. The price is a spurious recompute when the files are only touched
    (or copied without their times).
    """
    from ragen_core.policy.identity import FULL_HASH_PARAMETERS, weights_sha256

    h = hashlib.sha256(weights_sha256(model).encode())
    folder = Path(path).expanduser() if path is not None else None
    if sum(t.numel() for t in model.state_dict().values()) > FULL_HASH_PARAMETERS and folder is not None \
            and folder.is_dir():
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            st = f.stat()
            h.update(f"{f.relative_to(folder).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def demonstration_code_digest(env_id: str) -> str:
    """Hex SHA-256 of the source the demonstrations are written by: the env's module (every module of its package
    when it has its own, e.g. ``ragen_envs/searchqa/``), ``ragen_envs/base.py`` and the warm start's own modules
    (``sft.py``, ``demonstrators.py``). An edit of the env's oracle, habit or wording changes the demonstrations
    while the config stays the same; without this the cache would hand back weights trained on the old ones."""

    import ragen_envs  # noqa: F401  (registers the ids)
    from ragen_envs.registration import find_spec

    here = Path(__file__).resolve().parent
    files = {here / "sft.py", here / "demonstrators.py", Path(ragen_envs.__file__).resolve().parent / "base.py"}
    entry = find_spec(env_id).entry_point
    if isinstance(entry, str):
        module = importlib.import_module(entry.split(":")[0])
    else:
        module = importlib.import_module(entry.__module__)
    source = Path(inspect.getfile(module)).resolve()
    package = source.parent
    if package != Path(ragen_envs.__file__).resolve().parent:  # the env's own package: every module of it
        files |= set(package.glob("*.py"))
    else:
        files.add(source)
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def training_code_digest(root: Path | None = None) -> str:
    """Hex SHA-256 of the source that turns demonstrations into weights and measures a model at step 0: every
    module of ``ragen_core`` except its apps and scale-out integrations (the rollout and the episode's token
    layout, the policies and their lean forward with the C++ source of its compiled decoding steps, the SFT loop,
    the trainer's validation and probe, the MI math).
    Coarse on purpose: an edit that changes no number also gives a new key (one warm start recomputed), where a
    finer list could miss a module that changes the weights' float rounding and hand back stale weights.
    `root`: the package folder (default: this ``ragen_core``)."""
    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    files = sorted(f for f in root.rglob("*") if f.suffix in (".py", ".cpp")
                   and f.relative_to(root).parts[0] not in ("apps", "integrations"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def default_warm_cache_dir() -> Path:
    """The warm-start cache `ragen reproduce` shares across studies: ``$RAGEN2_CACHE/warm_starts`` (default
    ``~/.cache/ragen2/warm_starts``, beside the tiny models)."""
    from ragen_core.policy.tiny import cache_root

    return cache_root() / "warm_starts"


def cached_warm_start(policy: Any, cfg: Any, device: torch.device | None = None) -> dict[str, float]:
    """:func:`ragen_core.training.sft.warm_start`, through the cache in ``cfg.warm_start.cache_dir`` (empty: no cache).

    An entry is used only when the digest of the policy's weights before the warm start
    (:func:`starting_weights_digest`) is the one it records (entries written before it was recorded are computed
    again, once). Weights that hold a NaN or an inf are neither stored (NonFiniteError naming ``warm_start.lr``)
    nor loaded (the entry is computed again).

    Returns the SFT metrics with ``sft/cached`` = 1.0 when the weights were loaded, 0.0 when trained here.
    The timing metrics of a hit are the loading time (``perf/sft_s``) and the original run's
    (``perf/sft_s_original``). An entry that cannot be used (truncated, overwritten, its weights altered since
    they were written, or not weights of this policy) is never loaded: a RuntimeWarning names it, and the warm start
    is trained here and replaces it. ConfigError (naming ``warm_start.cache_dir``) when the folder cannot be made or
    written in.
    """
    import time

    from ragen_core.training.sft import warm_start

    root = _cache_folder(cfg)
    if root is None:
        return {**warm_start(policy, cfg, device=device), "sft/cached": 0.0}
    key = cache_key(cfg)
    start = starting_weights_digest(policy.model, cfg.model.path)  # before the warm start moves them
    path = root / f"{key}.pt"
    with _lock(root / f"{key}.lock") as lock:
        lock.remove_leftovers(path)
        if path.is_file():
            t0 = time.perf_counter()
            blob = _read_weights(path, key, policy.model, start)
            if blob is not None:
                policy.model.load_state_dict(blob["model"])
                metrics = {k: float(v) for k, v in blob["metrics"].items()}
                metrics["perf/sft_s_original"] = metrics.get("perf/sft_s", 0.0)
                metrics["perf/sft_s"] = time.perf_counter() - t0
                return {**metrics, "sft/cached": 1.0}
        metrics = warm_start(policy, cfg, device=device)
        state = {k: v.detach().to("cpu") for k, v in policy.model.state_dict().items()}
        bad = _nonfinite(state)
        if bad is not None:  # a later run would load them as its starting point
            from ragen_core.training.checkpoint import NonFiniteError

            raise NonFiniteError(f"the warm start's weights hold NaN or inf ({bad}), so they were not cached in "
                                 f"{root}: lower warm_start.lr (now {cfg.warm_start.lr:g})")
        blob = {"model": state, "metrics": metrics, "key": key, "sha256": _weights_digest(state, metrics),
                "start": start}
        _write_atomically(path, lambda tmp: torch.save(blob, tmp))
        return {**metrics, "sft/cached": 0.0}


def _cache_folder(cfg: Any) -> Path | None:
    """The cache folder of `cfg` (``~`` expanded), made when missing; None without one. ConfigError naming
    ``warm_start.cache_dir`` when it is a file or cannot be made: one line, not an OSError from deep inside."""
    folder = str(cfg.warm_start.cache_dir or "")
    if not folder:
        return None
    root = Path(folder).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = "it is a file, not a folder" if root.is_file() else f"it cannot be made ({e.strerror or e})"
        raise ConfigError(f"warm_start.cache_dir {folder!r}: {why}; give a folder the run can write in, or \"\" "
                          f"for no cache") from None
    return root


class _Damaged(Exception):
    """A cache entry that exists but cannot be used (the message says why)."""


def _unusable(path: Path, why: str) -> None:
    """Warn that the cache entry `path` is not used (it is computed again and replaced)."""
    warnings.warn(f"warm-start cache entry {path} cannot be used ({why}): computing it again, and replacing it",
                  RuntimeWarning, stacklevel=3)


def _weights_digest(state: dict[str, torch.Tensor], metrics: dict[str, Any]) -> str:
    """Hex SHA-256 of a cached warm start: every tensor's name, dtype, shape and bytes, and the metrics. torch's
    files check their structure but not their data, so a flipped bit in a weight would load silently without it."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(metrics, sort_keys=True).encode())
    return h.hexdigest()


def _read_weights(path: Path, key: str, model: torch.nn.Module, start: str) -> dict[str, Any] | None:
    """The cached warm start in `path` when it is whole, written for `key`, trained from the weights of digest
    `start`, finite, and fits `model` (names, shapes, dtypes); otherwise None, after a RuntimeWarning naming the
    file. Checked before anything is loaded, since
    ``load_state_dict`` copies the tensors that match before it raises on those that do not."""
    try:
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, UnpicklingError, EOFError, ... on damage
            raise _Damaged(f"not a readable torch file: {type(e).__name__}") from None
        if not isinstance(blob, dict) or not {"model", "metrics", "key", "sha256"} <= blob.keys():
            raise _Damaged("not a cached warm start")
        if blob["key"] != key:
            raise _Damaged(f"it holds the entry of key {str(blob['key'])[:12]}...")
        if blob.get("start") != start:
            raise _Damaged("it was trained from other starting weights (the model at model.path changed since)"
                           if "start" in blob else "it does not record the weights it started from (an older entry)")
        state, metrics = blob["model"], blob["metrics"]
        if not isinstance(state, dict) or not isinstance(metrics, dict) or not all(
                isinstance(v, torch.Tensor) for v in state.values()):
            raise _Damaged("not a cached warm start")
        if _weights_digest(state, metrics) != blob["sha256"]:
            raise _Damaged("its weights or metrics changed after they were written")
        bad = _nonfinite(state)
        if bad is not None:  # written before this check existed: a warm start that diverged
            raise _Damaged(f"its weights hold NaN or inf ({bad})")
        own = model.state_dict()
        if state.keys() != own.keys():
            raise _Damaged("its weights are not this model's: other parameter names")
        odd = next((n for n, t in own.items() if (t.shape, t.dtype) != (state[n].shape, state[n].dtype)), None)
        if odd is not None:
            raise _Damaged(f"its weights are not this model's: {odd} differs in shape or dtype")
        return blob
    except _Damaged as e:
        _unusable(path, str(e))
        return None


def _nonfinite(state: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor of `state` holding a NaN or an inf; None when all are finite."""
    from ragen_core.training.checkpoint import nonfinite_weights

    return nonfinite_weights({"model": state})


def _write_atomically(path: Path, write: Any) -> None:
    """``write(tmp)`` to a file beside `path`, then rename it over `path`: a reader sees the whole file or none,
    and a write that fails (a full disk) leaves neither a partial entry nor its temporary file behind."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class _lock:
    """An exclusive advisory lock on a file (fcntl; a no-op where fcntl does not exist).

    The kernel drops the lock when its holder exits, however it ends (SIGKILL too), so a lock file left behind
    never blocks a later run. A run that finds the lock held says so on stderr before it waits.
    """

    def __init__(self, path: Path):
        self.path = path
        self.handle = None

    def __enter__(self) -> _lock:
        try:
            import fcntl
        except ImportError:  # Windows: no concurrent runs of one key are coordinated there
            return self
        try:
            self.handle = open(self.path, "a+")
        except OSError as e:
            raise ConfigError(f"warm_start.cache_dir {str(self.path.parent)!r}: cannot write in it "
                              f"({e.strerror or e}); give a folder the run can write in, or \"\" for no "
                              f"cache") from None
        try:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process to fill the warm-start cache entry locked by {self.path}",
                  file=sys.stderr, flush=True)
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        except BaseException:
            self.handle.close()
            raise
        return self

    def remove_leftovers(self, path: Path) -> None:
        """Remove the temporary files of `path` (:func:`_write_atomically`'s ``NAME.tmpPID``) that writers killed
        mid-write left behind: an entry is written only under its key's lock, so while this lock is held no such
        file belongs to a live writer. Never read, they would otherwise stay for good (a killed study of a large
        model leaves one copy of its weights each). Nothing is removed without the lock (no fcntl)."""
        if self.handle is None:
            return
        for leftover in path.parent.glob(f"{glob.escape(path.name)}.tmp*"):
            leftover.unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            import fcntl

            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()


#: The eval and MI keys that decide nothing measured at step 0 (when to measure, not what): left out of its key.
_CADENCE_KEYS = {"eval": ("every", "until", "at_start"),
                 "mi": ("every", "until", "probe_every", "probe_until", "ema_alpha", "ema_eps")}


def step0_key(cfg: Any, what: str) -> str:
    """Hex SHA-256 of everything a step-0 measurement `what` ("validation" or "probe") reads: the warm start's key
    (:func:`cache_key`) and the eval and MI sections, cadence keys aside (the weights measured are checked against
    the entry's record: :func:`cached_step0`)."""
    sections = {name: {k: v for k, v in dataclasses.asdict(getattr(cfg, name)).items() if k not in skip}
                for name, skip in _CADENCE_KEYS.items()}
    blob = json.dumps({"warm": cache_key(cfg), "what": what, **sections}, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()


def cached_step0(cfg: Any, what: str, compute: Any,
                 model: torch.nn.Module | None = None) -> tuple[dict[str, Any], bool]:
    """``(value, hit)``: the step-0 measurement `what` from the cache in ``cfg.warm_start.cache_dir``, or
    ``compute()`` (a JSON-serialisable dict, stored for the next run of the same key). No cache folder: always
    computed. Floats round-trip exactly through JSON, so a hit gives the numbers the run would have computed (its
    validation and probe draw from generators seeded by run.seed and the step alone). An entry that cannot be used
    (not JSON, truncated, edited, another key's) is computed again and replaced, after a RuntimeWarning naming it.

    The file is ``{"key": ..., "sha256": ..., "value": ...[, "weights": ...]}``: the SHA-256 of the value's JSON
    text guards against an edited number, which would otherwise be handed back as a measurement.

    `model`: the model measured; the entry records its :func:`starting_weights_digest` (``"weights"``) and is used
    only for the same weights (a model folder replaced in place gives other ones). None: not recorded nor checked
    (callers that measure no model of their own)."""
    root = _cache_folder(cfg)
    if root is None:
        return compute(), False
    weights = None if model is None else starting_weights_digest(model, cfg.model.path)
    key = step0_key(cfg, what)
    path = root / f"{key}.step0.json"
    with _lock(root / f"{key}.lock") as lock:
        lock.remove_leftovers(path)
        if path.is_file():
            value = _read_step0(path, key, weights)
            if value is not None:
                return value, True
        value = compute()
        text = json.dumps({"key": key, "sha256": _value_digest(value), "value": value,
                           **({"weights": weights} if weights is not None else {})})
        _write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        return value, False


def _value_digest(value: Any) -> str:
    """Hex SHA-256 of a step-0 value's canonical JSON text."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _read_step0(path: Path, key: str, weights: str | None = None) -> dict[str, Any] | None:
    """The cached step-0 value in `path` when the file is whole, written for `key` and (`weights` given) measured
    on the weights of that digest; otherwise None, after a RuntimeWarning naming the file."""
    try:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise _Damaged(f"not readable JSON: {type(e).__name__}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), dict):
            raise _Damaged("not a cached step-0 measurement")
        if entry.get("key") != key:
            raise _Damaged("it holds another key's measurement")
        if entry.get("sha256") != _value_digest(entry["value"]):
            raise _Damaged("its numbers changed after they were written")
        if weights is not None and entry.get("weights") != weights:
            raise _Damaged("it was measured on other weights (the model at model.path changed since)"
                           if "weights" in entry else "it does not record the weights it measured (an older entry)")
        return entry["value"]
    except _Damaged as e:
        _unusable(path, str(e))
        return None
