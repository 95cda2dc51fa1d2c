"""Whole-run resource limits of the sandbox: a cgroup per run, or a process-tree watch.

RLIMIT_AS and RLIMIT_CPU bound each *process* of a run; a program that forks five children gets five
times the memory and CPU. The run as a whole is bounded here, by the first mechanism that works:

1. **cgroup v2** (the `cgroup2` mount, e.g. `/sys/fs/cgroup` or the hybrid `/sys/fs/cgroup/unified`):
   a child of the caller's own cgroup with `memory.max` (and `memory.swap.max` 0: no swap) and
   `pids.max`, when the memory and pids controllers can be enabled there; CPU time from `cpu.stat`;
2. **cgroup v1**: the same under the `memory` (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`),
   `pids` (`pids.max`) and `cpuacct` (`cpuacct.usage`: the run's CPU time) hierarchies;
3. **watch**: the caller samples the run's process tree (`/proc/<pid>/task/*/children`) every
   `WATCH_INTERVAL_S` and kills it when the summed resident memory or CPU time passes the limit.

The caller moves the run's first process into its cgroups while that process's interpreter starts,
and the supervisor forks the program only after the caller confirms, so every process of the
program is inside from its first instruction. The
caller reads the CPU usage while the run goes on (the run is killed, verdict "time limit", once the
summed CPU time of all its processes passes `cpu_seconds`), reads the OOM and peak-memory counters
afterwards (verdict "memory limit" when the kernel killed a process for memory), kills anything left
and removes the cgroup. `RAGEN_SANDBOX_CGROUP=v2|v1|watch` forces a mechanism (an error if it does
not work here). Cgroups are created under the caller's own cgroup, so they stay inside whatever
limits the caller itself runs under.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field

__all__ = ["CgroupSetup", "RunCgroup", "TreeWatch", "probe_cgroups", "stale_run_cgroups"]

MECHANISMS = ("v2", "v1", "watch")
#: How often the run's resource use is sampled by the caller, in seconds.
WATCH_INTERVAL_S = 0.05
# No CPU quota (the `cpu` controller): CPU *time* is what is limited, read from the usage counter, and
# a quota puts the run in its own scheduling group, which makes every run slower on a busy machine.
_V1_CONTROLLERS = ("memory", "pids", "cpuacct")
_V2_CONTROLLERS = ("memory", "pids")
_PREFIX = "ragen-sbx-"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount seen by this process."""
    out = []
    try:
        lines = _read("/proc/self/mountinfo").splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), rfields[0], set(rfields[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                out[name] = parts[2]
    return out


def _usable_dir(base: str) -> bool:
    """Whether a child cgroup can be created (and removed) under `base`."""
    probe = os.path.join(base, f"{_PREFIX}probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            out += [int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split()]
    except (OSError, ValueError):
        pass
    return out


@dataclass(frozen=True)
class CgroupSetup:
    """The mechanism in use and, for cgroups, the directories the run cgroups are created in."""

    mechanism: str
    bases: dict[str, str] = field(default_factory=dict)  # controller ("" for v2) -> directory
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.mechanism == "v2":
            return f"cgroup v2 per run under {self.bases['']} (memory.max without swap, pids.max, CPU usage)"
        if self.mechanism == "v1":
            ctl = ", ".join(sorted(self.bases))
            return f"cgroup v1 per run ({ctl}: memory + swap limit, pids.max, CPU usage)"
        return (
            f"process-tree watch every {WATCH_INTERVAL_S * 1000:.0f} ms (summed RSS and CPU time; "
            "the run is killed past a limit)"
        )


def _probe_v2() -> tuple[dict[str, str] | None, str]:
    own = _own_paths().get("")
    if own is None:
        return None, "v2: this process is in no v2 cgroup"
    for mount, fstype, _ in _mounts():
        if fstype != "cgroup2":
            continue
        base = os.path.join(mount, own.lstrip("/"))
        try:
            available = set(_read(os.path.join(base, "cgroup.controllers")).split())
            enabled = set(_read(os.path.join(base, "cgroup.subtree_control")).split())
        except OSError:
            continue
        missing = [c for c in _V2_CONTROLLERS if c not in available]
        if missing:
            return None, f"v2 at {mount}: controllers {missing} are not available (bound to v1?)"
        want = [c for c in _V2_CONTROLLERS if c not in enabled]
        if want:
            try:
                _write(os.path.join(base, "cgroup.subtree_control"), " ".join("+" + c for c in want))
            except OSError as exc:
                return None, f"v2 at {base}: cannot enable {want} ({exc.strerror})"
        if _usable_dir(base):
            return {"": base}, ""
        return None, f"v2 at {base}: not writable"
    return None, "v2: no cgroup2 mount"


def _probe_v1() -> tuple[dict[str, str] | None, str]:
    own = _own_paths()
    bases: dict[str, str] = {}
    for mount, fstype, options in _mounts():
        if fstype != "cgroup":
            continue
        for controller in _V1_CONTROLLERS:
            if controller in options and controller not in bases and controller in own:
                base = os.path.join(mount, own[controller].lstrip("/"))
                if os.path.isdir(base) and _usable_dir(base):
                    bases[controller] = base
    missing = [c for c in ("memory", "pids") if c not in bases]
    if missing:
        return None, f"v1: no writable {missing} hierarchy"
    if "cpuacct" not in bases:
        return None, "v1: no writable cpuacct hierarchy (needed for the run's CPU time)"
    return bases, ""


def probe_cgroups(forced: str | None = None) -> CgroupSetup:
    """The first mechanism that works here (module docstring); `forced` insists on one.

    Raises:
        ValueError: `forced` is not a mechanism. RuntimeError: the forced mechanism does not work.
    """
    if forced is not None and forced not in MECHANISMS:
        raise ValueError(f"RAGEN_SANDBOX_CGROUP must be one of {MECHANISMS}, got {forced!r}")
    notes: list[str] = []
    for mechanism, probe in (("v2", _probe_v2), ("v1", _probe_v1)):
        if forced not in (None, mechanism):
            continue
        bases, why = probe()
        if bases is not None:
            return CgroupSetup(mechanism, bases, tuple(notes))
        notes.append(why)
        if forced == mechanism:
            raise RuntimeError(f"RAGEN_SANDBOX_CGROUP={forced} does not work here: {why}")
    return CgroupSetup("watch", {}, tuple(notes))


class RunCgroup:
    """The cgroup(s) of one run: created with its limits, joined by the supervisor, removed after."""

    def __init__(self, setup: CgroupSetup, name: str, memory_bytes: int, max_processes: int):
        self.setup = setup
        self.dirs: dict[str, str] = {}
        try:
            for controller, base in setup.bases.items():
                path = os.path.join(base, name)
                os.mkdir(path)
                self.dirs[controller] = path
            self._limit(memory_bytes, max_processes)
        except OSError:
            self.remove()
            raise

    def _limit(self, memory_bytes: int, max_processes: int) -> None:
        d = self.dirs
        if self.setup.mechanism == "v2":
            _write(os.path.join(d[""], "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(d[""], "memory.swap.max")):
                _write(os.path.join(d[""], "memory.swap.max"), "0")
            _write(os.path.join(d[""], "pids.max"), str(max_processes))
            return
        _write(os.path.join(d["memory"], "memory.limit_in_bytes"), str(memory_bytes))
        memsw = os.path.join(d["memory"], "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            _write(memsw, str(memory_bytes))
        _write(os.path.join(d["pids"], "pids.max"), str(max_processes))

    def join(self, pid: int) -> None:
        """Move process `pid` and the children it already has into the run's cgroups.

        The run's first process is moved from outside while its interpreter starts (a cgroup
        migration waits for an RCU grace period: off the critical path this way); it forks the
        program only after the caller confirms. A child forked during the move is either listed
        afterwards (and moved) or created after it (and born inside): the kernel serialises forks
        against cgroup migration.
        """
        for path in self.dirs.values():
            _write(os.path.join(path, "cgroup.procs"), str(pid))
        for child in _children(pid):
            for path in self.dirs.values():
                _write(os.path.join(path, "cgroup.procs"), str(child))

    def cpu_seconds(self) -> float | None:
        """CPU time used by the run so far (all its processes, dead ones included)."""
        try:
            if self.setup.mechanism == "v2":
                for line in _read(os.path.join(self.dirs[""], "cpu.stat")).splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return None
            return int(_read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage"))) / 1e9
        except (OSError, ValueError, KeyError):
            return None

    def memory_stats(self) -> tuple[int | None, int]:
        """(peak memory in bytes if known, number of OOM kills in the run)."""
        peak, ooms = None, 0
        try:
            if self.setup.mechanism == "v2":
                d = self.dirs[""]
                if os.path.exists(os.path.join(d, "memory.peak")):
                    peak = int(_read(os.path.join(d, "memory.peak")))
                for line in _read(os.path.join(d, "memory.events")).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        ooms = int(value)
            else:
                d = self.dirs["memory"]
                peak = int(_read(os.path.join(d, "memory.max_usage_in_bytes")))
                for line in _read(os.path.join(d, "memory.oom_control")).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        ooms = int(value)
        except (OSError, ValueError, KeyError):
            pass
        return peak, ooms

    def pids_refused(self) -> int:
        """How many forks the pids limit refused."""
        try:
            d = self.dirs.get("") or self.dirs["pids"]
            for line in _read(os.path.join(d, "pids.events")).splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError, KeyError):
            pass
        return 0

    def _pids(self) -> list[int]:
        pids: set[int] = set()
        for path in self.dirs.values():
            try:
                pids.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
            except (OSError, ValueError):
                pass
        return sorted(pids)

    def kill_all(self) -> None:
        """SIGKILL every process still in the run's cgroups (normally none: the PID namespace is gone)."""
        if self.setup.mechanism == "v2" and os.path.exists(os.path.join(self.dirs.get("", ""), "cgroup.kill")):
            try:
                _write(os.path.join(self.dirs[""], "cgroup.kill"), "1")
            except OSError:
                pass
        for _ in range(50):
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def release_page_cache(self) -> None:
        """Reclaim the page cache charged to the run (files it read that were not cached before).

        A removed memory cgroup stays in the kernel, "dying", for as long as pages are charged to
        it, so runs that read uncached files used to leave one each. Reclaiming them first (v1:
        `memory.force_empty`, documented for exactly this use before rmdir; v2: `memory.reclaim`)
        lets the cgroup go, and leaves the host's page cache as the run found it: what the run
        brought in is dropped again, so the next run cannot tell what this one read. Pages other
        processes had cached stay charged to them and are untouched. Best effort: errors are ignored.
        """
        v2 = self.setup.mechanism == "v2"
        d = self.dirs.get("" if v2 else "memory")
        if d is None:
            return
        # Only when file pages are charged: reclaiming starts by draining every CPU's LRU lists, which
        # costs milliseconds on a busy machine, and a run that read only cached files charges none.
        key = "file" if v2 else "cache"
        try:
            for line in _read(os.path.join(d, "memory.stat")).splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    charged = int(value)
                    break
            else:
                return
            if charged > 0:
                if v2:
                    _write(os.path.join(d, "memory.reclaim"), str(charged))
                else:
                    _write(os.path.join(d, "memory.force_empty"), "0")
        except (OSError, ValueError):
            pass  # EAGAIN: not everything could be reclaimed (e.g. kernel memory); rmdir still works

    def remove(self) -> list[str]:
        """Remove the run's cgroup directories (after releasing their page cache); returns those that
        could not be removed."""
        if self.dirs:
            self.release_page_cache()
        left = []
        for path in self.dirs.values():
            for attempt in range(100):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or attempt == 99:
                        left.append(f"{path}: {exc.strerror}")
                        break
                    time.sleep(0.01)
        self.dirs = {}
        return left


def stale_run_cgroups(setup: CgroupSetup) -> list[str]:
    """Run cgroups left under the bases (e.g. by a caller that was killed), for cleanup and tests."""
    out = []
    for base in setup.bases.values():
        try:
            out += [os.path.join(base, n) for n in os.listdir(base) if n.startswith(_PREFIX)]
        except OSError:
            pass
    return out


class TreeWatch:
    """The fallback: sample the run's process tree (summed RSS and CPU time, number of tasks)."""

    def __init__(self, root_pid: int):
        self.root_pid = root_pid
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.tick = os.sysconf("SC_CLK_TCK")
        self.cpu_max = 0.0
        self.rss_max = 0
        self.samples = 0

    def _tree(self) -> list[int]:
        seen, todo = [], [self.root_pid]
        while todo and len(seen) < 4096:
            pid = todo.pop()
            seen.append(pid)
            todo += _children(pid)
        return seen

    def sample(self) -> tuple[float, int, int]:
        """(CPU seconds, resident bytes, tasks) summed over the tree (CPU includes reaped children)."""
        cpu, rss, tasks = 0.0, 0, 0
        for pid in self._tree():
            try:
                stat = _read(f"/proc/{pid}/stat")
                fields = stat[stat.rindex(")") + 2 :].split()
                # utime stime cutime cstime are fields 14-17 (1-based); num_threads is 20
                cpu += sum(int(x) for x in fields[11:15]) / self.tick
                tasks += int(fields[17])
                rss += int(_read(f"/proc/{pid}/statm").split()[1]) * self.page
            except (OSError, ValueError, IndexError):
                continue
        self.cpu_max = max(self.cpu_max, cpu)
        self.rss_max = max(self.rss_max, rss)
        self.samples += 1
        return cpu, rss, tasks
