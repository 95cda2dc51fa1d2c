# Writes to the host's kernel log. When a fault signal kills a process that has no handler for it, the
# kernel logs the faulting address, instruction pointer and stack pointer, all chosen by the program
# ("segfault at <address>", "traps: ... trap invalid opcode ip:<address>"); a seccomp kill is logged by
# audit with the syscall number and address. Each fault below happens in a child process, at an address
# (or with a number) that carries __LOG_TOKEN__, so that the test can look for it in the host's log:
# a plain segfault, a general protection fault, int3, ud2, a division by zero, a segfault after trying
# to reset the handler to the default, one with SIGSEGV blocked, a segfault after an exec, `int 0x80`
# and an x32 syscall (other ABIs), and a renamed process (prctl PR_SET_NAME).
# With "open" on stdin it uses instead the writers docs/security.md lists as open, which no handler
# stops: a misaligned call into the vsyscall page and an rt_sigreturn with a bad frame (both logged
# only while the host's debug.exception-trace is 1), and SGDT under UMIP (x86_64; logged whatever the
# settings).
# Expected: every fault ends its child with the signal's number as exit status and nothing of it
# reaches the log; "wrong answer".
import ctypes
import errno
import mmap
import os
import signal
import sys

TOKEN = int("__LOG_TOKEN__", 16)  # 6 hex digits
CODE_PAGE = (0x5A << 36) | (TOKEN << 12)  # where the trapping instructions are mapped: their ip shows it
FAULT_ADDRESS = (0x6B << 36) | (TOKEN << 12)  # never mapped: "segfault at 6b<token>000"
X86 = os.uname().machine == "x86_64"
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
libc.signal.restype = ctypes.c_void_p
libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)


def report(what, result):
    sys.stderr.write(f"ATTEMPT {what}: {result}\n")


def in_child(what, action):
    """Run `action` in a child process and report how the child ended."""
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            action()
        except BaseException as e:  # the attempt was refused before it could fault
            sys.stderr.write(f"ATTEMPT {what}: {type(e).__name__}: {e}\n")
            sys.stderr.flush()
            os._exit(0)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        report(what, f"killed by signal {os.WTERMSIG(status)}")
    else:
        report(what, f"exit status {os.WEXITSTATUS(status)}")


def code_page():
    """The x86_64 instructions below, mapped at CODE_PAGE (so the trap's ip carries the token)."""
    routines = {
        "int3": b"\xcc\xc3",
        "ud2": b"\x0f\x0b",
        "divide": b"\x31\xc9\xf7\xf1\xc3",  # xor ecx, ecx; div ecx
        "general protection": b"\x48\xb8" + (0x8000 << 48 | TOKEN << 12).to_bytes(8, "little") + b"\x48\x8b\x00\xc3",
        "int 0x80": b"\xb8" + (TOKEN | 1 << 24).to_bytes(4, "little") + b"\xcd\x80\xc3",  # eax = a syscall number
        "sgdt": b"\x48\x83\xec\x10\x0f\x01\x04\x24\x48\x83\xc4\x10\xc3",  # sub rsp, 16; sgdt [rsp]; add; ret
    }
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x100000  # MAP_FIXED_NOREPLACE
    page = libc.mmap(CODE_PAGE, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC, flags, -1, 0)
    if page != CODE_PAGE:
        raise OSError(ctypes.get_errno(), "mapping the code page")
    entries, offset = {}, 0
    for name, routine in routines.items():
        ctypes.memmove(page + offset, routine, len(routine))
        entries[name] = ctypes.CFUNCTYPE(ctypes.c_long)(page + offset)
        offset += 64
    return entries


def segfault():
    ctypes.string_at(FAULT_ADDRESS, 1)


def reset_handler_then_segfault():
    libc.signal(signal.SIGSEGV, None)  # SIG_DFL
    segfault()


def blocked_then_segfault():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGSEGV})
    segfault()


def exec_then_segfault():
    # a fresh interpreter, whose handlers the exec would have reset to the default
    os.execv(sys.executable, [sys.executable, "-c", f"import ctypes; ctypes.string_at({FAULT_ADDRESS:#x}, 1)"])


def closed_writers():
    in_child("segfault", segfault)
    in_child("reset the handler, then segfault", reset_handler_then_segfault)
    in_child("block SIGSEGV, then segfault", blocked_then_segfault)
    in_child("exec, then segfault", exec_then_segfault)
    CLONE_SIGHAND = 0x800
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(56 if X86 else 220), ctypes.c_long(CLONE_SIGHAND | signal.SIGCHLD), None, None,
                      None, None)  # without CLONE_VM the kernel would say EINVAL: EPERM is the filter
    report("clone sharing the signal handlers", "SUCCEEDED" if rc >= 0 else errno.errorcode.get(ctypes.get_errno()))
    name = f"log{TOKEN:06x}".encode()
    libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME: the name is in every log line
    current = ctypes.create_string_buffer(16)
    libc.prctl(16, current, 0, 0, 0)
    report("prctl(PR_SET_NAME)", "renamed" if current.value == name else f"still {current.value!r}")
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(0x40000000 | 39))  # x32 getpid
    report("x32 syscall", f"{rc} {errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}")
    if not X86:
        report("traps", "not x86_64: only the segfaults were tried")
        return
    entries = code_page()
    for name in ("general protection", "int3", "ud2", "divide", "int 0x80"):
        in_child(name, entries[name])


def open_writers():
    vsyscall = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_long)(0xFFFFFFFFFF600123)
    in_child("misaligned vsyscall", lambda: vsyscall(TOKEN << 8 | 0xD1, TOKEN << 8 | 0x51))  # di, si
    in_child("rt_sigreturn with a bad frame", lambda: libc.syscall(ctypes.c_long(15 if X86 else 139)))
    if X86:
        in_child("SGDT under UMIP", code_page()["sgdt"])


if sys.stdin.readline().strip() == "open":
    open_writers()
else:
    closed_writers()
print("done")
