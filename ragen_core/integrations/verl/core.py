"""The pure half of the verl adapter: group filtering, physical removal and advantages on verl-shaped batches.

Nothing here imports verl: every function takes plain torch tensors and numpy arrays shaped as verl's
``DataProto`` holds them, so it is tested on CPU without verl and reused by the thin glue in
``ragen_core.integrations.verl``. It also holds what the glue modules share (the names they register under,
:func:`filter_spec_from_algorithm`, the per-step generator of the random strategy and :class:`StepHandoff`), so
that ``verl`` (``register``) imports ``trainer`` and ``agent`` and neither imports it back.

A verl batch is row-major, not group-major: B rows, each with

- ``token_level_rewards`` (or ``token_level_scores`` / ``rm_scores``) ``[B, T]``: the outcome reward sits on the
  last response token, the rest is 0;
- ``response_mask`` ``[B, T]``: 1 on tokens the policy generated (0 on padding and on env/tool tokens);
- ``uid`` ``[B]`` (``non_tensor_batch["uid"]``): one id per prompt; the rows of one group share it and need not be
  contiguous.

The per-row return is ``R_b = sum_t r_bt * 1[m_bt != 0]`` and the groups are the distinct uids in first-seen
order (group i is the i-th new uid met scanning rows 0..B-1), so ties in the ranking of
:func:`ragen_core.math.filtering.select_groups` go to the group seen first, as in verl PR #7894.

Per group i with live rows L_i = {b : uid_b = u_i, sum_t m_bt > 0} (a row with no response token carries no
sample, as in PR #7894) and n_i = |L_i|:

    V_i = 1/(n_i - ddof) * sum_{b in L_i} (R_b - mean_{L_i} R)^2     if n_i > ddof
    V_i = 0                                                         if n_i <= ddof (no contrast; PR #7894)
    V_i = NaN                                                       if some R_b, b in L_i, is NaN or +-inf

A NaN group is never kept (``ragen_core.math.filtering``); PR #7894 instead drops the non-finite rows and keeps the
group's finite rows, which would rank a group by a reward it did not fully receive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from ragen_core.integrations._checks import id_list, row_indices
from ragen_core.math import advantages as adv_mod
from ragen_core.math import filtering
from ragen_core.math._args import as_integer
from ragen_core.math.filtering import (
    FilterResult,
    FilterSpecError,
    check_bool,
    check_choice,
    check_ddof,
    check_non_negative,
    select_groups,
)
from ragen_core.training.algorithms import ALGORITHMS
from ragen_envs.validation import require_int

__all__ = [
    "MODES",
    "ESTIMATORS",
    "FilterSpec",
    "RowFilterResult",
    "sequence_rewards",
    "group_rows",
    "group_variances",
    "filter_rows",
    "select_rows",
    "group_advantages",
    "masked_group_advantages",
    "ADV_ESTIMATOR_NAME",
    "TRAINER_MODE",
    "AGENT_LOOP_NAME",
    "filter_spec_from_algorithm",
    "MISettings",
    "mi_settings_from_algorithm",
    "random_generator",
    "StepHandoff",
]

#: ``"remove"``: dropped groups leave the batch (the point of the method); ``"mask"``: their advantages are 0
#: (what an advantage estimator alone can do, and what PR #7894 does).
MODES = ("remove", "mask")
#: The advantage estimators of the kept groups: the entries of the algorithm table
#: (``ragen_core.training.algorithms.ALGORITHMS``) that have a group advantage (grpo, dr_grpo, dapo's = grpo's, rloo).
ESTIMATORS = tuple(name for name, algo in ALGORITHMS.items() if algo.group_advantage is not None)

# Stride of FilterSpec.seed in the per-step seed: (seed, step) pairs with 0 <= step < 1_000_003 never collide.
_SEED_STRIDE = 1_000_003
#: Largest ``ragen_filter.seed``: every per-step seed ``seed * 1_000_003 + step`` (step < 1_000_003) stays below
#: 2**64, the range of a torch.Generator seed.
MAX_FILTER_SEED = (2**64 - 1) // _SEED_STRIDE - 1

# PR #7894's config names -> ours; "top_p"/"top_k" are handled apart because they also carry the value.
_ALIASES = {"variance_ddof": "ddof", "selection_eps": "eps"}


def _check_seed(seed: Any) -> int:
    """``seed`` as an int (a numpy integer too; not a bool) that :func:`random_generator` can seed every step
    with: ``0 <= seed <= MAX_FILTER_SEED``. A negative seed aliased a positive one (torch reads -1 as 2**64 - 1)
    and a larger one overflowed torch's seed at the first step ("Overflow when unpacking long long")."""
    try:
        value = as_integer("seed", seed, 0)
    except ValueError:
        value = None
    if value is None or value > MAX_FILTER_SEED:
        raise FilterSpecError("seed", f"must be an integer in [0, {MAX_FILTER_SEED}]; got {seed!r}")
    return value


