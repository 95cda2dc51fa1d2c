"""Code generation with hidden tests (`ragen/Code-v0`) and the sandbox that runs model-written programs.

    from ragen_envs.code import CodeEnv, run_program, sandbox_isolation

    print(sandbox_isolation().describe())          # which isolation is active here
    run_program("print(int(input()) * 2)", "21\\n")  # RunResult(verdict="ok", stdout="42\\n", ...)

The env judges a function's return value with `values_equal` (exact ints, exception-safe), not with
the sandbox's more lenient `values_match` (kept for callers of the sandbox alone).

The sandbox is the package `ragen_envs.code.sandbox` (the caller API in its `__init__`, the
bootstrap run in the sandbox in `inside`). Its modules used to sit next to this one as
`sandbox_boot` (now `inside`), `sandbox_launch` (now `launch`, a script run by path),
`sandbox_cgroup`, `sandbox_rootfs` and `sandbox_seccomp`; the old import paths of the four modules
still work, with a DeprecationWarning, until the next release (`MOVED_SANDBOX_MODULES`).
"""

from ragen_envs._moved import install
from ragen_envs.code.env import CodeEnv, extract_program
from ragen_envs.code.sandbox import (
    Isolation,
    Limits,
    RunResult,
    outputs_match,
    run_function,
    run_program,
    sandbox_isolation,
    values_match,
)
from ragen_envs.code.tasks import (
    FAMILIES,
    CodeTask,
    CodeTaskConfig,
    CodeTest,
    answer_passes,
    generate_task,
    load_tasks,
    passing_standins,
    standin_answers,
    values_equal,
)

#: The sandbox modules' old import paths -> their modules in the package. An old name is imported only
#: after this package has run to the end, so installing the finder here is early enough. `sandbox_launch`
#: is not in it: it was a script run by path, never imported (importing it would run the bootstrap's
#: `main` with the importer's argv); the caller finds `sandbox/launch.py` next to `inside.py`.
MOVED_SANDBOX_MODULES = {
    "ragen_envs.code.sandbox_boot": "ragen_envs.code.sandbox.inside",
    "ragen_envs.code.sandbox_cgroup": "ragen_envs.code.sandbox.cgroup",
    "ragen_envs.code.sandbox_rootfs": "ragen_envs.code.sandbox.rootfs",
    "ragen_envs.code.sandbox_seccomp": "ragen_envs.code.sandbox.seccomp",
}
install(MOVED_SANDBOX_MODULES)

__all__ = [
    "FAMILIES",
    "CodeEnv",
    "CodeTask",
    "CodeTaskConfig",
    "CodeTest",
    "Isolation",
    "Limits",
    "RunResult",
    "answer_passes",
    "extract_program",
    "generate_task",
    "load_tasks",
    "outputs_match",
    "passing_standins",
    "run_function",
    "run_program",
    "sandbox_isolation",
    "standin_answers",
    "values_equal",
    "values_match",
]
