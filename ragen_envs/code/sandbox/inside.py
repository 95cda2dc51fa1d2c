"""The inside of the sandbox: `python -s -S sandbox/launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE`
runs `main` (MODE: "namespaces" or "guard").

This module is the security-critical half of the sandbox. It runs in the sandbox interpreter
(`-s -S` and an environment of only PYTHONHASHSEED=0 and PYTHONSAFEPATH=1, which `launch.py` removes
before this module is imported: no other environment variable, no site-packages, the same str hashes in
every run), so it may import only the standard library,
and it must run on any Python >= 3.8. `launch.py` (run by path) imports it through the import
system, as the top-level module `inside`, so its cached bytecode is used (compiling it on every run
would cost more than the rest of the start-up). The caller and the tests import it as
`ragen_envs.code.sandbox.inside` (the tests to check each step).

The process tree it makes (namespace modes; `unshare` has already created the namespaces):

    waiter (the process unshare exec'd, in the run's host directory; the caller moves it into the
      run's cgroups while this interpreter starts): waits on GO_FD for the caller's confirmation,
      forks, waits, exits. It never reads the configuration.
    └─ supervisor = PID 1 of the new PID namespace, in the new mount/IPC/UTS/network/cgroup ones:
      forks the program process first, then reads the configuration from CONFIG_FD (a memfd written
      by the caller: never on argv), builds a minimal root file system and pivots into it, writes
      the program, and hands the program process its values (`program_values`) through a pipe
      └─ program process: forked before the configuration was read, so the hidden paths, the host
         directories and the root plan were never in its memory (a variable cleared after a fork
         would leave its bytes behind). It joins the new root (`join_root`), then: rlimits, a fresh
         uid/gid, no_new_privs, a seccomp filter, the model's code. Any setup failure here is
         reported as {"setup_error": ...} ("sandbox error").
    The supervisor reaps every child, reports the program's exit status as one JSON line on the
    status pipe and exits; as the namespace's init its exit makes the kernel kill whatever is left.
    It also exits (killing the run) when the caller goes away (the status pipe reports an error) or
    when its own backstop deadline passes, so a run never outlives its caller.

Guard mode (no namespaces) runs the same steps minus the namespace ones, plus an audit hook.
Exit statuses of the program process: EXIT_MEMORY (MemoryError), EXIT_BAD_RESULT (the function's
return value is not JSON), EXIT_SETUP (the sandbox could not be set up; see the status line).
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` itself imports enum and functools (8 ms of start-up)
import os
import select
import sys

EXIT_MEMORY = 113
EXIT_BAD_RESULT = 114
EXIT_SETUP = 115

# Linux constants (x86_64 / aarch64 share these).
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
CLONE_NEWCGROUP = 0x02000000
SIGKILL_NUMBER = 9
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SECCOMP_MODE_FILTER = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
#: The directory, under the run's host directory, that the new root is mounted on.
ROOT_DIR_NAME = "root"
#: The signals the kernel sends for a fault of the program: a bad memory access, a bus error, an invalid
#: or privileged instruction, a division by zero, a breakpoint. When one kills a process that has no
#: handler for it the kernel writes a line to the host's log, with addresses the program can choose
#: (`segfault at <address> ip <address>`, `traps: ... trap invalid opcode ip:...`).
FAULT_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGTRAP)

# Saved before the program can replace them.
_exit, _write, _close = os._exit, os.write, os.close


class SetupError(Exception):
    """A layer of the sandbox could not be put in place: the run must not go on ("sandbox error")."""


# ------------------------------------------------------------------------------------------- libc
# The few libc calls Python has no wrapper for (mount, umount2, pivot_root, prctl, chroot), through
# the `_ctypes` C module directly: `import ctypes` costs ~5 ms of every run's start-up, this ~0.5 ms.
_LIBC = []


class CFunctions:
    """libc functions with C int results and errno capture (the part of `ctypes.CDLL` used here)."""

    def __init__(self):
        import _ctypes

        self._ctypes = _ctypes

        class CInt(_ctypes._SimpleCData):
            _type_ = "i"

        class CULong(_ctypes._SimpleCData):
            _type_ = "L"

        class CCharP(_ctypes._SimpleCData):
            _type_ = "z"

        class CUShort(_ctypes._SimpleCData):
            _type_ = "H"

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = CInt

        class SockFprog(_ctypes.Structure):  # struct sock_fprog
            _fields_ = [("len", CUShort), ("filter", CCharP)]

        class CUInt(_ctypes._SimpleCData):
            _type_ = "I"

        class CapHeader(_ctypes.Structure):  # struct __user_cap_header_struct
            _fields_ = [("version", CUInt), ("pid", CInt)]

        class CapData(_ctypes.Structure):  # struct __user_cap_data_struct (two of them for version 3)
            _fields_ = [("effective", CUInt), ("permitted", CUInt), ("inheritable", CUInt),
                        ("effective2", CUInt), ("permitted2", CUInt), ("inheritable2", CUInt)]

        self.CapHeader, self.CapData = CapHeader, CapData

        class Library:  # what CFuncPtr((name, library)) reads: the dlopen handle
            _handle = _ctypes.dlopen(None, 0)

        self.SockFprog = SockFprog

        def function(name, *argtypes):
            f = Function((name, Library))
            f.argtypes = argtypes
            return f

        self.mount = function("mount", CCharP, CCharP, CCharP, CULong, CCharP)
        self.umount2 = function("umount2", CCharP, CInt)
        self.prctl = function("prctl", CInt, CULong, CULong, CULong, CULong)
        self.chroot = function("chroot", CCharP)
        self.capset = function("capset", CULong, CULong)
        self.syscall = function("syscall", CULong, CCharP, CCharP)
        self.unshare = function("unshare", CInt)

        class AddressFunction(_ctypes.CFuncPtr):  # returns a pointer-sized value (signal's old handler)
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = CULong

        self.signal = AddressFunction(("signal", Library))
        self.signal.argtypes = (CInt, CULong)
        self.sig_err = (1 << (8 * _ctypes.sizeof(CULong))) - 1  # signal's failure: (void (*)(int)) -1
        #: libc's `_exit`, called as a signal handler: it ends the process with the signal's number.
        self.exit_address = _ctypes.dlsym(Library._handle, "_exit")

    def errno(self):
        return self._ctypes.get_errno()

    def addressof(self, obj):
        return self._ctypes.addressof(obj)


def libc():
    """The libc functions (loaded once, before the root is switched)."""
    if not _LIBC:
        _LIBC.append(CFunctions())
    return _LIBC[0]


def _os_error(what):
    return SetupError(f"{what}: {os.strerror(libc().errno())}")


def _enc(text):
    return None if text is None else os.fsencode(text)


def mount(source, target, fstype, flags, data=None):
    lib = libc()
    if lib.mount(_enc(source), _enc(target), _enc(fstype), flags, _enc(data)) != 0:
        raise _os_error(f"mount {fstype or source} on {target}")


# ------------------------------------------------------------------------------------------- status
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def to_json(obj):
    """JSON text of a status object (dicts, lists, str, int, float, bool, None), without importing
    `json` (which pulls in `re`: a large part of the sandbox's start-up time)."""
    if obj is None:
        return "null"
    if obj is True or obj is False:
        return "true" if obj else "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return repr(obj) if obj == obj and obj not in (float("inf"), float("-inf")) else "null"
    if isinstance(obj, str):
        out = []
        for c in obj:
            if c in _ESCAPES:
                out.append(_ESCAPES[c])
            elif c < " " or "\ud800" <= c <= "\udfff":
                out.append(f"\\u{ord(c):04x}")
            else:
                out.append(c)
        return '"' + "".join(out) + '"'
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(to_json(v) for v in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(to_json(str(k)) + ":" + to_json(v) for k, v in obj.items()) + "}"
    return to_json(str(obj))


class Status:
    """One JSON object per line on the status pipe (the caller merges them in order)."""

    def __init__(self, fd):
        self.fd = fd

    def report(self, obj):
        if self.fd < 0:
            return
        data = (to_json(obj) + "\n").encode("utf-8")
        try:
            while data:
                data = data[_write(self.fd, data):]
        except OSError:
            pass

    def close(self):
        if self.fd >= 0:
            try:
                _close(self.fd)
            except OSError:
                pass
            self.fd = -1


def read_config(fd):
    """The run's configuration: a `marshal` dump (trusted: the caller wrote it) in a memfd."""
    import marshal

    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return marshal.loads(b"".join(chunks))


def wait_for_go(fd):
    """Block until the caller says the run's cgroups hold this process (one byte on `fd`)."""
    try:
        got = os.read(fd, 1)
    finally:
        os.close(fd)
    if got != b"g":
        raise SetupError("the caller did not confirm the run's cgroup (it went away?)")


# ------------------------------------------------------------------------------------------- file system
def _inside(root, path):
    return root.rstrip("/") + "/" + path.lstrip("/")


def _make_dirs(path, mode=0o755):
    os.makedirs(path, mode=mode, exist_ok=True)


def _bind(source, target, is_dir, nodev=True, recursive=False):
    if is_dir:
        _make_dirs(target)
    else:
        _make_dirs(os.path.dirname(target))
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    flags = MS_BIND | (MS_REC if recursive else 0)
    mount(source, target, None, flags)
    ro = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (MS_NODEV if nodev else 0)
    # In a user namespace the flags the host mount has (nodev, noexec) are locked and must be kept:
    # try the wanted flags first, then with those added.
    for extra in (0, MS_NODEV, MS_NOEXEC, MS_NODEV | MS_NOEXEC):
        try:
            mount(None, target, None, ro | extra)
            return
        except SetupError as e:
            error = e
    raise error


def apply_root_plan(root, plan, limits):
    """Build the minimal root under `root` (a fresh tmpfs) from the caller's plan.

    Plan entries (all paths as the program will see them):
      ["dir", path]; ["symlink", path, target]; ["file", host path, path] and ["tree", host path, path]
      (read-only binds of a file / a directory tree); ["dev", host node, path] (a device node, bound
      without nodev); ["empty", path] (an empty read-only tmpfs over a directory, e.g. site-packages);
      ["tmpfs", path, mode] (a writable tmpfs of `disk_bytes`).
    """
    size = f"size={limits['disk']}"
    for entry in plan:
        kind = entry[0]
        target = _inside(root, entry[2] if kind in ("file", "tree", "dev") else entry[1])
        if kind == "dir":
            _make_dirs(target)
        elif kind == "symlink":
            _make_dirs(os.path.dirname(target))
            if not os.path.lexists(target):
                os.symlink(entry[2], target)
        elif kind in ("file", "tree"):
            _bind(entry[1], target, kind == "tree", recursive=kind == "tree")
        elif kind == "dev":
            _bind(entry[1], target, False, nodev=False)
        elif kind == "empty":
            if os.path.isdir(target):
                mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=755")
        elif kind == "tmpfs":
            _make_dirs(target)
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode={entry[2]}")
        else:
            raise SetupError(f"unknown root plan entry {kind!r}")


def switch_root(new_root, notes):
    """pivot_root into `new_root` and detach the old root; returns "pivot". Fallback (pivot_root
    refused, e.g. a root that is not a mount point): chroot into `new_root`; returns "chroot".

    pivot_root moves the root of every process of the mount namespace whose root was the old one:
    the program process, forked before this, follows. A chroot moves only the caller: the program
    process then chroots itself (`join_root`)."""
    lib = libc()
    old = os.path.join(new_root, ".old-root")
    os.mkdir(old, 0o700)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    rc = -1 if number is None else lib.syscall(number, _enc(new_root), _enc(old))
    if rc == 0:
        os.chdir("/")
        if lib.umount2(b"/.old-root", MNT_DETACH) != 0:
            raise _os_error("detaching the old root")
        os.rmdir("/.old-root")
        return "pivot"
    notes.append(str(_os_error("pivot_root")) + "; using chroot")
    os.rmdir(old)
    os.chdir(new_root)
    if lib.chroot(b".") != 0:
        raise _os_error("chroot")
    os.chdir("/")
    return "chroot"


def join_root(how):
    """The program process's side of `switch_root`, before anything else runs in it.

    Its working directory is still the run's host directory (the caller starts the bootstrap there),
    whose `root` subdirectory holds the new root: "pivot" only has to leave that directory (the root
    itself was switched by the kernel); "chroot" enters `root` by that relative name and chroots
    there. Either way no reference to the host's tree is left and no host path was needed."""
    if how == "chroot":
        os.chdir(ROOT_DIR_NAME)
        if libc().chroot(b".") != 0:
            raise _os_error("chroot")
    os.chdir("/")


def build_namespace_fs(cfg, notes):
    """The program's whole view of the file system: the minimal root of `cfg["root_plan"]`, a private
    tmpfs working dir, tmpfs /tmp and /dev/shm, and no /proc (its inodes are numbered by a counter the
    whole host shares: `rootfs`). The new root is mounted on `ROOT_DIR_NAME` under the current
    directory (the run's host directory). Returns how the root was switched (`switch_root`)."""
    limits = cfg["limits"]
    new_root = os.path.join(os.getcwd(), ROOT_DIR_NAME)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    apply_root_plan(new_root, cfg["root_plan"], limits)
    workdir = _inside(new_root, cfg["workdir"])
    _make_dirs(workdir, 0o700)
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits['disk']},mode=700")
    for path in cfg["hide_paths"]:
        target = _inside(new_root, path)
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=755")
        elif os.path.lexists(target):
            mount("/dev/null", target, None, MS_BIND)
    how = switch_root(new_root, notes)
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    return how


# ------------------------------------------------------------------------------------------- privileges
def set_rlimits(lim):
    import resource

    cpu = lim["cpu"]
    for res, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (lim["memory"], lim["memory"])),
        (resource.RLIMIT_FSIZE, (lim["file"], lim["file"])),
        (resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"])),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"])),
    ):
        try:
            resource.setrlimit(res, value)
        except (OSError, ValueError) as e:
            raise SetupError(f"setrlimit({res}): {e}") from None


