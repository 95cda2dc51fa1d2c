# Hunts for the expected outputs: the data set file, its working dir, /proc/self|1|ppid cmdline and
# environ, the interpreter's memory (gc objects, the __main__ module), the process's own stdin.
# If it finds a string shaped like the expected output it prints it (which would pass the test).
# Expected: nothing is found, "wrong answer".
import gc
import os
import re
import sys

pattern = re.compile(r"zz-expected-[0-9a-f]{16}")
texts = []
def grab(path):
    try:
        with open(path, "rb") as f:
            texts.append(f.read(1 << 20).decode("utf-8", "replace"))
    except OSError as e:
        sys.stderr.write(f"ATTEMPT read {path}: {type(e).__name__}\n")
grab("__DATASET_PATH__")
for root, _dirs, files in os.walk("."):
    for name in files:
        grab(os.path.join(root, name))
for pid in ("self", "1", str(os.getppid())):
    grab(f"/proc/{pid}/cmdline")
    grab(f"/proc/{pid}/environ")
texts.append(sys.stdin.read())
for obj in gc.get_objects():
    if isinstance(obj, dict):
        texts.extend(v for v in obj.values() if isinstance(v, str))
texts.extend(str(v) for v in vars(sys.modules["__main__"]).values())
for text in texts:
    m = pattern.search(text)
    if m:
        print(m.group(0))
        break
else:
    print("not found")
