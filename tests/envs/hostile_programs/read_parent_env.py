# Looks for the env process's environment variables: its own environment, /proc/<ppid>/environ,
# /proc/1/environ, the env process's pid (given by the test) and every /proc/*/environ.
# Expected: the marker variable set in the test process is never printed.
import os
import sys

found = []
found.append(f"own environ: {dict(os.environ)!r}")
pids = {str(os.getppid()), "1", "__PARENT_PID__"}
try:
    pids |= {p for p in os.listdir("/proc") if p.isdigit()}
except OSError as e:
    found.append(f"listdir /proc: {e}")
for pid in sorted(pids):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            found.append(f"pid {pid} environ: {f.read()!r}")
    except OSError as e:
        sys.stderr.write(f"ATTEMPT /proc/{pid}/environ: {type(e).__name__}\n")
print("\n".join(found))