@dataclass(frozen=True)
class FilterSpec(filtering.FilterSpec):
    """What to keep and how, read from a verl config section (``algorithm.ragen_filter``).

    The filter's own settings are those of :class:`ragen_core.math.filtering.FilterSpec`, inherited with their
    defaults and checks (``strategy``, ``value``, ``score``, ``include_zero``, ``order``, ``ddof``, ``eps``);
    this adds the adapter's fields. A bad setting raises ``FilterSpecError`` (a ValueError) naming it
    ``ragen_filter.<field>``.

    Attributes:
        mode: one of ``MODES``.
        estimator: one of ``ESTIMATORS``, the advantage of the kept groups.
        norm_eps: constant added to the group std by ``grpo`` (verl's ``epsilon``, 1e-6).
        seed: seed of the generator of ``strategy="random"`` (combined with the step by the glue).
        enable: False turns the filter off (every group kept).
    """

    mode: str = "remove"
    estimator: str = "grpo"
    norm_eps: float = 1e-6
    seed: int = 0
    enable: bool = True

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
            check_choice("mode", self.mode, MODES)
            check_choice("estimator", self.estimator, ESTIMATORS)
            object.__setattr__(self, "norm_eps", check_non_negative("norm_eps", self.norm_eps))
            object.__setattr__(self, "seed", _check_seed(self.seed))
            check_bool("enable", self.enable)
        except FilterSpecError as e:
            raise e.renamed(f"ragen_filter.{e.field}") from None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> FilterSpec:
        """Build from a mapping (an OmegaConf ``DictConfig`` works), with our names or PR #7894's.

        PR #7894's names are accepted: ``top_p: 0.9`` (with ``strategy: top_p``), ``top_k: 4`` (with
        ``strategy: top_k``: a count, our ``top_k_abs``), ``variance_ddof``, ``selection_eps``. Its defaults
        are not: ours stay (``include_zero=True``, ``eps=0``); :meth:`pr7894_defaults` gives its own. Unknown
        keys are errors, and so is a section that is not a mapping (TypeError).
        """
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"ragen_filter must be a mapping of filter settings (e.g. {{strategy: top_p, value: 0.9}}) "
                            f"or None; got {type(config).__name__} {config!r:.40}")
        raw = dict(config or {})
        known = {f.name for f in fields(cls)}
        out: dict[str, Any] = {}
        strategy = raw.pop("strategy", "top_p")
        pr_value = {k: raw.pop(k) for k in ("top_p", "top_k") if k in raw}
        for key, value in raw.items():
            name = _ALIASES.get(key, key)
            if name not in known or name == "strategy":
                raise ValueError(f"unknown ragen_filter key {key!r}; known keys: {sorted(known | set(_ALIASES))}, "
                                 "top_p, top_k")
            if name in out:
                raise ValueError(f"ragen_filter sets {name!r} twice (as {key!r} and its alias)")
            out[name] = value
        if pr_value:
            if "value" in out:
                raise ValueError(f"ragen_filter sets both 'value' and {sorted(pr_value)}; use one of them")
            if strategy == "top_k" and "top_k" in pr_value:
                strategy, out["value"] = "top_k_abs", pr_value["top_k"]
            elif strategy == "top_p" and "top_p" in pr_value:
                out["value"] = pr_value["top_p"]
            else:
                raise ValueError(f"ragen_filter keys {sorted(pr_value)} do not match strategy={strategy!r} "
                                 "(top_p goes with strategy top_p, top_k with strategy top_k)")
        return cls(strategy=strategy, **out)

    @classmethod
    def pr7894_defaults(cls, **overrides: Any) -> FilterSpec:
        """The defaults of verl PR #7894 (top-p 0.9, ``include_zero=False``, ``selection_eps=0.01``, ddof 1)."""
        base = {"strategy": "top_p", "value": 0.9, "include_zero": False, "eps": 0.01, "ddof": 1}
        base.update(overrides)
        return cls(**base)


