"""TRL adapter: SNR-aware group filtering and MI collapse metrics inside ``trl.GRPOTrainer`` (TRL 1.16).

:class:`RagenGRPOTrainer` is a ``GRPOTrainer`` with three overrides and no other change to TRL's loop:

- ``_calculate_rewards`` keeps the gathered rewards ``[N, F]`` (all processes) of the generation batch;
- ``_generate_and_score_completions`` (once per generation batch, train mode only): every ``mi_every`` steps
  it cross-scores the whole batch (kept and dropped groups) with ``ragen_core.math.mi.cross_score`` and logs the MI
  proxies; then it ranks the P = N / G prompt groups with ``ragen_core.math.filtering.filter_groups`` on the raw
  rewards ``R [P, G]`` (``rows.group_rewards``) and *removes* the rows of dropped groups from this
  process's batch (``rows.take_rows``), cutting columns that became padding and padding every process to
  the same row count with placeholder rows (TRL gathers per-row statistics in its loss); ``num_items_in_batch`` is
  recounted over the kept rows, so TRL's default ``dapo`` loss is the mean over kept tokens:

      loss = -(1 / sum_{kept i,t} m_it) * sum_{kept i,t} m_it * min(rho_it A_i, clip(rho_it) A_i)

  and a dropped group contributes nothing to it or to its gradient;
- ``compute_loss``: when the filter kept nothing (an all-zero batch: ``FilterResult.empty``) the update is
  skipped on every process alike (the decision comes from the gathered rewards): no forward, no gradient,
  so AdamW leaves every parameter as it was.

Logged through TRL's ``self._metrics`` (averaged per logging step like TRL's own): ``filter/*``
(``FilterResult.as_metrics``, plus ``filter/kept_rows``, ``filter/kept_tokens`` (the loss tokens of the kept rows,
all processes) and ``filter/placeholder_rows``) and ``collapse/*``
(``mi.flatten_proxies`` plus ``collapse/mi_zscore_ema``, ``collapse/skipped`` and
``collapse/groups_without_trace``: ``_log_mi``).

Compared with TRL pull request #7242 (reward-variance top-p/top-k filtering, open at the time of writing),
which masks dropped groups in the loss:

- same: stable ranking by variance (ties by lower index), sample variance with ``ddof`` (default 1), top-p
  keeps the smallest prefix with ``cumsum >= p * total - eps``, ``include_zero`` drops zero-variance groups
  before ranking, the ranking uses the raw (not normalised) rewards;
- PR ``top_k=n`` (a count) is ``rv_filter="top_k_abs", rv_filter_value=n`` here (``"top_k"`` here is a rate);
- differences (ours): an all-zero batch keeps nothing under *every* strategy (the PR's top-k keeps k groups of
  it); a group with a NaN reward (a completion no reward function scored) or an infinite one is never kept and
  is counted in ``filter/nan_groups``; when ``0 < p * total <= eps`` top-p keeps one group (the PR keeps none);
  dropped rows are removed, not masked, and advantages with *batch* statistics are recomputed over kept rows;
  further strategies (``min_p``, ``random``, ``order="smallest"``, ``score="std"``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from ragen_core.integrations.trl.env import (
    EnvReward,
    RagenEnvironment,
    ragen_environment_factory,
    seed_dataset,
    single_turn_dataset,
    stop_at,
    tool_chat_template,
    use_tool_chat_template,
)
from ragen_core.integrations.trl.rows import (
    AGGREGATIONS,
    SCALE_REWARDS,
    batch_level_advantages,
    group_rewards,
    local_kept_rows,
    padded_row_count,
    take_rows,
)
from ragen_core.integrations.trl.version import TESTED_TRL_VERSION, check_trl_version
from ragen_core.math.filtering import FilterResult, FilterSpec, FilterSpecError, filter_groups
from ragen_core.math.mi import DEFAULT_BATCH_TOKENS, MIZScoreEMA, cross_score, flatten_proxies, mi_proxies
from ragen_envs.validation import require_int

check_trl_version()

from accelerate.utils import gather_object  # noqa: E402  (after the version check: a clear error first)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

__all__ = [
    "append_finite",
    "RV_FILTER_FIELDS",
    "rv_filter_arguments",
    "RagenGRPOConfig",
    "RagenGRPOTrainer",
    "RagenEnvironment",
    "ragen_environment_factory",
    "seed_dataset",
    "single_turn_dataset",
    "stop_at",
    "tool_chat_template",
    "use_tool_chat_template",
    "EnvReward",
    "TESTED_TRL_VERSION",
]

# The private GRPOTrainer hooks this module overrides; checked so that a TRL without them fails at import.
_HOOKS = ("_calculate_rewards", "_generate_and_score_completions", "compute_loss", "_metrics")
_missing = [h for h in _HOOKS[:3] if not callable(getattr(GRPOTrainer, h, None))]
if _missing:  # pragma: no cover - only with an untested TRL forced through RAGEN2_ALLOW_UNTESTED_TRL
    raise ImportError(f"this TRL's GRPOTrainer lacks the hooks {_missing}; use trl=={TESTED_TRL_VERSION}")


def _is_real(x: Any) -> bool:
    """Whether `x` is a real number (an int or float, numpy's included; not a bool, not a string)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def append_finite(store: Any, metrics: dict[str, float]) -> None:
    """Append each metric to TRL's per-key lists, leaving out undefined (NaN / inf) values.

    A statistic can be undefined for a batch (``filter/rv_heterogeneity`` when no group has reward variance:
    Std(RV) / Mean(RV) with Mean(RV) = 0). TRL averages each list at logging time and prints NaN as ``None``, so an
    undefined value is omitted for that step instead; a key with no defined value in a logging window is not
    logged at all.
    """
    for key, value in metrics.items():
        value = float(value)
        if math.isfinite(value):
            store[key].append(value)


#: The ``RagenGRPOConfig`` field of each :class:`~ragen_core.math.filtering.FilterSpec` field: ``rv_filter`` holds the
#: strategy (None = no filtering), ``rv_filter_<name>`` the others.
RV_FILTER_FIELDS = {f.name: "rv_filter" if f.name == "strategy" else f"rv_filter_{f.name}" for f in fields(FilterSpec)}
_SPEC = FilterSpec()  # the defaults of the rv_filter_* fields


def rv_filter_arguments(spec: FilterSpec | None) -> dict[str, Any]:
    """The ``rv_filter*`` arguments of ``RagenGRPOConfig`` that give ``spec`` (None: ``rv_filter=None``, off).

    Raises TypeError for anything but a :class:`~ragen_core.math.filtering.FilterSpec` (or a subclass) or None.
    """
    if spec is None:
        return {"rv_filter": None}
    if not isinstance(spec, FilterSpec):
        raise TypeError(f"spec must be a FilterSpec or None; got {type(spec).__name__} (build one with "
                        "FilterSpec(...) or FilterSpec.from_config(...))")
    return {key: getattr(spec, name) for name, key in RV_FILTER_FIELDS.items()}


@dataclass
class RagenGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the filter and MI settings (every TRL field keeps its meaning and default).

    Filter (``ragen_core.math.filtering.filter_groups``; off when ``rv_filter`` is None): the fields of one
    :class:`~ragen_core.math.filtering.FilterSpec` (:meth:`filter_spec`, which checks them), in TRL's flat style:
        rv_filter: the strategy, one of ``"top_p"``, ``"top_k"``, ``"top_k_abs"``, ``"min_p"``, ``"random"``.
        rv_filter_value, rv_filter_score, rv_filter_include_zero, rv_filter_order, rv_filter_ddof, rv_filter_eps:
            ``FilterSpec.value`` ... ``FilterSpec.eps`` (keep rate / ratio / count, ``"variance"`` or ``"std"``, ...),
            with its defaults (the paper's: top-p at 0.9 on the sample variance).
    MI proxies (``ragen_core.math.mi``; off when ``mi_every`` is 0):
        mi_every: cross-score the batch every this many optimizer steps (the first generation included).
        mi_batch_tokens: token budget of one cross-scoring forward call.
        mi_ema_alpha, mi_eps: MI-ZScore-EMA smoothing and denominator constant (paper: 0.9, 1e-3).
    """

    rv_filter: str | None = field(default=None, metadata={"help": "Reward-variance filter strategy; None = off."})
    rv_filter_value: float = field(default=_SPEC.value, metadata={"help": "Keep rate, min-p ratio or top_k_abs count."})
    rv_filter_score: str = field(default=_SPEC.score, metadata={"help": "'variance' (paper) or 'std'."})
    rv_filter_include_zero: bool = field(default=_SPEC.include_zero, metadata={"help": "Zero-variance groups kept."})
    rv_filter_order: str = field(default=_SPEC.order, metadata={"help": "'largest' or 'smallest' (ablation)."})
    rv_filter_ddof: int = field(default=_SPEC.ddof, metadata={"help": "Delta dof of the group variance."})
    rv_filter_eps: float = field(default=_SPEC.eps, metadata={"help": "Top-p threshold slack."})
    mi_every: int = field(default=0, metadata={"help": "Log the MI proxies every this many steps; 0 = off."})
    mi_batch_tokens: int = field(default=DEFAULT_BATCH_TOKENS, metadata={"help": "Tokens per cross-score call."})
    mi_ema_alpha: float = field(default=0.9, metadata={"help": "MI-ZScore-EMA smoothing."})
    mi_eps: float = field(default=1e-3, metadata={"help": "MI z-score denominator constant."})

    def __post_init__(self) -> None:
        # Checked before TRL's own checks, which crash on a None (``%``) and let a fractional G through.
        require_int("num_generations", self.num_generations, low=2)
        super().__post_init__()
        self._check_trl_choices()
        spec = self.filter_spec()
        if spec is not None:
            try:
                spec.check_group_size(int(self.num_generations))
            except FilterSpecError as e:
                raise FilterSpecError(e.field, f"{e.problem} (num_generations)", RV_FILTER_FIELDS[e.field]) from None
        if isinstance(self.mi_every, bool) or not isinstance(self.mi_every, int) or self.mi_every < 0:
            raise ValueError(f"mi_every must be a non-negative integer (0 = off); got {self.mi_every!r}")
        if self.mi_every:
            if not _is_real(self.mi_ema_alpha) or not 0.0 <= self.mi_ema_alpha < 1.0:
                raise ValueError(f"mi_ema_alpha must be in [0, 1); got {self.mi_ema_alpha!r}")
            if not _is_real(self.mi_eps) or not self.mi_eps >= 0.0:
                raise ValueError(f"mi_eps must be >= 0; got {self.mi_eps!r}")
            if isinstance(self.mi_batch_tokens, bool) or not isinstance(self.mi_batch_tokens, int) or \
                    self.mi_batch_tokens < 1:
                raise ValueError(f"mi_batch_tokens must be a positive integer; got {self.mi_batch_tokens!r}")

    def _check_trl_choices(self) -> None:
        """TRL's reward settings that it checks only once it has generated a batch (or never: weights)."""
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"scale_rewards must be one of {', '.join(map(repr, SCALE_REWARDS))} (or True / False); "
                             f"got {self.scale_rewards!r}")
        if self.multi_objective_aggregation not in AGGREGATIONS:
            raise ValueError(f"multi_objective_aggregation must be one of {', '.join(map(repr, AGGREGATIONS))}; "
                             f"got {self.multi_objective_aggregation!r}")
        if self.reward_weights is not None:
            try:  # TRL reads them with torch.tensor(reward_weights)
                finite = bool(torch.isfinite(torch.as_tensor(self.reward_weights, dtype=torch.float64)).all())
            except (TypeError, ValueError, RuntimeError):
                finite = False
            if not finite:
                raise ValueError(f"reward_weights must be finite numbers; got {self.reward_weights!r}")

    def filter_spec(self) -> FilterSpec | None:
        """The :class:`~ragen_core.math.filtering.FilterSpec` of the ``rv_filter*`` fields; None when ``rv_filter`` is
        None (no filtering). A bad setting raises ``FilterSpecError`` (a ValueError) naming its field here
        (``rv_filter_value must be ...``)."""
        if self.rv_filter is None:
            return None
        try:
            return FilterSpec(**{name: getattr(self, key) for name, key in RV_FILTER_FIELDS.items()})
        except FilterSpecError as e:
            raise e.renamed(RV_FILTER_FIELDS[e.field]) from None


class RagenGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with group filtering before the loss and MI logging (module docstring).

    Takes exactly ``GRPOTrainer``'s arguments; ``args`` must be a :class:`RagenGRPOConfig`. After each generation
    batch, ``last_filter_result`` holds its :class:`~ragen_core.math.filtering.FilterResult` (None before the first).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if not isinstance(config, RagenGRPOConfig):
            raise TypeError(
                f"RagenGRPOTrainer needs args=RagenGRPOConfig(...) (GRPOConfig plus rv_filter_* and mi_*); "
                f"got {type(config).__name__}"
            )
        super().__init__(*args, **kwargs)
        self._rv_spec = self.args.filter_spec()
        self._rv_rewards_per_func: torch.Tensor | None = None
        self._rv_skip_update = False
        # The random strategy draws from its own seeded stream, never from torch's global state.
        self._rv_generator = torch.Generator().manual_seed(int(self.args.seed))
        self._mi_ema = MIZScoreEMA(self.args.mi_ema_alpha, self.args.mi_eps)
        self._mi_last_step: int | None = None
        self.last_filter_result: FilterResult | None = None

    # -------------------------------------------------------------------------------------- TRL hooks
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rv_rewards_per_func = rewards_per_func  # [N, F], gathered over processes
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:  # evaluation batches are neither filtered nor cross-scored
            return output
        step = int(self.state.global_step)
        if self.args.mi_every and (self._mi_last_step is None or step - self._mi_last_step >= self.args.mi_every):
            self._mi_last_step = step
            self._log_mi(output)
        if self._rv_spec is None:
            return output
        return self._filter(output)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._rv_skip_update and self.model.training:
            # Every process takes this branch for the same batch, so no collective is left waiting; a loss with
            # no graph leaves every .grad None and the optimizer step changes nothing.
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    # -------------------------------------------------------------------------------------- filtering
    def _filter(self, output: dict) -> dict:
        if self._rv_rewards_per_func is None:  # pragma: no cover - TRL always scores before returning
            raise RuntimeError("no rewards were recorded for this batch (is _calculate_rewards still called?)")
        g = self.num_generations
        rpf = self._rv_rewards_per_func
        result = filter_groups(group_rewards(rpf, self.reward_weights, g), self._rv_spec, generator=self._rv_generator)
        n_local = output["completion_ids"].shape[0]
        start = self.accelerator.process_index * n_local
        row_mask = result.mask.to(rpf.device).repeat_interleave(g)  # [N]
        advantages = batch_level_advantages(rpf, self.reward_weights, g, row_mask,
                                            self.multi_objective_aggregation, self.scale_rewards)
        if advantages is not None:
            output = {**output, "advantages": advantages[start:start + n_local].to(output["advantages"].dtype)}
        rows = local_kept_rows(result.mask, g, start, n_local)
        # Every process pads to the largest kept count of any process (all know the global mask): TRL's loss
        # gathers per-row statistics, and collectives need equal sizes on every process.
        multiple = int(self.args.steps_per_generation)
        width = max(padded_row_count(local_kept_rows(result.mask, g, r * n_local, n_local).numel(), multiple)
                    for r in range(self.accelerator.num_processes))
        filtered, n_pad = take_rows(output, rows, multiple=multiple, min_rows=width)
        loss_mask = filtered["completion_mask"]
        if filtered.get("tool_mask") is not None:
            loss_mask = loss_mask * filtered["tool_mask"]
        filtered["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        self._rv_skip_update = bool(result.empty)
        self.last_filter_result = result

        metrics = result.as_metrics("filter/")
        metrics["filter/kept_rows"] = float(self.accelerator.gather(torch.tensor(rows.numel(),
                                                                                  device=loss_mask.device)).sum())
        metrics["filter/placeholder_rows"] = float(n_pad)
        metrics["filter/kept_tokens"] = float(filtered["num_items_in_batch"])
        append_finite(self._metrics["train"], metrics)
        return filtered

    # -------------------------------------------------------------------------------------- MI proxies
    def _log_mi(self, output: dict) -> None:
        """Cross-score the whole generation batch and log ``collapse/*``.

        Every process gathers all P*G rows and runs the same forward calls on the same data, so sharded models
        (ZeRO-3, FSDP) see matching collectives. X_i is the prompt of group i (its first row), Z_ik the k-th
        completion's tokens (``completion_mask``; for tool rollouts the tool results are part of it).

        A group with an empty trace (a completion whose mask is all zero, e.g. a truncated one under
        ``mask_truncated_completions``: its per-token MI is undefined) is left out, as the verl adapter does, and
        counted in ``collapse/groups_without_trace``; with fewer than two groups left only that and
        ``collapse/skipped`` = 1 are logged.
        """
        prompts = [ids[m.bool()].tolist() for ids, m in zip(output["prompt_ids"], output["prompt_mask"])]
        traces = [ids[m.bool()].tolist() for ids, m in zip(output["completion_ids"], output["completion_mask"])]
        prompts, traces = gather_object(prompts), gather_object(traces)
        g = self.num_generations
        if len(traces) % g:  # pragma: no cover - TRL's generation batch is P whole groups
            return
        groups = [i for i in range(len(traces) // g) if all(traces[i * g:(i + 1) * g])]
        metrics = {"collapse/groups_without_trace": float(len(traces) // g - len(groups))}
        if len(groups) < 2:  # fewer than two groups: no cross-prompt contrast
            metrics["collapse/skipped"] = 1.0
            append_finite(self._metrics["train"], metrics)
            return
        group_prompts = [prompts[i * g] for i in groups]
        responses = [traces[i * g:(i + 1) * g] for i in groups]
        model = self.accelerator.unwrap_model(self.model)
        scores, lengths = cross_score(model, group_prompts, responses, self.args.mi_batch_tokens, return_lengths=True)
        stats = mi_proxies(scores, lengths, prompt_ids=[tuple(x) for x in group_prompts], eps=self.args.mi_eps)
        metrics.update(flatten_proxies(stats, prefix="collapse/"))
        metrics["collapse/mi_zscore_ema"] = self._mi_ema.update(stats)
        metrics["collapse/skipped"] = 0.0
        append_finite(self._metrics["train"], metrics)
