"""Code generation with hidden tests (`ragen/Code-v0`) and the sandbox that runs model-written programs.

    from ragen_envs.code import CodeEnv, run_program, sandbox_isolation

    print(sandbox_isolation().describe())          # which isolation is active here
    run_program("print(int(input()) * 2)", "21\\n")  # RunResult(verdict="ok", stdout="42\\n", ...)

The env judges a function's return value with `values_equal` (exact ints, exception-safe), not with
the sandbox's more lenient `values_match` (kept for callers of the sandbox alone).
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