@dataclass(frozen=True)
class RowFilterResult:
    """:func:`filter_rows` output.

    Attributes:
        groups: the :class:`ragen_core.math.filtering.FilterResult` over the P groups (first-seen uid order).
        group_uids: the P uids, index i = group i.
        group_of_row: LongTensor ``[B]``, the group of each row.
        row_mask: BoolTensor ``[B]``, rows of kept groups.
        rows: LongTensor ``[n_rows]``, the kept rows in their original order (for ``DataProto.select_idxs``).
        variances: float64 ``[P]`` per-group reward variances (NaN for NaN groups).
    """

    groups: FilterResult
    group_uids: list[Any]
    group_of_row: torch.Tensor
    row_mask: torch.Tensor
    rows: torch.Tensor
    variances: torch.Tensor

    @property
    def empty(self) -> bool:
        """Nothing kept: skip the update (``ragen_core.math.filtering``)."""
        return self.groups.empty

    def metrics(self, prefix: str = "ragen_filter/") -> dict[str, float]:
        """The filter statistics of ``FilterResult.as_metrics`` plus rows and the kept share of variance mass."""
        out = self.groups.as_metrics(prefix)
        v = torch.nan_to_num(self.variances, nan=0.0)
        total = float(v.sum())
        out[f"{prefix}rows_before"] = float(self.row_mask.numel())
        out[f"{prefix}rows_kept"] = float(self.rows.numel())
        out[f"{prefix}selected_variance_ratio"] = float(v[self.groups.mask].sum()) / total if total > 0 else 0.0
        return out


def _as_2d(name: str, x: Any) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor [B, T]; got shape {tuple(t.shape)}")
    return t


