"""SNR-aware filtering of prompt groups by reward variance (docs/science.md section 4).

Per training iteration the batch holds P prompts x G rollouts. Each prompt group gets a score, its sample
reward variance ``V_i`` (the paper's) or its standard deviation (the official code's), and a selection rule
keeps the high-signal groups. Dropped groups are removed from the batch (:func:`compact`), which is where the
backward-pass saving comes from; masking them out would save nothing.

The settings are one :class:`FilterSpec` (frozen, validated when built), the single definition that the
training config's ``[filter]`` section, the TRL adapter's ``rv_filter_*`` fields and verl's ``ragen_filter``
section all build. Everything else here is a pure function of tensors. Variants implemented (all selectable,
none silently adopted):

- ``score="variance"`` (paper, default) or ``"std"`` (official RAGEN code). On ``[9, 1, 1, 1]`` with
  ``value=0.9`` the variance keeps 3 groups and the std keeps 4.
- ``eps``: the top-p threshold is ``value * total - eps`` (paper: ``eps = 0``; official code: ``0.01``).
- An all-zero batch (total score 0 over the candidate groups), or one where every group is excluded, keeps
  nothing under *every* strategy (top_p, top_k, top_k_abs, min_p, random, either order): ``FilterResult.empty``
  is True and the caller should skip the update (the paper leaves ``sum V = 0`` undefined; this is our
  choice, and it matches the official code). Before, top_k kept group 0 of an all-zero batch while top-p and
  min-p returned empty, so whether a step was skipped depended on the strategy.
- A group whose score is not finite (NaN, or +inf: a variance that overflowed float64, or a score passed to
  :func:`select_groups`) is never kept, under every strategy, and is counted in ``FilterResult.n_nan``
  (``filter/nan_groups``); the batch statistics leave it out. An infinite score has no share of the total: before,
  ``[1, inf, 3]`` under top-p made the threshold NaN (``inf - inf``) and kept the inf group alone, and of two inf
  groups only the first was kept.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ragen_core.math._args import as_integer, as_tensor, is_bool, real_or_none

__all__ = [
    "FilterSpec",
    "FilterSpecError",
    "FilterResult",
    "STRATEGIES",
    "SCORES",
    "ORDERS",
    "ZERO_TOL",
    "MAX_COUNT",
    "check_bool",
    "check_choice",
    "check_ddof",
    "check_non_negative",
    "reward_variance",
    "rv_statistics",
    "select_groups",
    "filter_groups",
    "compact",
    "select_rows",
]

STRATEGIES = ("top_p", "top_k", "top_k_abs", "min_p", "random")
SCORES = ("variance", "std")
ORDERS = ("largest", "smallest")
#: Scores at or below this value count as zero for ``include_zero=False`` (official code's threshold).
ZERO_TOL = 1e-10
# Float slack for floor(value * P) (0.29 * 100 evaluates to 28.999999999999996 in binary floating point) and,
# relative to the total, for the top-p threshold value * total (0.28 * 25 evaluates to 7.000000000000001).
_FLOOR_SLACK = 1e-9
#: Largest ``top_k_abs`` count: ``FilterSpec.value`` is stored as a float, which holds every integer up to 2**53 and
#: not all above (2**53 + 1 would be stored as 2**53), so a larger count is refused rather than silently changed.
MAX_COUNT = 2**53


class FilterSpecError(ValueError):
    """A bad filter setting: the :class:`FilterSpec` field it concerns and what is wrong with it.

    The message is ``f"{key} {problem}"``, where ``key`` is the setting's name in the front-end that read it
    (``filter.value`` in the training config, ``rv_filter_value`` in TRL, ``ragen_filter.value`` in verl; the field
    name by default): every front-end rejects the same values with the same explanation.
    """

    def __init__(self, field: str, problem: str, key: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.key = key or field
        super().__init__(f"{self.key} {problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (Ray workers) with its three arguments
        return (FilterSpecError, (self.field, self.problem, self.key))

    def renamed(self, key: str) -> FilterSpecError:
        """The same error, naming the setting ``key``."""
        return FilterSpecError(self.field, self.problem, key)


def check_choice(field: str, value: Any, accepted: tuple[str, ...]) -> None:
    """:class:`FilterSpecError` on ``field`` unless ``value`` is one of ``accepted``."""
    if not (isinstance(value, str) and value in accepted):
        raise FilterSpecError(field, f"must be one of {', '.join(repr(a) for a in accepted)}; got {value!r}")


def check_bool(field: str, value: Any) -> None:
    """:class:`FilterSpecError` on ``field`` unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise FilterSpecError(field, f"must be true or false; got {value!r}")


