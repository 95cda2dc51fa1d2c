# Reads the host file system: the project checkout (a source file and .git/config), a world-readable
# file the test leaves outside, /etc, home directories, the supervisor's command line (which used to
# hold the sandbox configuration: host paths, hidden paths, the uid) and mount table.
# Expected: "wrong answer"; nothing of it is found (the program's root holds only the interpreter).
import os
import sys

for path in ["__PROJECT_FILE__", "__PROJECT_GIT_CONFIG__", "__WORLD_READABLE__", "/etc/passwd", "/etc/hostname",
             "/proc/1/cmdline", "/proc/1/environ", "/proc/self/mountinfo", "/proc/self/cgroup"]:
    try:
        with open(path, "rb") as f:
            print(f"READ {path}: {f.read(4000)!r}")
    except OSError as e:
        sys.stderr.write(f"ATTEMPT read {path}: {type(e).__name__}\n")
for d in ["/", "/home", "/root", os.path.dirname("__PROJECT_FILE__"), os.path.dirname("__WORLD_READABLE__")]:
    try:
        print(f"LIST {d}: {sorted(os.listdir(d))}")
    except OSError as e:
        sys.stderr.write(f"ATTEMPT list {d}: {type(e).__name__}\n")
