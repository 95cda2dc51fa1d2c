"""Pure tensor helpers of the TRL adapter: group rewards, kept rows, physical row removal, advantages.

TRL's ``GRPOTrainer`` builds one *generation batch* of ``N = P * G`` completions (P prompt groups of G
completions, group-major: global row ``r`` belongs to group ``r // G``), spread over the processes in
contiguous slices of ``n`` rows (process ``i`` holds global rows ``[i*n, (i+1)*n)``; a group may straddle two
processes). The per-process output of ``_generate_and_score_completions`` is a dict of tensors with ``n`` rows:

    prompt_ids, prompt_mask                    [n, Tp]   left-padded
    completion_ids, completion_mask            [n, Tc]   right-padded
    old_per_token_logps, ref_per_token_logps,  [n, Tc]   (optional)
    sampling_per_token_logps, tool_mask        [n, Tc]   (optional)
    importance_sampling_ratio                  [n, Tc] or [n, 1] (optional)
    advantages                                 [n]
    num_items_in_batch                         scalar: loss tokens of the whole generation batch

:func:`take_rows` keeps the rows of kept groups and cuts the columns that became padding in every kept row, so
the backward pass runs over fewer rows and tokens (masking would save nothing; docs/science.md section 4).
"""

from __future__ import annotations

import math
import numbers

import torch

from ragen_core.integrations._checks import bool_mask, row_indices
from ragen_core.math._args import as_integer
from ragen_envs.validation import require_int

__all__ = [
    "PROMPT_KEYS",
    "COMPLETION_KEYS",
    "ROW_KEYS",
    "group_rewards",
    "local_kept_rows",
    "take_rows",
    "padded_row_count",
    "batch_level_advantages",
]

#: Keys aligned with the prompt columns ``[n, Tp]``.
PROMPT_KEYS = ("prompt_ids", "prompt_mask")
#: Keys aligned with the completion columns ``[n, Tc]`` (``importance_sampling_ratio`` may be ``[n, 1]``).
COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)
#: TRL's ``multi_objective_aggregation`` and ``scale_rewards`` values (TRL 1.16).
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
SCALE_REWARDS = ("batch", "group", "none")
#: Keys with one value per row.
ROW_KEYS = ("advantages",)
_SCALAR_KEYS = ("num_items_in_batch",)
#: Keys :func:`take_rows` reads whatever it keeps (``advantages`` too when it adds placeholder rows).
_REQUIRED_KEYS = ("completion_ids", "completion_mask", "prompt_mask", "advantages")


