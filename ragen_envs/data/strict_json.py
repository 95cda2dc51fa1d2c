"""JSON decoding that fails with a `ValueError` naming the place, whatever the text holds.

`json.loads` has three ways to fail that are not `json.JSONDecodeError`: deep nesting raises
`RecursionError` (100,000 `[` are enough), an integer of more than 4,300 digits raises a bare
`ValueError` from Python's int-conversion limit, and a value nested a few hundred levels deep decodes
but then breaks whatever recurses over it later (comparison, `copy.deepcopy`, pickling into a vector
env worker). `loads` closes all three:

- nesting deeper than `max_depth` (default `MAX_DEPTH`) is refused *before* decoding, by a linear
  scan of the brackets outside string literals (`too_deep_at`), so the decoder's own recursion never
  comes near Python's limit;
- an over-long integer becomes `JSONValueError("integer with more than 4300 digits ...")`;
- every error is a `JSONValueError` (a `ValueError`) with a 1-based `lineno` and `colno` when known.

`loads(text, unique_keys=True)` also refuses an object that holds a key twice (`DuplicateKeyError`):
`json.loads` silently keeps the last value, so a data set record `{"target": 24, "target": 5}` would
lose one without a word. The default (`False`) keeps `json`'s behaviour for callers that decode
values they did not write by hand (a function's result in the sandbox).

Used by the data-set loader (`ragen_envs.data.loading`) and by the sandbox for a function's result.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import numpy as np

__all__ = [
    "MAX_DEPTH",
    "DuplicateKeyError",
    "JSONValueError",
    "int_digit_limit",
    "long_integer_at",
    "loads",
    "too_deep_at",
    "unique_object",
]

#: Deepest nesting of arrays/objects accepted (real data sets and function results stay far below).
MAX_DEPTH = 100

# A JSON string literal (escapes included). Raw newlines cannot occur inside valid strings, so
# replacing every literal by `""` keeps the line structure of the text.
_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_NOT_STRUCTURE = re.compile(r"[^\[\]{}\n]+")
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))


class JSONValueError(ValueError):
    """Why a text is not acceptable JSON; `lineno`/`colno` are 1-based (None when unknown)."""

    def __init__(self, msg: str, lineno: int | None = None, colno: int | None = None):
        super().__init__(msg)
        self.msg = msg
        self.lineno = lineno
        self.colno = colno


class DuplicateKeyError(JSONValueError):
    """An object holds `key` twice (raised by `unique_object`, the `object_pairs_hook` of `loads`)."""

    def __init__(self, key: str):
        super().__init__(f"key {key!r} appears twice in one object (JSON would keep only the last value)")
        self.key = key


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An `object_pairs_hook` for `json`: the object as a dict, or `DuplicateKeyError` for a repeated key."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


# One decoder for every call: json.loads with a hook builds a new decoder per call (3x the time per line).
_UNIQUE_KEYS = json.JSONDecoder(object_pairs_hook=unique_object)


def too_deep_at(text: str, max_depth: int = MAX_DEPTH) -> int | None:
    """The 1-based line on which the nesting of `text` first exceeds `max_depth`, or None.

    Brackets inside string literals do not count. Linear in the length of the text (numpy does the
    running sum); a text with at most `max_depth` opening brackets is answered without a scan.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return None
    skeleton = _NOT_STRUCTURE.sub("", _STRING.sub('""', text))
    codes = np.frombuffer(skeleton.encode("ascii", "replace"), dtype=np.uint8)
    step = np.isin(codes, _OPEN).astype(np.int32) - np.isin(codes, _CLOSE).astype(np.int32)
    depth = np.cumsum(step)
    over = np.flatnonzero(depth > max_depth)
    if over.size == 0:
        return None
    return int(np.count_nonzero(codes[: over[0]] == ord("\n"))) + 1


def int_digit_limit() -> int:
    """Python's limit on the digits of an integer converted from text (0 means no limit)."""
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0


def long_integer_at(text: str) -> int | None:
    """The 1-based line of the first integer literal (outside strings) longer than Python's limit."""
    limit = int_digit_limit()
    if not limit:
        return None
    match = re.search(rf"\d{{{limit + 1},}}", _STRING.sub('""', text))
    return None if match is None else match.string.count("\n", 0, match.start()) + 1


def loads(text: str, *, max_depth: int = MAX_DEPTH, unique_keys: bool = False) -> Any:
    """`json.loads(text)` with bounded nesting; every failure is a `JSONValueError` (module docstring).
    `unique_keys`: refuse an object with a repeated key (`DuplicateKeyError`) instead of keeping the last."""
    line = too_deep_at(text, max_depth)
    if line is not None:
        raise JSONValueError(f"nested deeper than {max_depth} levels", line, None)
    try:
        return _UNIQUE_KEYS.decode(text) if unique_keys else json.loads(text)
    except DuplicateKeyError:
        raise
    except json.JSONDecodeError as exc:
        raise JSONValueError(exc.msg, exc.lineno, exc.colno) from None
    except RecursionError:  # unreachable after the depth check; kept so the contract holds regardless
        raise JSONValueError(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        line = long_integer_at(text)
        if line is not None:
            raise JSONValueError(
                f"integer with more than {int_digit_limit()} digits (Python's int conversion limit)", line, None
            ) from None
        raise JSONValueError(str(exc)) from None
