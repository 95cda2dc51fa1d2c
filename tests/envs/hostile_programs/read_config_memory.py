# Looks for the sandbox's own configuration in the program's memory: the frames that called the
# program and their locals, the objects the garbage collector tracks, and every readable anonymous or
# writable byte of the process (/proc/self/maps + /proc/self/mem; where there is no /proc, every readable
# page of the memory around the objects, the malloc heap and the stack). That configuration held the hidden
# data set's host path, the run's host directory (named after the run id and the caller's pid) and the
# root plan; the process that runs the program must never have received it (clearing a variable would
# leave its bytes in freed memory).
# Expected: nothing is found; "wrong answer".
import ctypes
import gc
import os
import sys

# The needles are split in halves kept in separate objects (and the data set path arrives hex-encoded),
# so this program never holds a needle whole itself: a hit is a copy someone else put there.
hexed = "__DATASET_PATH_HEX__"
middle = len(hexed) // 4 * 2
NEEDLES = {
    "the hidden data set's host path": (bytes.fromhex(hexed[:middle]), bytes.fromhex(hexed[middle:])),
    "the run's host directory": (os.path.basename(os.getcwd()).encode(), b".__PARENT_PID__-"),
}
KEYS = ("hide_paths", "root_plan", "root_mount")
found = []


def search(data, where):
    for what, (first, second) in NEEDLES.items():
        if isinstance(data, str):
            first, second = first.decode(errors="replace"), second.decode(errors="replace")
        i = data.find(first)
        while i >= 0:
            if data.startswith(second, i + len(first)):
                found.append(f"{what} in {where}")
                break
            i = data.find(first, i + 1)


def look_into(obj, where, depth=3):
    if isinstance(obj, (str, bytes, bytearray)):
        search(obj, where)
    elif depth and isinstance(obj, dict):
        if any(key in obj for key in KEYS):
            found.append(f"a configuration dict ({sorted(k for k in obj if isinstance(k, str))[:8]}) in {where}")
        for value in list(obj.values()):
            look_into(value, where, depth - 1)
    elif depth and isinstance(obj, (list, tuple)):
        for value in obj:
            look_into(value, where, depth - 1)


frame, names = sys._getframe(), []
while frame is not None:
    names.append(frame.f_code.co_name)
    look_into(dict(frame.f_locals), f"the locals of {frame.f_code.co_name}()")
    frame = frame.f_back
sys.stderr.write(f"ATTEMPT frames: {' <- '.join(names)}\n")
for obj in gc.get_objects():
    look_into(obj, "a gc-tracked object")
for value in (sys.argv, getattr(sys, "orig_argv", []), sys.path, list(os.environ.values())):
    look_into(value, "sys/os state")

PAGE = 4096
libc = ctypes.CDLL(None, use_errno=True)
libc.write.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
libc.write.restype = ctypes.c_ssize_t


def scan_without_proc():
    """Without /proc: the 1 MiB regions that hold a gc-tracked object, a small and a large malloc'd buffer,
    and 8 MiB under the top of the stack (where `environ` points), page by page. A page is read only
    after write() copied it to a file (EFAULT: not readable), so the scan never faults."""
    small, large = ctypes.create_string_buffer(64), ctypes.create_string_buffer(1 << 18)
    anchors = {id(obj) for obj in gc.get_objects()} | {ctypes.addressof(small), ctypes.addressof(large)}
    megabytes = {address >> 20 for address in anchors}
    stack = ctypes.c_void_p.in_dll(libc, "environ").value
    megabytes |= {(stack >> 20) - k for k in range(8)}
    probe = os.open("probe", os.O_RDWR | os.O_CREAT, 0o600)
    scanned, ranges = 0, []
    for mb in sorted(megabytes):  # merged into contiguous ranges, so no needle is cut at 1 MiB
        if ranges and ranges[-1][1] == mb << 20:
            ranges[-1][1] = (mb + 1) << 20
        else:
            ranges.append([mb << 20, (mb + 1) << 20])
    for start, end in ranges:
        run = []
        for page in range(start, end + PAGE, PAGE):
            if page < end and libc.write(probe, page, PAGE) == PAGE:
                os.lseek(probe, 0, os.SEEK_SET)
                run.append(page)
            elif run:
                search(ctypes.string_at(run[0], len(run) * PAGE), f"memory at {run[0]:#x}")
                scanned += len(run) * PAGE
                run = []
    os.close(probe)
    return scanned


libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: let this process read its own mem
scanned = 0
try:
    mem = os.open("/proc/self/mem", os.O_RDONLY)
    with open("/proc/self/maps") as f:
        regions = [line.split() for line in f]
    for fields in regions:
        start, end = (int(x, 16) for x in fields[0].split("-"))
        perms, path = fields[1], fields[5] if len(fields) > 5 else ""
        if "r" not in perms or path in ("[vvar]", "[vvar_vclock]", "[vsyscall]", "[vdso]"):
            continue
        if path.startswith("/") and "w" not in perms:
            continue  # a read-only file mapping holds the file's bytes (the interpreter, libraries)
        offset = start
        while offset < end:
            size = min(4 << 20, end - offset)
            try:
                chunk = os.pread(mem, size + 256, offset) if offset + size < end else os.pread(mem, size, offset)
            except OSError:
                break
            search(chunk, f"memory {fields[0]} {perms} {path or '[anon]'}")
            scanned += len(chunk)
            offset += size
    sys.stderr.write(f"ATTEMPT /proc/self/mem: {scanned >> 10} KiB scanned\n")
except OSError as e:
    sys.stderr.write(f"ATTEMPT /proc/self/mem: {type(e).__name__}\n")
    sys.stderr.write(f"ATTEMPT memory without /proc: {scan_without_proc() >> 10} KiB scanned\n")
if found:
    print("SUCCEEDED: found " + "; ".join(sorted(set(found))))
else:
    print("not found")