def check_non_negative(field: str, value: Any) -> float:
    """``value`` as a finite float >= 0, else :class:`FilterSpecError` on ``field``.

    A bool or a string is refused (``eps=True`` would read as 1.0, ``"0.01"`` hides an unparsed config), and so is
    an infinity (``eps=inf`` makes every top-p threshold negative, so top-p keeps one group whatever the rate).
    """
    number = real_or_none(value)
    if number is not None and number >= 0.0 and math.isfinite(number):
        return number
    if is_bool(value):
        problem = "must be a non-negative number, not a bool"
    elif number is not None and number == math.inf:
        problem = "must be a finite number >= 0"
    else:
        problem = "must be a non-negative number"
    raise FilterSpecError(field, f"{problem}; got {value!r}")


def check_ddof(ddof: Any, field: str = "ddof") -> int:
    """``ddof`` (delta degrees of freedom of a group variance) as an int >= 0 (a numpy integer too; not a bool),
    else :class:`FilterSpecError`."""
    try:
        return as_integer(field, ddof, 0)
    except ValueError:
        raise FilterSpecError(field, f"must be a non-negative integer (0 or 1 in practice); got {ddof!r}") from None


def _count_or_none(value: Any) -> int | None:
    """``value`` as an exact int when it is an integer (an int, a numpy integer, a 0-d integer tensor) or a finite
    whole float (2.0); None otherwise (a bool, a fraction, a string, an infinity)."""
    if is_bool(value):
        return None
    if not isinstance(value, float):
        try:
            return operator.index(value)
        except TypeError:
            pass
    number = real_or_none(value)
    if number is None or not math.isfinite(number) or number != int(number):
        return None
    return int(number)


def _keep_value(strategy: str, value: Any) -> float:
    """``value`` as a float: a positive integer count for ``top_k_abs``, a rate in (0, 1] for the others.

    A bool or a string is refused (``value=True`` would read as 1.0, ``"0.9"`` as 0.9), as for every number here.
    A count is at most :data:`MAX_COUNT` (2**53): a count of P groups or more keeps every candidate, and up to
    2**53 the stored float is the count given; 1e300 or 2**53 + 1 raise (as a rate above 1 does for ``top_k``).
    """
    number = real_or_none(value)
    bool_note = ", not a bool" if is_bool(value) else ""
    if strategy == "top_k_abs":
        count = _count_or_none(value)
        if count is None or count < 1:
            raise FilterSpecError("value", f"must be a positive integer count for strategy='top_k_abs'{bool_note}; "
                                  f"got {value!r}")
        if count > MAX_COUNT:
            raise FilterSpecError("value", f"must be a positive integer count for strategy='top_k_abs' of at most "
                                  f"2**53 (a count of P or more keeps every group); got {value!r}")
        return float(count)
    if number is None:
        raise FilterSpecError("value", f"must be a number in (0, 1] for strategy={strategy!r}{bool_note}; "
                              f"got {value!r}")
    if not (0.0 < number <= 1.0):
        raise FilterSpecError("value", f"must be in (0, 1] for strategy={strategy!r} (a keep rate); got {value!r}")
    return number