def sequence_rewards(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-row return ``R_b = sum_t r_bt * 1[m_bt != 0]`` in float64.

    Args:
        token_level_rewards: ``[B, T]``.
        response_mask: ``[B, T]`` (non-zero = generated token).

    Returns:
        float64 ``[B]``. A NaN on a masked-out position is ignored (``where``, not ``r * m``: NaN * 0 is NaN).
    """
    r = _as_2d("token_level_rewards", token_level_rewards)
    m = _as_2d("response_mask", response_mask)
    if r.shape != m.shape:
        raise ValueError(f"token_level_rewards {tuple(r.shape)} and response_mask {tuple(m.shape)} must match")
    r = r.to(torch.float64)
    return torch.where(m != 0, r, torch.zeros_like(r)).sum(dim=1)


def group_rows(uids: Sequence[Any] | np.ndarray | torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
    """Group rows by uid, groups numbered in first-seen order.

    Args:
        uids: ``[B]`` hashable ids (verl's ``non_tensor_batch["uid"]``, an object array of str); a string, a
            single value or a mapping raises TypeError (a string's characters are not ids), a NaN id ValueError.

    Returns:
        ``(group_of_row, group_uids)``: LongTensor ``[B]`` and the P distinct uids (index = group number).
    """
    ids = id_list("uids", uids)
    if not ids:
        raise ValueError("uids must hold at least one row (B >= 1)")
    codes: dict[Any, int] = {}
    try:
        group = [codes.setdefault(u, len(codes)) for u in ids]
    except TypeError as exc:
        raise ValueError(f"uids must be hashable (strings or ints); got {type(ids[0]).__name__}") from exc
    return torch.tensor(group, dtype=torch.long), list(codes)


def group_variances(
    rewards: torch.Tensor,
    group_of_row: torch.Tensor,
    n_groups: int,
    ddof: int = 1,
    live: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-group sample variance of the live rows (module docstring): float64 ``[P]``.

    Args:
        rewards: ``[B]`` per-row returns.
        group_of_row: LongTensor ``[B]`` in ``[0, n_groups)``.
        n_groups: P.
        ddof: delta degrees of freedom (1: the paper's sample variance).
        live: optional BoolTensor ``[B]``; rows that are False are left out.
    """
    r = torch.as_tensor(rewards).to(torch.float64).reshape(-1)
    g = torch.as_tensor(group_of_row, dtype=torch.long).reshape(-1)
    if r.shape != g.shape:
        raise ValueError(f"rewards [B] and group_of_row [B] must match; got {tuple(r.shape)} and {tuple(g.shape)}")
    check_ddof(ddof)
    lv = torch.ones_like(g, dtype=torch.bool) if live is None else torch.as_tensor(live).reshape(-1) != 0
    if lv.shape != g.shape:
        raise ValueError(f"live must be [B] = [{g.numel()}]; got shape {tuple(lv.shape)}")
    bad = lv & ~torch.isfinite(r)
    w = lv.to(torch.float64)
    r0 = torch.where(lv & ~bad, r, torch.zeros_like(r))
    # Accumulate each group's rows in ascending reward order, so that a group's variance depends on its multiset
    # of rewards only, bit for bit: equal groups in another row order then tie exactly and select_groups' stable
    # tie-break (lower group index) decides, not rounding (as in ragen_core.math.filtering.reward_variance).
    order = torch.argsort(r0, stable=True)
    order = order[torch.argsort(g[order], stable=True)]
    r0, w, g, bad = r0[order], w[order], g[order], bad[order]
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, w)
    total = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, r0)
    mean = total / count.clamp(min=1.0)
    # Centre before squaring: sum(x^2) - n*mean^2 loses the variance of large rewards to cancellation.
    sq = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, w * (r0 - mean[g]) ** 2)
    var = torch.where(count > ddof, sq / (count - ddof).clamp(min=1.0), torch.zeros_like(sq))
    n_bad = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, bad.to(torch.float64))
    return torch.where(n_bad > 0, torch.full_like(var, math.nan), var)


def _spec(spec: Any) -> FilterSpec:
    """`spec`, or the default :class:`FilterSpec` for None; TypeError naming it otherwise (a dict, or
    ``ragen_core.math.filtering.FilterSpec``, which lacks this adapter's ``mode`` / ``enable`` / ``estimator``)."""
    if spec is None:
        return FilterSpec()
    if not isinstance(spec, FilterSpec):
        raise TypeError("spec must be a ragen_core.integrations.verl.core.FilterSpec or None (build one from a "
                        f"mapping with FilterSpec.from_config({{...}})); got {type(spec).__name__}")
    return spec


