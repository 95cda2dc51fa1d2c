# Classic fork bomb: every process keeps forking. Expected: contained by RLIMIT_NPROC (forks fail with
# EAGAIN) and ended by the wall deadline / PID namespace teardown; no process survives the run.
import os
import sys

sys.stderr.write("ATTEMPT fork bomb\n")
while True:
    try:
        os.fork()
    except OSError:
        pass
