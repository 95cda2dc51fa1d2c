# Uses the page cache the run shares with the host and with later runs: evicts a standard-library
# file's pages (posix_fadvise DONTNEED: a sender), probes which pages are cached (preadv2 with
# RWF_NOWAIT, mincore, cachestat: a receiver), fills the cache (readahead, fadvise WILLNEED), submits
# Linux AIO (whose reads can carry RWF_NOWAIT too), makes the host write back every dirty page (sync,
# syncfs) and watches the standard library with inotify (what the host and concurrent runs open).
# Expected: every call is refused with EPERM, plain reads still work; "wrong answer".
import ctypes
import errno
import mmap
import os
import sys

NUMBERS = {"x86_64": {"sync": 162, "io_setup": 206, "cachestat": 451},
           "aarch64": {"sync": 81, "io_setup": 0, "cachestat": 451}}.get(os.uname().machine, {})
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def report(what, ok, err=0):
    if ok:
        print(f"SUCCEEDED {what}")
    else:
        sys.stderr.write(f"ATTEMPT {what}: {errno.errorcode.get(err, err)}\n")


def call(what, fn, *args):
    ctypes.set_errno(0)
    rc = fn(*args)
    report(what, rc >= 0, ctypes.get_errno())


fd = os.open(os.__file__, os.O_RDONLY)  # a standard-library file: its pages are the host's too
size = os.fstat(fd).st_size
for advice, name in ((os.POSIX_FADV_DONTNEED, "DONTNEED"), (os.POSIX_FADV_WILLNEED, "WILLNEED")):
    try:
        os.posix_fadvise(fd, 0, 0, advice)
        report(f"posix_fadvise {name}", True)
    except OSError as e:
        report(f"posix_fadvise {name}", False, e.errno)
try:
    os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
    report("preadv2 RWF_NOWAIT", True)
except OSError as e:  # EAGAIN is an answer too: "this page is not cached"
    report("preadv2 RWF_NOWAIT", e.errno == errno.EAGAIN, e.errno)
vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
area = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
call("mincore", libc.mincore, area, size, vec)
libc.readahead.restype = ctypes.c_ssize_t
libc.readahead.argtypes = (ctypes.c_int, ctypes.c_long, ctypes.c_size_t)
call("readahead", libc.readahead, fd, 0, 4096)
call("syncfs", libc.syncfs, fd)
if NUMBERS:
    call("sync", libc.syscall, ctypes.c_long(NUMBERS["sync"]))
    context = ctypes.c_ulong(0)
    call("io_setup", libc.syscall, ctypes.c_long(NUMBERS["io_setup"]), ctypes.c_long(1), ctypes.byref(context))
    stat_range, stat = (ctypes.c_uint64 * 2)(0, 0), (ctypes.c_uint64 * 5)()
    call("cachestat", libc.syscall, ctypes.c_long(NUMBERS["cachestat"]), ctypes.c_long(fd), stat_range, stat,
         ctypes.c_long(0))
call("inotify_init1", libc.inotify_init1, 0)  # would see what the host and concurrent runs open
data = os.pread(fd, 64, 0)
print("plain reads work" if data else "plain reads fail")
