"""Run by path inside the sandbox: `python -I -S sandbox/launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE`.

Imports `inside` from this directory through the import system, so that its cached bytecode is
used instead of compiling it on every run, removes the directory from `sys.path` again (nothing
else of the project is importable; `import inside` still finds the loaded module, which holds none of
the run's configuration: see `inside.program_process`) and hands over to `inside.main`. It imports `inside` as a
top-level module, not as `ragen_envs.code.sandbox.inside`: the package's `__init__` (the caller
side) must not run in the sandbox, and `-I -S` leaves only the standard library importable.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import inside
finally:
    del sys.path[0]

inside.main(sys.argv)
