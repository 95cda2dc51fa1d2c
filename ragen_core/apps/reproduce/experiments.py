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
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from ragen_core.apps.reproduce.analysis import OUTCOMES, PAIRED, finding_filtering, fmt_unit, power_analysis
from ragen_core.apps.reproduce.analysis import analyse as analyse_study
from ragen_core.apps.reproduce.report import write_report
from ragen_core.apps.reproduce.spec import Experiment, RunSpec, Seeds, Variant, build_runs
from ragen_core.apps.reproduce.study import STUDY
from ragen_core.apps.reproduce.verdicts import (
    CHANGE_LABELS,
    DIRECTION_LABELS,
    ChangeRule,
    ShareRule,
    compare,
    mean_of,
    paired,
    pct,
    verdict_text,
)
from ragen_core.math.collapse import detect_harmful_collapse
from ragen_core.math.stats import seed_plan as plan_seeds

__all__ = ["Variant", "Experiment", "EXPERIMENTS", "PREDICTIONS", "STABLE_BOUND", "CHANGE_RULE", "FILTER_COMPARISONS",
           "FILTER_EFFECT", "FILTER_SEEDS", "build_experiment", "analyse", "markdown", "own_records", "seed_plan",
           "write_experiment", "write_study"]

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


def classify(deltas: list[float], rule: ChangeRule = CHANGE_RULE) -> dict[str, Any]:
    """The class of an arm's margin changes: the verdict of :func:`ragen_core.apps.reproduce.verdicts.compare` on
    the changes (direction +1, equivalence within +-``rule.bound``) under the labels falls / rises / stable /
    unclear, with the mean, both intervals and the rest of the comparison's numbers."""
    c = compare(deltas, rule.paired, rule.bound)
    return {**c.as_dict(), "class": CHANGE_LABELS[c.verdict]}


def _paired(a: dict[int, float], b: dict[int, float], rule: ChangeRule = CHANGE_RULE) -> dict[str, Any]:
    c = paired(a, b, rule.paired, rule.bound)
    return {**c.as_dict(), "class": CHANGE_LABELS[c.verdict], "direction": DIRECTION_LABELS[c.verdict]}


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
    out, by_arm = _runs_by_arm(name, own_records(name, records))
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
    out.update(arms=arms, dose=dose, payoff=payoff,
               accounts=[_account_verdict(a, arms, dose) for a in PREDICTIONS], probe_noise=probe_noise(runs))
    return out


def _analyse_filter(name: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Finding 3 by the study's rules on this experiment's runs, each arm's training summary, the seed plan."""
    records = own_records(name, records)
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
    """Per candidate: which seeds show a collapse that emerges and hurts, and whether enough do (its ShareRule)."""
    out, by_arm = _runs_by_arm(name, own_records(name, records))
    rule: ShareRule = EXPERIMENTS[name].rule
    cands = {}
    for a, rs in by_arm.items():
        flags = [bool(r.get("harmful", {}).get("harmful")) for r in rs]
        cands[a] = {"seeds": [r["seed"] for r in rs], "harmful": flags, "needed": rule.needed(len(flags)),
                    "shows_it": bool(flags) and rule.met(sum(flags), len(flags))}
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
             f"- seeds: {header.get('seeds')} ({'tuning seeds' if exp.seeds.kind == 'tuning' else 'fresh seeds'}), "
             f"{header.get('n_runs')} runs ({header.get('n_missing', 0)} missing), "
             f"{_f(header.get('core_minutes'), '{:.0f}')} core-minutes",
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
    p = res["seed_plan"]
    lines += ["", "## Seeds for the main comparison (the power analysis of section 7.4)", "",
              f"From these runs' paired SD of the primary outcome ({_f(p.get('sd'))}): {_plan_text(p)} -> **{p['n']} "
              f"seeds**, which detect {_f(p.get('mde'))} of end margin at {pct(p.get('power', PAIRED.power))} "
              "power."]
    return lines


def _search_md(res: dict[str, Any]) -> list[str]:
    share = EXPERIMENTS[res["experiment"]].rule
    n = len(next(iter(res["candidates"].values()), {}).get("seeds", [])) or None
    rule = ("every seed meets" if share.share >= 1 else f"at least {pct(share.share)} of its seeds"
            + (f" ({share.needed(n)} of {n})" if n else "") + " meet")
    lines = ["## Candidates", "", f"A candidate shows a collapse that emerges and hurts when {rule} all three "
             "conditions (`ragen_core.math.collapse.detect_harmful_collapse`): the probe margin falls to "
             f"{pct(HARMFUL['drop'])} of its peak or below and stays there, success at the end is no higher than at "
             f"the peak, token entropy and H(Z|X) stay within +-{pct(HARMFUL['band'])} of the peak's values to the "
             "end of the run.", "",
             "| candidate | seeds | per seed | shows it |", "|---|---|---|---|"]
    for a, c in res["candidates"].items():
        per = ", ".join(f"{s}: {'yes' if h else 'no'}" for s, h in zip(c["seeds"], c["harmful"]))
        lines.append(f"| `{a}` | {len(c['seeds'])} | {per} | **{'yes' if c['shows_it'] else 'no'}** |")
    return lines


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


# ---------------------------------------------------------------------------------------------- writing
def write_experiment(name: str, records: list, report_dir: str | Path, header: dict) -> Path:
    """Analyse an experiment's records and write ``NAME.md``, ``NAME/results.json`` and ``NAME/curves.png``."""
    folder = Path(report_dir)
    (folder / name).mkdir(parents=True, exist_ok=True)
    result = analyse(name, records)
    header = {**header, "regenerate": f"ragen reproduce --from-results {folder / name / 'results.json'} "
                                      f"--report-dir {folder}"}
    text = markdown(result, header) + f"\n![curves]({name}/curves.png)\n\nRegenerate: `{header['regenerate']}`\n"
    (folder / f"{name}.md").write_text(text)
    (folder / name / "results.json").write_text(json.dumps({"experiment": name, "header": header,
                                                            "analysis": result, "records": records}, indent=1,
                                                           default=str) + "\n")
    fig = figure(result, records)
    fig.savefig(folder / name / "curves.png", dpi=110)
    return folder / f"{name}.md"


def write_study(records: list, report_dir: str | Path, header: dict) -> Path:
    """Analyse the study's records and write ``reproduction.md`` and ``reproduction/`` (results.json, figures)."""
    results = Path(report_dir) / "reproduction" / "results.json"
    header = {**header, "regenerate": f"ragen reproduce --from-results {results} --report-dir {report_dir}"}
    return write_report({"analysis": analyse_study(records), "records": records}, report_dir, header)


_SECTIONS = {}  # experiment name -> its report's own sections, filled with the registry below


def _collapse_experiment(name: str, about: str, variants: tuple[Variant, ...], seeds: Seeds, common: tuple[str, ...],
                         rule: Any, outcomes: dict[str, str], analysis: Any, sections: Any) -> Experiment:
    _SECTIONS[name] = sections
    return Experiment(name, about, variants, seeds, outcomes=outcomes, rule=rule, common=common,
                      analyse=partial(analysis, name), write=partial(write_experiment, name))



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


def own_records(name: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records` with the runs a variant shares with another experiment (``Variant.same_runs_as``) renamed to this
    experiment and that variant; the others unchanged."""
    alias = {v.same_runs_as: v.name for v in EXPERIMENTS[name].variants if v.same_runs_as}
    return [{**r, "env": name, "arm": alias[(r.get("env"), r.get("arm"))]}
            if (r.get("env"), r.get("arm")) in alias else r for r in records]
