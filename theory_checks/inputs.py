"""Argument checks of the public functions of :mod:`theory_checks`: one wording for every bad argument.

Each helper returns the argument in the form the caller computes with (an ``int``, a ``float``, a float64
array) or raises ``TypeError`` (the wrong kind of value: a string, a float where a count is meant, an ``int``
where a random generator is meant) or ``ValueError`` (the right kind, outside what is accepted: a NaN, a
negative probability, rows that do not sum to 1, a wrong shape), naming the argument, the value given and
what is accepted.  The exact checks compare numbers at the 1e-12 level, so a probability vector must sum to
1 within :data:`PROB_ATOL` (float32 probabilities are off by ~1e-7: renormalise them in float64 first).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np

__all__ = ["MAX_SEED", "PROB_ATOL", "MAX_OUTCOMES", "require_int", "require_real", "require_bool", "require_rng",
           "require_array", "require_distribution", "require_channel", "require_seed", "shown"]

#: the largest seed accepted (the project's one seed bound, ``ragen_envs.validation.MAX_SEED``: 2**32 - 1)
MAX_SEED = 2**32 - 1
#: how far from 1 the entries of a probability vector may sum (the testbed's prompt weights use the same)
PROB_ATOL = 1e-12
#: the most outcome tuples an exact enumeration may hold (2**22: about 270 MB of indices at G = 8)
MAX_OUTCOMES = 2**22


def shown(value: Any) -> str:
    """A short repr of `value` for an error message (arrays by shape and a few entries)."""
    if isinstance(value, np.ndarray):
        flat = np.array2string(value.ravel()[:6], precision=6, separator=", ")
        return f"array of shape {value.shape} {flat[:-1]}{', ...' if value.size > 6 else ''}]"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range_text(low: float | None, high: float | None, low_open: bool = False, high_open: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{_num(low)}, {_num(high)}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {_num(low)}"
    if high is not None:
        return f" {'<' if high_open else '<='} {_num(high)}"
    return ""


def require_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """`value` as an ``int`` in [low, high]: ``TypeError`` for a non-integer (bools, floats such as 2.0 and
    strings included), ``ValueError`` outside the range."""
    accepted = "an integer" + _range_text(low, high)
    if not _is_int(value):
        raise TypeError(f"{name} must be {accepted}, got {shown(value)} ({type(value).__name__})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {accepted}, got {value}")
    return int(value)


def require_real(name: str, value: object, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, finite: bool = True) -> float:
    """`value` as a ``float`` (NaN never, +-inf only when not `finite`) in the range: ``TypeError`` for a
    non-number (strings, bools, arrays of more than one element), ``ValueError`` for NaN, inf or out of range."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    accepted = ("a finite real number" if finite else "a real number (not NaN)") + _range_text(low, high, low_open,
                                                                                             high_open)
    if not isinstance(value, (Real, np.floating, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be {accepted}, got {shown(value)} ({type(value).__name__})")
    v = float(value)
    bad = math.isnan(v) or (finite and math.isinf(v))
    if low is not None:
        bad = bad or (v <= low if low_open else v < low)
    if high is not None:
        bad = bad or (v >= high if high_open else v > high)
    if bad:
        raise ValueError(f"{name} must be {accepted}, got {value!r}")
    return v


def require_bool(name: str, value: object) -> bool:
    """`value` as a ``bool`` (``TypeError`` otherwise: ``quick="no"`` is a mistake, not True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {shown(value)} ({type(value).__name__})")
    return bool(value)


def require_rng(name: str, rng: object, allow_none: bool = False) -> np.random.Generator | None:
    """`rng` if it is a ``numpy.random.Generator`` (or None when `allow_none`); ``TypeError`` otherwise."""
    if rng is None and allow_none:
        return None
    if not isinstance(rng, np.random.Generator):
        prefix = "None or " if allow_none else ""
        raise TypeError(f"{name} must be {prefix}a numpy.random.Generator (e.g. numpy.random.default_rng(seed)), "
                        f"got {shown(rng)} ({type(rng).__name__})")
    return rng


def require_seed(name: str, value: object) -> int:
    """A seed: an integer in [0, :data:`MAX_SEED`]."""
    return require_int(name, value, 0, MAX_SEED)


def require_array(name: str, value: object, ndim: int | None = None, shape: tuple[int, ...] | None = None, *,
                  nonneg: bool = False, allow_neg_inf: bool = False, allow_inf: bool = False,
                  allow_empty: bool = False) -> np.ndarray:
    """`value` as a float64 array: real numbers (ints, floats, bools), of `ndim` dimensions or exactly `shape`
    when given, not empty (unless `allow_empty`), never NaN, finite unless `allow_inf` (``-inf`` alone allowed
    with `allow_neg_inf`), and non-negative with `nonneg`.  ``TypeError`` for strings, objects or complex numbers;
    ``ValueError`` otherwise."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular array of real numbers, got {shown(value)} ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be an array of real numbers, got {shown(value)} (dtype {arr.dtype})")
    arr = arr.astype(np.float64, copy=False)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {list(arr.shape)}")
    if shape is not None and arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(arr.shape)}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty, got shape {list(arr.shape)}")
    bad = np.isnan(arr)
    if not allow_inf:
        bad |= (arr == np.inf) | (False if allow_neg_inf else arr == -np.inf)
    if np.any(bad):
        kinds = "no NaN" if allow_inf else "no NaN or +inf" if allow_neg_inf else "finite entries (no NaN or inf)"
        raise ValueError(f"{name} must have {kinds}, got {_first(arr, bad)}")
    if nonneg and np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative, got {_first(arr, arr < 0)}")
    return arr


def _first(arr: np.ndarray, mask: np.ndarray) -> str:
    """The first entry of `arr` where `mask` holds, with its index (for an error message)."""
    where = tuple(int(i) for i in np.argwhere(mask)[0])
    return f"{float(arr[where])!r}" + (f" at index {list(where)}" if where else "")


def require_distribution(name: str, value: object, ndim: int = 1, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """`value` as a float64 probability vector (``ndim`` 1) or a table of them, one per row (``ndim`` 2):
    finite, non-negative, each summing to 1 within :data:`PROB_ATOL`."""
    arr = require_array(name, value, ndim, shape, nonneg=True)
    sums = arr.sum(axis=-1)
    off = np.abs(sums - 1.0) > PROB_ATOL
    if np.any(off):
        i = int(np.argmax(off))
        what = "" if arr.ndim == 1 else f"row {i} of "
        raise ValueError(f"{what}{name} must sum to 1 (a probability {'vector' if arr.ndim == 1 else 'row'}, "
                         f"within {PROB_ATOL:g}), got sum {float(np.atleast_1d(sums)[i])!r}; "
                         "renormalise in float64: p / p.sum(axis=-1, keepdims=True)")
    return arr


def require_channel(w: object, channel: object, w_name: str = "w",
                    channel_name: str = "channel") -> tuple[np.ndarray, np.ndarray]:
    """(w, channel) of a joint distribution w(x) channel[x, z]: w a probability vector ``[X]``, channel ``[X, Z]``
    with a probability vector in every row."""
    channel = require_distribution(channel_name, channel, 2)
    w = require_distribution(w_name, w, 1)
    if w.shape[0] != channel.shape[0]:
        raise ValueError(f"{w_name} must have one weight per row of {channel_name} ({channel.shape[0]}), "
                         f"got {w.shape[0]}")
    return w, channel

