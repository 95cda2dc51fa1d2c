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
                                     inotify (it sees what the host and concurrent runs open)
no-op (returns 0, does nothing)      fsync, fdatasync, sync_file_range, msync: on a host file they
                                     flush the host disk's write cache; the run's files are tmpfs
denied (ENOSYS)                      clone3: its flags live in memory a filter cannot read; glibc
                                     falls back to clone, which is checked above;
                                     every syscall number above REVIEWED_UP_TO
denied (EAFNOSUPPORT)                socket/socketpair of any family but AF_UNIX, AF_INET, AF_INET6
                                     (AF_VSOCK reaches the hypervisor host, outside any network
                                     namespace; AF_PACKET, AF_NETLINK, AF_ALG, ... are attack surface)
other architectures, x32 ABI         the process is killed (libseccomp's bad-architecture action)
===================================  ==============================================================
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import tempfile

__all__ = ["ALLOWED_SOCKET_FAMILIES", "DENIED_SYSCALLS", "NO_OP_SYSCALLS", "REVIEWED_UP_TO", "seccomp_program"]

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
)  # fmt: skip

#: Syscalls that return 0 without running. On a file of the host (the interpreter and its standard
#: library, bound read-only) fsync still makes the disk flush its write cache, a few ms of host-wide
#: I/O per call; on the run's own files (tmpfs) it does nothing anyway. msync(MS_SYNC) of a shared
#: mapping of a host file does the same.
NO_OP_SYSCALLS = ("fsync", "fdatasync", "sync_file_range", "msync")

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
# which the bad-architecture action kills anyway).
_NUMBER_CEILING = 511

#: preadv2/pwritev2 are allowed with flags 0 only (argument 5); RWF_NOWAIT (8) reads only what is
#: cached, RWF_DONTCACHE drops what it reads: both act on the page cache shared with the host.
_RW_FLAG_SYSCALLS = ("preadv2", "pwritev2")
_RW_FLAGS_ARG = 5

#: Socket families a program may create (the network namespace confines these).
ALLOWED_SOCKET_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)

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
        flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        denied = 0
        for name in DENIED_SYSCALLS:
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
        for flag in _CLONE_NEW_FLAGS:
            flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        top = max(ALLOWED_SOCKET_FAMILIES)
        refused = [f for f in range(top) if f not in ALLOWED_SOCKET_FAMILIES]
        for call in ("socket", "socketpair"):
            flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), call, sc.Arg(0, sc.GT, top))
            for family in refused:
                flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), call, sc.Arg(0, sc.EQ, family))
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
        "modify_ldt, landlock, inotify, ...), fsync as a no-op, preadv2/pwritev2 flags, clone with CLONE_NEW* "
        "flags, socket families "
        f"other than unix/inet/inet6 (AF_VSOCK included), ENOSYS above syscall {REVIEWED_UP_TO}"
    )
