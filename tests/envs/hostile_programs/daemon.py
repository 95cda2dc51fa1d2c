# Spawns a daemon (double fork + setsid) meant to outlive the run, then exits at once.
# Expected: no process of the run survives it (PID namespace teardown / per-uid kill).
import os
import sys
import time

try:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:  # the daemon: would linger forever
                time.sleep(0.05)
        os._exit(0)
    sys.stderr.write("ATTEMPT daemon spawned\n")
except OSError as e:
    sys.stderr.write(f"ATTEMPT daemon: {type(e).__name__}\n")
print("bye")
