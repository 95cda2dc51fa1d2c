"""Code generation with hidden tests (`ragen/Code-v0`) and the sandbox that runs model-written programs.

    from ragen_envs.code import CodeEnv, run_program, sandbox_isolation

    print(sandbox_isolation().describe())          # which isolation is active here
    run_program("print(int(input()) * 2)", "21\\n")  # RunResult(verdict="ok", stdout="42\\n", ...)

The env judges a function's return value with `values_equal` (exact ints, exception-safe).

The sandbox is the package `ragen_envs.code.sandbox` (the caller API in its `__init__`, the
bootstrap run in the sandbox in `inside`, the launch script `launch.py` run by path).
"""

from ragen_envs.code.env import CodeEnv, extract_program
from ragen_envs.code.sandbox import (
    Isolation,
    Limits,
    RunResult,
    outputs_match,
    run_function,
    run_program,
    sandbox_isolation,
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
]
