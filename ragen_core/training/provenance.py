"""What produced a run: ``provenance.json`` in the run folder, written once when the run starts.

    {"commit": "43a82f3...", "dirty": false, "config_sha256": "9f2c...",
     "config_sha256_excludes": ["run.progress", "warm_start.cache_dir"], "ragen2": "0.1.0",
     "torch": "2.13.0+cpu", "python": "3.11.7", "cpu": "AMD EPYC 7B13",
     "cpu_arithmetic": "AVX2; family 25 model 1 stepping 1", "torch_threads": 1, "decoding": "fused",
     "started": "2026-12-03T10:00:00+00:00"}

``commit`` is the git commit of the checkout the code was imported from (None for an installed wheel, whose
version stands in for it, also when that wheel lies inside another project's repository), ``dirty`` whether
tracked files differed from it (untracked files are not counted; None when git cannot tell), ``config_sha256``
the SHA-256 of the resolved ``config.toml`` the run wrote, without the keys that change no result
(:data:`RESULT_NEUTRAL_KEYS`, which ``config_sha256_excludes`` lists: where the warm-start cache is, the progress
bar) and independent of the text's layout (:func:`config_sha256`), so two runs of one design hash equal; records
written before ``config_sha256_excludes`` existed hashed the whole text. ``cpu`` the CPU's model name (None where
``/proc/cpuinfo`` cannot be read) and ``torch_threads`` the torch CPU threads the run computed with (``run.threads``
resolved: 0 means "auto", whose count depends on the model and the machine): the same code and config give the
same numbers only on a CPU whose math kernels round alike, at the same thread count (docs/train.md). ``decoding``
the CPU decoding step (``fused``, ``ops`` or ``python``; :func:`ragen_core.policy.native.decode_path`): the fused
one's logits differ from the other two's by float rounding. A study's
report (``ragen reproduce``) reads these, so every number in it can be traced to the code and the config that made
it.

A checkout with uncommitted changes is rebuilt from what the run recorded: the commit plus ``code.patch`` beside
``provenance.json``, the changes of tracked files (``git diff --binary HEAD`` of the whole repository, binary-safe:
``git apply code.patch`` on that commit gives the files the run imported), named in the record with its size and
digest::

    "patch": {"file": "code.patch", "bytes": 1834, "sha256": "5e1f..."},
    "untracked": ["ragen_envs/my_env.py"], "untracked_count": 1

``patch`` is None when tracked files equal the commit (or without a checkout, or when git fails), and its ``file``
None when the patch is larger than :data:`PATCH_LIMIT` (then ``too_large`` is true: the digest still tells two such
runs apart).
``untracked`` names (never copies) the untracked files, not ignored by git, under the source folders the run imports
(ragen_core, ragen_envs, theory_checks): at most :data:`UNTRACKED_NAMES` names, ``untracked_count`` counts them
all; None without a checkout. An installed wheel records neither, its version stands for its code.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["CODE_PATCH", "PATCH_LIMIT", "PROVENANCE", "RESULT_NEUTRAL_KEYS", "UNTRACKED_NAMES", "code_state",
           "config_sha256",
           "cpu_model", "git_state", "source_folders", "write_provenance"]

#: The file name in the run folder.
PROVENANCE = "provenance.json"
#: The uncommitted changes of tracked files at the run's start, beside :data:`PROVENANCE`.
CODE_PATCH = "code.patch"
#: The largest patch written out (bytes, 5 MiB): a larger one (a changed data file, a vendored folder) is named by
#: its size and digest only, so a run folder never grows by the size of whatever the checkout holds.
PATCH_LIMIT = 5 * 1024 * 1024
#: The most untracked file names recorded (``untracked_count`` counts them all).
UNTRACKED_NAMES = 200
#: The top-level packages a run imports (setup.py ships these): their untracked files are named.
SOURCE_PACKAGES = ("ragen_core", "ragen_envs", "theory_checks")


#: Keys of a run's config that change nothing it computes or records (``section.key``): where the warm-start cache
#: is (its key covers every input of a warm start, so any folder gives the same warm start) and the progress bar.
#: :func:`config_sha256` leaves them out, and ``ragen reproduce`` lets a run folder differ from its design in them
#: (``ragen_core.apps.reproduce.runner.SAME_RUN_KEYS`` is this set).
RESULT_NEUTRAL_KEYS = frozenset({"warm_start.cache_dir", "run.progress"})


def config_sha256(config_text: str) -> str:
    """SHA-256 (hex) of the config a run computed with: of a resolved config's TOML text, read as TOML, without the
    keys of :data:`RESULT_NEUTRAL_KEYS`, as JSON with sorted keys and no spaces (``json.dumps(config,
    sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, UTF-8). Two runs of one design hash equal
    whatever their warm-start cache folders and progress bars; any other key that differs gives another hash, and
    so does a key that one config has and the other lacks (a version that added a key). The layout of the text
    (order, spacing, comments) does not count.

    Raises:
        ValueError: `config_text` is not TOML (one line naming the parser's complaint).
    """
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        config = tomllib.loads(config_text)
    except ValueError as e:  # TOMLDecodeError
        raise ValueError(f"config_sha256: the config is not TOML ({e})") from None
    for name in RESULT_NEUTRAL_KEYS:
        section, key = name.split(".", 1)
        if isinstance(config.get(section), dict):
            config[section].pop(key, None)
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_state(path: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding `path` (default: this package); (None, None) outside one, without
    git, or when `path` holds no file tracked by that checkout: a package installed in a virtual environment that
    lies inside another project's repository is not that project's commit. `dirty` is True when tracked files
    differ from the commit, None when git cannot tell (a damaged index)."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10)
        if commit.returncode != 0:
            return None, None
        tracked = subprocess.run(["git", "-C", str(where), "ls-files", "--error-unmatch", "--", "."],
                                 capture_output=True, timeout=10)
        if tracked.returncode != 0:
            return None, None
        diff = subprocess.run(["git", "-C", str(where), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    # git diff --quiet: 0 no differences, 1 differences, anything else an error (not "dirty").
    return commit.stdout.strip(), {0: False, 1: True}.get(diff.returncode)


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux); None where it cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_arithmetic() -> str | None:
    """What decides how torch's CPU kernels round on this machine, beyond :func:`cpu_model`: the instruction set
    ATen's kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``: ``AVX2``, ``AVX512``, ...) and the
    core's family, model and stepping from ``/proc/cpuinfo``, e.g. ``"AVX2; family 25 model 1 stepping 1"``.

    The model name alone does not tell: a hypervisor can show a Zen 3 core (AVX2) and a Zen 4 core (AVX-512) both
    as "AMD EPYC", and their kernels round differently: the same code, config and seed trained a collapse config's
    warm start that validated at 43.0% on one and 26.6% on the other. None where neither can be read."""
    import torch

    parts = []
    try:
        parts.append(str(torch.backends.cpu.get_cpu_capability()))
    except (AttributeError, RuntimeError):  # a torch without it
        pass
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first core's block is enough: every core of a machine is the same model here
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    core = " ".join(f"{name} {fields[key]}" for key, name in (("cpu family", "family"), ("model", "model"),
                                                               ("stepping", "stepping")) if key in fields)
    if core:
        parts.append(core)
    return "; ".join(parts) or None


def source_folders() -> list[Path]:
    """The folders of :data:`SOURCE_PACKAGES` beside this package (in a checkout: the repository's source folders;
    in a wheel: site-packages' copies, which no checkout tracks)."""
    root = Path(__file__).resolve().parents[2]
    return [root / name for name in SOURCE_PACKAGES if (root / name).is_dir()]


def code_state(run_dir: str | Path, name: str | None = CODE_PATCH,
               source: Sequence[str | Path] | None = None) -> dict[str, Any]:
    """The code a run computes with, as its records name it: ``{"commit", "dirty", "patch", "untracked",
    "untracked_count"}`` (module docstring) of the checkout holding `source` (the folders of the code the run
    imports; default :func:`source_folders`), writing the patch of its uncommitted changes into `run_dir` as `name`
    (None: ``code-<first 12 hex digits of its SHA-256>.patch``, one file per distinct patch).

    Outside a git checkout, or for folders no checkout tracks (an installed wheel), all five are None. A `name`
    written by an earlier start in this folder is removed when there is nothing to write (a restart from a clean
    checkout must not leave the old changes beside the new record)."""
    folders = [Path(f).resolve() for f in (source if source is not None else source_folders())]
    commit, dirty = git_state(folders[0] if folders else None)
    state: dict[str, Any] = {"commit": commit, "dirty": dirty, "patch": None, "untracked": None,
                             "untracked_count": None}
    root = _top_folder(folders[0]) if commit is not None and folders else None
    if root is not None:
        names = _untracked(root, folders)
        state.update(patch=_write_patch(root, Path(run_dir), name),
                     untracked=None if names is None else names[:UNTRACKED_NAMES],
                     untracked_count=None if names is None else len(names))
    if name is not None and (state["patch"] is None or state["patch"]["file"] is None):
        (Path(run_dir) / name).unlink(missing_ok=True)
    return state


def _top_folder(where: Path) -> Path | None:
    """The top folder of the git checkout holding `where`; None when git cannot say."""
    try:
        top = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(top.stdout.strip()).resolve() if top.returncode == 0 and top.stdout.strip() else None


#: ``git diff`` that ``git apply`` takes back whatever the user's git config says: binary files in full
#: (``--binary --full-index``), no external diff tools or text conversions, no colours, and the a/ b/ prefixes
#: (``diff.noprefix`` would drop them). Run at the top folder, so paths are the repository's.
_DIFF = ("diff", "--binary", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/",
         "--dst-prefix=b/", "HEAD", "--")


def _write_patch(root: Path, run_dir: Path, name: str | None, timeout: float = 120.0) -> dict[str, Any] | None:
    """Stream ``git diff HEAD`` of `root` into `run_dir`: ``{"file", "bytes", "sha256"}`` (plus ``"too_large":
    true`` and ``"file": None`` above :data:`PATCH_LIMIT`, when no file is kept), None when tracked files equal the
    commit or git fails. The digest and size are of the whole diff; memory and disk stay within the limit."""
    tmp = run_dir / f".{name or 'code'}.{os.getpid()}.tmp"
    digest, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out, subprocess.Popen(["git", "-C", str(root), *_DIFF], stdout=subprocess.PIPE,
                                                      stderr=subprocess.DEVNULL) as proc:
            # A git that hangs (a stale network mount) is killed. The watchdog is a daemon, started inside the
            # try: a Ctrl-C that lands while it starts (Thread.start waits for it) or while git runs must not
            # leave a live non-daemon thread behind, which would keep the interrupted run's process from exiting
            # for `timeout` seconds (it did: a stopped study then waited on that run).
            watchdog = threading.Timer(timeout, proc.kill)
            watchdog.daemon = True
            stream = proc.stdout
            try:
                watchdog.start()
                for chunk in iter(lambda: stream.read(1 << 20), b""):  # type: ignore[union-attr]
                    digest.update(chunk)
                    size += len(chunk)
                    if size <= PATCH_LIMIT:
                        out.write(chunk)
                code = proc.wait()
            finally:
                watchdog.cancel()
        if code != 0 or size == 0:
            return None
        file = name or f"code-{digest.hexdigest()[:12]}.patch"
        if size > PATCH_LIMIT:
            return {"file": None, "bytes": size, "sha256": digest.hexdigest(), "too_large": True}
        tmp.replace(run_dir / file)
        return {"file": file, "bytes": size, "sha256": digest.hexdigest()}
    except OSError:
        return None
    finally:
        tmp.unlink(missing_ok=True)


def _untracked(root: Path, folders: Sequence[Path]) -> list[str] | None:
    """The untracked, not ignored files under `folders` (paths from `root`, sorted); None when git fails."""
    inside = [str(f.relative_to(root)) for f in folders if f.is_relative_to(root)]
    if not inside:
        return []
    try:
        found = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard", "--",
                                *inside], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if found.returncode != 0:
        return None
    return sorted(n for n in found.stdout.decode("utf-8", "backslashreplace").split("\0") if n)


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragen2")
    except PackageNotFoundError:
        return None


def _decoding() -> str:
    """The CPU decoding step this process runs (:func:`ragen_core.policy.native.decode_path`)."""
    from ragen_core.policy.native import decode_path

    return decode_path()


def write_provenance(run_dir: str | Path, config_text: str,
                     source: Sequence[str | Path] | None = None) -> dict[str, Any]:
    """Write ``provenance.json`` (and ``code.patch`` for a checkout with uncommitted changes) into `run_dir` (see the
    module docstring) and return its content; called once the run has set its thread count (``torch_threads`` is
    the count in force). `source`: the folders of the code the run imports (default :func:`source_folders`)."""
    import torch

    code = code_state(run_dir, CODE_PATCH, source)
    record = {"commit": code.pop("commit"), "dirty": code.pop("dirty"), "config_sha256": config_sha256(config_text),
              "config_sha256_excludes": sorted(RESULT_NEUTRAL_KEYS), "ragen2": _version(), "torch": torch.__version__,
              "python": platform.python_version(), "cpu": cpu_model(), "cpu_arithmetic": cpu_arithmetic(),
              "torch_threads": torch.get_num_threads(), "decoding": _decoding(),
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), **code}
    (Path(run_dir) / PROVENANCE).write_text(json.dumps(record, indent=1) + "\n")
    return record
