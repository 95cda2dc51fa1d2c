"""Which isolation works on this machine: the modes tried in order of preference ("namespaces", "userns",
"guard"; `RAGEN_SANDBOX_MODE` forces one), each checked by a real probe run, the one chosen described (`Isolation`)
and cached per process (`ensure_probed`, `sandbox_isolation`). Probing also removes what the runs of a caller that
died mid-run left behind (`sweep_stale`).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen_envs.code.sandbox.cgroup import CgroupSetup, probe_cgroups, stale_run_cgroups
from ragen_envs.code.sandbox.limits import Limits
from ragen_envs.code.sandbox.rootfs import interpreter_facts, root_plan
from ragen_envs.code.sandbox.runner import run_once
from ragen_envs.code.sandbox.seccomp import seccomp_program


@dataclass(frozen=True)
class Isolation:
    """Which isolation is active (probed once per process, see the module docstring)."""

    mode: str
    network: str
    processes: str
    privileges: str
    filesystem: str
    python: str
    python_version: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    ipc: str = ""
    syscalls: str = ""
    resources: str = ""

    def describe(self) -> str:
        lines = [
            f"sandbox mode: {self.mode}",
            f"  network: {self.network}",
            f"  IPC: {self.ipc}",
            f"  processes: {self.processes}",
            f"  privileges: {self.privileges}",
            f"  file system: {self.filesystem}",
            f"  system calls: {self.syscalls}",
            f"  whole-run limits: {self.resources}",
            f"  python: {self.python} ({self.python_version})",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


_MODES = ("namespaces", "userns", "guard")
_PROBE_SOURCE = """
import heapq, fractions, decimal, collections, itertools, functools, bisect, re, math, json, sys, os
try:
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(0.5)
    s.connect(("127.0.0.1", 9))
    print("network reachable")
except Exception as e:
    print("network blocked", getattr(e, "errno", None))
print(input().strip(), os.getuid(), sys.version.split()[0])
missing = []
for name in sys.stdin.readline().split():
    try:
        __import__(name)
    except ImportError as e:
        missing.append(name + ": " + str(e)[:80])
    except Exception:
        pass