@dataclass(frozen=True)
class FilterSpec:
    """What the filter keeps: the one definition of the filter settings, validated here and nowhere else.

    Every front-end builds one: the ``[filter]`` section of the training config holds it (its fields are keys of
    the section), ``RagenGRPOConfig`` builds it from its flat ``rv_filter_*`` fields, and verl's
    ``ragen_core.integrations.verl.core.FilterSpec`` extends it with the adapter's own fields. Adding a filter
    parameter is adding a field here (and its ``rv_filter_*`` field in TRL's config, whose test checks that each
    field has one).

    Attributes:
        strategy: one of ``STRATEGIES``.
        value: keep rate rho in (0, 1] (``top_p``, ``top_k``, ``random``; paper default 0.9), ratio p in (0, 1]
            (``min_p``) or a positive integer count up to :data:`MAX_COUNT` = 2**53 (``top_k_abs``; a count of P or
            more keeps every candidate); stored as a float.
        score: ``"variance"`` (``V_i``, the paper's) or ``"std"`` (``sqrt(V_i)``, the official code's).
        include_zero: keep zero-variance groups eligible (True) or drop them before ranking (False).
        order: ``"largest"`` (the method) or ``"smallest"`` (the reverse ablation).
        ddof: delta degrees of freedom of the group variance, 1 (sample variance, the paper's) or 0; needs
            G > ddof rollouts per group (:meth:`check_group_size`).
        eps: non-negative slack of the top-p threshold ``value * total - eps`` (paper 0, official code 0.01).

    Raises:
        FilterSpecError: (a ``ValueError``) naming the first bad field.
    """

    strategy: str = "top_p"
    value: float = 0.9
    score: str = "variance"
    include_zero: bool = True
    order: str = "largest"
    ddof: int = 1
    eps: float = 0.0

    def __post_init__(self) -> None:
        for field, accepted in (("strategy", STRATEGIES), ("score", SCORES), ("order", ORDERS)):
            check_choice(field, getattr(self, field), accepted)
            object.__setattr__(self, field, str(getattr(self, field)))  # a numpy str_ is stored as a str
        check_bool("include_zero", self.include_zero)
        object.__setattr__(self, "ddof", check_ddof(self.ddof))
        object.__setattr__(self, "eps", check_non_negative("eps", self.eps))
        object.__setattr__(self, "value", _keep_value(self.strategy, self.value))

    @classmethod
    def of(cls, *args: Any, **kwargs: Any) -> FilterSpec:
        """A spec given either as itself (``of(spec)`` is ``spec``) or as the arguments of ``FilterSpec(...)``.

        This is how :func:`filter_groups` and :func:`select_groups` read their settings, so that
        ``filter_groups(r, "top_k", 0.5, order="smallest")`` and ``filter_groups(r, spec)`` both work.
        """
        if args and isinstance(args[0], FilterSpec):
            if len(args) > 1 or kwargs:
                raise TypeError("pass either a FilterSpec or the filter settings, not both")
            return args[0]
        return cls(*args, **kwargs)

    def check_group_size(self, group_size: int) -> None:
        """Raise :class:`FilterSpecError` (on ``ddof``) unless groups of ``group_size`` rollouts define a variance
        (ValueError when ``group_size`` is not a positive integer)."""
        group_size = as_integer("group_size", group_size, 1)
        if not group_size > self.ddof:
            raise FilterSpecError("ddof", f"needs G > ddof rollouts per group to define a variance; got G={group_size} "
                                  f"with ddof={self.ddof} (use G >= {self.ddof + 1} or a smaller ddof)")


@dataclass(frozen=True)
class FilterResult:
    """Outcome of :func:`filter_groups` / :func:`select_groups`.

    Attributes:
        kept: LongTensor ``[n_kept]`` of kept group indices, in descending score order, ties by lower index.
        mask: BoolTensor ``[P]``, True for kept groups.
        scores: float64 tensor ``[P]``, the score of each group (as given: NaN or inf for the groups never kept).
        empty: True when nothing is kept (total score 0 over the candidates, for every strategy, or every
            group excluded); the caller should skip the update step.
        kept_fraction: ``n_kept / P``.
        rv_mean, rv_std, rv_heterogeneity: batch statistics of the per-group reward variance, NaN and inf groups
            ignored (see :func:`rv_statistics`). NaN when not defined.
        zero_fraction: share of the finite groups whose variance is <= ``ZERO_TOL``.
        n_nan: number of groups whose score is not finite (NaN or +inf; never kept).
        n_excluded: number of groups excluded before ranking (non-finite groups, plus zero groups when
            ``include_zero=False``).
    """

    kept: torch.Tensor
    mask: torch.Tensor
    scores: torch.Tensor
    empty: bool
    kept_fraction: float
    rv_mean: float
    rv_std: float
    rv_heterogeneity: float
    zero_fraction: float
    n_nan: int
    n_excluded: int

    @property
    def n_kept(self) -> int:
        """Number of kept groups."""
        return int(self.kept.numel())

    def as_metrics(self, prefix: str = "filter/") -> dict[str, float]:
        """Flat, JSON-ready metrics namespaced with ``prefix`` (CleanRL-style metric names)."""
        return {
            f"{prefix}kept_groups": float(self.n_kept),
            f"{prefix}kept_fraction": self.kept_fraction,
            f"{prefix}empty": float(self.empty),
            f"{prefix}rv_mean": self.rv_mean,
            f"{prefix}rv_std": self.rv_std,
            f"{prefix}rv_heterogeneity": self.rv_heterogeneity,
            f"{prefix}zero_fraction": self.zero_fraction,
            f"{prefix}nan_groups": float(self.n_nan),
        }


