"""Code generation with hidden tests (`ragen/Code-v0`) and the sandbox that runs model-written programs.

    from ragen_envs.code import CodeEnv, run_program, sandbox_isolation

    print(sandbox_isolation().describe())          # which isolation is active here
    run_program("print(int(input()) * 2)", "21\\n")  # RunResult(verdict="ok", stdout="42\\n", ...)
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
from ragen_envs.code.tasks import FAMILIES, CodeTask, CodeTaskConfig, CodeTest, generate_task, load_tasks

__all__ = [
    "FAMILIES",
    "CodeEnv",
    "CodeTask",
    "CodeTaskConfig",
    "CodeTest",
    "Isolation",
    "Limits",
    "RunResult",
    "extract_program",
    "generate_task",
    "load_tasks",
    "outputs_match",
    "run_function",
    "run_program",
    "sandbox_isolation",
    "values_match",
]
