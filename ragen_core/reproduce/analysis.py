"""The study's statistics: rank correlations with intervals, and the four findings from run records.

A run record is what :func:`ragen_core.reproduce.runner.read_run` returns: ``val`` (``[[step, success]]``, step 0 =
after the warm start), ``mi`` (one dict per MI measurement: step, ``mi_zscore_ema``, ``mi_seq_est``,
``mi_upper_bound``, ``retrieval_acc``, ``retrieval_chance``, ``cond_entropy_est``, ``marginal_entropy_est``,
``token_entropy``, ``regime``), ``rv_heterogeneity_first`` and ``steps``.

Definitions (docs/reproduction.md repeats them):

- peak success: the highest validation success over the RL evaluations (step >= 1); final: the last one.
- early value of a metric: its mean over the MI measurements in the first quarter of the run's steps (at least the
  first measurement); late value: the mean over the last quarter.
- normalised MI: ``mi_seq_est / mi_upper_bound`` (``log P``), in [<= 0, 1], the scale of the regime thresholds.
- Spearman's rho: the Pearson correlation of average ranks (ties share their mean rank); its 95% interval by
  Fisher's z with the standard error ``1.03 / sqrt(n - 3)`` (Fieller, Hartley and Pearson, 1957), NaN for n < 4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ragen_core.stats import mean_ci, paired_ci

__all__ = [
    "average_ranks",
    "spearman",
    "spearman_ci",
    "early_value",
    "late_value",
    "peak_success",
    "final_success",
    "mi_drop_step",
    "entropy_alarm_step",
    "finding_collapse",
    "finding_correlations",
    "finding_filtering",
    "finding_quartiles",
    "verdict",
    "mi_beats_entropy",
    "analyse",
    "PAPER",
]

#: The paper's numbers the report puts beside ours.
PAPER: dict[str, Any] = {
    "spearman": {"mi_zscore_ema": 0.39, "mi_seq_est": 0.22, "retrieval_acc": None,
                 "cond_entropy_est": -0.14, "marginal_entropy_est": -0.11},
    "rv_heterogeneity": {"sokoban": "1.16 (3B) / 1.29 (14B): filtering helped (+3.2 / +4.6 points)",
                         "frozenlake": "0.33 (GRPO): filtering did not help (-5.0 points)"},
    "quartiles": {"rv_top_quartile": {"success": 21.1, "mi": 0.95},
                  "rv_bottom_quartile": {"success": 11.0, "mi": 0.73}},
}

#: RV heterogeneity above which filtering is predicted to help (between the paper's 0.33 and 1.16).
HETEROGENEITY_THRESHOLD = 1.0
#: The metrics correlated with final success (finding 2), in the order of the paper's sentence.
CORRELATED = ("mi_zscore_ema", "mi_seq_est", "retrieval_acc", "cond_entropy_est", "marginal_entropy_est")


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


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (Pearson correlation of average ranks); NaN if n < 3 or either side is constant."""
    if len(x) != len(y):
        raise ValueError(f"x and y must pair up; got {len(x)} and {len(y)} values")
    n = len(x)
    if n < 3:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0.0 or syy == 0.0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def spearman_ci(rho: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Fisher-z interval of Spearman's rho with SE 1.03 / sqrt(n - 3); (NaN, NaN) when undefined."""
    from statistics import NormalDist

    if n < 4 or not math.isfinite(rho):
        return math.nan, math.nan
    if abs(rho) >= 1.0:
        return rho, rho
    z = math.atanh(rho)
    half = NormalDist().inv_cdf(0.5 + level / 2.0) * 1.03 / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


# ------------------------------------------------------------------------------------------- per-run values
def _metric(m: dict[str, Any], key: str) -> float | None:
    if key == "mi_norm":
        ub = m.get("mi_upper_bound")
        v = m.get("mi_seq_est")
        return float(v) / float(ub) if isinstance(v, (int, float)) and isinstance(ub, (int, float)) and ub > 0 else None
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _window_mean(record: dict[str, Any], key: str, early: bool, fraction: float = 0.25) -> float | None:
    points = [(m["step"], _metric(m, key)) for m in record.get("mi", [])]
    points = [(s, v) for s, v in points if v is not None]
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


def early_value(record: dict[str, Any], key: str, fraction: float = 0.25) -> float | None:
    """Mean of `key` over the MI measurements in the first `fraction` of the steps (at least the first one)."""
    return _window_mean(record, key, early=True, fraction=fraction)


def late_value(record: dict[str, Any], key: str, fraction: float = 0.25) -> float | None:
    """Mean of `key` over the MI measurements in the last `fraction` of the steps (at least the last one)."""
    return _window_mean(record, key, early=False, fraction=fraction)


def first_value(record: dict[str, Any], key: str) -> float | None:
    """`key` at the run's first MI measurement."""
    for m in record.get("mi", []):
        v = _metric(m, key)
        if v is not None:
            return v
    return None


def peak_success(record: dict[str, Any]) -> float | None:
    """Highest validation success after step 0 (None if the run has no RL evaluation)."""
    rl = [v for s, v in record.get("val", []) if s >= 1]
    return max(rl) if rl else None


def final_success(record: dict[str, Any]) -> float | None:
    """Validation success at the run's last evaluation."""
    val = record.get("val", [])
    return max(val)[1] if val else None


def _ci(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "mean": None, "ci95": [None, None], "values": []}
    m, lo, hi = mean_ci(values)
    return {"n": len(values), "mean": m, "ci95": [_nan_none(lo), _nan_none(hi)], "values": values}


def _nan_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _runs(records: list[dict[str, Any]], env: str | None = None, arm: str | None = None) -> list[dict[str, Any]]:
    out = [r for r in records if (env is None or r["env"] == env) and (arm is None or r["arm"] == arm)]
    return sorted(out, key=lambda r: r["seed"])


# ------------------------------------------------------------------------------------------- the findings
#: Token entropy at this multiple of its first measurement counts as a visible entropy alarm (finding 1).
ENTROPY_ALARM = 2.0


def _first_step(record: dict[str, Any], test: Any) -> int | None:
    for m in record.get("mi", []):
        if test(m):
            return int(m["step"])
    return None


def mi_drop_step(record: dict[str, Any]) -> int | None:
    """First MI measurement where retrieval accuracy has lost at least half of its starting margin over chance."""
    start, chance = first_value(record, "retrieval_acc"), first_value(record, "retrieval_chance") or 0.0
    if start is None or start - chance <= 0:
        return None
    return _first_step(record, lambda m: (_metric(m, "retrieval_acc") is not None
                                          and _metric(m, "retrieval_acc") - chance <= 0.5 * (start - chance)))


def entropy_alarm_step(record: dict[str, Any], factor: float = ENTROPY_ALARM) -> int | None:
    """First MI measurement where token entropy has moved by `factor` from its first value, up (>= factor x)
    or down (<= 1 / factor x): what an entropy dashboard would notice."""
    start = first_value(record, "token_entropy")
    if start is None:
        return None

    def moved(m: dict[str, Any]) -> bool:
        v = _metric(m, "token_entropy")
        return v is not None and (v >= factor * start or v <= start / factor)

    return _first_step(record, moved)


def finding_collapse(records: list[dict[str, Any]], env: str = "sokoban", collapse_arm: str = "entropy_bonus",
                     healthy_arm: str = "top_p") -> dict[str, Any]:
    """Finding 1: start and end (late quarter) of token entropy, H(Z|X), normalised MI and retrieval accuracy,
    and per seed which signal moved first.

    "Invisible to entropy" is tested on the order of events, not on the end state (a run whose tokens become
    uniform noise ends in the high-H / low-MI quadrant too, but entropy shows it long before): per seed, the MI
    drop is the first measurement where retrieval accuracy has lost half of its margin over chance, the entropy
    alarm the first where token entropy moved by ``ENTROPY_ALARM`` (x or /) from its first value. ``shown`` is
    True when in a majority of the collapse arm's seeds MI dropped before any entropy alarm (or with none at all),
    and the healthy arm kept at least half of its retrieval margin (mean over seeds).
    """
    out: dict[str, Any] = {"env": env, "arms": {}, "entropy_alarm_factor": ENTROPY_ALARM}
    for arm in (collapse_arm, healthy_arm):
        runs = [r for r in _runs(records, env, arm) if r.get("mi")]
        if not runs:
            continue
        arm_out: dict[str, Any] = {"seeds": [r["seed"] for r in runs]}
        for key in ("token_entropy", "cond_entropy_est", "marginal_entropy_est", "mi_norm", "retrieval_acc",
                    "retrieval_chance"):
            start = [first_value(r, key) for r in runs]
            end = [late_value(r, key) for r in runs]
            arm_out[key] = {"start": _mean([v for v in start if v is not None]),
                            "end": _mean([v for v in end if v is not None])}
        arm_out["final_success"] = _ci([v for v in (final_success(r) for r in runs) if v is not None])
        arm_out["trajectories"] = [
            {"seed": r["seed"], "points": [[m["step"], _metric(m, "cond_entropy_est"), _metric(m, "mi_norm")]
                                           for m in r["mi"]]} for r in runs]
        arm_out["regimes_end"] = [r["mi"][-1].get("regime") for r in runs]
        arm_out["order"] = []
        for r in runs:
            drop, alarm = mi_drop_step(r), entropy_alarm_step(r)
            arm_out["order"].append({
                "seed": r["seed"], "mi_drop_step": drop, "entropy_alarm_step": alarm,
                "entropy_at_mi_drop": next((_metric(m, "token_entropy") for m in r["mi"] if m["step"] == drop), None),
                "mi_first": drop is not None and (alarm is None or drop < alarm)})
        out["arms"][arm] = arm_out

    def margin_kept(arm: str) -> float | None:
        a = out["arms"].get(arm)
        if not a or a["retrieval_acc"]["start"] is None or a["retrieval_acc"]["end"] is None:
            return None
        chance = a["retrieval_chance"]["start"] or 0.0
        start = a["retrieval_acc"]["start"] - chance
        return None if start <= 0 else (a["retrieval_acc"]["end"] - chance) / start

    kept_c, kept_h = margin_kept(collapse_arm), margin_kept(healthy_arm)
    c = out["arms"].get(collapse_arm)
    order = c["order"] if c else []
    out["retrieval_margin_kept"] = {collapse_arm: kept_c, healthy_arm: kept_h}
    out["mi_fell"] = kept_c is not None and kept_c <= 0.5
    out["mi_first_seeds"] = sum(o["mi_first"] for o in order)
    out["shown"] = bool(order and 2 * out["mi_first_seeds"] > len(order) and kept_h is not None and kept_h >= 0.5)
    return out


def finding_correlations(records: list[dict[str, Any]], exclude_arm: str = "entropy_bonus") -> dict[str, Any]:
    """Finding 2: Spearman's rho of each metric's early value with final success, over every run, and over the
    runs of the other arms (``rho_without``: the collapse arm's forced entropy can drive the entropy rows alone)."""
    out: dict[str, Any] = {}
    for key in CORRELATED:
        entry: dict[str, Any] = {"paper": PAPER["spearman"][key], "excluded_arm": exclude_arm}
        for suffix, subset in (("", records), ("_without", [r for r in records if r["arm"] != exclude_arm])):
            pairs = [(early_value(r, key), final_success(r)) for r in subset]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            rho = spearman(xs, ys) if len(pairs) >= 3 else math.nan
            lo, hi = spearman_ci(rho, len(pairs))
            entry.update({f"n{suffix}": len(pairs), f"rho{suffix}": _nan_none(rho),
                          f"ci95{suffix}": [_nan_none(lo), _nan_none(hi)],
                          f"constant{suffix}": len(pairs) >= 3 and len(set(xs)) == 1})
            if not suffix:
                entry["by_env"] = {}
                for env in sorted({r["env"] for r in subset}):
                    ep = [(early_value(r, key), final_success(r)) for r in subset if r["env"] == env]
                    ep = [(x, y) for x, y in ep if x is not None and y is not None]
                    rho_e = spearman([x for x, _ in ep], [y for _, y in ep]) if len(ep) >= 3 else math.nan
                    entry["by_env"][env] = {"n": len(ep), "rho": _nan_none(rho_e)}
                entry["points"] = pairs
                entry["share_at_ceiling"] = (sum(x >= 0.95 for x in xs) / len(xs)
                                             if key == "retrieval_acc" and xs else None)
        out[key] = entry
    return out


def finding_filtering(records: list[dict[str, Any]], envs: Sequence[str] = ("sokoban", "frozenlake"),
                      arms: Sequence[str] = ("no_filter", "top_p", "random")) -> dict[str, Any]:
    """Finding 3: peak success per (env, arm) with its t-interval over seeds, paired differences by seed, and the
    RV heterogeneity pre-check (the step-1 batch, rolled out by the warm-started policy: shared by every arm of a
    seed) with its prediction."""
    out: dict[str, Any] = {}
    for env in envs:
        env_out: dict[str, Any] = {"arms": {}, "differences": {}}
        peaks: dict[str, dict[int, float]] = {}
        for arm in arms:
            runs = _runs(records, env, arm)
            peaks[arm] = {r["seed"]: p for r in runs if (p := peak_success(r)) is not None}
            env_out["arms"][arm] = {"peak": _ci(list(peaks[arm].values())), "seeds": sorted(peaks[arm]),
                                    "final": _ci([v for v in (final_success(r) for r in runs) if v is not None])}
        for a, b in (("top_p", "no_filter"), ("random", "no_filter"), ("top_p", "random")):
            common = sorted(set(peaks.get(a, {})) & set(peaks.get(b, {})))
            if common:
                m, lo, hi = paired_ci([peaks[b][s] for s in common], [peaks[a][s] for s in common])
                env_out["differences"][f"{a}-{b}"] = {"n": len(common), "mean": m,
                                                      "ci95": [_nan_none(lo), _nan_none(hi)]}
        by_seed = {}
        for r in _runs(records, env):
            if r.get("rv_heterogeneity_first") is not None:
                by_seed.setdefault(r["seed"], r["rv_heterogeneity_first"])
        h = _mean(list(by_seed.values()))
        env_out["rv_heterogeneity"] = {"by_seed": by_seed, "mean": h, "paper": PAPER["rv_heterogeneity"].get(env)}
        diff = env_out["differences"].get("top_p-no_filter")
        if h is not None and diff is not None:
            predicted = h > HETEROGENEITY_THRESHOLD
            outcome = verdict(diff)
            env_out["prediction"] = {"predicted_helps": predicted, "outcome": outcome,
                                     "held": predicted == (outcome == "helped"), "threshold": HETEROGENEITY_THRESHOLD}
        out[env] = env_out
    return out


def _paired_arm_difference(records: list[dict[str, Any]], env: str, arm_a: str, arm_b: str,
                           measure: Any) -> dict[str, Any] | None:
    """Mean of ``measure(a) - measure(b)`` over the seeds both arms ran (paired by seed), with its 95% t-interval;
    None when no seed has both."""
    a = {r["seed"]: measure(r) for r in _runs(records, env, arm_a)}
    b = {r["seed"]: measure(r) for r in _runs(records, env, arm_b)}
    common = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
    if not common:
        return None
    m, lo, hi = paired_ci([b[s] for s in common], [a[s] for s in common])
    return {"n": len(common), "mean": m, "ci95": [_nan_none(lo), _nan_none(hi)]}


def finding_quartiles(records: list[dict[str, Any]], env: str = "sokoban") -> dict[str, Any]:
    """Finding 4: peak and final success, late retrieval accuracy and late normalised MI of the two quartile arms."""
    out: dict[str, Any] = {}
    for arm in ("rv_top_quartile", "rv_bottom_quartile"):
        runs = _runs(records, env, arm)
        if not runs:
            continue
        out[arm] = {
            "seeds": [r["seed"] for r in runs],
            "steps": [r["steps"] for r in runs],
            "peak": _ci([v for v in (peak_success(r) for r in runs) if v is not None]),
            "final": _ci([v for v in (final_success(r) for r in runs) if v is not None]),
            "retrieval_acc_late": _ci([v for v in (late_value(r, "retrieval_acc") for r in runs) if v is not None]),
            "mi_norm_late": _ci([v for v in (late_value(r, "mi_norm") for r in runs) if v is not None]),
            "zero_variance_fraction": _mean([r["zero_variance_fraction"] for r in runs
                                             if r.get("zero_variance_fraction") is not None]),
            "paper": PAPER["quartiles"][arm],
        }
    if len(out) == 2:
        for name, measure in (("peak", peak_success), ("final", final_success)):
            diff = _paired_arm_difference(records, env, "rv_top_quartile", "rv_bottom_quartile", measure)
            if diff is not None:
                out[f"top_minus_bottom_{name}"] = {**diff, "verdict": verdict(diff, "top higher", "bottom higher")}
    return out


def verdict(diff: dict[str, Any], higher: str = "helped", lower: str = "hurt") -> str:
    """`higher` (95% interval above 0), `lower` (below 0), "no clear difference" (it contains 0), or, without an
    interval (one seed), "higher (1 seed)" / "not higher (1 seed)"."""
    lo, hi = diff["ci95"]
    if lo is None or hi is None:
        return "higher (1 seed)" if diff["mean"] > 0 else "not higher (1 seed)"
    if lo > 0:
        return higher
    if hi < 0:
        return lower
    return "no clear difference"


def mi_beats_entropy(corr: dict[str, Any], suffix: str = "") -> bool | None:
    """Finding 2's claim as a test: the best MI proxy predicts final success better than the best entropy, by
    the size of Spearman's rho (|rho|: a strong negative correlation predicts as well as a positive one)."""
    mi = [abs(corr[k][f"rho{suffix}"]) for k in ("mi_zscore_ema", "mi_seq_est") if corr[k][f"rho{suffix}"] is not None]
    ent = [abs(corr[k][f"rho{suffix}"]) for k in ("cond_entropy_est", "marginal_entropy_est")
           if corr[k][f"rho{suffix}"] is not None]
    return (max(mi) > max(ent)) if mi and ent else None


def analyse(records: list[dict[str, Any]]) -> dict[str, Any]:
    """All four findings, and a per-run table."""
    runs = [{"name": r["name"], "env": r["env"], "arm": r["arm"], "seed": r["seed"], "steps": r["steps"],
             "before": dict(r["val"]).get(0), "peak": peak_success(r), "final": final_success(r),
             "rv_heterogeneity_first": r.get("rv_heterogeneity_first"),
             "early": {k: early_value(r, k) for k in (*CORRELATED, "token_entropy", "mi_norm")},
             "late": {k: late_value(r, k) for k in (*CORRELATED, "token_entropy", "mi_norm")},
             "minutes": ((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0)) / 60.0} for r in records]
    return {
        "collapse": finding_collapse(records),
        "correlations": finding_correlations(records),
        "filtering": finding_filtering(records),
        "quartiles": finding_quartiles(records),
        "runs": runs,
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