def _as_tensor(values: Any, name: str, shape: str) -> torch.Tensor:
    """``values`` (a tensor, an array or nested lists of numbers) as a tensor, else one ValueError naming ``name``:
    a None or a string inside a list made torch raise "Could not infer dtype of NoneType"."""
    return as_tensor(name, values, shape, " (NaN for a missing value, not None)")


def _check_rewards(rewards: torch.Tensor, name: str = "rewards") -> torch.Tensor:
    rewards = _as_tensor(rewards, name, "[P, G]")
    if rewards.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D tensor [P, G] (P groups x G rollouts); got shape {tuple(rewards.shape)}"
        )
    if rewards.shape[0] < 1:
        raise ValueError(f"{name} must hold at least one group (P >= 1); got shape {tuple(rewards.shape)}")
    # Every dtype _as_tensor lets through holds real numbers (complex ones are refused there): unsigned integers
    # of 16-64 bits included, as grpo and select_groups take them (they were refused here as "not real numbers").
    return rewards


def reward_variance(rewards: torch.Tensor, ddof: int = 1) -> torch.Tensor:
    """Per-group sample reward variance (docs/science.md section 4).

    ``V_i = 1/(G - ddof) * sum_k (R_ik - mean_i)^2``, the paper uses ``ddof = 1``.

    Args:
        rewards: float tensor ``[P, G]``, one row per prompt group. NaN and infinite entries are allowed: they
            make that group's variance NaN (such a group is never kept by :func:`filter_groups`), also when every
            reward of the group is the same infinity.
        ddof: delta degrees of freedom, an integer in ``[0, G - 1]``.

    Returns:
        float64 tensor ``[P]`` of variances (computed in float64 for exactness on small integer rewards),
        invariant to the order of the rollouts within a group, bit for bit, and exactly 0 for a group whose
        rewards are all equal (whatever their value).
    """
    rewards = _check_rewards(rewards)
    g = rewards.shape[1]
    check_ddof(ddof)
    if g - ddof < 1:
        raise ValueError(
            f"rewards needs G > ddof rollouts per group to define a variance; got G={g} with ddof={ddof} "
            f"(use G >= {ddof + 1} or a smaller ddof)"
        )
    # Sorted rows: the variance is a function of the multiset of rewards, so floating-point summation order
    # must not depend on which rollout came first. Otherwise two groups with the same rewards in another
    # order ([0, 0, 0, 1] vs [0, 0, 1, 0]) differ in the last bit and the stable tie-break by lower index of
    # select_groups would be decided by rounding. NaN sorts last and still makes the variance NaN.
    r = rewards.to(torch.float64).sort(dim=1).values
    mean = r.mean(dim=1, keepdim=True)
    variance = ((r - mean) ** 2).sum(dim=1) / (g - ddof)
    # A group of equal rewards has variance exactly 0, also when the rewards are not dyadic: the mean of
    # (0.1, 0.1, 0.1) is rounded, which left ~1e-34 here, so an all-flat batch was kept instead of skipped.
    # Tested on the rewards themselves (as grpo does); a NaN reward is never equal and keeps its NaN.
    # An infinity equals itself, but a group of them has no finite variance: it stays NaN, as (inf - inf)^2 gives.
    flat = (r == r[:, :1]).all(dim=1) & torch.isfinite(r[:, 0])
    return torch.where(flat, torch.zeros_like(variance), variance)


