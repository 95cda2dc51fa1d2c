"""The study's statistics and the four findings, computed from run records.

A run record is what :func:`ragen_core.apps.reproduce.runner.read_run` returns: ``val`` (``[[step, success]]``, step 0 =
after the warm start), ``mi`` (one dict per in-batch MI measurement: step, ``mi_zscore_ema``, ``mi_seq_est``,
``mi_upper_bound``, ``retrieval_acc``, ``retrieval_chance``, ``cond_entropy_est``, ``marginal_entropy_est``,
``token_entropy``, ``regime``), ``probe`` (one dict per held-out probe measurement, step 0 first:
``retrieval_margin``, ``mi_seq_norm``, ``token_entropy``, ``cond_entropy_est``, ``reasoning_tokens``,
``template_share``, ...), ``rv_heterogeneity_first``, ``steps`` and, in runs recorded after they were added,
``planned_steps`` (the config's steps), ``commit``, ``config_sha256`` and ``filter_log`` (one dict per RL step:
``groups_total``, ``kept_groups``, ``zero_fraction``, ``kept_zero_adv_share``, ``skipped``). A field a record
lacks is reported as "not recorded".

The outcomes and verdict rules are fixed here, before any run (docs/reproduction.md prints them first). The
equivalence outcome, the early-stop pairing rule, the ceiling rule of finding 2 and the labels of findings 1 and 4
were added after the study on seeds 20-24 had been run: on those runs they are post hoc, on every later study they
are pre-specified.

- **Finding 1, a positive control** (collapse-prone configs, ``no_filter`` arm). The demonstrator of these configs
  builds the collapse: after state-derived reasoning it answers with the habit (``action_noise``), after the
  template with the oracle's move (``template_answer = "oracle"``), so the template path pays and RL takes it.
  Finding 1 therefore checks that the detector sees a collapse that is there by construction; it is not evidence
  that template collapse in RL-trained LLMs is invisible to entropy. Per run,
  :func:`ragen_core.math.collapse.detect_collapse` on the probe curves (the retrieval margin halves while token
  entropy and H(Z|X) stay within +-25%, no entropy alarm at or before the drop). "passed": the signature on
  >= 80% of the seeds with >= 5 seeds; "failed": on most seeds the MI drop comes only with an entropy alarm at
  or before it; otherwise "inconclusive" (the counts that say why are stored beside it:
  :func:`_criterion_verdict`). Beside it (:func:`co_movement`, the full-length runs of every arm
  but ``entropy_bonus``): the within-run correlation of margin and token entropy, the entropy ratios at the end
  (over step 0 and over the detector's reference), the AUC of the end/start ratio for telling collapsed runs from
  the rest, and the rank correlation of end margin with final success within env.
- **Finding 3** (collapse-prone configs): ``top_p`` minus ``no_filter`` and ``top_p`` minus ``random``, paired by
  seed, on (a) the probe retrieval margin at the last probe measurement (primary), (b) the steps until the MI drop
  (a run without a drop is carried at its last probe step: censored, so the difference is a lower bound on the
  delay), (c) validation success at the last evaluation. Each comparison reports the paired mean difference
  d_bar, its 95% t-interval ``d_bar +- t_{0.975, n-1} s_d / sqrt(n)``, its 90% t-interval (``t_{0.95, n-1}``),
  the paired SD s_d and the minimum detectable effect at 80% power
  (:func:`ragen_core.math.stats.min_detectable_effect`). Verdict, in this order: "held" when the 95% interval
  excludes 0 in the paper's direction (filtering higher / later); "contradicted" when it excludes 0 in the
  other; "equivalent (within +-B)" when the 90% interval lies inside ``[-B, +B]`` (two one-sided tests at alpha
  0.05, :data:`EQUIVALENCE_BOUNDS`); else "inconclusive (detectable effect X)".
  **Early stop**: a run that stopped before its config's steps (:func:`planned_steps`) is compared with its
  partner at equal steps: each outcome is read, for both runs, at the last step at which both have a
  measurement of it (probe steps for the margin and the drop, evaluation steps for success; the drop is looked
  for up to that step and censored there). A pair whose last common measurement is step 0 (before any RL step)
  has no value on that outcome. The number of such pairs is reported, and each comparison that has one is
  repeated without them (sensitivity).
- **Finding 2** (learning configs): each metric's early value (mean over the measurements in the first quarter
  of the run) against final validation success, as Spearman's rho within each env and as the correlation of
  env-centred ranks pooled over envs (:func:`within_env_rho`); 95% intervals from a cluster bootstrap over seeds
  (:func:`cluster_bootstrap`: all runs of a seed share a warm start, so a seed is the unit resampled; no interval
  with fewer than 3 seeds). Values are
  compared at 4 significant digits; a metric whose most common value covers more than half of an env's runs is
  "constant/tied" there and gets no rho. Verdict on the pair fixed in advance (in-batch MI-ZScore-EMA against
  in-batch H(Z|X), the paper's +0.39 / -0.14; the probe's MI-Seq / log N against its H(Z|X) as the second pair):
  "not testable (at the ceiling)" when the pair's MI over its ceiling (:data:`CEILING_OF_PAIR`: in-batch MI-Seq /
  log P, the probe's MI-Seq / log N) has an early value above :data:`CEILING_NORM` on more than
  :data:`CEILING_SHARE` of the runs (a metric pinned at its ceiling cannot rank runs); "held" when the interval
  of ``|rho_MI| - |rho_H|`` is above 0 and rho_MI's is above 0, "contradicted" when the difference's is below 0,
  else "inconclusive" (why, and its numbers, stored beside it: :func:`_pair_verdict`).
- **Finding 4** (Sokoban learning config): top minus bottom RV quartile, paired by seed, at equal steps (the last
  step at which both runs of a seed have a measurement), and at the end with a run that stopped early carried at
  its last value (stated as such). Like is compared with like: success with success, the in-batch MI-Seq / log P
  of both arms, the probe's MI-Seq / log N of both arms (each "not testable (at the ceiling)" under the rule of
  finding 2 when both arms are above :data:`CEILING_NORM` on more than half of the seeds). A success verdict is
  labelled "expected under GRPO": the bottom quartile keeps the 2 of 8 groups with the least reward variance,
  which are zero-variance groups whenever 2 or more of the 8 are, and a zero-variance group has exactly zero GRPO
  advantage, so that arm trains mostly on no task signal (the share of zero-variance groups and the bottom runs
  that stopped early are reported with it).

A start is the measurement at step 0 and an end the one at the run's last step (or, in a paired comparison at
equal steps, at the step the pairing rule reads both runs at): :func:`start_value`, :func:`end_value`. A run
without a step-0 measurement, or with a null there or at its end, has None for that value, never a neighbouring
step's, and the analysis says why under ``not_measured`` (per run, per finding-1 row, per finding-3 arm and
comparison, finding 4) or ``left_out`` (finding 2, the end margin against success); the collapse detector judges
the probe measurements that have every value and lists the others' steps under ``left_out_steps``.

Every verdict is stored as the bare word of :class:`ragen_core.apps.reproduce.verdicts.Verdict` (findings 1 and 2
with a ``"reason"`` code and the reason's numbers as numbers beside it; :mod:`ragen_core.apps.reproduce.verdicts`
maps their rules onto its members); the report words the reasons.
"""

from __future__ import annotations

import functools
import inspect
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from ragen_core.apps.reproduce.spec import MAX_SEEDS
from ragen_core.apps.reproduce.verdicts import PairedRule, ShareRule, Verdict, mean_of, paired, unpaired, verdict_text
from ragen_core.apps.reproduce.verdicts import mde as mde
from ragen_core.math.collapse import collapse_from_history, detect_collapse
from ragen_core.math.collapse import finite_number as _finite_number
from ragen_core.math.stats import equivalence_power, mean_ci, pairs_needed, pairs_needed_equivalence

__all__ = [
    "PAPER",
    "average_ranks",
    "spearman",
    "spearman_ci",
    "round_sig",
    "tie_status",
    "env_centred_ranks",
    "within_env_rho",
    "cluster_bootstrap",
    "early_value",
    "late_value",
    "value_at",
    "start_value",
    "end_value",
    "peak_success",
    "final_success",
    "run_collapse",
    "paired_comparison",
    "planned_steps",
    "stopped_early",
    "pair_outcomes",
    "within_run_correlation",
    "entropy_ratios",
    "auc_lower",
    "co_movement",
    "ceiling_status",
    "filter_log_summary",
    "mde",
    "seeds_needed",
    "equivalence_seeds",
    "equivalence_power_now",
    "finding_collapse",
    "finding_correlations",
    "finding_filtering",
    "finding_quartiles",
    "power_analysis",
    "analyse",
    "PAIRED",
    "CONTROL",
    "RULES",
    "StudyRules",
    "RecordsError",
    "check_one_run_each",
    "DetectorRule",
    "CorrelationRule",
    "verdict_text",
]

