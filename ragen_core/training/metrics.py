"""The metrics schema: every key `ragen train` writes to ``metrics.jsonl``, defined once, with its unit and who logs it.

Each key is a constant of its namespace class (:class:`Rollout`, :class:`Filter`, :class:`Loss`, :class:`Collapse`,
:class:`Probe`, :class:`Val`, :class:`Perf`, :class:`Sft`, and :data:`STEP`); producers and readers use the constants,
never the string. :data:`SCHEMA` maps each key to its :class:`Metric` (meaning, unit, producer); :func:`lookup`
also resolves the numbered keys (``rollout/reward_share_turn3``). The table of ``docs/train.md`` is
:func:`markdown_table` (``python -m ragen_core.training.metrics`` prints it).

Producers outside the trainer compute their keys from their own prefix (``ragen_core.rollout``,
``ragen_core.math.filtering``, ``ragen_core.math.mi``, ``ragen_core.training.probe``, ``ragen_core.training.sft``);
the tests check that everything a run logs is here.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Metric", "SCHEMA", "STEP", "Rollout", "Filter", "Loss", "Collapse", "Probe", "Val", "Perf", "Sft",
           "MI_PROXIES", "lookup", "unknown_keys", "markdown_table"]


@dataclass(frozen=True)
class Metric:
    """One key of ``metrics.jsonl``: ``key`` (``{k}`` stands for a number), its ``unit``, who logs it and when
    (``logged_by``) and what it means (``description``). A value that is undefined for a batch is logged as null,
    and so is any NaN or infinity (a description's "NaN" is a null in the file): every line of ``metrics.jsonl`` is
    strict JSON, which ``json.loads`` and ``pandas.read_json(path, lines=True)`` read as they are."""

    key: str
    unit: str
    logged_by: str
    description: str

    def matches(self, key: str) -> bool:
        if "{k}" not in self.key:
            return key == self.key
        return re.fullmatch(re.escape(self.key).replace(r"\{k\}", r"\d+"), key) is not None


#: key -> Metric, in the order of the table.
SCHEMA: dict[str, Metric] = {}


def _metric(key: str, unit: str, logged_by: str, description: str) -> str:
    if key in SCHEMA:
        raise ValueError(f"metric {key!r} is defined twice")
    SCHEMA[key] = Metric(key, unit, logged_by, description)
    return key


def lookup(key: str) -> Metric | None:
    """The schema entry of a logged key (numbered keys match their ``{k}`` entry); None for an unknown key."""
    if key in SCHEMA:
        return SCHEMA[key]
    return next((m for m in SCHEMA.values() if "{k}" in m.key and m.matches(key)), None)


def unknown_keys(records: Iterable[Mapping[str, object]]) -> set[str]:
    """The keys of `records` (rows of ``metrics.jsonl``) that the schema does not define."""
    return {key for record in records for key in record if lookup(key) is None}


# Units.
SHARE = "share (0-1)"
FLAG = "0/1"
COUNT = "count"
SECONDS = "s"
TOKENS = "tokens"
REWARD = "reward"
NATS_TOKEN = "nats/token"
NATS_TRACE = "nats/trace"

# Who logs a key, and when (the modules: ragen_core.rollout, ragen_core.math.filtering, ragen_core.training.trainer,
# ragen_core.training.probe, ragen_core.training.sft, ragen_core.training.warm_cache).
_EVERY_RECORD = "every record"
# rollout/ and the filter's decision describe the step's first rollout batch: the refill rounds of
# `algo.dynamic_sampling` are not in them (their groups reach the update and the `filter/rows_*` counts only).
_BATCH = "`RolloutBatch.summary` of the step's first rollout batch (before the filter and any refill), each step"
_DECISION = ("`FilterResult.as_metrics` (filter off: `Trainer.filter_with_metrics`) on the step's first rollout "
             "batch, each step")
_STEP = "`Trainer.train_step`, each step"
_DAPO = "`Trainer.train_step`, each step with `algo.dynamic_sampling`"
_UPDATED = "`Trainer.train_step`, each step that updates"
_UPDATE = "`Trainer.update`, each step that updates"
# Trainer.update weights each micro-batch's value as the backward does (policy, total, KL: by the rows or tokens the
# loss mode counts; the token means: by tokens), so that each mini-batch's value does not depend on
# `algo.micro_batch_size`, and averages the mini-batches.
_UPDATE_MICRO = ("`Trainer.update`, each step that updates: the mean over its mini-batches of each mini-batch's "
                 "value (its micro-batches weighted as the backward weights them, so `algo.micro_batch_size` "
                 "changes nothing)")
_UPDATE_OPT = "`Trainer.update`, each step that updates: the mean over its optimiser steps"
_MI = "`Trainer.mi_diagnostics`, every `mi.every` steps (up to `mi.until`)"
_PROBE = "`probe_metrics`, step 0 and every `mi.probe_every` steps (up to `mi.probe_until`, then the last step)"
_VAL = "`Trainer.evaluate`, step 0, every `eval.every` steps (up to `eval.until`), the last step"
_SFT = "`warm_start`, step 0"
_CACHE = "`cached_warm_start`, step 0"

STEP = _metric("step", "step", _EVERY_RECORD, "RL steps done when the record was logged (0: the warm start and the "
               "measurements before the first RL step)")


class Rollout:
    """``rollout/``: the step's training batch, sampled by the policy before the update."""

    PREFIX = "rollout/"
    SUCCESS = _metric("rollout/success", SHARE, _BATCH, "share of the episodes that succeeded")
    RETURN = _metric("rollout/return", REWARD, _BATCH, "mean episode return (sum of the turn rewards)")
    RETURN_STD = _metric("rollout/return_std", REWARD, _BATCH, "population std of the episode returns")
    FORMAT_VALID = _metric("rollout/format_valid", SHARE, _BATCH,
                           "mean over episodes of the share of well-formed turns")
    RESPONSE_LENGTH = _metric("rollout/response_length", TOKENS, _BATCH,
                              "mean response tokens per episode (all turns)")
    TOKENS_PER_TURN = _metric("rollout/tokens_per_turn", TOKENS, _BATCH, "response tokens per turn")
    NUM_TURNS = _metric("rollout/num_turns", "turns", _BATCH, "mean turns per episode")
    TRAJECTORIES = _metric("rollout/trajectories", COUNT, _BATCH, "episodes in the batch (P x G)")
    ROWS = _metric("rollout/rows", COUNT, _BATCH, "training rows of the batch (one per episode in full context, one "
                   "per turn otherwise)")
    SEQ_LEN = _metric("rollout/seq_len", TOKENS, _BATCH, "mean row length (prompt and response)")
    RESPONSE_CAPPED = _metric("rollout/response_capped", SHARE, _BATCH,
                              "share of turns whose response hit `rollout.max_new_tokens` (finish reason length)")
    ENV_ERRORS = _metric("rollout/env_errors", COUNT, _BATCH, "turns on which the env raised an error")
    INVALID_ACTION = _metric("rollout/invalid_action", SHARE, _BATCH,
                             "share of turns whose action was invalid (nothing ran)")
    TOOL_USE = _metric("rollout/tool_use", SHARE, _BATCH, "share of episodes whose first turn ran a valid action "
                       "that is not final (a tool call); only envs that tell final actions apart")
    REWARD_SHARE_TURN = _metric("rollout/reward_share_turn{k}", SHARE, _BATCH,
                                "share of the batch's positive reward earned on turn k (k = 1..`rollout.max_turns`); "
                                "null without positive reward")
    REWARD_TURN = _metric("rollout/reward_turn", "turn", _BATCH, "mean turn (1-based) on which positive reward is "
                          "earned, weighted by that reward; null without positive reward")


class Filter:
    """``filter/``: the SNR-aware filter's decision on the step's batch and what reached the update."""

    PREFIX = "filter/"
    KEPT_GROUPS = _metric("filter/kept_groups", COUNT, _DECISION, "groups kept (all of them when the filter is off)")
    KEPT_FRACTION = _metric("filter/kept_fraction", SHARE, _DECISION, "share of the groups kept")
    EMPTY = _metric("filter/empty", FLAG, _DECISION, "1 when the filter kept nothing")
    RV_MEAN = _metric("filter/rv_mean", "reward^2", _DECISION,
                      "mean per-group reward variance of the episode returns (sample variance with `filter.ddof`; "
                      "NaN groups ignored; null with one rollout per group)")
    RV_STD = _metric("filter/rv_std", "reward^2", _DECISION,
                     "population std over the groups of the per-group reward variances")
    RV_HETEROGENEITY = _metric("filter/rv_heterogeneity", "ratio", _DECISION,
                               "RV heterogeneity, rv_std / rv_mean (above 1: filtering separates signal from noise)")
    ZERO_FRACTION = _metric("filter/zero_fraction", SHARE, _DECISION,
                            "share of the groups (NaN groups left out) with zero reward variance")
    NAN_GROUPS = _metric("filter/nan_groups", COUNT, _DECISION,
                         "groups with a NaN or infinite reward variance (never kept); null with one rollout per group")
    GROUPS_TOTAL = _metric("filter/groups_total", COUNT, _STEP,
                           "groups of the step's first rollout batch (`rollout.groups`): with `algo.dynamic_sampling` "
                           "each of `filter/refill_rounds` rolls out as many more")
    REFILL_ROUNDS = _metric("filter/refill_rounds", COUNT, _DAPO,
                            "extra rollout rounds of dynamic sampling to refill the dropped groups")
    SKIPPED = _metric("filter/skipped", FLAG, _STEP, "1 when nothing was kept and the update was skipped")
    EMPTY_STREAK = _metric("filter/empty_streak", COUNT, _STEP, "skipped steps in a row (`filter.max_empty_steps`)")
    EMPTY_TOTAL = _metric("filter/empty_total", COUNT, _STEP, "skipped steps so far in the run")
    REGULARISER_ONLY = _metric("filter/regulariser_only", FLAG, _STEP,
                               "1 when no group had reward variance and the step updated on the regularisers "
                               "alone (`filter.empty_step = \"regularise\"`)")
    REGULARISER_ONLY_TOTAL = _metric("filter/regulariser_only_total", COUNT, _STEP,
                                     "regulariser-only steps so far in the run")
    ROWS_KEPT = _metric("filter/rows_kept", COUNT, _UPDATED, "training rows of the kept groups")
    ROWS_TOTAL = _metric("filter/rows_total", COUNT, _UPDATED,
                         "training rows of the whole batch (with `algo.dynamic_sampling`, of the refilled batch, "
                         "which holds only kept groups: then equal to `filter/rows_kept`)")
    TOKENS_KEPT_FRACTION = _metric("filter/tokens_kept_fraction", SHARE, _UPDATED,
                                   "share of the batch's tokens (prompt and response, padding left out) in the kept "
                                   "rows (1 with `algo.dynamic_sampling`: see `filter/rows_total`)")
    KEPT_ZERO_ADV_SHARE = _metric("filter/kept_zero_adv_share", SHARE, _UPDATED,
                                  "share of the kept groups whose advantage is 0 on every trained token")

    #: What :meth:`ragen_core.math.filtering.FilterResult.as_metrics` logs: the filter-off path logs these too.
    DECISION = (KEPT_GROUPS, KEPT_FRACTION, EMPTY, RV_MEAN, RV_STD, RV_HETEROGENEITY, ZERO_FRACTION, NAN_GROUPS)


class Loss:
    """``loss/``: the update (means over its mini-batches, each of its micro-batches weighted as the backward
    weights them; over its optimiser steps for the gradient norms)."""

    PREFIX = "loss/"
    ADVANTAGE_MEAN = _metric("loss/advantage_mean", "advantage", _UPDATED, "mean advantage over the trained tokens")
    ADVANTAGE_STD = _metric("loss/advantage_std", "advantage", _UPDATED,
                            "population std of the advantage over the trained tokens")
    WEIGHTED_ADVANTAGE_MEAN = _metric("loss/weighted_advantage_mean", "advantage", _UPDATED,
                                      "mean of advantage x trajectory token weight (`traj-mean` aggregation only): "
                                      "the net push on the model's own samples")
    POLICY = _metric("loss/policy", "loss", _UPDATE_MICRO,
                     "clipped policy-gradient loss (`algo.loss_agg_mode` over a mini-batch)")
    ENTROPY = _metric("loss/entropy", NATS_TOKEN, _UPDATE_MICRO,
                      "policy entropy, token mean over a mini-batch's trained tokens")
    TOTAL = _metric("loss/total", "loss", _UPDATE_MICRO,
                    "a mini-batch's policy loss - `algo.entropy_coef` x entropy (+ `algo.kl_coef` x kl)")
    KL = _metric("loss/kl", NATS_TOKEN, _UPDATE_MICRO, "KL to the frozen reference (`algo.kl_coef` > 0 only)")
    CLIP_FRACTION = _metric("loss/clip_fraction", SHARE, _UPDATE_MICRO,
                            "share of a mini-batch's trained tokens whose ratio was clipped")
    DUAL_CLIP_FRACTION = _metric("loss/dual_clip_fraction", SHARE, _UPDATE_MICRO,
                                 "share of trained tokens hit by the dual clip")
    APPROX_KL = _metric("loss/approx_kl", NATS_TOKEN, _UPDATE_MICRO,
                        "approximate KL from the sampling policy (token mean)")
    VALUE = _metric("loss/value", "loss", _UPDATE_MICRO, "critic loss (algorithms with a critic)")
    VALUE_CLIP_FRACTION = _metric("loss/value_clip_fraction", SHARE, _UPDATE_MICRO,
                                  "share of trained tokens whose value was clipped (algorithms with a critic)")
    GRAD_NORM = _metric("loss/grad_norm", "norm", _UPDATE_OPT,
                        "policy gradient norm before clipping (`algo.grad_clip`)")
    GRAD_NORM_TASK = _metric("loss/grad_norm_task", "norm", _UPDATE_OPT,
                             "norm of the policy-gradient (task) part of the gradient (`algo.grad_parts`)")
    GRAD_NORM_ENTROPY = _metric("loss/grad_norm_entropy", "norm", _UPDATE_OPT,
                                "norm of the entropy bonus's part, `algo.entropy_coef` x its gradient "
                                "(`algo.grad_parts`)")
    GRAD_NORM_KL = _metric("loss/grad_norm_kl", "norm", _UPDATE_OPT,
                           "norm of the KL penalty's part, `algo.kl_coef` x its gradient (`algo.grad_parts`, KL on)")
    UPDATE_NORM = _metric("loss/update_norm", "norm", _UPDATE,
                          "norm of the parameter change of the step's optimiser updates (`algo.grad_parts`)")
    CRITIC_GRAD_NORM = _metric("loss/critic_grad_norm", "norm", _UPDATE_OPT, "critic gradient norm before clipping")
    UPDATES = _metric("loss/updates", COUNT, _UPDATE, "optimiser steps taken")
    LR = _metric("loss/lr", "learning rate", _UPDATE, "the policy's learning rate (`algo.lr` x the schedule)")
    KL_EARLY_STOP = _metric("loss/kl_early_stop", FLAG, _UPDATE, "1 when `algo.target_kl` stopped the update early")


#: The MI proxies of ragen_core.math.mi.mi_proxies (flattened): name -> (unit, meaning). Logged under ``collapse/``
#: (the training batch) and ``probe/`` (the held-out probe).
MI_PROXIES: dict[str, tuple[str, str]] = {
    "retrieval_acc": (SHARE, "Retrieval-Acc: share of traces whose highest-scoring prompt is their own (or one "
                             "identical to it; a tie for the top shares the hit)"),
    "retrieval_chance": (SHARE, "chance level of Retrieval-Acc (1/P with distinct prompts)"),
    **{f"recall_at_{k}": (SHARE, f"Recall@{k} (only with more than {k} prompts)") for k in (2, 4, 8)},
    **{f"recall_at_{k}_chance": (SHARE, f"chance level of Recall@{k}") for k in (2, 4, 8)},
    "mi_est": (NATS_TOKEN, "MI-Est, the per-token MI proxy (matched - marginal)"),
    "mi_est_tokenwise": (NATS_TOKEN, "MI-Est with the official code's per-token marginal"),
    "mi_seq_est": (NATS_TRACE, "MI-Seq-Est, the sequence-level MI proxy (at most log P)"),
    "mi_zscore": ("z", "MI-Est / (std of the marginal + eps)"),
    "marginal_std": (NATS_TOKEN, "population std of the per-token marginal"),
    "cond_entropy_est": (NATS_TOKEN, "H(Z|X) estimate"),
    "marginal_entropy_est": (NATS_TOKEN, "H(Z) estimate"),
    "marginal_entropy_est_tokenwise": (NATS_TOKEN, "H(Z) estimate with the per-token marginal"),
    "cond_entropy_seq_est": (NATS_TRACE, "H(Z|X) estimate per trace"),
    "marginal_entropy_seq_est": (NATS_TRACE, "H(Z) estimate per trace"),
    "mi_upper_bound": (NATS_TRACE, "log P, the ceiling of MI-Seq-Est"),
    "n_prompts": (COUNT, "prompts cross-scored (P)"),
    "group_size": (COUNT, "traces per prompt (G)"),
}


def _proxies(cls: type) -> type:
    """Register the MI proxies under the class's ``PREFIX`` and set one constant per proxy (``MI_SEQ_EST``)."""
    for name, (unit, text) in MI_PROXIES.items():
        setattr(cls, name.upper(), _metric(cls.PREFIX + name, unit, cls.LOGGED_BY, f"{text}; {cls.SCOPE}"))
    return cls


@_proxies
class Collapse:
    """``collapse/``: the in-batch MI diagnostics, over the first turn of every group of the step's batch (kept and
    dropped). One constant per MI proxy (:data:`MI_PROXIES`: ``Collapse.MI_SEQ_EST`` ...) besides those below."""

    PREFIX = "collapse/"
    LOGGED_BY, SCOPE = _MI, "in-batch"
    MI_ZSCORE_EMA = _metric("collapse/mi_zscore_ema", "z", _MI, "MI-ZScore-EMA: MI-Est over an EMA of the batch scale")
    REGIME = _metric("collapse/regime", "label", _MI, "the regime read off the proxies (high or low H(Z|X) x high "
                     "or low input dependence; docs/science.md section 1)")
    REGIME_RESOLVED = _metric("collapse/regime_resolved", "0/1", _MI,
                              "1 when the batch can tell the regime's MI side from chance (at least 4 prompts, and "
                              "its prompts relabelled read below the MI threshold; docs/science.md section 1)")
    MI_SEQ_P_VALUE = _metric("collapse/mi_seq_p_value", "p-value", _MI,
                             "permutation p-value of MI-Seq-Est: the share of the prompts' relabellings that read "
                             "at least as high")
    EMPTY_TRACES = _metric("collapse/empty_traces", COUNT, _MI, "empty traces scored as one end-of-turn token")
    PMI_RETURN_COV_KEPT = _metric("collapse/pmi_return_cov_kept", "reward x nats", _MI,
                                  "within-group covariance of a trace's return and its pointwise MI, kept groups "
                                  "(0 when either does not vary within any group, e.g. one rollout per group)")
    PMI_RETURN_CORR_KEPT = _metric("collapse/pmi_return_corr_kept", "correlation", _MI,
                                   "within-group correlation of return and pointwise MI, kept groups (0, not "
                                   "null, when either sum of squares is 0: no return or no PMI variation)")
    PMI_RETURN_COV_DROPPED = _metric("collapse/pmi_return_cov_dropped", "reward x nats", _MI,
                                     "within-group covariance of return and pointwise MI, dropped groups")
    PMI_RETURN_CORR_DROPPED = _metric("collapse/pmi_return_corr_dropped", "correlation", _MI,
                                      "within-group correlation of return and pointwise MI, dropped groups (0 "
                                      "without variation, as for the kept groups)")
    MI_SKIPPED_VISION = _metric("collapse/mi_skipped_vision", FLAG, _MI,
                                "1 when the diagnostics were skipped (a batch with images)")
    TOKEN_ENTROPY = _metric("collapse/token_entropy", NATS_TOKEN, _UPDATED, "policy token entropy (= loss/entropy)")


@_proxies
class Probe:
    """``probe/``: the held-out MI probe (``mi.probe_prompts`` > 0): fixed prompts, their own sampler. One constant
    per MI proxy (:data:`MI_PROXIES`: ``Probe.MI_SEQ_EST`` ...) besides those below."""

    PREFIX = "probe/"
    LOGGED_BY, SCOPE = _PROBE, "held-out probe"
    RETRIEVAL_MARGIN = _metric("probe/retrieval_margin", SHARE, _PROBE,
                               "(Retrieval-Acc - chance) / (1 - chance): 0 = chance, 1 = ceiling")
    MI_SEQ_NORM = _metric("probe/mi_seq_norm", SHARE, _PROBE,
                          "MI-Seq-Est / log N (N = `mi.probe_prompts`: `probe/mi_upper_bound`)")
    TOKEN_ENTROPY = _metric("probe/token_entropy", NATS_TOKEN, _PROBE,
                            "policy entropy per token of the scored span (`mi.span`), token mean over all traces")
    EMPTY_TRACES = _metric("probe/empty_traces", COUNT, _PROBE, "empty traces scored as one stand-in token")
    SUCCESS = _metric("probe/success", SHARE, _PROBE, "success of the probe episodes, which stop after their first "
                      "turn (on a multi-turn env not comparable to `rollout/success` or `val/success`)")
    RETURN = _metric("probe/return", REWARD, _PROBE, "mean return of the probe episodes (their first turn only)")
    PMI_RETURN_COV = _metric("probe/pmi_return_cov", "reward x nats", _PROBE,
                             "within-prompt covariance of a trace's return and its pointwise MI")
    PMI_RETURN_CORR = _metric("probe/pmi_return_corr", "correlation", _PROBE,
                              "within-prompt correlation of return and pointwise MI (< 0: a template pays; 0, not "
                             "null, when either sum of squares is 0: no return or no PMI variation)")
    REASONING_TOKENS = _metric("probe/reasoning_tokens", TOKENS, _PROBE, "mean length of the scored span")
    MODAL_SHARE = _metric("probe/modal_share", SHARE, _PROBE, "share of traces equal to the most common one")
    TEMPLATE_SHARE = _metric("probe/template_share", SHARE, _PROBE,
                             "share of traces that are the warm start's template (when the demonstrator has one)")
    TOKEN_ENTROPY_TEMPLATE = _metric("probe/token_entropy_template", NATS_TOKEN, _PROBE,
                                     "policy entropy per reasoning token of the traces that are a template (NaN: "
                                     "none); the input-agnostic mode's own diversity")
    TOKEN_ENTROPY_STATE = _metric("probe/token_entropy_state", NATS_TOKEN, _PROBE,
                                  "policy entropy per reasoning token of the traces that are no template "
                                  "(state-derived), NaN: none")


class Val:
    """``val/``: validation on the held-out seeds (greedy by default)."""

    PREFIX = "val/"
    SUCCESS = _metric("val/success", SHARE, _VAL, "share of the validation episodes that succeeded")
    RETURN = _metric("val/return", REWARD, _VAL, "mean validation return")
    FORMAT_VALID = _metric("val/format_valid", SHARE, _VAL,
                           "mean over the validation episodes of the share of well-formed turns")
    RESPONSE_LENGTH = _metric("val/response_length", TOKENS, _VAL, "mean response tokens per episode")


class Perf:
    """``perf/``: where the time goes (and two counts of the work done)."""

    PREFIX = "perf/"
    ROLLOUT_S = _metric("perf/rollout_s", SECONDS, _STEP,
                        "rollout, `rollouts.jsonl` and filter (with refill rounds)")
    MI_S = _metric("perf/mi_s", SECONDS, _STEP, "the in-batch MI diagnostics")
    SCORE_S = _metric("perf/score_s", SECONDS, _STEP, "old, reference and critic scoring and the advantages")
    UPDATE_S = _metric("perf/update_s", SECONDS, _STEP, "the update")
    STEP_S = _metric("perf/step_s", SECONDS, _STEP, "the whole step before validation and probe")
    EVAL_S = _metric("perf/eval_s", SECONDS, _VAL, "the validation")
    PROBE_S = _metric("perf/probe_s", SECONDS, "`Trainer.probe_diagnostics`, with each probe", "the held-out probe")
    OLD_LOGPROB_PASS = _metric("perf/old_logprob_pass", FLAG, _UPDATED,
                               "1 when a scoring pass computed the old log-probs (0: taken from the update's forward)")
    TOKENS_TRAINED = _metric("perf/tokens_trained", TOKENS, _UPDATED, "trained (response) tokens of the kept rows")
    SFT_S = _metric("perf/sft_s", SECONDS, _SFT, "the warm start (its loading time on a cache hit)")
    SFT_COLLECT_S = _metric("perf/sft_collect_s", SECONDS, _SFT, "collecting the demonstrations")
    SFT_S_ORIGINAL = _metric("perf/sft_s_original", SECONDS, _CACHE,
                             "the warm start of the run that filled the cache (cache hits only)")


class Sft:
    """``sft/``: the warm start (supervised fine-tuning on a demonstrator's episodes)."""

    PREFIX = "sft/"
    # Running training losses: each optimiser step's batch is scored before that step's update, so `loss_last` is
    # not the loss of the final weights.
    LOSS_FIRST = _metric("sft/loss_first", NATS_TOKEN, _SFT, "mean over the first epoch's optimiser steps of the "
                         "step's token-mean NLL (taken before that step's update)")
    LOSS_LAST = _metric("sft/loss_last", NATS_TOKEN, _SFT, "mean over the last epoch's optimiser steps of the step's "
                        "token-mean NLL (taken before that step's update: not the final weights' loss)")
    MEAN_TOKEN_PROB = _metric("sft/mean_token_prob", "probability", _SFT, "mean over the last epoch's optimiser "
                              "steps of the step's token-mean probability (taken before that step's update)")
    EPISODES = _metric("sft/episodes", COUNT, _SFT, "demonstration episodes")
    SCRIPT_SUCCESS = _metric("sft/script_success", SHARE, _SFT,
                             "share of the demonstration episodes that succeeded (with `warm_start.action_noise`)")
    TOKENS = _metric("sft/tokens", TOKENS, _SFT, "trained tokens of the demonstrations")
    CACHED = _metric("sft/cached", FLAG, _CACHE, "1 when the warm start was loaded from `warm_start.cache_dir`")


def markdown_table() -> str:
    """The schema as a Markdown table (the generated block of docs/train.md)."""
    lines = ["| key | unit | meaning | logged by |", "|---|---|---|---|"]
    for m in SCHEMA.values():
        text = m.description.replace("|", "\\|")
        lines.append(f"| `{m.key}` | {m.unit} | {text} | {m.logged_by} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
