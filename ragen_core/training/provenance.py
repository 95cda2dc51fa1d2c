"""What produced a run: ``provenance.json`` in the run folder, written once when the run starts.

    {"commit": "43a82f3...", "dirty": false, "config_sha256": "9f2c...", "ragen2": "0.1.0",
     "torch": "2.13.0+cpu", "python": "3.11.7", "cpu": "AMD EPYC 7B13", "torch_threads": 1,
     "started": "2026-12-03T10:00:00+00:00"}

``commit`` is the git commit of the checkout the code was imported from (None for an installed wheel, whose
version stands in for it, also when that wheel lies inside another project's repository), ``dirty`` whether
tracked files differed from it (untracked files are not counted; None when git cannot tell), ``config_sha256``
the SHA-256 of the resolved ``config.toml`` the run wrote, ``cpu`` the CPU's model name (None where
``/proc/cpuinfo`` cannot be read) and ``torch_threads`` the torch CPU threads the run computed with (``run.threads``
resolved: 0 means "auto", whose count depends on the model and the machine): the same code and config give the
same numbers only on a CPU whose math kernels round alike, at the same thread count (docs/train.md). A study's
report (``ragen reproduce``) reads these, so every number in it can be traced to the code and the config that made
it.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["PROVENANCE", "config_sha256", "cpu_model", "git_state", "write_provenance"]

#: The file name in the run folder.
PROVENANCE = "provenance.json"


def config_sha256(config_text: str) -> str:
    """SHA-256 (hex) of a resolved config's TOML text."""
    return hashlib.sha256(config_text.encode("utf-8")).hexdigest()


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


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragen2")
    except PackageNotFoundError:
        return None


def write_provenance(run_dir: str | Path, config_text: str) -> dict[str, Any]:
    """Write ``provenance.json`` into `run_dir` (see the module docstring) and return its content; called once the
    run has set its thread count (``torch_threads`` is the count in force)."""
    import torch

    commit, dirty = git_state()
    record = {"commit": commit, "dirty": dirty, "config_sha256": config_sha256(config_text),
              "ragen2": _version(), "torch": torch.__version__, "python": platform.python_version(),
              "cpu": cpu_model(), "torch_threads": torch.get_num_threads(),
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (Path(run_dir) / PROVENANCE).write_text(json.dumps(record, indent=1) + "\n")
    return record
