# Tries to kill its parent, the namespace init, the env process (pid given by the test), every
# process it may signal, and finally its own process group. Expected: the env process survives,
# the run ends with a verdict, and the next run works.
import os
import signal
import sys

for what, call in [
    ("kill(getppid())", lambda: os.kill(os.getppid(), signal.SIGKILL)),
    ("kill(1)", lambda: os.kill(1, signal.SIGKILL)),
    ("kill(env pid)", lambda: os.kill(int("__PARENT_PID__"), signal.SIGKILL)),
    ("kill(-1)", lambda: os.kill(-1, signal.SIGKILL)),
]:
    try:
        call()
        sys.stderr.write(f"ATTEMPT {what}: sent\n")
    except OSError as e:
        sys.stderr.write(f"ATTEMPT {what}: {type(e).__name__}\n")
sys.stderr.flush()
os.killpg(os.getpgrp(), signal.SIGKILL)
