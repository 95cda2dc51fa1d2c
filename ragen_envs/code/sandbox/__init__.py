"""Run untrusted Python programs: the security boundary of the project.

Model-written code never runs in the calling process. Every call of `run_program` (stdin/stdout
programs) or `run_function` (call one function with JSON arguments) starts a fresh process tree:

    env process ──Popen(new session, env={})──▶ unshare --mount --net --pid --ipc --uts --cgroup
        python -I -S sandbox/launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE  (configuration in a memfd)
        waiter: moved into the run's cgroups by the caller while it starts, then forks and waits
          └─ supervisor = PID 1: forks the program process, then reads the configuration, pivots
             into a minimal root, hands the program process its own values only, reaps, reports
               └─ program process: rlimits, fresh uid/gid, no_new_privs, seccomp filter, the model's code

The inside (`inside.py`, started by the tiny `launch.py` run by path) is a plain module, linted
and unit-tested like the rest; this module (the caller side) spawns it (`_spawn`), feeds stdin and
reads the bounded outputs while watching the limits (`_pump`), tears the run down (`_reap`) and
turns what it saw into a verdict (`_judge`).

The package: this module (the caller API: `run_program`, `run_function`, `sandbox_isolation`, ...),
`inside` (the standard-library-only bootstrap run in the sandbox), `launch` (the script run by
path that imports it), `rootfs` (the minimal root's plan), `seccomp` (the filter), `cgroup`
(whole-run limits).
Threat model, layer by layer, what was tried against each and what is out of scope:
`docs/security.md`.

=====================  ==========================================================================
layer                  what it enforces ("namespaces" mode: root + util-linux `unshare`)
=====================  ==========================================================================
process                separate process tree in its own session; the env never `exec`s model text
environment            empty (`env={}`); `-I -S`: no PYTHON* variables, no site-packages
file system            a minimal root (`rootfs`): the interpreter, its shared libraries and its
                       standard library read-only; a private tmpfs working dir, /tmp, /dev/shm
                       (`disk_bytes` each). Nothing else of the host exists inside, not even /proc
                       (its inode numbers are a counter the whole host shares).
network                an empty network namespace (only a downed loopback)
IPC                    a private IPC namespace: SysV shared memory, semaphores and message queues
                       die with the run and cannot reach the host or the next run
processes              a PID namespace whose init is the supervisor: when it exits the kernel kills
                       every process left (double-forked, setsid daemons included); the supervisor
                       also exits when the caller goes away or its backstop deadline passes
privileges             a fresh unprivileged uid/gid per run (in [1000000, 2000000)), no groups,
                       PR_SET_NO_NEW_PRIVS (a failure is a "sandbox error")
configuration          the program process is forked before the supervisor reads the run's
                       configuration and receives only its own values: the hidden paths, host
                       directories and root plan were never in its memory
system calls           a seccomp filter (`seccomp`, built by libseccomp): no new namespaces
                       (user namespaces included), mounts, ptrace, bpf, io_uring, AIO, keyrings,
                       modify_ldt, landlock, inotify, execve, ..., nothing that evicts, probes or
                       flushes the host's page cache (fadvise, mincore, cachestat, RWF_NOWAIT, sync,
                       syncfs; fsync is a no-op), nothing that numbers an inode from a host-wide
                       counter (pipes, sockets of every family, mq_open, memfd_create, pidfd_open),
                       ENOSYS for syscalls newer than the policy's review and for other ABIs; a
                       failure to load it is a "sandbox error"
per-process limits     RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, no core files
fault signals          SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP end the program through a handler
                       (`inside.exit_on_fault_signals`: exit status = the signal's number), so the
                       kernel does not write the faulting addresses to the host's log
whole-run limits       a cgroup per run (`cgroup`: v2, else v1): memory (no swap), process
                       count, and the summed CPU time of all processes (read every 50 ms); the page
                       cache charged to it is reclaimed before it is removed; where no cgroup can be
                       written, the caller samples the process tree and kills it past a limit
wall time              the caller kills the run at the deadline
output                 stdout and stderr are read with a bound; exceeding it kills the run; a
                       function's JSON result is parsed with bounded depth (`MAX_RESULT_DEPTH`)
=====================  ==========================================================================

Modes, in order of preference: "namespaces" (root), "userns" (unprivileged user namespaces: the
program keeps the caller's uid, mapped to root inside; same layers otherwise), "guard" (no
namespaces: per-run uid when root, rlimits, seccomp and cgroups where available, and a Python audit
hook blocking sockets, fork/exec/subprocess, `os.kill`, ctypes and writes outside the working dir;
an audit hook is *not* a hard boundary, so use guard mode only when nothing else is available).
`RAGEN_SANDBOX_MODE=namespaces|userns|guard` forces one mode and `RAGEN_SANDBOX_CGROUP=v2|v1|watch`
one whole-run limit mechanism (an error if it does not work). `sandbox_isolation()` says what is
active (probed on first use).

Verdicts of a run (`RunResult.verdict`): "ok" (exit status 0), "runtime error" (a fault is one too:
exit status 11 for a segfault), "time limit"
(wall deadline, or CPU time of a process or of the whole run), "memory limit" (MemoryError under
RLIMIT_AS, or the kernel killed a process of the run for memory), "output limit" (stdout/stderr cap
or RLIMIT_FSIZE), "sandbox error" (the sandbox itself could not be set up). Judging the output
(passed / wrong answer) is the caller's job: see `outputs_match` (and `tasks.values_equal`). Nothing a program
does makes these functions raise: every failure is a verdict.
"""