def _reward_table(rewards_per_func) -> torch.Tensor:
    """``rewards_per_func`` as a tensor; in nested lists a None (a completion a reward function did not score) is
    read as NaN, which is how TRL stores it. Anything else that is not a number raises one ValueError naming it."""
    try:
        return torch.as_tensor(rewards_per_func)
    except (TypeError, ValueError, RuntimeError):
        pass
    try:
        rows = [[math.nan if v is None else v for v in row] for row in rewards_per_func]
        if all(isinstance(v, numbers.Real) for row in rows for v in row):
            return torch.as_tensor(rows, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        pass
    raise ValueError("rewards_per_func must be an [N, F] tensor or nested lists of numbers (None or NaN for an "
                     f"unscored completion); got {type(rewards_per_func).__name__} that is neither")


def _check_rewards(rewards_per_func, weights, group_size: int, widen: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rewards [N, F] float, weights [F])`` after checking shapes, `group_size` and finite weights.

    Integer rewards (or a nested list, where None stands for NaN) become float32; float rewards are used as they
    are, except that with `widen` float16 and bfloat16 rewards become float32 (their weighted sums overflow: two
    rewards of 40000 sum to inf in float16). `group_size` may be a numpy integer (not a bool).
    """
    r = _reward_table(rewards_per_func)
    if r.dim() != 2:
        raise ValueError(f"rewards_per_func must be [N, F]; got shape {tuple(r.shape)}")
    if r.is_complex():
        raise ValueError(f"rewards_per_func must hold real rewards; got dtype {r.dtype}")
    if not r.is_floating_point() or (widen and r.dtype in (torch.float16, torch.bfloat16)):
        r = r.to(torch.float32)
    n, f = r.shape
    try:
        w = torch.as_tensor(weights, dtype=r.dtype, device=r.device).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"weights must be finite numbers (one per reward function); got {weights!r}") from None
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"weights must be finite (one per reward function); got {w.tolist()}")
    if w.numel() != f:
        raise ValueError(f"weights must have F={f} entries (one per reward function); got {w.numel()}")
    try:
        g = require_int("group_size", group_size, low=1)
    except ValueError:
        g = None
    if g is None or n % g:
        raise ValueError(f"group_size must be a positive integer dividing N={n}; got {group_size!r}")
    return r, w


def group_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int) -> torch.Tensor:
    """Raw per-completion rewards as a ``[P, G]`` table, the input of ``ragen_core.math.filtering.filter_groups``.

        R[i, k] = sum_f w_f * r_f(i*G + k)     (NaN terms skipped; NaN when every r_f is NaN or the sum is +-inf)

    This is TRL's ``sum_then_normalize`` reward before any normalisation: ranking groups by the variance of
    already-normalised rewards would make every non-constant group look alike. A row where every reward
    function returned ``None`` (TRL stores NaN) stays NaN, so its group is never kept; so does a row whose reward is
    infinite (a broken reward function: TRL's advantages of its group would be NaN), as in the verl adapter.

    Args:
        rewards_per_func: ``[N, F]`` rewards of all processes (TRL gathers them), NaN for ``None`` (in nested lists
            a ``None`` itself is read as NaN).
        weights: ``[F]`` finite reward weights.
        group_size: G, completions per prompt (an int or a numpy integer); must divide N.

    Returns:
        float tensor ``[N // G, G]``: float32 for float16/bfloat16 or integer rewards (the sum is taken in float32,
        so 16-bit rewards cannot overflow to inf and drop their group), else the rewards' dtype.
    """
    rewards_per_func, w = _check_rewards(rewards_per_func, weights, group_size, widen=True)
    group_size = int(group_size)
    n = rewards_per_func.shape[0]
    rewards = (rewards_per_func * w[None, :]).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1) | torch.isinf(rewards)] = torch.nan
    return rewards.reshape(n // group_size, group_size)


def local_kept_rows(group_mask: torch.Tensor, group_size: int, start: int, count: int) -> torch.Tensor:
    """Local indices of the rows of kept groups in one process's slice.

    Args:
        group_mask: BoolTensor ``[P]``, True for kept groups (``FilterResult.mask``).
        group_size: G.
        start: first global row of this process's slice.
        count: n, rows in the slice; ``start + count <= P * G``.

    Returns:
        LongTensor ``[n_kept_local]`` of local row indices, ascending.
    """
    mask = bool_mask("group_mask", group_mask)
    group_size = require_int("group_size", group_size, low=1)
    start, count = require_int("start", start, low=0), require_int("count", count, low=0)
    if start + count > mask.numel() * group_size:
        raise ValueError(f"rows [{start}, {start + count}) fall outside the {mask.numel() * group_size} global rows")
    groups = torch.arange(start, start + count) // group_size
    return mask[groups].nonzero().flatten()


def _span(mask: torch.Tensor) -> tuple[int, int]:
    """Columns ``[lo, hi)`` that hold at least one real token of ``mask`` ``[rows, T]`` (``(0, 0)`` if none)."""
    cols = (mask != 0).any(dim=0).nonzero().flatten()
    if cols.numel() == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


def padded_row_count(kept: int, multiple: int) -> int:
    """Rows one process trains on after filtering: ``kept`` rounded up to a positive multiple of ``multiple``.

    Both are integers (an int, a numpy integer or a 0-d integer tensor; not a bool), else one ValueError naming it.
    """
    multiple = _positive_multiple(multiple)
    count = _integer_or_none(kept, 0)
    if count is None:
        raise ValueError(f"kept must be a non-negative integer; got {kept!r}")
    return max(1, -(-count // multiple)) * multiple


def _integer_or_none(value, low: int) -> int | None:
    """``value`` as an int >= ``low`` (an int, a numpy integer, a 0-d integer tensor; not a bool), else None."""
    try:
        return as_integer("value", value, low)
    except ValueError:
        return None


def _positive_multiple(multiple) -> int:
    value = _integer_or_none(multiple, 1)
    if value is None:
        raise ValueError(f"multiple must be a positive integer; got {multiple!r}")
    return value


def take_rows(batch: dict, rows: torch.Tensor, multiple: int = 1, min_rows: int = 0) -> tuple[dict, int]:
    """Keep ``rows`` of a TRL generation batch, cut all-padding columns, pad the row count to a multiple.

    TRL splits the batch into ``steps_per_generation`` equal chunks and silently drops the remainder, and every
    process must run a forward/backward at every micro-step (DDP), so the kept row count is padded up to a
    positive multiple of ``multiple`` with *placeholder* rows: copies of a row with ``completion_mask`` (and
    ``tool_mask``) zero and advantage 0, which add nothing to any masked loss term. (Loss types that average over
    rows, ``grpo``/``sapo``/``luspo``/``dr_grpo``, count them in that average; ``dapo``, TRL's default, does not.)

    Args:
        batch: the dict of tensors described in the module docstring (``n`` rows, each key in its layout: an
            entry of another width or rank raises ValueError naming it). Keys outside ``PROMPT_KEYS``,
            ``COMPLETION_KEYS``, ``ROW_KEYS`` and ``num_items_in_batch`` (images, token type ids) raise.
        rows: LongTensor ``[m]`` of distinct local row indices to keep, in any order (integers; a boolean mask is
            refused: pass ``mask.nonzero().flatten()``).
        multiple: positive integer (a numpy integer too, not a bool); the output has
            ``max(1, ceil(m / multiple)) * multiple`` rows, or ``min_rows`` if that is more.
        min_rows: at least this many rows (an integer multiple of ``multiple``). Under DDP every process must
            hold the same number of rows: TRL gathers per-row statistics inside its loss (``accelerator.gather``
            of per-sequence clip ratios), and a collective over tensors of different sizes fails or hangs.

    Returns:
        (new batch, number of placeholder rows appended after the ``m`` kept rows).
    """
    multiple = _positive_multiple(multiple)
    unknown = sorted(k for k, v in batch.items() if v is not None and k not in (*PROMPT_KEYS, *COMPLETION_KEYS,
                                                                                  *ROW_KEYS, *_SCALAR_KEYS))
    if unknown:
        raise ValueError(
            f"group filtering cannot remove rows of batch keys {unknown} (multimodal inputs are not supported); "
            "disable rv_filter for this model"
        )
    missing = [k for k in _REQUIRED_KEYS if batch.get(k) is None]
    if missing:
        raise ValueError(f"batch lacks {', '.join(map(repr, missing))}: take_rows needs {list(_REQUIRED_KEYS)} "
                         "(the output of GRPOTrainer._generate_and_score_completions)")
    _check_layout(batch)
    n = batch["completion_ids"].shape[0]
    rows = row_indices("rows", rows)
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n):
        raise ValueError(f"rows must be local indices in [0, {n}); got {rows.tolist()}")
    if rows.unique().numel() != rows.numel():
        raise ValueError(f"rows must be distinct (a repeated row would be trained on twice); got {rows.tolist()}")
    rows_min = _integer_or_none(min_rows, 0)
    if rows_min is None or rows_min % multiple:
        raise ValueError(f"min_rows must be a non-negative multiple of {multiple}; got {min_rows!r}")
    min_rows = rows_min
    m = rows.numel()
    total = max(padded_row_count(m, multiple), min_rows)
    n_pad = total - m
    # Placeholders copy a kept row (or row 0 when nothing is kept here) so that no extra column is needed.
    template = rows[:1] if m else torch.zeros(1, dtype=torch.long)
    index = torch.cat([rows, template.repeat(n_pad)]).to(batch["completion_ids"].device)
    real = torch.arange(total, device=index.device) < m  # [total], False on placeholders

    # Same key order as the input: TRL's shuffle reads the batch size from the first non-None value.
    out: dict = {}
    p_lo, p_hi = _span(batch["prompt_mask"].index_select(0, index))
    # Completions are right-padded: keep columns up to the last real token of a kept row (at least one column,
    # because TRL scores logits_to_keep = Tc positions and an empty completion block would break it).
    c_mask = batch["completion_mask"].index_select(0, index) * real[:, None].to(batch["completion_mask"].dtype)
    c_hi = max(_span(c_mask)[1], 1)
    t_c = batch["completion_ids"].shape[1]
    for key, value in batch.items():
        if value is None or key in _SCALAR_KEYS:
            out[key] = value
            continue
        sel = value.index_select(0, index)
        if key in PROMPT_KEYS:
            sel = sel[:, p_lo:p_hi]
        elif key in COMPLETION_KEYS and sel.dim() == 2 and value.shape[1] == t_c:
            sel = sel[:, :c_hi]
        out[key] = sel.contiguous()
    if n_pad:
        keep = real.to(out["completion_mask"].dtype)[:, None]
        out["completion_mask"] = out["completion_mask"] * keep
        if out.get("tool_mask") is not None:
            out["tool_mask"] = out["tool_mask"] * keep.to(out["tool_mask"].dtype)
        out["advantages"] = torch.where(real, out["advantages"], torch.zeros_like(out["advantages"]))
    return out, n_pad


def _check_layout(batch: dict) -> None:
    """Check that every tensor of a generation batch has the layout of the module docstring (ValueError/TypeError
    naming the key): ``[n, Tp]`` for the prompt keys, ``[n, Tc]`` for the completion keys
    (``importance_sampling_ratio`` also ``[n, 1]``), ``[n]`` for ``advantages``. A per-token entry of another
    width would be cut at the wrong column, or not at all, and misalign with ``completion_mask`` in TRL's loss."""
    for key, value in batch.items():
        if value is not None and key not in _SCALAR_KEYS and not isinstance(value, torch.Tensor):
            raise TypeError(f"batch[{key!r}] must be a torch.Tensor; got {type(value).__name__}")
    n = batch["completion_ids"].shape[0]
    for key, value in batch.items():
        if value is not None and key not in _SCALAR_KEYS and (value.dim() == 0 or value.shape[0] != n):
            rows_of = value.shape[0] if value.dim() else 0
            raise ValueError(f"batch[{key!r}] has {rows_of} rows; completion_ids has {n} (every entry is [n, ...])")
    for keys, ref in ((PROMPT_KEYS, "prompt_mask"), (COMPLETION_KEYS, "completion_ids")):
        width = batch[ref].shape[1] if batch[ref].dim() == 2 else None
        for key in keys:
            value = batch.get(key)
            if value is None:
                continue
            allowed = (width, 1) if key == "importance_sampling_ratio" else (width,)
            if value.dim() != 2 or width is None or value.shape[1] not in allowed:
                want = " or ".join(f"[{n}, {w}]" for w in allowed) if width is not None else f"[{n}, T]"
                raise ValueError(f"batch[{key!r}] has shape {tuple(value.shape)}; expected {want} "
                                 f"(aligned with {ref})")
    for key in ROW_KEYS:
        value = batch.get(key)
        if value is not None and value.dim() != 1:
            raise ValueError(f"batch[{key!r}] has shape {tuple(value.shape)}; expected [{n}] (one value per row)")


def batch_level_advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    group_size: int,
    row_mask: torch.Tensor,
    aggregation: str,
    scale_rewards: str,
) -> torch.Tensor:
    """Advantages of the kept rows when TRL normalises with *batch* statistics, recomputed over kept rows only.

    With ``scale_rewards="group"`` or ``"none"`` TRL's advantages depend on the group alone and are unchanged by
    removing other groups; with batch statistics they are not, so they are recomputed here as if the batch had
    held only the kept groups (the order of ``ragen_core``'s trainer: filter, then advantages). With
    ``R = group_rewards(...)``, ``s`` the NaN-aware sample std (Bessel-corrected) over kept rows:

        sum_then_normalize, scale_rewards="batch":  A = (R - mean_group(R)) / (s(R) + 1e-4)
        normalize_then_sum:  Z_f = (r_f - mean_group(r_f)) / (std_group(r_f) + 1e-4),  R' = sum_f w_f Z_f,
                             A = (R' - mean(R')) / (s(R') + 1e-4)

    Args:
        rewards_per_func: ``[N, F]`` gathered rewards (NaN for ``None``).
        weights: ``[F]`` finite weights.
        group_size: G, dividing N.
        row_mask: BoolTensor ``[N]``, True on rows of kept groups.
        aggregation: ``"sum_then_normalize"`` or ``"normalize_then_sum"``.
        scale_rewards: ``"batch"``, ``"group"`` or ``"none"``.
        Any other value raises ValueError (TypeError for a row_mask that is not boolean) naming it.

    Returns:
        ``[N]`` advantages (meaningful on kept rows; NaN rewards give 0, as in TRL), float32 for integer and 16-bit
        rewards, else the rewards' dtype; or None when TRL's own advantages are already independent of the other
        groups.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"multi_objective_aggregation must be one of {', '.join(map(repr, AGGREGATIONS))}; "
                         f"got {aggregation!r}")
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {', '.join(map(repr, SCALE_REWARDS))}; "
                         f"got {scale_rewards!r}")
    # widen: float16/bfloat16 rewards are normalised in float32 (the batch std of rewards of 40000 is inf in
    # float16), as group_rewards sums them; float32 and float64 rewards are computed in their own dtype.
    rewards_per_func, w = _check_rewards(rewards_per_func, weights, group_size, widen=True)
    group_size = int(group_size)
    n, f = rewards_per_func.shape
    row_mask = bool_mask("row_mask", row_mask)
    if row_mask.numel() != n:
        raise ValueError(f"row_mask must have N={n} entries (one per row); got shape {tuple(row_mask.shape)}")
    if aggregation == "sum_then_normalize" and scale_rewards != "batch":
        return None
    w = w.reshape(1, -1)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * w).nansum(dim=1).masked_fill(unscorable, torch.nan)
        grouped = rewards.reshape(-1, group_size)
        centred = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)).reshape(-1)
        kept = rewards.masked_fill(~row_mask.to(rewards.device), torch.nan)
    else:
        grouped = rewards_per_func.reshape(-1, group_size, f)
        z = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (_nanstd(grouped, dim=1) + 1e-4)
        rewards = (z.reshape(n, f) * w).nansum(dim=1).masked_fill(unscorable, torch.nan)
        kept = rewards.masked_fill(~row_mask.to(rewards.device), torch.nan)
        centred = rewards - torch.nanmean(kept)
    advantages = centred / (_nanstd(kept, dim=0) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def _nanstd(x: torch.Tensor, dim: int) -> torch.Tensor:
    """NaN-aware sample std along ``dim`` (kept as a size-1 dim when ``x`` has more than one), NaN below 2 values."""
    keep = x.dim() > 1
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = torch.nansum((x - mean) ** 2, dim=dim, keepdim=True) / (count - 1).clamp(min=1)
    std = torch.where(count > 1, var.sqrt(), torch.full_like(var, torch.nan))
    return std if keep else std.reshape(())