def drop_privileges(uid):
    """A fresh unprivileged uid/gid with no supplementary groups (root modes)."""
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as e:
        raise SetupError(f"dropping privileges to uid {uid}: {e.strerror}") from None
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
        raise SetupError(f"dropping privileges to uid {uid} did not take")


def drop_capabilities(lib=None):
    """User-namespace mode: the program is uid 0 of its namespace; take every capability away from it
    (bounding set, ambient set, effective/permitted/inheritable), so that it is root in name only."""
    lib = lib or libc()
    cap = 0
    while lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    if cap == 0:
        raise _os_error("dropping the capability bounding set")
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = lib.CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = lib.CapData(0, 0, 0, 0, 0, 0)
    if lib.capset(lib.addressof(header), lib.addressof(data)) != 0:
        raise _os_error("capset")


def set_no_new_privs(lib=None):
    """PR_SET_NO_NEW_PRIVS: no setuid binary can raise privileges again; needed by the seccomp filter."""
    lib = lib or libc()
    if lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _os_error("prctl(PR_SET_NO_NEW_PRIVS)")


def load_seccomp(bpf, lib=None):
    """Install the seccomp filter `bpf` (raw `struct sock_filter` program, as libseccomp exports it)."""
    if not bpf or len(bpf) % 8:
        raise SetupError(f"seccomp filter: empty or malformed program ({len(bpf)} bytes)")
    lib = lib or libc()
    prog = lib.SockFprog(len(bpf) // 8, bpf)
    if lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, lib.addressof(prog), 0, 0) != 0:
        raise _os_error("loading the seccomp filter")


