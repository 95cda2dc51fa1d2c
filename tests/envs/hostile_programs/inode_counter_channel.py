# Passes data to a later run through inode numbers the whole host shares: the kernel numbers pipes,
# sockets, POSIX message queues and /proc entries with one counter (get_next_ino), memfds (and shared
# anonymous mappings, SysV shared memory) with the counter of its internal tmpfs, and pidfds with a
# counter that every process creation on the host moves. A writer run moves a counter (it creates
# pipes until the next inode number ends in the byte it wants to send); a later run, even one that never
# overlapped it, reads the counter from the inode number of a new object (`fstat(...).st_ino`).
# Each counter is a channel only when a run can both move it and read it: this program tries every
# writer and every reader it knows and prints SUCCEEDED for each counter where one of each works.
# Run with "write <byte>" or "read" on stdin (tests/envs/test_sandbox.py pairs a writer run with a
# reader run); any other input does both halves of every attempt once.
# Expected: every writer of get_next_ino and every reader of the other two counters is refused
# (EPERM, no /proc); fork, threads, shared mappings and SysV shared memory still work; "wrong answer".
import ctypes
import errno
import mmap
import os
import socket
import stat
import sys
import threading

NUMBERS = {"x86_64": {"clone": 56, "mq_open": 240}, "aarch64": {"clone": 220, "mq_open": 180}}
NR = NUMBERS.get(os.uname().machine, {})
CLONE_PIDFD, SIGCHLD = 0x1000, 17
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def report(what, result):
    sys.stderr.write(f"ATTEMPT {what}: {result}\n")


def failure(e):
    return errno.errorcode.get(getattr(e, "errno", None) or 0, type(e).__name__)


def raw(number, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(number), *args)
    if rc < 0:
        raise OSError(ctypes.get_errno(), "syscall")
    return rc


# ---------------------------------------------------------------------- get_next_ino: one new inode each
def read_end_inode(fds):
    """The inode number of a new pipe's read end; both ends closed."""
    r, w = fds
    try:
        return os.fstat(r).st_ino
    finally:
        os.close(r)
        os.close(w)


def via_pipe():
    return read_end_inode(os.pipe())


def via_pipe2():
    return read_end_inode(os.pipe2(os.O_CLOEXEC))


def via_unix_socket():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        return os.fstat(s.fileno()).st_ino


def via_inet_socket():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return os.fstat(s.fileno()).st_ino


def via_socketpair():
    a, b = socket.socketpair()
    try:
        return os.fstat(a.fileno()).st_ino
    finally:
        a.close()
        b.close()


def via_mq_open():
    name = f"ragen-{os.getpid()}".encode()  # (the syscall takes the name without the leading slash)
    fd = raw(NR["mq_open"], ctypes.c_char_p(name), ctypes.c_long(os.O_RDWR | os.O_CREAT), ctypes.c_long(0o600), None)
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)
        libc.mq_unlink(b"/" + name)


def via_proc_lookup():
    """A fresh thread's /proc directory: the kernel makes its inodes when they are first looked up."""
    seen = []

    def look_up_own_directory():
        try:
            seen.append(os.stat(f"/proc/self/task/{threading.get_native_id()}").st_ino)
        except OSError as e:
            seen.append(e)

    thread = threading.Thread(target=look_up_own_directory)
    thread.start()
    thread.join()
    if isinstance(seen[0], OSError):
        raise seen[0]
    return seen[0]


def via_stdin():
    """The pipe the launcher made for stdin: a reader only (it is there in every run)."""
    st = os.fstat(0)
    if not stat.S_ISFIFO(st.st_mode):
        raise LookupError("stdin is not a pipe")
    return st.st_ino


# ---------------------------------------------------------------------- the internal tmpfs (shmem)
def via_memfd():
    fd = os.memfd_create("ragen", 0)
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def via_shared_mapping():
    """A shared anonymous mapping is a file of the internal tmpfs (a writer: always allowed)."""
    mmap.mmap(-1, mmap.PAGESIZE).close()  # (MAP_SHARED is mmap's default)


