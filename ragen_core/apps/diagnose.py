"""``ragen diagnose ROLLOUTS.jsonl|RUN_DIR [--model PATH|RUN_DIR]``: collapse diagnostics on anyone's rollouts.

Input: one JSON object per line (one trajectory): ``group`` (int or string, the prompt group; the integer 1 and
the string "1" are two groups, which the report then names by their JSON text, ``1`` and ``"1"``), ``reward``
(number; NaN allowed, it marks the group's variance NaN), optional ``prompt`` and ``response`` (strings) and
``model`` (the :func:`ragen_core.policy.identity.weights_sha256` of the policy that sampled it). A training run
folder stands for its ``rollouts.jsonl`` (the trainer writes its last steps' rollouts there, in this format, with
``step`` and ``final``: the report says when the file holds several training batches, whose groups it pools).

Output:

1. The RV heterogeneity pre-check of docs/science.md section 4: mean, std and std/mean of the per-group reward
   variance, the share of zero-variance groups, what top-p with rho = 0.9 would keep, and a histogram.
2. With ``--model PATH`` (a local transformers causal LM and its tokenizer, or a run folder, exported on the fly
   by ``ragen export``): cross-scores every response under every group's prompt
   (:func:`ragen_core.math.mi.cross_score`) and reports the MI proxies of docs/science.md section 2 *as that model
   scores them*. The regime of section 1 is a statement about the policy that sampled the rollouts, so it is
   reported only when the scoring model is that policy: the rollouts name it (``model``) and its weights match, or
   ``--scorer-is-sampler`` says so; otherwise it is withheld with the reason. A run folder that cannot take its
   export (read-only) is left as it is: the model is exported to a temporary folder. Prompts that place images for
   a vision model are refused (text-only cross-scoring would score them without their pictures).

Malformed lines (not UTF-8, not JSON Python can hold, not a rollout) are reported with their line numbers on
stderr (never silently skipped); the valid lines are still analysed and the exit status is 1. Exit status 2: the
file cannot be read, nothing can be analysed, an option is out of range (``--max-groups`` below 0, a ``--device``
this torch cannot use), ``--model`` is not a local model folder (or its packages are not installed) or cannot score
these rollouts (images in the prompts). Ctrl-C: one line, exit status 130.

The pre-check needs only numpy (the base install, no torch): :func:`rv_report` computes the trainer's statistics
(``ragen_core.math.filtering.rv_statistics``) and its top-p rule (``select_groups(strategy="top_p")``) in numpy, and
the tests check both against the torch versions. ``--model`` needs the ``train`` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

__all__ = [
    "Rollout",
    "load_rollouts",
    "group_rollouts",
    "rv_report",
    "mi_report",
    "device_problem",
    "group_labels",
    "batches_note",
    "format_histogram",
    "simulate_bimodal_rollouts",
    "write_rollouts",
    "add_arguments",
    "run",
    "main",
]

#: The rollouts file of a training run folder.
ROLLOUTS_FILE = "rollouts.jsonl"
#: The most histogram bins `--bins` takes (one printed line each).
MAX_BINS = 10_000

# Reference points quoted by docs/science.md section 4 for reading the heterogeneity ratio.
_HIGH_RATIO = 1.0
_LOW_RATIO = 0.5


@dataclass(frozen=True)
class Rollout:
    """One trajectory of a rollouts file."""

    line: int
    group: int | str
    reward: float
    prompt: str | None = None
    response: str | None = None
    #: the weights hash of the policy that sampled it (optional)
    model: str | None = None
    #: the training batch it belongs to, in a run's rollouts.jsonl: ``"step N"`` (field ``step``) or
    #: ``"final weights"`` (``final: true``, the batch the final weights sampled); None when the line names none
    batch: str | None = None


@dataclass
class LoadResult:
    """Parsed rollouts plus the malformed lines (``"line N: why"``)."""

    rollouts: list[Rollout] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


#: The characters an undecodable byte becomes when a file is read with ``errors="surrogateescape"`` (a raw lone
#: surrogate cannot come from valid UTF-8, and an escaped one in JSON text is ASCII), so a line holding one is
#: not UTF-8.
_UNDECODED = re.compile("[\udc80-\udcff]")


def _parse_line(number: int, text: str) -> Rollout | str:
    bad = _UNDECODED.search(text)
    if bad is not None:  # one damaged line is reported like any other malformed line, not the whole file refused
        return (f"line {number}: not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02x} at column "
                f"{bad.start() + 1})")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; arrays nested too deep
        return f"line {number}: not usable JSON ({str(exc).split(';')[0]})"
    if not isinstance(obj, dict):
        return f"line {number}: expected a JSON object, got {type(obj).__name__}"
    if "group" not in obj:
        return f"line {number}: missing field 'group'"
    if "reward" not in obj:
        return f"line {number}: missing field 'reward'"
    group = obj["group"]
    if isinstance(group, bool) or not isinstance(group, (int, str)):
        return f"line {number}: field 'group' must be an integer or a string, got {json.dumps(group)}"
    reward = obj["reward"]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return f"line {number}: field 'reward' must be a number, got {json.dumps(reward)}"
    try:
        reward = float(reward)
    except OverflowError:  # an integer beyond float64: as infinite as inf itself
        reward = math.inf if reward > 0 else -math.inf
    if math.isinf(reward):
        return f"line {number}: field 'reward' must be finite (or NaN), got {reward}"
    for key in ("prompt", "response", "model"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], str):
            return f"line {number}: field {key!r} must be a string, got {type(obj[key]).__name__}"
    step = obj.get("step")  # optional, written by the trainer: only read, never required
    batch = "final weights" if obj.get("final") is True else (
        f"step {step}" if isinstance(step, int) and not isinstance(step, bool) else None)
    return Rollout(number, group, reward, obj.get("prompt"), obj.get("response"), obj.get("model"), batch)


def load_rollouts(path: str | Path) -> LoadResult:
    """Read a rollouts JSONL file. Blank lines are ignored; every other unusable line becomes an error
    ``"line N: why"`` (1-based line numbers), a line that is not UTF-8 included (the others are still read). A
    UTF-8 byte order mark at the start is skipped."""
    result = LoadResult()
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            parsed = _parse_line(number, text)
            if isinstance(parsed, str):
                result.errors.append(parsed)
            else:
                result.rollouts.append(parsed)
    return result


def group_rollouts(rollouts: Sequence[Rollout]) -> dict[int | str, list[Rollout]]:
    """Rollouts by group, groups in order of first appearance."""
    groups: dict[int | str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group, []).append(r)
    return groups


def _group_variance(rewards: Sequence[float], ddof: int) -> float:
    """``1/(n - ddof) sum_k (r_k - mean)^2`` (NaN with fewer than ddof + 1 rewards or any NaN reward; ``inf`` when
    it overflows float64, e.g. rewards of +-1e308): the group variance of every report here (``ragen eval``'s
    pre-check included).

    The torch-free copy of :func:`ragen_core.math.filtering.reward_variance`, with its two rules (the pre-check runs
    on the base install, without torch; tests/apps check the two agree):

    - summed in ascending order, so that the variance is a function of the group's multiset of rewards, bit for bit:
      equal groups listed in another rollout order tie exactly and top-p's stable tie-break (lower index first)
      decides between them, not rounding;
    - exactly 0 for a group whose rewards are all equal, whatever their value: the rounded mean of (-0.1, -0.1,
      -0.1) left ~1e-34 here, so a batch of flat groups read as "low heterogeneity, top-p keeps every group"
      where the trainer sees no variance and skips the update.
    """
    n = len(rewards)
    if n - ddof < 1 or any(math.isnan(x) for x in rewards):
        return math.nan
    r = sorted(float(x) for x in rewards)
    if r[0] == r[-1] and math.isfinite(r[0]):  # equal infinities have no finite spread: NaN below, as in torch
        return 0.0
    mean = sum(r) / n
    try:
        return sum((x - mean) ** 2 for x in r) / (n - ddof)
    except OverflowError:  # float ** raises where numpy and torch give inf
        return math.inf


def group_labels(names: Sequence[int | str]) -> dict[int | str, str]:
    """How reports name each group: ``str(group)``, unless two groups would share a name (the integer ``1`` and the
    string ``"1"`` are two groups): then every group is named by its JSON text (``1`` and ``"1"``), so that each
    is shown, counted and listed apart."""
    labels = {g: str(g) for g in names}
    if len(set(labels.values())) < len(labels):
        labels = {g: json.dumps(g, ensure_ascii=False) for g in names}
    return labels


def rv_report(
    groups: dict[int | str, list[Rollout]],
    keep_rate: float = 0.9,
    score: str = "variance",
    ddof: int = 1,
) -> dict[str, Any]:
    """The RV heterogeneity pre-check (docs/science.md section 4) on grouped rollouts.

    Groups may have different sizes; groups with fewer than ``ddof + 1`` rollouts have no variance and are
    counted in ``too_small_groups`` (not in the statistics). Returns a JSON-ready dict with the statistics of
    :func:`ragen_core.math.filtering.rv_statistics`, group sizes, and the top-p (rho = ``keep_rate``) selection.
    """
    if score not in ("variance", "std"):
        raise ValueError(f"score must be 'variance' or 'std'; got {score!r}")
    names = list(groups)
    label = group_labels(names)
    variances = [_group_variance([r.reward for r in groups[g]], ddof) for g in names]
    sizes = [len(groups[g]) for g in names]
    too_small = [g for g, s in zip(names, sizes) if s - ddof < 1]
    usable = [i for i, s in enumerate(sizes) if s - ddof >= 1]
    report: dict[str, Any] = {
        "n_rollouts": sum(sizes),
        "n_groups": len(names),
        "group_size_min": min(sizes) if sizes else 0,
        "group_size_max": max(sizes) if sizes else 0,
        "too_small_groups": len(too_small),
        "ddof": ddof,
        "variances": {label[names[i]]: variances[i] for i in usable},
    }
    if not usable:
        report.update(rv_mean=math.nan, rv_std=math.nan, rv_heterogeneity=math.nan, zero_fraction=math.nan,
                      nan_groups=0, top_p={"keep_rate": keep_rate, "score": score, "kept_groups": 0,
                                           "kept_fraction": 0.0, "empty": True})
        return report
    v = np.asarray([variances[i] for i in usable], dtype=np.float64)
    stats = rv_statistics_np(v)
    scores = np.sqrt(v) if score == "std" else v
    kept = top_p_kept(scores, keep_rate)
    report.update(
        rv_mean=stats["rv_mean"],
        rv_std=stats["rv_std"],
        rv_heterogeneity=stats["rv_heterogeneity"],
        rv_heterogeneity_ci95=heterogeneity_interval(v),
        zero_fraction=stats["zero_fraction"],
        nan_groups=int(stats["n_nan"]),
        top_p={
            "keep_rate": keep_rate,
            "score": score,
            "kept_groups": len(kept),
            "kept_fraction": len(kept) / len(usable),
            "empty": not kept,
            "kept": [label[names[usable[i]]] for i in kept],
        },
    )
    return report


#: Variances at or below this count as zero (ragen_core.math.filtering.ZERO_TOL; a copy, to keep this module
#: torch-free).
ZERO_TOL = 1e-10


#: The top-p threshold's relative slack (ragen_core.math.filtering._FLOOR_SLACK; a copy, to keep this module
#: torch-free).
TOP_P_SLACK = 1e-9


#: Bootstrap resamples of the groups for :func:`heterogeneity_interval`.
BOOTSTRAP_RESAMPLES = 2000
#: Resampled group variances held at a time by :func:`heterogeneity_interval` (2**18 float64: 2 MiB an array).
BOOTSTRAP_CHUNK = 1 << 18


def heterogeneity_interval(variances: np.ndarray, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                           seed: int = 0) -> list[float]:
    """``[low, high]``: a percentile bootstrap interval of the RV heterogeneity ``std / mean`` of `variances`
    (one per group, NaN groups left out), resampling the groups with replacement (seeded, so a report is
    reproducible). Resamples whose mean is 0 (no variance drawn) have no ratio and are left out; ``[nan, nan]``
    with fewer than 2 groups or no resample with a ratio. With n groups the ratio cannot exceed sqrt(n - 1) (one
    group holding all the variance), so a few groups can only give a wide interval.

    The resamples are drawn a block of rows at a time (about :data:`BOOTSTRAP_CHUNK` values), so memory stays
    bounded whatever the number of groups (all of them at once took 16 bytes x 2000 x n: 4 GB at 125k groups). The
    draws are the same (the generator's stream does not depend on how it is cut into calls) and each row's ratio
    is computed alone, so the interval is the one of a single (resamples x n) draw, bit for bit."""
    v = np.asarray(variances, dtype=np.float64).reshape(-1)
    v = v[~np.isnan(v)]
    if v.size < 2:
        return [math.nan, math.nan]
    rng = np.random.default_rng(seed)
    rows = max(1, BOOTSTRAP_CHUNK // v.size)
    parts = []
    with np.errstate(invalid="ignore", over="ignore"):  # an overflowing (inf) variance gives a NaN ratio, no warning
        for start in range(0, resamples, rows):
            draws = v[rng.integers(0, v.size, size=(min(rows, resamples - start), v.size))]
            means = draws.mean(axis=1)
            ok = means > 0
            parts.append(draws[ok].std(axis=1) / means[ok])
    ratios = np.concatenate(parts) if parts else np.empty(0)
    if not ratios.size:
        return [math.nan, math.nan]
    tail = (1.0 - level) / 2.0
    return [float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1.0 - tail))]


def heterogeneity_reading(ratio: float, interval: Sequence[float] | None = None) -> str:
    """The pre-check's reading of the RV heterogeneity: its band (high >= 1.0, low <= 0.5, else intermediate:
    docs/science.md section 4), and, when the bootstrap `interval` reaches another band, that the batch cannot
    tell which."""
    band = _verdict(ratio)
    if interval is None or math.isnan(ratio) or any(math.isnan(x) for x in interval):
        return band
    lo, hi = interval
    # the bands are low (<= 0.5), intermediate (0.5, 1.0) and high (>= 1.0): which of them [lo, hi] touches
    touches = {"low": lo <= _LOW_RATIO, "intermediate": lo < _HIGH_RATIO and hi > _LOW_RATIO,
               "high": hi >= _HIGH_RATIO}
    spanned = [name for name, hit in touches.items() if hit]
    others = [name for name in spanned if name != _band(ratio)]
    if others:
        return (f"{band}; but its 95% bootstrap interval over the groups, [{lo:.2f}, {hi:.2f}], reaches "
                f"{' and '.join(others)} too: more groups are needed to place it in one band")
    return band


def _band(ratio: float) -> str:
    """The band of a heterogeneity ratio: high (>= 1.0), low (<= 0.5) or intermediate (between)."""
    return "high" if ratio >= _HIGH_RATIO else "low" if ratio <= _LOW_RATIO else "intermediate"


def rv_statistics_np(variances: np.ndarray) -> dict[str, float]:
    """``ragen_core.math.filtering.rv_statistics`` in numpy: over the non-NaN groups of ``variances [P]``,
    ``rv_mean``, ``rv_std`` (population, ddof 0), ``rv_heterogeneity = rv_std / rv_mean`` (NaN when the mean is
    0 or no group is left), ``zero_fraction`` (share with variance <= ZERO_TOL), ``n_groups``, ``n_nan``."""
    v = np.asarray(variances, dtype=np.float64).reshape(-1)
    nan = np.isnan(v)
    n = int(v.size - nan.sum())
    out = {"n_groups": float(v.size), "n_nan": float(nan.sum())}
    if n == 0:
        out.update(rv_mean=math.nan, rv_std=math.nan, rv_heterogeneity=math.nan, zero_fraction=math.nan)
        return out
    vv = v[~nan]
    with np.errstate(invalid="ignore", over="ignore"):  # an overflowing (inf) variance: mean inf, std NaN, as torch
        mean, std = float(vv.mean()), float(vv.std())
    out.update(rv_mean=mean, rv_std=std, rv_heterogeneity=std / mean if mean > 0 else math.nan,
               zero_fraction=int((vv <= ZERO_TOL).sum()) / n)
    return out


def top_p_kept(scores: np.ndarray, keep_rate: float) -> list[int]:
    """The groups top-p keeps (``select_groups(strategy="top_p", include_zero=True, order="largest", eps=0)``):
    rank the non-NaN scores ``[P]`` by a stable descending sort (ties: lower index first) and keep the smallest
    prefix k >= 1 with ``sum_{j<=k} s_(j) >= keep_rate * sum_i s_i`` (up to a relative 1e-9, as there); nothing
    when that sum is 0. Indices in ranked order."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    cand = [i for i in np.argsort(-np.where(np.isnan(s), -np.inf, s), kind="stable") if not np.isnan(s[i])]
    if not cand:
        return []
    cum = np.cumsum(s[cand])
    total = float(cum[-1])
    if not total > 0.0:
        return []
    # A prefix within TOP_P_SLACK (relative to the total) of the threshold reaches it, as in select_groups: 0.28 x 25
    # equal scores evaluates to 7.000000000000001, and 7 groups make 28% exactly.
    k = min(max(int((cum < keep_rate * total - TOP_P_SLACK * total).sum()) + 1, 1), len(cand))
    return [int(i) for i in cand[:k]]


