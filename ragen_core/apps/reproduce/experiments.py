"""Pre-registered collapse experiments beyond the four findings: the mechanism, and the search for a collapse that
emerges and hurts (docs/collapse.md, section 7, written before any of their runs).

    ragen reproduce --experiment mechanism --first-seed 30 --seeds 8 --out runs/mechanism --report-dir docs/collapse
    ragen reproduce --experiment search --first-seed 130 --seeds 2 --out runs/search --report-dir docs/collapse

Every experiment `ragen reproduce` runs, the main study included, is one
:class:`ragen_core.apps.reproduce.spec.Experiment` in :data:`EXPERIMENTS` (the registry): its *variants* (a base
config of ``configs/`` and overrides) run on every seed by the runner of :mod:`ragen_core.apps.reproduce.runner`
(local or Ray, resumable, a shared warm-start cache), its seed kind, outcomes and rule object, and its analysis and
report, computed from the run records alone and written as ``EXPERIMENT.md`` and ``EXPERIMENT/results.json`` (the
study: ``reproduction.md``; ``--from-results`` regenerates either). Adding an experiment is one entry here (and its
test); nothing dispatches on its name.

- ``mechanism`` (fresh seeds): a template that pays / does not pay x all groups / the lowest-reward-variance
  quarter only (``filter.max_empty_steps = 0``: a run never stops), and in the low-variance regime a regulariser
  dose (entropy bonus 0, 0.001, 0.01; KL to the warm-started reference). Primary outcome per run: the probe's
  retrieval margin at the end minus at step 0 (``delta``). Each arm is classed **falls** (95% interval of the mean
  delta below 0), **rises** (above 0), **stable** (90% interval inside +-:data:`STABLE_BOUND`) or **unclear**
  (:data:`CHANGE_RULE`: the verdict of :func:`ragen_core.apps.reproduce.verdicts.compare` under its own labels); the
  two accounts' predictions (:data:`PREDICTIONS`) are then read off the classes and the paired dose comparison.
- ``search`` (tuning seeds): candidate configs without a demonstrator path built to pay, each on every seed,
  judged by :func:`ragen_core.math.collapse.detect_harmful_collapse` (the margin halves from its peak, success at
  the end no higher than at the peak, both entropies within +-25% of the peak's values to the end). A candidate
  *shows it* when every seed does.
- ``confirm`` (fresh seeds 40-44): each candidate that showed it in the search, judged the same way; it ships when
  4 of 5 seeds meet the conditions (its rule, a :class:`ragen_core.apps.reproduce.verdicts.ShareRule`).
- ``filter`` (fresh seeds): finding 3 on the confirmed candidate: ``top_p`` minus ``no_filter`` (primary: the end
  margin) and minus ``random``, by the study's rules (:func:`ragen_core.apps.reproduce.analysis.finding_filtering`:
  held / contradicted / equivalent within the bounds / inconclusive); :func:`seed_plan`
  (:func:`ragen_core.math.stats.seed_plan`) sizes the main run from a pilot's paired SD (docs/collapse.md section
  7.4). Registered for a candidate that ships; the one candidate so far met the conditions on 3 of 5 fresh seeds, so
  it has not been run.
- ``regularisers`` (fresh seeds 60..; docs/collapse.md section 8): on the mechanism testbed (FrozenLake and Sokoban,
  one run group each), 7 arms (the lowest or the highest reward-variance quarter x entropy bonus 0 / 0.001 / 0.01,
  and KL), SGD at a learning rate per env (:data:`REGULARISERS_LR`, refused while None). Primary: the probe
  margin's slope over steps 0-40 and its value at step 40, ``low_ent001`` minus ``low_ent0`` paired by seed, the
  paper's direction "lower" (:data:`REGULARISERS_RULE`). Its pilot on tuning seeds: ``regularisers_lr_pilot``
  (step 1, the learning rate: :data:`LR_RULE`) and ``regularisers_pilot`` (step 2, all arms at :data:`PILOT_LR`;
  the seed plan, :func:`regularisers_seed_plan`).
"""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from ragen_core.apps.reproduce.analysis import (
    OUTCOMES,
    PAIRED,
    RecordsError,
    check_one_run_each,
    finding_filtering,
    fmt_unit,
    power_analysis,
)
from ragen_core.apps.reproduce.analysis import analyse as analyse_study
from ragen_core.apps.reproduce.report import cost_text, results_json, write_report
from ragen_core.apps.reproduce.spec import Experiment, RunSpec, Seeds, Variant, build_runs
from ragen_core.apps.reproduce.study import STUDY
from ragen_core.apps.reproduce.verdicts import (
    CHANGE_LABELS,
    DIRECTION_LABELS,
    ChangeRule,
    PairedRule,
    ShareRule,
    Verdict,
    compare,
    mean_of,
    paired,
    pct,
    unpaired,
    unpaired_text,
    verdict_text,
)
from ragen_core.math.collapse import detect_harmful_collapse
from ragen_core.math.collapse import finite_number as _ok
from ragen_core.math.stats import seed_plan as plan_seeds

__all__ = ["Variant", "Experiment", "EXPERIMENTS", "PREDICTIONS", "STABLE_BOUND", "CHANGE_RULE", "FILTER_COMPARISONS",
           "FILTER_EFFECT", "FILTER_SEEDS", "build_experiment", "analyse", "markdown", "own_records", "seed_plan",
           "write_experiment", "write_study", "REGULARISERS_LR", "PILOT_LR", "REGULARISERS_ARMS", "REGULARISERS_COMMON",
           "REGULARISERS_RULE", "REGULARISERS_COMPARISONS", "REGULARISERS_SEEDS", "LR_GRID", "LR_RULE", "LrRule",
           "LR_AMENDED", "StableLrRule",
           "margin_slope", "regularisers_run", "regularisers_seed_plan"]

#: A mean change of the margin within +-this (90% interval) is "stable": the equivalence bound of the study's
#: margin outcome (docs/reproduction.md), fixed before the runs.
STABLE_BOUND = 0.15
#: The mechanism's classes: the study's paired rule (95% interval beside 0; the 90% interval inside the bound),
#: read without a direction (verdicts.CHANGE_LABELS).
CHANGE_RULE = ChangeRule(bound=STABLE_BOUND, paired=replace(PAIRED, bounds={}))
#: The criteria of a collapse that emerges and hurts (detect_harmful_collapse's defaults), printed with the rule.
HARMFUL = {k: inspect.signature(detect_harmful_collapse).parameters[k].default for k in ("drop", "band")}
#: The search: a candidate shows it when every seed does; the confirmation on fresh seeds: 4 of 5 (80%).
SEARCH_RULE = ShareRule(share=1.0)
CONFIRM_RULE = ShareRule(share=0.8)

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

#: Finding 3 on the emergent collapse (docs/collapse.md section 7.4): the comparisons, first the primary one.
FILTER_COMPARISONS = (("top_p", "no_filter"), ("top_p", "random"))
#: The smallest effect of interest on the primary outcome (the end margin), equal to the study's equivalence bound
#: for it: the seed count must detect +-this with 80% power and conclude equivalence within it with 80% power.
FILTER_EFFECT = 0.15
#: The fewest and the most seeds the power analysis may ask for (the most: the 12-20 a powered study affords).
FILTER_SEEDS = (8, 20)




def seed_plan(sd: float | None, effect: float = FILTER_EFFECT, limits: tuple[int, int] = FILTER_SEEDS
              ) -> dict[str, Any]:
    """Seeds of the main comparison from a pilot's paired SD `sd` of the primary outcome (section 7.4):
    :func:`ragen_core.math.stats.seed_plan` (detect `effect` and conclude equivalence within it, each with 80%
    power, between the `limits`), as results.json keeps it."""
    return plan_seeds(sd, effect, limits, alpha=PAIRED.alpha, power=PAIRED.power).as_dict()


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


# ---------------------------------------------------------------------------------------------- analysis
def _probe(r: dict[str, Any], key: str) -> list[tuple[int, float]]:
    return [(int(p["step"]), float(p[key])) for p in r.get("probe") or [] if p.get(key) is not None]


_mean = mean_of  # the one mean: None and non-finite values skipped


