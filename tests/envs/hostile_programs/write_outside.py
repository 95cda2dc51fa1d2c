# Tries to create files outside its working directory. Expected: none of them appears on the host
# (permission denied by the uid drop, or written into a private tmpfs that vanishes with the run).
import sys

marker = "__MARKER__"
targets = [
    "__OUTSIDE_DIR__/" + marker,
    "/tmp/" + marker,
    "/var/tmp/" + marker,
    "/dev/shm/" + marker,
    "/root/" + marker,
    "/etc/" + marker,
    "/" + marker,
]
for path in targets:
    try:
        with open(path, "w") as f:
            f.write(marker)
        sys.stderr.write(f"ATTEMPT write {path}: WROTE (inside the sandbox's view)\n")
    except OSError as e:
        sys.stderr.write(f"ATTEMPT write {path}: {type(e).__name__}\n")
print("done")
