"""Advantage estimators and loss aggregation (docs/science.md section 3 and section 6's algorithms).

- :func:`gae`: generalised advantage estimation over token sequences (PPO; official defaults gamma = lambda = 1).
- :func:`grpo`: group-normalised outcome advantages (GRPO).
- :func:`dr_grpo`: GRPO without the std normalisation (Dr.GRPO; pair it with the constant length
  normaliser ``loss_agg_mode="seq-mean-token-sum-norm"``).
- :func:`rloo`: REINFORCE leave-one-out baseline.
- :func:`aggregate_loss`: the four loss aggregation modes, named as verl names them.

In the notation of docs/science.md section 3 the advantage is ``A = R - b(x)`` with ``b(x)`` an estimate of
``E[R | x]``; every estimator here differs only in the baseline and the normalisation.

Every tensor argument may also be an ndarray or nested lists of numbers (read by ``torch.as_tensor``; what torch
cannot read is one ValueError naming the argument), and 16-bit floats (float16, bfloat16) are computed in float32:
the result is float32 for them, the input's own dtype for float32 and float64 (unchanged, bit for bit).
"""

from __future__ import annotations

import numpy as np
import torch

from ragen_core.math._args import as_number, as_tensor, is_bool

__all__ = [
    "LOSS_AGG_MODES",
    "TRAJ_MEAN",
    "TRAINER_LOSS_AGG_MODES",
    "trajectory_token_weights",
    "gae",
    "grpo",
    "dr_grpo",
    "rloo",
    "expand_to_tokens",
    "place_on_last_token",
    "masked_mean",
    "masked_whiten",
    "aggregate_loss",
    "check_same_shape",
    "zero_outside",
]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
#: Each *episode* weighs the same, whatever its number of turns and tokens (see trajectory_token_weights). It
#: needs the row -> trajectory map, so the trainer applies it as token weights under token-mean.
TRAJ_MEAN = "traj-mean-token-mean"
#: What `algo.loss_agg_mode` accepts (besides "auto").
TRAINER_LOSS_AGG_MODES = (*LOSS_AGG_MODES, TRAJ_MEAN)


def _check_unit_interval(name: str, value: float) -> float:
    return as_number(name, value, 0.0, 1.0)


