# Tries to allocate far more memory than allowed. Expected: "memory limit" (RLIMIT_AS -> MemoryError).
import sys

sys.stderr.write("ATTEMPT allocate 8 GiB\n")
blocks = []
blocks.append(bytearray(8 * 1024**3))
while True:
    blocks.append(bytearray(64 * 1024**2))