def rv_statistics(variances: torch.Tensor) -> dict[str, float]:
    """Batch statistics of per-group reward variance: the RV heterogeneity pre-check (docs/science.md section 4).

    ``rv_heterogeneity = Std(RV) / Mean(RV)`` over the groups of one rollout batch, with the population
    standard deviation (ddof = 0) over the groups. NaN and infinite groups are ignored (an infinite variance made
    the mean inf and the std NaN); when no group is left, or ``Mean(RV) = 0``, the ratio is NaN (never inf, never
    an exception).

    Args:
        variances: tensor ``[P]`` of per-group reward variances (NaN and inf allowed; a finite negative entry
            raises ValueError).

    Returns:
        dict with ``rv_mean``, ``rv_std``, ``rv_heterogeneity``, ``zero_fraction`` (share of the finite
        groups with variance <= ``ZERO_TOL``), ``n_groups`` and ``n_nan`` (the groups left out: NaN or inf).
    """
    v = _as_tensor(variances, "variances", "[P]")  # refuses complex numbers
    if is_bool(v):  # a mask is not a variance
        raise ValueError(f"variances must be real numbers; got dtype {v.dtype}")
    v = v.to(torch.float64).reshape(-1)
    negative = (v < 0) & torch.isfinite(v)
    if bool(negative.any()):  # no variance is below 0: a wrong column (advantages?) read as variances
        where = negative.nonzero().flatten().tolist()
        raise ValueError(f"variances must be non-negative (a variance is >= 0); got {v[where[0]].item():g} at "
                         f"group(s) {where[:8]}{' ...' if len(where) > 8 else ''}")
    nan = ~torch.isfinite(v)  # NaN and +-inf: left out, as select_groups never keeps them
    n_nan = int(nan.sum())
    n = v.numel() - n_nan
    out = {"n_groups": float(v.numel()), "n_nan": float(n_nan)}
    if n == 0:
        out.update(rv_mean=math.nan, rv_std=math.nan, rv_heterogeneity=math.nan, zero_fraction=math.nan)
        return out
    vv = v if n_nan == 0 else v[~nan]
    std_t, mean_t = torch.std_mean(vv, correction=0)
    mean, std = float(mean_t), float(std_t)
    out["rv_mean"] = mean
    out["rv_std"] = std
    out["rv_heterogeneity"] = std / mean if mean > 0 else math.nan
    out["zero_fraction"] = int((vv <= ZERO_TOL).sum()) / n
    return out


def _top_p_count(sorted_scores: torch.Tensor, value: float, eps: float) -> int:
    """Smallest prefix length k >= 1 with cumsum(sorted_scores)[k-1] >= value * total - eps (0 if total <= 0)."""
    if sorted_scores.numel() == 0:
        return 0
    cum = torch.cumsum(sorted_scores, dim=0)
    total = float(cum[-1])
    if not total > 0.0:
        return 0
    # A prefix within _FLOOR_SLACK (relative) of the threshold reaches it: 0.28 * 25 equal scores evaluates to
    # 7.000000000000001, and without the slack the 7 groups that make 28% exactly were not enough (top_k has
    # the same slack). Scale-free, so it only decides prefixes equal to the threshold up to rounding.
    threshold = value * total - eps - _FLOOR_SLACK * total
    # cum is non-decreasing (scores >= 0): k* - 1 is the number of prefixes still below the threshold.
    k = int((cum < threshold).sum()) + 1
    return min(max(k, 1), sorted_scores.numel())


