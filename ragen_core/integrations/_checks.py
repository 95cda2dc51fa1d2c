"""Argument checks shared by the adapters: row indices, boolean masks, id lists.

Each raises a TypeError (wrong kind) or ValueError (wrong value) naming the argument, the value given and what is
accepted, before the value reaches torch, TRL or verl, where the same mistake would crash far from its cause or,
worse, pass: ``torch.as_tensor(mask, dtype=torch.long)`` reads a boolean mask as the indices 0 and 1, and a float
index is truncated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["row_indices", "bool_mask", "id_list"]


def row_indices(name: str, rows: Any) -> torch.Tensor:
    """`rows` (a tensor, numpy array or list of row indices) as a flat LongTensor.

    An empty `rows` is an empty index whatever its dtype (``[]`` is float to torch). Raises TypeError for a boolean
    mask (the indices are ``mask.nonzero()``) and for non-integer numbers (a row 0.7 is a mistake, not row 0).
    """
    t = torch.as_tensor(rows)
    if t.numel() == 0:
        return t.to(torch.long).reshape(-1)
    if t.dtype == torch.bool:
        raise TypeError(f"{name} must be integer row indices; got a boolean mask {t.tolist()!r:.80} (pass the indices "
                        "of its True entries: mask.nonzero().flatten())")
    if t.is_floating_point() or t.is_complex():
        raise TypeError(f"{name} must be integer row indices; got dtype {t.dtype} {t.tolist()!r:.80}")
    return t.to(torch.long).reshape(-1)


def bool_mask(name: str, mask: Any) -> torch.Tensor:
    """`mask` (a boolean tensor, numpy array or list of bools) as a flat BoolTensor.

    Raises TypeError for any other dtype: integer indices such as ``[0, 1]`` would otherwise read as the mask
    ``[False, True]``.
    """
    t = torch.as_tensor(mask)
    if t.dtype != torch.bool and t.numel():
        raise TypeError(f"{name} must be a boolean mask (True = kept); got dtype {t.dtype} {t.tolist()!r:.80}")
    return t.to(torch.bool).reshape(-1)


def id_list(name: str, ids: Any) -> list[Any]:
    """`ids` (a list, tuple, 1-D numpy array or tensor of hashable ids, one per row) as a list.

    Raises TypeError for a single value, a string (its characters are not ids), a mapping, or a multi-dimensional
    array, and ValueError for a NaN id (NaN never equals itself, so its rows could not share a group).
    """
    if isinstance(ids, (np.ndarray, torch.Tensor)):
        if ids.ndim != 1:
            raise ValueError(f"{name} must be 1-D [B]; got shape {tuple(ids.shape)}")
        out = ids.tolist()
    elif isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
        raise TypeError(f"{name} must be a list or 1-D array of ids, one per row; got {type(ids).__name__} "
                        f"{ids!r:.40}")
    else:
        out = list(ids)
    for i, u in enumerate(out):
        if isinstance(u, float) and math.isnan(u):
            raise ValueError(f"{name}[{i}] is NaN; every row needs an id equal to the ids of its group's other rows")
    return out
