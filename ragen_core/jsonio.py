"""Strict JSON for the files the project writes for others to read (results, records).

``json.dumps`` writes ``NaN`` and ``Infinity`` for non-finite floats by default; they are not JSON, and strict
readers (``jq``, browsers and JavaScript, most languages' JSON libraries) refuse the whole file. A measurement that
has no value is written as ``null`` instead, as the trainer's ``metrics.jsonl`` writes it. (``json.dumps``'
``default`` hook never sees a float, so it cannot do this.) The bottom layer of ``ragen_core``: it imports nothing
of the project.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["finite_or_null", "strict_dumps"]


def finite_or_null(value: Any) -> Any:
    """`value` with every float that is NaN or infinite replaced by None, in nested dicts, lists and tuples (tuples
    become lists, as JSON has them); anything else as it is."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def strict_dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`finite_or_null` (`value`) with ``allow_nan=False``: never ``NaN`` or ``Infinity``."""
    return json.dumps(finite_or_null(value), allow_nan=False, **kwargs)
