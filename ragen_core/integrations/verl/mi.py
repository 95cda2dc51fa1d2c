"""MI collapse metrics from a verl batch (docs/science.md section 2), without verl.

A verl batch holds, per row b, the left-padded prompt ``prompts`` ``[B, Tp]`` (``attention_mask[:, :Tp]``) and
the right-padded response ``responses`` ``[B, Tr]`` with ``response_mask`` ``[B, Tr]``. In a multi-turn
response, env tokens have mask 0; the trace z of a row is its *first generated span*: the first maximal run of
``response_mask != 0``, i.e. the first turn's reasoning and answer, which depends on the prompt x alone.

:func:`mi_inputs` turns the batch into P prompts and P x G traces (one prompt per uid group, first-seen order),
ready for :func:`ragen_core.math.mi.cross_score`; :func:`mi_metrics` runs the cross-scoring with any transformers causal
LM and returns :func:`ragen_core.math.mi.flatten_proxies` of :func:`ragen_core.math.mi.mi_proxies`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ragen_core.integrations.verl.core import group_rows
from ragen_core.math.mi import cross_score, flatten_proxies, mi_proxies

__all__ = ["first_span", "mi_inputs", "mi_metrics"]


def first_span(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The tokens of ``ids`` ``[T]`` in the first maximal run of ``mask != 0`` (empty when there is none).

    ``ids`` and ``mask`` must be 1-D of the same length T (ValueError otherwise).
    """
    ids_shape, mask_shape = tuple(torch.as_tensor(ids).shape), tuple(torch.as_tensor(mask).shape)
    if len(ids_shape) != 1 or ids_shape != mask_shape:
        raise ValueError(f"ids {list(ids_shape)} and mask {list(mask_shape)} must be 1-D of the same length T")
    m = torch.as_tensor(mask).reshape(-1) != 0
    on = m.nonzero().flatten()
    if on.numel() == 0:
        return ids[:0]
    start = int(on[0])
    off = (~m[start:]).nonzero().flatten()
    stop = start + int(off[0]) if off.numel() else m.numel()
    return ids[start:stop]


def mi_inputs(
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    uids: Sequence[Any] | np.ndarray,
    max_groups: int | None = None,
) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], list[Any], int]:
    """Prompts ``[P]`` and traces ``[P][G]`` for cross-scoring, from a verl batch.

    Args:
        prompts: ``[B, Tp]`` integer prompt ids; ``prompt_mask`` ``[B, Tp]`` its padding mask (any side).
        responses: ``[B, Tr]`` integer response ids; ``response_mask`` ``[B, Tr]``. Tensors, numpy arrays or
            nested lists; float ids raise TypeError (a token id 7.5 is a mistake, not token 7).
        uids: ``[B]`` group ids; groups must have equal sizes G.
        max_groups: keep at most this many groups (the first ones seen), as cross-scoring costs P^2 G traces.

    Returns:
        ``(xs, zs, group_uids, n_skipped)``: the prompt of each group (from its first row), each row's first
        generated span, the uids of the groups used, and the number of groups left out because one of their
        traces is empty (``mi_proxies`` needs |z| >= 1).
    """
    prompts, prompt_mask, responses, response_mask = (torch.as_tensor(t) for t in (prompts, prompt_mask, responses,
                                                                                   response_mask))
    for name, t in (("prompts", prompts), ("prompt_mask", prompt_mask), ("responses", responses),
                    ("response_mask", response_mask)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D [B, T]; got shape {tuple(t.shape)}")
    for name, t in (("prompts", prompts), ("responses", responses)):
        if t.is_floating_point() or t.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer token ids; got dtype {t.dtype}")
    if prompts.shape != prompt_mask.shape or responses.shape != response_mask.shape:
        raise ValueError("prompt_mask must match prompts and response_mask must match responses")
    group_of_row, group_uids = group_rows(uids)
    if group_of_row.numel() != prompts.shape[0] or responses.shape[0] != prompts.shape[0]:
        raise ValueError(f"prompts, responses and uids must have the same number of rows; got {prompts.shape[0]}, "
                         f"{responses.shape[0]}, {group_of_row.numel()}")
    if max_groups is not None and (isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1):
        raise ValueError(f"max_groups must be a positive integer or None; got {max_groups!r}")
    counts = torch.bincount(group_of_row, minlength=len(group_uids))
    if int(counts.min()) != int(counts.max()):
        sizes = sorted(set(counts.tolist()))
        raise ValueError(f"every uid group must have the same number of rows G; got sizes {sizes}")
    xs: list[torch.Tensor] = []
    zs: list[list[torch.Tensor]] = []
    used: list[Any] = []
    skipped = 0
    for i, uid in enumerate(group_uids):
        if max_groups is not None and len(xs) >= max_groups:
            break
        rows = (group_of_row == i).nonzero().flatten().tolist()
        traces = [first_span(responses[b], response_mask[b]).long() for b in rows]
        if any(z.numel() == 0 for z in traces):
            skipped += 1
            continue
        x = prompts[rows[0]][prompt_mask[rows[0]] != 0].long()
        if x.numel() == 0:
            raise ValueError(f"the prompt of group {uid!r} is empty (prompt_mask all zero)")
        xs.append(x)
        zs.append(traces)
        used.append(uid)
    return xs, zs, used, skipped


def mi_metrics(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    uids: Sequence[Any] | np.ndarray,
    max_groups: int | None = 8,
    batch_tokens: int = 32768,
    prefix: str = "collapse/",
) -> dict[str, float]:
    """Cross-score the batch's traces under its prompts with ``model`` and return the flat MI proxies.

    ``L[i, k, j] = log p(z_ik | x_j)`` by :func:`ragen_core.math.mi.cross_score` (KV cache reuse), then
    :func:`ragen_core.math.mi.mi_proxies` with equal prompts treated as one (``prompt_ids`` = the prompt token
    strings). Needs P >= 2 usable groups.

    Returns:
        the flat proxies of :func:`ragen_core.math.mi.flatten_proxies` plus ``prefix + "skipped"`` (0.0) and
        ``prefix + "groups_without_trace"`` (groups left out for an empty first span); with fewer than two usable
        groups only those two keys, ``skipped`` 1.0.
    """
    xs, zs, _, skipped = mi_inputs(prompts, prompt_mask, responses, response_mask, uids, max_groups)
    if len(xs) < 2:
        return {f"{prefix}skipped": 1.0, f"{prefix}groups_without_trace": float(skipped)}
    L, lengths = cross_score(model, xs, zs, batch_tokens, return_lengths=True)
    ids = [tuple(x.tolist()) for x in xs]
    out = flatten_proxies(mi_proxies(L, lengths, prompt_ids=ids), prefix=prefix)
    out[f"{prefix}skipped"] = 0.0
    out[f"{prefix}groups_without_trace"] = float(skipped)
    return out
