"""The minimal root file system of a sandbox run: what of the host the program may see.

Computed once per process (for the sandbox interpreter) and executed by the bootstrap
(`inside.apply_root_plan`) on a fresh tmpfs, which then becomes `/` by `pivot_root`. The
program sees, read-only, exactly:

- the interpreter binary and every shared library it maps after importing each extension module of
  its standard library (found by running the interpreter once and reading `/proc/self/maps`), with
  the symlink chains that lead to them (`/lib64/ld-linux-x86-64.so.2`, `libz.so.1`, merged-/usr
  links) and the loader's cache `/etc/ld.so.cache`;
- the standard library (the interpreter's `sys.path` under `-I -S`), with any `site-packages` /
  `dist-packages` inside it covered by an empty mount;
- the C.UTF-8 locale (for Python's locale coercion), and /dev/null, zero, full, random, urandom;

and, writable and private to the run: its working directory, `/tmp`, `/dev/shm` (tmpfs of
`disk_bytes` each). Nothing else of the host exists: no project checkout, no `/etc`, no home
directories, no `/sys`, no `/run`, and no `/proc` (so no `/dev/stdin`, `/dev/fd`, which point into
it; `open(0)` and `sys.stdin` read the same input).

Why no /proc, even one of the run's own PID namespace: the kernel numbers the inodes of /proc with the
one counter that also numbers pipes and sockets (`get_next_ino`), shared by the whole host. A run that
looks up fresh /proc entries (one thread after another: two inodes each) moves that counter, and a
later run reads it from the inode number of any pipe, its stdin included: a channel between runs that
never overlap (docs/security.md). /proc also gave the program its memory map and pagemap.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

__all__ = ["interpreter_facts", "root_plan"]

_FACTS_CODE = r"""
import json, os, sys
loaded = []
for d in sys.path:
    if os.path.basename(d) == "lib-dynload" and os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            if name.endswith(".so"):
                mod = name.split(".")[0]
                try:
                    __import__(mod)
                    loaded.append(mod)
                except BaseException:
                    pass
maps = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            maps.add(parts[5].strip().replace(" (deleted)", ""))
print(json.dumps({"executable": sys.executable, "path": sys.path, "maps": sorted(maps), "loaded": loaded,
                  "version": sys.version.split()[0]}))
"""

_DEVICES = ("null", "zero", "full", "random", "urandom")
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def interpreter_facts(python: str) -> dict:
    """What `python -I -S` maps and searches: executable, sys.path, mapped files, loadable extensions."""
    out = subprocess.run(
        [python, "-I", "-S", "-c", _FACTS_CODE],
        capture_output=True, text=True, timeout=120, env={}, stdin=subprocess.DEVNULL, cwd="/",
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"{python} -I -S failed: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _elf_interpreter(path: str) -> str | None:
    """PT_INTERP of an ELF executable (the dynamic loader's path), or None."""
    import struct

    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
                return None
            endian = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack_from(endian + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                p_type, _, p_offset, _, _, p_filesz = struct.unpack(endian + "IIQQQQ", f.read(40))
                if p_type == 3:  # PT_INTERP
                    f.seek(p_offset)
                    return f.read(p_filesz).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


class _Plan:
    def __init__(self) -> None:
        self.entries: list[list] = []
        self.seen: set[str] = set()

    def add(self, *entry) -> None:
        key = entry[2] if entry[0] in ("file", "tree", "dev") else entry[1]  # the path in the new root
        if key not in self.seen:
            self.seen.add(key)
            self.entries.append(list(entry))

    def path_chain(self, path: str, bind_as: str = "file", depth: int = 0) -> None:
        """Make `path` resolve in the new root as on the host: replicate every symlink on the way and
        bind the final file (or directory tree)."""
        if depth > 16:
            return
        parts = Path(path).parts
        current = "/"
        for i, part in enumerate(parts[1:], start=1):
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except OSError:
                return
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(current)
                self.add("symlink", current, target)
                resolved = os.path.normpath(os.path.join(os.path.dirname(current), target))
                rest = os.path.join(resolved, *parts[i + 1 :]) if i + 1 < len(parts) else resolved
                self.path_chain(rest, bind_as, depth + 1)
                return
        if os.path.isdir(current) and bind_as == "tree":
            self.add("tree", current, current)
        elif os.path.isfile(current):
            self.add("file", current, current)


def root_plan(python: str, facts: dict | None = None, whole_lib_dirs: bool = False) -> list[list]:
    """The bootstrap's plan for the minimal root of `python` (module docstring).

    Args:
        python: the sandbox interpreter (absolute path).
        facts: `interpreter_facts(python)` (computed when None).
        whole_lib_dirs: bind each directory holding a mapped library whole instead of the library
            files alone (the fallback when the probe finds the minimal set incomplete).
    """
    facts = facts or interpreter_facts(python)
    plan = _Plan()
    for name in _TOP_LINKS:  # merged-/usr systems: /lib -> usr/lib etc.
        top = "/" + name
        if os.path.islink(top):
            plan.add("symlink", top, os.readlink(top))
    stdlib: list[str] = []
    for entry in sorted(p for p in facts["path"] if os.path.exists(p)):
        if not any(entry.startswith(t + "/") for t in stdlib):  # lib-dynload lies inside the stdlib
            stdlib.append(entry)
    trees = stdlib + [p for p in ("/usr/lib/locale/C.utf8", "/usr/lib/locale/C.UTF-8") if os.path.isdir(p)]
    for entry in trees:
        plan.path_chain(entry, "tree")
    interp = _elf_interpreter(python)
    if interp:
        plan.path_chain(interp)
    plan.path_chain(python)
    mapped = [m for m in facts["maps"] if os.path.isfile(m) and not any(m.startswith(t + "/") for t in trees)]
    if whole_lib_dirs:
        for d in sorted({os.path.dirname(m) for m in mapped}):
            plan.path_chain(d, "tree")
    else:
        wanted = {os.path.realpath(m) for m in mapped}
        for m in mapped:
            plan.path_chain(m)
        for d in sorted({os.path.dirname(m) for m in mapped}):
            try:  # soname links (libz.so.1 -> libz.so.1.2.13) that the loader opens by name
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if e.is_symlink() and os.path.realpath(e.path) in wanted:
                    plan.add("symlink", e.path, os.readlink(e.path))
    if os.path.isfile("/etc/ld.so.cache"):
        plan.path_chain("/etc/ld.so.cache")
    for entry in stdlib:  # the standard library only: no third-party packages
        for sub in ("site-packages", "dist-packages"):
            if os.path.isdir(os.path.join(entry, sub)):
                plan.add("empty", os.path.join(entry, sub))
    plan.add("dir", "/dev")
    for dev in _DEVICES:
        node = "/dev/" + dev
        if os.path.exists(node) and stat.S_ISCHR(os.stat(node).st_mode):
            plan.add("dev", node, node)
    plan.add("tmpfs", "/dev/shm", "1777")
    plan.add("tmpfs", "/tmp", "1777")
    return plan.entries


if __name__ == "__main__":  # print the plan of this interpreter (for docs/security.md and debugging)
    for row in root_plan(os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else sys.executable)):
        print(*row)