print("missing modules:", "; ".join(missing))
"""

_lock = threading.Lock()
_isolation: Isolation | None = None
_config: dict[str, Any] | None = None


def _unshare_prefix(mode: str) -> list[str] | None:
    exe = shutil.which("unshare") or ("/usr/bin/unshare" if os.path.exists("/usr/bin/unshare") else None)
    if exe is None:
        return None
    # No --fork: the bootstrap forks PID 1 itself, after the caller has moved it into the run's cgroups.
    flags = ["--mount", "--net", "--pid", "--ipc", "--uts", "--cgroup"]
    if mode == "userns":
        return [exe, "--user", "--map-root-user", *flags]
    return [exe, *flags]


def _python_candidates() -> list[str]:
    found: list[str] = []
    forced = os.environ.get("RAGEN_SANDBOX_PYTHON")
    names = [forced] if forced else [
        getattr(sys, "_base_executable", None),
        sys.executable,
        "/usr/bin/python3",
        shutil.which("python3"),
    ]
    for name in names:
        if name and os.path.exists(name):
            real = os.path.realpath(name)
            if real not in found:
                found.append(real)
    return found


def _mode_config(mode: str, python: str) -> dict[str, Any] | None:
    root = os.geteuid() == 0
    if mode in ("namespaces", "userns"):
        prefix = _unshare_prefix(mode) if root == (mode == "namespaces") else None
        if prefix is None:
            return None
        return {"mode": mode, "prefix": prefix, "python": python, "drop_uid": root, "namespaces": True,
                "guard": False}
    return {"mode": mode, "prefix": [], "python": python, "drop_uid": root, "namespaces": False,
            "guard": True}


def _describe(cfg: dict[str, Any], version: str, notes: list[str]) -> Isolation:
    mode = cfg["mode"]
    if mode == "guard":
        network = "audit hook refusing socket creation/connect (not a hard boundary)"
        ipc = "shared with the host (no IPC namespace)"
        processes = (
            "process group kill + kill(-1) as the per-run uid after the run"
            if cfg["drop_uid"]
            else "process group kill only (setsid daemons can escape; fork is refused by the audit hook)"
        )
        filesystem = "the host's, read access by permissions; fresh temp dir; audit hook refuses writes outside it" + (
            "; other files protected by the uid drop" if cfg["drop_uid"] else ""
        )
    else:
        network = "empty network namespace"
        ipc = "private IPC namespace (SysV shm, semaphores, message queues die with the run)"
        processes = "PID namespace whose init is the supervisor: its exit kills every process of the run"
        filesystem = (
            f"minimal root ({cfg['root_kind']}): interpreter, its libraries and standard library read-only; "
            "private tmpfs working dir, /tmp, /dev/shm; no /proc"
        )
    privileges = (
        "per-run unprivileged uid/gid, no groups, no_new_privs"
        if cfg["drop_uid"]
        else "caller's uid" + (" (root inside a user namespace)" if mode == "userns" else "") + ", no_new_privs"
    )
    return Isolation(
        mode=mode,
        network=network,
        processes=processes,
        privileges=privileges,
        filesystem=filesystem,
        python=cfg["python"],
        python_version=version,
        notes=tuple(notes),
        ipc=ipc,
        syscalls=cfg["seccomp_description"],
        resources=cfg["cgroups"].describe(),
    )


def _probe() -> tuple[Isolation, dict[str, Any]]:
    forced = os.environ.get("RAGEN_SANDBOX_MODE")
    if forced is not None and forced not in _MODES:
        raise ValueError(f"RAGEN_SANDBOX_MODE must be one of {_MODES}, got {forced!r}")
    modes = [forced] if forced else list(_MODES)
    failures: list[str] = []
    limits = Limits(wall_seconds=20.0, cpu_seconds=10.0)
    bpf, seccomp_description = seccomp_program()
    cgroups = probe_cgroups(os.environ.get("RAGEN_SANDBOX_CGROUP"))
    sweep_stale(cgroups)
    for mode in modes:
        for python in _python_candidates():
            cfg = _mode_config(mode, python)
            if cfg is None:
                failures.append(f"{mode}: not applicable (euid {os.geteuid()} or no unshare)")
                break
            try:
                facts = interpreter_facts(python)
            except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
                failures.append(f"{mode} with {python}: {exc}")
                continue
            cfg.update(seccomp=bpf.hex() if bpf else None, seccomp_description=seccomp_description,
                       cgroups=cgroups)
            kinds = ["interpreter files only", "whole library directories"] if cfg["namespaces"] else ["-"]
            for kind in kinds:
                cfg["root_kind"] = kind
                cfg["root_plan"] = (
                    root_plan(python, facts, whole_lib_dirs=kind != kinds[0]) if cfg["namespaces"] else []
                )
                token = secrets.token_hex(4)
                stdin = token + "\n" + " ".join(facts["loaded"]) + "\n"
                res, status = run_once(cfg, _PROBE_SOURCE, stdin, limits, None, (), probe=True)
                lines = res.stdout.split("\n")
                ok = res.verdict == "ok" and len(lines) >= 3 and lines[0].startswith("network blocked")
                parts = lines[1].split() if ok else []
                if ok and parts and parts[0] == token:
                    missing = lines[2][len("missing modules:"):].strip()
                    if missing and cfg["namespaces"] and kind == kinds[0]:
                        failures.append(f"{mode} with {python}, {kind}: extension modules fail: {missing}")
                        continue
                    version = parts[2] if len(parts) > 2 else "?"
                    notes = list(status.get("notes", [])) + (
                        [f"modules that fail to import: {missing}"] if missing else []
                    )
                    notes += list(cgroups.notes) + _kernel_log_notes()
                    return _describe(cfg, version, notes), cfg
                failures.append(
                    f"{mode} with {python} ({kind}): {res.verdict}: {res.detail} "
                    f"{res.stdout[:200]!r} {res.stderr[-300:]!r}"
                )
    raise RuntimeError("no working sandbox on this machine:\n  " + "\n  ".join(failures))


_EXCEPTION_TRACE = Path("/proc/sys/debug/exception-trace")


def _kernel_log_notes() -> list[str]:
    """What a run can still write to the host's kernel log under the host's settings (docs/security.md)."""
    try:
        logged = _EXCEPTION_TRACE.read_text().strip() != "0"
    except OSError:
        return []
    if not logged:
        return []
    return [
        "the host logs user-space faults (debug.exception-trace=1): a run can write register values it "
        "chooses to the host's kernel log (misaligned vsyscall calls, bad rt_sigreturn frames), rate-limited; "
        "`sysctl debug.exception-trace=0` on a host you control stops it"
    ]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: How long a sweep waits for a stale run's killed processes to leave its cgroup before giving up on it.
CGROUP_REMOVE_WAIT_S = 5.0


def _remove_cgroup(path: str, wait: float | None = None) -> bool:
    """Kill every process left in the cgroup at `path` and remove it; True when removed.

    SIGKILL is asynchronous: a killed process (or one that had already exited but is not yet reaped) keeps its
    cgroup busy (rmdir fails with EBUSY) until the kernel has torn it down, which on a loaded machine takes longer
    than one system call. So the kill and the removal are retried for up to `wait` seconds
    (:data:`CGROUP_REMOVE_WAIT_S`)."""
    deadline = time.monotonic() + (CGROUP_REMOVE_WAIT_S if wait is None else wait)
    while True:
        try:
            for pid in open(os.path.join(path, "cgroup.procs")).read().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass  # gone between the read and the kill
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True  # removed meanwhile (by the run's own supervisor, or another sweep)
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                return False  # only a busy cgroup is worth waiting for
            time.sleep(0.05)
        except ValueError:
            return False


def sweep_stale(setup: CgroupSetup) -> list[str]:
    """Remove the cgroups and host directories of runs whose caller died mid-run (their names end in
    `.<caller pid>`); returns what was removed."""
    removed = []
    candidates = [(p, True) for p in stale_run_cgroups(setup)]
    try:
        tmp = tempfile.gettempdir()
        candidates += [(os.path.join(tmp, n), False) for n in os.listdir(tmp) if n.startswith("ragen-sbx-")]
    except OSError:
        pass
    for path, is_cgroup in candidates:
        name = os.path.basename(path)
        owner = name.split(".", 1)[1].split("-", 1)[0] if "." in name else ""
        if not owner.isdigit() or _pid_alive(int(owner)):
            continue
        if is_cgroup:
            if not _remove_cgroup(path):
                continue  # still busy after the wait: the next sweep tries again
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def ensure_probed() -> tuple[Isolation, dict[str, Any]]:
    global _isolation, _config
    with _lock:
        if _isolation is None or _config is None:
            _isolation, _config = _probe()
        return _isolation, _config


def sandbox_isolation() -> Isolation:
    """The active isolation (probing the machine on first use; cached per process).

    Raises:
        RuntimeError: no mode works here (the message lists why each failed).
    """
    return ensure_probed()[0]


def reset_probe_cache() -> None:
    """Forget the probed mode (tests use it together with RAGEN_SANDBOX_MODE / RAGEN_SANDBOX_CGROUP)."""
    global _isolation, _config
    with _lock:
        _isolation = _config = None
