# Kernel entry points a default-allow seccomp filter missed: modify_ldt (write an LDT entry; Docker's
# default profile refuses it), open_tree_attr (syscall 467, newer than the filter's list), memfd_secret,
# landlock, listmount, and a syscall number past the newest one the policy was reviewed against.
# Expected: each returns -1 (EPERM, or ENOSYS where the kernel or the policy has no such call);
# "wrong answer".
import ctypes
import errno
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long


def call(what, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(*args)
    if rc >= 0:
        print(f"SUCCEEDED {what} -> {rc}")
    else:
        sys.stderr.write(f"ATTEMPT {what}: {errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}\n")


if os.uname().machine == "x86_64":
    descriptor = (ctypes.c_ubyte * 16)()  # struct user_desc, entry 0, empty: "clear entry 0"
    call("modify_ldt write", L(154), L(1), descriptor, L(16))
call("open_tree_attr", L(467), L(-100), ctypes.c_char_p(b"/"), L(0), None, L(0))
call("memfd_secret", L(447), L(0))
call("landlock_create_ruleset", L(444), None, L(0), L(1))  # LANDLOCK_CREATE_RULESET_VERSION
# struct mnt_id_req {u32 size; u32 spare; u64 mnt_id; u64 param}: size 24 (little endian), LSMT_ROOT
request = (ctypes.c_uint64 * 4)(24, 0xFFFFFFFFFFFFFFFF, 0, 0)
ids = (ctypes.c_uint64 * 64)()
call("listmount", L(458), request, ids, L(64), L(0))
call("syscall 470 (not reviewed)", L(470), L(0), L(0), L(0))
print("done")
