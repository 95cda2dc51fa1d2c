# Uses more CPU time than the limit with several processes, each under its own RLIMIT_CPU (the test
# allows 1 s per process: four children spin 0.9 s each). Expected: "time limit" (the run's summed
# CPU time is bounded: cgroup CPU usage, or the process-tree watch).
import os
import sys
import time

sys.stderr.write("ATTEMPT 4 processes x 0.9 CPU-s\n")
for _ in range(4):
    if os.fork() == 0:
        start = time.process_time()
        while time.process_time() - start < 0.9:
            pass
        os._exit(0)
for _ in range(4):
    os.wait()
print("all spun")