def exit_on_fault_signals(lib=None):
    """Give every fault signal (`FAULT_SIGNALS`) a handler: libc's `_exit`, so that a fault ends the
    program process with the signal's number as its exit status (a segfault: 11).

    Why: the kernel writes a line to the host's log when a fault signal kills a process that has no
    handler for it (`show_unhandled_signals`), with the faulting address, instruction pointer and stack
    pointer, all of which a program can choose: a run could write to the host's log. With a handler
    installed nothing is written; `_exit` needs no stack of its own and runs no code of the program.
    The seccomp filter keeps the handler in place: a new action for these signals is a no-op and execve
    (which would reset it) is refused. What still reaches the log is in docs/security.md."""
    lib = lib or libc()
    for signum in FAULT_SIGNALS:
        if lib.signal(signum, lib.exit_address) == lib.sig_err:
            raise _os_error(f"installing the fault handler of signal {signum}")


#: Guard mode: the audit events refused outright.
GUARD_BLOCKED_EVENTS = frozenset({
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.call_function", "ctypes.cdata", "ctypes.addressof", "ctypes.PyObj_FromPtr", "os.chroot",
    "os.setuid",
})
#: Guard mode: the modules whose import is refused.
GUARD_BLOCKED_IMPORTS = frozenset({"_posixsubprocess", "_ctypes", "ctypes", "_socket", "socket", "mmap"})
#: Guard mode: function attributes that may not be set or deleted (they would change what the hook and its
#: helpers, which a PermissionError's traceback and the gc expose, compute).
GUARD_FROZEN_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
#: Guard mode: the audit events that change the file system: event -> its (path argument, dir_fd argument
#: or None) index pairs. Every such path must lie in the working dir, both as named (the entry itself: a
#: rename or a removal acts on a symlink, not on its target) and with symlinks followed. `os.rename` covers
#: `os.replace`, `os.remove` `os.unlink`; the target of `os.symlink` is checked apart.
GUARD_PATH_EVENTS = {
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.truncate": ((0, None),), "os.chflags": ((0, None),),
    "os.setxattr": ((0, None),), "os.removexattr": ((0, None),), "shutil.rmtree": ((0, 1),),
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
}
# The same as the hook reads it: a dict could be emptied through the hook's frame, a tuple cannot.
_GUARD_PATH_EVENT_ITEMS = tuple(GUARD_PATH_EVENTS.items())
_GUARD_PATH_EVENT_NAMES = frozenset(GUARD_PATH_EVENTS)
_O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# The guard hook's helpers. The program runs later in the same interpreter and may replace whatever it can
# reach: a module's function (`os.path.realpath` used to be consulted: replaced, it let a program write
# anywhere), a builtin, a class attribute (`os.stat_result.st_mode`), the methods of a str subclass it passes
# as a path, a mutable set of the hook (it emptied the blocked events), a closure cell of the hook (the gc
# finds cells; `cell_contents` rebinds without an audit event). So the hook and its helpers have no closure
# and read no global or builtin name: everything they use is a default argument, bound before any program
# runs, and immutable (the `posix` functions, the methods of `str`, `bytes`, `int` and `tuple`, strings,
# tuples, frozensets); `GUARD_FROZEN_ATTRIBUTES` keeps their defaults and code as they are.