def filter_rows(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    uids: Sequence[Any] | np.ndarray,
    spec: FilterSpec | None = None,
    generator: torch.Generator | None = None,
) -> RowFilterResult:
    """SNR-aware filtering of a verl batch: token rewards ``[B, T]`` + uids ``[B]`` -> kept rows.

    ``R_b`` by :func:`sequence_rewards`, groups by :func:`group_rows`, ``V_i`` by :func:`group_variances`
    (live rows: ``sum_t m_bt > 0``), then :func:`ragen_core.math.filtering.select_groups` ranks the score (``V_i``
    or ``sqrt(V_i)``) and keeps groups by ``spec.strategy``. ``spec.enable=False`` keeps every group.

    Returns:
        :class:`RowFilterResult`; ``rows`` are the rows of kept groups in their original order.
    """
    spec = _spec(spec)
    # B scalars: the per-group work runs on the CPU whatever device the batch is on.
    rewards = sequence_rewards(token_level_rewards, response_mask).cpu()
    group_of_row, group_uids = group_rows(uids)
    if group_of_row.numel() != rewards.numel():
        raise ValueError(f"uids hold {group_of_row.numel()} rows but token_level_rewards has B={rewards.numel()}")
    live = (torch.as_tensor(response_mask) != 0).any(dim=1).cpu()
    var = group_variances(rewards, group_of_row, len(group_uids), spec.ddof, live)
    scores = var.sqrt() if spec.score == "std" else var
    if spec.enable:
        res = select_groups(scores, spec, generator=generator, variances=var)
    else:
        # Keep all: the identity "filter" still reports the batch statistics.
        res = select_groups(torch.ones(len(group_uids)), strategy="top_k", value=1.0, variances=var)
    row_mask = res.mask[group_of_row]
    return RowFilterResult(groups=res, group_uids=group_uids, group_of_row=group_of_row, row_mask=row_mask,
                           rows=row_mask.nonzero().flatten(), variances=var)


def select_rows(batch: Mapping[str, Any], rows: torch.Tensor | Sequence[int]) -> dict[str, Any]:
    """Physically keep ``rows`` of every entry of a batch (tensors, numpy arrays, lists), all ``[B, ...]``.

    This is what ``DataProto.select_idxs`` does for verl's tensor and non-tensor parts; the pure version serves
    tests and any other container. ``rows`` are integer indices (``RowFilterResult.rows``); a boolean mask
    (``row_mask``) or float indices raise TypeError.

    Returns:
        a new dict, each value with ``len(rows)`` rows in the order of ``rows``.
    """
    idx = row_indices("rows", rows)
    for name, v in batch.items():
        if isinstance(v, (torch.Tensor, np.ndarray)) and v.ndim == 0:
            raise ValueError(f"batch[{name!r}] has no row dimension (a scalar); every entry must be [B, ...]")
    sizes = {name: (v.shape[0] if isinstance(v, (torch.Tensor, np.ndarray)) else len(v)) for name, v in batch.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"every batch entry must have the same number of rows B; got {sizes}")
    b = next(iter(sizes.values()), 0)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= b):
        raise ValueError(f"rows must be in [0, {b - 1}]; got min {int(idx.min())}, max {int(idx.max())}")
    out: dict[str, Any] = {}
    for name, v in batch.items():
        if isinstance(v, torch.Tensor):
            out[name] = v.index_select(0, idx.to(v.device))
        elif isinstance(v, np.ndarray):
            out[name] = v[idx.numpy()]
        else:
            out[name] = [v[i] for i in idx.tolist()]
    return out


