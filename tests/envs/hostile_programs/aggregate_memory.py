# Uses more memory than the limit with several processes, each under its own RLIMIT_AS (the test
# allows 256 MiB per process: five children hold 180 MiB each, 900 MiB in all). Expected: "memory
# limit" (a cgroup per run, or the process-tree watch, bounds the run as a whole).
import os
import sys
import time

sys.stderr.write("ATTEMPT 5 processes x 180 MiB\n")
for _ in range(5):
    if os.fork() == 0:
        x = b"\1" * (180 << 20)
        time.sleep(2)
        os._exit(0)
for _ in range(5):
    os.wait()
print("all allocated")
