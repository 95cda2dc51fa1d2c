"""Argument checks shared by the envs: one wording for every "bad argument" error."""

from __future__ import annotations

import numpy as np


def require_int(
    name: str, value: object, low: int | None = None, high: int | None = None, *, allow_none: bool = False
):
    """`value` as an int (None passes when `allow_none`), else ValueError naming `name` and the accepted range.

    Bools are rejected although Python counts them as ints (`max_actions=True` is a mistake, not 1).
    """
    if value is None and allow_none:
        return None
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if ok and (low is None or value >= low) and (high is None or value <= high):
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