from __future__ import annotations

import json
import marshal
import math
import os
import secrets
import selectors
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

from ragen_envs.code.sandbox import inside
from ragen_envs.code.sandbox.cgroup import (
    WATCH_INTERVAL_S,
    CgroupSetup,
    RunCgroup,
    TreeWatch,
    probe_cgroups,
    stale_run_cgroups,
)
from ragen_envs.code.sandbox.rootfs import interpreter_facts, root_plan
from ragen_envs.code.sandbox.seccomp import seccomp_program
from ragen_envs.data import strict_json
from ragen_envs.validation import require_int

__all__ = [
    "MAX_RESULT_DEPTH",
    "VERDICTS",
    "Isolation",
    "Limits",
    "RunResult",
    "outputs_match",
    "run_function",
    "run_program",
    "sandbox_isolation",
]

#: Every verdict a run can get.
VERDICTS = ("ok", "runtime error", "time limit", "memory limit", "output limit", "sandbox error")
#: Deepest nesting of lists/dicts accepted in a function's return value.
MAX_RESULT_DEPTH = strict_json.MAX_DEPTH

# Run by path (`-I -S`: the package is not importable there); it sits next to `inside.py`, which it imports.
_LAUNCH = str(Path(inside.__file__).resolve().with_name("launch.py"))
_UID_RANGE = (1_000_000, 2_000_000)
_READ_CHUNK = 65_536
# After the program process exits, how long the pipes may stay open (daemons in guard mode).
_EXIT_GRACE_S = 0.2
# The supervisor's own deadline, past the caller's: it only matters when the caller is gone.
_BACKSTOP_S = 5.0


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


@dataclass(frozen=True)
class RunResult:
    """The outcome of one sandboxed run.

    Attributes:
        verdict: one of VERDICTS.
        stdout, stderr: decoded output (UTF-8, invalid bytes replaced), at most `output_bytes` each.
        exit_code: the program's exit status, or None when it was killed by a signal / never reported.
        signal: the signal that killed the program, if any.
        wall_time: seconds from spawn to the end of the run (including cleanup of the process tree).
        cpu_time: CPU seconds of the whole run when a cgroup or the process-tree watch measured it,
            else of the program process.
        detail: a short human-readable explanation of the verdict.
        isolation: the sandbox mode used ("namespaces", "userns", "guard").
        run_id: unique id of the run (it appears in the sandbox processes' command line).
        value: function-call mode only: the JSON-decoded return value (None otherwise).
        has_value: whether `value` holds a return value.
        peak_memory: the run's peak memory in bytes, when a cgroup or the watch measured it.
    """

    verdict: str
    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    wall_time: float
    cpu_time: float | None
    detail: str
    isolation: str
    run_id: str
    value: Any = None
    has_value: bool = False
    peak_memory: int | None = None


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


# ---------------------------------------------------------------------------------------------- one run
@dataclass
class _Run:
    """Everything about one run between `_spawn` and `_judge`."""

    run_id: str
    cfg: dict[str, Any]
    limits: Limits
    fn_name: str | None
    workdir: str
    start: float
    uid: int | None = None
    proc: subprocess.Popen | None = None
    status_r: int = -1
    cgroup: RunCgroup | None = None
    watch: TreeWatch | None = None
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    status_raw: bytearray = field(default_factory=bytearray)
    exceeded: str | None = None  # "stdout" / "stderr": the output cap
    timed_out: bool = False
    killed_for: str | None = None  # "cpu" / "memory" / "processes": a whole-run limit
    cpu_time: float | None = None
    peak_memory: int | None = None
    ooms: int = 0
    spawn_error: str | None = None


