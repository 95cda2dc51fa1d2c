# Tries to become root again: setuid(0), sudo/su, and reports its uid.
# Expected: no success (as root the sandbox drops to a fresh uid with no_new_privs).
import os
import subprocess
import sys

sys.stderr.write(f"ATTEMPT uid={os.getuid()} gid={os.getgid()}\n")
try:
    os.setuid(0)
    sys.stderr.write("ATTEMPT setuid(0): SUCCEEDED\n")
except OSError as e:
    sys.stderr.write(f"ATTEMPT setuid(0): {type(e).__name__}\n")
for cmd in (["sudo", "-n", "id", "-u"], ["su", "-c", "id -u"]):
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=0.5, stdin=subprocess.DEVNULL)
        sys.stderr.write(f"ATTEMPT {cmd[0]}: rc={r.returncode} out={r.stdout[:40]!r}\n")
    except Exception as e:
        sys.stderr.write(f"ATTEMPT {cmd[0]}: {type(e).__name__}\n")
print(os.getuid())
