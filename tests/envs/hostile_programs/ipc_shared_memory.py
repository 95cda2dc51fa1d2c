# SysV IPC: allocates six 32 MiB shared-memory segments (outside RLIMIT_AS once detached) and leaves
# them behind, leaves a message for the next run under a fixed key, and reads what a previous run
# may have left there. Expected: "wrong answer"; after the run no segment of it exists on the host
# (private IPC namespace) and no run ever reads another run's message.
import ctypes
import sys

L = ctypes.CDLL(None, use_errno=True)
L.shmat.restype = ctypes.c_void_p
L.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
created = 0
for _ in range(6):
    s = L.shmget(0, 32 << 20, 0o1666)
    if s < 0:
        break
    p = L.shmat(s, None, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(p, 65, 32 << 20)
    L.shmdt(ctypes.c_void_p(p))
    created += 1
sys.stderr.write(f"ATTEMPT left {created} x 32 MiB segments\n")
KEY = 0x52474E32  # fixed: what another run would use to pass data along
s = L.shmget(KEY, 4096, 0)
if s >= 0:
    p = L.shmat(s, None, 0)
    print("READ FROM A PREVIOUS RUN:", ctypes.string_at(p, 40))
else:
    s = L.shmget(KEY, 4096, 0o1666)
    p = L.shmat(s, None, 0)
    ctypes.memmove(p, b"__MARKER__", len(b"__MARKER__"))
    sys.stderr.write("ATTEMPT left a message under a fixed key\n")
print("done")
