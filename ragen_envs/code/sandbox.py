"""Run untrusted Python programs: the security boundary of the project.

Model-written code never runs in the calling process. Every call of `run_program` (stdin/stdout
programs) or `run_function` (call one function with JSON arguments) starts a fresh process tree:

    env process ──Popen(start_new_session, env={}, cwd=fresh temp dir)──▶ [unshare …] python -I -S -c BOOTSTRAP
        supervisor (root or namespace root): sets up the file system, forks, waits, reports the status
          └─ program process: rlimits, privileges dropped, no_new_privs, then the model's code

What is enforced, and how (`sandbox_isolation()` says which mode is active; it is probed on first use):

=====================  ==========================================================================
process               separate process tree in its own session; the env never `exec`s model text
environment           empty (`env={}`); the interpreter runs with `-I -S` (isolated: no PYTHON*
                      variables, no user site, no site-packages, no current dir on `sys.path`)
working directory     a fresh temporary directory, removed after the run; in the namespace modes
                      it is a private tmpfs of `disk_bytes` that disappears with the namespace
resource limits       setrlimit in the program process: CPU seconds (RLIMIT_CPU), address space
                      (RLIMIT_AS), file size (RLIMIT_FSIZE), processes (RLIMIT_NPROC), open files
                      (RLIMIT_NOFILE), no core files
wall time             the parent kills the whole process group (SIGKILL) at the deadline
output                stdout and stderr are read with a bound; exceeding it kills the run
stdin                 only the test's input
network               "namespaces"/"userns": an empty network namespace (`unshare --net`: only a
                      downed loopback, connects fail with ENETUNREACH); "guard": an audit hook
                      installed before the program runs refuses socket creation and connects
leftover processes    "namespaces"/"userns": a PID namespace (`unshare --pid --fork --mount-proc`)
                      whose init is the supervisor; when it exits the kernel kills every process
                      left in the namespace (double-forked, setsid daemons included).
                      "guard" as root: the program runs under a per-run uid and every process of
                      that uid is killed after the run (`kill(-1, SIGKILL)` issued as that uid)
privileges            as root: the program runs as a fresh unprivileged uid/gid (chosen per run in
                      [1000000, 2000000), no supplementary groups) with PR_SET_NO_NEW_PRIVS, so it
                      cannot read root-only files, other processes' /proc/<pid>/environ or signal
                      the supervisor. "userns" (not root): the program keeps the caller's uid,
                      mapped to root inside a user namespace; / is remounted read-only there
file system           namespace modes: fresh tmpfs over /tmp, /var/tmp, /dev/shm (writes outside the
                      working dir land in memory and vanish), /run hidden, `hide_paths` (e.g. the
                      data set file holding the expected outputs) covered by empty mounts
=====================  ==========================================================================

Modes, in order of preference: "namespaces" (root + util-linux `unshare`: the strongest; the one
active on the project machines), "userns" (unprivileged user namespaces), "guard" (no namespaces:
per-run uid when root, rlimits, and a Python audit hook blocking sockets, fork/exec/subprocess,
`os.kill`, ctypes and writes outside the working dir; an audit hook is *not* a hard boundary, it
can be bypassed by determined native code, so use guard mode only when nothing else is available).
`RAGEN_SANDBOX_MODE=namespaces|userns|guard` forces one mode (an error if it does not work).

Verdicts of a run (`RunResult.verdict`): "ok" (exit status 0), "runtime error", "time limit"
(wall deadline or CPU limit), "memory limit" (MemoryError under RLIMIT_AS), "output limit"
(stdout/stderr cap or RLIMIT_FSIZE), "sandbox error" (the sandbox itself could not be set up).
Judging the output (passed / wrong answer) is the caller's job: see `outputs_match`, `values_match`.
"""

from __future__ import annotations

import json
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

__all__ = [
    "VERDICTS",
    "Isolation",
    "Limits",
    "RunResult",
    "outputs_match",
    "run_function",
    "run_program",
    "sandbox_isolation",
    "values_match",
]

#: Every verdict a run can get.
VERDICTS = ("ok", "runtime error", "time limit", "memory limit", "output limit", "sandbox error")

