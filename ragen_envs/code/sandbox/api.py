"""The caller API of the sandbox: `run_program` (a stdin/stdout program) and `run_function` (call one function with
JSON arguments): each checks its arguments, then makes one run (`runner.run_once`) in the mode the probe chose
(`isolation.ensure_probed`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ragen_envs.code.sandbox.isolation import ensure_probed
from ragen_envs.code.sandbox.limits import Limits
from ragen_envs.code.sandbox.result import RunResult
from ragen_envs.code.sandbox.runner import run_once


def _check_common(source: Any, limits: Any, hide_paths: Any) -> tuple[Limits, tuple[str, ...]]:
    if not isinstance(source, str):
        raise ValueError(f"source must be a str (the program text), got {type(source).__name__}")
    limits = Limits.coerce(limits)
    if isinstance(hide_paths, (str, Path)):
        raise ValueError("hide_paths must be a sequence of paths, not a single path")
    raw = [os.fspath(p) for p in hide_paths]
    for p in raw:
        if not isinstance(p, str) or not os.path.isabs(p) or os.path.realpath(p) == "/":
            raise ValueError(f"hide_paths entries must be absolute paths other than '/', got {p!r}")
    paths = tuple(os.path.realpath(p) for p in raw)
    return limits, paths


def run_program(
    source: str,
    stdin: str | bytes = "",
    *,
    limits: Limits | dict[str, Any] | None = None,
    hide_paths: tuple[str | Path, ...] | list[str | Path] = (),
) -> RunResult:
    """Run a stdin/stdout Python program in the sandbox.

    Args:
        source: the program text (run as `__main__`, file name `solution.py` in the working dir).
        stdin: the program's whole standard input.
        limits: a `Limits`, a dict of overrides, or None for the defaults.
        hide_paths: files/directories the program must not see. In the namespace modes the program
            sees nothing of the host but the interpreter and its standard library anyway; a path
            inside those is covered by an empty mount. In guard mode only file permissions and the
            uid drop protect them.

    Returns:
        RunResult; `verdict == "ok"` means exit status 0 (compare `stdout` yourself, e.g. `outputs_match`).

    Raises:
        ValueError: bad arguments. RuntimeError: no sandbox works on this machine.
    """
    limits, paths = _check_common(source, limits, hide_paths)
    if not isinstance(stdin, (str, bytes, bytearray)):
        raise ValueError(f"stdin must be str or bytes, got {type(stdin).__name__}")
    _, cfg = ensure_probed()
    return run_once(cfg, source, stdin, limits, None, paths)[0]


def run_function(
    source: str,
    fn_name: str,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    limits: Limits | dict[str, Any] | None = None,
    hide_paths: tuple[str | Path, ...] | list[str | Path] = (),
) -> RunResult:
    """Define `source` in the sandbox, call `fn_name(*args, **kwargs)` there and return its value.

    The arguments travel as JSON on the program's stdin; the return value comes back as JSON in
    `RunResult.value` (`has_value` True). A top-level `fn_name` is called, else a method of a
    LeetCode-style `class Solution`. Prints of the program go to `stderr`. Whatever the program
    writes as its result (a value nested deeper than `MAX_RESULT_DEPTH`, a replaced `json.dumps`
    printing a million brackets, an integer too long for Python, invalid JSON) gives the verdict
    "runtime error", never an exception.

    Raises:
        ValueError: bad arguments (e.g. not JSON-serialisable). RuntimeError: no sandbox works here.
    """
    limits, paths = _check_common(source, limits, hide_paths)
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise ValueError(f"fn_name must be a Python identifier, got {fn_name!r}")
    if not isinstance(args, (list, tuple)) or not (kwargs is None or isinstance(kwargs, dict)):
        raise ValueError("args must be a list/tuple and kwargs a dict or None")
    try:
        payload = json.dumps({"args": list(args), "kwargs": kwargs or {}})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"function arguments must be JSON-serialisable: {exc}") from None
    _, cfg = ensure_probed()
    return run_once(cfg, source, payload, limits, fn_name, paths)[0]
