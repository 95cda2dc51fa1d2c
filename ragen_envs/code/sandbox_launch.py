"""Run by path inside the sandbox: `python -I -S sandbox_launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE`.

Imports `sandbox_boot` from this directory through the import system, so that its cached bytecode
is used instead of compiling it on every run, removes the directory from `sys.path` again (nothing
of the project stays importable) and hands over to `sandbox_boot.main`.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import sandbox_boot
finally:
    del sys.path[0]

sandbox_boot.main(sys.argv)