def _step0(rows: list[Any], key: str | None = None) -> tuple[float | None, str]:
    """The value at step 0 of probe rows (`key` of each ``{"step": ..}``) or of validation points (``[step,
    value]``, `key` None), or None and why not: no step-0 measurement (a run resumed from a folder that lost it), or
    a null. A start, a change from the start or a ratio to it is over this value only, never over the first later
    measurement, which would be reported as if it were step 0."""
    pts = [(int(p["step"]), p.get(key)) if key is not None else (int(p[0]), p[1]) for p in rows]
    at0 = [v for s, v in pts if s == 0]
    if not at0:
        first = min((s for s, v in pts if _ok(v)), default=None)
        return None, "no step-0 measurement" + (f" (the first is at step {first})" if first is not None else "")
    if not _ok(at0[-1]):
        return None, "the step-0 value is null (not measured, or not finite)"
    return float(at0[-1]), ""


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
    probe = r.get("probe") or []
    # the start of every start-to-end number is step 0's value; without one the number is None and
    # ``no_step0`` says why (it was the first later measurement, reported as step 0's)
    no_step0: dict[str, str] = {}

    def start(rows: list[Any], key: str | None, names: tuple[str, ...]) -> float | None:
        v, why = _step0(rows, key)
        if v is None:
            no_step0.update((n, why) for n in names)
        return v

    if margin:
        m0 = start(probe, "retrieval_margin", ("margin_start", "delta"))
        out.update(margin_start=m0, margin_end=margin[-1][1], margin_min=min(v for _, v in margin),
                   delta=None if m0 is None else margin[-1][1] - m0)
    for key, series, probe_key in (("token_entropy", ent, "token_entropy"), ("cond_entropy", cond,
                                                                            "cond_entropy_est")):
        if series:
            e0 = start(probe, probe_key, (f"{key}_ratio_end",))
            if e0 is not None and e0 <= 0:
                no_step0[f"{key}_ratio_end"] = f"the step-0 value is {e0:g} (no ratio to it)"
            elif e0 is not None:
                out[f"{key}_ratio_end"] = series[-1][1] / e0
    val = r.get("val") or []
    if val:
        out.update(success_start=start(val, None, ("success_start",)), success_end=val[-1][1])
    tmpl = _probe(r, "template_share")
    if tmpl:
        out.update(template_share_start=start(probe, "template_share", ("template_share_start",)),
                   template_share_end=tmpl[-1][1])
    if no_step0:
        out["no_step0"] = no_step0
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


def classify(deltas: list[float], rule: ChangeRule = CHANGE_RULE) -> dict[str, Any]:
    """The class of an arm's margin changes: the verdict of :func:`ragen_core.apps.reproduce.verdicts.compare` on
    the changes (direction +1, equivalence within +-``rule.bound``) under the labels falls / rises / stable /
    unclear, with the mean, both intervals and the rest of the comparison's numbers."""
    c = compare(deltas, rule.paired, rule.bound)
    return {**c.as_dict(), "class": CHANGE_LABELS[c.verdict]}


def _paired(a: dict[int, float], b: dict[int, float], rule: ChangeRule = CHANGE_RULE) -> dict[str, Any]:
    c = paired(a, b, rule.paired, rule.bound)
    return {**c.as_dict(), "class": CHANGE_LABELS[c.verdict], "direction": DIRECTION_LABELS[c.verdict]}


def _name_unpaired(c: dict[str, Any], runs: dict[str, list[Any]]) -> None:
    """Add ``unpaired`` to the comparison `c` of the arms of `runs` (arm -> seeds with a run) when a seed has a run
    in only some of them (:func:`ragen_core.apps.reproduce.verdicts.unpaired`): named, not dropped unsaid."""
    lone = unpaired(runs)
    if lone:
        c["unpaired"] = lone


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
    """The analysis of experiment `name` (of :data:`EXPERIMENTS`) from its run records: every run's summary
    (:func:`run_summary`) and what its spec's analysis adds."""
    exp = EXPERIMENTS[name]
    return exp.analyse(records)