#: The paper's numbers, quoted exactly (signs included).
PAPER: dict[str, Any] = {
    # top-p (rho 0.9) minus no filter, peak validation success, points
    "filtering": {
        "PPO, Qwen2.5-3B": {"Sokoban": 16.0, "FrozenLake": 10.9, "MetaMathQA": 0.6, "Countdown": 0.0},
        "GRPO": {"Sokoban": 9.0, "FrozenLake": -3.0, "MetaMathQA": 1.2, "Countdown": 2.2},
        "PPO, Qwen2.5-0.5B": {"Sokoban": 22.9, "FrozenLake": 0.0, "MetaMathQA": -0.2, "Countdown": -0.7},
        "Qwen2.5-VL-3B (vision)": {"Sokoban": 12.0, "FrozenLake": 59.5},
    },
    # RV heterogeneity of the pre-check -> effect of filtering (points)
    "rv_heterogeneity": [("Sokoban, 14B", 1.29, 4.6), ("Sokoban, 3B", 1.16, 3.2), ("FrozenLake, GRPO", 0.33, -5.0)],
    # Spearman's rho with final success
    "spearman": {"mi_zscore_ema": 0.39, "mi_seq_est": 0.22, "marginal_entropy_est": -0.11, "cond_entropy_est": -0.14},
    # RV quartiles (Sokoban, Qwen2.5-3B): success (%) and the paper's MI proxy
    "quartiles": {"rv_top_quartile": {"success": 21.1, "mi": 0.95},
                  "rv_bottom_quartile": {"success": 11.0, "mi": 0.73}},
}

#: Metrics correlated with final success (finding 2): key -> (source, field). In-batch first, then the probe's.
CORRELATED: dict[str, tuple[str, str]] = {
    "mi_zscore_ema": ("mi", "mi_zscore_ema"),
    "mi_seq_est": ("mi", "mi_seq_est"),
    "retrieval_acc": ("mi", "retrieval_acc"),
    "cond_entropy_est": ("mi", "cond_entropy_est"),
    "marginal_entropy_est": ("mi", "marginal_entropy_est"),
    "probe_mi_seq_norm": ("probe", "mi_seq_norm"),
    "probe_retrieval_margin": ("probe", "retrieval_margin"),
    "probe_cond_entropy_est": ("probe", "cond_entropy_est"),
    "probe_token_entropy": ("probe", "token_entropy"),
}
#: Finding 2's (MI, entropy) pairs, fixed in advance: the paper's headline pair first.
CORRELATION_PAIRS = (("mi_zscore_ema", "cond_entropy_est"), ("probe_mi_seq_norm", "probe_cond_entropy_est"))
#: Finding 3's outcomes: key -> (label, unit). All are "higher is better for filtering".
OUTCOMES = {"margin_end": ("probe retrieval margin at the end (primary)", "margin"),
            "steps_to_drop": ("steps until the MI drop (no drop: the last probe step, censored)", "steps"),
            "success_end": ("validation success at the end", "points")}
#: Equivalence bounds B of finding 3 per outcome (TOST: the 90% interval inside [-B, +B] is "equivalent").
#: - margin 0.15: 30% of the starting margin of about 0.5 that the warm start is built to have (q = 0.5), and
#:   less than the 0.25 fall that the signature's halving needs, so an effect inside it cannot by itself decide
#:   whether a run collapses;
#: - success 10 points (0.10): the order of the paper's smaller filtering effects (Sokoban GRPO +9.0, FrozenLake
#:   PPO +10.9); "equivalent" rules out effects of that size and larger, not smaller ones (+9.0 lies inside);
#: - steps 5: one probe interval of the collapse-prone configs (``mi.probe_every = 5``): a drop step is known only
#:   to the probe's spacing, so a shorter delay cannot be measured.
EQUIVALENCE_BOUNDS = {"margin_end": 0.15, "steps_to_drop": 5.0, "success_end": 0.10}
#: Each one-sided test of TOST at alpha 0.05: the (1 - 2 alpha) = 90% interval.
EQUIVALENCE_ALPHA = 0.05
#: Finding 2's ceiling rule: a pair's MI over its ceiling (source, key of the early value) above CEILING_NORM on
#: more than CEILING_SHARE of the runs is "at the ceiling" (0.98: within 2% of a perfect score, where the
#: probe's 32 prompts are retrieved almost without error and runs cannot be ordered by it).
CEILING_NORM = 0.98
CEILING_SHARE = 0.5
CEILING_OF_PAIR = {"mi_zscore_ema": ("mi", "mi_norm", "in-batch MI-Seq / log P"),
                   "probe_mi_seq_norm": ("probe", "mi_seq_norm", "MI-Seq / log N (probe)")}
#: Arms left out of the entropy-margin co-movement: the entropy bonus moves entropy by design.
CO_MOVEMENT_EXCLUDED_ARMS = ("entropy_bonus",)
#: Effects whose seeds-needed the power analysis reports, per unit (success in fractions: 0.1 = 10 points).
POWER_EFFECTS = {"margin": (0.1, 0.25), "steps": (5.0, 10.0), "points": (0.1, 0.2)}
#: Significant digits at which metric values are compared for ranks and ties (finding 2).
SIG_DIGITS = 4
#: Bootstrap resamples, the seed of their RNG (repeatable reports), and the fewest seeds that get an interval.
N_BOOT = 2000
BOOT_SEED = 20240601
MIN_BOOT_SEEDS = 3
#: The level of the bootstrap intervals, and the share of a run's steps whose measurements make its early value.
BOOT_LEVEL = 0.95
EARLY_FRACTION = 0.25


# ------------------------------------------------------------------------------------------- the rule objects
#: Findings 3 and 4: a paired difference by seed judged by :func:`ragen_core.apps.reproduce.verdicts.compare`:
#: 95% decision interval, TOST at alpha 0.05 (the 90% interval), detectable effect at 80% power, the bounds above.
PAIRED = PairedRule(level=0.95, equivalence_alpha=EQUIVALENCE_ALPHA, power=0.8, direction=1,
                    bounds=EQUIVALENCE_BOUNDS)
#: Finding 1, a positive control: the signature on at least 80% of the seeds, with at least 5 seeds.
CONTROL = ShareRule(share=0.8, min_seeds=5)


@dataclass(frozen=True)
class DetectorRule:
    """The collapse detector's thresholds (:func:`ragen_core.math.collapse.detect_collapse`, its defaults): the
    margin falls to `drop` of its peak; the entropies stay within +-`band` of their values there."""

    drop: float = inspect.signature(detect_collapse).parameters["drop"].default
    band: float = inspect.signature(detect_collapse).parameters["band"].default


@dataclass(frozen=True)
class CorrelationRule:
    """Finding 2's rule: early value over the first `early_fraction` of a run; values compared at `sig_digits`
    significant digits (a value on more than half of an env's runs: tied); `level` intervals from `n_boot`
    seed-cluster bootstrap resamples (none with fewer than `min_boot_seeds` seeds); a pair's MI over its ceiling
    above `ceiling_norm` on more than `ceiling_share` of the runs: not testable."""

    early_fraction: float = EARLY_FRACTION
    sig_digits: int = SIG_DIGITS
    level: float = BOOT_LEVEL
    n_boot: int = N_BOOT
    min_boot_seeds: int = MIN_BOOT_SEEDS
    ceiling_norm: float = CEILING_NORM
    ceiling_share: float = CEILING_SHARE


@dataclass(frozen=True)
class StudyRules:
    """Every rule of the study, as the code applies it and the report prints it (``report._rules``).
    `post_hoc_seeds`: the study (first and last seed) after whose runs the later rules were added."""

    control: ShareRule = CONTROL
    detector: DetectorRule = DetectorRule()
    correlation: CorrelationRule = CorrelationRule()
    paired: PairedRule = PAIRED
    post_hoc_seeds: tuple[int, int] = (20, 24)


RULES = StudyRules()


# ------------------------------------------------------------------------------------------- rank statistics
def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of `values`; tied values share the mean of the ranks they occupy."""
    xs = [float(v) for v in values]
    if any(math.isnan(v) for v in xs):
        raise ValueError("values must not contain NaN")
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def _pearson(a: Sequence[float], b: Sequence[float]) -> float:
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    sxy = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    sxx = sum((x - ma) ** 2 for x in a)
    syy = sum((y - mb) ** 2 for y in b)
    if sxx == 0.0 or syy == 0.0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (Pearson correlation of average ranks); NaN if n < 3 or either side is constant."""
    if len(x) != len(y):
        raise ValueError(f"x and y must pair up; got {len(x)} and {len(y)} values")
    if len(x) < 3:
        return math.nan
    return _pearson(average_ranks(x), average_ranks(y))


