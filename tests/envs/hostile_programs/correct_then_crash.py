# Prints (and flushes) the right answer, then exits with status 3. Expected: "runtime error" (a
# test passes only with exit status 0 *and* the right output).
import sys

print("__EXPECTED__", flush=True)
sys.exit(3)