#: Exit status the program process uses for a MemoryError (see the bootstrap).
_EXIT_MEMORY = 113
#: Exit status of the function-call harness when the return value is not JSON-serialisable.
_EXIT_BAD_RESULT = 114
_UID_RANGE = (1_000_000, 2_000_000)
_READ_CHUNK = 65_536
# After the program process exits, how long the pipes may stay open (daemons in guard mode).
_EXIT_GRACE_S = 0.2


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        wall_seconds: wall-clock deadline; the process group is killed when it passes.
        cpu_seconds: CPU time of the program process (RLIMIT_CPU, rounded up to whole seconds).
        memory_bytes: address space of each program process (RLIMIT_AS).
        output_bytes: cap on stdout and on stderr (each); exceeding one kills the run.
        file_bytes: largest file the program may write (RLIMIT_FSIZE).
        disk_bytes: size of each private tmpfs (working dir, /tmp, ...) in the namespace modes.
        max_processes: processes/threads of the sandbox uid (RLIMIT_NPROC), including the program.
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
        for name in ("memory_bytes", "output_bytes", "file_bytes", "disk_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 4096:
                raise ValueError(f"Limits.{name} must be an integer >= 4096 (bytes), got {value!r}")
        for name in ("max_processes", "max_open_files"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be an integer >= 1, got {value!r}")
        if self.max_open_files < 16:
            raise ValueError(f"Limits.max_open_files must be >= 16 (the interpreter needs a few), got {self.max_open_files}")
        if self.memory_bytes < 64 * 1024**2:
            raise ValueError(f"Limits.memory_bytes must be >= 64 MiB (the interpreter needs it), got {self.memory_bytes}")

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
        cpu_time: user + system CPU seconds of the program process, when known.
        detail: a short human-readable explanation of the verdict.
        isolation: the sandbox mode used ("namespaces", "userns", "guard").
        run_id: unique id of the run (it appears in the sandbox processes' command line).
        value: function-call mode only: the JSON-decoded return value (None otherwise).
        has_value: whether `value` holds a return value.
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

    def describe(self) -> str:
        lines = [
            f"sandbox mode: {self.mode}",
            f"  network: {self.network}",
            f"  processes: {self.processes}",
            f"  privileges: {self.privileges}",
            f"  file system: {self.filesystem}",
            f"  python: {self.python} ({self.python_version})",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# The bootstrap runs inside the sandbox (python -I -S -c BOOTSTRAP CONFIG_JSON). It must stay
# compatible with any Python >= 3.8 the sandbox interpreter may be, and must never import the project.
_BOOTSTRAP = r'''
import json, os, sys
cfg = json.loads(sys.argv[1])
_exit, _write, _close = os._exit, os.write, os.close
STATUS_FD = cfg["status_fd"]

def report(obj):
    try:
        _write(STATUS_FD, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass

def libc_handle():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    return ctypes, libc

def setup_namespace_fs(source_path, workdir, uid):
    ctypes, libc = libc_handle()
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
    MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
    def mount(src, target, fstype, flags, data):
        enc = lambda s: None if s is None else s.encode()
        if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "mount %s on %s: %s" % (fstype or src, target, os.strerror(e)))
    notes = []
    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    if cfg["readonly_root"]:
        try:
            mount("/", "/", None, MS_BIND | MS_REC, None)
            mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
            notes.append("root read-only")
        except OSError as e:
            notes.append("root stays writable (%s)" % e)
    size = "size=%d" % cfg["disk_bytes"]
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(d) and not os.path.islink(d):
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, size + ",mode=1777")
    for p in cfg["hide_paths"]:
        if os.path.isdir(p):
            mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=755")
        elif os.path.exists(p):
            mount("/dev/null", p, None, MS_BIND, None)
    os.makedirs(workdir, exist_ok=True)
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, size + ",mode=700")
    return notes

def install_guard(workdir):
    # Fallback only: an audit hook is not a hard boundary (see the sandbox module docstring).
    blocked = {"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
               "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
               "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym",
               "ctypes.call_function", "ctypes.cdata", "ctypes.addressof", "os.chroot", "os.setuid"}
    blocked_imports = {"_posixsubprocess", "_ctypes", "ctypes", "_socket", "socket", "mmap"}
    root = os.path.realpath(workdir) + os.sep
    def hook(event, args):
        if event in blocked:
            raise PermissionError("sandbox: %s is not allowed" % event)
        if event == "import" and args and args[0] in blocked_imports:
            raise PermissionError("sandbox: import of %s is not allowed" % args[0])
        if event == "open" and args:
            path, mode = args[0], args[1] if len(args) > 1 else "r"
            if isinstance(path, int):
                return
            flags = args[2] if len(args) > 2 else 0
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            p = os.path.realpath(os.fsdecode(path))
            if p.startswith("/proc/") and p.endswith(("/environ", "/mem")):
                raise PermissionError("sandbox: reading %s is not allowed" % p)
            if writing and not (p + os.sep).startswith(root) and p != "/dev/null":
                raise PermissionError("sandbox: writing outside the working directory is not allowed")
        if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
                     "os.chmod", "os.chown", "os.truncate", "shutil.rmtree") and args:
            p = args[0]
            if isinstance(p, (str, bytes)) and not (os.path.realpath(os.fsdecode(p)) + os.sep).startswith(root):
                raise PermissionError("sandbox: %s outside the working directory is not allowed" % event)
    sys.addaudithook(hook)

def program(source, path):
    import resource
    _close(STATUS_FD)
    os.chdir(cfg["workdir"])
    lim = cfg["limits"]
    cpu = lim["cpu"]
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)),
                       (resource.RLIMIT_AS, (lim["memory"], lim["memory"])),
                       (resource.RLIMIT_FSIZE, (lim["file"], lim["file"])),
                       (resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"])),
                       (resource.RLIMIT_CORE, (0, 0)),
                       (resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))):
        resource.setrlimit(res, value)
    import signal
    # Python ignores SIGXFSZ; restore the default so that RLIMIT_FSIZE ends the run ("output limit").
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    uid = cfg["uid"]
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if cfg["namespaces"]:
        try:
            ctypes, libc = libc_handle()  # already imported by the supervisor: no cost
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: setuid binaries cannot regain privileges
        except Exception:
            pass
    else:
        install_guard(cfg["workdir"])  # guard mode: exec is refused, so no_new_privs is moot
    import types
    fn_name = cfg["fn_name"]
    saved_stdout = None
    if fn_name is not None:
        # The program's own prints go to stderr; fd `saved_stdout` carries only the JSON result.
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
    mod = types.ModuleType("__main__" if fn_name is None else "solution")
    mod.__file__ = path
    mod.__builtins__ = __builtins__
    sys.modules[mod.__name__] = mod
    sys.argv = [path]
    code = 0
    try:
        exec(compile(source, path, "exec"), mod.__dict__)
        if fn_name is not None:
            payload = json.loads(sys.stdin.read() or "{}")
            fn = mod.__dict__.get(fn_name)
            if fn is None and isinstance(mod.__dict__.get("Solution"), type):
                fn = getattr(mod.__dict__["Solution"](), fn_name, None)
            if not callable(fn):
                raise NameError("the program defines no function %r" % fn_name)
            value = fn(*payload.get("args", []), **payload.get("kwargs", {}))
            try:
                text = json.dumps(value, allow_nan=True)
            except (TypeError, ValueError) as e:
                sys.stderr.write("result is not JSON-serialisable: %s\n" % e)
                code = %(EXIT_BAD)d
            else:
                data = text.encode()
                while data:
                    data = data[_write(saved_stdout, data):]
    except SystemExit as e:
        c = e.code
        if c is None:
            code = 0
        elif isinstance(c, int):
            code = c & 0xFF
        else:
            try:
                sys.stderr.write(str(c) + "\n")
            except Exception:
                pass
            code = 1
    except MemoryError:
        code = %(EXIT_MEMORY)d
    except BaseException:
        try:
            import traceback
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except MemoryError:
        code = code or %(EXIT_MEMORY)d
    except BaseException:
        code = code or 1
    _exit(code)

def main():
    workdir = cfg["workdir"]
    path = os.path.join(workdir, "solution.py")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        notes = []
        if cfg["namespaces"]:
            notes = setup_namespace_fs(path, workdir, cfg["uid"])
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            if cfg["uid"] is not None:
                os.chown(workdir, cfg["uid"], cfg["uid"])
    except Exception as e:
        report({"setup_error": "%s: %s" % (type(e).__name__, e)})
        _exit(0)
    pid = os.fork()
    if pid == 0:
        try:
            program(source, path)
        finally:
            _exit(1)
    while True:
        try:
            got, status, ru = os.wait4(-1, 0)
        except ChildProcessError:
            report({"error": "lost the program process"})
            _exit(0)
        if got == pid:
            break
    out = {"cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss, "notes": notes}
    if os.WIFSIGNALED(status):
        out["signal"] = os.WTERMSIG(status)
    else:
        out["exit"] = os.WEXITSTATUS(status)
    if cfg["probe"]:
        out["probe_uid"] = cfg["uid"]
    report(out)
    _exit(0)

main()
'''.replace("%(EXIT_BAD)d", str(_EXIT_BAD_RESULT)).replace("%(EXIT_MEMORY)d", str(_EXIT_MEMORY))


# ---------------------------------------------------------------------------------------------------
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
"""

_lock = threading.Lock()
_isolation: Isolation | None = None
_config: dict[str, Any] | None = None


def _unshare_prefix(mode: str) -> list[str] | None:
    exe = shutil.which("unshare") or ("/usr/bin/unshare" if os.path.exists("/usr/bin/unshare") else None)
    if exe is None:
        return None
    flags = ["--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
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
    if mode == "namespaces":
        prefix = _unshare_prefix(mode) if root else None
        if prefix is None:
            return None
        return {"mode": mode, "prefix": prefix, "python": python, "drop_uid": True, "namespaces": True,
                "guard": False, "readonly_root": False}
    if mode == "userns":
        prefix = _unshare_prefix(mode) if not root else None
        if prefix is None:
            return None
        return {"mode": mode, "prefix": prefix, "python": python, "drop_uid": False, "namespaces": True,
                "guard": False, "readonly_root": True}
    return {"mode": mode, "prefix": [], "python": python, "drop_uid": root, "namespaces": False,
            "guard": True, "readonly_root": False}


def _describe(cfg: dict[str, Any], version: str, notes: list[str]) -> Isolation:
    mode = cfg["mode"]
    if mode == "guard":
        network = "audit hook refusing socket creation/connect (not a hard boundary)"
        processes = (
            "process group kill + kill(-1) as the per-run uid after the run"
            if cfg["drop_uid"]
            else "process group kill only (setsid daemons can escape; fork is refused by the audit hook)"
        )
        filesystem = "fresh temp dir; audit hook refuses writes outside it" + (
            "; other files protected by the uid drop" if cfg["drop_uid"] else ""
        )
    else:
        network = "empty network namespace (unshare --net)"
        processes = "PID namespace (unshare --pid --fork --mount-proc): its init's exit kills every process"
        filesystem = "private mount namespace: tmpfs working dir, tmpfs /tmp /var/tmp /dev/shm, /run hidden"
    privileges = (
        "per-run unprivileged uid/gid, no groups, no_new_privs"
        if cfg["drop_uid"]
        else "caller's uid" + (" (root inside a user namespace)" if mode == "userns" else "")
    )
    return Isolation(mode, network, processes, privileges, filesystem, cfg["python"], version, tuple(notes))


def _probe() -> tuple[Isolation, dict[str, Any]]:
    forced = os.environ.get("RAGEN_SANDBOX_MODE")
    if forced is not None and forced not in _MODES:
        raise ValueError(f"RAGEN_SANDBOX_MODE must be one of {_MODES}, got {forced!r}")
    modes = [forced] if forced else list(_MODES)
    failures: list[str] = []
    limits = Limits(wall_seconds=10.0, cpu_seconds=5.0)
    for mode in modes:
        for python in _python_candidates():
            cfg = _mode_config(mode, python)
            if cfg is None:
                failures.append(f"{mode}: not applicable (euid {os.geteuid()} or no unshare)")
                break
            token = secrets.token_hex(4)
            res, status = _run(cfg, _PROBE_SOURCE, token + "\n", limits, None, (), probe=True)
            lines = res.stdout.split("\n")
            if res.verdict == "ok" and len(lines) >= 2 and lines[0].startswith("network blocked"):
                parts = lines[1].split()
                if parts and parts[0] == token:
                    version = parts[2] if len(parts) > 2 else "?"
                    return _describe(cfg, version, list(status.get("notes", []))), cfg
            failures.append(f"{mode} with {python}: {res.verdict}: {res.detail} {res.stdout[:200]!r} {res.stderr[-300:]!r}")
    raise RuntimeError("no working sandbox on this machine:\n  " + "\n  ".join(failures))


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
    """Forget the probed mode (tests use it together with RAGEN_SANDBOX_MODE)."""
    global _isolation, _config
    with _lock:
        _isolation = _config = None


# ---------------------------------------------------------------------------------------------------
def _kill_uid(python: str, uid: int) -> None:
    """Kill every process of `uid` (guard mode): kill(-1) issued by a helper running as that uid.

    One pass suffices: kill(-1) walks the task list under the tasklist lock, which fork() also
    needs, so no process of that uid can be created during the walk and escape it.
    """
    for _ in range(1):
        try:
            subprocess.run(
                [python, "-I", "-S", "-c", "import os, signal\ntry: os.kill(-1, signal.SIGKILL)\nexcept OSError: pass"],
                user=uid, group=uid, extra_groups=[], env={}, cwd="/", timeout=5,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            return


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


def _run(
    cfg: dict[str, Any],
    source: str,
    stdin: str | bytes,
    limits: Limits,
    fn_name: str | None,
    hide_paths: tuple[str, ...],
    probe: bool = False,
) -> tuple[RunResult, dict[str, Any]]:
    run_id = "ragen-sbx-" + secrets.token_hex(8)
    workdir = tempfile.mkdtemp(prefix=run_id + "-")
    uid = secrets.SystemRandom().randrange(*_UID_RANGE) if cfg["drop_uid"] else None
    status_r, status_w = os.pipe()
    start = time.monotonic()
    proc = None
    out = bytearray()
    err = bytearray()
    status_raw = bytearray()
    exceeded = None
    timed_out = False
    try:
        Path(workdir, "solution.py").write_text(source, encoding="utf-8", errors="surrogatepass")
        if uid is not None and not cfg["namespaces"]:
            os.chown(workdir, uid, uid)
        config = {
            "run_id": run_id,
            "status_fd": status_w,
            "workdir": workdir,
            "uid": uid,
            "namespaces": cfg["namespaces"],
            "guard": cfg["guard"],
            "readonly_root": cfg["readonly_root"],
            "disk_bytes": limits.disk_bytes,
            "hide_paths": ["/run", *hide_paths] if cfg["namespaces"] else [],
            "fn_name": fn_name,
            "probe": probe,
            "limits": {
                "cpu": max(1, math.ceil(limits.cpu_seconds)),
                "memory": limits.memory_bytes,
                "file": limits.file_bytes,
                "nofile": limits.max_open_files,
                "nproc": _nproc_budget(cfg, limits),
            },
        }
        argv = [*cfg["prefix"], cfg["python"], "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd=workdir,
            start_new_session=True,
            pass_fds=(status_w,),
        )
        os.close(status_w)
        status_w = -1
        data = stdin.encode("utf-8", errors="replace") if isinstance(stdin, str) else bytes(stdin)
        sel = selectors.DefaultSelector()
        readers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, status_r: status_raw}
        for fd in readers:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        in_fd = proc.stdin.fileno()
        if data:
            os.set_blocking(in_fd, False)
            sel.register(in_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        deadline = start + limits.wall_seconds
        exited_at = None
        while readers:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                break
            wait = deadline - now if exited_at is None else min(deadline - now, _EXIT_GRACE_S)
            for key, _ in sel.select(min(wait, 0.05) if exited_at is None else wait):
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
                room = limits.output_bytes - len(buf) if fd != status_r else 1 << 16
                buf += chunk[: max(room, 0)]
                if len(chunk) > room:
                    exceeded = "stdout" if fd == proc.stdout.fileno() else "stderr"
                    break
            if exceeded:
                break
        sel.close()
    finally:
        if status_w >= 0:
            os.close(status_w)
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
        if uid is not None and not cfg["namespaces"]:
            _kill_uid(cfg["python"], uid)
        try:
            while True:
                os.set_blocking(status_r, False)
                chunk = os.read(status_r, _READ_CHUNK)
                if not chunk:
                    break
                status_raw += chunk
        except OSError:
            pass
        os.close(status_r)
        shutil.rmtree(workdir, ignore_errors=True)
    wall = time.monotonic() - start

    status: dict[str, Any] = {}
    for line in bytes(status_raw).decode("utf-8", "replace").splitlines():
        try:
            status = json.loads(line)
        except ValueError:
            continue
    return _judge(status, out, err, exceeded, timed_out, wall, limits, cfg["mode"], run_id, fn_name), status


def _judge(status, out, err, exceeded, timed_out, wall, limits, mode, run_id, fn_name) -> RunResult:
    stdout = bytes(out).decode("utf-8", "replace")
    stderr = bytes(err).decode("utf-8", "replace")
    exit_code = status.get("exit")
    sig = status.get("signal")
    cpu = status.get("cpu")
    value, has_value = None, False
    if exceeded:
        verdict, detail = "output limit", f"{exceeded} exceeded {limits.output_bytes} bytes"
    elif timed_out:
        verdict, detail = "time limit", f"wall time exceeded {limits.wall_seconds:g} s"
    elif "setup_error" in status:
        verdict, detail = "sandbox error", f"sandbox setup failed: {status['setup_error']}"
    elif not status or ("exit" not in status and "signal" not in status):
        verdict, detail = "runtime error", status.get("error", "the sandbox reported no exit status")
    elif sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        cpu_limit = max(1, math.ceil(limits.cpu_seconds))
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu is not None and cpu >= cpu_limit - 0.05):
            verdict, detail = "time limit", f"CPU time exceeded {cpu_limit} s ({name})"
        elif sig == signal.SIGXFSZ:
            verdict, detail = "output limit", f"file size exceeded {limits.file_bytes} bytes (SIGXFSZ)"
        else:
            verdict, detail = "runtime error", f"killed by {name}"
    elif exit_code == _EXIT_MEMORY:
        verdict, detail = "memory limit", f"MemoryError under the {limits.memory_bytes} byte address-space limit"
    elif exit_code != 0:
        verdict = "runtime error"
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        detail = f"exit status {exit_code}" + (f": {tail[0][:200]}" if tail else "")
    else:
        verdict, detail = "ok", "exit status 0"
        if fn_name is not None:
            try:
                value, has_value = json.loads(stdout), True
            except ValueError:
                verdict, detail = "runtime error", "the function returned no readable result"
    return RunResult(
        verdict=verdict,
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        signal=sig,
        wall_time=wall,
        cpu_time=cpu,
        detail=detail,
        isolation=mode,
        run_id=run_id,
        value=value,
        has_value=has_value,
    )


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
        hide_paths: files/directories the program must not see (covered by empty mounts in the
            namespace modes; in guard mode only file permissions and the uid drop protect them).

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
    LeetCode-style `class Solution`. Prints of the program go to `stderr`.

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


# ---------------------------------------------------------------------------------------------------
def _normal_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """Judge stdout: equal line by line after removing trailing whitespace of each line and
    trailing blank lines (the usual TACO/Codeforces leniency); nothing else is forgiven."""
    return _normal_lines(actual) == _normal_lines(expected)


def values_match(actual: Any, expected: Any, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Judge a function's return value against the expected JSON value.

    Lists/tuples compare element-wise, dicts key-wise; a float on either side compares with
    `math.isclose(rel_tol, abs_tol)`; bools only equal bools (JSON true is not 1).
    """
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(actual, float) or isinstance(expected, float):
            if math.isnan(actual) or math.isnan(expected):
                return math.isnan(actual) and math.isnan(expected)
            return math.isclose(actual, expected, rel_tol=rel_tol, abs_tol=abs_tol)
        return actual == expected
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(
            values_match(a, e, rel_tol, abs_tol) for a, e in zip(actual, expected)
        )
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            values_match(actual[k], expected[k], rel_tol, abs_tol) for k in actual
        )
    return type(actual) is type(expected) and actual == expected