def _guard_text(value, is_instance=isinstance, str_type=str, bytes_type=bytes, exact_str=str.__str__,
                decode=bytes.decode):
    """An exact str of a str or bytes argument (a subclass is copied); None for anything else."""
    if is_instance(value, str_type):
        return exact_str(value)
    if is_instance(value, bytes_type):
        return decode(value, "utf-8", "surrogateescape")
    return None


def _guard_resolve(path, base, follow_last=True, lstat=os.lstat, readlink=os.readlink, getcwd=os.getcwd,
                   item=tuple.__getitem__, os_error=OSError):
    """The absolute path `path` names (relative to `base`, else the working dir), resolved as the kernel
    will: `.`, `..` and symlinks component by component (the last one only with `follow_last`; a missing
    one is kept as named); None past 40 symlinks or for one that cannot be read."""
    if not path.startswith("/"):
        path = (base if base is not None else getcwd()) + "/" + path
    todo, resolved, links = path.split("/")[::-1], "", 0
    while todo:
        name = todo.pop()
        if name == "" or name == ".":
            continue
        if name == "..":
            resolved = resolved[: resolved.rfind("/")] if resolved else ""
            continue
        candidate = resolved + "/" + name
        try:
            is_link = item(lstat(candidate), 0) & 0o170000 == 0o120000
        except os_error:
            is_link = False
        if not is_link or (not follow_last and not [n for n in todo if n != "" and n != "."]):
            resolved = candidate
            continue
        links += 1
        try:
            target = readlink(candidate)
        except os_error:
            return None
        if links > 40:
            return None
        if target.startswith("/"):
            resolved = ""
        todo.extend(target.split("/")[::-1])
    return resolved or "/"


