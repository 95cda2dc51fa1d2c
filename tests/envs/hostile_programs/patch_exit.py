# Sabotages the harness: replaces os._exit / sys.exit with no-ops, prints the right answer, then
# raises. Expected: "runtime error" (the harness keeps its own reference to os._exit).
import os
import sys

os._exit = lambda code: None
sys.exit = lambda code=0: None
print("__EXPECTED__", flush=True)
raise RuntimeError("crash after patching exit")