def group_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    uids: Sequence[Any] | np.ndarray,
    estimator: str = "grpo",
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO-family outcome advantages of a verl batch, by ``ragen_core.math.advantages`` on the ``[P, G]`` returns.

    The rows are gathered into ``[P, G]`` (group i = i-th uid seen, rollouts in row order), the estimator runs
    there (the algorithm table's entry: ``grpo``: ``(R - mean) / (std + eps)``, std with ddof 1 as verl, the
    centred returns when G = 1; ``dr_grpo``: ``R - mean``; ``rloo``: ``R - mean of the others``) and the result
    is scattered back and broadcast on the response tokens.

    Args:
        token_level_rewards, response_mask: ``[B, T]``.
        uids: ``[B]``; every group must have the same size G (>= 2 for rloo).
        estimator: one of ``ESTIMATORS``.
        eps: the grpo std constant.

    Returns:
        float32 ``[B, T]``, ``A_b`` on tokens with ``response_mask != 0``, 0 elsewhere.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(map(repr, ESTIMATORS))}; got {estimator!r}")
    rewards = sequence_rewards(token_level_rewards, response_mask).cpu()
    group_of_row, group_uids = group_rows(uids)
    if group_of_row.numel() != rewards.numel():
        raise ValueError(f"uids hold {group_of_row.numel()} rows but token_level_rewards has B={rewards.numel()}")
    p = len(group_uids)
    counts = torch.bincount(group_of_row, minlength=p)
    if int(counts.min()) != int(counts.max()):
        sizes = sorted(set(counts.tolist()))
        raise ValueError(f"every uid group must have the same number of rows G; got sizes {sizes}")
    g = int(counts[0])
    # Stable sort by group: order[i * G + k] is the k-th row (in row order) of group i.
    order = torch.sort(group_of_row, stable=True).indices
    a = ALGORITHMS[estimator].group_advantages(rewards[order].reshape(p, g), std_eps=eps)
    per_row = torch.empty_like(rewards)
    per_row[order] = a.reshape(-1)
    m = torch.as_tensor(response_mask)
    return adv_mod.expand_to_tokens(per_row.to(device=m.device, dtype=torch.float32), m)


def masked_group_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    uids: Sequence[Any] | np.ndarray,
    spec: FilterSpec | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, RowFilterResult]:
    """Filter, then advantages of the kept groups only; dropped rows get 0 (the ``mode="mask"`` path).

    The advantages of the kept groups are exactly those of :func:`group_advantages` on the compacted batch:
    filtering never changes a kept group's baseline.

    Returns:
        ``(advantages [B, T], RowFilterResult)``.
    """
    spec = _spec(spec)
    res = filter_rows(token_level_rewards, response_mask, uids, spec, generator)
    r = torch.as_tensor(token_level_rewards)
    m = torch.as_tensor(response_mask)
    out = torch.zeros(r.shape, dtype=torch.float32, device=m.device)
    if res.rows.numel():
        # The uids as filter_rows read them (id_list): a tensor's entries as numbers, not as 0-d tensors, which
        # hash by identity and would make every kept row a group of its own (advantage 0 for every row).
        ids = id_list("uids", uids)
        rows = res.rows.to(m.device)
        kept_ids = [ids[i] for i in res.rows.tolist()]
        out[rows] = group_advantages(r[rows], m[rows], kept_ids, spec.estimator, spec.norm_eps)
    return out, res


# ------------------------------------------------------------------------------------------------ shared by the glue
#: The names under which ``ragen_core.integrations.verl.register`` adds the adapter to verl's three registries.
ADV_ESTIMATOR_NAME = "ragen_snr"
TRAINER_MODE = "ragen_snr_sync"
AGENT_LOOP_NAME = "ragen_env_agent"


def _to_container(cfg: Any) -> Any:
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        return cfg
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def _algorithm_section(algorithm: Any, name: str) -> Any:
    """The ``name`` section of verl's ``config.algorithm`` (a mapping, a DictConfig or an object), None if absent."""
    if algorithm is None:
        return None
    getter = getattr(algorithm, "get", None)
    section = getter(name, None) if callable(getter) else getattr(algorithm, name, None)
    return _to_container(section)


def filter_spec_from_algorithm(algorithm: Any) -> FilterSpec:
    """:class:`FilterSpec` from verl's ``config.algorithm`` (its ``ragen_filter`` section; defaults if absent)."""
    return FilterSpec.from_config(_algorithm_section(algorithm, "ragen_filter"))