def format_histogram(values: Sequence[float], bins: int = 10, width: int = 40) -> str:
    """A text histogram of finite ``values`` (``bins`` equal-width bins from 0 to the max)."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1; got {bins}")
    finite = [x for x in values if math.isfinite(x)]
    if not finite:
        return "(no finite values)"
    lo, hi = min(0.0, min(finite)), max(finite)
    if hi <= lo:
        hi = lo + 1.0
    counts, edges = np.histogram(np.asarray(finite), bins=bins, range=(lo, hi))
    top = max(int(counts.max()), 1)
    lines = []
    for c, a, b in zip(counts, edges[:-1], edges[1:]):
        bar = "#" * int(round(width * int(c) / top))
        lines.append(f"  [{a:8.4f}, {b:8.4f}) {int(c):5d} {bar}")
    return "\n".join(lines)


def mi_report(
    groups: dict[int | str, list[Rollout]],
    model_path: str,
    batch_tokens: int,
    max_groups: int | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Cross-score the rollouts with the causal LM at ``model_path`` and compute the MI proxies.

    Each group's prompt is its first rollout's ``prompt``; every group is truncated to the smallest group
    size G (the proxies need a [P, G, P] tensor). ``max_groups``: score the first N groups (None or 0: all).
    Raises ValueError when prompts or responses are missing, fewer than two groups remain or ``max_groups < 0``.
    """
    if max_groups is not None and max_groups < 0:
        raise ValueError(f"max_groups must be >= 0 (0 or None: all groups); got {max_groups}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import ragen_core.policy.tiny  # noqa: F401  (registers the tiny vision model type)
    from ragen_core.math.metrics import noise_note, regime_from_proxies, regime_resolution
    from ragen_core.math.mi import cross_score, mi_proxies, mi_seq_null
    from ragen_core.policy.hf import check_loaded_weights, check_tokenizer_fits
    from ragen_core.policy.identity import weights_sha256

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model, info = AutoModelForCausalLM.from_pretrained(model_path, output_loading_info=True)
    check_loaded_weights(model_path, info)  # weights left at random would score the rollouts with noise
    check_tokenizer_fits(model_path, tokenizer, model)
    scorer = weights_sha256(model)  # the weights as saved: a bfloat16 run's rollouts name its bfloat16 weights
    model = model.float().to(device)
    notes: list[str] = []
    names = list(groups)
    own = [g for g in names if all(r.model == scorer for r in groups[g])]
    if len(own) >= 2 and len(own) < len(names):
        # A run's rollouts.jsonl holds batches of several weights: score the ones this model sampled.
        notes.append(f"scored the {len(own)} of {len(names)} groups that this model sampled (the others name other "
                     "weights)")
        names = own
    label = group_labels(list(groups))
    names = names[: max_groups] if max_groups else names
    if len(names) < 2:
        raise ValueError("--model needs at least two groups (P >= 2) to cross-score")
    for g in names:
        for r in groups[g]:
            if r.prompt is None or r.response is None:
                raise ValueError(f"line {r.line}: --model needs 'prompt' and 'response' on every rollout")
        _refuse_images(model, tokenizer, groups[g][0])
        if len({r.prompt for r in groups[g]}) > 1:
            notes.append(f"group {label[g]}: rollouts have different prompts; using the first one "
                         f"(line {groups[g][0].line})")
    g_min = min(len(groups[g]) for g in names)
    if any(len(groups[g]) != g_min for g in names):
        notes.append(f"groups have different sizes; each is truncated to its first G={g_min} rollouts")
    prompts = [groups[g][0].prompt for g in names]
    responses = [[r.response for r in groups[g][:g_min]] for g in names]
    samplers = {r.model for g in names for r in groups[g][:g_min]}
    L, lengths = cross_score(model, prompts, responses, batch_tokens=batch_tokens, tokenizer=tokenizer,
                             return_lengths=True)
    if bool((lengths == 0).any()):
        raise ValueError("some responses tokenise to zero tokens; they cannot be scored")
    ids = {text: i for i, text in enumerate(dict.fromkeys(prompts))}
    stats = mi_proxies(L, lengths, prompt_ids=[ids[t] for t in prompts])
    stats["scoring_model"] = str(model_path)
    if samplers == {scorer}:
        stats["scorer_is_sampler"] = "yes: the rollouts name this model's weights"
    elif None in samplers and len(samplers) == 1:
        stats["scorer_is_sampler"] = "unknown: the rollouts do not name the model that sampled them"
    else:
        stats["scorer_is_sampler"] = ("no: the rollouts were sampled by other weights "
                                      f"({', '.join(sorted(x[:12] for x in samplers if x))}; this model is "
                                      f"{scorer[:12]})")
    stats["regime"] = regime_from_proxies(stats)
    null = mi_seq_null(L)
    stats["mi_seq_p_value"], stats["mi_seq_null_q95"] = null["p_value"], null["null_quantile"]
    stats["regime_resolved"], unresolved = regime_resolution(null, stats["mi_upper_bound"], stats["n_prompts"],
                                                             stats["group_size"])
    if unresolved is not None:
        notes.append(unresolved)
    noise = noise_note(stats["cond_entropy_est"], int(model.config.vocab_size))
    if noise is not None:
        notes.append(noise)
    stats["notes"] = notes
    stats["group_size_used"] = g_min
    return stats


def _refuse_images(model: Any, tokenizer: Any, first: Rollout) -> None:
    """ValueError when a group's prompt places images for a vision model (its image placeholder token):
    :func:`cross_score` scores prompts as text alone, so the traces would be scored without the pictures they were
    sampled from, and the proxies would describe another input than the sampler's (the trainer skips its MI
    diagnostics for such batches, ``collapse/mi_skipped_vision``, and the held-out probe refuses a vision env)."""
    token_id = getattr(model.config, "image_token_id", None) if hasattr(model, "prepare_pixel_values") else None
    if token_id is None:
        return
    token = tokenizer.convert_ids_to_tokens(int(token_id))
    if token and token in (first.prompt or ""):
        raise ValueError(f"line {first.line}: the prompt shows images ({token}): --model cross-scores prompts as "
                         "text, without their pictures, so it cannot measure a vision policy's input dependence "
                         "(as the trainer skips its MI diagnostics for such batches: collapse/mi_skipped_vision); "
                         "the pre-check without --model still applies")


# --------------------------------------------------------------------------------------------------------------
# Sample data
# --------------------------------------------------------------------------------------------------------------

_ACTIONS = ("Up", "Down", "Left", "Right")


def simulate_bimodal_rollouts(n_groups: int = 32, group_size: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """Simulated Sokoban-like rollouts whose per-group reward variance is bimodal (seeded, reproducible).

    About 55% of the groups are saturated (the policy always fails or always solves: success probability 0 or
    1, variance only from a rare format penalty); the rest are learnable (success probability uniform in
    [0.3, 0.7]). Reward = 1 for success, 0 otherwise, minus 0.1 for a format error (probability 0.05). This is
    the high-heterogeneity case of docs/science.md section 4 where filtering separates signal from noise.
    """
    if n_groups < 1 or group_size < 1:
        raise ValueError(f"n_groups and group_size must be >= 1; got {n_groups}, {group_size}")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n_groups):
        if rng.random() < 0.55:
            p_success = float(rng.choice([0.0, 1.0]))
        else:
            p_success = float(rng.uniform(0.3, 0.7))
        width, height = int(rng.integers(5, 8)), int(rng.integers(5, 8))
        boxes = int(rng.integers(1, 3))
        prompt = (f"You are solving Sokoban puzzle #{i} ({width}x{height}, {boxes} box{'es' if boxes > 1 else ''}). "
                  f"Player at ({int(rng.integers(1, width - 1))},{int(rng.integers(1, height - 1))}). "
                  "Push every box onto a target. Answer with <think>...</think><answer>action || action</answer>.")
        for _ in range(group_size):
            success = bool(rng.random() < p_success)
            format_error = bool(rng.random() < 0.05)
            moves = [str(rng.choice(_ACTIONS)) for _ in range(int(rng.integers(1, 3)))]
            thought = str(rng.choice([
                "The box is next to the target, push it.",
                "I should move around the box first.",
                "Going toward the box along the wall.",
                "The target is below the box.",
            ]))
            response = f"<think>{thought}</think><answer>{' || '.join(moves)}</answer>"
            if format_error:
                response = response.replace("</answer>", "")
            reward = (1.0 if success else 0.0) - (0.1 if format_error else 0.0)
            rows.append({"group": i, "prompt": prompt, "response": response, "reward": round(reward, 2)})
    return rows


def write_rollouts(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Write rollouts as JSONL (one object per line, UTF-8, trailing newline)."""
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``diagnose`` arguments to ``parser`` (used by the ``ragen`` CLI and :func:`main`)."""
    parser.add_argument("rollouts", help="JSONL file, one trajectory per line: group, reward, [prompt, response, "
                                         "model]; or a training run folder (its rollouts.jsonl)")
    parser.add_argument("--model", metavar="PATH", default=None,
                        help="local transformers causal LM (+ tokenizer), or a run folder (exported with ragen "
                             "export), to cross-score with; adds the MI proxies")
    parser.add_argument("--scorer-is-sampler", action="store_true",
                        help="assert that the --model sampled these rollouts: report the regime even when the "
                             "rollouts do not name their sampler")
    parser.add_argument("--keep-rate", type=float, default=0.9, help="top-p keep rate rho in (0, 1] (default 0.9)")
    parser.add_argument("--score", choices=("variance", "std"), default="variance",
                        help="rank groups by variance (paper) or std (official code)")
    parser.add_argument("--ddof", type=int, choices=(0, 1), default=1, help="variance ddof (default 1)")
    parser.add_argument("--bins", type=int, default=10, help=f"histogram bins, 1 to {MAX_BINS} (default 10)")
    parser.add_argument("--batch-tokens", type=int, default=16384,
                        help="token budget per forward call when cross-scoring (default 16384)")
    parser.add_argument("--max-groups", type=int, default=None, metavar="N",
                        help="cross-score only the first N groups (default, or 0: all of them)")
    parser.add_argument("--device", default="cpu", help="torch device for --model (default cpu)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def device_problem(name: str) -> str | None:
    """Why torch cannot put a model on device `name` here (``--device``; one line), or None when it can. ``auto``
    (cuda when available, else cpu) always can. Imports torch: call it only where a model is to be loaded."""
    if name == "auto":
        return None
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        return f"--device {name!r} is not a torch device (e.g. cpu, cuda, cuda:0, mps, auto)"
    try:
        torch.empty(0, device=device)
    except (AssertionError, RuntimeError) as exc:  # CPU-only torch, no driver, no such GPU
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"--device {name}: not a device this torch can use ({why})"
    return None


def _fmt(x: float) -> str:
    return "nan" if isinstance(x, float) and math.isnan(x) else f"{x:.4f}"


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 100:.1f} %"


def _verdict(ratio: float) -> str:
    if math.isnan(ratio):
        return "undefined (no reward variance in this batch: every group would be dropped)"
    if ratio >= _HIGH_RATIO:
        return "high: bimodal variance, filtering should separate signal from noise (paper: Sokoban 1.16-1.29)"
    if ratio <= _LOW_RATIO:
        return "low: near-uniform variance, filtering mostly throws data away (paper: FrozenLake GRPO 0.33)"
    return "intermediate: measure with and without filtering"


def batches_note(rollouts: Sequence[Rollout]) -> str | None:
    """The line that says the rollouts hold several training batches (a run's rollouts.jsonl keeps its last
    steps' batches and the final weights' one), whose groups the pre-check pools, or None for one batch or none
    named: the trainer filters each batch alone, so its ``filter/`` metrics are per batch, not these."""
    names = list(dict.fromkeys(r.batch for r in rollouts if r.batch is not None))
    if len(names) < 2:
        return None
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    return (f"these rollouts are {len(names)} training batches ({listed}): the statistics below pool their groups, "
            "while the trainer filters each batch alone (its filter/ metrics in metrics.jsonl)")


def _print_text(report: dict[str, Any], bins: int, mi: dict[str, Any] | None, out: TextIO,
                batches: str | None = None) -> None:
    w = out.write
    w(f"rollouts: {report['n_rollouts']} in {report['n_groups']} groups "
      f"(sizes {report['group_size_min']}-{report['group_size_max']})\n")
    if batches is not None:
        w(f"  {batches}\n")
    if report["too_small_groups"]:
        w(f"  {report['too_small_groups']} group(s) have fewer than {report['ddof'] + 1} rollouts: no variance, "
          "left out of the statistics\n")
    if report["nan_groups"]:
        w(f"  {report['nan_groups']} group(s) have a NaN reward: never kept\n")
    overflow = sum(1 for x in report["variances"].values() if x == math.inf)
    if overflow:
        w(f"  {overflow} group(s) have a reward variance that overflows float64 (inf): the statistics are not "
          "finite; rescale the rewards\n")
    w("\nRV heterogeneity pre-check (docs/science.md section 4)\n")
    w(f"  mean per-group reward variance  {_fmt(report['rv_mean'])}\n")
    w(f"  std of per-group variance       {_fmt(report['rv_std'])}\n")
    reading = ("undefined (a group's reward variance overflows float64)" if overflow else
               heterogeneity_reading(report["rv_heterogeneity"], report.get("rv_heterogeneity_ci95")))
    w(f"  RV heterogeneity (std/mean)     {_fmt(report['rv_heterogeneity'])}  -> {reading}\n")
    # Both shares name their denominators: the zero share is over the groups with a variance (NaN groups have
    # none), the kept share over every group with enough rollouts (NaN groups included: they are never kept).
    n_usable = len(report["variances"])
    n_finite = n_usable - report["nan_groups"]
    zf = report["zero_fraction"]
    zero_count = 0 if math.isnan(zf) else round(zf * n_finite)
    w(f"  zero-variance groups            {zero_count} of the {n_finite} groups with a variance ({_pct(zf)})\n")
    tp = report["top_p"]
    w(f"  top_p rho={tp['keep_rate']} ({tp['score']}) keeps  {tp['kept_groups']} of {n_usable} group(s)"
      f" ({_pct(tp['kept_fraction'])}){'  [empty: the update would be skipped]' if tp['empty'] else ''}\n")
    w("\nHistogram of per-group reward variance\n")
    w(format_histogram(list(report["variances"].values()), bins=bins) + "\n")
    if mi is not None:
        w(f"\nMI proxies (docs/science.md section 2), P={mi['n_prompts']} G={mi['group_size']}\n")
        for note in mi["notes"]:
            w(f"  note: {note}\n")
        w(f"  Retrieval-Acc      {_fmt(mi['retrieval_acc'])}   (chance {_fmt(mi['retrieval_chance'])})\n")
        for k, v in mi["recall_at_k"].items():
            w(f"  Recall@{k:<10d} {_fmt(v)}   (chance {_fmt(mi['recall_at_k_chance'][k])})\n")
        w(f"  MI-Est             {_fmt(mi['mi_est'])} nats/token\n")
        w(f"  MI-Est tokenwise   {_fmt(mi['mi_est_tokenwise'])} nats/token\n")
        w(f"  MI-Seq-Est         {_fmt(mi['mi_seq_est'])} nats (upper bound log P = {_fmt(mi['mi_upper_bound'])}; "
          f"permutation p = {mi['mi_seq_p_value']:.3g})\n")
        w(f"  MI-ZScore          {_fmt(mi['mi_zscore'])}\n")
        w(f"  H(Z|X) estimate    {_fmt(mi['cond_entropy_est'])} nats/token\n")
        w(f"  H(Z) estimate      {_fmt(mi['marginal_entropy_est'])} nats/token\n")
        w(f"  scored by          {mi['scoring_model']} (the proxies are this model's view of the rollouts)\n")
        w(f"  scorer = sampler?  {mi['scorer_is_sampler']}\n")
        w(f"  regime             {regime_text(mi)}\n")


def regime_text(mi: dict[str, Any]) -> str:
    """The regime as a report shows it: marked "(unresolved: ...)" when the batch cannot tell its MI side
    (``regime_resolved`` False; the notes say why), as reported by :func:`mi_report`."""
    regime = str(mi["regime"])
    if mi.get("regime_resolved") is False and not regime.startswith("withheld"):
        return f"{regime} (unresolved: too few prompts to tell the MI side from chance; see the note)"
    return regime


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``diagnose`` on parsed ``args`` (see :func:`add_arguments`); returns the exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if not (0.0 < args.keep_rate <= 1.0):
        err.write(f"error: --keep-rate must be in (0, 1]; got {args.keep_rate}\n")
        return 2
    if not 1 <= args.bins <= MAX_BINS:  # more bins than that would be lines nobody reads (and 10**11 fill memory)
        err.write(f"error: --bins must be an integer in [1, {MAX_BINS}]; got {args.bins}\n")
        return 2
    if args.batch_tokens < 1:
        err.write(f"error: --batch-tokens must be >= 1; got {args.batch_tokens}\n")
        return 2
    if args.max_groups is not None and args.max_groups < 0:
        err.write(f"error: --max-groups must be >= 0 (0: all groups); got {args.max_groups}\n")
        return 2
    source = Path(args.rollouts)
    if source.is_dir():
        if not (source / ROLLOUTS_FILE).is_file():
            err.write(f"error: {source} is a folder without {ROLLOUTS_FILE} (a training run writes it from its first "
                      "RL step on, unless run.rollouts_steps = 0: a run stopped during its warm start or step 1, or "
                      "one from an older version, has none): pass a rollouts JSONL file\n")
            return 2
        args.rollouts = str(source / ROLLOUTS_FILE)
    try:
        loaded = load_rollouts(args.rollouts)
    except OSError as exc:
        err.write(f"error: cannot read {args.rollouts}: {exc.strerror or exc}\n")
        return 2
    for message in loaded.errors:
        err.write(f"{args.rollouts}: malformed {message}\n")
    if loaded.errors:
        err.write(f"{args.rollouts}: {len(loaded.errors)} malformed line(s) reported above; "
                  f"analysing the {len(loaded.rollouts)} valid line(s)\n")
    if not loaded.rollouts:
        err.write(f"error: no valid rollouts in {args.rollouts}\n")
        return 2
    groups = group_rollouts(loaded.rollouts)
    report = rv_report(groups, keep_rate=args.keep_rate, score=args.score, ddof=args.ddof)
    mi = None
    if args.model is not None:
        from ragen_core.apps.install import extra_hint, missing_train_modules

        missing = missing_train_modules(("torch", "transformers", "tokenizers"))
        if missing:
            err.write(extra_hint("diagnose --model", missing) + "\n")
            return 2
        from ragen_core.apps.export import is_run_dir

        problem = device_problem(args.device)
        if problem is not None:
            err.write(f"error: {problem}\n")
            return 2
        with ExitStack() as cleanup:  # a temporary export (of a run folder that cannot be written) lives till scored
            shown = args.model  # what the report names as the scorer: a temporary export is named by its run
            if is_run_dir(args.model):
                try:
                    args.model = str(_run_model(args.model, cleanup, err))
                    shown = args.model if Path(args.model).parent == Path(shown) else f"{shown} (its model)"
                except ValueError as exc:
                    err.write(f"error: {exc}\n")
                    return 2
                except OSError as exc:  # not even a temporary folder could take the export
                    err.write(f"error: cannot export the model of {args.model}: {exc.strerror or exc}\n")
                    return 2
            if not Path(args.model).expanduser().is_dir():
                # A hub id would be fetched over the network (and retried for a minute offline): local folders only.
                err.write(f"error: --model must be a local folder holding a transformers causal LM and its "
                          f"tokenizer; {args.model!r} is not a folder\n")
                return 2
            try:
                mi = mi_report(groups, args.model, args.batch_tokens, max_groups=args.max_groups, device=args.device)
            except (ValueError, OSError) as exc:
                err.write(f"error: cross-scoring with {shown} failed: {exc}\n")
                return 2
            mi["scoring_model"] = shown
        if args.scorer_is_sampler and not mi["scorer_is_sampler"].startswith("yes"):
            mi["scorer_is_sampler"] = "asserted by --scorer-is-sampler (" + mi["scorer_is_sampler"] + ")"
        elif not mi["scorer_is_sampler"].startswith("yes"):
            mi["regime"] = ("withheld: the regime describes the policy that sampled the rollouts, and this model is "
                            "not known to be it (pass --scorer-is-sampler if it is)")
    batches = batches_note(loaded.rollouts)
    if args.json:
        payload = {"rv": report, "mi": mi, "malformed": loaded.errors, "batches": batches}
        out.write(json.dumps(_json_safe(payload), indent=2) + "\n")
    else:
        _print_text(report, args.bins, mi, out, batches)
    return 1 if loaded.errors else 0


def _run_model(run_dir: str, cleanup: ExitStack, err: TextIO) -> Path:
    """The model folder of a run folder given as ``--model``: its export ``RUN_DIR/model`` (written by
    :func:`ragen_core.apps.export.exported_model` when missing or stale). A run folder that cannot take that export
    (read-only, a full disk, ``model`` being a file) is left as it is: the model is exported to a temporary folder
    instead (removed by `cleanup`), with a note on `err`. ValueError as ``exported_model``."""
    import tempfile

    from ragen_core.apps.export import export_run, exported_model

    try:
        return exported_model(run_dir)
    except OSError as exc:
        why = exc.strerror or str(exc)
    tmp = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ragen-diagnose-")))
    err.write(f"note: cannot write the export of {run_dir} to {Path(run_dir) / 'model'} ({why}); scoring with a "
              "temporary export instead\n")
    return export_run(run_dir, tmp / "model")


def build_parser(prog: str = "ragen diagnose") -> argparse.ArgumentParser:
    """The `ragen diagnose` parser (:func:`add_arguments`) named `prog`."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="RV heterogeneity pre-check and (with --model) MI collapse proxies on a rollouts JSONL file.",
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "ragen diagnose") -> int:
    """Entry point: ``ragen diagnose`` / ``python -m ragen_core.apps.diagnose ROLLOUTS.jsonl [--model PATH]``;
    Ctrl-C is one line and exit status 130."""
    args = build_parser(prog).parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
