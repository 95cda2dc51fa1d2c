# Reads files outside the working directory: a root-only secret the test creates, /etc/shadow,
# the root home. Expected: the secret marker is never printed.
import os
import sys

for path in ["__SECRET_PATH__", "/etc/shadow", "/root/.bash_history"]:
    try:
        with open(path) as f:
            print(f"READ {path}: {f.read()[:200]}")
    except OSError as e:
        sys.stderr.write(f"ATTEMPT read {path}: {type(e).__name__}\n")
try:
    print("LIST {}".format(os.listdir(os.path.dirname("__SECRET_PATH__"))))
except OSError as e:
    sys.stderr.write(f"ATTEMPT list secret dir: {type(e).__name__}\n")