def select_groups(
    scores: torch.Tensor,
    *settings: Any,
    generator: torch.Generator | None = None,
    variances: torch.Tensor | None = None,
    **named: Any,
) -> FilterResult:
    """Select groups from precomputed non-negative scores (docs/science.md section 4: top-p and its variants).

    This is the selection rule of :func:`filter_groups`, usable when groups have unequal sizes (compute the
    variances yourself) or when the score comes from elsewhere.

    Rules, on candidate groups (finite score, and score > ``ZERO_TOL`` when ``include_zero=False``) ranked by a
    stable sort (descending for ``order="largest"``, ascending for ``"smallest"``; ties by lower index).
    When the candidates' total score is 0 (an all-zero batch) every strategy keeps nothing (``empty=True``,
    skip the step); otherwise:

    - ``top_p``: keep the smallest prefix ``k* = min{k >= 1 : sum_{j<=k} s_sigma(j) >= value * sum_i s_i - eps}``
      (a prefix equal to the threshold up to rounding, within 1e-9 of the total, reaches it).
      Total score 0 (or no candidate): keep nothing, ``empty=True``.
    - ``top_k``: keep ``max(1, floor(value * P))`` groups (``value`` in (0, 1], P = all groups), at most the
      number of candidates.
    - ``top_k_abs``: keep ``int(value)`` groups (a positive integer up to 2**53), at most the number of
      candidates.
    - ``min_p``: keep groups with ``s_i >= value * max_i s_i`` (nothing if the max is 0). With
      ``order="smallest"`` it keeps the same number of groups from the bottom of the ranking (a
      count-matched reverse ablation).
    - ``random``: as many groups as ``top_p`` (order ``"largest"``) would keep, drawn uniformly without
      replacement among the candidates with ``generator`` (the control arm of ablations).

    Args:
        scores: tensor ``[P]`` of non-negative scores; NaN and +inf allowed (never kept under any strategy, counted
            in ``n_nan``).
        *settings, **named: a :class:`FilterSpec`, or its fields (``strategy``, ``value``, ``include_zero``,
            ``order``, ``eps``; default top-p at 0.9) as for ``FilterSpec(...)``: :meth:`FilterSpec.of`. The
            spec's ``score`` and ``ddof`` do not apply here (the scores are given).
        generator: ``torch.Generator`` for ``strategy="random"`` (required there, unused otherwise).
        variances: optional ``[P]`` reward variances for the batch statistics (defaults to ``scores``); another
            shape is a ValueError.

    Returns:
        :class:`FilterResult`.
    """
    spec = FilterSpec.of(*settings, **named)
    strategy, value_f, include_zero, order, eps_f = spec.strategy, spec.value, spec.include_zero, spec.order, spec.eps
    s = _as_tensor(scores, "scores", "[P]")
    if s.dim() != 1 or s.numel() < 1:
        raise ValueError(f"scores must be a non-empty 1-D tensor [P]; got shape {tuple(s.shape)}")
    if is_bool(s):  # a mask is not a score (complex numbers were refused by _as_tensor)
        raise ValueError(f"scores must be real numbers (variances or standard deviations); got dtype {s.dtype}")
    s = s.to(torch.float64)
    if bool((s < 0).any()):
        raise ValueError("scores must be non-negative (variances or standard deviations); got a negative entry")
    if strategy == "random" and not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator for strategy='random' (no global random state)")

    p = s.numel()
    # NaN and +inf (-inf raised above as negative) are never kept: an infinite score has no share of the total,
    # top-p's threshold value * inf - inf was NaN (it kept one inf group, whatever the rate).
    nan = ~torch.isfinite(s)
    excluded = nan.clone()
    if not include_zero:
        excluded |= s <= ZERO_TOL
    n_cand = p - int(excluded.sum())

    # Stable ranking; excluded groups are pushed to the end so the first n_cand entries are the candidates.
    if order == "largest":
        key = torch.where(excluded, torch.full_like(s, -math.inf), s)
        ranked = torch.sort(key, descending=True, stable=True).indices
    else:
        key = torch.where(excluded, torch.full_like(s, math.inf), s)
        ranked = torch.sort(key, descending=False, stable=True).indices
    cand_ranked = ranked[:n_cand]
    cand_scores = s[cand_ranked]
    # sum V = 0 (the paper leaves it undefined): keep nothing and skip the step, whatever the strategy.
    all_zero = not float(cand_scores.sum()) > 0.0 if n_cand > 0 else True

    if all_zero:
        chosen = cand_ranked[:0]
    elif strategy == "top_p":
        k = _top_p_count(cand_scores, value_f, eps_f)
        chosen = cand_ranked[:k]
    elif strategy == "top_k":
        k = min(max(1, math.floor(value_f * p + _FLOOR_SLACK)), n_cand)
        chosen = cand_ranked[:k]
    elif strategy == "top_k_abs":
        k = min(int(value_f), n_cand)
        chosen = cand_ranked[:k]
    elif strategy == "min_p":
        smax = float(cand_scores.max()) if n_cand > 0 else 0.0
        if not smax > 0.0:
            chosen = cand_ranked[:0]
        else:
            passes = cand_scores >= value_f * smax
            if order == "largest":
                chosen = cand_ranked[passes]
            else:
                chosen = cand_ranked[: int(passes.sum())]
    else:  # random
        if order == "largest":
            desc = cand_ranked
        else:
            desc = torch.sort(torch.where(excluded, torch.full_like(s, -math.inf), s), descending=True,
                              stable=True).indices[:n_cand]
        k = _top_p_count(s[desc], value_f, eps_f)
        pick = torch.randperm(n_cand, generator=generator)[:k]
        chosen = cand_ranked[pick]

    mask = torch.zeros(p, dtype=torch.bool)
    mask[chosen] = True
    # Contract: kept indices in descending score order, ties by lower index.
    if order == "largest":
        kept = cand_ranked[mask[cand_ranked]]  # cand_ranked is already that order
    else:
        desc = torch.sort(torch.where(nan, torch.full_like(s, -math.inf), s), descending=True, stable=True).indices
        kept = desc[mask[desc]]

    if variances is not None:
        variances = _as_tensor(variances, "variances", "[P]")
        if tuple(variances.shape) != (p,):
            raise ValueError(f"variances must be [P] like scores, P={p}; got shape {tuple(variances.shape)}")
    stats = rv_statistics(s if variances is None else variances)
    return FilterResult(
        kept=kept.to(torch.long),
        mask=mask,
        scores=s,
        empty=kept.numel() == 0,
        kept_fraction=kept.numel() / p,
        rv_mean=stats["rv_mean"],
        rv_std=stats["rv_std"],
        rv_heterogeneity=stats["rv_heterogeneity"],
        zero_fraction=stats["zero_fraction"],
        n_nan=int(nan.sum()),
        n_excluded=p - n_cand,
    )


