"""`Limits`: the resource limits of one sandboxed run, validated (how each is enforced: the package docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ragen_envs.validation import require_int


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        wall_seconds: wall-clock deadline; the run is killed when it passes.
        cpu_seconds: CPU time, rounded up to whole seconds, of each process (RLIMIT_CPU) and of the
            whole run (all its processes together: cgroup CPU usage or the process-tree watch).
        memory_bytes: address space of each process (RLIMIT_AS) and memory of the whole run (cgroup
            memory limit without swap, or the summed resident memory in the process-tree watch).
        output_bytes: cap on stdout and on stderr (each); exceeding one kills the run.
        file_bytes: largest file the program may write (RLIMIT_FSIZE).
        disk_bytes: size of each private tmpfs (working dir, /tmp, /dev/shm) in the namespace modes.
        max_processes: processes/threads of the run (RLIMIT_NPROC of its uid; cgroup pids.max),
            including the program.
        max_open_files: file descriptors per process (RLIMIT_NOFILE).
    """

    wall_seconds: float = 4.0
    cpu_seconds: float = 2.0
    memory_bytes: int = 512 * 1024**2
    output_bytes: int = 1024**2
    file_bytes: int = 16 * 1024**2
    disk_bytes: int = 32 * 1024**2
    max_processes: int = 16
    max_open_files: int = 64

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "cpu_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
                raise ValueError(f"Limits.{name} must be a number of seconds in (0, 3600], got {value!r}")
        for name, low in (("memory_bytes", 4096), ("output_bytes", 4096), ("file_bytes", 4096),
                          ("disk_bytes", 4096), ("max_processes", 1), ("max_open_files", 1)):
            object.__setattr__(self, name, require_int(f"Limits.{name}", getattr(self, name), low))
        if self.max_open_files < 16:
            raise ValueError(
                f"Limits.max_open_files must be >= 16 (the interpreter needs a few), got {self.max_open_files}"
            )
        if self.memory_bytes < 64 * 1024**2:
            raise ValueError(
                f"Limits.memory_bytes must be >= 64 MiB (the interpreter needs it), got {self.memory_bytes}"
            )

    @property
    def cpu_limit(self) -> int:
        """The CPU limit in whole seconds (what RLIMIT_CPU and the whole-run check use)."""
        return max(1, math.ceil(self.cpu_seconds))

    @classmethod
    def coerce(cls, value: Limits | dict[str, Any] | None) -> Limits:
        """A Limits from None (defaults), a Limits, or a dict of field overrides."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"unknown limit(s) {sorted(unknown)}; accepted: {sorted(cls.__dataclass_fields__)}")
            return cls(**value)
        raise ValueError(f"limits must be None, a Limits or a dict, got {type(value).__name__}")
