"""Run by path inside the sandbox: `python -s -S sandbox/launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE`, with
an environment of only PYTHONHASHSEED=0 and PYTHONSAFEPATH=1 (`runner.INTERPRETER_FLAGS`, `INTERPRETER_ENV`: `-I`
minus `-E`, so that str hashing is the same in every run).

Imports `inside` from this directory through the import system, so that its cached bytecode is
used instead of compiling it on every run, removes the directory from `sys.path` again (nothing
else of the project is importable; `import inside` still finds the loaded module, which holds none of
the run's configuration: see `inside.program_process`) and hands over to `inside.main`. It imports `inside` as a
top-level module, not as `ragen_envs.code.sandbox.inside`: the package's `__init__` (the caller
side) must not run in the sandbox, and `-s -S` with PYTHONSAFEPATH leave only the standard library importable.
First it removes the interpreter's PYTHON* variables from `os.environ` (they have done their work at start-up, and
the program must see the environment it always saw) and, where Python < 3.11 ignored PYTHONSAFEPATH and put this
directory on `sys.path`, that entry.
"""

import os
import sys

_names = [name for name in os.environ if name.startswith("PYTHON")]
while _names:
    del os.environ[_names.pop()]  # unsetenv too: the process environment loses them, not only the mapping
_here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [entry for entry in sys.path if os.path.realpath(entry) != _here]
sys.path.insert(0, _here)
del _names, _here  # nothing of this script's own beyond `os`, `sys` and `inside` stays in its module
try:
    import inside
finally:
    del sys.path[0]

inside.main(sys.argv)