@dataclass(frozen=True)
class MISettings:
    """The ``algorithm.ragen_mi`` section of the trainer mode (``ragen_snr_sync``).

    Attributes:
        every: log the MI proxies every this many global steps (0 = off).
        max_groups: cross-score at most this many groups (the first ones seen; the cost grows as P^2 G).
        model_path: the scorer's weights, a path ``from_pretrained`` reads (None: the actor's ``model.path``).
        device: where the scorer runs, as ``Module.to`` takes it (None: ``cuda`` when the trainer process sees one,
            else ``cpu``).
    """

    every: int = 0
    max_groups: int = 8
    model_path: Any = None
    device: Any = None


def mi_settings_from_algorithm(algorithm: Any) -> MISettings:
    """:class:`MISettings` from verl's ``config.algorithm`` (its ``ragen_mi`` section; defaults if absent).

    A key set to null takes its default. An unknown key (a misspelt ``evry`` would leave the metrics off), a
    fractional or negative ``every``, a ``max_groups`` below 1 or a section that is not a mapping raise a
    ValueError / TypeError naming ``ragen_mi.<key>``.
    """
    section = _algorithm_section(algorithm, "ragen_mi")
    if section is None:
        return MISettings()
    if not isinstance(section, Mapping):
        raise TypeError(f"ragen_mi must be a mapping (e.g. {{every: 5, max_groups: 8}}) or None; got "
                        f"{type(section).__name__} {section!r:.40}")
    known = sorted(f.name for f in fields(MISettings))
    for key in section:
        if key not in known:
            raise ValueError(f"unknown ragen_mi key {key!r}; known keys: {', '.join(known)}")
    values = {k: v for k, v in section.items() if v is not None}
    out = MISettings(**values)
    every = require_int("ragen_mi.every", out.every, low=0)
    max_groups = require_int("ragen_mi.max_groups", out.max_groups, low=1)
    return MISettings(every, max_groups, out.model_path, out.device)


def random_generator(spec: FilterSpec, step: int) -> torch.Generator | None:
    """The generator of ``strategy="random"`` at training step ``step``; None for every other strategy.

    A fresh ``torch.Generator`` seeded ``spec.seed * 1_000_003 + step`` (the global torch RNG is never touched).
    The random strategy is a control arm: each step it drops as many groups as top-p would, drawn uniformly at
    random and independently of the other steps. Seeding from (seed, step) gives every step its own draw, and the
    same draw again for the same spec and step (a run resumed at step s draws what the uninterrupted run drew).
    """
    if spec.strategy != "random":
        return None
    return torch.Generator().manual_seed(spec.seed * _SEED_STRIDE + int(step))


@dataclass
class StepHandoff:
    """What the trainer mode ``ragen_snr_sync`` tells the estimator ``ragen_snr`` about the step at hand.

    verl runs both in one process (its TaskRunner) and calls the estimator once per training step, after the
    trainer's ``_balance_batch``. One object per process: ``verl.register`` creates it inside the estimator it
    registers, and the trainer reaches it through verl's estimator registry. The trainer writes, the estimator
    reads and clears.

    Attributes:
        removed: the trainer removed this step's dropped groups (``mode: remove``), so the estimator must not
            filter again; an enabled ``mode: remove`` estimator call without it is a configuration error.
        step: the trainer's global step for the estimator's next call (None: no trainer mode ran this step).
        calls: the estimator calls so far in this process, one per step.
    """

    removed: bool = False
    step: int | None = None
    calls: int = 0

    def begin_step(self, step: int) -> None:
        """Trainer side, at the start of a step: nothing removed yet, the estimator's step is ``step``."""
        self.removed = False
        self.step = int(step)

    def next_step(self) -> int:
        """Estimator side, once per call: the step that seeds :func:`random_generator`.

        The trainer's global step when it handed one over for this call, else the number of calls so far
        (1, 2, ...; it restarts at 1 when a process restarts, e.g. on a resumed run under another trainer).
        """
        self.calls += 1
        step, self.step = self.step, None
        return self.calls if step is None else step