def filter_groups(
    rewards: torch.Tensor,
    *settings: Any,
    generator: torch.Generator | None = None,
    **named: Any,
) -> FilterResult:
    """SNR-Aware Filtering of a rollout batch (docs/science.md section 4, the paper's algorithm and its variants).

    Computes ``V_i`` with :func:`reward_variance`, ranks by ``score`` (``"variance"``: ``V_i``, the paper's;
    ``"std"``: ``sqrt(V_i)``, the official code's) and applies :func:`select_groups`. The batch statistics
    (``rv_mean``, ``rv_std``, ``rv_heterogeneity``) are always computed on the variance.

    Args:
        rewards: float tensor ``[P, G]`` (NaN or inf allowed: that group is never kept and counted in ``n_nan``;
            so is a group whose variance overflows float64).
        *settings, **named: a :class:`FilterSpec`, or its fields as for ``FilterSpec(...)`` (in order:
            ``strategy``, ``value``, ``score``, ``include_zero``, ``order``, ``ddof``, ``eps``; the defaults are
            the paper's top-p at 0.9 on the sample variance): ``filter_groups(r, spec)``,
            ``filter_groups(r, "top_k", 0.25, order="smallest")``. ``ddof`` needs G > ddof.
        generator: ``torch.Generator``, required for ``strategy="random"``.

    Returns:
        :class:`FilterResult` with ``kept`` ``[n_kept]``, ``mask`` ``[P]``, ``scores`` ``[P]``.
    """
    spec = FilterSpec.of(*settings, **named)
    variances = reward_variance(rewards, ddof=spec.ddof)
    scores = variances.sqrt() if spec.score == "std" else variances
    return select_groups(scores, spec, generator=generator, variances=variances)


def compact(
    batch: Mapping[str, torch.Tensor],
    kept: torch.Tensor,
    group_size: int,
    mask_key: str = "attention_mask",
) -> dict[str, torch.Tensor]:
    """Physically remove dropped groups from a padded token batch and re-pad to the longest kept sequence.

    The batch is group-major: row ``i * G + k`` holds rollout k of group i (B = P * G rows). Rows of dropped
    groups are removed, then the columns that are padding in every kept row (trailing ones for right
    padding, leading ones for left padding) are cut, so that the backward pass runs over fewer tokens
    (docs/science.md section 4: "dropped groups are removed from the batch"). Masking instead saves nothing.

    Args:
        batch: mapping of name -> tensor with first dimension B (e.g. ``input_ids`` ``[B, T]``,
            ``attention_mask`` ``[B, T]``, ``response_mask`` ``[B, T]``, ``advantages`` ``[B, T]``,
            ``old_log_probs`` ``[B, T]``, per-sequence ``rewards`` ``[B]``). Tensors whose second
            dimension equals T are cut along it; others are only row-selected.
        kept: LongTensor ``[n_kept]`` of kept group indices (e.g. ``FilterResult.kept``); rows come out in
            this group order, rollouts of a group in their original order.
        group_size: G, rollouts per group.
        mask_key: key of the ``[B, T]`` padding mask (non-zero = real token) used to find the columns to cut.

    Returns:
        dict with the same keys, each tensor with ``n_kept * G`` rows and ``T' <= T`` columns.
    """
    try:
        group_size = as_integer("group_size", group_size, 1)  # a numpy integer too; not a bool
    except ValueError:
        raise ValueError(f"group_size must be a positive integer (G); got {group_size!r}") from None
    if mask_key not in batch:
        raise ValueError(f"mask_key {mask_key!r} is not a key of batch (keys: {sorted(batch)})")
    mask = batch[mask_key]
    if mask.dim() != 2:
        raise ValueError(f"batch[{mask_key!r}] must be a 2-D padding mask [B, T]; got shape {tuple(mask.shape)}")
    b = mask.shape[0]
    if b % group_size != 0:
        raise ValueError(f"batch has B={b} rows, not a multiple of group_size={group_size}")
    n_groups = b // group_size
    kept = _as_indices(kept, "kept")
    if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= n_groups):
        raise ValueError(f"kept must hold group indices in [0, {n_groups - 1}]; got {kept.tolist()}")
    rows = (kept[:, None] * group_size + torch.arange(group_size)[None, :]).reshape(-1)
    return select_rows(batch, rows, mask_key=mask_key)


