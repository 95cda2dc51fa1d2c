"""Pre-registered collapse experiments beyond the four findings: the mechanism, and the search for a collapse that
emerges and hurts (docs/collapse.md, section 7, written before any of their runs).

    ragen reproduce --experiment mechanism --first-seed 30 --seeds 8 --out runs/mechanism --report-dir docs/collapse
    ragen reproduce --experiment search --first-seed 130 --seeds 2 --out runs/search --report-dir docs/collapse

An experiment is a list of *variants* (a base config of ``configs/`` and overrides) run on every seed, with the
runner of :mod:`ragen_core.apps.reproduce.runner` (resumable, a shared warm-start cache); its analysis is computed
from the run records alone and written as ``EXPERIMENT.md`` and ``EXPERIMENT/results.json`` (``--from-results``
regenerates it).

- ``mechanism`` (fresh seeds): a template that pays / does not pay x all groups / the lowest-reward-variance
  quarter only (``filter.max_empty_steps = 0``: a run never stops), and in the low-variance regime a regulariser
  dose (entropy bonus 0, 0.001, 0.01; KL to the warm-started reference). Primary outcome per run: the probe's
  retrieval margin at the end minus at step 0 (``delta``). Each arm is classed **falls** (95% interval of the mean
  delta below 0), **rises** (above 0), **stable** (90% interval inside +-:data:`STABLE_BOUND`) or **unclear**; the
  two accounts' predictions (:data:`PREDICTIONS`) are then read off the classes and the paired dose comparison.
- ``search`` (tuning seeds): candidate configs without a demonstrator path built to pay, each on every seed,
  judged by :func:`ragen_core.math.collapse.detect_harmful_collapse` (the margin halves from its peak, success at
  the end no higher than at the peak, both entropies within +-25% of the peak's values to the end). A candidate
  *shows it* when every seed does.
- ``confirm`` (fresh seeds 40-44): each candidate that showed it in the search, judged the same way; it ships when
  4 of 5 seeds meet the conditions (``Experiment.needed_share``).
- ``filter`` (fresh seeds): finding 3 on the confirmed candidate: ``top_p`` minus ``no_filter`` (primary: the end
  margin) and minus ``random``, by the study's rules (:func:`ragen_core.apps.reproduce.analysis.finding_filtering`:
  held / contradicted / equivalent within the bounds / inconclusive); :func:`seed_plan` sizes the main run from a
  pilot's paired SD (docs/collapse.md section 7.4). Registered for a candidate that ships; the one candidate so far
  met the conditions on 3 of 5 fresh seeds, so it has not been run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragen_core.apps.reproduce.analysis import (
    OUTCOMES,
    equivalence_seeds,
    finding_filtering,
    fmt_unit,
    mde,
    power_analysis,
    seeds_needed,
)
from ragen_core.apps.reproduce.study import TUNING_SEEDS, RunSpec
from ragen_core.math.collapse import detect_harmful_collapse
from ragen_core.math.stats import mean_ci

__all__ = ["Variant", "Experiment", "EXPERIMENTS", "PREDICTIONS", "STABLE_BOUND", "FILTER_COMPARISONS",
           "FILTER_EFFECT", "FILTER_SEEDS", "build_experiment", "analyse", "markdown", "own_records", "seed_plan"]

#: A mean change of the margin within +-this (90% interval) is "stable": the equivalence bound of the study's
#: margin outcome (docs/reproduction.md), fixed before the runs.
STABLE_BOUND = 0.15


@dataclass(frozen=True)
class Variant:
    """One arm of an experiment: a base config of ``configs/``, overrides, and what it is for."""

    name: str
    config: str
    overrides: tuple[str, ...]
    purpose: str
    #: (experiment, variant) whose runs these are: the same config and overrides, so a seed's run is shared (its
    #: folder and record keep that experiment's name; :func:`own_records` renames them for this experiment)
    same_runs_as: tuple[str, str] | None = None


@dataclass(frozen=True)
class Experiment:
    name: str
    variants: tuple[Variant, ...]
    #: "fresh" (never a tuning seed) or "tuning" (only tuning seeds 100-199)
    seeds_kind: str
    #: overrides of every run
    common: tuple[str, ...] = ()
    #: a candidate "shows it" when at least this share of its seeds meets the three conditions (the search: every
    #: seed; the confirmation on fresh seeds: 4 of 5, docs/collapse.md section 7.2)
    needed_share: float = 1.0


_NOPAY = ('warm_start.template_answer="demonstrator"',)
_PAYS = ('warm_start.template_answer="oracle"',)
_ALL = ("filter.enabled=false",)
_BOTTOM = ("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.25", 'filter.order="smallest"')
_PER_STEP = ("mi.every=1", "filter.max_empty_steps=0", "eval.every=10")
#: The search's candidate (frozenlake_nopay_slippery_long) on top of collapse_frozenlake, filter off.
_SLIPPERY_LONG = ("env.kwargs.is_slippery=true", "run.steps=100")
_EMERGENT = (*_NOPAY, *_ALL, *_SLIPPERY_LONG)
_TOP_P = ("filter.enabled=true", 'filter.strategy="top_p"', "filter.value=0.9")
_RANDOM = ("filter.enabled=true", 'filter.strategy="random"', "filter.value=0.9")

EXPERIMENTS: dict[str, Experiment] = {
    "mechanism": Experiment("mechanism", (
        Variant("pays_all", "collapse_sokoban.toml", (*_PAYS, *_ALL),
                "the template pays; every group trained on (the shipped testbed)"),
        Variant("nopay_all", "collapse_sokoban.toml", (*_NOPAY, *_ALL),
                "the template is followed by the habit answer, like state reasoning; every group trained on"),
        Variant("pays_bottom", "collapse_sokoban.toml", (*_PAYS, *_BOTTOM),
                "the template pays; only the lowest-reward-variance quarter of the groups trained on"),
        Variant("nopay_bottom", "collapse_sokoban.toml", (*_NOPAY, *_BOTTOM),
                "no payoff; the lowest-variance quarter; entropy bonus 0.001 (the paper's)"),
        Variant("nopay_bottom_ent0", "collapse_sokoban.toml", (*_NOPAY, *_BOTTOM, "algo.entropy_coef=0.0"),
                "no payoff; the lowest-variance quarter; no entropy bonus"),
        Variant("nopay_bottom_ent01", "collapse_sokoban.toml", (*_NOPAY, *_BOTTOM, "algo.entropy_coef=0.01"),
                "no payoff; the lowest-variance quarter; entropy bonus 0.01 (10x the paper's)"),
        Variant("nopay_bottom_kl", "collapse_sokoban.toml", (*_NOPAY, *_BOTTOM, "algo.kl_coef=0.05"),
                "no payoff; the lowest-variance quarter; entropy bonus 0.001 and KL 0.05 to the warm start"),
    ), seeds_kind="fresh", common=_PER_STEP),
    "search": Experiment("search", (
        Variant("sokoban_nopay", "collapse_sokoban.toml", (*_NOPAY, *_ALL),
                "the Sokoban testbed without the template's payoff"),
        Variant("sokoban_nopay_kl", "collapse_sokoban.toml", (*_NOPAY, *_ALL, "algo.kl_coef=0.01"),
                "as above with KL 0.01 to the warm start (the paper's regularisers: entropy bonus 0.001 and KL)"),
        Variant("sokoban_nopay_hard", "collapse_sokoban.toml",
                (*_NOPAY, *_ALL, "env.kwargs.max_solution_len=4", "env.kwargs.min_solution_len=3",
                 "rollout.max_turns=4"),
                "harder levels (3-4 moves, 4 turns): most groups without reward variance"),
        Variant("sokoban_nopay_long", "collapse_sokoban.toml", (*_NOPAY, *_ALL, "run.steps=100"),
                "no payoff, 100 steps"),
        Variant("sokoban_dep1_long", "collapse_sokoban.toml",
                (*_NOPAY, *_ALL, "warm_start.reasoning_dependence=1.0", "run.steps=100"),
                "no template in the warm start at all (the margin starts at the ceiling), 100 steps"),
        Variant("frozenlake_nopay", "collapse_frozenlake.toml", (*_NOPAY, *_ALL),
                "the FrozenLake testbed without the template's payoff"),
        Variant("frozenlake_nopay_slippery", "collapse_frozenlake.toml",
                (*_NOPAY, *_ALL, "env.kwargs.is_slippery=true"),
                "stochastic rewards: the lake is slippery, so within-group reward variance is partly luck"),
        Variant("frozenlake_nopay_slippery_long", "collapse_frozenlake.toml",
                (*_NOPAY, *_ALL, "env.kwargs.is_slippery=true", "run.steps=100"),
                "slippery, 100 steps"),
    ), seeds_kind="tuning", common=("eval.every=10", "filter.max_empty_steps=0")),
    # The candidates that showed it on both tuning seeds, each on fresh seeds (40-44): a candidate ships if 4 of 5
    # meet the conditions (docs/collapse.md section 7.2, registered before the search ran).
    "confirm": Experiment("confirm", (
        Variant("frozenlake_nopay_slippery_long", "collapse_frozenlake.toml", _EMERGENT,
                "the search's candidate that showed it on both tuning seeds: slippery, no payoff, 100 steps"),
    ), seeds_kind="fresh", common=("eval.every=10", "filter.max_empty_steps=0"), needed_share=0.8),
    # Finding 3 on the collapse that emerged (docs/collapse.md section 7.4, registered before the confirmation's
    # results): the confirmed candidate with the study's three arms. `no_filter` is the confirmation's run exactly
    # (the same base config, overrides and common overrides), so a seed's no-filter run of the two is one run.
    "filter": Experiment("filter", (
        Variant("no_filter", "collapse_frozenlake.toml", _EMERGENT,
                "every group trained on (the confirmation's runs: where the collapse emerged)",
                same_runs_as=("confirm", "frozenlake_nopay_slippery_long")),
        Variant("top_p", "collapse_frozenlake.toml", (*_NOPAY, *_TOP_P, *_SLIPPERY_LONG),
                "the method: top-p on reward variance, rho = 0.9"),
        Variant("random", "collapse_frozenlake.toml", (*_NOPAY, *_RANDOM, *_SLIPPERY_LONG),
                "the control: as many groups as top-p keeps, drawn uniformly at random"),
    ), seeds_kind="fresh", common=("eval.every=10", "filter.max_empty_steps=0")),
}

#: Finding 3 on the emergent collapse (docs/collapse.md section 7.4): the comparisons, first the primary one.
FILTER_COMPARISONS = (("top_p", "no_filter"), ("top_p", "random"))
#: The smallest effect of interest on the primary outcome (the end margin), equal to the study's equivalence bound
#: for it: the seed count must detect +-this with 80% power and conclude equivalence within it with 80% power.
FILTER_EFFECT = 0.15
#: The fewest and the most seeds the power analysis may ask for (the most: the 12-20 a powered study affords).
FILTER_SEEDS = (8, 20)


def seed_plan(sd: float | None, effect: float = FILTER_EFFECT, limits: tuple[int, int] = FILTER_SEEDS
              ) -> dict[str, Any]:
    """Seeds of the main comparison from a pilot's paired SD `sd` of the primary outcome (section 7.4).

    ``n = min(max(n_detect, n_equiv, lo), hi)`` with ``n_detect`` the pairs a two-sided paired t-test at alpha 0.05
    needs to detect `effect` with power 0.8 and ``n_equiv`` the pairs TOST within +-`effect` needs to conclude
    equivalence with power 0.8 when the true difference is 0 (both exact, from the noncentral t). Without a usable
    SD (none, 0 or not finite) the plan is the most seeds. ``mde`` is the effect the plan detects at 80% power.
    """
    lo, hi = limits
    if sd is None or not math.isfinite(sd) or sd <= 0:
        return {"sd": sd, "n_detect": None, "n_equiv": None, "n": hi, "capped": True, "mde": None,
                "why": "no usable paired SD from the pilot: the most seeds"}
    n_detect, n_equiv = seeds_needed(effect, sd), equivalence_seeds(sd, effect)
    need = max(hi + 1 if n_detect is None else n_detect, hi + 1 if n_equiv is None else n_equiv)
    n = min(max(need, lo), hi)
    return {"sd": sd, "n_detect": n_detect, "n_equiv": n_equiv, "n": n, "capped": need > hi, "mde": mde(sd, n),
            "why": f"max(detect {effect}: {n_detect}, equivalence within +-{effect}: {n_equiv}, at least {lo})"
                   + (f", capped at {hi}" if need > hi else "")}


#: What each account predicts for the mechanism experiment, per arm ("falls", "stable", "rises" or a set of them)
#: and for the dose comparison; written before the runs (docs/collapse.md, section 7.1).
PREDICTIONS: dict[str, dict[str, Any]] = {
    "task gradient": {
        "arms": {"pays_all": {"falls"}, "nopay_all": {"stable", "rises"}, "pays_bottom": {"stable"},
                 "nopay_bottom": {"stable"}, "nopay_bottom_ent0": {"stable"}, "nopay_bottom_kl": {"stable"}},
        "dose": {"not lower"},
        "why": "input dependence moves with the reward signal: the template wins where it pays and groups carry "
               "reward variance; the lowest-variance groups carry almost none (zero GRPO advantage), so training "
               "on them alone leaves the margin where it was, whatever the regularisers",
    },
    "regulariser": {
        "arms": {"pays_bottom": {"falls"}, "nopay_bottom": {"falls"}, "nopay_bottom_ent01": {"falls"},
                 "nopay_bottom_kl": {"falls"}},
        "dose": {"lower"},
        "why": "at low reward variance the task gradient vanishes and input-agnostic regularisers (entropy bonus, "
               "KL) dominate and erase input dependence: the lowest-variance quarter collapses without any payoff, "
               "more with a larger entropy bonus",
    },
}
#: The dose comparison: margin change of the larger entropy bonus minus that of none, paired by seed.
DOSE = ("nopay_bottom_ent01", "nopay_bottom_ent0")


def build_experiment(name: str, seeds: list[int], configs_dir: Path, cache_dir: Path) -> list[RunSpec]:
    """The runs of experiment `name` on `seeds` (ordered seed-major within each variant, variants interleaved so
    that two workers start on different warm starts).

    Raises:
        ValueError: an unknown experiment, no or repeated seeds, or seeds of the wrong kind (fresh experiments
            never use the tuning seeds 100-199; the search uses only them).
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; expected one of {', '.join(EXPERIMENTS)}")
    exp = EXPERIMENTS[name]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one; got {seeds}")
    tuning = [s for s in seeds if s in TUNING_SEEDS]
    if exp.seeds_kind == "fresh" and tuning:
        raise ValueError(f"experiment {name} reports its seeds: it must not use the tuning seeds {tuning}")
    if exp.seeds_kind == "tuning" and len(tuning) != len(seeds):
        raise ValueError(f"experiment {name} is a search: only tuning seeds ({TUNING_SEEDS.start}-"
                         f"{TUNING_SEEDS.stop - 1}); got {seeds}")
    specs = []
    for variant in exp.variants:
        for seed in seeds:
            common = (f"run.seed={seed}", "run.progress=false", "run.max_minutes=0",
                      f'warm_start.cache_dir="{cache_dir}"', *exp.common)
            env, arm = variant.same_runs_as or (name, variant.name)
            specs.append(RunSpec(env, arm, seed, str(configs_dir / variant.config), (*common, *variant.overrides)))
    return specs


