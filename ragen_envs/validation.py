"""Argument checks shared by the envs: one wording for every "bad argument" error."""

from __future__ import annotations

import math
import os

import numpy as np

#: The largest seed accepted anywhere a seed enters: the seed keys of a training config and the seed flags of
#: ``ragen eval`` (``--seed``, with the last seed ``--seed + --episodes - 1``), ``ragen reproduce`` (``--first-seed``,
#: with the last seed ``--first-seed + --seeds - 1``) and ``ragen play`` (``--seed``). It is 2**32 - 1, the range of
#: a 32-bit unsigned seed (numpy's legacy generators, most tools), and it keeps the seeds derived from them inside
#: torch's 64-bit generator seeds: ``torch.Generator.manual_seed`` refuses anything above 2**64 - 1, which
#: ``run.seed`` plus its offsets reaches from ``run.seed`` = 2**64 - 20000 on and the warm start's
#: ``warm_start.seed + 1_000_003 * run.seed`` from about ``run.seed`` = 1.8e13 on (a traceback in the middle of a
#: run before this bound); gymnasium's ``reset(seed=...)`` takes any integer >= 0. Defined here, with the other
#: argument checks, because ``ragen play`` runs on the base install (no torch).
MAX_SEED = 2**32 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _out_of_range(name: str, value: object, kind: str, show, low, high, allow_none: bool) -> str:
    """The one wording of a bad number: ``"{name} must be [None or ]{kind}[ in [low, high] | >= low | <= high],
    got {value!r}"``, the bounds written by `show`."""
    if low is not None and high is not None:
        accepted = f"{kind} in [{show(low)}, {show(high)}]"
    elif low is not None:
        accepted = f"{kind} >= {show(low)}"
    elif high is not None:
        accepted = f"{kind} <= {show(high)}"
    else:
        accepted = kind
    prefix = "None or " if allow_none else ""
    return f"{name} must be {prefix}{accepted}, got {value!r}"


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
    raise ValueError(_out_of_range(name, value, "an integer", str, low, high, allow_none))


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


def require_float(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    allow_none: bool = False,
) -> float | None:
    """`value` as a finite float within [low, high] (None passes when `allow_none`), else ValueError naming `name`
    and the accepted range.

    Ints and numpy scalars pass; bools do not (`high_prob=True` is a mistake, not 1.0), nor strings, nor NaN or
    infinities (a NaN reward or penalty poisons every return and advantage it is summed into).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        number = float(value)
        if math.isfinite(number) and (low is None or number >= low) and (high is None or number <= high):
            return number
    raise ValueError(_out_of_range(name, value, "a finite number", lambda x: f"{x:g}", low, high, allow_none))


def require_bool(name: str, value: object) -> bool:
    """`value` as a bool (True, False or a numpy bool), else ValueError naming `name`.

    Nothing else passes: `bool("no")` is True and `bool(0.0)` False, so a string or a number given for a switch is
    a mistake to report, not a truth value to guess.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}")


def require_names(name: str, value: object, *, allow_none: bool = False) -> tuple[str, ...] | None:
    """`value` as a non-empty tuple of strings (a list or tuple of str; None passes when `allow_none`), else
    ValueError naming `name`.

    A bare string is refused although Python iterates it: `families="fizzbuzz"` would become the names
    "f", "i", "z", ... and the error would then list characters instead of saying what was wrong.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return tuple(str(v) for v in value)
    prefix = "None or " if allow_none else ""
    raise ValueError(f"{name} must be {prefix}a non-empty list of names (strings), got {value!r}")


def require_path(name: str, value: object, *, allow_none: bool = False):
    """`value` unchanged when it is a path (a str or an `os.PathLike`; None passes when `allow_none`), else
    ValueError naming `name` (`Path(5)` would raise a TypeError that names no argument)."""
    if (value is None and allow_none) or isinstance(value, (str, os.PathLike)):
        return value
    prefix = "None or " if allow_none else ""
    raise ValueError(f"{name} must be {prefix}a file path (str or os.PathLike), got {value!r}")
