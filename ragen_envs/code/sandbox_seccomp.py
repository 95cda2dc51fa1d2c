"""The sandbox's seccomp policy, compiled to BPF with libseccomp (through PyPI's `pyseccomp`).

The filter is built once per process, in the caller, by libseccomp (the kernel maintainers' library
for exactly this job: it handles architectures, the x32 ABI and argument comparisons), and exported
as a raw BPF program. The sandbox bootstrap (`sandbox_boot.load_seccomp`) installs those bytes with
`prctl(PR_SET_SECCOMP)` in the program process, after `PR_SET_NO_NEW_PRIVS` and before the model's
code. `pyseccomp` is a ctypes binding to the system's `libseccomp.so.2`, which every Debian/Ubuntu
system has (systemd and apt depend on it); no set-up step needs apt. Where the library is missing the
sandbox runs without this layer and `sandbox_isolation()` says so.

Policy (default: allow; the other layers — namespaces, uid, rlimits, cgroups — still apply):

===================================  ==============================================================
denied (EPERM)                       namespaces and mounts: unshare, setns, mount, umount2,
                                     pivot_root, chroot, the new mount API (fsopen, fsmount, ...);
                                     clone with any CLONE_NEW* flag (a new user namespace is the
                                     usual first step of a kernel exploit);
                                     kernel and system: module loading, kexec, reboot, swap, acct,
                                     clocks, hostname, quotactl, iopl/ioperm, syslog, keyrings;
                                     introspection: ptrace, process_vm_readv/writev, kcmp,
                                     perf_event_open, bpf, userfaultfd, personality,
                                     open_by_handle_at, pidfd_getfd; io_uring (its requests bypass
                                     this filter); ioctl(TIOCSTI)
denied (ENOSYS)                      clone3: its flags live in memory a filter cannot read; glibc
                                     falls back to clone, which is checked above
denied (EAFNOSUPPORT)                socket/socketpair of any family but AF_UNIX, AF_INET, AF_INET6
                                     (AF_VSOCK reaches the hypervisor host, outside any network
                                     namespace; AF_PACKET, AF_NETLINK, AF_ALG, ... are attack surface)
other architectures, x32 ABI         the process is killed (libseccomp's bad-architecture action)
===================================  ==============================================================
"""

from __future__ import annotations

import errno
import functools
import socket
import tempfile

__all__ = ["DENIED_SYSCALLS", "ALLOWED_SOCKET_FAMILIES", "seccomp_program"]

#: Syscalls refused with EPERM (names unknown to the running architecture are skipped).
DENIED_SYSCALLS = (
    # namespaces, mounts
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    # kernel and system state
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "settimeofday", "stime", "clock_settime", "clock_adjtime",
    "adjtimex", "syslog", "sethostname", "setdomainname", "quotactl", "quotactl_fd", "vhangup",
    "lookup_dcookie", "nfsservctl", "uselib", "iopl", "ioperm", "get_kernel_syms", "query_module",
    "_sysctl", "add_key", "request_key", "keyctl",
    # introspection of other processes and the kernel
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "perf_event_open", "bpf", "userfaultfd",
    "personality", "open_by_handle_at", "name_to_handle_at", "pidfd_getfd", "process_madvise",
    "fanotify_init",
    # asynchronous I/O whose operations are not seen by seccomp
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)  # fmt: skip

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
            try:
                flt.add_rule(sc.ERRNO(errno.EPERM), name)
                denied += 1
            except (OSError, ValueError, RuntimeError):
                pass  # not a syscall of this architecture
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
        "(namespaces, mounts, ptrace, bpf, io_uring, keyrings, modules, ...), clone with CLONE_NEW* "
        "flags, socket families other than unix/inet/inet6 (AF_VSOCK included)"
    )