def own_records(name: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records` with the runs a variant shares with another experiment (``Variant.same_runs_as``) renamed to this
    experiment and that variant; the others unchanged."""
    alias = {v.same_runs_as: v.name for v in EXPERIMENTS[name].variants if v.same_runs_as}
    return [{**r, "env": name, "arm": alias[(r.get("env"), r.get("arm"))]}
            if (r.get("env"), r.get("arm")) in alias else r for r in records]


# ---------------------------------------------------------------------------------------------- analysis
def _probe(r: dict[str, Any], key: str) -> list[tuple[int, float]]:
    return [(int(p["step"]), float(p[key])) for p in r.get("probe") or [] if p.get(key) is not None]


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def _sd(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def probe_noise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The probe's measurement noise at a fixed policy, from the runs that never trained (every step skipped: the
    policy is the warm start's at every measurement, so the margin moves only by the probe's own sampling).

    Descriptive, not part of any pre-registered rule: the pooled SD of the margin across a run's measurements, and
    those runs' step-0-to-end changes, which are pure measurement noise."""
    frozen = [r for r in runs if r.get("trained_steps") == 0 and r.get("margin_sd") is not None]
    if not frozen:
        return {"n": 0}
    return {"n": len(frozen), "runs": [f"{r['arm']}-s{r['seed']}" for r in frozen],
            "pooled_sd": math.sqrt(sum(r["margin_sd"] ** 2 for r in frozen) / len(frozen)),
            "deltas": [r["delta"] for r in frozen if r.get("delta") is not None]}


def run_summary(r: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one run the experiments report: margin, entropies, success, template share at the start and
    the end, the filter log's means and the per-step return-vs-PMI covariances, and the harmful-collapse verdict."""
    margin = _probe(r, "retrieval_margin")
    ent = _probe(r, "token_entropy")
    cond = _probe(r, "cond_entropy_est")
    out: dict[str, Any] = {"seed": r["seed"], "arm": r["arm"], "steps": r.get("steps"),
                           "planned_steps": r.get("planned_steps")}
    if margin:
        out.update(margin_start=margin[0][1], margin_end=margin[-1][1], margin_min=min(v for _, v in margin),
                   delta=margin[-1][1] - margin[0][1])
    for key, series in (("token_entropy", ent), ("cond_entropy", cond)):
        if series and series[0][1] > 0:
            out[f"{key}_ratio_end"] = series[-1][1] / series[0][1]
    val = r.get("val") or []
    if val:
        out.update(success_start=val[0][1], success_end=val[-1][1])
    tmpl = _probe(r, "template_share")
    if tmpl:
        out.update(template_share_start=tmpl[0][1], template_share_end=tmpl[-1][1])
    mi = r.get("mi") or []
    for side in ("kept", "dropped"):
        out[f"pmi_cov_{side}"] = _mean([m.get(f"pmi_return_cov_{side}") for m in mi])
    log = r.get("filter_log") or []
    # a step trains when the filter kept a group and did not skip it; a run with none never changed its policy
    counted = [e for e in log if e.get("kept_groups") is not None]
    out["trained_steps"] = sum(1 for e in counted if not e.get("skipped") and e["kept_groups"] > 0) \
        if counted else None
    if len(margin) >= 2:
        out["margin_sd"] = _sd([v for _, v in margin])
    out["kept_zero_adv_share"] = _mean([e.get("kept_zero_adv_share") for e in log])
    out["zero_fraction"] = _mean([e.get("zero_fraction") for e in log])
    if len(margin) >= 2 and len(ent) == len(margin) == len(cond) and val:
        try:
            v = detect_harmful_collapse([s for s, _ in margin], [x for _, x in margin], [x for _, x in ent],
                                        [x for _, x in cond], [s for s, _ in val], [x for _, x in val])
            out["harmful"] = v.as_dict()
        except ValueError as e:
            out["harmful"] = {"harmful": False, "reason": f"curves refused: {e}"}
    return out


def classify(deltas: list[float], bound: float = STABLE_BOUND) -> dict[str, Any]:
    """The class of an arm's margin changes: falls / rises (95% t-interval of the mean beside 0), stable (90%
    interval inside +-`bound`), else unclear; with the mean and both intervals."""
    if len(deltas) < 2:
        return {"n": len(deltas), "class": "unclear (fewer than 2 seeds)", "mean": _mean(deltas)}
    m, lo95, hi95 = mean_ci(deltas, 0.95)
    _, lo90, hi90 = mean_ci(deltas, 0.90)
    if hi95 < 0:
        cls = "falls"
    elif lo95 > 0:
        cls = "rises"
    elif -bound < lo90 and hi90 < bound:
        cls = "stable"
    else:
        cls = "unclear"
    return {"n": len(deltas), "mean": m, "ci95": [lo95, hi95], "ci90": [lo90, hi90], "class": cls}


def _paired(a: dict[int, float], b: dict[int, float]) -> dict[str, Any]:
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    out = classify(diffs)
    out["seeds"] = seeds
    out["direction"] = {"falls": "lower", "rises": "higher", "stable": "equal (within the bound)"}.get(
        out["class"], "unclear")
    return out


def _account_verdict(account: str, arms: dict[str, Any], dose: dict[str, Any]) -> dict[str, Any]:
    pred = PREDICTIONS[account]
    checks = []
    for arm, allowed in pred["arms"].items():
        got = arms.get(arm, {}).get("class", "not run")
        ok = None if got.startswith("unclear") or got == "not run" else got in allowed
        checks.append({"what": f"{arm}: {' or '.join(sorted(allowed))}", "got": got, "holds": ok})
    want = next(iter(pred["dose"]))
    got = dose.get("direction", "unclear")
    ok = None if got == "unclear" else ((got == "lower") == (want == "lower"))
    checks.append({"what": f"dose ({DOSE[0]} minus {DOSE[1]}): {want}", "got": got, "holds": ok})
    if any(c["holds"] is False for c in checks):
        verdict = "contradicted"
    elif all(c["holds"] for c in checks):
        verdict = "supported"
    else:
        verdict = "not decided"
    return {"account": account, "why": pred["why"], "checks": checks, "verdict": verdict}


def analyse(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The analysis of experiment `name` from its run records (module docstring)."""
    records = own_records(name, records)
    runs = [run_summary(r) for r in records]
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_arm.setdefault(r["arm"], []).append(r)
    order = [v.name for v in EXPERIMENTS[name].variants]
    out: dict[str, Any] = {"experiment": name, "runs": sorted(runs, key=lambda r: (order.index(r["arm"])
                                                                                   if r["arm"] in order else 99,
                                                                                   r["seed"]))}
    if name == "mechanism":
        arms = {a: classify([r["delta"] for r in rs if r.get("delta") is not None]) for a, rs in by_arm.items()}
        for a, rs in by_arm.items():
            arms[a]["pmi_cov_kept"] = _mean([r.get("pmi_cov_kept") for r in rs])
            arms[a]["pmi_cov_dropped"] = _mean([r.get("pmi_cov_dropped") for r in rs])
            arms[a]["kept_zero_adv_share"] = _mean([r.get("kept_zero_adv_share") for r in rs])
            arms[a]["entropy_ratio_end"] = _mean([r.get("token_entropy_ratio_end") for r in rs])
            arms[a]["success_start"] = _mean([r.get("success_start") for r in rs])
            arms[a]["success_end"] = _mean([r.get("success_end") for r in rs])
        delta = {a: {r["seed"]: r["delta"] for r in rs if r.get("delta") is not None} for a, rs in by_arm.items()}
        dose = _paired(delta.get(DOSE[0], {}), delta.get(DOSE[1], {}))
        payoff = _paired(delta.get("pays_all", {}), delta.get("nopay_all", {}))
        out.update(arms=arms, dose=dose, payoff=payoff,
                   accounts=[_account_verdict(a, arms, dose) for a in PREDICTIONS], probe_noise=probe_noise(runs))
    elif name == "filter":
        filt = finding_filtering(records, envs=(name,), comparisons=FILTER_COMPARISONS)
        arms = filt[name]["arms"]
        for a, rs in by_arm.items():
            if a in arms:
                arms[a]["harmful"] = sum(bool(r.get("harmful", {}).get("harmful")) for r in rs)
                arms[a]["trained_steps"] = _mean([r.get("trained_steps") for r in rs])
                arms[a]["kept_zero_adv_share"] = _mean([r.get("kept_zero_adv_share") for r in rs])
                arms[a]["entropy_ratio_end"] = _mean([r.get("token_entropy_ratio_end") for r in rs])
        primary = filt[name]["comparisons"].get("top_p-no_filter", {}).get("margin_end", {})
        out.update(filtering=filt[name], power=power_analysis(filt), seed_plan=seed_plan(primary.get("sd")))
    else:
        cands = {}
        for a, rs in by_arm.items():
            flags = [bool(r.get("harmful", {}).get("harmful")) for r in rs]
            needed = math.ceil(EXPERIMENTS[name].needed_share * len(flags) - 1e-9)
            cands[a] = {"seeds": [r["seed"] for r in rs], "harmful": flags, "needed": needed,
                        "shows_it": bool(flags) and sum(flags) >= needed}
        out["candidates"] = cands
    return out


# ---------------------------------------------------------------------------------------------- report
def _f(x: Any, fmt: str = "{:.3f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def _ci(c: dict[str, Any], key: str) -> str:
    v = c.get(key)
    return f"[{_f(v[0], '{:+.3f}')}, {_f(v[1], '{:+.3f}')}]" if v else "n/a"


def markdown(result: dict[str, Any], header: dict[str, Any]) -> str:
    name = result["experiment"]
    exp = EXPERIMENTS[name]
    lines = [f"# Collapse experiment: {name}", "",
             f"_Generated by `{header.get('command', 'ragen reproduce --experiment ' + name)}` from the runs' "
             "metrics; the design, outcomes and predictions were fixed before the runs (docs/collapse.md, section "
             "7)._", "",
             f"- seeds: {header.get('seeds')} ({'tuning seeds' if exp.seeds_kind == 'tuning' else 'fresh seeds'}), "
             f"{header.get('n_runs')} runs ({header.get('n_missing', 0)} missing), "
             f"{_f(header.get('core_minutes'), '{:.0f}')} core-minutes",
             f"- machine: {header.get('machine', 'n/a')}",
             f"- every run: `{' '.join(exp.common)}`", "", "| arm | config | overrides | purpose |",
             "|---|---|---|---|"]
    for v in exp.variants:
        lines.append(f"| `{v.name}` | `configs/{v.config}` | `{' '.join(v.overrides)}` | {v.purpose} |")
    lines.append("")
    if name == "mechanism":
        lines += _mechanism_md(result)
    elif name == "filter":
        lines += _filter_md(result)
    else:
        lines += _search_md(result)
    lines += ["", "## Every run", "", "| arm | seed | steps (trained) | margin start -> min -> end | token entropy "
              "end/start | success start -> end | template share start -> end | verdict (emerges and hurts) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        h = r.get("harmful") or {}
        lines.append(
            f"| `{r['arm']}` | {r['seed']} | {r.get('steps')} ({_f(r.get('trained_steps'), '{:d}')}) | "
            f"{_f(r.get('margin_start'))} -> "
            f"{_f(r.get('margin_min'))} -> {_f(r.get('margin_end'))} | "
            f"{_f(r.get('token_entropy_ratio_end'), '{:.2f}')} | "
            f"{_f(r.get('success_start'), '{:.3f}')} -> {_f(r.get('success_end'), '{:.3f}')} | "
            f"{_f(r.get('template_share_start'), '{:.2f}')} -> {_f(r.get('template_share_end'), '{:.2f}')} | "
            f"{'yes' if h.get('harmful') else 'no'}: {h.get('reason', 'n/a')} |")
    return "\n".join(lines) + "\n"


def _mechanism_md(res: dict[str, Any]) -> list[str]:
    lines = ["## Arms: change of the probe's retrieval margin, step 0 to the end", "",
             f"Class: falls / rises when the 95% interval of the mean change is below / above 0, stable when the 90% "
             f"interval lies inside +-{STABLE_BOUND}, else unclear.", "",
             "| arm | seeds | mean change | 95% CI | 90% CI | class | token entropy end/start | success start -> "
             "end | kept groups with zero advantage | return-PMI cov, kept / dropped |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm, c in res["arms"].items():
        lines.append(f"| `{arm}` | {c['n']} | {_f(c.get('mean'), '{:+.3f}')} | {_ci(c, 'ci95')} | {_ci(c, 'ci90')} | "
                     f"**{c['class']}** | {_f(c.get('entropy_ratio_end'), '{:.2f}')} | "
                     f"{_f(c.get('success_start'))} -> {_f(c.get('success_end'))} | "
                     f"{_f(c.get('kept_zero_adv_share'), '{:.2f}')} | {_f(c.get('pmi_cov_kept'), '{:+.4f}')} / "
                     f"{_f(c.get('pmi_cov_dropped'), '{:+.4f}')} |")
    for label, key in (("payoff (pays_all minus nopay_all)", "payoff"), (f"dose ({DOSE[0]} minus {DOSE[1]})",
                                                                          "dose")):
        c = res[key]
        lines.append("")
        lines.append(f"Paired, {label}: mean {_f(c.get('mean'), '{:+.3f}')}, 95% CI {_ci(c, 'ci95')}, 90% CI "
                     f"{_ci(c, 'ci90')} over seeds {c.get('seeds')}: **{c['direction']}**.")
    noise = res.get("probe_noise") or {"n": 0}
    if noise["n"]:
        d = noise["deltas"]
        lines += ["", "## The probe's noise at a fixed policy (descriptive, not a pre-registered rule)", "",
                  f"{noise['n']} runs never trained (the filter kept no group at any step, so their policy is the "
                  f"warm start's at every measurement): {', '.join(noise['runs'])}. Their margin moves only by the "
                  f"probe's own sampling: SD across a run's measurements {_f(noise['pooled_sd'])} (pooled); their "
                  f"step-0-to-end changes {', '.join(_f(x, '{:+.3f}') for x in d)}"
                  + (f" (mean {_f(sum(d) / len(d), '{:+.3f}')})" if d else "") + ". A change of an arm's margin "
                  "of this size is within the measurement's noise."]
    lines += ["", "## The two accounts", ""]
    for acc in res["accounts"]:
        lines += [f"### {acc['account']} account: **{acc['verdict']}**", "", acc["why"] + ".", "",
                  "| prediction | observed | holds |", "|---|---|---|"]
        for c in acc["checks"]:
            holds = {True: "yes", False: "no", None: "undecided"}[c["holds"]]
            lines.append(f"| {c['what']} | {c['got']} | {holds} |")
        lines.append("")
    return lines


def _filter_md(res: dict[str, Any]) -> list[str]:
    f = res["filtering"]
    lines = ["## Arms", "", "Outcomes at each run's end (mean [95% CI] over seeds); \"emerges and hurts\": the runs "
             "meeting the three conditions of section 7.2.", "",
             "| arm | seeds | end margin | steps to the drop (censored) | end success | emerges and hurts | steps "
             "that trained | kept groups with zero advantage | token entropy end/start |",
             "|---|---|---|---|---|---|---|---|---|"]

    def cell(c: dict[str, Any], fmt: str = "{:.3f}") -> str:
        return f"{_f(c.get('mean'), fmt)} {_ci(c, 'ci95')}" if c.get("n") else "n/a"

    for arm, a in f["arms"].items():
        lines.append(f"| `{arm}` | {len(a['seeds'])} | {cell(a['margin_end'])} | "
                     f"{cell(a['steps_to_drop'], '{:.1f}')} ({a.get('censored', 0)}) | {cell(a['success_end'])} | "
                     f"{a.get('harmful', 'n/a')} | "
                     f"{_f(a.get('trained_steps'), '{:.1f}')} | {_f(a.get('kept_zero_adv_share'), '{:.2f}')} | "
                     f"{_f(a.get('entropy_ratio_end'), '{:.2f}')} |")
    lines += ["", "## Comparisons, paired by seed", "",
              "Verdict: held (95% CI above 0: the paper's direction), contradicted (below 0), equivalent (the 90% "
              "CI inside the bound), else inconclusive with the effect detectable at 80% power. Primary: `top_p` "
              "minus `no_filter` on the end margin.", "",
              "| comparison | outcome | n | mean | 95% CI | 90% CI | paired SD | bound | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    for comp, outs in f["comparisons"].items():
        for k, c in outs.items():
            fmt = fmt_unit(OUTCOMES[k][1])
            lines.append(f"| {comp} | {OUTCOMES[k][0]} | {c['n']} | {_f(c.get('mean'), '{:+.3f}')} | "
                         f"{_ci(c, 'ci95')} | {_ci(c, 'ci90')} | {_f(c.get('sd'))} | "
                         f"{fmt(c['bound']) if c.get('bound') is not None else 'n/a'} | **{c['verdict']}** |")
    p = res["seed_plan"]
    lines += ["", "## Seeds for the main comparison (the power analysis of section 7.4)", "",
              f"From these runs' paired SD of the primary outcome ({_f(p.get('sd'))}): {p['why']} -> **{p['n']} "
              f"seeds**, which detect {_f(p.get('mde'))} of end margin at 80% power."]
    return lines


def _search_md(res: dict[str, Any]) -> list[str]:
    rule = ("every seed meets" if res["experiment"] == "search" else
            f"at least {EXPERIMENTS[res['experiment']].needed_share:.0%} of its seeds (4 of 5) meet")
    lines = ["## Candidates", "", f"A candidate shows a collapse that emerges and hurts when {rule} all three "
             "conditions (`ragen_core.math.collapse.detect_harmful_collapse`): the probe margin halves from its peak "
             "and stays there, success at the end is no higher than at the peak, token entropy and H(Z|X) stay "
             "within +-25% of the peak's values to the end of the run.", "",
             "| candidate | seeds | per seed | shows it |", "|---|---|---|---|"]
    for a, c in res["candidates"].items():
        per = ", ".join(f"{s}: {'yes' if h else 'no'}" for s, h in zip(c["seeds"], c["harmful"]))
        lines.append(f"| `{a}` | {len(c['seeds'])} | {per} | **{'yes' if c['shows_it'] else 'no'}** |")
    return lines


def figure(result: dict[str, Any], records: list[dict[str, Any]]) -> Any:
    """Margin and token-entropy curves (relative to step 0) per arm, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = own_records(result["experiment"], records)
    arms = list(dict.fromkeys(r["arm"] for r in records))
    fig, axes = plt.subplots(2, len(arms), figsize=(2.6 * len(arms), 5.2), sharex=True, squeeze=False)
    for j, arm in enumerate(arms):
        for r in records:
            if r["arm"] != arm:
                continue
            m = _probe(r, "retrieval_margin")
            e = _probe(r, "token_entropy")
            if m:
                axes[0][j].plot([s for s, _ in m], [v for _, v in m], lw=1, alpha=0.8)
            if e and e[0][1] > 0:
                axes[1][j].plot([s for s, _ in e], [v / e[0][1] for _, v in e], lw=1, alpha=0.8)
        axes[0][j].set_title(arm, fontsize=8)
        axes[0][j].set_ylim(-0.1, 1.05)
        axes[1][j].axhspan(0.75, 1.25, color="0.9")
        axes[1][j].set_xlabel("RL step")
    axes[0][0].set_ylabel("probe retrieval margin")
    axes[1][0].set_ylabel("token entropy / step 0")
    fig.tight_layout()
    return fig
