"""Argument checks shared by the envs: one wording for every "bad argument" error."""

from __future__ import annotations

import numpy as np


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def require_int(
    name: str, value: object, low: int | None = None, high: int | None = None, *, allow_none: bool = False
):
    """`value` as an int (None passes when `allow_none`), else ValueError naming `name` and the accepted range.

    Bools are rejected although Python counts them as ints (`max_actions=True` is a mistake, not 1).
    """
    if value is None and allow_none:
        return None
    if _is_int(value) and (low is None or value >= low) and (high is None or value <= high):
        return int(value)
    if low is not None and high is not None:
        accepted = f"an integer in [{low}, {high}]"
    elif low is not None:
        accepted = f"an integer >= {low}"
    elif high is not None:
        accepted = f"an integer <= {high}"
    else:
        accepted = "an integer"
    prefix = "None or " if allow_none else ""
    raise ValueError(f"{name} must be {prefix}{accepted}, got {value!r}")


def require_int_range(
    name: str, value: object, low: int | None = None, high: int | None = None, *, allow_int: bool = True
) -> tuple[int, int]:
    """`value` as an inclusive (lo, hi) pair of ints with low <= lo <= hi <= high, else ValueError
    naming `name` and the accepted form. With `allow_int` an int n stands for (n, n). Bools are rejected."""
    if allow_int and _is_int(value):
        pair: tuple | None = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(_is_int(v) for v in value):
        pair = tuple(value)
    else:
        pair = None
    if pair is not None:
        lo, hi = int(pair[0]), int(pair[1])
        if (low is None or low <= lo) and lo <= hi and (high is None or hi <= high):
            return lo, hi
    form = "an int or an inclusive (low, high) pair" if allow_int else "an inclusive (low, high) pair"
    chain = [*([str(low)] if low is not None else []), "low", "high", *([str(high)] if high is not None else [])]
    raise ValueError(f"{name} must be {form} of integers with {' <= '.join(chain)}, got {value!r}")