def _guard_inside(path, root):
    return path is not None and (path == root or path.startswith(root + "/") or path == "/dev/null")


def _guard_fd_path(fd, readlink=os.readlink, index=int.__index__, errors=(OSError, ValueError)):
    """What an open file descriptor names (the host's /proc: guard mode has no namespaces), or None."""
    try:
        return readlink(f"/proc/self/fd/{index(fd)}")
    except errors:
        return None


def _guard_is_directory(path, stat=os.stat, item=tuple.__getitem__, os_error=OSError):
    try:
        return item(stat(path), 0) & 0o170000 == 0o040000
    except os_error:
        return False


def _guard_allowed(value, base, root, follow_last=True, is_instance=isinstance, int_type=int,
                   fd_path=_guard_fd_path, text=_guard_text, resolve=_guard_resolve, inside=_guard_inside):
    """Whether a path argument (a path, or a file descriptor) names a place in the working dir `root`."""
    if is_instance(value, int_type):
        return inside(fd_path(value), root)
    path = text(value)
    return path is not None and inside(resolve(path, base, follow_last), root)


def _guard_path_event(event, pairs, args, root, is_instance=isinstance, int_type=int, index=int.__index__,
                      length=len, error=PermissionError, fd_path=_guard_fd_path, text=_guard_text,
                      resolve=_guard_resolve, inside=_guard_inside, allowed=_guard_allowed):
    """Raise PermissionError unless every path of a `GUARD_PATH_EVENTS` event lies in the working dir."""
    for path_index, fd_index in pairs:
        if path_index >= length(args):
            continue
        base = None
        if fd_index is not None and fd_index < length(args) and is_instance(args[fd_index], int_type):
            if index(args[fd_index]) >= 0:
                base = fd_path(args[fd_index])
                if base is None:
                    raise error("sandbox: " + event + " relative to an unknown directory is not allowed")
        value = args[path_index]
        if not (allowed(value, base, root) and allowed(value, base, root, follow_last=False)):
            raise error("sandbox: " + event + " outside the working directory is not allowed")
        if event == "os.symlink":  # the link's target is read relative to the link's directory
            link = resolve(text(value), base, follow_last=False)
            target = text(args[0])
            if target is None or not inside(resolve(target, link[: link.rfind("/")] or "/"), root):
                raise error("sandbox: a symlink to outside the working directory is not allowed")


