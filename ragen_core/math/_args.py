"""Checks of the scalar settings of the math layer's public functions: one wording for a bad number or switch.

A setting is a number when it is an ``int``, a ``float``, a numpy integer or float, or a 0-d real tensor or
array; a bool (Python's, numpy's or a bool tensor) is not (``eps=True`` is a mistake, not 1.0), nor a string
(``"0.9"`` read as 0.9 hides a config that was never parsed), nor None. An integer setting is an ``int``, a numpy
integer or a 0-d integer tensor, bools again excluded. Infinities and NaN are refused where a finite value is
required. Each check raises ``ValueError`` (or the error class a caller passes) with one line naming the setting.

Tensor arguments are read by :func:`as_tensor`: a tensor as it is, an ndarray or nested lists of numbers through
``torch.as_tensor`` (so every public function of the math layer takes what ``grpo`` takes), anything torch cannot
read (a None or a string inside a list) one ValueError naming the argument.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np
import torch

__all__ = ["as_number", "as_integer", "as_tensor", "is_bool", "number_or_none", "real_or_none"]


def is_bool(value: Any) -> bool:
    """True for a Python or numpy bool and for a bool tensor or array."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, (torch.Tensor, np.ndarray)) and value.dtype in (torch.bool, np.bool_)


def real_or_none(value: Any) -> float | None:
    """``value`` as a float if it is a number as defined above (not a bool, a string or None), else None."""
    if is_bool(value):
        return None
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.is_complex():
            return None
        return float(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "iuf":
            return None
        return float(value)
    if isinstance(value, numbers.Real):  # int, float, Fraction, numpy integers and floats
        return float(value)
    return None


def _bounds(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return ""


def as_number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    accepted: str | None = None,
) -> float:
    """``value`` as a float within the bounds (``low``/``high`` inclusive unless ``low_open``/``high_open``; finite
    unless ``finite=False``), else one ValueError line naming ``name``:

    - a number out of range (NaN too): ``"{name} must be {accepted}; got {value!r}"``, ``accepted`` defaulting to
      the bounds (``"in [0, 1]"``, ``">= 0"``);
    - an infinity where a finite value is required: ``"{name} must be a finite number {accepted}; got inf"``;
    - a bool: ``"{name} must be a number {accepted}, not a bool; got True"``;
    - anything else (a string, None): ``"{name} must be a number {accepted}; got '0.9'"``.
    """
    accepted = _bounds(low, high, low_open, high_open) if accepted is None else accepted
    number = real_or_none(value)
    if number is None:
        what = ", not a bool" if is_bool(value) else ""
        raise ValueError(f"{name} must be a number{' ' * bool(accepted)}{accepted}{what}; got {value!r}")
    ok = not math.isnan(number)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if not ok:
        raise ValueError(f"{name} must be {accepted or ('a finite number' if finite else 'a number')}; got {value!r}")
    if finite and not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number{' ' * bool(accepted)}{accepted}; got {value!r}")
    return number


def number_or_none(name: str, value: Any, low: float, *, low_open: bool, what: str) -> float | None:
    """None, or ``value`` as a finite float above ``low`` (:func:`as_number`); the messages say that None means
    ``what``."""
    if value is None:
        return None
    return as_number(name, value, low, low_open=low_open, accepted=f"{'>' if low_open else '>='} {low:g} "
                     f"(or None to {what})")


def as_integer(name: str, value: Any, low: int | None = None, error: type[Exception] = ValueError) -> int:
    """``value`` as an int >= ``low`` (an int, a numpy integer or a 0-d integer tensor; not a bool), else
    ``error``: ``"{name} must be an integer >= low; got {value!r}"``."""
    number = None
    if not is_bool(value) and not isinstance(value, float):
        try:
            number = operator.index(value)
        except TypeError:
            number = None
    if number is not None and (low is None or number >= low):
        return int(number)
    bound = f" >= {low}" if low is not None else ""
    raise error(f"{name} must be an integer{bound} (not a bool); got {value!r}")


def as_tensor(name: str, values: Any, shape: str, note: str = "") -> torch.Tensor:
    """``values`` as a tensor: a tensor unchanged, an ndarray or nested lists of numbers via ``torch.as_tensor``
    (float lists become float32, int lists int64, arrays keep their dtype); else one ValueError naming ``name``
    (torch's "Could not infer dtype of NoneType", or an AttributeError on ``.shape`` of a list, before).
    ``shape`` is what the message says is expected (``"[B, T]"``), ``note`` is added after it.

    A complex tensor (or complex numbers in a list or array) is refused with ``"{name} must be real numbers; got dtype
    torch.complex64"``: every quantity of the math layer is real, and the ``.to(float)`` that would follow drops the
    imaginary part with no more than a warning."""
    if isinstance(values, torch.Tensor):
        tensor = values
    else:
        try:
            tensor = torch.as_tensor(values)
        except (TypeError, ValueError, RuntimeError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise ValueError(f"{name} must be a real tensor {shape} or nested lists of numbers{note}; could not "
                             f"read it: {why}") from None
    if tensor.is_complex():
        raise ValueError(f"{name} must be real numbers; got dtype {tensor.dtype}")
    return tensor
