# Creates a new user namespace (the usual first step towards kernel attack surface that needs
# CAP_SYS_ADMIN): unshare(CLONE_NEWUSER), clone(CLONE_NEWUSER) and clone3, then other namespaces.
# Expected: "wrong answer"; every call fails (the seccomp filter).
import ctypes
import os
import sys

L = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x00020000, 0x40000000, 17
for what, call in [
    ("unshare(CLONE_NEWUSER)", lambda: L.unshare(CLONE_NEWUSER)),
    ("unshare(CLONE_NEWNS)", lambda: L.unshare(CLONE_NEWNS)),
    ("unshare(CLONE_NEWNET)", lambda: L.unshare(CLONE_NEWNET)),
    ("clone(CLONE_NEWUSER)", lambda: L.syscall(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)),
]:
    rc = call()
    if rc == 0:
        print(f"{what} SUCCEEDED in pid {os.getpid()}")
        sys.stdout.flush()
        if "clone" in what:
            os._exit(0)  # the child of a successful clone
    elif rc > 0:
        os.waitpid(rc, 0)
        print(f"{what} SUCCEEDED (child {rc})")
    else:
        sys.stderr.write(f"ATTEMPT {what}: errno {ctypes.get_errno()}\n")