def _guard_open(args, root, is_instance=isinstance, int_type=int, index=int.__index__, length=len,
                error=PermissionError, text=_guard_text, resolve=_guard_resolve, inside=_guard_inside,
                is_directory=_guard_is_directory, o_write=_O_WRITE):
    """Raise PermissionError for an "open" event that writes outside the working dir, opens a directory
    outside it (its descriptor would let `os.open(name, dir_fd=...)` write there: that event does not carry
    its dir_fd) or reads another process's environ/mem/cmdline."""
    if not args or is_instance(args[0], int_type):
        return
    path = text(args[0])
    real = resolve(path, None) if path is not None else None
    if real is not None and real.startswith("/proc/") and real.endswith(("/environ", "/mem", "/cmdline")):
        raise error("sandbox: reading " + real + " is not allowed")
    if inside(real, root):
        return
    mode = text(args[1]) if length(args) > 1 and args[1] is not None else ""
    flags = index(args[2]) if length(args) > 2 and is_instance(args[2], int_type) else 0
    if mode is None or "w" in mode or "a" in mode or "x" in mode or "+" in mode or flags & o_write:
        raise error("sandbox: writing outside the working directory is not allowed")
    if real is not None and is_directory(real):
        raise error("sandbox: opening a directory outside the working directory is not allowed")


def guard_hook(workdir):
    """The audit hook of guard mode for a program whose working dir is `workdir` (`install_guard`).

    It refuses the events of `GUARD_BLOCKED_EVENTS`, the imports of `GUARD_BLOCKED_IMPORTS`, setting the
    attributes of `GUARD_FROZEN_ATTRIBUTES`, reading another process's environ/mem/cmdline, and any change
    of the file system outside `workdir`: an open for writing (`_guard_open`) and each event of
    `GUARD_PATH_EVENTS`, at both ends of a rename or link (`_guard_path_event`). Its variables can be read
    (a PermissionError's traceback holds its frame, the gc finds the function) but none can be changed (see
    the helpers above).
    """
    root = _guard_resolve(str.__str__(workdir), None)

    # No closure (see the helpers above): the run's values are default arguments.
    def hook(event, args, root=root, blocked=GUARD_BLOCKED_EVENTS, imports=GUARD_BLOCKED_IMPORTS,
             frozen=GUARD_FROZEN_ATTRIBUTES, path_events=_GUARD_PATH_EVENT_ITEMS,
             path_event_names=_GUARD_PATH_EVENT_NAMES, check_open=_guard_open,
             check_path_event=_guard_path_event, error=PermissionError, text=_guard_text):
        if event in blocked:
            raise error("sandbox: " + event + " is not allowed")
        if event == "import":
            name = text(args[0]) if args else None
            if name in imports:
                raise error("sandbox: import of " + name + " is not allowed")
        elif event == "open":
            check_open(args, root)
        elif event in path_event_names:
            for name, pairs in path_events:
                if name == event:
                    check_path_event(event, pairs, args, root)
        elif event == "object.__setattr__" or event == "object.__delattr__":
            if text(args[1]) in frozen:
                raise error("sandbox: setting " + text(args[1]) + " is not allowed")

    return hook