def _nproc_budget(cfg: dict[str, Any], limits: Limits) -> int:
    """RLIMIT_NPROC counts all processes of the real uid: add the caller's own count when it is shared."""
    if cfg["drop_uid"]:
        return limits.max_processes  # the program and its children (the supervisor is root)
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count + limits.max_processes + 2


def _spawn(
    cfg: dict[str, Any],
    source: str,
    limits: Limits,
    fn_name: str | None,
    hide_paths: tuple[str, ...],
    probe: bool = False,
) -> _Run:
    """Create the run's directory, cgroup and configuration, and start the bootstrap."""
    run_id = "ragen-sbx-" + secrets.token_hex(8)
    # The caller's pid in the host-side names lets a later probe clean up after a caller that died.
    owned = f"{run_id}.{os.getpid()}"
    run = _Run(run_id, cfg, limits, fn_name, tempfile.mkdtemp(prefix=owned + "-"), time.monotonic())
    run.uid = secrets.SystemRandom().randrange(*_UID_RANGE) if cfg["drop_uid"] else None
    fds: list[int] = []
    go_w = -1
    try:
        setup: CgroupSetup = cfg["cgroups"]
        if setup.mechanism != "watch":
            run.cgroup = RunCgroup(setup, owned, limits.memory_bytes, limits.max_processes + 1)
        status_r, status_w = os.pipe()
        run.status_r = status_r
        go_r, go_w = os.pipe()
        fds += [status_w, go_r]
        if cfg["namespaces"]:
            os.mkdir(os.path.join(run.workdir, inside.ROOT_DIR_NAME), 0o700)  # the run's root goes here
        # Read by the supervisor only: the program process is forked before it is read and receives just
        # its own values (`inside.program_values`), never the hidden paths or host directories.
        config = {
            "run_id": run_id,
            # Inside the minimal root the working dir is /tmp/<run id>: no host path is shown.
            "workdir": f"/tmp/{run_id}" if cfg["namespaces"] else run.workdir,
            "root_plan": cfg["root_plan"],
            "uid": run.uid,
            "namespaces": cfg["namespaces"],
            "guard": cfg["guard"],
            "seccomp": cfg["seccomp"],
            "hide_paths": list(hide_paths),
            "fn_name": fn_name,
            "probe": probe,
            "source": source,
            "backstop_seconds": limits.wall_seconds + _BACKSTOP_S,
            "limits": {
                "cpu": limits.cpu_limit,
                "memory": limits.memory_bytes,
                "file": limits.file_bytes,
                "nofile": limits.max_open_files,
                "nproc": _nproc_budget(cfg, limits),
                "disk": limits.disk_bytes,
            },
        }
        config_fd = os.memfd_create("ragen-sbx-config", 0)
        fds.append(config_fd)
        os.write(config_fd, marshal.dumps(config))
        os.lseek(config_fd, 0, os.SEEK_SET)
        run.proc = subprocess.Popen(
            [*cfg["prefix"], cfg["python"], "-I", "-S", _LAUNCH, run_id, str(config_fd), str(go_r), str(status_w),
             "namespaces" if cfg["namespaces"] else "guard"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd=run.workdir,
            start_new_session=True,
            pass_fds=tuple(fds),
        )
        if run.cgroup is not None:
            run.cgroup.join(run.proc.pid)
        else:
            run.watch = TreeWatch(run.proc.pid)
        os.write(go_w, b"g")
    except OSError as exc:
        run.spawn_error = f"could not start the sandbox: {exc}"
    finally:
        for fd in [*fds, go_w]:
            if fd >= 0:
                os.close(fd)
    return run


def _over_limit(run: _Run) -> str | None:
    """Which whole-run limit the run has passed ("cpu", "memory", "processes"), if any."""
    limits = run.limits
    if run.cgroup is not None:
        cpu = run.cgroup.cpu_seconds()
        if cpu is not None and cpu > limits.cpu_limit:
            return "cpu"
        if run.cgroup.memory_stats()[1]:
            return "memory"  # the kernel killed a process for memory: the verdict is settled, stop the run
        return None  # memory and processes are enforced by the kernel
    if run.watch is not None:
        cpu, rss, tasks = run.watch.sample()
        if cpu > limits.cpu_limit:
            return "cpu"
        if rss > limits.memory_bytes:
            return "memory"
        if tasks > limits.max_processes + 2:  # + unshare and the supervisor
            return "processes"
    return None


def _pump(run: _Run, data: bytes) -> None:
    """Feed stdin, read stdout/stderr/status with their caps, until the run ends or a limit passes."""
    proc, limits = run.proc, run.limits
    sel = selectors.DefaultSelector()
    readers = {proc.stdout.fileno(): run.out, proc.stderr.fileno(): run.err, run.status_r: run.status_raw}
    for fd in readers:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    in_fd = proc.stdin.fileno()
    if data:
        os.set_blocking(in_fd, False)
        sel.register(in_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    deadline = run.start + limits.wall_seconds
    next_check = time.monotonic() + WATCH_INTERVAL_S
    exited_at = None
    try:
        while readers:
            now = time.monotonic()
            if now >= deadline:
                run.timed_out = True
                return
            if now >= next_check:
                next_check = now + WATCH_INTERVAL_S
                run.killed_for = _over_limit(run)
                if run.killed_for:
                    return
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                return
            wait = min(deadline, next_check) - now
            if exited_at is not None:
                wait = min(wait, _EXIT_GRACE_S)
            for key, _ in sel.select(max(wait, 0.0)):
                fd = key.fd
                if fd == in_fd:
                    try:
                        n = os.write(fd, data[:_READ_CHUNK])
                        data = data[n:]
                    except BlockingIOError:
                        continue
                    except OSError:  # the program closed its stdin
                        data = b""
                    if not data:
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    del readers[fd]
                    continue
                buf = readers[fd]
                room = limits.output_bytes - len(buf) if fd != run.status_r else 1 << 16
                buf += chunk[: max(room, 0)]
                if len(chunk) > room:
                    run.exceeded = "stdout" if fd == proc.stdout.fileno() else "stderr"
                    return
    finally:
        sel.close()


def _kill_uid(python: str, uid: int) -> None:
    """Kill every process of `uid` (guard mode): kill(-1) issued by a helper running as that uid.

    One pass suffices: kill(-1) walks the task list under the tasklist lock, which fork() also
    needs, so no process of that uid can be created during the walk and escape it.
    """
    try:
        subprocess.run(
            [python, "-I", "-S", "-c", "import os, signal\ntry: os.kill(-1, signal.SIGKILL)\nexcept OSError: pass"],
            user=uid, group=uid, extra_groups=[], env={}, cwd="/", timeout=5,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return


def _reap(run: _Run) -> dict[str, Any]:
    """Kill what is left of the run, collect its measurements, remove everything it had; the status."""
    proc = run.proc
    if proc is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout, proc.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass
    if run.uid is not None and not run.cfg["namespaces"] and proc is not None:
        _kill_uid(run.cfg["python"], run.uid)
    if run.cgroup is not None:
        run.cgroup.kill_all()
        run.cpu_time = run.cgroup.cpu_seconds()
        run.peak_memory, run.ooms = run.cgroup.memory_stats()
        run.cgroup.remove()
    elif run.watch is not None and run.watch.samples:  # (a run shorter than one interval has no sample)
        run.cpu_time, run.peak_memory = run.watch.cpu_max, run.watch.rss_max
    if run.status_r >= 0:
        try:
            os.set_blocking(run.status_r, False)
            while len(run.status_raw) < 1 << 16:
                chunk = os.read(run.status_r, _READ_CHUNK)
                if not chunk:
                    break
                run.status_raw += chunk
        except OSError:
            pass
        os.close(run.status_r)
        run.status_r = -1
    shutil.rmtree(run.workdir, ignore_errors=True)
    status: dict[str, Any] = {}
    for line in bytes(run.status_raw).decode("utf-8", "replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            status.update(obj)
    return status


def _parse_result(stdout: str) -> tuple[Any, str | None]:
    """The function's JSON return value with bounded depth, or (None, why it is unreadable)."""
    try:
        return strict_json.loads(stdout, max_depth=MAX_RESULT_DEPTH), None
    except strict_json.JSONValueError as exc:
        return None, exc.msg
    except Exception as exc:  # whatever the text holds, it is a verdict, never an exception
        return None, f"{type(exc).__name__}"


def _judge(run: _Run, status: dict[str, Any], wall: float) -> RunResult:
    limits, fn_name = run.limits, run.fn_name
    stdout = bytes(run.out).decode("utf-8", "replace")
    stderr = bytes(run.err).decode("utf-8", "replace")
    exit_code = status.get("exit")
    sig = status.get("signal")
    cpu = run.cpu_time if run.cpu_time is not None else status.get("cpu")
    value, has_value = None, False
    cpu_over = run.cpu_time is not None and run.cpu_time > limits.cpu_limit + 0.05
    if run.spawn_error:
        verdict, detail = "sandbox error", run.spawn_error
    elif run.exceeded:
        verdict, detail = "output limit", f"{run.exceeded} exceeded {limits.output_bytes} bytes"
    elif "setup_error" in status:
        verdict, detail = "sandbox error", f"sandbox setup failed: {status['setup_error']}"
    elif run.timed_out:
        verdict, detail = "time limit", f"wall time exceeded {limits.wall_seconds:g} s"
    elif run.killed_for == "cpu" or cpu_over:
        verdict, detail = "time limit", f"CPU time of the run (all its processes) exceeded {limits.cpu_limit} s"
    elif run.killed_for == "memory" or run.ooms:
        verdict, detail = "memory limit", (
            f"the run (all its processes) exceeded {limits.memory_bytes} bytes of memory"
            + (f"; {run.ooms} process(es) killed by the kernel" if run.ooms else "")
        )
    elif run.killed_for == "processes":
        verdict, detail = "runtime error", f"more than {limits.max_processes} processes"
    elif not status or ("exit" not in status and "signal" not in status):
        verdict, detail = "runtime error", status.get("error", "the sandbox reported no exit status")
    elif sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        pcpu = status.get("cpu")
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and pcpu is not None and pcpu >= limits.cpu_limit - 0.05):
            verdict, detail = "time limit", f"CPU time exceeded {limits.cpu_limit} s ({name})"
        elif sig == signal.SIGXFSZ:
            verdict, detail = "output limit", f"file size exceeded {limits.file_bytes} bytes (SIGXFSZ)"
        else:
            verdict, detail = "runtime error", f"killed by {name}"
    elif exit_code == inside.EXIT_MEMORY:
        verdict, detail = "memory limit", f"MemoryError under the {limits.memory_bytes} byte address-space limit"
    elif exit_code == inside.EXIT_SETUP:
        verdict, detail = "sandbox error", "sandbox setup failed in the program process"
    elif exit_code != 0:
        verdict = "runtime error"
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        detail = f"exit status {exit_code}" + (f": {tail[0][:200]}" if tail else "")
        if exit_code in inside.FAULT_SIGNALS and not tail:  # a fault ends the program with its signal's number
            detail += f" ({signal.Signals(exit_code).name}, or exit({exit_code}))"
    else:
        verdict, detail = "ok", "exit status 0"
        if fn_name is not None:
            value, problem = _parse_result(stdout)
            has_value = problem is None
            if problem is not None:
                verdict, detail = "runtime error", f"the function returned no readable result ({problem})"
    return RunResult(
        verdict=verdict,
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        signal=sig,
        wall_time=wall,
        cpu_time=cpu,
        detail=detail,
        isolation=run.cfg["mode"],
        run_id=run.run_id,
        value=value,
        has_value=has_value,
        peak_memory=run.peak_memory,
    )


def _run(
    cfg: dict[str, Any],
    source: str,
    stdin: str | bytes,
    limits: Limits,
    fn_name: str | None,
    hide_paths: tuple[str, ...],
    probe: bool = False,
) -> tuple[RunResult, dict[str, Any]]:
    """One run: spawn, pump, reap, judge. Returns the result and the supervisor's status."""
    data = stdin.encode("utf-8", errors="replace") if isinstance(stdin, str) else bytes(stdin)
    run = _spawn(cfg, source, limits, fn_name, hide_paths, probe)
    try:
        if run.proc is not None:
            _pump(run, data)
    except OSError as exc:  # a failure of the machinery (e.g. EIO on a pipe) is a verdict too
        run.spawn_error = f"the sandbox failed while the program ran: {exc}"
    finally:
        status = _reap(run)
    return _judge(run, status, time.monotonic() - run.start), status


def _check_common(source: Any, limits: Any, hide_paths: Any) -> tuple[Limits, tuple[str, ...]]:
    if not isinstance(source, str):
        raise ValueError(f"source must be a str (the program text), got {type(source).__name__}")
    limits = Limits.coerce(limits)
    if isinstance(hide_paths, (str, Path)):
        raise ValueError("hide_paths must be a sequence of paths, not a single path")
    raw = [os.fspath(p) for p in hide_paths]
    for p in raw:
        if not isinstance(p, str) or not os.path.isabs(p) or os.path.realpath(p) == "/":
            raise ValueError(f"hide_paths entries must be absolute paths other than '/', got {p!r}")
    paths = tuple(os.path.realpath(p) for p in raw)
    return limits, paths


def run_program(
    source: str,
    stdin: str | bytes = "",
    *,
    limits: Limits | dict[str, Any] | None = None,
    hide_paths: tuple[str | Path, ...] | list[str | Path] = (),
) -> RunResult:
    """Run a stdin/stdout Python program in the sandbox.

    Args:
        source: the program text (run as `__main__`, file name `solution.py` in the working dir).
        stdin: the program's whole standard input.
        limits: a `Limits`, a dict of overrides, or None for the defaults.
        hide_paths: files/directories the program must not see. In the namespace modes the program
            sees nothing of the host but the interpreter and its standard library anyway; a path
            inside those is covered by an empty mount. In guard mode only file permissions and the
            uid drop protect them.

    Returns:
        RunResult; `verdict == "ok"` means exit status 0 (compare `stdout` yourself, e.g. `outputs_match`).

    Raises:
        ValueError: bad arguments. RuntimeError: no sandbox works on this machine.
    """
    limits, paths = _check_common(source, limits, hide_paths)
    if not isinstance(stdin, (str, bytes, bytearray)):
        raise ValueError(f"stdin must be str or bytes, got {type(stdin).__name__}")
    _, cfg = _ensure()
    return _run(cfg, source, stdin, limits, None, paths)[0]


def run_function(
    source: str,
    fn_name: str,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    limits: Limits | dict[str, Any] | None = None,
    hide_paths: tuple[str | Path, ...] | list[str | Path] = (),
) -> RunResult:
    """Define `source` in the sandbox, call `fn_name(*args, **kwargs)` there and return its value.

    The arguments travel as JSON on the program's stdin; the return value comes back as JSON in
    `RunResult.value` (`has_value` True). A top-level `fn_name` is called, else a method of a
    LeetCode-style `class Solution`. Prints of the program go to `stderr`. Whatever the program
    writes as its result (a value nested deeper than `MAX_RESULT_DEPTH`, a replaced `json.dumps`
    printing a million brackets, an integer too long for Python, invalid JSON) gives the verdict
    "runtime error", never an exception.

    Raises:
        ValueError: bad arguments (e.g. not JSON-serialisable). RuntimeError: no sandbox works here.
    """
    limits, paths = _check_common(source, limits, hide_paths)
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise ValueError(f"fn_name must be a Python identifier, got {fn_name!r}")
    if not isinstance(args, (list, tuple)) or not (kwargs is None or isinstance(kwargs, dict)):
        raise ValueError("args must be a list/tuple and kwargs a dict or None")
    try:
        payload = json.dumps({"args": list(args), "kwargs": kwargs or {}})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"function arguments must be JSON-serialisable: {exc}") from None
    _, cfg = _ensure()
    return _run(cfg, source, payload, limits, fn_name, paths)[0]


# ---------------------------------------------------------------------------------------------- probing
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
    _sweep_stale(cgroups)
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
                res, status = _run(cfg, _PROBE_SOURCE, stdin, limits, None, (), probe=True)
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


def _sweep_stale(setup: CgroupSetup) -> list[str]:
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
            try:
                for pid in open(os.path.join(path, "cgroup.procs")).read().split():
                    os.kill(int(pid), signal.SIGKILL)
                os.rmdir(path)
            except (OSError, ValueError):
                continue
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _ensure() -> tuple[Isolation, dict[str, Any]]:
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
    return _ensure()[0]


def _reset_probe_cache() -> None:
    """Forget the probed mode (tests use it together with RAGEN_SANDBOX_MODE / RAGEN_SANDBOX_CGROUP)."""
    global _isolation, _config
    with _lock:
        _isolation = _config = None


# ---------------------------------------------------------------------------------------------- judging
def _normal_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """Judge stdout: equal line by line after removing trailing whitespace of each line and
    trailing blank lines (the usual TACO/Codeforces leniency); nothing else is forgiven."""
    return _normal_lines(actual) == _normal_lines(expected)