def spearman_ci(rho: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Fisher-z interval of Spearman's rho with SE 1.03 / sqrt(n - 3), for independent runs; (NaN, NaN) when
    undefined. The study's runs are clustered by seed: its intervals come from :func:`cluster_bootstrap`."""
    if n < 4 or not math.isfinite(rho):
        return math.nan, math.nan
    if abs(rho) >= 1.0:
        return rho, rho
    z = math.atanh(rho)
    half = NormalDist().inv_cdf(0.5 + level / 2.0) * 1.03 / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def round_sig(x: float, digits: int = SIG_DIGITS) -> float:
    """`x` rounded to `digits` significant digits (0 stays 0): the resolution at which metrics are compared."""
    if x == 0.0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def tie_status(values: Sequence[float], digits: int = SIG_DIGITS) -> str | None:
    """"constant" (one value), "tied" (the most common value, at `digits` significant digits, covers more than
    half of the values) or None (enough distinct values to rank)."""
    if not values:
        return None
    counts = Counter(round_sig(float(v), digits) for v in values)
    if len(counts) == 1:
        return "constant"
    return "tied" if 2 * counts.most_common(1)[0][1] > len(values) else None


def env_centred_ranks(values: Sequence[float], groups: Sequence[Any]) -> list[float]:
    """Ranks within each group, centred and scaled: ``(r - (n_g + 1) / 2) / n_g`` for a value of rank r among
    the n_g values of its group (average ranks for ties). Mean 0 in every group, range (-1/2, 1/2)."""
    if len(values) != len(groups):
        raise ValueError(f"values and groups must pair up; got {len(values)} and {len(groups)}")
    out = [0.0] * len(values)
    for g in dict.fromkeys(groups):
        idx = [i for i, h in enumerate(groups) if h == g]
        ranks = average_ranks([values[i] for i in idx])
        n = len(idx)
        for i, r in zip(idx, ranks):
            out[i] = (r - (n + 1) / 2.0) / n
    return out


def within_env_rho(x: Sequence[float], y: Sequence[float], envs: Sequence[Any]) -> float:
    """The correlation of env-centred ranks (:func:`env_centred_ranks`) of x and y, pooled over envs: a Spearman
    rho from which the differences between envs (success levels, metric scales) are removed. With one env it is
    Spearman's rho. NaN when fewer than 3 values or either side has no spread within any env."""
    if not (len(x) == len(y) == len(envs)):
        raise ValueError("x, y and envs must pair up")
    if len(x) < 3:
        return math.nan
    return _pearson(env_centred_ranks(x, envs), env_centred_ranks(y, envs))


def cluster_bootstrap(clusters: dict[Any, list[Any]], statistic: Callable[[list[Any]], Sequence[float]],
                      n_boot: int = N_BOOT, seed: int = BOOT_SEED, level: float = BOOT_LEVEL) -> list[dict[str, Any]]:
    """Percentile intervals of a vector statistic under resampling whole clusters with replacement.

    Each resample draws ``K = len(clusters)`` cluster keys, the j-th being ``keys[floor(u_j * K)]`` with u_j the
    next ``random.Random(seed).random()`` (keys in insertion order), and passes the concatenated items of the
    drawn clusters (in draw order) to `statistic`, which returns one float per component (NaN where undefined on
    that resample). Per component: the (1 - level)/2 and (1 + level)/2 quantiles (linear interpolation between
    order statistics) of its finite values, and ``n_valid``, how many resamples gave one; (None, None) when fewer
    than half of the resamples did.
    """
    keys = list(clusters)
    if not keys:
        raise ValueError("cluster_bootstrap needs at least one cluster")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    rng = random.Random(seed)
    k = len(keys)
    draws: list[list[float]] = []
    for _ in range(n_boot):
        chosen = [keys[int(rng.random() * k)] for _ in range(k)]
        items = [item for key in chosen for item in clusters[key]]
        draws.append([float(v) for v in statistic(items)])
    width = len(draws[0]) if draws else 0
    out = []
    for c in range(width):
        vals = sorted(d[c] for d in draws if math.isfinite(d[c]))
        if 2 * len(vals) < n_boot:
            out.append({"ci95": [None, None], "n_valid": len(vals)})
            continue
        out.append({"ci95": [_quantile(vals, (1 - level) / 2), _quantile(vals, (1 + level) / 2)],
                    "n_valid": len(vals)})
    return out


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Quantile q of sorted values, linear between order statistics (numpy's default, 'linear')."""
    pos = q * (len(sorted_vals) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


# ------------------------------------------------------------------------------------------- per-run values
def _metric(m: dict[str, Any], key: str) -> float | None:
    """`key` of one measurement as a finite float, None when missing or not finite (``mi_norm``: MI-Seq over its
    upper bound, both finite and the bound > 0), so a NaN or an infinity is a missing measurement here too."""
    if key == "mi_norm":
        ub, v = m.get("mi_upper_bound"), m.get("mi_seq_est")
        return float(v) / float(ub) if _finite_number(v) and _finite_number(ub) and ub > 0 else None
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _points(record: dict[str, Any], key: str, source: str = "mi") -> list[tuple[int, float]]:
    """(step, value) of `key` over the measurements of `source` ("mi", "probe" or "val"; `key` unused for
    "val") that have one: a missing or non-finite value is left out."""
    if source == "val":
        return [(int(s), float(v)) for s, v in record.get("val") or [] if _finite_number(v)]
    pts = [(int(m["step"]), _metric(m, key)) for m in record.get(source) or []]
    return [(s, v) for s, v in pts if v is not None]


def _window_mean(record: dict[str, Any], key: str, early: bool, fraction: float, source: str) -> float | None:
    points = _points(record, key, source)
    if not points:
        return None
    steps = max(int(record.get("steps") or 0), max(s for s, _ in points))
    if early:
        cut = max(fraction * steps, points[0][0])
        chosen = [v for s, v in points if s <= cut]
    else:
        cut = min((1.0 - fraction) * steps, points[-1][0])
        chosen = [v for s, v in points if s >= cut]
    return sum(chosen) / len(chosen)


def early_value(record: dict[str, Any], key: str, fraction: float = EARLY_FRACTION, source: str = "mi"
                ) -> float | None:
    """Mean of `key` over the measurements (of `source`: "mi" or "probe") in the first `fraction` of the steps
    (at least the first one)."""
    return _window_mean(record, key, True, fraction, source)


def late_value(record: dict[str, Any], key: str, fraction: float = 0.25, source: str = "mi") -> float | None:
    """Mean of `key` over the measurements in the last `fraction` of the steps (at least the last one)."""
    return _window_mean(record, key, False, fraction, source)


def first_value(record: dict[str, Any], key: str, source: str = "mi") -> float | None:
    """`key` at the run's first measurement of `source`."""
    pts = _points(record, key, source)
    return pts[0][1] if pts else None


def value_at(record: dict[str, Any], key: str, step: int, source: str = "mi") -> float | None:
    """`key` at the last measurement of `source` ("mi", "probe" or "val") at or before `step`."""
    pts = [v for s, v in _points(record, key, source) if s <= step]
    return pts[-1] if pts else None


def peak_success(record: dict[str, Any]) -> float | None:
    """Highest validation success after step 0 (None if the run has no RL evaluation with a value)."""
    rl = [v for s, v in record.get("val") or [] if s >= 1 and _finite_number(v)]
    return max(rl) if rl else None


def final_success(record: dict[str, Any]) -> float | None:
    """Validation success at the run's last evaluation (a run that stopped early: its last value, carried); None
    when that value is null (:func:`end_value`: never an earlier evaluation's value)."""
    return end_value(record, "", "val")[0]


# A value "at step 0" and a value "at the end" mean the measurement at that step, never a neighbour's: a start is
# the step-0 measurement (a run folder that lost its first probe, a resumed run, or a null there has none), an end
# is the measurement at the last step of the run's series (or, in a paired comparison at equal steps, at the step
# the pairing rule chose); a null there is None, and the reason is kept beside the value (``not_measured``).
def _rows(record: dict[str, Any], source: str) -> list[tuple[int, Any]]:
    """(step, row) of every measurement of `source` ("mi", "probe" or "val"), null values included."""
    if source == "val":
        return [(int(row[0]), row) for row in record.get("val") or []]
    return [(int(row["step"]), row) for row in record.get(source) or []]


def _row_value(row: Any, key: str, source: str) -> float | None:
    """`key` of one measurement row: a finite number or None (a validation value is returned as recorded)."""
    if source == "val":
        return row[1] if _finite_number(row[1]) else None
    return _metric(row, key)


_WHAT = {"val": "evaluation", "probe": "probe measurement", "mi": "in-batch measurement"}


def start_value(record: dict[str, Any], key: str, source: str = "probe") -> tuple[float | None, str]:
    """`key` (of `source`: "probe", "mi" or "val") at step 0, or None and why not: no step-0 measurement (a run
    folder that lost it, a resumed run: never the first later one instead) or a null there. ("" when there is
    a value.)"""
    rows = _rows(record, source)
    at0 = [row for step, row in rows if step == 0]
    if not at0:
        first = min((step for step, row in rows if _row_value(row, key, source) is not None), default=None)
        return None, f"no step-0 {_WHAT[source]}" + (f" (the first is at step {first})" if first is not None else "")
    v = _row_value(at0[-1], key, source)
    return (v, "") if v is not None else (None, f"the step-0 {_WHAT[source]} is null (not measured, or not finite)")


def end_value(record: dict[str, Any], key: str, source: str = "probe", until: int | None = None
              ) -> tuple[float | None, int | None, str]:
    """(value, step, why): `key` at the last step of `source` (at or before `until` when given: the step a
    paired comparison at equal steps reads both runs at), or None and why when that value is null: an end is
    never an earlier step's value. Step and value None, why "no ...", without a measurement."""
    rows = [(step, row) for step, row in _rows(record, source) if until is None or step <= until]
    if not rows:
        return None, None, f"no {_WHAT[source]}" + ("" if until is None else f" at or before step {until}")
    step, row = max(rows, key=lambda x: x[0])
    v = _row_value(row, key, source)
    if v is None:
        return None, step, f"the {_WHAT[source]} at the last step ({step}) is null (not an earlier step's value)"
    return v, step, ""


def _final_missing(record: dict[str, Any]) -> dict[str, str]:
    """``{"final_success": why}`` when the run's last evaluation is null ({} otherwise)."""
    v, _, why = end_value(record, "", "val")
    return {"final_success": why} if v is None and _measured(record, "", "val") else {}


def _left_out(outcomes: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """``{"not_measured": {outcome: {seed: why}}}`` for the seeds whose outcome (:func:`_outcomes`) is None with a
    reason; {} when there are none."""
    missing: dict[str, dict[Any, str]] = {}
    for seed, o in outcomes.items():
        for k, why in o.get("not_measured", {}).items():
            missing.setdefault(k, {})[seed] = why
    return {"not_measured": missing} if missing else {}


def _at(record: dict[str, Any], missing: dict[str, str], which: str, name: str, key: str, source: str = "probe"
        ) -> float | None:
    """Step 0's value of `key` (`which` "start") or the last step's ("end"), never a neighbour's; when it is None
    for a run that measured `key`, why goes into `missing` under `name`."""
    value, why = start_value(record, key, source) if which == "start" else end_value(record, key, source)[::2]
    if value is None and why and _measured(record, key, source):
        missing[name] = why
    return value


def _measured(record: dict[str, Any], key: str, source: str) -> bool:
    """Whether the run has `key` in some measurement of `source` (a field it predates is "not recorded", not a
    measurement left out)."""
    return any(_row_value(row, key, source) is not None for _, row in _rows(record, source))


def run_collapse(record: dict[str, Any]) -> dict[str, Any] | None:
    """The template-collapse verdict of one run from its probe curves (:func:`ragen_core.math.collapse.detect_collapse`
    with its defaults: drop 0.5, band 0.25), plus ``last_probe_step``; None without >= 2 probe measurements.
    A measurement with a missing or non-finite value (None, NaN, an infinity) is left out, as everywhere in the
    analysis (:func:`ragen_core.apps.reproduce.verdicts.mean_of`). Curves the detector still refuses (an entropy of
    0, steps out of order) are not judged: ``refused: True``, ``collapsed: False`` and the reason; the findings
    neither count such a run as one without the signature nor carry it as one without a drop (:func:`judged`).

    The detector judges the measurements it has, but ``margin_start`` and ``margin_end`` are the margin at step 0
    and at the last probe step (:func:`start_value`, :func:`end_value`), never the first or last measurement that
    had every value: None where that one is missing or null, with why under ``not_measured``; the steps of the
    measurements left out are ``left_out_steps`` (both only when there are any)."""
    probe = record.get("probe") or []
    history = [{"step": p["step"], "probe/retrieval_margin": p.get("retrieval_margin"),
                "probe/token_entropy": p.get("token_entropy"), "probe/cond_entropy_est": p.get("cond_entropy_est")}
               for p in probe]
    usable = [h for h in history if all(_finite_number(v) for v in h.values())]
    if len(usable) < 2:
        return None
    try:
        v = collapse_from_history(usable)
    except ValueError as e:
        return {"collapsed": False, "refused": True, "reason": f"probe curves refused: {e}", "drop_step": None,
                "entropy_alarm_step": None, "cond_entropy_alarm_step": None, "last_probe_step": usable[-1]["step"],
                "margin_start": None, "margin_min": None, "margin_end": None, "entropy_ratio": None,
                "cond_entropy_ratio": None, "entropy_first": False}
    out = v.as_dict()
    del out["start_step"]  # margin_start is step 0's below, not the curves' first
    out["last_probe_step"] = int(usable[-1]["step"])
    m0, why0 = start_value(record, "retrieval_margin")
    m_end, _, why_end = end_value(record, "retrieval_margin")
    out["margin_start"], out["margin_end"] = m0, m_end
    left = [int(h["step"]) for h in history if h not in usable]
    if left:
        out["left_out_steps"] = left
    missing = {k: why for k, why in (("margin_start", why0), ("margin_end", why_end)) if why}
    if missing:
        out["not_measured"] = missing
    drop = out["drop_step"]
    alarms = [a for a in (out["entropy_alarm_step"], out["cond_entropy_alarm_step"]) if a is not None]
    out["entropy_first"] = drop is not None and any(a <= drop for a in alarms)
    return out


def judged(v: dict[str, Any] | None) -> bool:
    """Whether a :func:`run_collapse` verdict judged the run: it had the probe measurements and the detector did not
    refuse its curves. A run not judged is listed, never counted as a run without the signature or a drop."""
    return v is not None and not v.get("refused")


def _runs(records: list[dict[str, Any]], env: str | None = None, arm: str | None = None) -> list[dict[str, Any]]:
    out = [r for r in records if (env is None or r["env"] == env) and (arm is None or r["arm"] == arm)]
    return sorted(out, key=lambda r: r["seed"])


def _nan_none(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


#: The one mean of the study (None and non-finite values skipped): :func:`ragen_core.apps.reproduce.verdicts.mean_of`.
_mean = mean_of


def _ci(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "mean": None, "ci95": [None, None], "values": []}
    m, lo, hi = mean_ci(values)
    return {"n": len(values), "mean": m, "ci95": [_nan_none(lo), _nan_none(hi)], "values": values}


# ------------------------------------------------------------------------------------------- power
def seeds_needed(effect: float, sd: float, power: float = 0.8, max_n: int = MAX_SEEDS) -> int | None:
    """The smallest number of seeds (pairs) n >= 2 whose paired t-test (two-sided, alpha 0.05) detects `effect`
    with probability `power`: :func:`ragen_core.math.stats.pairs_needed`; None when more than `max_n` are needed."""
    if not (math.isfinite(sd) and sd > 0) or not effect:
        raise ValueError(f"need sd > 0 and a non-zero effect; got effect {effect}, sd {sd}")
    try:
        return pairs_needed(effect, sd, power=power, max_n=max_n)
    except ValueError:
        return None


def paired_comparison(a: dict[int, float | None], b: dict[int, float | None], direction: int = 1,
                      bound: float | None = None, rule: PairedRule | None = None) -> dict[str, Any]:
    """``a - b`` paired by seed (the keys), over the seeds where both are known, judged by the study's paired rule
    (:data:`PAIRED`; `direction` +1: the paper says a is higher; equivalence within +-`bound`) with
    :func:`ragen_core.apps.reproduce.verdicts.compare`: n, mean, 95% and 90% t-intervals, paired SD, minimum
    detectable effect at 80% power, per-seed differences and the verdict (its string value; the report words it
    with :func:`ragen_core.apps.reproduce.verdicts.verdict_text`)."""
    base = PAIRED if rule is None else rule
    r = PairedRule(base.level, base.equivalence_alpha, base.power, direction, base.bounds)
    return paired(a, b, r, bound).as_dict()


def equivalence_seeds(sd: float | None, bound: float, power: float = 0.8) -> int | None:
    """Seeds (pairs) TOST within +-`bound` needs to conclude equivalence with probability `power` when the true
    difference is 0 and the paired SD is `sd` (:func:`ragen_core.math.stats.pairs_needed_equivalence`); None when
    sd is unknown or 0, or more than :data:`~ragen_core.apps.reproduce.spec.MAX_SEEDS` (1000) are needed."""
    if sd is None or not math.isfinite(sd) or sd <= 0:
        return None
    return pairs_needed_equivalence(sd, bound, alpha=PAIRED.equivalence_alpha, power=power, max_n=MAX_SEEDS)


def equivalence_power_now(sd: float | None, n: int, bound: float) -> float | None:
    """The probability that TOST within +-`bound` over `n` seeds concludes equivalence when the true difference is
    0 and the paired SD is `sd`; None when it is undefined (n < 2, sd unknown or 0)."""
    if sd is None or n < 2 or not math.isfinite(sd) or sd <= 0:
        return None
    return equivalence_power(0.0, sd, n, bound, PAIRED.equivalence_alpha)


def fmt_unit(unit: str) -> Callable[[float], str]:
    """Formatter of an effect in `unit` ("points": a success fraction shown in points, "margin", "steps")."""
    if unit == "points":
        return lambda x: f"{100 * x:.1f} points"
    if unit == "steps":
        return lambda x: f"{x:.1f} steps"
    return lambda x: f"{x:.3f}"


# ------------------------------------------------------------------------------------------- the findings
def _criterion_verdict(n: int, n_collapsed: int, n_entropy_first: int, n_no_drop: int,
                       rule: ShareRule | None = None) -> dict[str, Any]:
    """Finding 1's verdict on a positive control, as :class:`Verdict` word, reason and numbers:
    :attr:`Verdict.PASSED` (the detector finds the built-in collapse on >= `share` of >= `min_seeds` seeds),
    :attr:`Verdict.FAILED` (on most seeds the MI drop comes only after an entropy alarm),
    :attr:`Verdict.INCONCLUSIVE` (reason ``"criterion_not_met"``) or :attr:`Verdict.NOT_TESTED` (reason
    ``"no_runs"``: no no-filter run with probe measurements). Beside them: ``seeds`` (n), ``min_seeds``,
    ``share``, ``seeds_with_signature``, ``seeds_no_drop`` and ``seeds_entropy_first``, all numbers."""
    rule = CONTROL if rule is None else rule
    min_seeds, share = rule.min_seeds, rule.share
    numbers = {"seeds": n, "min_seeds": min_seeds, "share": share, "seeds_with_signature": n_collapsed,
               "seeds_no_drop": n_no_drop, "seeds_entropy_first": n_entropy_first}
    if n == 0:
        verdict, reason = Verdict.NOT_TESTED, "no_runs"
    elif n_collapsed >= share * n and n >= min_seeds:
        verdict, reason = Verdict.PASSED, None
    elif 2 * n_entropy_first > n:
        verdict, reason = Verdict.FAILED, None
    else:
        verdict, reason = Verdict.INCONCLUSIVE, "criterion_not_met"
    return {"verdict": verdict.value, "reason": reason, **numbers}


def finding_collapse(records: list[dict[str, Any]], envs: Sequence[str] = ("collapse_sokoban", "collapse_frozenlake"),
                     collapse_arm: str = "no_filter", planned: dict[str, int] | None = None) -> dict[str, Any]:
    """Finding 1, a positive control: the collapse signature per run of every arm of `envs` (probe curves; a run
    that stopped early is judged on the curves it has and listed in ``stopped_early``), and the verdict on the
    `collapse_arm` runs of each env (see the module docstring)."""
    planned = planned_steps(records) if planned is None else planned
    out: dict[str, Any] = {}
    for env in envs:
        env_out: dict[str, Any] = {"arms": {}, "kind": "positive control"}
        for arm in dict.fromkeys(r["arm"] for r in _runs(records, env)):
            per_seed, refused = [], []
            for r in _runs(records, env, arm):
                v = run_collapse(r)
                if judged(v):
                    ratios = entropy_ratios(r)
                    missing = {**v.get("not_measured", {}), **ratios.get("not_measured", {}),
                               **_final_missing(r)}
                    per_seed.append({"seed": r["seed"], **v, **ratios, "final_success": final_success(r),
                                     "steps": r["steps"], "stopped_early": stopped_early(r, planned)})
                    per_seed[-1].pop("not_measured", None)
                    if missing:
                        per_seed[-1]["not_measured"] = missing
                elif v is not None:  # not judged: neither a run with the signature nor one without it
                    refused.append({"seed": r["seed"], "reason": v["reason"]})
            env_out["arms"][arm] = {
                "runs": per_seed, "n": len(per_seed),
                "n_collapsed": sum(p["collapsed"] for p in per_seed),
                "n_entropy_first": sum(p["entropy_first"] for p in per_seed),
                "n_no_drop": sum(p["drop_step"] is None for p in per_seed),
                "stopped_early": [{"seed": r["seed"], "steps": r["steps"]} for r in _runs(records, env, arm)
                                  if stopped_early(r, planned)],
                "no_probe": [r["seed"] for r in _runs(records, env, arm) if run_collapse(r) is None],
                **({"refused": refused} if refused else {})}
        c = env_out["arms"].get(collapse_arm, {"n": 0, "n_collapsed": 0, "n_entropy_first": 0, "n_no_drop": 0})
        env_out.update(_criterion_verdict(c["n"], c["n_collapsed"], c["n_entropy_first"], c["n_no_drop"]))
        env_out["planned_steps"] = planned.get(env)
        out[env] = env_out
    return out


# ------------------------------------------------------------------------------------------- co-movement
def within_run_correlation(record: dict[str, Any], x: str = "retrieval_margin", y: str = "token_entropy"
                           ) -> dict[str, Any]:
    """Pearson's r and Spearman's rho of the probe's `x` and `y` over one run's measurements (both finite):
    ``r = sum (x_i - x_bar)(y_i - y_bar) / sqrt(sum (x_i - x_bar)^2 sum (y_i - y_bar)^2)``, rho = r of the
    average ranks. None where undefined (fewer than 3 measurements, a constant series)."""
    pts = [(p.get(x), p.get(y)) for p in record.get("probe") or []]
    pts = [(float(a), float(b)) for a, b in pts if _finite_number(a) and _finite_number(b)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    pearson = _pearson(xs, ys) if len(pts) >= 3 else math.nan
    return {"n": len(pts), "pearson": _nan_none(pearson), "spearman": _nan_none(spearman(xs, ys) if pts else math.nan)}


def entropy_ratios(record: dict[str, Any]) -> dict[str, Any]:
    """Token entropy and H(Z|X) at the run's last probe step over their values at step 0 (``*_end_start``) and at
    the detector's reference measurement (``*_end_ref``: the margin's peak before its drop, where
    :func:`ragen_core.math.collapse.detect_collapse` measures from). The end is the last probe step's value and
    the start step 0's (:func:`end_value`, :func:`start_value`), never a neighbouring measurement's: a ratio is
    None where its value is missing, null or a start is 0, and ``not_measured`` (only when there is such a ratio
    of a measured entropy) says why."""
    v = run_collapse(record)
    ref_step = v.get("reference_step") if v else None
    by_step = {int(p["step"]): p for p in record.get("probe") or []}
    out: dict[str, Any] = {"reference_step": ref_step}
    missing: dict[str, str] = {}
    for key, name in (("token_entropy", "token"), ("cond_entropy_est", "cond")):
        end, _, why_end = end_value(record, key)
        start, why_start = start_value(record, key)
        ref_row = by_step.get(ref_step) if ref_step is not None else None
        ref = _metric(ref_row, key) if ref_row else None
        for tag, base, why_base in (("start", start, why_start), ("ref", ref, "no reference measurement")):
            ok = end is not None and base is not None and base != 0
            out[f"{name}_end_{tag}"] = end / base if ok else None
            if not ok and _measured(record, key, "probe"):
                missing[f"{name}_end_{tag}"] = why_end or why_base or f"the {tag} value is 0 (no ratio to it)"
    if missing:
        out["not_measured"] = missing
    return out


def auc_lower(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """The probability that a value of `pos` is below one of `neg` (ties count 1/2): the area under the ROC curve
    of "a lower value means positive", ``sum_ij [p_i < n_j] + 0.5 [p_i = n_j]`` over all pairs, divided by their
    number. None when either side is empty."""
    if not pos or not neg:
        return None
    wins = sum(1.0 if p < q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def _spread(values: list[float]) -> dict[str, Any]:
    """n, min, median, max of `values` (None when empty)."""
    if not values:
        return {"n": 0, "min": None, "median": None, "max": None}
    xs = sorted(values)
    mid = len(xs) // 2
    median = xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])
    return {"n": len(xs), "min": xs[0], "median": median, "max": xs[-1]}


def co_movement(records: list[dict[str, Any]], envs: Sequence[str] = ("collapse_sokoban", "collapse_frozenlake"),
                planned: dict[str, int] | None = None, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict[str, Any]:
    """What entropy and success do alongside the margin, on the runs of `envs` that ran their config's steps,
    every arm but :data:`CO_MOVEMENT_EXCLUDED_ARMS` (runs that stopped early are listed, not used).

    Per env and over all of them ("all"): the within-run Pearson / Spearman correlation of margin and token
    entropy (:func:`within_run_correlation`: median, how many are > 0); the entropy ratios at the end
    (:func:`entropy_ratios`) of the collapsed runs and of the rest; the AUC of the end/start ratios for telling
    collapsed runs (lower) from the rest (:func:`auc_lower`); and the association of the end margin with final
    success: Spearman's rho within each env and the env-centred pooled rho (:func:`within_env_rho`), with 95%
    intervals from the seed-cluster bootstrap (:func:`cluster_bootstrap`), plus the highest final success of a run
    without the signature and the lowest of a run with it.
    """
    planned = planned_steps(records) if planned is None else planned
    runs, excluded = [], []
    for r in records:
        if r["env"] not in envs or r["arm"] in CO_MOVEMENT_EXCLUDED_ARMS:
            continue
        v = run_collapse(r)
        if not judged(v):
            continue
        if stopped_early(r, planned):
            excluded.append(r["name"])
            continue
        corr = within_run_correlation(r)
        ratios = entropy_ratios(r)
        missing = {**v.get("not_measured", {}), **ratios.pop("not_measured", {}), **_final_missing(r)}
        runs.append({"name": r["name"], "env": r["env"], "arm": r["arm"], "seed": r["seed"],
                     "collapsed": bool(v["collapsed"]), "pearson": corr["pearson"], "spearman": corr["spearman"],
                     "entropy_ratio_at_drop": v["entropy_ratio"], "cond_entropy_ratio_at_drop": v["cond_entropy_ratio"],
                     **ratios, "margin_end": v["margin_end"], "final_success": final_success(r),
                     **({"not_measured": missing} if missing else {})})
    groups = {e: [x for x in runs if x["env"] == e] for e in envs if any(x["env"] == e for x in runs)}
    if len(groups) > 1:
        groups["all"] = runs
    out: dict[str, Any] = {"envs": [e for e in envs if e in groups], "excluded_arms": list(CO_MOVEMENT_EXCLUDED_ARMS),
                           "stopped_early": excluded, "runs": runs, "by_group": {}}
    for g, rs in groups.items():
        out["by_group"][g] = _co_movement_group(rs)
    _margin_success(out, runs, n_boot, seed)
    return out


def _co_movement_group(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """The summaries of :func:`co_movement` over the runs `rs`."""
    pear = [x["pearson"] for x in rs if x["pearson"] is not None]
    spear = [x["spearman"] for x in rs if x["spearman"] is not None]
    col = [x for x in rs if x["collapsed"]]
    rest = [x for x in rs if not x["collapsed"]]
    ratio_keys = ("token_end_start", "cond_end_start", "token_end_ref", "cond_end_ref", "entropy_ratio_at_drop",
                  "cond_entropy_ratio_at_drop")
    return {
        "n": len(rs), "n_collapsed": len(col),
        "pearson": {**_spread(pear), "n_positive": sum(p > 0 for p in pear)},
        "spearman": {**_spread(spear), "n_positive": sum(p > 0 for p in spear)},
        "ratios": {which: {k: _spread([x[k] for x in grp if x[k] is not None]) for k in ratio_keys}
                   for which, grp in (("collapsed", col), ("not_collapsed", rest))},
        "auc_token_end_start": auc_lower([x["token_end_start"] for x in col if x["token_end_start"] is not None],
                                         [x["token_end_start"] for x in rest if x["token_end_start"] is not None]),
        "auc_cond_end_start": auc_lower([x["cond_end_start"] for x in col if x["cond_end_start"] is not None],
                                        [x["cond_end_start"] for x in rest if x["cond_end_start"] is not None]),
        "max_success_not_collapsed": max((x["final_success"] for x in rest if x["final_success"] is not None),
                                         default=None),
        "min_success_collapsed": min((x["final_success"] for x in col if x["final_success"] is not None),
                                     default=None)}


def _margin_success(out: dict[str, Any], runs: list[dict[str, Any]], n_boot: int, seed: int) -> None:
    """End margin against final success, Spearman per env and env-centred pooled, with seed-cluster bootstrap
    intervals (none with fewer than :data:`MIN_BOOT_SEEDS` seeds), into ``out["margin_success"]``. A run whose end
    margin or final success is None (null at its last step) is left out and listed under ``left_out``."""
    items = [x for x in runs if x["final_success"] is not None and x["margin_end"] is not None]
    left_out = [{"name": x["name"], "why": "; ".join(f"{k}: {why}" for k, why in x["not_measured"].items()
                                                     if k in ("margin_end", "final_success"))}
                for x in runs if x not in items and x.get("not_measured")]
    envs = out["envs"]

    def stat(sample: list[dict[str, Any]]) -> list[float]:
        vals = []
        for e in envs:
            pts = [(x["margin_end"], x["final_success"]) for x in sample if x["env"] == e]
            vals.append(spearman([p[0] for p in pts], [p[1] for p in pts]) if pts else math.nan)
        vals.append(within_env_rho([x["margin_end"] for x in sample], [x["final_success"] for x in sample],
                                   [x["env"] for x in sample]) if sample else math.nan)
        return vals

    clusters: dict[Any, list[Any]] = {}
    for x in items:
        clusters.setdefault(x["seed"], []).append(x)
    point = stat(items)
    boot = cluster_bootstrap(clusters, stat, n_boot, seed) if len(clusters) >= MIN_BOOT_SEEDS else []
    names = [*envs, "within_env"]
    out["margin_success"] = {
        "n_runs": len(items), "n_seeds": len(clusters), "n_boot": n_boot, "boot_seed": seed,
        **{name: {"rho": _nan_none(point[i]), "ci95": boot[i]["ci95"] if boot else [None, None]}
           for i, name in enumerate(names)}}
    if left_out:
        out["margin_success"]["left_out"] = left_out


# ------------------------------------------------------------------------------------------- early stops
def planned_steps(records: list[dict[str, Any]]) -> dict[str, int]:
    """The steps each env's config asks for: the records' ``planned_steps`` (read from the run's config.toml)
    where any run of the env has it; otherwise (runs recorded before the field existed) the most steps any run of
    the env reached, since no arm of the study changes ``run.steps``."""
    out: dict[str, int] = {}
    for env in dict.fromkeys(r["env"] for r in records):
        runs = [r for r in records if r["env"] == env]
        recorded = [r["planned_steps"] for r in runs if isinstance(r.get("planned_steps"), int)
                    and r["planned_steps"] > 0]
        out[env] = max(recorded) if recorded else max(int(r.get("steps") or 0) for r in runs)
    return out


def stopped_early(record: dict[str, Any], planned: dict[str, int]) -> bool:
    """Whether the run did fewer RL steps than its config asks for (its own ``planned_steps``, else its env's)."""
    p = record.get("planned_steps")
    target = p if isinstance(p, int) and p > 0 else planned.get(record["env"], 0)
    return int(record.get("steps") or 0) < target


def _outcomes(record: dict[str, Any], probe_until: int | None = None, val_until: int | None = None
              ) -> dict[str, float | None]:
    """Finding 3's outcomes of one run: at its end, or at the probe step `probe_until` (margin, drop: the drop is
    looked for among the measurements up to it, censored there) and the evaluation step `val_until` (success).
    The margin and success are the measurements at that step (:func:`end_value`): None when null there, never an
    earlier one's, with why under ``not_measured`` (only when there is such an outcome)."""
    if probe_until is not None:
        record = {**record, "probe": [p for p in record.get("probe") or [] if p["step"] <= probe_until]}
    v = run_collapse(record)
    v = v if judged(v) else None  # curves the detector refused: no drop step, not a run without a drop
    margin, _, why_margin = end_value(record, "retrieval_margin")
    steps_to_drop = None
    if v is not None:
        steps_to_drop = float(v["drop_step"] if v["drop_step"] is not None else v["last_probe_step"])
    if val_until is None:
        success, _, why_success = end_value(record, "", "val")
    else:
        at = [row for step, row in _rows(record, "val") if step == val_until]
        success = _row_value(at[-1], "", "val") if at else None
        why_success = (f"the evaluation at step {val_until} is null" if at and success is None else "")
    missing = {k: why for k, why, src in (("margin_end", why_margin, "probe"), ("success_end", why_success, "val"))
               if why and _measured(record, "retrieval_margin" if src == "probe" else "", src)}
    return {"margin_end": margin, "steps_to_drop": steps_to_drop,
            "success_end": success, "censored": None if v is None else v["drop_step"] is None,
            **({"not_measured": missing} if missing else {})}


def _last_common_step(a: dict[str, Any], b: dict[str, Any], source: str) -> int | None:
    """The last step at which both runs have a measurement of `source` ("probe" or "val"); None when it is step 0
    (before any RL step: no information about training) or there is none."""
    def steps(r: dict[str, Any]) -> set[int]:
        if source == "val":
            return {int(s) for s, _ in r.get("val", [])}
        return {int(p["step"]) for p in r.get(source) or []}

    common = steps(a) & steps(b)
    last = max(common) if common else None
    return last if last else None


def pair_outcomes(a: dict[str, Any], b: dict[str, Any], planned: dict[str, int]
                  ) -> tuple[dict[str, float | None], dict[str, float | None], bool]:
    """(outcomes of `a`, outcomes of `b`, early): both at their ends, or, when either stopped early, both at equal
    steps (the early-stop rule of the module docstring). A pair whose last common measurement of an outcome is step
    0 gets None for it."""
    early = stopped_early(a, planned) or stopped_early(b, planned)
    if not early:
        return _outcomes(a), _outcomes(b), False
    hp, hv = _last_common_step(a, b, "probe"), _last_common_step(a, b, "val")
    oa, ob = _outcomes(a, hp if hp is not None else -1, hv), _outcomes(b, hp if hp is not None else -1, hv)
    if hv is None:
        oa["success_end"] = ob["success_end"] = None
    return oa, ob, True


def finding_filtering(records: list[dict[str, Any]], envs: Sequence[str] = ("collapse_sokoban", "collapse_frozenlake"),
                      comparisons: Sequence[tuple[str, str]] = (("top_p", "no_filter"), ("top_p", "random")),
                      planned: dict[str, int] | None = None) -> dict[str, Any]:
    """Finding 3: per env, each arm's outcomes by seed (at each run's end), and every comparison of `comparisons`
    on every outcome of :data:`OUTCOMES` (:func:`paired_comparison`, direction: the first arm higher, the bounds of
    :data:`EQUIVALENCE_BOUNDS`), pairs with an early-stopped run at equal steps (:func:`pair_outcomes`); where
    there are such pairs, ``sensitivity`` is the comparison without them."""
    planned = planned_steps(records) if planned is None else planned
    out: dict[str, Any] = {}
    for env in envs:
        arms = dict.fromkeys(x for pair in comparisons for x in pair)
        runs = {arm: {r["seed"]: r for r in _runs(records, env, arm)} for arm in arms}
        by_arm = {arm: {seed: _outcomes(r) for seed, r in rs.items()} for arm, rs in runs.items()}
        env_out: dict[str, Any] = {"arms": {}, "comparisons": {}, "planned_steps": planned.get(env)}
        for arm, seeds in by_arm.items():
            env_out["arms"][arm] = {
                "seeds": sorted(seeds),
                **{k: _ci([o[k] for o in seeds.values() if o[k] is not None]) for k in OUTCOMES},
                "censored": sum(bool(o["censored"]) for o in seeds.values()),
                **_left_out(seeds),
                "stopped_early": [{"seed": s, "steps": r["steps"]} for s, r in sorted(runs[arm].items())
                                  if stopped_early(r, planned)],
                # Share of the step's groups (before filtering) whose rewards do not vary: their GRPO advantage
                # is exactly 0, so they add nothing to the task gradient (only to the entropy term and the loss's
                # normalisation): dropping them cannot change the direction the task pushes in.
                "zero_variance_fraction": _mean([r["zero_variance_fraction"] for r in runs[arm].values()
                                                 if r.get("zero_variance_fraction") is not None])}
        for a, b in comparisons:
            env_out["comparisons"][f"{a}-{b}"] = _compare_arms(runs[a], runs[b], planned, (a, b))
        het = {}
        for r in _runs(records, env):
            if r.get("rv_heterogeneity_first") is not None:
                het.setdefault(r["seed"], r["rv_heterogeneity_first"])
        env_out["rv_heterogeneity"] = {"by_seed": het, "mean": _mean(list(het.values()))}
        out[env] = env_out
    return out


def _compare_arms(runs_a: dict[int, dict[str, Any]], runs_b: dict[int, dict[str, Any]], planned: dict[str, int],
                  arms: tuple[str, str] = ("a", "b")) -> dict[str, Any]:
    """Every outcome of :data:`OUTCOMES`, ``a - b`` paired by seed under the early-stop rule, with the early
    pairs listed and, when there are any, the comparison without them; a seed with a run in only one of the `arms`
    is named under ``unpaired`` (:func:`ragen_core.apps.reproduce.verdicts.unpaired`), not dropped unsaid."""
    lone = unpaired({arms[0]: runs_a, arms[1]: runs_b})
    oa: dict[int, dict[str, float | None]] = {}
    ob: dict[int, dict[str, float | None]] = {}
    early = []
    for seed in sorted(set(runs_a) & set(runs_b)):
        oa[seed], ob[seed], is_early = pair_outcomes(runs_a[seed], runs_b[seed], planned)
        if is_early:
            early.append(seed)
    out: dict[str, Any] = {}
    for k in OUTCOMES:
        bound = EQUIVALENCE_BOUNDS[k]
        c = paired_comparison({s: o[k] for s, o in oa.items()}, {s: o[k] for s, o in ob.items()}, bound=bound)
        c["early_seeds"] = early
        missing = {s: {arm: o[s]["not_measured"][k] for arm, o in zip(arms, (oa, ob))
                       if k in o[s].get("not_measured", {})} for s in oa}
        missing = {s: m for s, m in missing.items() if m}
        if missing:  # a seed whose outcome is None in an arm (null at the step it is read at): left out, named
            c["not_measured"] = missing
        if lone:
            c["unpaired"] = lone
        if early:
            keep = [s for s in oa if s not in early]
            c["sensitivity"] = paired_comparison({s: oa[s][k] for s in keep}, {s: ob[s][k] for s in keep},
                                                 bound=bound)
        out[k] = c
    return out


def power_analysis(filtering: dict[str, Any], comparison: str = "top_p-no_filter") -> list[dict[str, Any]]:
    """Seeds needed (80% power, two-sided alpha 0.05) for the effects of :data:`POWER_EFFECTS`, from the paired SD
    of `comparison` on each outcome of each env of `filtering` (rows without an SD are skipped); beside them, the
    probability that TOST concludes "equivalent" now if the true difference were 0, and the seeds it needs for 80%
    (:func:`equivalence_power_now`, :func:`equivalence_seeds`, bounds :data:`EQUIVALENCE_BOUNDS`)."""
    rows = []
    for env, e in filtering.items():
        for k, (label, unit) in OUTCOMES.items():
            c = e["comparisons"].get(comparison, {}).get(k)
            if not c or not c.get("sd"):
                continue
            needed = {}
            for eff in POWER_EFFECTS[unit]:
                needed[eff] = seeds_needed(eff, c["sd"])
            bound = EQUIVALENCE_BOUNDS[k]
            rows.append({"env": env, "outcome": k, "label": label, "unit": unit, "sd": c["sd"], "n": c["n"],
                         "mde": c["mde"], "needed": needed, "bound": bound,
                         "equivalence_power": equivalence_power_now(c["sd"], c["n"], bound),
                         "equivalence_needed": equivalence_seeds(c["sd"], bound)})
    return rows


def finding_correlations(records: list[dict[str, Any]], envs: Sequence[str] = ("sokoban", "frozenlake"),
                         n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict[str, Any]:
    """Finding 2 on the runs of `envs` (see the module docstring): per metric, per env Spearman's rho, the
    env-centred pooled rho over the envs where the metric is not constant/tied, cluster-bootstrap intervals
    (seeds resampled), and the verdicts of :data:`CORRELATION_PAIRS`."""
    runs = [r for r in records if r["env"] in envs and final_success(r) is not None]
    # a run whose last evaluation is null has no final success: left out of the correlations, named
    left_out = [{"name": r["name"], "why": _final_missing(r)["final_success"]} for r in records
                if r["env"] in envs and final_success(r) is None and _final_missing(r)]
    items = []
    for r in runs:
        early = {k: early_value(r, field, source=src) for k, (src, field) in CORRELATED.items()}
        y = final_success(r)
        # Ranked at SIG_DIGITS significant digits: float noise below that must not order runs.
        items.append({"seed": r["seed"], "env": r["env"], "y": y, "x": early, "ry": round_sig(y),
                      "rx": {k: None if v is None else round_sig(v) for k, v in early.items()}})
    env_list = [e for e in envs if any(i["env"] == e for i in items)]
    metrics: dict[str, Any] = {}
    for k in CORRELATED:
        have = [i for i in items if i["x"][k] is not None]
        status = {e: tie_status([i["x"][k] for i in have if i["env"] == e]) for e in env_list}
        status = {e: s for e, s in status.items() if any(i["env"] == e for i in have)}
        metrics[k] = {"n": len(have), "paper": PAPER["spearman"].get(k), "status": status,
                      "envs_used": [e for e, s in status.items() if s is None],
                      "by_env": {e: {"n": sum(i["env"] == e for i in have), "status": status[e]} for e in status}}

    def stat(sample: list[dict[str, Any]]) -> list[float]:
        vals = []
        for k, m in metrics.items():
            for e in m["by_env"]:
                if m["by_env"][e]["status"] is not None:
                    vals.append(math.nan)
                    continue
                pts = [(i["rx"][k], i["ry"]) for i in sample if i["env"] == e and i["rx"][k] is not None]
                vals.append(spearman([p[0] for p in pts], [p[1] for p in pts]))
            pts = [(i["rx"][k], i["ry"], i["env"]) for i in sample
                   if i["env"] in m["envs_used"] and i["rx"][k] is not None]
            vals.append(within_env_rho([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts])
                        if pts else math.nan)
        return vals

    point = stat(items)
    clusters: dict[Any, list[Any]] = {}
    for i in items:
        clusters.setdefault(i["seed"], []).append(i)
    # Fewer than MIN_BOOT_SEEDS seeds: every resample repeats the few seeds there are, so the "interval" would
    # show almost no uncertainty where there is most: no interval at all.
    boot = (cluster_bootstrap(clusters, lambda s: _with_pairs(stat(s), metrics), n_boot, seed)
            if len(clusters) >= MIN_BOOT_SEEDS else [])
    j = 0
    for m in metrics.values():
        for e in m["by_env"]:
            m["by_env"][e].update(rho=_nan_none(point[j]), ci95=boot[j]["ci95"] if boot else [None, None])
            j += 1
        m.update(rho=_nan_none(point[j]), ci95=boot[j]["ci95"] if boot else [None, None],
                 n_valid=boot[j]["n_valid"] if boot else 0)
        j += 1
    pairs_point = _with_pairs(point, metrics)[j:]
    pairs = []
    for p, (mi_key, h_key) in enumerate(CORRELATION_PAIRS):
        diff_ci = boot[j + p]["ci95"] if boot else [None, None]
        ceiling = None
        if mi_key in CEILING_OF_PAIR:
            src, field, label = CEILING_OF_PAIR[mi_key]
            values = [v for v in (early_value(r, field, source=src) for r in runs) if v is not None]
            ceiling = {"metric": label, **ceiling_status(values)}
        verdict = _pair_verdict(metrics[mi_key], metrics[h_key], diff_ci)
        if ceiling and ceiling["at_ceiling"]:
            verdict = {"verdict": Verdict.NOT_TESTABLE.value, "reason": "at_ceiling",
                       "at_ceiling_runs": ceiling["n_at_ceiling"], "runs": ceiling["n"], "threshold": ceiling["norm"]}
        pairs.append({"mi": mi_key, "entropy": h_key, "diff": _nan_none(pairs_point[p]), "diff_ci95": diff_ci,
                      "ceiling": ceiling, **verdict})
    return {"envs": env_list, "n_runs": len(items), "n_seeds": len(clusters), "n_boot": n_boot, "boot_seed": seed,
            "metrics": metrics, "pairs": pairs,
            "points": [{"env": i["env"], "seed": i["seed"], "y": i["y"], **i["x"]} for i in items],
            **({"left_out": left_out} if left_out else {})}


def ceiling_status(values: Sequence[float], norm: float = CEILING_NORM, share: float = CEILING_SHARE
                   ) -> dict[str, Any]:
    """Whether a normalised MI (1 = its ceiling) is "at the ceiling": above `norm` on more than `share` of
    `values`. Also n, the count above, and the range."""
    xs = [float(v) for v in values]
    n_at = sum(v > norm for v in xs)
    return {"n": len(xs), "n_at_ceiling": n_at, "at_ceiling": bool(xs) and n_at > share * len(xs),
            "min": min(xs) if xs else None, "max": max(xs) if xs else None, "norm": norm}


def _with_pairs(vals: list[float], metrics: dict[str, Any]) -> list[float]:
    """Append ``|rho_MI| - |rho_H|`` of each pair of :data:`CORRELATION_PAIRS` (pooled rhos) to `vals`."""
    pooled = {}
    j = 0
    for k, m in metrics.items():
        j += len(m["by_env"])
        pooled[k] = vals[j]
        j += 1
    return [*vals, *(abs(pooled[a]) - abs(pooled[b]) for a, b in CORRELATION_PAIRS)]


def _pair_verdict(mi: dict[str, Any], h: dict[str, Any], diff_ci: list[float | None]) -> dict[str, Any]:
    """Finding 2's verdict on one pair (the ceiling rule aside), as :class:`Verdict` word, reason and numbers:
    :attr:`Verdict.NOT_TESTED` (reason ``"not_measured"``, ``metric_role`` "mi" or "entropy"),
    :attr:`Verdict.INCONCLUSIVE` (reason ``"tied"`` with ``metric_role``: constant/tied in every env;
    ``"no_interval"`` with ``min_seeds``; ``"interval_contains_0"``), :attr:`Verdict.HELD` or
    :attr:`Verdict.CONTRADICTED` (no reason)."""
    for role, m in (("mi", mi), ("entropy", h)):
        if m["n"] == 0:
            return {"verdict": Verdict.NOT_TESTED.value, "reason": "not_measured", "metric_role": role}
        if not m["envs_used"]:
            return {"verdict": Verdict.INCONCLUSIVE.value, "reason": "tied", "metric_role": role}
    lo, hi = diff_ci
    if lo is None or hi is None:
        return {"verdict": Verdict.INCONCLUSIVE.value, "reason": "no_interval", "min_seeds": MIN_BOOT_SEEDS}
    mi_lo = mi["ci95"][0]
    if lo > 0 and mi_lo is not None and mi_lo > 0:
        return {"verdict": Verdict.HELD.value, "reason": None}
    if hi < 0:
        return {"verdict": Verdict.CONTRADICTED.value, "reason": None}
    return {"verdict": Verdict.INCONCLUSIVE.value, "reason": "interval_contains_0"}


#: Finding 4's label on a success verdict (module docstring).
GRPO_LABEL = "expected under GRPO: the bottom quartile trains mostly on zero-advantage groups"


def finding_quartiles(records: list[dict[str, Any]], env: str = "sokoban", planned: dict[str, int] | None = None
                      ) -> dict[str, Any]:
    """Finding 4: top minus bottom RV quartile, paired by seed, at equal steps and at the end (a stopped run
    carried at its last value), on success, in-batch MI-Seq / log P and the probe's MI-Seq / log N; an MI
    measure above :data:`CEILING_NORM` in both arms is "not testable (at the ceiling)". With it what GRPO implies
    for the bottom arm (:data:`GRPO_LABEL`): each arm's share of zero-variance groups, its runs that stopped
    early and, where the per-step filter log was recorded, the share of kept groups with zero advantage."""
    planned = planned_steps(records) if planned is None else planned
    top = {r["seed"]: r for r in _runs(records, env, "rv_top_quartile")}
    bottom = {r["seed"]: r for r in _runs(records, env, "rv_bottom_quartile")}
    measures = {"success": ("val", "success", "points"), "mi_norm": ("mi", "mi_norm", "margin"),
                "probe_mi_seq_norm": ("probe", "mi_seq_norm", "margin")}
    out: dict[str, Any] = {"arms": {}, "paper": PAPER["quartiles"], "equal_steps": {}, "at_end": {}, "seeds": {},
                           "label": GRPO_LABEL}
    for arm, runs in (("rv_top_quartile", top), ("rv_bottom_quartile", bottom)):
        logs = [filter_log_summary(runs[s]) for s in sorted(runs)]
        logs = [x for x in logs if x is not None]
        out["arms"][arm] = {"seeds": sorted(runs), "steps": [runs[s]["steps"] for s in sorted(runs)],
                            "zero_variance_fraction": _mean([r["zero_variance_fraction"] for r in runs.values()
                                                             if r.get("zero_variance_fraction") is not None]),
                            "stopped_early": [{"seed": s, "steps": runs[s]["steps"]} for s in sorted(runs)
                                              if stopped_early(runs[s], planned)],
                            "planned_steps": planned.get(env),
                            "kept_zero_adv_share": _mean([x["kept_zero_adv_share"] for x in logs
                                                          if x["kept_zero_adv_share"] is not None]),
                            "n_filter_logs": len(logs)}
    common = sorted(set(top) & set(bottom))
    lone = unpaired({"rv_top_quartile": top, "rv_bottom_quartile": bottom})
    if lone:  # a seed with one quartile run only: named, not dropped unsaid
        out["unpaired"] = lone
    for name, (src, key, _unit) in measures.items():
        eq_a: dict[int, float | None] = {}
        eq_b: dict[int, float | None] = {}
        end_a: dict[int, float | None] = {}
        end_b: dict[int, float | None] = {}
        for s in common:
            pa, pb = dict(_points(top[s], key, src)), dict(_points(bottom[s], key, src))
            limit = min(top[s]["steps"], bottom[s]["steps"])
            both = [st for st in pa if st in pb and st <= limit]
            at = max(both) if both else None
            eq_a[s], eq_b[s] = (pa[at], pb[at]) if at is not None else (None, None)
            if at is not None:
                out["seeds"].setdefault(s, {})[f"{name}_step"] = at
            for arm, run, end in (("rv_top_quartile", top[s], end_a), ("rv_bottom_quartile", bottom[s], end_b)):
                end[s], _, why = end_value(run, key, src)
                if why and _measured(run, key, src):  # null at its last step: left out, never an earlier value
                    out.setdefault("not_measured", {}).setdefault(name, {}).setdefault(s, {})[arm] = why
        for where, (xa, xb) in (("equal_steps", (eq_a, eq_b)), ("at_end", (end_a, end_b))):
            c = {**paired_comparison(xa, xb), "top": _mean([v for v in xa.values() if v is not None]),
                 "bottom": _mean([v for v in xb.values() if v is not None])}
            if name != "success":
                ceil = [ceiling_status([v for v in x.values() if v is not None]) for x in (xa, xb)]
                c["ceiling"] = ceil
                if all(x["at_ceiling"] for x in ceil):
                    c["verdict"] = Verdict.NOT_TESTABLE.value
            out[where][name] = c
    return out


def filter_log_summary(record: dict[str, Any]) -> dict[str, Any] | None:
    """The per-step filter log of a run in brief: its steps, the means of ``groups_total``, ``kept_groups``,
    ``zero_fraction`` and ``kept_zero_adv_share`` over the steps that logged them, the skipped steps, and the
    steps whose kept groups all had zero advantage (``kept_zero_adv_share == 1``: the update is the regularisers
    alone). None when the run has no filter log (recorded before it was kept)."""
    log = record.get("filter_log")
    if not log:
        return None

    def values(key: str) -> list[float]:
        return [float(x[key]) for x in log if _finite_number(x.get(key))]

    skipped = values("skipped")
    share = values("kept_zero_adv_share")
    return {"n_steps": len(log), **{k: _mean(values(k)) for k in ("groups_total", "kept_groups", "zero_fraction",
                                                                    "kept_zero_adv_share")},
            "skipped": int(sum(v > 0 for v in skipped)) if skipped else None,
            "all_zero_adv_steps": int(sum(v >= 1.0 for v in share)) if share else None}


class RecordsError(ValueError):
    """Run records that cannot be analysed as one design (one line saying which records and why)."""


def check_one_run_each(records: list[dict[str, Any]]) -> None:
    """Refuse records with two runs of one (env, arm, seed): a comparison paired by seed would keep one of them
    silently and a count over runs would count the seed twice, so no analysis of them is right. A results.json
    merged or edited by hand can hold such a pair; the runner never writes one.

    Raises:
        RecordsError: naming each repeated (env, arm, seed) and its records' names.
    """
    names: dict[tuple[Any, Any, Any], list[Any]] = {}
    for r in records:
        names.setdefault((r.get("env"), r.get("arm"), r.get("seed")), []).append(r.get("name"))
    repeated = {k: v for k, v in names.items() if len(v) > 1}
    if repeated:
        what = "; ".join(f"{env}/{arm} seed {seed}: {len(v)} records ({', '.join(map(repr, v))})"
                         for (env, arm, seed), v in repeated.items())
        raise RecordsError(f"run records repeat a run: {what}; each (env, arm, seed) must be one record (remove the "
                           "extra ones)")


def analyse(records: list[dict[str, Any]], n_boot: int = N_BOOT) -> dict[str, Any]:
    """All four findings, the co-movement beside finding 1, the power analysis, the rules' constants and a per-run
    table (`n_boot`: the bootstrap resamples of finding 2 and of the margin-success association).

    Raises:
        RecordsError: two records of one run (:func:`check_one_run_each`).
    """
    check_one_run_each(records)
    planned = planned_steps(records)
    runs = []
    for r in records:
        v = run_collapse(r)
        probe = r.get("probe") or []
        missing: dict[str, str] = {}
        at = functools.partial(_at, r, missing)
        runs.append({
            "name": r["name"], "env": r["env"], "arm": r["arm"], "seed": r["seed"], "steps": r["steps"],
            "planned_steps": r.get("planned_steps") or planned.get(r["env"]),
            "stopped_early": stopped_early(r, planned),
            "before": at("start", "before", "", "val"), "peak": peak_success(r), "final": at("end", "final", "", "val"),
            "rv_heterogeneity_first": r.get("rv_heterogeneity_first"),
            "early": {k: early_value(r, f, source=src) for k, (src, f) in CORRELATED.items()},
            "margin_start": at("start", "margin_start", "retrieval_margin"),
            "margin_end": at("end", "margin_end", "retrieval_margin"),
            "collapsed": v["collapsed"] if judged(v) else None, "drop_step": v["drop_step"] if judged(v) else None,
            "probe_s": _mean([p["probe_s"] for p in probe if p.get("probe_s") is not None]),
            "minutes": ((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0)) / 60.0,
            "commit": r.get("commit"), "config_sha256": r.get("config_sha256"),
            **{f"{k}_{end}": at(end, f"{k}_{end}", k) for k in ("reasoning_tokens", "template_share")
               for end in ("start", "end")},
            "filter_log": filter_log_summary(r)})
        if missing:
            runs[-1]["not_measured"] = missing
    filtering = finding_filtering(records, planned=planned)
    return {
        "rules": {"equivalence_bounds": EQUIVALENCE_BOUNDS, "equivalence_alpha": EQUIVALENCE_ALPHA,
                  "ceiling_norm": CEILING_NORM, "ceiling_share": CEILING_SHARE, "planned_steps": planned},
        "collapse": finding_collapse(records, planned=planned),
        "co_movement": co_movement(records, planned=planned, n_boot=n_boot),
        "correlations": finding_correlations(records, n_boot=n_boot),
        "filtering": filtering,
        "power": power_analysis(filtering),
        "quartiles": finding_quartiles(records, planned=planned),
        "runs": runs,
    }