def install_guard(workdir):
    """Guard mode only: the audit hook of `guard_hook`. Not a hard boundary (native code, and the calls no
    audit event reports: `os.mkfifo`, `os.mknod`), can bypass it); see docs/security.md."""
    sys.addaudithook(guard_hook(workdir))


def harden(cfg):
    """Every layer of the program process before the model's code runs, in order; raises SetupError.
    `cfg`: the program's values (`program_values`)."""
    set_rlimits(cfg["limits"])
    if cfg["uid"] is not None:
        drop_privileges(cfg["uid"])
    elif cfg["namespaces"]:
        libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # (the supervisor is not: see `main`)
        drop_capabilities()
    set_no_new_privs()
    exit_on_fault_signals()
    if cfg["seccomp"]:
        load_seccomp(bytes.fromhex(cfg["seccomp"]))
    if cfg["guard"]:
        install_guard(cfg["workdir"])


# ------------------------------------------------------------------------------------------- the program
def run_program(cfg, source, path, status):
    """The program process: join the run's root, harden, then run the model's code. Never returns.

    `cfg` holds only what this process needs (`program_values`): never the supervisor's configuration."""
    try:
        if cfg.get("root"):
            join_root(cfg["root"][0])
            here = os.stat("/")
            if [here.st_dev, here.st_ino] != cfg["root"][1:]:
                raise SetupError("the program process is not in the run's root file system")
        # Python ignores SIGXFSZ; restore the default so that RLIMIT_FSIZE ends the run ("output limit").
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        os.chdir(cfg["workdir"])
        harden(cfg)
    except SetupError as e:
        status.report({"setup_error": str(e)})
        _exit(EXIT_SETUP)
    except Exception as e:  # any other failure before the program runs is a sandbox failure too
        status.report({"setup_error": f"{type(e).__name__}: {e}"})
        _exit(EXIT_SETUP)
    status.close()

    fn_name = cfg["fn_name"]
    if fn_name is not None:
        import json
    saved_stdout = None
    if fn_name is not None:
        # The program's own prints go to stderr; fd `saved_stdout` carries only the JSON result.
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
    mod = type(sys)("__main__" if fn_name is None else "solution")
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
                raise NameError(f"the program defines no function {fn_name!r}")
            value = fn(*payload.get("args", []), **payload.get("kwargs", {}))
            try:
                text = json.dumps(value, allow_nan=True)
            except (TypeError, ValueError, RecursionError) as e:
                sys.stderr.write(f"result is not JSON-serialisable: {e}\n")
                code = EXIT_BAD_RESULT
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
        code = EXIT_MEMORY
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
        code = code or EXIT_MEMORY
    except BaseException:
        code = code or 1
    _exit(code)


# ------------------------------------------------------------------------------------------- supervisor
def kill_uid(uid):
    """Guard mode: kill every process of the run's uid (a helper drops to it and kills -1)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        _exit(0)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def supervise(cfg, pid, status, wakeup_r, deadline):
    """Reap children until the program process exits; returns (wait status, rusage, why) where why is
    None, "caller gone" or "backstop deadline"."""
    import time

    poller = select.poll()
    poller.register(wakeup_r, select.POLLIN)
    if status.fd >= 0:
        poller.register(status.fd, select.POLLERR)
    while True:
        while True:  # reap everything that has exited (orphans are reparented to us)
            try:
                got, wstatus, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return None, None, "lost the program process"
            if got == 0:
                break
            if got == pid:
                return wstatus, usage, None
        left = deadline - time.monotonic()
        if left <= 0:
            return None, None, "backstop deadline"
        for fd, event in poller.poll(left * 1000):
            if fd == wakeup_r:
                try:
                    os.read(wakeup_r, 4096)
                except OSError:
                    pass
            elif event & (select.POLLERR | select.POLLHUP):
                return None, None, "caller gone"


def become_init(status, config_fd):
    """Namespace modes: fork the supervisor, PID 1 of the PID namespace `unshare --pid` prepared.

    The process `unshare` started stays outside the PID namespace: it waits for the supervisor and
    leaves. It exists so that the caller can move it into the run's cgroups while the interpreter
    starts (a cgroup migration stalls every fork on the machine for an RCU grace period; no fork of
    the run happens before the move is confirmed). If it is killed, so is the supervisor.
    """
    pid = os.fork()
    if pid:
        status.close()
        _close(config_fd)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        _exit(0)
    # (getppid() is 0 here: the parent is outside the PID namespace. Should the waiter die before this
    # line, the supervisor still ends: the caller kills the process group, and the supervisor exits
    # when the status pipe breaks or its backstop deadline passes.)
    libc().prctl(PR_SET_PDEATHSIG, SIGKILL_NUMBER, 0, 0, 0)


def _read_all(fd):
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def program_process(channel, config_fd, status):
    """The program process. The supervisor forks it *before* it reads the run's configuration, so
    nothing of that configuration (hidden paths, host directories, the root plan) was ever in this
    process's memory: clearing variables would not do, their bytes would stay in freed memory. It
    closes its copy of the configuration's memfd, then waits for `program_values` on `channel`."""
    try:
        _close(config_fd)
    except OSError:
        pass
    import marshal

    data = _read_all(channel)
    _close(channel)
    if not data:  # the supervisor failed before handing over (it reports why)
        _exit(EXIT_SETUP)
    values = marshal.loads(data)
    run_program(values, values.pop("source"), values.pop("path"), status)


