"""The sandbox's seccomp policy, compiled to BPF with libseccomp (through PyPI's `pyseccomp`).

The filter is built once per process, in the caller, by libseccomp (the kernel maintainers' library
for exactly this job: it handles architectures, the x32 ABI and argument comparisons), and exported
as a raw BPF program. The sandbox bootstrap (`inside.load_seccomp`) installs those bytes with
`prctl(PR_SET_SECCOMP)` in the program process, after `PR_SET_NO_NEW_PRIVS` and before the model's
code. `pyseccomp` is a ctypes binding to the system's `libseccomp.so.2`, which every Debian/Ubuntu
system has (systemd and apt depend on it); no set-up step needs apt. Where the library is missing the
sandbox runs without this layer and `sandbox_isolation()` says so.

Design: a deny list over an allowed default (the other layers — namespaces, uid, rlimits, cgroups —
still apply), bounded above: every syscall number past `REVIEWED_UP_TO` (the newest syscall this list
was checked against) returns ENOSYS, so a syscall added by a newer kernel is refused until someone
reviews it, instead of being allowed because nobody listed it (`open_tree_attr` was once such a gap).
A program and its libc see ENOSYS as "this kernel is older", which glibc and CPython handle.

===================================  ==============================================================
denied (EPERM)                       namespaces and mounts: unshare, setns, mount, umount2,
                                     pivot_root, chroot, the new mount API (fsopen, fsmount,
                                     open_tree, open_tree_attr, ...), statmount, listmount;
                                     clone with any CLONE_NEW* flag (a new user namespace is the
                                     usual first step of a kernel exploit);
                                     kernel and system: module loading, kexec, reboot, swap, acct,
                                     clocks, hostname, quotactl, iopl/ioperm, modify_ldt, syslog,
                                     keyrings, memfd_secret, landlock;
                                     introspection: ptrace, process_vm_readv/writev, kcmp,
                                     perf_event_open, bpf, userfaultfd, personality,
                                     open_by_handle_at, pidfd_getfd; io_uring and Linux AIO (their
                                     requests bypass this filter, and carry RWF_NOWAIT); ioctl(TIOCSTI)
                                     the host's page cache and disks: sync, syncfs (host-wide
                                     writeback), fadvise64 (DONTNEED evicts shared pages: a channel
                                     between runs), readahead, mincore and cachestat (residency
                                     probes), preadv2/pwritev2 with any flag (RWF_NOWAIT is a
                                     residency probe; flags 0, all CPython uses, is allowed);
                                     inotify (it sees what the host and concurrent runs open);
                                     host-wide inode counters (a channel between runs that never
                                     overlap: one run moves a counter, a later one reads it): pipe,
                                     pipe2, socket and socketpair of every family, mq_open (inode
                                     numbers from the kernel's one `get_next_ino` counter),
                                     memfd_create (the counter of the kernel's internal tmpfs),
                                     pidfd_open and clone with CLONE_PIDFD (pidfs numbers every
                                     process the host creates);
                                     what would take the fault handlers away (`inside.
                                     exit_on_fault_signals`): execve and execveat (an exec resets
                                     every handler), clone with CLONE_SIGHAND but not CLONE_THREAD
                                     (a process sharing the handlers could have them reset to the
                                     default by a fault it takes with the signal blocked)
no-op (returns 0, does nothing)      fsync, fdatasync, sync_file_range, msync: on a host file they
                                     flush the host disk's write cache; the run's files are tmpfs;
                                     rt_sigaction with a new action for a fault signal (SIGSEGV,
                                     SIGBUS, SIGILL, SIGFPE, SIGTRAP): the sandbox's handler stays,
                                     so a fault never reaches the host's kernel log (asking for the
                                     current action still works; `faulthandler.enable()` succeeds
                                     and changes nothing); prctl(PR_SET_NAME): the process name is
                                     what the kernel writes in its log lines about the process
denied (ENOSYS)                      clone3: its flags live in memory a filter cannot read; glibc
                                     falls back to clone, which is checked above;
                                     every syscall number above REVIEWED_UP_TO;
                                     other architectures and the x32 ABI (`int 0x80`, x32 numbers):
                                     refused rather than killed, as the kernel writes every seccomp
                                     kill to its log, with the number and address the program chose
===================================  ==============================================================
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

from ragen_envs.code.sandbox.inside import FAULT_SIGNALS

__all__ = ["DENIED_SYSCALLS", "INODE_COUNTER_SYSCALLS", "NO_OP_SYSCALLS", "REVIEWED_UP_TO", "seccomp_program"]

#: Syscalls refused with EPERM (names unknown to the running architecture are skipped).
DENIED_SYSCALLS = (
    # namespaces, mounts
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
    "open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "statmount", "listmount",
    # kernel and system state
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "settimeofday", "stime", "clock_settime", "clock_adjtime",
    "adjtimex", "syslog", "sethostname", "setdomainname", "quotactl", "quotactl_fd", "vhangup",
    "lookup_dcookie", "nfsservctl", "uselib", "iopl", "ioperm", "modify_ldt", "get_kernel_syms",
    "query_module", "_sysctl", "add_key", "request_key", "keyctl", "memfd_secret",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    # introspection of other processes and the kernel
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "perf_event_open", "bpf", "userfaultfd",
    "personality", "open_by_handle_at", "name_to_handle_at", "pidfd_getfd", "process_madvise",
    "fanotify_init",
    # asynchronous I/O whose operations are not seen by seccomp (and can carry RWF_NOWAIT)
    "io_uring_setup", "io_uring_enter", "io_uring_register", "io_setup", "io_submit",
    # the host's page cache and disks: host-wide writeback, eviction, residency probes
    "sync", "syncfs", "fadvise64", "readahead", "mincore", "cachestat",
    # watching the shared standard library (what the host and concurrent runs open and read)
    "inotify_init", "inotify_init1", "inotify_add_watch",
    # an exec resets every signal handler, the fault handlers included (`inside.exit_on_fault_signals`)
    "execve", "execveat",
)  # fmt: skip

#: Syscalls that hand out an inode number from a counter the whole host shares, refused with EPERM (and
#: counted in DENIED_SYSCALLS' report). A run that moves such a counter and a later run that reads it
#: (`fstat(...).st_ino`) pass data even when they never overlap: up to 8 bits a run pair, measured
#: (docs/security.md). pipe, pipe2, socket, socketpair and mq_open number their inodes with the
#: kernel's one `get_next_ino()` counter (also behind /proc's inodes: the sandbox has no /proc), which
#: every run can read from its stdin pipe, so its writers are refused; memfd_create reads the counter of
#: the kernel's internal tmpfs (moved also by shared anonymous mappings and SysV shared memory, which
#: stay allowed: with no memfd and no /proc nothing in a run can read it); pidfd_open (like clone with
#: CLONE_PIDFD, below) reads the pidfs counter, which every fork and thread on the host moves. A task
#: program needs none of them: stdin and stdout are set up by the launcher, and fork, threads, FIFOs
#: and files in the run's tmpfs remain for its own IPC.
INODE_COUNTER_SYSCALLS = ("pipe", "pipe2", "socket", "socketpair", "mq_open", "memfd_create", "pidfd_open")

#: Syscalls that return 0 without running. On a file of the host (the interpreter and its standard
#: library, bound read-only) fsync still makes the disk flush its write cache, a few ms of host-wide
#: I/O per call; on the run's own files (tmpfs) it does nothing anyway. msync(MS_SYNC) of a shared
#: mapping of a host file does the same.
NO_OP_SYSCALLS = ("fsync", "fdatasync", "sync_file_range", "msync")

# rt_sigaction(signal, act, oldact, size): a new action (act != NULL) for a fault signal is a no-op; a
# query (act == NULL) runs. prctl(PR_SET_NAME, ...) is a no-op: the name is in the kernel's log lines.
_SIGACTION_SIGNAL_ARG, _SIGACTION_ACT_ARG = 0, 1
_PR_SET_NAME = 15

#: Numbers of the syscalls above that old libseccomp versions do not know by name. Syscalls from
#: 424 on have the same number on every architecture (x86_64 and aarch64 included).
GENERIC_NUMBERS = {
    "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "memfd_secret": 447, "cachestat": 451, "statmount": 457, "listmount": 458, "open_tree_attr": 467,
}  # fmt: skip
_UNIFIED_NUMBERING = ("x86_64", "aarch64")

#: The newest syscall number this policy was reviewed against (469: file_setattr, Linux 6.17). Every
#: number above it, up to `_NUMBER_CEILING`, returns ENOSYS.
REVIEWED_UP_TO = 469
# Native numbers end well below 512 on both architectures (x86_64's 512-547 are x32-only entries,
# which the bad-architecture action refuses anyway).
_NUMBER_CEILING = 511

#: preadv2/pwritev2 are allowed with flags 0 only (argument 5); RWF_NOWAIT (8) reads only what is
#: cached, RWF_DONTCACHE drops what it reads: both act on the page cache shared with the host.
_RW_FLAG_SYSCALLS = ("preadv2", "pwritev2")
_RW_FLAGS_ARG = 5

_CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
_CLONE_PIDFD = 0x00001000  # a pidfd of the child: a reader of the host-wide pidfs counter
_CLONE_SIGHAND, _CLONE_THREAD = 0x00000800, 0x00010000
_TIOCSTI = 0x5412


def _syscall_number(sc, name: str) -> int | None:
    """The native number of `name`: libseccomp's, else the generic table's, else None (not a syscall here)."""
    number = sc.resolve_syscall(sc.Arch.NATIVE, name)
    if number >= 0:
        return number
    if name in GENERIC_NUMBERS and os.uname().machine in _UNIFIED_NUMBERING:
        return GENERIC_NUMBERS[name]
    return None


@functools.lru_cache(maxsize=1)
def seccomp_program() -> tuple[bytes | None, str]:
    """(BPF program, description): the compiled policy, or (None, why it is unavailable)."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        return None, f"no seccomp filter: libseccomp is not available ({exc})"
    try:
        flt = sc.SyscallFilter(sc.ALLOW)
        # Refused, not killed: the kernel logs every seccomp kill (number, address, name of the program).
        flt.set_attr(sc.Attr.ACT_BADARCH, sc.ERRNO(errno.ENOSYS))
        denied = 0
        for name in DENIED_SYSCALLS + INODE_COUNTER_SYSCALLS:
            number = _syscall_number(sc, name)
            if number is None:
                continue  # not a syscall of this architecture (e.g. modify_ldt on aarch64)
            flt.add_rule(sc.ERRNO(errno.EPERM), number)
            denied += 1
        for name in NO_OP_SYSCALLS:
            number = _syscall_number(sc, name)
            if number is not None:
                flt.add_rule(sc.ERRNO(0), number)
        for name in _RW_FLAG_SYSCALLS:
            number = _syscall_number(sc, name)
            if number is not None:
                flt.add_rule(sc.ERRNO(errno.EPERM), number, sc.Arg(_RW_FLAGS_ARG, sc.NE, 0))
        for number in range(REVIEWED_UP_TO + 1, _NUMBER_CEILING + 1):
            flt.add_rule(sc.ERRNO(errno.ENOSYS), number)
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for flag in (*_CLONE_NEW_FLAGS, _CLONE_PIDFD):
            flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        sighand_alone = _CLONE_SIGHAND | _CLONE_THREAD
        flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, sighand_alone, _CLONE_SIGHAND))
        for signum in FAULT_SIGNALS:
            flt.add_rule(sc.ERRNO(0), "rt_sigaction", sc.Arg(_SIGACTION_SIGNAL_ARG, sc.EQ, signum),
                         sc.Arg(_SIGACTION_ACT_ARG, sc.NE, 0))
        flt.add_rule(sc.ERRNO(0), "prctl", sc.Arg(0, sc.EQ, _PR_SET_NAME))
        flt.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
        with tempfile.TemporaryFile() as f:
            flt.export_bpf(f)
            f.seek(0)
            program = f.read()
    except (OSError, ValueError, RuntimeError) as exc:
        return None, f"no seccomp filter: libseccomp failed to build it ({exc})"
    return program, (
        f"seccomp filter ({len(program) // 8} BPF instructions, libseccomp): {denied} syscalls denied "
        "(namespaces, mounts, ptrace, bpf, io_uring, AIO, keyrings, modules, sync, fadvise, mincore, "
        "modify_ldt, landlock, inotify, execve, ...; pipes, sockets of every family (AF_VSOCK included), "
        "mq_open, memfd_create and pidfd_open: host-wide inode counters), fsync as a no-op, "
        "preadv2/pwritev2 flags, clone with CLONE_NEW*, CLONE_PIDFD or a shared signal table, fault-signal "
        f"handlers kept (new actions are no-ops), ENOSYS above syscall {REVIEWED_UP_TO} and for other ABIs"
    )