def _runs_by_arm(name: str, records: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    runs = [run_summary(r) for r in records]
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_arm.setdefault(r["arm"], []).append(r)
    order = [v.name for v in EXPERIMENTS[name].variants]
    out: dict[str, Any] = {"experiment": name, "runs": sorted(runs, key=lambda r: (order.index(r["arm"])
                                                                                   if r["arm"] in order else 99,
                                                                                   r["seed"]))}
    return out, by_arm


def _analyse_mechanism(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Each arm's class (:func:`classify`), the paired payoff and dose comparisons, the accounts' verdicts."""
    out, by_arm = _runs_by_arm(name, _own_runs(name, records))
    runs = out["runs"]
    arms = {a: classify([r["delta"] for r in rs if r.get("delta") is not None]) for a, rs in by_arm.items()}
    for a, rs in by_arm.items():
        for key, field in (("pmi_cov_kept", "pmi_cov_kept"), ("pmi_cov_dropped", "pmi_cov_dropped"),
                           ("kept_zero_adv_share", "kept_zero_adv_share"),
                           ("entropy_ratio_end", "token_entropy_ratio_end"), ("success_start", "success_start"),
                           ("success_end", "success_end")):
            arms[a][key] = _mean([r.get(field) for r in rs])
    delta = {a: {r["seed"]: r["delta"] for r in rs if r.get("delta") is not None} for a, rs in by_arm.items()}
    dose = _paired(delta.get(DOSE[0], {}), delta.get(DOSE[1], {}))
    payoff = _paired(delta.get("pays_all", {}), delta.get("nopay_all", {}))
    for c, pair in ((dose, DOSE), (payoff, ("pays_all", "nopay_all"))):
        _name_unpaired(c, {a: [r["seed"] for r in by_arm.get(a, [])] for a in pair})
    out.update(arms=arms, dose=dose, payoff=payoff,
               accounts=[_account_verdict(a, arms, dose) for a in PREDICTIONS], probe_noise=probe_noise(runs))
    return out


def _analyse_filter(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Finding 3 by the study's rules on this experiment's runs, each arm's training summary, the seed plan."""
    records = _own_runs(name, records)
    out, by_arm = _runs_by_arm(name, records)
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
    return out


def _analyse_candidates(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per candidate: which seeds show a collapse that emerges and hurts, and whether enough do (its ShareRule).

    The share is taken over every seed any candidate ran: a seed whose run of a candidate is missing is listed
    under ``missing`` and counts as not showing it, so a lost run can never lower the bar ("every seed" of the
    search is not met by the one seed left)."""
    out, by_arm = _runs_by_arm(name, _own_runs(name, records))
    rule: ShareRule = EXPERIMENTS[name].rule
    seeds = sorted({r["seed"] for rs in by_arm.values() for r in rs})
    cands = {}
    for a, rs in by_arm.items():
        flags = [bool(r.get("harmful", {}).get("harmful")) for r in rs]
        missing = sorted(set(seeds) - {r["seed"] for r in rs})
        cands[a] = {"seeds": [r["seed"] for r in rs], "harmful": flags, "needed": rule.needed(len(seeds)),
                    "shows_it": bool(flags) and rule.met(sum(flags), len(seeds)),
                    **({"missing": missing} if missing else {})}
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
             f"{_DOC_SECTION.get(name, 7)})._", "",
             f"- seeds: {header.get('seeds')} ({'tuning seeds' if exp.seeds.kind == 'tuning' else 'fresh seeds'}), "
             f"{header.get('n_runs')} runs ({header.get('n_missing', 0)} missing), "
             f"{_f(header.get('core_minutes'), '{:.0f}')} core-minutes{cost_text(header.get('cost'))}",
             f"- machine: {header.get('machine', 'n/a')}",
             f"- every run: `{' '.join(exp.common)}`", "", "| arm | config | overrides | purpose |",
             "|---|---|---|---|"]
    for v in exp.variants:
        lines.append(f"| `{v.name}` | `configs/{v.config}` | `{' '.join(v.overrides)}` | {v.purpose} |")
    lines.append("")
    lines += _SECTIONS[name](result)
    lines += ["", "## Every run", "", "| arm | seed | steps (trained) | margin start -> min -> end | token entropy "
              "end/start | success start -> end | template share start -> end | verdict (emerges and hurts) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        h = r.get("harmful") or {}
        lines.append(
            f"| `{(r['env'] + '/') if r.get('env') else ''}{r['arm']}` | {r['seed']} | {r.get('steps')} "
            f"({_f(r.get('trained_steps'), '{:d}')}) | "
            f"{_f(r.get('margin_start'))} -> "
            f"{_f(r.get('margin_min'))} -> {_f(r.get('margin_end'))} | "
            f"{_f(r.get('token_entropy_ratio_end'), '{:.2f}')} | "
            f"{_f(r.get('success_start'), '{:.3f}')} -> {_f(r.get('success_end'), '{:.3f}')} | "
            f"{_f(r.get('template_share_start'), '{:.2f}')} -> {_f(r.get('template_share_end'), '{:.2f}')} | "
            f"{'yes' if h.get('harmful') else 'no'}: {h.get('reason', 'n/a')} |")
    missing = [r for r in result["runs"] if r.get("no_step0")]
    if missing:
        lines += ["", "Runs without a step-0 value: their start, change from the start and ratio to the start are "
                  "n/a (never taken from a later measurement):", ""]
        for r in missing:
            by_why: dict[str, list[str]] = {}
            for k, why in r["no_step0"].items():
                by_why.setdefault(why, []).append(f"`{k}`")
            lines.append(f"- `{(r['env'] + '/') if r.get('env') else ''}{r['arm']}` seed {r['seed']}: "
                         + "; ".join(f"{', '.join(ks)}: {why}" for why, ks in by_why.items()))
    return "\n".join(lines) + "\n"


def _mechanism_md(res: dict[str, Any]) -> list[str]:
    lines = ["## Arms: change of the probe's retrieval margin, step 0 to the end", "",
             _change_rule_text(CHANGE_RULE), "",
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
        lone = unpaired_text(c.get("unpaired") or {})
        lines.append(f"Paired, {label}: mean {_f(c.get('mean'), '{:+.3f}')}, 95% CI {_ci(c, 'ci95')}, 90% CI "
                     f"{_ci(c, 'ci90')} over seeds {c.get('seeds')}: **{c['direction']}**."
                     + (f" Left out: {lone}." if lone else ""))
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
    r = PAIRED
    lines += ["", "## Comparisons, paired by seed", "",
              f"Verdict: held ({pct(r.level)} CI above 0: the paper's direction), contradicted (below 0), equivalent "
              f"(the {pct(r.equivalence_level)} CI inside the bound), else inconclusive with the effect detectable at "
              f"{pct(r.power)} power. Primary: `top_p` minus `no_filter` on the end margin.", "",
              "| comparison | outcome | n | mean | 95% CI | 90% CI | paired SD | bound | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    for comp, outs in f["comparisons"].items():
        for k, c in outs.items():
            fmt = fmt_unit(OUTCOMES[k][1])
            lines.append(f"| {comp} | {OUTCOMES[k][0]} | {c['n']} | {_f(c.get('mean'), '{:+.3f}')} | "
                         f"{_ci(c, 'ci95')} | {_ci(c, 'ci90')} | {_f(c.get('sd'))} | "
                         f"{fmt(c['bound']) if c.get('bound') is not None else 'n/a'} | **{verdict_text(c, fmt)}** |")
    lines += _unpaired_lines({comp: next(iter(outs.values()), {}) for comp, outs in f["comparisons"].items()})
    p = res["seed_plan"]
    lines += ["", "## Seeds for the main comparison (the power analysis of section 7.4)", "",
              f"From these runs' paired SD of the primary outcome ({_f(p.get('sd'))}): {_plan_text(p)} -> **{p['n']} "
              f"seeds**, which detect {_f(p.get('mde'))} of end margin at {pct(p.get('power', PAIRED.power))} "
              "power."]
    return lines


def _search_md(res: dict[str, Any]) -> list[str]:
    share = EXPERIMENTS[res["experiment"]].rule
    # every seed any candidate ran (the share's denominator: a candidate's missing run counts as not showing it)
    n = len({s for c in res["candidates"].values() for s in [*c["seeds"], *c.get("missing", [])]}) or None
    rule = ("every seed meets" if share.share >= 1 else f"at least {pct(share.share)} of its seeds"
            + (f" ({share.needed(n)} of {n})" if n else "") + " meet")
    lines = ["## Candidates", "", f"A candidate shows a collapse that emerges and hurts when {rule} all three "
             "conditions (`ragen_core.math.collapse.detect_harmful_collapse`): the probe margin falls to "
             f"{pct(HARMFUL['drop'])} of its peak or below and stays there, success at the end is no higher than at "
             f"the peak, token entropy and H(Z|X) stay within +-{pct(HARMFUL['band'])} of the peak's values to the "
             "end of the run.", "",
             "| candidate | seeds | per seed | shows it |", "|---|---|---|---|"]
    for a, c in res["candidates"].items():
        per = ", ".join([f"{s}: {'yes' if h else 'no'}" for s, h in zip(c["seeds"], c["harmful"])]
                        + [f"{s}: no run (counted as no)" for s in c.get("missing", [])])
        lines.append(f"| `{a}` | {len(c['seeds'])} | {per} | **{'yes' if c['shows_it'] else 'no'}** |")
    return lines


def _unpaired_lines(comparisons: dict[str, dict[str, Any]]) -> list[str]:
    """A line per comparison (name -> one of its outcome dicts) with seeds it could not pair (``unpaired``), after
    a blank line; nothing when every seed was paired."""
    lines = [f"- {comp}: {unpaired_text(c['unpaired'])}." for comp, c in comparisons.items() if c.get("unpaired")]
    return ["", *lines] if lines else []


def _change_rule_text(rule: ChangeRule) -> str:
    p = rule.paired
    return (f"Class: falls / rises when the {pct(p.level)} interval of the mean change is below / above 0, stable "
            f"when the {pct(p.equivalence_level)} interval lies inside +-{rule.bound}, else unclear.")


def _plan_text(p: dict[str, Any]) -> str:
    """Why the seed plan has its seeds, from its numbers."""
    lo, hi = p.get("limits") or FILTER_SEEDS
    effect = p.get("effect", FILTER_EFFECT)
    if p.get("n_detect") is None and p.get("n_equiv") is None and p.get("mde") is None:
        return "no usable paired SD from the pilot: the most seeds"
    return (f"max(detect {effect}: {p.get('n_detect')}, equivalence within +-{effect}: {p.get('n_equiv')}, at "
            f"least {lo})" + (f", capped at {hi}" if p.get("capped") else ""))


def _curve(r: dict[str, Any], key: str) -> list[tuple[int, float]]:
    """`key` at every probe measurement of run `r`, in step order: a null (not measured, or not finite) is NaN, which
    matplotlib draws as a break in the line, never as a line joining the points on either side of it."""
    out = []
    for p in r.get("probe") or []:
        v = p.get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        out.append((int(p["step"]), float(v) if ok else math.nan))
    return sorted(out, key=lambda sv: sv[0])


def _over_step0(curve: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """`curve` divided by its value at step 0; empty when step 0 has no positive value (not measured, null or 0):
    a ratio over another step's value would be drawn under the label "/ step 0"."""
    base = next((v for s, v in curve if s == 0), math.nan)
    return [(s, v / base) for s, v in curve] if base > 0 else []  # NaN > 0 is False


def _seed_colors(records: list[dict[str, Any]]) -> dict[Any, Any]:
    """One colour per seed, the same in every panel: seed -> colour (matplotlib's tab10, tab20 beyond 10 seeds)."""
    from matplotlib import colormaps

    seeds = sorted({r.get("seed") for r in records}, key=lambda s: (not isinstance(s, int), s if isinstance(s, int)
                                                                   else str(s)))
    cmap = colormaps["tab10" if len(seeds) <= 10 else "tab20"]
    return {s: cmap(i % cmap.N) for i, s in enumerate(seeds)}


def figure(result: dict[str, Any], records: list[dict[str, Any]]) -> Any:
    """Per arm (a column): the probe's retrieval margin (top) and its token entropy over the run's own step-0 value
    (bottom), one line per seed, one colour per seed in every panel, a dot on every measurement, a null as a gap.
    The grey band is +-HARMFUL["band"] of step 0; a run without a positive step-0 entropy has no ratio curve, and a
    panel with no curve says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    records = own_records(result["experiment"], records)
    several = len({v.group for v in EXPERIMENTS[result["experiment"]].variants}) > 1  # e.g. one group per env
    column = (lambda r: f"{r.get('env')}/{r['arm']}") if several else (lambda r: r["arm"])  # noqa: E731
    arms = list(dict.fromkeys(column(r) for r in records))
    colors = _seed_colors(records)
    band = HARMFUL["band"]
    fig, axes = plt.subplots(2, max(len(arms), 1), figsize=(2.6 * max(len(arms), 1), 5.6), sharex=True,
                             squeeze=False)
    for j, arm in enumerate(arms):
        no_ratio = 0
        for r in (r for r in records if column(r) == arm):
            style = {"lw": 1, "alpha": 0.8, "marker": ".", "ms": 3, "color": colors[r.get("seed")]}
            m = _curve(r, "retrieval_margin")
            if any(math.isfinite(v) for _, v in m):
                axes[0][j].plot([s for s, _ in m], [v for _, v in m], **style)
            e = _over_step0(_curve(r, "token_entropy"))
            if any(math.isfinite(v) for _, v in e):
                axes[1][j].plot([s for s, _ in e], [v for _, v in e], **style)
            elif r.get("probe"):
                no_ratio += 1
        axes[0][j].set_title(arm, fontsize=8)
        axes[0][j].set_ylim(-0.1, 1.05)
        axes[1][j].axhspan(1 - band, 1 + band, color="0.9")
        # below the axes, not over a curve: the runs a ratio to step 0 could not be drawn for
        axes[1][j].set_xlabel("RL step" + (f"\n{no_ratio} run(s) without a step-0 entropy: not drawn"
                                            if no_ratio else ""), fontsize=8 if no_ratio else None)
        for ax, what in ((axes[0][j], "margin"), (axes[1][j], "token entropy ratio")):
            if not ax.get_lines():  # say so, rather than draw empty axes that read as a plotting bug
                ax.text(0.5, 0.5, f"no {what} measured", ha="center", va="center", fontsize=7, color="tab:gray",
                        transform=ax.transAxes)
    axes[-1][0].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole (shared by every column)
    axes[0][0].set_ylabel("probe retrieval margin")
    axes[1][0].set_ylabel("token entropy / step 0")
    handles: list[Any] = [Line2D([], [], color=c, marker=".", lw=1, label=f"seed {s}") for s, c in colors.items()]
    handles.append(Patch(color="0.9", label=f"+-{band:.0%} of step 0"))
    fig.suptitle(f"{result['experiment']}: the probe per arm, one line per seed", fontsize=9)
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.955), ncol=min(len(handles), 4 * len(arms)),
               fontsize=7, frameon=False)  # above the panels, never over a curve
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig


# ---------------------------------------------------------------------------------------------- writing
def write_experiment(name: str, records: list, report_dir: str | Path, header: dict) -> Path | None:
    """Analyse an experiment's records and write ``NAME.md``, ``NAME/results.json`` and ``NAME/curves.png``; None,
    writing nothing, when the records cannot be analysed (:func:`_analysable`)."""
    result = _analysable(lambda: analyse(name, records))
    if result is None:
        return None
    folder = Path(report_dir)
    (folder / name).mkdir(parents=True, exist_ok=True)
    header = {**header, "regenerate": f"ragen reproduce --from-results {folder / name / 'results.json'} "
                                      f"--report-dir {folder}"}
    text = markdown(result, header) + f"\n![curves]({name}/curves.png)\n\nRegenerate: `{header['regenerate']}`\n"
    (folder / f"{name}.md").write_text(text)
    (folder / name / "results.json").write_text(results_json({"experiment": name, "header": header,
                                                              "analysis": result, "records": records}))
    fig = figure(result, records)  # selects matplotlib's Agg backend before pyplot is imported here
    fig.savefig(folder / name / "curves.png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)  # pyplot keeps every open figure: a session that writes many experiments would grow without it
    return folder / f"{name}.md"


def write_study(records: list, report_dir: str | Path, header: dict) -> Path | None:
    """Analyse the study's records and write ``reproduction.md`` and ``reproduction/`` (results.json, figures);
    None, writing nothing, when the records cannot be analysed (:func:`_analysable`)."""
    analysis = _analysable(lambda: analyse_study(records))
    if analysis is None:
        return None
    results = Path(report_dir) / "reproduction" / "results.json"
    header = {**header, "regenerate": f"ragen reproduce --from-results {results} --report-dir {report_dir}"}
    return write_report({"analysis": analysis, "records": records}, report_dir, header)


def _analysable(analysis: Any) -> dict[str, Any] | None:
    """`analysis()`, or None with one line on stderr saying why when its records cannot be analysed as one design
    (:class:`ragen_core.apps.reproduce.analysis.RecordsError`, e.g. two records of one run in a results.json merged
    by hand): the writers are what `ragen reproduce` calls, and a wrong record must cost one line, not a
    traceback (its caller returns 1 on None)."""
    try:
        return analysis()
    except RecordsError as e:
        print(f"ragen reproduce: cannot report these records: {e}", file=sys.stderr)
        return None


_SECTIONS = {}  # experiment name -> its report's own sections, filled with the registry below


def _collapse_experiment(name: str, about: str, variants: tuple[Variant, ...], seeds: Seeds, common: tuple[str, ...],
                         rule: Any, outcomes: dict[str, str], analysis: Any, sections: Any) -> Experiment:
    _SECTIONS[name] = sections
    return Experiment(name, about, variants, seeds, outcomes=outcomes, rule=rule, common=common,
                      analyse=partial(analysis, name), write=partial(write_experiment, name))



# ---------------------------------------------------------------------------------------------- regularisers
# docs/collapse.md section 8 (registered before any RL step of its pilot or its runs): on the mechanism testbed
# (configs/mechanism_*.toml), does the entropy bonus at low reward variance lower input dependence, and does a larger
# dose lower it more? Seven arms per env (one run group per env), SGD at a learning rate per env fixed by the
# pilot's step 1 (`regularisers_lr_pilot`), the seeds sized by its step 2 (`regularisers_pilot`).

#: The registration's section of docs/collapse.md, per experiment (the others: section 7).
_DOC_SECTION = {"regularisers": 8, "regularisers_pilot": 8, "regularisers_lr_pilot": 8}
#: The envs (one run group each) and their base configs.
REGULARISERS_ENVS = {"frozenlake": "mechanism_frozenlake.toml", "sokoban": "mechanism_sokoban.toml"}
#: The learning rate L of the main runs per env: the pilot's step 1 (`regularisers_lr_pilot`, by the amended rule of
#: section 8.1), set after its step 2 (section 8.2); while an env's L is None its runs are refused
#: (:class:`_LrGatedExperiment`).
REGULARISERS_LR: dict[str, float | None] = {"frozenlake": 0.3, "sokoban": 0.1}
#: The learning rate of the pilot's step 2 (`regularisers_pilot`, tuning seeds 140-143) per env: step 1's L by the
#: amended rule of section 8.1 (:data:`LR_AMENDED`; docs/collapse/regularisers_lr_pilot.md).
PILOT_LR: dict[str, float | None] = {"frozenlake": 0.3, "sokoban": 0.1}
#: The pilot's step 1: the learning rates tried (the `high_ent001` arm, tuning seeds 140 and 141).
LR_GRID = (0.01, 0.03, 0.1, 0.3)
_TOP = ("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.25", 'filter.order="largest"')
#: The arms of section 8's table: name -> (overrides, purpose), the same in both envs.
REGULARISERS_ARMS: dict[str, tuple[tuple[str, ...], str]] = {
    "low_ent0": ((*_BOTTOM, "algo.entropy_coef=0.0"),
                 "the lowest-reward-variance quarter of the groups; no entropy bonus"),
    "low_ent001": ((*_BOTTOM, "algo.entropy_coef=0.001"),
                   "the lowest-variance quarter; entropy bonus 0.001 (the paper's)"),
    "low_ent01": ((*_BOTTOM, "algo.entropy_coef=0.01"), "the lowest-variance quarter; entropy bonus 0.01"),
    "high_ent0": ((*_TOP, "algo.entropy_coef=0.0"),
                  "the highest-reward-variance quarter of the groups; no entropy bonus"),
    "high_ent001": ((*_TOP, "algo.entropy_coef=0.001"), "the highest-variance quarter; entropy bonus 0.001"),
    "high_ent01": ((*_TOP, "algo.entropy_coef=0.01"), "the highest-variance quarter; entropy bonus 0.01"),
    "low_ent001_kl": ((*_BOTTOM, "algo.entropy_coef=0.001", "algo.kl_coef=0.01"),
                      "the lowest-variance quarter; entropy bonus 0.001 and KL 0.01 to the warm start (secondary)"),
}
#: Every run of the three experiments of section 8 (the learning rate: per env, REGULARISERS_LR / PILOT_LR / the
#: lr pilot's arm).
REGULARISERS_COMMON = ('algo.optimizer="sgd"', "eval.every=10", "mi.probe_every=5", "filter.max_empty_steps=0")
#: The primary outcomes and their equivalence bounds: the margin's least-squares slope over steps 0..40 per 100
#: steps (0.375 per 100 steps is 0.15 over the 40 steps) and the margin at step 40 (the study's margin bound).
REGULARISERS_OUTCOMES = {"slope": "slope of the probe's retrieval margin over steps 0-40, per 100 steps (primary)",
                         "end_margin": "the probe's retrieval margin at step 40 (primary)"}
#: The verdict rule of section 8: paired by seed, the paper's direction **lower** (direction -1: held when the 95%
#: interval of the mean difference is below 0, contradicted when above), equivalence within the bounds.
REGULARISERS_RULE = PairedRule(level=PAIRED.level, equivalence_alpha=PAIRED.equivalence_alpha, power=PAIRED.power,
                               direction=-1, bounds={"slope": 0.375, "end_margin": 0.15})
#: The comparisons, first the primary one: name -> (first arm, second arm); "interaction" is the paired difference
#: of the first two pairs' differences ((low_ent001 - low_ent0) - (high_ent001 - high_ent0)).
REGULARISERS_COMPARISONS: dict[str, tuple[str, ...]] = {
    "primary": ("low_ent001", "low_ent0"),
    "dose": ("low_ent01", "low_ent0"),
    "regime": ("high_ent001", "high_ent0"),
    "interaction": ("low_ent001", "low_ent0", "high_ent001", "high_ent0"),
    "kl": ("low_ent001_kl", "low_ent001"),
}
#: The fewest and the most seeds of the main runs (section 8's pilot, step 2).
REGULARISERS_SEEDS = (6, 12)
#: The step of the end margin and the last step of the slope.
END_STEP = 40
#: A collapse that emerges and hurts in the `low_ent001` arm: at least 80% of an env's fresh seeds.
EMERGENT_RULE = ShareRule(share=0.8)


@dataclass(frozen=True)
class LrRule:
    """The pilot's step 1 (docs/collapse.md section 8): L is the smallest rate of `grid` at which greedy validation
    success at step `step` is at least `gain` (5 points) above step 0 on every seed (at least `min_seeds` of them):
    the task gradient acts; if none, `fallback`."""

    grid: tuple[float, ...] = LR_GRID
    gain: float = 0.05
    step: int = END_STEP
    min_seeds: int = 2
    fallback: float = 0.3

    def meets(self, val: list[list[float]] | None) -> bool:
        """Whether one run's validation curve ``[[step, success], ...]`` gains enough (False when step 0 or
        `step` was not evaluated)."""
        at = {int(s): float(v) for s, v in val or []}
        if 0 not in at or self.step not in at:
            return False
        return at[self.step] - at[0] >= self.gain - 1e-9  # successes are shares: 5 points is 0.05

    def choose(self, met: dict[float, dict[int, bool]], seeds: list[int]) -> float:
        """L from `met` (rate -> seed -> whether that run met the gain) over `seeds` (every seed of the env: a
        rate whose run of a seed is missing does not qualify)."""
        if len(seeds) >= self.min_seeds:
            for lr in sorted(self.grid):
                if all(met.get(lr, {}).get(s) for s in seeds):
                    return lr
        return self.fallback


LR_RULE = LrRule()


@dataclass(frozen=True)
class StableLrRule:
    """The amended rule of the pilot's step 1 (docs/collapse.md section 8.1, written after step 1 on tuning seeds
    140-141 and before any other run): L is the **largest** rate of `grid` at which no seed's greedy validation
    success at step `step` is more than `max_drop` (15 points) below its step 0 (the task is not broken), on at least
    `min_seeds` seeds. Under SGD the regulariser's step is L x coefficient x its gradient, so the largest rate that
    leaves the task intact gives the regulariser its largest chance to act; the registered rule (:class:`LrRule`)
    could not separate the rates (no rate gained 5 points on both seeds) and its fallback broke Sokoban."""

    grid: tuple[float, ...] = LR_GRID
    max_drop: float = 0.15
    step: int = END_STEP
    min_seeds: int = 2

    def intact(self, val: list[list[float]] | None) -> bool:
        """Whether one run's success at `step` is at most `max_drop` below step 0 (False when either is missing)."""
        at = {int(s): float(v) for s, v in val or []}
        if 0 not in at or self.step not in at:
            return False
        return at[0] - at[self.step] <= self.max_drop + 1e-9

    def choose(self, intact: dict[float, dict[int, bool]], seeds: list[int]) -> float | None:
        """L from `intact` (rate -> seed -> whether that run left the task intact) over `seeds`; None when no rate
        qualifies (or too few seeds): then no rate is set and the runs stay refused."""
        if len(seeds) < self.min_seeds:
            return None
        ok = [lr for lr in self.grid if all(intact.get(lr, {}).get(s) for s in seeds)]
        return max(ok) if ok else None


#: The rule that sets L (section 8.1's amendment of :data:`LR_RULE`).
LR_AMENDED = StableLrRule()


def _lr_table(name: str) -> dict[str, float | None]:
    return globals()[name]  # read when the runs are built: a test may monkeypatch the module constant


@dataclass(frozen=True)
class _LrGatedExperiment(Experiment):
    """An experiment whose runs take their env's learning rate from the module constant named `lr_table`
    (:data:`REGULARISERS_LR`, :data:`PILOT_LR`), read when the runs are built: each variant's group-common
    overrides end with ``algo.lr=L`` of its group (env), and while an env's L is None, :meth:`groups` (which
    :func:`ragen_core.apps.reproduce.spec.build_runs` calls after checking the seeds) refuses with a ValueError
    that says the pilot's step 1 must set it."""

    lr_table: str = "REGULARISERS_LR"

    @property  # type: ignore[override]
    def variants(self) -> tuple[Variant, ...]:
        table = _lr_table(self.lr_table)
        return tuple(v if table.get(v.group) is None else replace(v, common=(*v.common, f"algo.lr={table[v.group]}"))
                     for v in self._variants)

    @variants.setter
    def variants(self, value: tuple[Variant, ...]) -> None:
        # the variants as registered, without a rate (dataclasses.replace hands back the ones with it)
        object.__setattr__(self, "_variants", tuple(
            replace(v, common=tuple(c for c in v.common if not c.startswith("algo.lr="))) for v in value))

    def groups(self) -> tuple[str, ...]:
        groups = super().groups()
        unset = [g for g in groups if _lr_table(self.lr_table).get(g) is None]
        if unset:
            raise ValueError(
                f"{self.name}: no learning rate yet for {', '.join(unset)}: {self.lr_table} in "
                "ragen_core/apps/reproduce/experiments.py is None until the pilot's step 1 sets it (docs/collapse.md "
                "section 8: run `ragen reproduce --experiment regularisers_lr_pilot`, read L per env off its report, "
                f"set {self.lr_table} and commit it before these runs; step 1 has run and section 8.1 amends its "
                "rule; the main runs' rates are set after the pilot's step 2)")
        return groups


def _regularisers_variants(arms: dict[str, tuple[tuple[str, ...], str]]) -> tuple[Variant, ...]:
    return tuple(Variant(arm, config, overrides, purpose, group=env)
                 for env, config in REGULARISERS_ENVS.items() for arm, (overrides, purpose) in arms.items())


def _lr_arm(lr: float) -> str:
    return f"high_ent001_lr{lr:g}"


#: The pilot's step 1: the `high_ent001` arm at each rate of the grid (the rate is the arm's own override).
_LR_PILOT_ARMS = {_lr_arm(lr): ((*REGULARISERS_ARMS["high_ent001"][0], f"algo.lr={lr:g}"),
                                f"highest-variance quarter, entropy bonus 0.001, learning rate {lr:g}")
                  for lr in LR_GRID}


def margin_slope(points: list[tuple[int, float]], last: int = END_STEP) -> float | None:
    """The least-squares slope of the margin on the step over the measurements at steps 0..`last`, per 100 steps;
    None with fewer than two steps."""
    pts = [(float(s), float(m)) for s, m in points if 0 <= s <= last]
    if len({s for s, _ in pts}) < 2:
        return None
    xbar = sum(s for s, _ in pts) / len(pts)
    ybar = sum(m for _, m in pts) / len(pts)
    sxx = sum((s - xbar) ** 2 for s, _ in pts)
    return 100.0 * sum((s - xbar) * (m - ybar) for s, m in pts) / sxx


def _change(a: Any, b: Any) -> float | None:
    return float(a) - float(b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None


def regularisers_run(r: dict[str, Any]) -> dict[str, Any]:
    """One run of section 8: :func:`run_summary` with its env, the primary outcomes (``slope``: the margin's slope
    over steps 0..40 per 100 steps; ``end_margin``: the margin at step 40, None when not measured there), the whole
    margin curve and the per-arm secondaries: success and template share at the end minus step 0, the regulariser's
    share of the gradient (mean over steps of grad_norm_entropy / (grad_norm_task + grad_norm_entropy)) and the
    share of regulariser-only steps (``filter/regulariser_only``: the filter kept nothing), and the share of steps
    whose task gradient is exactly zero (``task_free_share``: the kept groups had no reward variance, so the
    regularisers were the whole update; section 8.2), each None when the record's filter log does not keep those
    metrics."""
    out = run_summary(r)
    margin = _probe(r, "retrieval_margin")
    log = r.get("filter_log") or []
    shares = [e["grad_norm_entropy"] / (e["grad_norm_task"] + e["grad_norm_entropy"]) for e in log
              if isinstance(e.get("grad_norm_task"), (int, float)) and isinstance(e.get("grad_norm_entropy"),
                                                                                   (int, float))
              and e["grad_norm_task"] + e["grad_norm_entropy"] > 0]
    out.update(env=r.get("env"), slope=margin_slope(margin), end_margin=dict(margin).get(END_STEP),
               margin_curve=[[s, m] for s, m in margin],
               success_change=_change(out.get("success_end"), out.get("success_start")),
               template_share_change=_change(out.get("template_share_end"), out.get("template_share_start")),
               regulariser_grad_share=_mean(shares),
               regulariser_only_share=_mean([e.get("regulariser_only") for e in log]),
               task_free_share=_mean([float(e["grad_norm_task"] == 0.0) for e in log
                                      if isinstance(e.get("grad_norm_task"), (int, float))]))
    return out


def _values(runs: list[dict[str, Any]], arm: str, key: str) -> dict[int, float]:
    return {r["seed"]: r[key] for r in runs if r["arm"] == arm and isinstance(r.get(key), (int, float))}


def _regularisers_comparison(runs: list[dict[str, Any]], arms: tuple[str, ...], key: str) -> dict[str, Any]:
    """One comparison of :data:`REGULARISERS_COMPARISONS` on outcome `key` by :data:`REGULARISERS_RULE`."""
    rule, bound = REGULARISERS_RULE, REGULARISERS_RULE.bounds.get(key)
    if len(arms) == 2:
        out = paired(_values(runs, arms[0], key), _values(runs, arms[1], key), rule, bound).as_dict()
    else:
        a, b, c, d = (_values(runs, arm, key) for arm in arms)
        seeds = sorted(set(a) & set(b) & set(c) & set(d))
        out = compare([(a[s] - b[s]) - (c[s] - d[s]) for s in seeds], rule, bound, seeds).as_dict()
    _name_unpaired(out, {arm: [r["seed"] for r in runs if r["arm"] == arm] for arm in dict.fromkeys(arms)})
    return out


def _spread(values: list[Any]) -> dict[str, Any]:
    """Mean and intervals over seeds of one arm's values (None and non-finite skipped)."""
    c = compare([v for v in values if isinstance(v, (int, float)) and math.isfinite(v)], REGULARISERS_RULE)
    return {k: c.as_dict()[k] for k in ("n", "mean", "ci95", "ci90", "sd")}


def _analyse_regularisers(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Section 8's analysis per env: each run's outcomes (:func:`regularisers_run`), each arm's means, the primary
    and secondary comparisons by :data:`REGULARISERS_RULE`, and the check for a collapse that emerges and hurts in
    `low_ent001`; the pilot's (tuning seeds) adds the seed plan of the main runs (:func:`regularisers_seed_plan`)."""
    exp = EXPERIMENTS[name]
    order = {(v.group, v.name): i for i, v in enumerate(exp.variants)}
    runs = sorted((regularisers_run(r) for r in _own_runs(name, records)),
                  key=lambda r: (order.get((r["env"], r["arm"]), 99), r["seed"]))
    table = _lr_table(getattr(exp, "lr_table", "REGULARISERS_LR"))
    envs: dict[str, Any] = {}
    for env in dict.fromkeys(v.group for v in exp.variants):
        rs = [r for r in runs if r["env"] == env]
        arms = {}
        for arm in REGULARISERS_ARMS:
            own = [r for r in rs if r["arm"] == arm]
            arms[arm] = {"seeds": [r["seed"] for r in own],
                         **{k: _spread([r.get(k) for r in own]) for k in REGULARISERS_OUTCOMES},
                         **{k: _mean([r.get(k) for r in own])
                            for k in ("token_entropy_ratio_end", "success_change", "template_share_change",
                                      "regulariser_grad_share", "regulariser_only_share", "task_free_share")}}
        comps = {c: {k: _regularisers_comparison(rs, pair, k) for k in REGULARISERS_OUTCOMES}
                 for c, pair in REGULARISERS_COMPARISONS.items()}
        low = [r for r in rs if r["arm"] == "low_ent001"]
        flags = [bool((r.get("harmful") or {}).get("harmful")) for r in low]
        success = compare([r["success_change"] for r in low if r.get("success_change") is not None],
                          REGULARISERS_RULE).as_dict()
        met = bool(flags) and EMERGENT_RULE.met(sum(flags), len(flags))
        falls = success.get("ci95", [None])[1] is not None and success["ci95"][1] < 0
        held = comps["primary"]["slope"]["verdict"] == Verdict.HELD.value
        envs[env] = {"lr": table.get(env), "arms": arms, "comparisons": comps,
                     "harmful": {"seeds": [r["seed"] for r in low], "harmful": flags, "hits": sum(flags),
                                 "share": sum(flags) / len(flags) if flags else None,
                                 "needed_share": EMERGENT_RULE.share,
                                 "conditions_met": met, "success_change": success, "success_falls": falls,
                                 "slope_held": held, "ships": met and falls and held,
                                 "config": f"configs/collapse_emergent_{env}.toml"}}
    out: dict[str, Any] = {"experiment": name, "runs": runs, "envs": envs,
                           "grad_metrics_recorded": any(r.get("regulariser_grad_share") is not None for r in runs),
                           "regulariser_only_recorded": any(r.get("regulariser_only_share") is not None
                                                            for r in runs)}
    if exp.seeds.kind == "tuning":
        out["seed_plan"] = regularisers_seed_plan({env: {k: e["comparisons"]["primary"][k].get("sd")
                                                         for k in REGULARISERS_OUTCOMES} for env, e in envs.items()})
    return out


def regularisers_seed_plan(sds: dict[str, dict[str, float | None]], limits: tuple[int, int] = REGULARISERS_SEEDS
                           ) -> dict[str, Any]:
    """Seeds of the main runs from the pilot's paired SDs of the primary comparison (env -> outcome -> SD): per env
    and outcome :func:`ragen_core.math.stats.seed_plan` with the outcome's bound as the effect (80% power to detect
    it, 80% power to conclude equivalence within it at a true difference of 0) between `limits`; ``n`` is the
    largest."""
    rule = REGULARISERS_RULE
    per = {env: {k: plan_seeds(sd, rule.bounds[k], limits, alpha=rule.alpha, power=rule.power).as_dict()
                 for k, sd in outs.items()} for env, outs in sds.items()}
    ns = [p["n"] for outs in per.values() for p in outs.values()]
    return {"per": per, "n": max(ns) if ns else limits[1], "limits": list(limits)}


def _analyse_lr_pilot(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The pilot's step 1: per env and rate, each seed's greedy success at step 0 and step 40 and whether it gained
    5 points; L per env by :data:`LR_RULE` (each run's outcomes too, :func:`regularisers_run`)."""
    exp = EXPERIMENTS[name]
    rate = {_lr_arm(lr): lr for lr in LR_RULE.grid}
    order = {(v.group, v.name): i for i, v in enumerate(exp.variants)}
    runs = sorted((regularisers_run(r) for r in _own_runs(name, records)),
                  key=lambda r: (order.get((r["env"], r["arm"]), 99), r["seed"]))
    envs: dict[str, Any] = {}
    for env in dict.fromkeys(v.group for v in exp.variants):
        rs = [r for r in runs if r["env"] == env and r["arm"] in rate]
        by_rate: dict[float, dict[int, bool]] = {}
        intact: dict[float, dict[int, bool]] = {}
        rows = []
        for rec in records:
            if rec.get("env") != env or rec.get("arm") not in rate:
                continue
            at = {int(s): float(v) for s, v in rec.get("val") or []}
            ok = LR_RULE.meets(rec.get("val"))
            whole = LR_AMENDED.intact(rec.get("val"))
            by_rate.setdefault(rate[rec["arm"]], {})[rec["seed"]] = ok
            intact.setdefault(rate[rec["arm"]], {})[rec["seed"]] = whole
            rows.append({"lr": rate[rec["arm"]], "seed": rec["seed"], "success_start": at.get(0),
                         "success_step": at.get(LR_RULE.step), "meets": ok, "intact": whole})
        seeds = sorted({r["seed"] for r in rs})
        envs[env] = {"seeds": seeds, "rows": sorted(rows, key=lambda x: (x["lr"], x["seed"])),
                     # the registered rule's L (None: the env was not run) and the rates that met it
                     "lr_registered": LR_RULE.choose(by_rate, seeds) if seeds else None,
                     "qualified": [lr for lr in sorted(LR_RULE.grid)
                                   if len(seeds) >= LR_RULE.min_seeds and all(by_rate.get(lr, {}).get(s)
                                                                              for s in seeds)],
                     # the amended rule's L (section 8.1), the one the runs use, and the rates that left it intact
                     "lr": LR_AMENDED.choose(intact, seeds),
                     "intact": [lr for lr in sorted(LR_AMENDED.grid)
                                if len(seeds) >= LR_AMENDED.min_seeds and all(intact.get(lr, {}).get(s)
                                                                              for s in seeds)]}
    return {"experiment": name, "runs": runs, "envs": envs,
            "rule": {"grid": list(LR_RULE.grid), "gain": LR_RULE.gain, "step": LR_RULE.step,
                     "fallback": LR_RULE.fallback},
            "amended": {"grid": list(LR_AMENDED.grid), "max_drop": LR_AMENDED.max_drop, "step": LR_AMENDED.step}}


def _comparison_label(comp: str) -> str:
    arms = REGULARISERS_COMPARISONS[comp]
    if comp == "primary":
        return f"`{arms[0]}` - `{arms[1]}` (**primary**)"
    if len(arms) == 2:
        return f"{comp}: `{arms[0]}` - `{arms[1]}`"
    return f"{comp}: (`{arms[0]}` - `{arms[1]}`) - (`{arms[2]}` - `{arms[3]}`)"


def _regularisers_md(res: dict[str, Any]) -> list[str]:
    r = REGULARISERS_RULE
    fmt_out = {"slope": "{:+.3f}", "end_margin": "{:+.3f}"}
    lines = ["## The rule", "",
             f"Per env and outcome, paired by seed: **held** when the {pct(r.level)} interval of the mean difference "
             f"is below 0 (the paper's direction: lower), **contradicted** when above 0, **equivalent** when the "
             f"{pct(r.equivalence_level)} interval lies inside +-{r.bounds['slope']} per 100 steps (slope) or "
             f"+-{r.bounds['end_margin']} (end margin), else **inconclusive** with the effect detectable at "
             f"{pct(r.power)} power. The primary comparison is `low_ent001` minus `low_ent0`; the others are "
             "secondary (the same rule; no verdict rests on them). Slope: the least-squares slope of the probe's "
             f"retrieval margin over steps 0-{END_STEP}, per 100 steps; end margin: the margin at step {END_STEP}.",
             ""]
    if not res.get("grad_metrics_recorded") or not res.get("regulariser_only_recorded"):
        lines += ["The regulariser's share of the gradient and the share of regulariser-only steps are NaN: the run "
                  "records (ragen_core/apps/reproduce/runner.py's filter log) do not keep loss/grad_norm_task, "
                  "loss/grad_norm_entropy or filter/regulariser_only; they are in each run's metrics.jsonl.", ""]
    for env, e in res["envs"].items():
        lr = _f(e.get("lr"), "{:g}") if e.get("lr") is not None else "not set"
        lines += [f"## {env} (learning rate {lr})", "", "### Comparisons, paired by seed", "",
                  "| comparison | outcome | n | mean | 95% CI | 90% CI | paired SD | bound | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for comp, outs in e["comparisons"].items():
            for k, c in outs.items():
                lines.append(f"| {_comparison_label(comp)} | {k} | {c['n']} | {_f(c.get('mean'), fmt_out[k])} | "
                             f"{_ci(c, 'ci95')} | {_ci(c, 'ci90')} | {_f(c.get('sd'))} | {_f(c.get('bound'))} | "
                             f"**{verdict_text(c)}** |")
        lines += _unpaired_lines({comp: next(iter(outs.values()), {}) for comp, outs in e["comparisons"].items()})
        lines += ["", "### Arms (mean [95% CI] over seeds)", "",
                  "| arm | seeds | slope per 100 steps | end margin | token entropy end/start | success end - start | "
                  "template share end - start | regulariser share of the gradient | regulariser-only steps | "
                  "steps with a zero task gradient |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for arm, a in e["arms"].items():
            cells = [f"{_f(a[k].get('mean'), fmt_out[k])} {_ci(a[k], 'ci95')}" if a[k].get("n") else "n/a"
                     for k in REGULARISERS_OUTCOMES]
            nan = {k: _f(a.get(k), "{:.3f}") if a.get(k) is not None else "NaN"
                   for k in ("regulariser_grad_share", "regulariser_only_share", "task_free_share")}
            lines.append(f"| `{arm}` | {len(a['seeds'])} | {cells[0]} | {cells[1]} | "
                         f"{_f(a.get('token_entropy_ratio_end'), '{:.2f}')} | {_f(a.get('success_change'), '{:+.3f}')} "
                         f"| {_f(a.get('template_share_change'), '{:+.2f}')} | {nan['regulariser_grad_share']} | "
                         f"{nan['regulariser_only_share']} | {nan['task_free_share']} |")
        h = e["harmful"]
        per = ", ".join(f"{s}: {'yes' if x else 'no'}" for s, x in zip(h["seeds"], h["harmful"])) or "no run"
        sc = h["success_change"]
        lines += ["", "### A collapse that emerges and hurts (`low_ent001`)", "",
                  f"Section 7.2's three conditions per seed: {per} ({h['hits']} of {len(h['seeds'])}; needed: at "
                  f"least {pct(h['needed_share'])}: **{'met' if h['conditions_met'] else 'not met'}**). Greedy success "
                  f"at the end minus step 0: {_f(sc.get('mean'), '{:+.3f}')}, 95% CI {_ci(sc, 'ci95')} "
                  f"(**{'falls' if h['success_falls'] else 'does not fall'}**). Slope verdict: "
                  f"{'held' if h['slope_held'] else 'not held'}. The arm "
                  + (f"**ships** as `{h['config']}`." if h["ships"] else "does not ship."), ""]
    if res.get("seed_plan"):
        p = res["seed_plan"]
        lines += ["## Seeds for the main runs (the pilot's step 2)", "",
                  "| env | outcome | paired SD | pairs to detect the bound | pairs for equivalence | n | detectable "
                  "effect at n |", "|---|---|---|---|---|---|---|"]
        for env, outs in p["per"].items():
            for k, q in outs.items():
                lines.append(f"| {env} | {k} | {_f(q.get('sd'))} | {_pairs(q, 'n_detect')} | {_pairs(q, 'n_equiv')} | "
                             f"{q['n']}{' (capped)' if q.get('capped') else ''} | {_f(q.get('mde'))} |")
        lo, hi = p["limits"]
        lines += ["", f"**n = {p['n']}** (the largest over the envs and outcomes, at least {lo} and at most {hi}): "
                  f"`ragen reproduce --experiment regularisers --first-seed 60 --seeds {p['n']}`."]
    lines += ["", "## Every seed", "", "| env | arm | seed | slope per 100 steps | end margin | margin at steps "
              f"0, 5, ..., {END_STEP} |", "|---|---|---|---|---|---|"]
    for run in res["runs"]:
        curve = ", ".join(_f(m, "{:.2f}") for _, m in run.get("margin_curve") or [])
        lines.append(f"| {run.get('env')} | `{run['arm']}` | {run['seed']} | {_f(run.get('slope'), '{:+.3f}')} | "
                     f"{_f(run.get('end_margin'))} | {curve} |")
    return lines


def _pairs(plan: dict[str, Any], key: str) -> str:
    """A seed plan's pairs needed (`key`: ``n_detect`` or ``n_equiv``) as the report prints it: the number, "n/a"
    without a usable paired SD, or "more than the plan searches" (None with an SD: the search's cap was passed)."""
    n = plan.get(key)
    if n is not None:
        return str(n)
    return "more than the plan searches" if _f(plan.get("sd")) != "n/a" and plan["sd"] > 0 else "n/a"


def _lr_pilot_md(res: dict[str, Any]) -> list[str]:
    rule = res["rule"]
    amended = res["amended"]
    lines = ["## The learning rate per env (the pilot's step 1)", "",
             f"Registered rule: L is the smallest rate of {rule['grid']} at which greedy validation success at step "
             f"{rule['step']} is at least {100 * rule['gain']:.0f} points above step 0 on every seed (the task "
             f"gradient acts); if none, {rule['fallback']}.", "",
             f"Amended rule (docs/collapse.md section 8.1, written after this step ran on the tuning seeds and "
             f"before any other run; it sets L): L is the **largest** rate of {amended['grid']} at which no seed's "
             f"greedy success at step {amended['step']} is more than {100 * amended['max_drop']:.0f} points below "
             "its step 0 (the task is not broken): under SGD the regulariser's step scales with L.", "",
             "| env | L | seed | success at step 0 | success at step 40 | gain | meets the registered rule | "
             "task intact (amended rule) |",
             "|---|---|---|---|---|---|---|---|"]
    for env, e in res["envs"].items():
        for row in e["rows"]:
            gain = _change(row["success_step"], row["success_start"])
            lines.append(f"| {env} | {row['lr']:g} | {row['seed']} | {_f(row['success_start'])} | "
                         f"{_f(row['success_step'])} | {_f(gain, '{:+.3f}')} | {'yes' if row['meets'] else 'no'} | "
                         f"{'yes' if row['intact'] else 'no'} |")
    lines.append("")
    for env, e in res["envs"].items():
        if not e["seeds"]:
            lines.append(f"- **{env}: not run**")
            continue
        registered = e["lr_registered"]
        why = (f"the smallest of {', '.join(f'{x:g}' for x in e['qualified'])}" if e["qualified"]
               else "no rate qualified: the fallback")
        lines.append(f"- {env}, registered rule: L = {registered:g} ({why}; seeds {e['seeds']})")
        intact = e["intact"]
        if e.get("lr") is None:
            lines.append(f"- **{env}, amended rule: no rate left the task intact on every seed** (no L: the runs "
                         "stay refused)")
        else:
            lines.append(f"- **{env}: L = {e['lr']:g}** (amended rule: the largest of "
                         f"{', '.join(f'{x:g}' for x in intact)}; seeds {e['seeds']})")
    lines += ["", "Set `PILOT_LR` (the pilot's step 2) and, after it, `REGULARISERS_LR` in "
              "ragen_core/apps/reproduce/experiments.py to the amended rule's rates and commit them before their "
              "runs."]
    return lines


def _regularisers_experiment(name: str, about: str, seeds: Seeds, lr_table: str) -> Experiment:
    _SECTIONS[name] = _regularisers_md
    return _LrGatedExperiment(name, about, _regularisers_variants(REGULARISERS_ARMS), seeds,
                              outcomes=dict(REGULARISERS_OUTCOMES), rule=REGULARISERS_RULE, common=REGULARISERS_COMMON,
                              analyse=partial(_analyse_regularisers, name), write=partial(write_experiment, name),
                              lr_table=lr_table)


_HARMFUL_OUTCOME = {"harmful": "a collapse that emerges and hurts (ragen_core.math.collapse.detect_harmful_collapse)"}
#: Every experiment of `ragen reproduce`, by name (``--experiment NAME``; "study" by default).
EXPERIMENTS: dict[str, Experiment] = {
    "study": replace(STUDY, analyse=analyse_study, write=write_study, rule=PAIRED,
                     outcomes={k: v[0] for k, v in OUTCOMES.items()}),
    "mechanism": _collapse_experiment("mechanism", "why the testbed collapsed: a template that pays or not x all "
                                      "groups or the lowest-variance quarter, and a regulariser dose (docs/collapse.md "
                                      "7.1)", (
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
    ), Seeds("reporting", first=30, count=8), _PER_STEP, CHANGE_RULE,
        {"delta": "the probe's retrieval margin at the end minus at step 0"}, _analyse_mechanism, _mechanism_md),
    "search": _collapse_experiment("search", "candidate configs for a collapse that emerges and hurts, on tuning "
                                   "seeds (docs/collapse.md 7.2)", (
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
    ), Seeds("tuning", first=130, count=2), ("eval.every=10", "filter.max_empty_steps=0"), SEARCH_RULE,
        _HARMFUL_OUTCOME, _analyse_candidates, _search_md),
    # The candidates that showed it on both tuning seeds, each on fresh seeds (40-44): a candidate ships if 4 of 5
    # meet the conditions (docs/collapse.md section 7.2, registered before the search ran).
    "confirm": _collapse_experiment("confirm", "the search's candidates on fresh seeds: ship at 4 of 5 "
                                    "(docs/collapse.md 7.2)", (
        Variant("frozenlake_nopay_slippery_long", "collapse_frozenlake.toml", _EMERGENT,
                "the search's candidate that showed it on both tuning seeds: slippery, no payoff, 100 steps"),
    ), Seeds("reporting", first=40, count=5), ("eval.every=10", "filter.max_empty_steps=0"), CONFIRM_RULE,
        _HARMFUL_OUTCOME, _analyse_candidates, _search_md),
    # Finding 3 on the collapse that emerged (docs/collapse.md section 7.4, registered before the confirmation's
    # results): the confirmed candidate with the study's three arms. `no_filter` is the confirmation's run exactly
    # (the same base config, overrides and common overrides), so a seed's no-filter run of the two is one run.
    "filter": _collapse_experiment("filter", "finding 3 (top-p vs no filter and a random drop) on the confirmed "
                                   "candidate (docs/collapse.md 7.4)", (
        Variant("no_filter", "collapse_frozenlake.toml", _EMERGENT,
                "every group trained on (the confirmation's runs: where the collapse emerged)",
                same_runs_as=("confirm", "frozenlake_nopay_slippery_long")),
        Variant("top_p", "collapse_frozenlake.toml", (*_NOPAY, *_TOP_P, *_SLIPPERY_LONG),
                "the method: top-p on reward variance, rho = 0.9"),
        Variant("random", "collapse_frozenlake.toml", (*_NOPAY, *_RANDOM, *_SLIPPERY_LONG),
                "the control: as many groups as top-p keeps, drawn uniformly at random"),
    ), Seeds("reporting", first=40, count=FILTER_SEEDS[0], plan="seed_plan"),
        ("eval.every=10", "filter.max_empty_steps=0"),
        PAIRED, {k: v[0] for k, v in OUTCOMES.items()}, _analyse_filter, _filter_md),
    # Do the regularisers erase input dependence where they can? (docs/collapse.md section 8, registered before any
    # RL step of its pilot or its runs.) The main runs: 7 arms x 2 envs on fresh seeds 60.., their count from the
    # pilot's seed plan, the learning rate per env from REGULARISERS_LR (refused while it is None).
    "regularisers": _regularisers_experiment(
        "regularisers", "does the entropy bonus at low reward variance lower input dependence? 7 arms x FrozenLake "
        "and Sokoban on the mechanism testbed (docs/collapse.md 8)",
        Seeds("reporting", first=60, count=REGULARISERS_SEEDS[0], plan="seed_plan"), "REGULARISERS_LR"),
    # The pilot's step 1: the learning rate per env (high_ent001 at each rate of LR_GRID, tuning seeds 140, 141).
    "regularisers_lr_pilot": _collapse_experiment(
        "regularisers_lr_pilot", "section 8's pilot, step 1: the learning rate per env (docs/collapse.md 8)",
        _regularisers_variants(_LR_PILOT_ARMS), Seeds("tuning", first=140, count=2), REGULARISERS_COMMON, LR_RULE,
        {"success_gain": f"greedy validation success at step {END_STEP} minus step 0"}, _analyse_lr_pilot,
        _lr_pilot_md),
    # The pilot's step 2: all seven arms at PILOT_LR on tuning seeds 140-143; its paired SDs size the main runs.
    "regularisers_pilot": _regularisers_experiment(
        "regularisers_pilot", "section 8's pilot, step 2: the seven arms on tuning seeds, sizing the main runs "
        "(docs/collapse.md 8)", Seeds("tuning", first=140, count=4), "PILOT_LR"),
}



def build_experiment(name: str, seeds: list[int], configs_dir: Path, cache_dir: Path, quick: bool = False,
                     groups: tuple[str, ...] | None = None) -> list[RunSpec]:
    """The runs of experiment `name` on `seeds` (:func:`ragen_core.apps.reproduce.spec.build_runs`).

    Raises:
        ValueError: an unknown experiment, no or repeated seeds, or seeds of the wrong kind (a reporting
            experiment never uses the tuning seeds 100-199; a search uses only them).
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; expected one of {', '.join(EXPERIMENTS)}")
    return build_runs(EXPERIMENTS[name], seeds, configs_dir, cache_dir, quick=quick, groups=groups)


def _own_runs(name: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`own_records`, refused when two of them are one run (the analysis's
    :func:`ragen_core.apps.reproduce.analysis.check_one_run_each` raises RecordsError)."""
    own = own_records(name, records)
    check_one_run_each(own)
    return own


def own_records(name: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records` with the runs a variant shares with another experiment (``Variant.same_runs_as``) renamed to this
    experiment and that variant; the others unchanged."""
    alias = {v.same_runs_as: v.name for v in EXPERIMENTS[name].variants if v.same_runs_as}
    return [{**r, "env": name, "arm": alias[(r.get("env"), r.get("arm"))]}
            if (r.get("env"), r.get("arm")) in alias else r for r in records]