def via_proc_maps():
    """The inode of a shared anonymous mapping, as /proc/self/maps shows it (a reader)."""
    area = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        address = ctypes.addressof(ctypes.c_char.from_buffer(area))
        with open("/proc/self/maps") as maps:
            for line in maps:
                if int(line.split("-", 1)[0], 16) == address:
                    return int(line.split()[4])
        raise LookupError("the mapping is not listed")
    finally:
        area.close()


def via_sysv_shm():
    shmid = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE: a writer of the same counter, always allowed
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    libc.shmctl(shmid, 0, None)  # IPC_RMID (nothing about a segment shows its inode number)


# ---------------------------------------------------------------------- pidfs: every process creation
def via_pidfd_open():
    fd = os.pidfd_open(os.getpid())
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def via_clone_pidfd():
    pidfd = ctypes.c_int(-1)
    pid = raw(NR["clone"], ctypes.c_long(CLONE_PIDFD | SIGCHLD), None, ctypes.byref(pidfd), None, None)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    try:
        return os.fstat(pidfd.value).st_ino
    finally:
        os.close(pidfd.value)


def via_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # (a writer only: a process has no inode number of its own to read)


# Each counter: the calls that move it (one object each) and the calls that read it (a new object's inode).
WRITERS = {
    "get_next_ino": [via_pipe, via_pipe2, via_unix_socket, via_inet_socket, via_socketpair, via_mq_open,
                     via_proc_lookup],
    "shmem": [via_memfd, via_shared_mapping, via_sysv_shm],
    "pidfs": [via_fork, via_clone_pidfd],  # (pidfd_open reads the number of a process that exists)
}
READERS = {
    "get_next_ino": [via_pipe, via_pipe2, via_unix_socket, via_inet_socket, via_socketpair, via_mq_open,
                     via_proc_lookup, via_stdin],
    "shmem": [via_memfd, via_proc_maps],
    "pidfs": [via_pidfd_open, via_clone_pidfd],
}


def working(attempts):
    """The attempts that run, each tried once (its outcome reported on stderr), with what they return."""
    found = []
    for attempt in attempts:
        try:
            value = attempt()
        except (OSError, LookupError, KeyError) as e:  # KeyError: no syscall number for this machine
            report(attempt.__name__[4:], failure(e))
            continue
        report(attempt.__name__[4:], "works" if value is None else f"inode {value}")
        found.append((attempt, value))
    return found


def write(counter, byte):
    """Move `counter` so that the next inode a reader gets ends in `byte`: aimed with a call that both
    moves and reads the counter, else blind (`byte` objects: a later reader would need the start)."""
    writers = [attempt for attempt, _ in working(WRITERS[counter])]
    if not writers:
        return "no writer"
    aiming = [attempt for attempt in writers if attempt in READERS[counter]]
    if aiming:
        for _ in range(5000):
            if (aiming[0]() + 1) % 256 == byte:
                return f"aimed with {aiming[0].__name__[4:]}"
    for _ in range(byte):
        writers[0]()
    return f"blind with {writers[0].__name__[4:]}"


command = sys.stdin.readline().split()
if command[:1] == ["write"]:
    print("wrote", "; ".join(f"{name}: {write(name, int(command[1]))}" for name in WRITERS))
elif command[:1] == ["read"]:
    values = {name: [value % 256 for _, value in working(READERS[name])] for name in READERS}
    print("read", "; ".join(f"{name}: {values[name][0] if values[name] else None}" for name in READERS))
else:
    for name in WRITERS:
        writers = [attempt.__name__[4:] for attempt, _ in working(WRITERS[name])]
        readers = [attempt.__name__[4:] for attempt, _ in working(READERS[name])]
        if writers and readers:
            print(f"SUCCEEDED {name}: moved by {writers}, read by {readers}")
        else:
            report(name, f"moved by {writers}, read by {readers}: no channel")
    print("done")
