"""One sandboxed run, from the caller's side: start the bootstrap in a fresh process tree (`_spawn`), feed its stdin
and read its bounded outputs while watching the limits (`_pump`), tear the run down and collect what it measured
(`_reap`), and turn what it saw into a verdict (`_judge`); `run_once` does the four in turn. The inside of the run
is `inside` (started by `launch.py`, run by path); the package docstring has the layers and the threat model.
"""

from __future__ import annotations

import json
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen_envs.code.sandbox import inside
from ragen_envs.code.sandbox.cgroup import WATCH_INTERVAL_S, CgroupSetup, RunCgroup, TreeWatch
from ragen_envs.code.sandbox.limits import Limits
from ragen_envs.code.sandbox.result import RunResult, parse_result

# Run by path (`-S`: the package is not importable there); it sits next to `inside.py`, which it imports.
LAUNCH = str(Path(inside.__file__).resolve().with_name("launch.py"))
# How the bootstrap's interpreter starts: isolated mode (`-I`, i.e. `-E -P -s`) minus `-E`, plus `-S`. `-E` would
# also ignore PYTHONHASHSEED, so every run would hash str with a fresh random key, and a program printing a set of
# str could earn different rewards for the same text. Without `-E` the interpreter reads its environment, so the
# caller writes all of it: PYTHONHASHSEED fixes str hashing; PYTHONSAFEPATH is `-P` (Python >= 3.11; launch.py
# drops the script's directory from sys.path on older ones); nothing of the caller's own environment is passed.
# launch.py removes both from os.environ before anything else runs: the program sees the environment it always saw.
INTERPRETER_FLAGS = ("-s", "-S")
INTERPRETER_ENV = {"PYTHONHASHSEED": "0", "PYTHONSAFEPATH": "1"}
_UID_RANGE = (1_000_000, 2_000_000)
_READ_CHUNK = 65_536
# After the program process exits, how long the pipes may stay open (daemons in guard mode).
_EXIT_GRACE_S = 0.2
# The supervisor's own deadline, past the caller's: it only matters when the caller is gone.
_BACKSTOP_S = 5.0


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
            [*cfg["prefix"], cfg["python"], *INTERPRETER_FLAGS, LAUNCH, run_id, str(config_fd), str(go_r),
             str(status_w), "namespaces" if cfg["namespaces"] else "guard"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(INTERPRETER_ENV),  # the whole environment: the caller's own never reaches the run
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
            value, problem = parse_result(stdout)
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


def run_once(
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