def program_values(cfg, root, path):
    """What the program process receives: its limits, uid, filter, working dir and program, and
    nothing else (`root`: how to join the run's root and the identity of that root, or None)."""
    keys = ("workdir", "uid", "namespaces", "guard", "seccomp", "limits", "fn_name", "source")
    values = {key: cfg[key] for key in keys}
    values.update(root=root, path=path)
    return values


def main(argv):
    """`launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE`, MODE "namespaces" or "guard"."""
    run_id, config_fd, go_fd, status_fd = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    namespaces = argv[5] == "namespaces"
    status = Status(status_fd)
    try:
        libc()  # load the libc functions once: the forks below share them
        wait_for_go(go_fd)
        notes = []
        if namespaces:
            become_init(status, config_fd)
            # The cgroup namespace `unshare` made is rooted where the caller is, so the run's cgroup
            # (named after the run id and the caller's pid) showed in /proc/self/cgroup. Now that the
            # caller has moved this process into it, root a fresh one here: it shows as "/". (The
            # program has no /proc any more; this stays for any other view of the cgroup path.)
            if libc().unshare(CLONE_NEWCGROUP) != 0:
                notes.append(str(_os_error("a cgroup namespace rooted at the run's cgroup")))
        import gc

        gc.freeze()  # the program's collections never walk (and so never copy-on-write) these objects
        # Not dumpable: a program with the supervisor's uid (user-namespace mode) cannot ptrace it or
        # read its memory (ptrace is refused by the filter too).
        libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        channel_r, channel_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _close(channel_w)
                program_process(channel_r, config_fd, status)
            finally:
                _exit(1)
        _close(channel_r)
        cfg = read_config(config_fd)
        root = None
        if namespaces:
            how = build_namespace_fs(cfg, notes)
            here = os.stat("/")
            root = [how, here.st_dev, here.st_ino]
        os.chdir(cfg["workdir"])
        path = os.path.join(cfg["workdir"], "solution.py")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(cfg["source"])
        if cfg["uid"] is not None:
            os.chown(cfg["workdir"], cfg["uid"], cfg["uid"])
            os.chown(path, cfg["uid"], cfg["uid"])
        import marshal
        import time

        deadline = time.monotonic() + cfg["backstop_seconds"]
        wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wakeup_w)
        data = marshal.dumps(program_values(cfg, root, path))
        while data:
            data = data[_write(channel_w, data):]
        _close(channel_w)
    except Exception as e:
        status.report({"setup_error": f"{type(e).__name__}: {e}", "run_id": run_id})
        _exit(0)  # in the namespace modes this kills the program process; else it sees its channel close

    wstatus, usage, why = supervise(cfg, pid, status, wakeup_r, deadline)
    out = {"notes": notes}
    if why is not None:
        out["error"] = why
        if cfg["guard"] and cfg["uid"] is not None:
            kill_uid(cfg["uid"])
    else:
        out["cpu"] = usage.ru_utime + usage.ru_stime
        out["maxrss_kb"] = usage.ru_maxrss
        if os.WIFSIGNALED(wstatus):
            out["signal"] = os.WTERMSIG(wstatus)
        else:
            out["exit"] = os.WEXITSTATUS(wstatus)
    if cfg["probe"]:
        out["probe_uid"] = cfg["uid"]
    status.report(out)
    _exit(0)


if __name__ == "__main__":
    main(sys.argv)