def _as_indices(values: Any, name: str) -> torch.Tensor:
    """`values` (a tensor, array or list of whole numbers, of any dtype) as a flat LongTensor; an empty list is
    fine (torch reads it as float). A fraction or a bool raises: truncating 0.5 to row 0 would silently train on
    the wrong rows, and a bool mask is not a list of indices."""
    tensor = as_tensor(name, values, "[m] of indices")
    if tensor.numel() and (
        tensor.dtype == torch.bool
        or tensor.is_complex()
        or (tensor.is_floating_point() and not bool(torch.all(tensor == torch.round(tensor))))
    ):
        raise ValueError(f"{name} must hold whole-number indices; got {tensor.tolist()}")
    return tensor.to(torch.long).reshape(-1)


def select_rows(
    batch: Mapping[str, torch.Tensor],
    rows: torch.Tensor,
    mask_key: str = "attention_mask",
) -> dict[str, torch.Tensor]:
    """Keep the given rows of a padded token batch (in the given order) and cut the columns no kept row uses.

    The row-level step of :func:`compact` (which keeps whole groups); a trainer whose rows are turns rather than
    rollouts (several rows per episode) selects the rows of its kept groups and calls this directly.

    Args:
        batch: mapping of name -> tensor with first dimension B (as in :func:`compact`); tensors whose second
            dimension equals T are cut along it, others are only row-selected.
        rows: ``[m]`` row indices in ``[0, B)`` (a LongTensor, or whole numbers of any dtype or a list; fractions
            and bools raise); the output's rows in this order.
        mask_key: key of the ``[B, T]`` padding mask (non-zero = real token) used to find the columns to cut:
            those that are padding in every kept row (trailing for right padding, leading for left padding).

    Returns:
        dict with the same keys, each tensor with ``m`` rows and ``T' <= T`` columns (``T' = 0`` when ``m = 0``).
    """
    if mask_key not in batch:
        raise ValueError(f"mask_key {mask_key!r} is not a key of batch (keys: {sorted(batch)})")
    mask = batch[mask_key]
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        raise ValueError(f"batch[{mask_key!r}] must be a 2-D padding mask [B, T]; got {getattr(mask, 'shape', mask)}")
    b, t = mask.shape
    for name, tensor in batch.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1 or tensor.shape[0] != b:
            raise ValueError(f"batch[{name!r}] must be a tensor with first dimension B={b}")
    rows = _as_indices(rows, "rows")
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= b):
        raise ValueError(f"rows must hold row indices in [0, {b - 1}]; got {rows.tolist()}")

    kept_mask = mask.index_select(0, rows) != 0
    cols = kept_mask.any(dim=0).nonzero().flatten()
    if cols.numel() == 0:
        lo, hi = 0, 0
    else:
        lo, hi = int(cols[0]), int(cols[-1]) + 1
    out: dict[str, torch.Tensor] = {}
    for name, tensor in batch.items():
        sel = tensor.index_select(0, rows)
        if sel.dim() >= 2 and tensor.shape[1] == t:
            sel = sel[:, lo:hi]
        out[name] = sel.contiguous()
    return out
