"""What a sandboxed run gives back: `RunResult` and its `VERDICTS`, a function's JSON return value read with
bounded depth (`parse_result`), and the judging of a program's stdout against the expected output (`outputs_match`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragen_envs.data import strict_json

#: Every verdict a run can get.
VERDICTS = ("ok", "runtime error", "time limit", "memory limit", "output limit", "sandbox error")
#: Deepest nesting of lists/dicts accepted in a function's return value.
MAX_RESULT_DEPTH = strict_json.MAX_DEPTH


@dataclass(frozen=True)
class RunResult:
    """The outcome of one sandboxed run.

    Attributes:
        verdict: one of VERDICTS.
        stdout, stderr: decoded output (UTF-8, invalid bytes replaced), at most `output_bytes` each.
        exit_code: the program's exit status, or None when it was killed by a signal / never reported.
        signal: the signal that killed the program, if any.
        wall_time: seconds from spawn to the end of the run (including cleanup of the process tree).
        cpu_time: CPU seconds of the whole run when a cgroup or the process-tree watch measured it,
            else of the program process.
        detail: a short human-readable explanation of the verdict.
        isolation: the sandbox mode used ("namespaces", "userns", "guard").
        run_id: unique id of the run (it appears in the sandbox processes' command line).
        value: function-call mode only: the JSON-decoded return value (None otherwise).
        has_value: whether `value` holds a return value.
        peak_memory: the run's peak memory in bytes, when a cgroup or the watch measured it.
    """

    verdict: str
    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    wall_time: float
    cpu_time: float | None
    detail: str
    isolation: str
    run_id: str
    value: Any = None
    has_value: bool = False
    peak_memory: int | None = None


def parse_result(stdout: str) -> tuple[Any, str | None]:
    """The function's JSON return value with bounded depth, or (None, why it is unreadable)."""
    try:
        return strict_json.loads(stdout, max_depth=MAX_RESULT_DEPTH), None
    except strict_json.JSONValueError as exc:
        return None, exc.msg
    except Exception as exc:  # whatever the text holds, it is a verdict, never an exception
        return None, f"{type(exc).__name__}"


def _normal_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """Judge stdout: equal line by line after removing trailing whitespace of each line and
    trailing blank lines (the usual TACO/Codeforces leniency); nothing else is forgiven."""
    return _normal_lines(actual) == _normal_lines(expected)
