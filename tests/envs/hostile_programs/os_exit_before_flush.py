# Prints the right answer but leaves with os._exit(0) before stdout is flushed (a pipe is block
# buffered). Expected: "wrong answer" (nothing reached stdout).
import os

print("__EXPECTED__")
os._exit(0)