def _check_switch(name: str, value: bool) -> bool:
    if not is_bool(value) or isinstance(value, (torch.Tensor, np.ndarray)):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise ValueError listing the shapes unless every named tensor has the same shape (shared with losses)."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"shapes must match: {shapes}")


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over token sequences (Schulman et al. 2016; PPO in docs/science.md section 6).

    Over the valid tokens t_1 < t_2 < ... < t_n of a row (``mask != 0``; gaps such as environment
    observation tokens in a multi-turn trajectory are skipped, so "next" means the next valid token):

        delta_t = r_t + gamma * V_{next(t)} - V_t          (V after the last valid token = 0)
        A_t     = delta_t + gamma * lam * A_{next(t)}
        R_t     = A_t + V_t                                (returns, the value target)

    Args:
        rewards: ``[B, T]`` per-token rewards, or ``[B]`` per-sequence rewards, which are placed on the last
            valid token of each row (the default for outcome rewards).
        values: ``[B, T]`` value estimates V_t.
        mask: ``[B, T]`` response mask (non-zero = token is part of the policy's output).
        gamma: discount in [0, 1] (official default 1).
        lam: GAE lambda in [0, 1] (official default 1).

    Returns:
        ``(advantages, returns)``, both ``[B, T]``, zero on masked positions: float32 for integer and 16-bit inputs
        (a float16 return sums to inf past 65504), else the promoted dtype of ``rewards`` and ``values``.
    """
    rewards = as_tensor("rewards", rewards, "[B, T] or [B]")
    values = as_tensor("values", values, "[B, T]")
    mask = as_tensor("mask", mask, "[B, T]")
    if values.dim() != 2:
        raise ValueError(f"values must be [B, T]; got shape {tuple(values.shape)}")
    check_same_shape(values=values, mask=mask)
    gamma = _check_unit_interval("gamma", gamma)
    lam = _check_unit_interval("lam", lam)
    m = mask != 0
    if rewards.dim() == 1:
        if rewards.shape[0] != values.shape[0]:
            raise ValueError(f"rewards [B] must have B={values.shape[0]} entries; got {rewards.shape[0]}")
        rewards = place_on_last_token(rewards, m)
    check_same_shape(rewards=rewards, values=values)
    dtype = torch.promote_types(values.dtype, rewards.dtype)
    # Integer rewards and values: the discounted sums are fractions. 16-bit ones: computed in float32, as grpo does.
    dtype = _accumulation_dtype(dtype) if dtype.is_floating_point else torch.float32
    r = rewards.to(dtype)
    v = values.to(dtype).detach()
    b, t = v.shape
    adv = torch.zeros_like(v)
    next_value = torch.zeros(b, dtype=dtype, device=v.device)
    next_adv = torch.zeros(b, dtype=dtype, device=v.device)
    for i in range(t - 1, -1, -1):
        valid = m[:, i]
        delta = r[:, i] + gamma * next_value - v[:, i]
        a = delta + gamma * lam * next_adv
        adv[:, i] = torch.where(valid, a, torch.zeros_like(a))
        # Masked positions carry the "next" quantities through unchanged.
        next_adv = torch.where(valid, a, next_adv)
        next_value = torch.where(valid, v[:, i], next_value)
    returns = torch.where(m, adv + v, torch.zeros_like(adv))
    return adv, returns


def place_on_last_token(seq_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put a per-sequence reward ``[B]`` on the last valid token of each row of ``mask`` ``[B, T]``.

    Returns a ``[B, T]`` tensor, zero elsewhere (rows without a valid token get nothing).
    """
    seq_rewards = as_tensor("seq_rewards", seq_rewards, "[B]")
    m = as_tensor("mask", mask, "[B, T]") != 0
    if m.dim() != 2:
        raise ValueError(f"mask must be [B, T]; got shape {tuple(m.shape)}")
    b, t = m.shape
    if seq_rewards.dim() != 1 or seq_rewards.shape[0] != b:
        raise ValueError(f"seq_rewards must be [B] with B={b} entries (mask's rows); got shape "
                         f"{tuple(seq_rewards.shape)}")
    if t == 0:  # no token to put a reward on: every row gets nothing, as a row without a valid token does
        return torch.zeros(b, 0, dtype=seq_rewards.dtype if seq_rewards.is_floating_point() else torch.float32,
                           device=m.device)
    pos = torch.arange(t, device=m.device).expand(b, t)
    last = torch.where(m, pos, torch.full_like(pos, -1)).max(dim=1).values
    out = torch.zeros(b, t, dtype=seq_rewards.dtype if seq_rewards.is_floating_point() else torch.float32,
                      device=m.device)
    rows = (last >= 0).nonzero().flatten()
    out[rows, last[rows]] = seq_rewards[rows].to(out.dtype)
    return out


def _check_group_rewards(rewards: torch.Tensor, min_g: int, why: str) -> torch.Tensor:
    """``rewards`` ``[P, G]`` as a float tensor: integers and bools become float32, and so do float16 and bfloat16
    (a group's sum overflows them: rloo of [30000, 40000, 0] in float16 was all -inf); float32 and float64 stay."""
    if not isinstance(rewards, torch.Tensor):
        try:
            rewards = torch.as_tensor(rewards)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError("rewards must be a [P, G] tensor or nested lists of numbers; got "
                             f"{type(rewards).__name__} that is neither") from None
    if rewards.is_complex():
        raise ValueError(f"rewards must be real numbers; got dtype {rewards.dtype}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [P, G] (P groups x G rollouts); got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < min_g:
        raise ValueError(f"rewards needs G >= {min_g} rollouts per group {why}; got G={rewards.shape[1]}")
    r = rewards.to(_accumulation_dtype(rewards.dtype)) if rewards.is_floating_point() else rewards.to(torch.float32)
    bad = ~torch.isfinite(r)
    if bool(bad.any()):
        # A NaN or inf reward has no advantage: grpo used to read its group as flat (A = 0 for every rollout)
        # while dr_grpo and rloo returned NaN; every estimator now refuses it the same way.
        groups = sorted({int(i) for i in bad.nonzero()[:, 0].tolist()})
        raise ValueError(f"rewards must be finite; group(s) {groups[:8]}{' ...' if len(groups) > 8 else ''} "
                         f"hold NaN or inf (drop those groups first, e.g. with ragen_core.math.filtering)")
    return r


def grpo(rewards: torch.Tensor, norm_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO outcome advantages (Shao et al. 2024).

        A_ik = (R_ik - mean_k R_ik) / (std_k R_ik + eps)     (std with ddof = 1, as torch.std / verl)

    With ``norm_by_std=False`` this is Dr.GRPO's ``A_ik = R_ik - mean_k R_ik``.

    Args:
        rewards: ``[P, G]`` outcome rewards (a tensor or nested lists; integers, float16 and bfloat16 are computed
            in float32).
        norm_by_std: divide by the group standard deviation (needs G >= 2); True or False.
        eps: finite constant >= 0 added to the std (zero-variance groups get A = 0).

    Returns:
        ``[P, G]`` advantages (broadcast to tokens with :func:`expand_to_tokens`): float32, or float64 for float64
        rewards.
    """
    eps = as_number("eps", eps, 0.0)  # a bool, a string, NaN or inf (which made every advantage 0) raise
    norm_by_std = _check_switch("norm_by_std", norm_by_std)
    r = _check_group_rewards(rewards, 2 if norm_by_std else 1, "to normalise by the std")
    centred = r - r.mean(dim=1, keepdim=True)
    if not norm_by_std:
        return centred
    den = r.std(dim=1, keepdim=True) + eps
    # A zero-variance group (every reward equal) gets A = 0, also at eps = 0. Tested on the rewards themselves:
    # the mean of equal non-dyadic rewards (0.1, 0.1, 0.1) is rounded, so centred and std are ~1e-17 instead of
    # 0 and their ratio is +-0.82, not 0; and 0 / 0 would be NaN and poison the whole loss.
    flat = (r == r[:, :1]).all(dim=1, keepdim=True) | ~(den > 0)
    return torch.where(flat, torch.zeros_like(centred), centred / torch.where(flat, torch.ones_like(den), den))


def dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    """Dr.GRPO advantages (Liu et al. 2025): ``A_ik = R_ik - mean_k R_ik``, no std normalisation.

    Use with ``aggregate_loss(..., mode="seq-mean-token-sum-norm")`` (a constant length normaliser instead of
    the per-sequence length). ``rewards`` ``[P, G]`` -> ``[P, G]``.
    """
    return grpo(rewards, norm_by_std=False)


def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out advantages (Ahmadian et al. 2024).

        A_ik = R_ik - 1/(G-1) * sum_{k' != k} R_ik' = G/(G-1) * (R_ik - mean_k R_ik)

    ``rewards`` ``[P, G]`` with G >= 2 -> ``[P, G]``.
    """
    r = _check_group_rewards(rewards, 2, "for a leave-one-out baseline")
    g = r.shape[1]
    loo_mean = (r.sum(dim=1, keepdim=True) - r) / (g - 1)
    return r - loo_mean


def expand_to_tokens(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast per-sequence advantages to tokens.

    Args:
        advantages: ``[P, G]`` (group-major, row ``i * G + k``) or ``[B]``.
        mask: ``[B, T]`` response mask.

    Returns:
        ``[B, T]``: ``A_b`` on valid tokens, 0 elsewhere.
    """
    a = as_tensor("advantages", advantages, "[P, G] or [B]").reshape(-1)
    mask = as_tensor("mask", mask, "[B, T]")
    if mask.dim() != 2:
        raise ValueError(f"mask must be [B, T]; got shape {tuple(mask.shape)}")
    if a.shape[0] != mask.shape[0]:
        raise ValueError(f"advantages hold {a.shape[0]} sequences but mask has B={mask.shape[0]} rows")
    return a[:, None] * (mask != 0).to(a.dtype)


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype that masked sums and token counts are taken in: float32 for 16-bit floats (a float16 count
    overflows to inf at 65520 tokens), else the input's own (so float32 and float64 results are unchanged)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def zero_outside(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``x`` where ``keep`` (bool), exactly 0 elsewhere: masked entries never reach a sum, NaN and inf
    included (``x * m`` made NaN * 0 = NaN of a NaN on padding), and their gradient is 0."""
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(x * m) / sum(m)`` over ``dim`` (all elements when None); ``x``, ``mask`` same shape. Masked
    entries are left out whatever they hold (NaN, inf); 16-bit inputs are summed and counted in float32 (and
    the mean is float32)."""
    x = as_tensor("x", x, "matching mask")
    keep = as_tensor("mask", mask, "matching x") != 0
    check_same_shape(x=x, mask=keep)  # a broadcast mask would count its entries once, not once per x entry
    acc = _accumulation_dtype(x.dtype) if x.is_floating_point() else torch.float32
    xm = zero_outside(x.to(acc), keep)
    if dim is None:
        return xm.sum() / keep.sum(dtype=acc)
    return xm.sum(dim=dim) / keep.sum(dim=dim, dtype=acc)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """Whiten ``x`` over its valid entries: ``(x - mean) / sqrt(var + eps)`` (population var), masked -> 0.

    ``x``, ``mask``: ``[B, T]``. With ``shift_mean=False`` the mean is added back (PPO-style value whitening).
    """
    shift_mean = _check_switch("shift_mean", shift_mean)
    eps = as_number("eps", eps, 0.0)
    x = as_tensor("x", x, "[B, T]")
    m = as_tensor("mask", mask, "[B, T]") != 0
    check_same_shape(x=x, mask=m)
    if x.dtype == torch.bool:
        raise ValueError("x must be real numbers, not bools; got dtype torch.bool")
    mean = masked_mean(x, m)
    var = masked_mean((x - mean) ** 2, m)
    w = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        w = w + mean
    return torch.where(m, w, torch.zeros_like(w))


def trajectory_token_weights(row_traj: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Token weights ``[R, T]`` under which token-mean becomes the mean over trajectories of their token-means.

    With m the mask, N = sum m, n_k the tokens of trajectory k (over all its rows: one row per turn in the
    ``single_turn`` and ``window:N`` contexts) and K the trajectories with at least one token:

        w_bt = m_bt * N / (K * n_k(b)),   so   sum_bt w_bt l_bt / N = 1/K sum_k (1/n_k) sum_{(b,t) in k} l_bt.

    Why: under token-mean an episode's weight is its token count. When failures are longer than successes
    (a FrozenLake episode that times out runs every turn), zero-mean group advantages (GRPO) still push away
    from the model's own samples on balance (the per-token advantage mean was -0.15 to -0.21 on every step),
    which wears down the answer format. With these weights the push of a group sums to zero. For PPO's
    clipped loss a positive weight folded into the advantage is exactly a reweighting of the token's loss
    (``min(r w A, clip(r) w A) = w min(r A, clip(r) A)``, and likewise for the dual clip).

    Args:
        row_traj: LongTensor ``[R]``, the trajectory of each row.
        loss_mask: ``[R, T]`` response mask.

    Returns:
        float32 tensor ``[R, T]``, zero off the mask; all zeros when the mask is empty.
    """
    row_traj = as_tensor("row_traj", row_traj, "[R]")
    loss_mask = as_tensor("loss_mask", loss_mask, "[R, T]")
    if row_traj.dim() != 1 or loss_mask.dim() != 2 or row_traj.shape[0] != loss_mask.shape[0]:
        raise ValueError(f"row_traj must be [R] and loss_mask [R, T]; got {tuple(row_traj.shape)} and "
                         f"{tuple(loss_mask.shape)}")
    m = (loss_mask != 0).to(torch.float32)
    per_row = m.sum(dim=1)
    ids, inverse = torch.unique(row_traj, return_inverse=True)
    per_traj = torch.zeros(ids.numel(), dtype=torch.float32).index_add_(0, inverse, per_row)
    k = int((per_traj > 0).sum())
    if k == 0:
        return torch.zeros_like(m)
    scale = per_row.sum() / (k * per_traj.clamp(min=1.0))
    return m * scale[inverse][:, None]


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    norm_constant: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss ``[B, T]`` into a scalar, with the modes as verl names them.

    With m the mask, n_b = sum_t m_bt and B' the rows having at least one valid token:

    - ``token-mean``:               sum_bt l*m / sum_bt m
    - ``seq-mean-token-mean``:      1/B' sum_b (sum_t l*m / n_b)
    - ``seq-mean-token-sum``:       1/B' sum_b sum_t l*m
    - ``seq-mean-token-sum-norm``:  1/B' sum_b sum_t l*m / C,  C = ``norm_constant`` (default T, the
      horizon), Dr.GRPO's constant length normaliser. verl's version divides the total by C without the
      1/B'; ours is that divided by the number of sequences, as in the Dr.GRPO paper.

    Rows without any valid token are left out of the sequence means (verl would produce NaN for them). Masked
    entries are left out whatever they hold (NaN or inf on padding gives neither a NaN loss nor a NaN gradient).
    16-bit losses are summed and counted in float32, and the result is float32 (a float16 token count overflows
    at 65520 tokens).

    Args:
        loss_mat: ``[B, T]`` per-token loss.
        mask: ``[B, T]`` response mask.
        mode: one of ``LOSS_AGG_MODES``.
        norm_constant: positive finite constant for ``seq-mean-token-sum-norm`` (a bool, a string or inf raise).

    Returns:
        scalar tensor (0 when there is no valid token).
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"mode must be one of {', '.join(repr(m) for m in LOSS_AGG_MODES)}; got {mode!r}")
    loss_mat = as_tensor("loss_mat", loss_mat, "[B, T]")
    mask = as_tensor("mask", mask, "[B, T]")
    check_same_shape(loss_mat=loss_mat, mask=mask)
    if loss_mat.dim() != 2:
        raise ValueError(f"loss_mat must be [B, T]; got shape {tuple(loss_mat.shape)}")
    keep = mask != 0
    acc = _accumulation_dtype(loss_mat.dtype) if loss_mat.is_floating_point() else torch.float32
    lm = zero_outside(loss_mat.to(acc), keep)
    n_tok = keep.sum(dim=1, dtype=acc)
    rows = n_tok > 0
    n_rows = rows.sum()
    if int(n_rows) == 0:
        return lm.sum()  # 0, still attached to the graph
    if mode == "token-mean":
        return lm.sum() / n_tok.sum()
    seq_sum = lm.sum(dim=1)
    if mode == "seq-mean-token-sum":
        return seq_sum[rows].sum() / n_rows
    if mode == "seq-mean-token-mean":
        return (seq_sum[rows] / n_tok[rows]).sum() / n_rows
    if norm_constant is None:
        c = float(loss_mat.shape[1])
    else:
        try:
            c = as_number("norm_constant", norm_constant, 0.0, low_open=True)
        except ValueError:
            raise ValueError(f"norm_constant must be a finite number > 0 (not a bool or a string); got "
                             f"{norm_constant!r}") from None
    return seq_sum[rows].sum() / (c * n_rows)
