"""The study's report: ``reproduction.md`` with its tables, the paper's numbers beside ours, and PNG figures.

Everything in the report is computed from the analysis dict (:func:`ragen_core.apps.reproduce.analysis.analyse`),
which is computed from the run records alone, so ``ragen reproduce --from-results results.json`` regenerates the
report without the run folders. The outcomes and verdict rules are printed first, before any number of the study;
every verdict is one of "held", "contradicted", "equivalent (within +-B)", "inconclusive (why)", "not testable
(why)" or "not tested (why)" (finding 1, a positive control: "passed" / "failed"), read off the intervals by the
rules, so regenerating the report from other runs never keeps a stale conclusion.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ragen_core.apps.reproduce.analysis import (
    CEILING_NORM,
    CORRELATION_PAIRS,
    GRPO_LABEL,
    OUTCOMES,
    PAPER,
    RULES,
    StudyRules,
    fmt_unit,
)
from ragen_core.apps.reproduce.runner import PHASES, design_cost
from ragen_core.apps.reproduce.spec import MAX_SEEDS
from ragen_core.apps.reproduce.study import ARMS
from ragen_core.apps.reproduce.verdicts import pct, unpaired_text, verdict_text
from ragen_core.jsonio import strict_dumps

__all__ = ["write_report", "markdown", "collapse_figure", "FIGURES", "control_verdict_text", "pair_verdict_text"]

FIGURES = ("collapse_curves.png", "filtering.png", "correlations.png", "quartiles.png")
_LABEL = {"mi_zscore_ema": "MI-ZScore-EMA (in-batch)", "mi_seq_est": "MI-Seq-Est (in-batch)",
          "retrieval_acc": "retrieval accuracy (in-batch)", "cond_entropy_est": "H(Z|X) (in-batch)",
          "marginal_entropy_est": "marginal entropy H(Z) (in-batch)", "probe_mi_seq_norm": "MI-Seq / log N (probe)",
          "probe_retrieval_margin": "retrieval margin (probe)", "probe_cond_entropy_est": "H(Z|X) (probe)",
          "probe_token_entropy": "token entropy (probe)"}
_PAPER_LABEL = {"mi_zscore_ema": "MI-ZScore (trajectory)", "mi_seq_est": "MI-Seq", "cond_entropy_est":
                "conditional entropy", "marginal_entropy_est": "marginal entropy"}
_ENV_LABEL = {"collapse_sokoban": "collapse-prone Sokoban", "collapse_frozenlake": "collapse-prone FrozenLake",
              "sokoban": "Sokoban", "frozenlake": "FrozenLake"}


def _ok(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f}" if _ok(x) else "n/a"


def _pct_sign(x: float | None) -> str:
    """A share as a percentage with its sign ("42.5%"), "n/a" (not "n/a%") when it is not known."""
    return f"{_pct(x)}%" if _ok(x) else "n/a"


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return fmt.format(x) if _ok(x) else "n/a"


def _signed(x: float | None, unit: str) -> str:
    if not _ok(x):
        return "n/a"
    return {"points": f"{100 * x:+.1f}", "steps": f"{x:+.1f}"}.get(unit, f"{x:+.3f}")


def _plain(x: float | None, unit: str) -> str:
    if not _ok(x):
        return "n/a"
    return {"points": f"{100 * x:.1f}", "steps": f"{x:.1f}"}.get(unit, f"{x:.3f}")


def _interval(ci: list[float | None], unit: str) -> str:
    lo, hi = ci
    return "n/a" if not (_ok(lo) and _ok(hi)) else f"[{_signed(lo, unit)}, {_signed(hi, unit)}]"


def _rho(x: float | None) -> str:
    return _num(x, "{:+.2f}")


def _rho_ci(ci: list[float | None]) -> str:
    lo, hi = ci
    return "n/a" if not (_ok(lo) and _ok(hi)) else f"[{lo:+.2f}, {hi:+.2f}]"


def _verdict(v: str) -> str:
    return f"**{v}**" if v in ("held", "contradicted", "passed", "failed") or v.startswith("equivalent") else v


def control_verdict_text(e: dict[str, Any]) -> str:
    """Finding 1's verdict with its reason, worded from the numbers stored beside it
    (:func:`ragen_core.apps.reproduce.analysis.finding_collapse`); an older results file's verdict string that
    already carries its reason is returned as it is."""
    v = str(e.get("verdict", ""))
    if "(" in v:
        return v
    if e.get("reason") == "no_runs":
        return f"{v} (no no-filter run with probe measurements)"
    if e.get("reason") == "criterion_not_met":
        n, min_seeds = e["seeds"], e["min_seeds"]
        why = []
        if n < min_seeds:
            why.append(f"{n} seed{'s' if n > 1 else ''}; the criterion needs >= {min_seeds}")
        why.append(f"signature on {e['seeds_with_signature']} of {n}")
        if e["seeds_no_drop"]:
            why.append(f"no MI drop on {e['seeds_no_drop']}")
        if e["seeds_entropy_first"]:
            why.append(f"entropy alarm at or before the drop on {e['seeds_entropy_first']}")
        return f"{v} ({'; '.join(why)})"
    return v


def pair_verdict_text(p: dict[str, Any]) -> str:
    """Finding 2's verdict on a pair with its reason, worded from the numbers stored beside it
    (:func:`ragen_core.apps.reproduce.analysis.finding_correlations`); an older results file's verdict string that
    already carries its reason is returned as it is."""
    v, reason = str(p.get("verdict", "")), p.get("reason")
    if "(" in v:
        return v
    metric = {"mi": "the MI metric", "entropy": "the entropy metric"}.get(p.get("metric_role") or "", "a metric")
    if reason == "at_ceiling":
        label = (p.get("ceiling") or {}).get("metric") or "MI"
        return (f"{v} (at the ceiling: early {label} above {p['threshold']} on {p['at_ceiling_runs']} of "
                f"{p['runs']} runs)")
    if reason == "not_measured":
        return f"{v} ({metric} was not measured)"
    if reason == "tied":
        return f"{v} ({metric} is constant/tied in every env: not correlated)"
    if reason == "no_interval":
        return f"{v} (no bootstrap interval: it needs >= {p['min_seeds']} seeds and defined rhos)"
    if reason == "interval_contains_0":
        return f"{v} (the interval of abs(rho_MI) - abs(rho_H) contains 0, or rho_MI's does)"
    return v


def _ratio(x: float | None) -> str:
    return _num(x, "{:.2f}x")


def _range(sp: dict[str, Any], fmt: str = "{:.2f}") -> str:
    """``min-max (median m)`` of a spread dict, "none" when it is empty."""
    if not sp or not sp.get("n"):
        return "none"
    lo, hi, med = (fmt.format(sp[k]) for k in ("min", "max", "median"))
    return f"{lo}-{hi} (median {med}, {sp['n']} runs)"


def _env(env: str) -> str:
    return _ENV_LABEL.get(env, env)


def markdown(result: dict[str, Any], figures_rel: str, header: dict[str, Any]) -> str:
    """The whole report as Markdown; `figures_rel` is the figures' folder relative to the report."""
    a = result["analysis"]
    regenerate = header.get("regenerate") or "ragen reproduce --from-results reproduction/results.json"
    lines = [
        "# Reproducing RAGEN-2's findings at small scale",
        "",
        "_Generated by `ragen reproduce`; do not edit by hand. Every number below is computed from the run records "
        f"kept in `{figures_rel}/results.json`: `{regenerate}` regenerates this file and its figures from them "
        f"alone (no run folders needed); `{header['command']}` reruns or resumes the study itself (finished runs "
        "are not re-run)._",
        "",
        f"- study: **{header['mode']}**, {header['n_runs']} runs ({header['n_missing']} missing), training seeds "
        f"{header['seeds']} (the tuning seeds 100-199 are never used), {header['core_minutes']:.0f} core-minutes "
        "of training" + cost_text(header.get("cost")),
        f"- machine: {header['machine']}",
        "- model: the project's tiny offline model (0.62 M parameters), warm-started by a demonstrator, then RL. "
        "Findings 1 and 3 run on the collapse-prone configs (`configs/collapse_sokoban.toml`, "
        "`configs/collapse_frozenlake.toml`: the reasoning starts input-dependent but off the MI ceiling, and the "
        "demonstrator makes the template path pay, so the collapse is built in), findings "
        "2 and 4 on the learning configs (`configs/sokoban_tiny.toml`, `configs/frozenlake_tiny.toml`, with the "
        "held-out probe on). The paper trains Qwen2.5-3B (and 0.5B-14B) for 200+ steps; every number here is "
        "from a model ~5000x smaller, so the direction of an effect is what can be checked, not its size.",
        "- arms (overrides of the base config):",
    ]
    for name, arm in header["arms"].items():
        lines.append(f"  - `{name}`: {arm['purpose']} (`{' '.join(arm['overrides']) or 'as shipped'}`)")
    lines += ["", *_rules(RULES, PAPER), "", "## Summary", "", "| finding | paper | here | verdict |",
              "|---|---|---|---|",
              *_summary_rows(a), "",
              *_section_collapse(a["collapse"], figures_rel), "",
              *_section_co_movement(a.get("co_movement")), "",
              *_section_correlations(a["correlations"], figures_rel), "",
              *_section_filtering(a["filtering"], a["collapse"], figures_rel), "",
              *_section_power(a.get("power", [])), "",
              *_section_quartiles(a["quartiles"], figures_rel), "",
              *_section_paper(), "", *_section_resolution(a["filtering"]), "",
              *_section_runs(a["runs"]), "", *_then_blank(_section_cost(header, result.get("records"))),
              *_section_provenance(a["runs"]), "", *_definitions()]
    if header["n_missing"]:
        lines += ["", f"**Missing runs** (not included above): {', '.join(header['missing'])}."]
    # A "|" inside a table cell would split it: escape the one in H(Z|X) on table rows.
    lines = [line.replace("H(Z|X)", "H(Z\\|X)") if line.startswith("|") else line for line in lines]
    return "\n".join(lines) + "\n"


def _bounds_text(rules: StudyRules) -> str:
    fmt = {k: fmt_unit(OUTCOMES[k][1]) for k in OUTCOMES}
    return ", ".join(f"{OUTCOMES[k][0].split(' (')[0]} +-{fmt[k](b)}" for k, b in rules.paired.bounds.items())


def _arm_value(arm: str, key: str) -> float:
    """The value an arm of the study sets for a config key (e.g. top-p's ``filter.value``)."""
    return float(next(o.split("=", 1)[1] for o in ARMS[arm].overrides if o.split("=", 1)[0] == key))


def _paper_pair(mi: str, h: str, paper: dict[str, Any]) -> str:
    """The paper's rhos of a pair of finding 2, e.g. "MI-ZScore (trajectory) +0.39 vs conditional entropy -0.14"."""
    return f"{_PAPER_LABEL[mi]} {paper['spearman'][mi]:+.2f} vs {_PAPER_LABEL[h]} {paper['spearman'][h]:+.2f}"


def _paper_spearman(paper: dict[str, Any]) -> str:
    return ", ".join(f"{_PAPER_LABEL[k]} {v:+.2f}" for k, v in paper["spearman"].items())


def _paper_quartiles(paper: dict[str, Any]) -> str:
    q = paper["quartiles"]
    top, bottom = q["rv_top_quartile"], q["rv_bottom_quartile"]
    return f"success {top['success']}% vs {bottom['success']}%, MI proxy {top['mi']} vs {bottom['mi']}"


def _rules(rules: StudyRules = RULES, paper: dict[str, Any] = PAPER) -> list[str]:
    """The outcomes and verdict rules, every number read from `rules` (the rule objects the analysis applies),
    `paper` (:data:`ragen_core.apps.reproduce.analysis.PAPER`) or the study's arms: the prose cannot say one thing
    while the code does another."""
    pr, ctl, det, cor = rules.paired, rules.control, rules.detector, rules.correlation
    first, last = rules.post_hoc_seeds
    rho = _arm_value("top_p", "filter.value")
    quarter = _arm_value("rv_bottom_quartile", "filter.value")
    mi_pair, probe_pair = CORRELATION_PAIRS[0], CORRELATION_PAIRS[1]
    probe_mi = _LABEL[probe_pair[0]].replace(" (probe)", "")
    return [
        "## Outcomes and verdict rules", "",
        f"Every verdict below is one of **held** (the {pct(pr.level)} interval excludes 0 in the paper's direction), "
        f"**contradicted** (it excludes 0 in the other direction), **equivalent** (the {pct(pr.equivalence_level)} "
        f"interval lies within the equivalence bounds: two one-sided tests at alpha {pr.equivalence_alpha}), "
        f"*inconclusive* (with the smallest effect the study could have detected at {pct(pr.power)} power), *not "
        "testable* (the metric sits at its ceiling) or *not tested* (with the reason); finding 1, a positive "
        "control, **passed** or **failed**. A difference that the study cannot resolve is inconclusive, never a "
        "failed prediction.", "",
        "The first study's rules were fixed before its runs. The equivalence outcome and its bounds, the early-stop "
        "pairing rule, the ceiling rule and the labels of findings 1 and 4 were added after the study on seeds "
        f"{first}-{last} had been run: on those runs they are post hoc; on any study run after them they are "
        "pre-specified.",
        "",
        "1. **A positive control: the detector finds a collapse built into the demonstrator** (collapse-prone "
        "configs, `no_filter` arm). The warm start answers with a habit after reasoning about the state and with "
        "the oracle's move after the fixed template, so the template path pays and RL takes it: the collapse is "
        "constructed, and this finding checks the detector, not the paper's claim that template collapse in "
        "RL-trained LLMs is invisible to entropy. Per run, on the held-out probe, the retrieval margin over chance "
        f"falls to {pct(det.drop)} of its peak or below (the highest margin before the fall, step 0 included) and "
        f"stays there at the next measurement, while token entropy and H(Z|X) stay within +-{pct(det.band)} of "
        "their values at that peak, with no entropy alarm from the peak to the drop "
        f"(`ragen_core.math.collapse.detect_collapse`). *Passed*: the signature on >= {pct(ctl.share)} of the seeds, "
        f"with >= {ctl.min_seeds} seeds (>= {ctl.needed(ctl.min_seeds)} of {ctl.min_seeds}). *Failed*: on most seeds "
        "the MI drop comes only with an entropy alarm at or before it. Otherwise *inconclusive*. Reported beside it, "
        "from the same records: how margin and token entropy move together within a run, the entropy ratios at the "
        "end of the run (not only at the drop), how well the end/start entropy ratio alone separates collapsed runs "
        "(AUC), and the association of the end margin with final success.",
        f"2. **MI predicts success better than entropy** (learning configs): Spearman's rho of each metric's early "
        f"value (the first {pct(cor.early_fraction)} of the run's steps) with final validation success, within each "
        f"env and pooled over envs on env-centred ranks; {pct(cor.level)} intervals from a bootstrap that resamples "
        f"seeds (all runs of a seed together; {cor.n_boot} resamples, none with fewer than {cor.min_boot_seeds} "
        "seeds). A metric constant or tied (one value on more than half of an env's runs, at "
        f"{cor.sig_digits} significant digits) is reported as such and not correlated. Pairs fixed in advance: "
        f"in-batch MI-ZScore-EMA vs in-batch H(Z|X) (the paper's {_paper_pair(*mi_pair, paper)}), and the probe's "
        f"{probe_mi} vs its H(Z|X). *Not testable (at the ceiling)*: the pair's MI over its ceiling (in-batch "
        f"MI-Seq / log P; the probe's {probe_mi}) has an early value above {cor.ceiling_norm} on more than "
        f"{pct(cor.ceiling_share)} of the runs. *Held*: the interval of |rho_MI| - |rho_H| is above 0 and rho_MI's "
        "is above 0; *contradicted*: the difference's is below 0.",
        f"3. **Filtering prevents the collapse** (collapse-prone configs): `top_p` (rho {rho}) minus `no_filter` and "
        "`top_p` minus `random` (the same number of groups, drawn at random), paired by seed, on (a) the probe "
        "retrieval margin at the last probe measurement (**primary**), (b) the steps until the MI drop (a run "
        "without a drop is carried at its last probe step: censored), (c) validation success at the last "
        f"evaluation. Each: the paired mean difference, its {pct(pr.level)} and {pct(pr.equivalence_level)} "
        f"t-intervals, the paired SD and the minimum detectable effect at {pct(pr.power)} power (two-sided alpha "
        f"{pr.alpha:g}). The paper's direction: filtering higher / later. Equivalence bounds: {_bounds_text(rules)} "
        "(why these: `EQUIVALENCE_BOUNDS` in `ragen_core/apps/reproduce/analysis.py`). Verdicts in the order held, "
        "contradicted, equivalent, inconclusive. **Early stop**: a run that did fewer steps than its config is "
        "compared with its partner at equal steps, each outcome read for both runs at the last step at which both "
        "have a measurement of it (probe steps for the margin and the drop, evaluation steps for success; the drop "
        "censored there); a pair whose last common measurement is step 0 has no value on that outcome. The number "
        "of such pairs is reported, and every comparison with one is repeated without them (sensitivity).",
        "4. **RV quartiles** (Sokoban learning config): top minus bottom quartile, paired by seed, at equal steps "
        "(the last step at which both runs of a seed have a measurement) and at the end with a run that stopped "
        "early carried at its last value; success against success, the in-batch MI-Seq / log P of both arms, the "
        f"probe's {probe_mi} of both arms (*not testable* when both arms are above the ceiling of rule 2), by "
        "the paired rule of rule 3 without equivalence bounds. The paper's direction: top higher. A success "
        f"verdict is labelled *{GRPO_LABEL}*: a zero-variance group has exactly zero GRPO advantage, and the bottom "
        f"quartile keeps only the {pct(quarter)} of the groups with the least reward variance, so only such groups "
        "whenever that many have no variance.",
    ]


def _margin_success_reading(ci: Any) -> tuple[str, str]:
    """What the within-env correlation of the end margin with final success shows, worded from its 95% interval
    (the sentence used to say "the collapse comes with higher success" whatever the interval): a margin that falls
    (collapse) with success rising is rho < 0."""
    lo, hi = (ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None))
    if _ok(hi) and hi < 0:
        return "here the collapse comes with higher success", "on this testbed the collapse is the path that pays"
    if _ok(lo) and lo > 0:
        return "here the collapse comes with lower success", "on this testbed the collapse costs success"
    return ("no relation shown (the interval contains 0, or there is none)",
            "on this testbed the collapse is not shown to pay or to cost success")


def _summary_rows(a: dict[str, Any]) -> list[str]:
    rows = []
    cm = a.get("co_movement") or {}
    for env, c in a["collapse"].items():
        nf = c["arms"].get("no_filter")
        here = "no no-filter run with probe measurements"
        if nf and nf["n"]:
            drops = [str(r["drop_step"]) for r in nf["runs"] if r["drop_step"] is not None]
            here = (f"signature on {nf['n_collapsed']} of {nf['n']} no-filter seeds; MI drop at steps "
                    f"{', '.join(drops) or 'none'}; entropy alarm at or before the drop on {nf['n_entropy_first']}")
        g = (cm.get("by_group") or {}).get(env)
        if g and g["n"]:
            here += (f". Beside it ({g['n']} full-length runs of every arm but the entropy bonus): margin and token "
                     f"entropy move together (within-run r median {_rho(g['pearson']['median'])}, > 0 in "
                     f"{g['pearson']['n_positive']} of {g['pearson']['n']}); end/start token entropy of the collapsed "
                     f"runs {_range(g['ratios']['collapsed']['token_end_start'])}, AUC "
                     f"{_num(g['auc_token_end_start'], '{:.2f}')} for telling them from the rest")
        rows.append(f"| 1. positive control: the detector finds the collapse the demonstrator builds, {_env(env)} | "
                    "MI falls while entropy stays flat (a claim about RL-trained LLMs, not tested by a constructed "
                    f"collapse) | {here} | {_verdict(control_verdict_text(c))} (a positive control, not evidence "
                    "for the paper's claim) |")
    ms = cm.get("margin_success")
    if ms and ms["n_runs"]:
        w = ms["within_env"]
        allg = (cm.get("by_group") or {}).get("all") or next(iter((cm.get("by_group") or {}).values()), None)
        tail = ""
        if allg and allg["max_success_not_collapsed"] is not None:
            tail = f"; every run without the signature ended at <= {_pct(allg['max_success_not_collapsed'])}% success"
        found, reading = _margin_success_reading(w.get("ci95"))
        rows.append(f"| collapse and success (collapse-prone configs) | filtering raises both MI and success | end "
                    f"margin vs final success within env: rho {_rho(w['rho'])} {_rho_ci(w['ci95'])} ({ms['n_runs']} "
                    f"runs, {ms['n_seeds']} seeds): {found}{tail} | descriptive (no verdict): {reading} |")
    corr = a["correlations"]
    for p in corr["pairs"]:
        mi, h = corr["metrics"][p["mi"]], corr["metrics"][p["entropy"]]
        here = (f"{_LABEL[p['mi']]} {_metric_rho(mi)}; {_LABEL[p['entropy']]} {_metric_rho(h)} (within env, "
                f"{corr['n_runs']} runs, {corr['n_seeds']} seed{'' if corr['n_seeds'] == 1 else 's'})")
        if p.get("ceiling") and p["ceiling"]["n"]:
            ce = p["ceiling"]
            here += (f"; early {ce['metric']} {_num(ce['min'], '{:.5f}')} to {_num(ce['max'], '{:.5f}')}, above "
                     f"{CEILING_NORM} on {ce['n_at_ceiling']} of {ce['n']} runs")
        paper = _paper_pair("mi_zscore_ema" if p["mi"] == "mi_zscore_ema" else "mi_seq_est", "cond_entropy_est", PAPER)
        rows.append(f"| 2. MI predicts success better than entropy | {paper} | {here} | "
                    f"{_verdict(pair_verdict_text(p))} |")
    for env, f in a["filtering"].items():
        for comp, c in f["comparisons"].items():
            m = c["margin_end"]
            s = c["success_end"]
            here = (f"probe margin at the end {_signed(m['mean'], 'margin')} {_interval(m['ci95'], 'margin')} "
                    f"(n = {m['n']}); success {_signed(s['mean'], 'points')} points {_interval(s['ci95'], 'points')}"
                    f" (n = {s['n']})" if m["n"] or s["n"] else "no seed with both arms measured")
            if m.get("early_seeds"):
                here += (f"; seed{'s' if len(m['early_seeds']) > 1 else ''} "
                         f"{', '.join(map(str, m['early_seeds']))} at equal steps (a run stopped early)")
            if m.get("unpaired"):
                here += f"; {unpaired_text(m['unpaired'])}"
            paper = (f"top-p minus no filter, peak success: {_paper_effects(env)}" if comp == "top_p-no_filter"
                     else "not reported")
            rows.append(f"| 3. {comp.replace('-', ' minus ').replace('_', '-')}, {_env(env)} "
                        f"(primary: probe margin) | {paper} | {here} | "
                        f"margin: {_verdict(verdict_text(m, fmt_unit('margin')))}; "
                        f"success: {_verdict(verdict_text(s, fmt_unit('points')))} |")
    q = a["quartiles"]
    eq = q["equal_steps"].get("success")
    if eq and eq["n"]:
        mi = q["equal_steps"]["mi_norm"]
        bottom = q["arms"].get("rv_bottom_quartile", {})
        stops = bottom.get("stopped_early") or []
        label = f" ({q.get('label', GRPO_LABEL)})" if eq["verdict"] == "held" else ""
        lone = f"; {unpaired_text(q['unpaired'])}" if q.get("unpaired") else ""
        rows.append(f"| 4. RV quartiles, top minus bottom at equal steps | {_paper_quartiles(PAPER)} | success "
                    f"{_signed(eq['mean'], 'points')} points {_interval(eq['ci95'], 'points')}; "
                    f"in-batch MI-Seq / log P {_signed(mi['mean'], 'margin')}; zero-variance groups per step: top "
                    f"{_pct_sign(q['arms'].get('rv_top_quartile', {}).get('zero_variance_fraction'))}, bottom "
                    f"{_pct_sign(bottom.get('zero_variance_fraction'))}; {len(stops)} of "
                    f"{len(bottom.get('seeds', []))} bottom runs stopped early{lone} | success: "
                    f"{_verdict(verdict_text(eq, fmt_unit('points')))}{label}; "
                    f"MI: {_verdict(verdict_text(mi, fmt_unit('margin')))} |")
    else:
        lone = f" ({unpaired_text(q['unpaired'])})" if q.get("unpaired") else ""
        rows.append(f"| 4. RV quartiles | {_paper_quartiles(PAPER)} | no seed with both quartile "
                    f"runs{lone} | not tested (no seed has both arms) |")
    return rows


def _paper_effects(env: str) -> str:
    """The paper's filtering effects on the task of `env`, every setting, signs kept."""
    task = "Sokoban" if "sokoban" in env else "FrozenLake" if "frozenlake" in env else None
    if task is None:
        return "not reported"
    return f"{task} " + ", ".join(f"{row[task]:+.1f} ({setting})" for setting, row in PAPER["filtering"].items()
                                  if task in row) + " points"


def _metric_rho(m: dict[str, Any]) -> str:
    if m["n"] == 0:
        return "not measured"
    if not m["envs_used"]:
        return "constant/tied: not correlated"
    return f"{_rho(m['rho'])} {_rho_ci(m['ci95'])}"


def _section_collapse(c: dict[str, Any], rel: str) -> list[str]:
    lines = ["## 1. A positive control: the detector on a collapse the demonstrator builds", "",
             f"![collapse curves]({rel}/collapse_curves.png)", "",
             "Per run, from the held-out probe (margin = retrieval margin over chance, 0 = chance, 1 = perfect; "
             "alarm = first step outside +-25%). Entropy ratios: at the drop step (what the detector reads; at the "
             "end without a drop) and at the end of the run, both over step 0. The demonstrator of these configs "
             "makes the template path pay, so a collapse is expected; the verdict says whether the detector sees "
             "it, not whether template collapse is invisible to entropy in the paper's setting.", ""]
    for env, e in c.items():
        lines += [f"### {_env(env)}: {_verdict(control_verdict_text(e))}", ""]
        if not e["arms"]:
            lines += ["No run of this env was reported.", ""]
            continue
        lines += ["| arm | seed | steps | collapsed | MI drop at step | token-entropy alarm | H(Z|X) alarm | "
                  "margin start / min / end | token entropy ratio at the drop / at the end | H(Z|X) ratio at the "
                  "drop / at the end | final success (%) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for arm, a in e["arms"].items():
            for r in a["runs"]:
                steps = f"{r['steps']}" + (" (stopped early)" if r.get("stopped_early") else "")
                lines.append(
                    f"| `{arm}` | {r['seed']} | {steps} | {'yes' if r['collapsed'] else 'no'} | "
                    f"{r['drop_step'] or 'never'} | {_step(r['entropy_alarm_step'])} | "
                    f"{_step(r['cond_entropy_alarm_step'])} | "
                    f"{_num(r['margin_start'])} / {_num(r['margin_min'])} / {_num(r['margin_end'])} | "
                    f"{_num(r['entropy_ratio'], '{:.2f}')} / {_num(r.get('token_end_start'), '{:.2f}')} | "
                    f"{_num(r['cond_entropy_ratio'], '{:.2f}')} / {_num(r.get('cond_end_start'), '{:.2f}')} | "
                    f"{_pct(r['final_success'])} |")
            if a["no_probe"]:
                seeds = ", ".join(map(str, a["no_probe"]))
                lines.append(f"| `{arm}` | {seeds} | | no probe measurements | | | | | | | |")
            for x in a.get("refused", []):  # curves the detector could not judge: not counted either way
                lines.append(f"| `{arm}` | {x['seed']} | | not judged: {x['reason']} | | | | | | | |")
        lines.append("")
        for arm, a in e["arms"].items():
            for r in a["runs"]:
                said = [f"`{k}` n/a: {why}" for k, why in (r.get("not_measured") or {}).items()]
                if r.get("left_out_steps"):
                    said.append("probe steps left out of the detector's curves (a null value): "
                                + ", ".join(map(str, r["left_out_steps"])))
                if said:
                    lines.append(f"- `{arm}` seed {r['seed']}: " + "; ".join(said) + ".")
        for arm, a in e["arms"].items():
            if a["n"]:
                stops = a.get("stopped_early") or []
                stop = ("; stopped early: " + ", ".join(f"seed {x['seed']} at step {x['steps']} of "
                                                        f"{e.get('planned_steps')}" for x in stops)) if stops else ""
                refused = a.get("refused") or []
                stop += ("; not judged (the detector refused the probe curves), so not counted: seed"
                         f"{'s' if len(refused) > 1 else ''} {', '.join(str(x['seed']) for x in refused)}"
                         if refused else "")
                lines.append(f"- `{arm}`: signature on {a['n_collapsed']} of {a['n']} seeds, MI drop only after an "
                             f"entropy alarm on {a['n_entropy_first']}, no MI drop on {a['n_no_drop']}{stop}.")
        if "entropy_bonus" in e["arms"]:
            lines.append("- `entropy_bonus` is an extra, not a test of the finding: a strong entropy bonus turns the "
                         "text into noise, so its MI falls after (or with) an entropy alarm: entropy-driven, not "
                         "template collapse.")
        lines.append("")
    return lines


def _section_co_movement(cm: dict[str, Any] | None) -> list[str]:
    """Entropy and success alongside the margin (beside finding 1)."""
    lines = ["## 1b. What entropy and success do while the margin falls", ""]
    if not cm or not cm.get("runs"):
        return lines + ["Not available: no full-length run of the collapse-prone configs with probe measurements."]
    stops = cm.get("stopped_early") or []
    lines += [f"The {len(cm['runs'])} runs of the collapse-prone configs that ran their config's steps, every arm but "
              f"{', '.join(f'`{x}`' for x in cm['excluded_arms'])} (it moves entropy by design)"
              + (f"; left out because they stopped early: {', '.join(stops)}" if stops else "") + ". Within-run "
              "correlation: Pearson's r (and Spearman's rho) of the probe's margin and token entropy over a run's "
              "measurements. Ratios at the end: the last probe measurement over step 0 (end/start) and over the "
              "detector's reference, the margin's peak before its drop (end/ref). AUC: the probability that a "
              "collapsed run has a lower end/start ratio than a run without the signature (1 = the ratio alone "
              "separates them, 0.5 = chance).", "",
              "| runs | n (collapsed) | r(margin, token entropy): median, > 0 | rho: median, > 0 | token entropy "
              "end/start, collapsed | H(Z|X) end/start, collapsed | token entropy end/ref, collapsed | H(Z|X) "
              "end/ref, collapsed | token entropy at the drop, collapsed | token entropy end/start, the rest | "
              "AUC token entropy / H(Z|X) end/start | final success (%): highest without the signature, lowest "
              "with it |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g, x in cm["by_group"].items():
        col, rest = x["ratios"]["collapsed"], x["ratios"]["not_collapsed"]
        name = "all" if g == "all" else _env(g)
        lines.append(
            f"| {name} | {x['n']} ({x['n_collapsed']}) | {_rho(x['pearson']['median'])}, {x['pearson']['n_positive']} "
            f"of {x['pearson']['n']} | {_rho(x['spearman']['median'])}, {x['spearman']['n_positive']} of "
            f"{x['spearman']['n']} | {_range(col['token_end_start'])} | {_range(col['cond_end_start'])} | "
            f"{_range(col['token_end_ref'])} | {_range(col['cond_end_ref'])} | {_range(col['entropy_ratio_at_drop'])}"
            f" | {_range(rest['token_end_start'])} | {_num(x['auc_token_end_start'], '{:.2f}')} / "
            f"{_num(x['auc_cond_end_start'], '{:.2f}')} | {_pct(x['max_success_not_collapsed'])} / "
            f"{_pct(x['min_success_collapsed'])} |")
    ms = cm["margin_success"]
    per_env = "; ".join(f"{_env(e)} {_rho(ms[e]['rho'])} {_rho_ci(ms[e]['ci95'])}" for e in cm["envs"])
    lines += ["", f"End margin against final success ({ms['n_runs']} runs, {ms['n_seeds']} seeds; Spearman's rho, 95% "
              f"intervals from {ms['n_boot']} seed-cluster bootstrap resamples): {per_env}; within env (env-centred "
              f"ranks) {_rho(ms['within_env']['rho'])} {_rho_ci(ms['within_env']['ci95'])}."]
    hi = ms["within_env"]["ci95"][1]
    if _ok(hi) and hi < 0:
        lines += ["", "The interval is below 0: the runs whose reasoning lost its input dependence are the ones that "
                  "succeed, the opposite of the paper's picture, in which filtering raises both MI and success."]
    g = cm["by_group"].get("all") or next(iter(cm["by_group"].values()))
    auc = g["auc_token_end_start"]
    if _ok(g["pearson"]["median"]) and g["pearson"]["median"] > 0.5 and _ok(auc) and auc >= 0.8:
        lines += ["", "Reading: the detector's +-25% band is checked up to the drop step, where the entropies are "
                  "still near their start; over the whole run token entropy moves with the margin (median within-run"
                  f" r {_rho(g['pearson']['median'])}), and its end/start ratio alone separates the collapsed runs "
                  f"from the rest with AUC {auc:.2f}. On this testbed the collapse is entropy-quiet at the drop, not "
                  "invisible to entropy."]
    return lines


def _step(s: int | None) -> str:
    return "never" if s is None else str(s)


def _section_correlations(corr: dict[str, Any], rel: str) -> list[str]:
    envs = corr["envs"]
    lines = ["## 2. MI predicts success better than entropy", "", f"![correlations]({rel}/correlations.png)", "",
             f"Early value (mean over the first quarter of a run) against final validation success, over the "
             f"{corr['n_runs']} runs of the learning configs ({corr['n_seeds']} seeds). Intervals: 95% percentile "
             f"intervals of a cluster bootstrap over seeds ({corr['n_boot']} resamples, RNG seed "
             f"{corr['boot_seed']}).", "",
             "| metric | " + " | ".join(f"{_ENV_LABEL.get(e, e)}: runs, rho [95% CI]" for e in envs)
             + " | within env (env-centred ranks), rho [95% CI] | paper |",
             "|---|" + "---|" * len(envs) + "---|---|"]
    for k, m in corr["metrics"].items():
        cells = []
        for e in envs:
            b = m["by_env"].get(e)
            if not b or not b["n"]:
                cells.append("not measured")
            elif b["status"]:
                cells.append(f"{b['n']}, {b['status']}: not correlated")
            else:
                cells.append(f"{b['n']}, {_rho(b['rho'])} {_rho_ci(b['ci95'])}")
        paper = PAPER["spearman"].get(k)
        lines.append(f"| {_LABEL[k]} | " + " | ".join(cells) + f" | {_metric_rho(m)} | "
                     f"{'not reported' if paper is None else f'{_PAPER_LABEL[k]} {paper:+.2f}'} |")
    lines += ["", "| pair fixed in advance | abs(rho_MI) - abs(rho_H) | 95% CI | verdict |", "|---|---|---|---|"]
    for p in corr["pairs"]:
        lines.append(f"| {_LABEL[p['mi']]} vs {_LABEL[p['entropy']]} | {_rho(p['diff'])} | "
                     f"{_rho_ci(p['diff_ci95'])} | {_verdict(pair_verdict_text(p))} |")
    lines.append("")
    for p in corr["pairs"]:
        ce = p.get("ceiling")
        if ce and ce["n"]:
            lines.append(f"- Ceiling check of {_LABEL[p['mi']]}: early {ce['metric']} ranges "
                         f"{_num(ce['min'], '{:.5f}')} to {_num(ce['max'], '{:.5f}')}, above {CEILING_NORM} on "
                         f"{ce['n_at_ceiling']} of {ce['n']} runs: "
                         + ("at the ceiling, where it cannot order runs." if ce["at_ceiling"]
                            else "not at the ceiling."))
    lines += ["", "The paper's correlations (Spearman with final success): " + _paper_spearman(PAPER) + "."]
    return lines


def _section_filtering(f: dict[str, Any], collapse: dict[str, Any], rel: str) -> list[str]:
    lines = ["## 3. Filtering against no filter and a random drop", "", f"![filtering]({rel}/filtering.png)", "",
             "| env | arm | seeds | signature (finding 1's detector) | probe margin at the end | steps until the MI "
             "drop (censored runs) | final success (%) | zero-variance groups per step (%) | stopped early | RV "
             "heterogeneity (step 1) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for env, e in f.items():
        h = _num(e["rv_heterogeneity"]["mean"], "{:.2f}")
        for arm, s in e["arms"].items():
            ca = collapse.get(env, {}).get("arms", {}).get(arm)
            sig = f"{ca['n_collapsed']} of {ca['n']}" if ca and ca["n"] else "n/a"
            stops = ", ".join(f"seed {x['seed']} ({x['steps']} of {e.get('planned_steps')} steps)"
                              for x in s.get("stopped_early", [])) or "none"
            lines.append(f"| {_env(env)} | `{arm}` | {len(s['seeds'])} | {sig} | "
                         f"{_num(s['margin_end']['mean'])} | {_num(s['steps_to_drop']['mean'], '{:.1f}')} "
                         f"({s['censored']}) | {_pct(s['success_end']['mean'])} | "
                         f"{_pct(s.get('zero_variance_fraction'))} | {stops} | {h} |")
    lines += ["", "Per-arm values are each run's own end (a run that stopped early: its last measurement). The "
              "comparisons below pair such a run with its partner at equal steps (rule 3).", "",
              "| env | comparison | outcome | seeds | mean difference | 95% CI | 90% CI | equivalence bound | "
              "paired SD | detectable effect (80% power) | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for env, e in f.items():
        for comp, outs in e["comparisons"].items():
            for k, (label, unit) in OUTCOMES.items():
                c = outs[k]
                lines.append(_comparison_row(_env(env), comp.replace("-", " minus "), label, c, unit))
                if "sensitivity" in c:
                    lines.append(_comparison_row(
                        _env(env), comp.replace("-", " minus "),
                        f"{label}, sensitivity: without seed{'s' if len(c['early_seeds']) > 1 else ''} "
                        f"{', '.join(map(str, c['early_seeds']))} (a run stopped early)", c["sensitivity"], unit))
    early = sorted({(env, comp, s) for env, e in f.items() for comp, outs in e["comparisons"].items()
                    for c in outs.values() for s in c.get("early_seeds", [])})
    lone = [f"{_env(env)}, {comp.replace('-', ' minus ')}: {unpaired_text(outs['margin_end']['unpaired'])}"
            for env, e in f.items() for comp, outs in e["comparisons"].items()
            if outs.get("margin_end", {}).get("unpaired")]
    lines += ["", "Pairs with a run that stopped early (compared at equal steps): "
              + ("; ".join(f"{_env(env)}, {comp.replace('-', ' minus ')}, seed {s}" for env, comp, s in early)
                 if early else "none") + ".", "",
              *([f"Seeds left out of a comparison for want of a partner run: {'; '.join(lone)}.", ""] if lone else []),
              *([f"Seeds left out of a comparison for a null at the step it is read at: {'; '.join(nulls)}.", ""]
                if (nulls := [f"{_env(env)}, {comp.replace('-', ' minus ')}, {k}: seed {s} ("
                              + ", ".join(f"`{arm}` {why}" for arm, why in m.items()) + ")"
                              for env, e in f.items() for comp, outs in e["comparisons"].items()
                              for k, c in outs.items() for s, m in (c.get("not_measured") or {}).items()]) else []),
              "Units: the margin in margin units (0-1), steps in training steps, success in points. Steps until "
              "the drop: a run without an MI drop is carried at its last probe step, so a difference involving "
              "censored runs is a lower bound on the delay. An *equivalent* verdict rules out effects as large as "
              "the bound, not smaller ones. The paper's filtering effects are in points of peak validation success "
              "(section \"The paper's numbers\").", "",
              "Why the filter has little to act on here: under GRPO a group whose rewards do not vary has exactly "
              "zero advantage, so dropping it removes nothing from the task gradient (only rows of the entropy term "
              "and of the loss's normalisation); top-p at rho 0.9 keeps the highest-variance groups that carry 90% "
              "of the reward variance, so every zero-variance group is among those it drops, and beyond them only "
              "the groups with the least variance (the zero-variance share per step is in the table above). The "
              "paper's mechanism "
              "(where reward variance is low, input-agnostic regularisers, the entropy bonus and KL, dominate the "
              "update, and filtering removes those groups) needs groups whose update is the regulariser alone; "
              "the per-step filter log that would show how often the kept groups had zero advantage is listed "
              "under \"Provenance and filter logs\"."]
    return lines


def _comparison_row(env: str, comp: str, label: str, c: dict[str, Any], unit: str) -> str:
    bound = c.get("bound")
    eq = "none" if bound is None else "+-" + _plain(bound, unit)
    return (f"| {env} | {comp} | {label} | {c['n']} | {_signed(c['mean'], unit)} | {_interval(c['ci95'], unit)} | "
            f"{_interval(c.get('ci90', [None, None]), unit)} | {eq} | {_plain(c['sd'], unit)} | "
            f"{_plain(c['mde'], unit)} | {_verdict(verdict_text(c, fmt_unit(unit)))} |")


def _section_power(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Power analysis", "",
             "Seeds (pairs) a paired t-test at alpha 0.05 needs to detect an effect with 80% power, given the paired "
             "SD of top-p minus no filter measured in this study (exact noncentral-t power, "
             "`ragen_core.math.stats.paired_power`); and for the equivalence test (TOST within the bound of rule 3): "
             "the probability that it concludes *equivalent* with the seeds run here if the true difference were 0, "
             "and the seeds it needs for 80% (exact, `ragen_core.math.stats.equivalence_power`)."]
    if not rows:
        return lines + ["", "Not available: no comparison with at least 2 seeds and a non-zero paired SD."]
    lines += ["", "| env | outcome | seeds | paired SD | detectable effect now | effect -> seeds needed | equivalence "
              "bound | P(equivalent) now, true difference 0 | seeds for 80% |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fmt = fmt_unit(r["unit"])
        needed = "; ".join(f"{fmt(eff)} -> {f'> {MAX_SEEDS}' if n is None else n}" for eff, n in r["needed"].items())
        eq_n = r.get("equivalence_needed")
        lines.append(f"| {_env(r['env'])} | {r['label']} | {r['n']} | {_plain(r['sd'], r['unit'])}"
                     f" | {_plain(r['mde'], r['unit'])} | {needed} | +-{_plain(r.get('bound'), r['unit'])} | "
                     f"{_num(r.get('equivalence_power'), '{:.2f}')} | {f'> {MAX_SEEDS}' if eq_n is None else eq_n} |")
    return lines


def _section_quartiles(q: dict[str, Any], rel: str) -> list[str]:
    lines = ["## 4. The RV quartile ablation", "", f"![quartiles]({rel}/quartiles.png)", ""]
    arms = q["arms"]
    lines.append("Steps run: " + "; ".join(f"`{arm}` {', '.join(map(str, a['steps'])) or 'none'}"
                                           for arm, a in arms.items()) + ". Share of zero-variance groups per step: "
                 + "; ".join(f"`{arm}` {_pct_sign(a['zero_variance_fraction'])}" for arm, a in arms.items()) + "."
                 + (f" Left out of the pairs: {unpaired_text(q['unpaired'])}." if q.get("unpaired") else ""))
    bottom = arms.get("rv_bottom_quartile", {})
    stops = bottom.get("stopped_early") or []
    share = bottom.get("kept_zero_adv_share")
    lines += ["", f"Label: *{q.get('label', GRPO_LABEL)}*. The bottom quartile keeps the 2 of 8 groups with the least "
              "reward variance: whenever 2 or more groups of a step have none, it trains only on groups whose GRPO "
              "advantage is exactly 0 (the update is then the regularisers alone: the entropy bonus, and KL where "
              "it is on; a step with no variance at all is skipped). Bottom-quartile runs that stopped early: "
              f"{len(stops)} of {len(bottom.get('seeds', []))}"
              + (" (" + ", ".join(f"seed {x['seed']} at step {x['steps']} of {bottom.get('planned_steps')}"
                                  for x in stops) + ")" if stops else "")
              + ". Share of its kept groups with zero advantage, from the per-step filter log: "
              + (f"{_pct(share)}% (over {bottom.get('n_filter_logs')} runs)." if _ok(share)
                 else "not recorded (these runs predate the log).")
              + " A higher success of the top quartile is what GRPO guarantees here, not a test of the paper's "
              "account."]
    lines += ["", "| measure | compared at | seeds | top | bottom | top minus bottom | 95% CI | paired SD | "
              "detectable effect | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"success": ("validation success (%)", "points"), "mi_norm": ("MI-Seq / log P (in-batch, P = 8)", "margin"),
             "probe_mi_seq_norm": ("MI-Seq / log N (probe)", "margin")}
    for where, label in (("equal_steps", "equal steps"), ("at_end", "the end (stopped runs carried)")):
        for k, (name, unit) in names.items():
            c = q[where].get(k)
            if not c:
                continue
            lines.append(f"| {name} | {label} | {c['n']} | {_plain(c['top'], unit)} | {_plain(c['bottom'], unit)} | "
                         f"{_signed(c['mean'], unit)} | {_interval(c['ci95'], unit)} | {_plain(c['sd'], unit)} | "
                         f"{_plain(c['mde'], unit)} | {_verdict(verdict_text(c, fmt_unit(unit)))} |")
    steps = {s: v for s, v in q["seeds"].items()}
    if steps:
        lines += ["", "Equal steps per seed (success, in-batch MI, probe): " + "; ".join(
            f"seed {s}: {v.get('success_step', 'n/a')}, {v.get('mi_norm_step', 'n/a')}, "
            f"{v.get('probe_mi_seq_norm_step', 'n/a')}" for s, v in sorted(steps.items())) + "."]
    p = q["paper"]
    lines += ["", f"The paper (Sokoban, Qwen2.5-3B): top quartile {p['rv_top_quartile']['success']}% success and MI "
              f"proxy {p['rv_top_quartile']['mi']}; bottom quartile {p['rv_bottom_quartile']['success']}% and "
              f"{p['rv_bottom_quartile']['mi']}. Its MI proxy is not the same quantity as either of ours: compare "
              "directions only."]
    return lines


def _section_paper() -> list[str]:
    f = PAPER["filtering"]
    tasks = ["Sokoban", "FrozenLake", "MetaMathQA", "Countdown"]
    lines = ["## The paper's numbers", "",
             "Filtering effect: top-p (rho 0.9) minus no filter, peak validation success, points.", "",
             "| setting | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for setting, row in f.items():
        lines.append(f"| {setting} | " + " | ".join(f"{row[t]:+.1f}" if t in row else "not reported" for t in tasks)
                     + " |")
    lines += ["", "RV heterogeneity of the pre-check and the filtering effect: " + "; ".join(
        f"{name} {h:.2f} -> {eff:+.1f} points" for name, h, eff in PAPER["rv_heterogeneity"]) + ".", "",
        "Spearman's rho with final success: " + _paper_spearman(PAPER) + ".", "",
        "RV quartiles (Sokoban, Qwen2.5-3B), top vs bottom quartile: " + _paper_quartiles(PAPER) + "."]
    return lines


def _section_resolution(f: dict[str, Any]) -> list[str]:
    """What the study could have detected, set beside the paper's effects on the same env."""
    lines = ["## What this study can resolve", ""]
    for env, e in f.items():
        c = e["comparisons"].get("top_p-no_filter", {})
        s, m = c.get("success_end"), c.get("margin_end")
        quoted = _paper_effects(env)
        if not s or s.get("mde") is None:
            lines.append(f"- {_ENV_LABEL.get(env, env)}: no detectable effect could be computed (fewer than 2 seeds "
                         "with both arms, or no spread between seeds).")
            continue
        lines.append(
            f"- {_ENV_LABEL.get(env, env)}: with {s['n']} seeds, top-p minus no filter is detectable at 80% power "
            f"from {_plain(s['mde'], 'points')} points of end success"
            + (f" and {_plain(m['mde'], 'margin')} of end probe margin" if m and m.get("mde") is not None else "")
            + f". The paper's filtering effects (peak success): {quoted}. An effect smaller than "
            "the detectable one can be present and still read inconclusive here.")
    return lines


def _section_runs(runs: list[dict[str, Any]]) -> list[str]:
    costs = [r["probe_s"] for r in runs if r.get("probe_s") is not None]
    cost = (f"The held-out probe cost {sum(costs) / len(costs):.1f} s per measurement on average over the "
            f"{len(costs)} runs that had it (one core; it runs at step 0 and every `mi.probe_every` steps)."
            if costs else "No run had the held-out probe.")
    peak = ("Peak: the best validation success the run measured (runs with `eval.until` validate only up to that "
            "step and at the end, e.g. the learning configs' top-p and no-filter arms at steps 0, 10 and 60).")
    lines = ["## Every run", "", cost, "", peak, "",
             "| run | steps (of planned) | success after warm start / peak / final (%) | RV het. (step 1) | "
             "probe margin start -> end | collapsed (drop step) | early MI-ZScore-EMA | early retrieval | "
             "early H(Z|X) | probe s/measurement | minutes |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        e = r["early"]
        col = "n/a" if r["collapsed"] is None else ("yes" if r["collapsed"] else "no") + (
            f" ({r['drop_step']})" if r["drop_step"] is not None else "")
        planned = r.get("planned_steps")
        steps = f"{r['steps']}" + (f" of {planned} (stopped early)" if r.get("stopped_early") else "")
        lines.append(f"| {r['name']} | {steps} | {_pct(r['before'])} / {_pct(r['peak'])} / {_pct(r['final'])} | "
                     f"{_num(r['rv_heterogeneity_first'], '{:.2f}')} | {_num(r['margin_start'])} -> "
                     f"{_num(r['margin_end'])} | {col} | {_num(e['mi_zscore_ema'], '{:.2f}')} | "
                     f"{_num(e['retrieval_acc'], '{:.2f}')} | {_num(e['cond_entropy_est'])} | "
                     f"{_num(r['probe_s'], '{:.1f}')} | {r['minutes']:.1f} |")
    missing = [r for r in runs if r.get("not_measured")]
    if missing:
        lines += ["", "Values n/a above because the measurement at their step (step 0, or the last step) is missing "
                  "or null; never taken from a neighbouring step:", ""]
        lines += [f"- {r['name']}: " + "; ".join(f"`{k}`: {why}" for k, why in r["not_measured"].items())
                  for r in missing]
    return lines


def _then_blank(lines: list[str]) -> list[str]:
    """A section's lines and the blank line after it; nothing for a section with nothing to show."""
    return [*lines, ""] if lines else []


#: The phases' column labels in the cost table, in :data:`ragen_core.apps.reproduce.runner.PHASES` order.
_PHASE_LABELS = {"warm_start_s": "warm starts", "rl_steps_s": "RL steps", "validation_s": "validations",
                 "probe_s": "probes", "other_s": "start-up and the rest"}


def _section_cost(header: dict[str, Any], records: list[dict[str, Any]] | None) -> list[str]:
    """Where the study's core-minutes go: per group (base config) and phase, per seed. From the header's cost when
    it has the split (``by_group``), else recomputed from the records (reports of studies run before it was kept);
    nothing when neither has phases."""
    cost = header.get("cost") if isinstance(header.get("cost"), dict) else None
    if (cost is None or "by_group" not in cost) and records:
        cost = design_cost(records, len(header.get("seeds") or []))
    if not cost or not cost.get("by_group") or not cost.get("runs_with_phases"):
        return []
    n = cost.get("seeds") or len(header.get("seeds") or []) or 1
    whole = cost["whole_core_minutes"]
    lines = ["## Where the core-minutes go", "",
             f"Core-minutes per seed ({n} seed{'s' if n != 1 else ''}) by base config and phase, every phase of every "
             "run counted (one core per run). A config's warm starts are trained by one run per seed and loaded "
             "from the cache by its other arms; the step-0 validation and probe likewise.", "",
             "| config | runs per seed | " + " | ".join(_PHASE_LABELS[k] for k in PHASES) + " | all | share |",
             "|---|---:|" + "---:|" * (len(PHASES) + 2)]
    groups = sorted(cost["by_group"].items(), key=lambda kv: -kv[1]["whole_core_minutes"])
    for name, g in groups:
        ph = g["phases_core_minutes"]
        lines.append(f"| {_env(name)} | {g['runs'] / n:.0f} | " + " | ".join(f"{ph[k] / n:.2f}" for k in PHASES)
                     + f" | {g['whole_core_minutes'] / n:.2f} | "
                     + (f"{100 * g['whole_core_minutes'] / whole:.0f}%" if whole else "n/a") + " |")
    ph = cost["phases_core_minutes"]
    lines.append(f"| all | {cost['runs'] / n:.0f} | " + " | ".join(f"{ph[k] / n:.2f}" for k in PHASES)
                 + f" | {whole / n:.2f} | 100% |")
    if cost["runs_with_phases"] < cost["runs"]:
        lines += ["", f"{cost['runs'] - cost['runs_with_phases']} of {cost['runs']} runs predate the phase records: "
                  "their warm start and RL steps count in *all* only."]
    return lines


#: Per-run fields kept for provenance and the filter's work, and their labels.
_PROVENANCE = (("commit", "commit"), ("config_sha256", "config hash"),
               ("reasoning_tokens", "probe reasoning length (tokens)"),
               ("template_share", "probe traces matching the template exactly"), ("filter_log", "per-step filter log"))


def _recorded(r: dict[str, Any], key: str) -> bool:
    if key in ("reasoning_tokens", "template_share"):
        return _ok(r.get(f"{key}_start")) or _ok(r.get(f"{key}_end"))
    return r.get(key) is not None


def _section_provenance(runs: list[dict[str, Any]]) -> list[str]:
    """Commit, config hash, probe reasoning length and template share, and the per-step filter log, per run;
    "not recorded" where a run predates the field."""
    lines = ["## Provenance and filter logs", ""]
    have = {key: [r for r in runs if _recorded(r, key)] for key, _ in _PROVENANCE}
    missing = [label for key, label in _PROVENANCE if not have[key]]
    if missing:
        lines.append(f"Not recorded for any of the {len(runs)} runs (they predate these fields): "
                     + ", ".join(missing) + ".")
    if len(missing) == len(_PROVENANCE):
        return lines
    lines += ["", "| run | commit | config sha256 | reasoning tokens start -> end | template share start -> end | "
              "filter log: steps, mean groups kept / total, kept groups with zero advantage (%), steps with only "
              "zero-advantage groups, skipped steps |", "|---|---|---|---|---|---|"]
    for r in runs:
        log = r.get("filter_log")
        log_text = "not recorded" if not log else (
            f"{log['n_steps']}, {_num(log['kept_groups'], '{:.1f}')} / {_num(log['groups_total'], '{:.1f}')}, "
            f"{_pct(log['kept_zero_adv_share'])}, {_count(log['all_zero_adv_steps'])}, {_count(log['skipped'])}")
        lines.append(f"| {r['name']} | {_text(r.get('commit'), 10)} | {_text(r.get('config_sha256'), 12)} | "
                     f"{_pair(r, 'reasoning_tokens', '{:.1f}')} | {_pair(r, 'template_share', '{:.2f}')} | "
                     f"{log_text} |")
    return lines


def _text(x: Any, width: int) -> str:
    return "not recorded" if x is None else f"`{str(x)[:width]}`"


def _count(x: int | None) -> str:
    return "not recorded" if x is None else str(x)


def _pair(r: dict[str, Any], key: str, fmt: str) -> str:
    a, b = r.get(f"{key}_start"), r.get(f"{key}_end")
    if not (_ok(a) or _ok(b)):
        return "not recorded"
    return f"{_num(a, fmt)} -> {_num(b, fmt)}"


def _definitions() -> list[str]:
    return ["## Definitions", "",
            "- Validation: greedy decoding on the config's held-out seeds, every `eval.every` steps; step 0 is after "
            "the warm start. Peak = the best RL evaluation (step >= 1), final = the last one (a run that stopped "
            "early keeps its last value).",
            "- Held-out probe (`ragen_core.training.probe`): N = 32 distinct held-out first-turn prompts x G samples, "
            "cross-scored at step 0 and every `mi.probe_every` steps; retrieval margin = (accuracy - 1/N) / "
            "(1 - 1/N); MI-Seq / log N is the sequence-level MI estimate over its ceiling.",
            "- In-batch MI proxies: cross-scoring of the training batch's first-turn reasoning (P = 8 prompts x G "
            "samples), every `mi.every` steps (docs/science.md section 2); they sit at their ceiling on the "
            "learning configs, which is why findings 1 and 3 are judged on the probe.",
            "- Early value: mean over the measurements in the first quarter of a run's steps.",
            "- Intervals: Student-t over seeds, paired by seed, for differences; percentile cluster bootstrap over "
            "seeds for correlations (with K seeds a resample is one of at most C(2K - 1, K) multisets, 10 for 3 "
            "seeds and 126 for 5: with few seeds the bootstrap intervals are coarse and tend to be too narrow). "
            "Detectable effect: the smallest true paired difference the two-sided t-test "
            "at alpha 0.05 finds with probability 0.8 given the measured paired SD "
            "(`ragen_core.math.stats.min_detectable_effect`). With one seed (the quick study) there are no intervals.",
            "- Equivalence (TOST): two one-sided t-tests at alpha 0.05 each, i.e. the 90% t-interval of the paired "
            "mean difference inside [-B, +B]; at a true difference of exactly B it says *equivalent* with "
            "probability at most 0.05.",
            "- Stopped early: a run that did fewer RL steps than its config's `run.steps`. The study's runs have no "
            "time limit, so that is the trainer's empty-step rule: it stops a run after `filter.max_empty_steps` "
            "steps in a row with no group to train on (no group's rewards varied, or the filter kept none)."]


# ------------------------------------------------------------------------------------------- figures
_COLORS = {"entropy_bonus": "tab:red", "top_p": "tab:blue", "no_filter": "tab:orange", "random": "tab:gray",
           "rv_top_quartile": "tab:green", "rv_bottom_quartile": "tab:purple"}


def _series(r: dict[str, Any], key: str) -> list[tuple[int, float]]:
    """`key`'s points of run `r`: its validations (``"val"``) or one point per probe measurement, a null (not
    measured, or not finite) as NaN, which the plot draws as a break in the line rather than a line across it."""
    if key == "val":
        pts = r.get("val") or []
    else:
        pts = [(p["step"], p.get(key)) for p in r.get("probe") or []]
    return [(int(s), float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan) for s, v in pts]


def _plots(result: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = result["analysis"]
    records = result["records"]

    # 1. probe curves of every arm of the collapse-prone envs.
    fig = collapse_figure(records, list(a["collapse"]) or ["collapse_sokoban"])
    fig.savefig(folder / "collapse_curves.png", dpi=100, bbox_inches="tight")
    plt.close(fig)

    # 3. per-seed outcomes of the filtering arms.
    filt = a["filtering"]
    fenvs = list(filt) or ["collapse_sokoban"]
    fig, axes = plt.subplots(2, len(fenvs), figsize=(4.4 * len(fenvs), 6), squeeze=False)
    for col, env in enumerate(fenvs):
        e = filt.get(env, {"arms": {}})
        for row, (key, title, scale) in enumerate((("margin_end", "probe margin at the end", 1.0),
                                                   ("success_end", "final success (%)", 100.0))):
            ax = axes[row][col]
            for i, (arm, s) in enumerate(e["arms"].items()):
                vals = s[key]["values"]
                if not vals:
                    continue
                ax.bar(i, scale * s[key]["mean"], color=_COLORS.get(arm, "k"), alpha=0.6)
                ax.scatter([i] * len(vals), [scale * v for v in vals], color="k", s=10, zorder=3)
            ax.set_xticks(range(len(e["arms"])), list(e["arms"]), fontsize=8)
            ax.set_title(f"{_ENV_LABEL.get(env, env)}: {title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(folder / "filtering.png", dpi=100)
    plt.close(fig)

    # 2. early metric against final success, coloured by env.
    corr = a["correlations"]
    keys = list(corr["metrics"])
    ncol = min(len(keys), 3)
    nrow = max(1, math.ceil(len(keys) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.4 * ncol, 2.8 * nrow), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, k in zip(axes.flat, keys):
        for env, color in zip(corr["envs"], ("tab:blue", "tab:orange", "tab:green", "tab:red")):
            pts = [(p[k], p["y"]) for p in corr["points"] if p["env"] == env and p[k] is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, s=10, color=color, label=env)
        ax.set_title(_LABEL[k], fontsize=7)
        ax.set_xlabel("early value", fontsize=7)
    for row in axes:
        row[0].set_ylabel("final success (0-1)")
    _legend(axes[0][0])
    fig.tight_layout()
    fig.savefig(folder / "correlations.png", dpi=100)
    plt.close(fig)

    # 4. the quartile arms' validation curves, the equal step of each seed marked.
    fig, ax = plt.subplots(figsize=(5, 3.4))
    labelled = set()
    for r in records:
        if r["env"] == "sokoban" and r["arm"] in ("rv_top_quartile", "rv_bottom_quartile") and r["val"]:
            xs, ys = zip(*r["val"])
            ax.plot(xs, [100 * y for y in ys], "-o", ms=2.5, color=_COLORS[r["arm"]], alpha=0.8,
                    label=None if r["arm"] in labelled else r["arm"])
            labelled.add(r["arm"])
    for s in a["quartiles"]["seeds"].values():
        if s.get("success_step") is not None:
            ax.axvline(s["success_step"], color="k", lw=0.5, ls=":")
    ax.set_xlabel("step (dotted: the equal step of a seed)")
    ax.set_ylabel("validation success (%)")
    ax.set_title("Sokoban: highest- vs lowest-variance quartile", fontsize=9)
    _legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the curves, never over
    fig.tight_layout()
    fig.savefig(folder / "quartiles.png", dpi=100, bbox_inches="tight")
    plt.close(fig)


#: Arms drawn on their own entropy panel (log scale): their entropy moves by design, by up to tens of times, and
#: on a shared axis it would flatten every other arm's curve into a line.
_OWN_ENTROPY_PANEL = ("entropy_bonus",)


def collapse_figure(records: list[dict[str, Any]], envs: list[str]) -> Any:
    """The probe curves of the collapse-prone envs, one row per env: retrieval margin; token entropy and H(Z|X)
    over their step-0 values for every arm but :data:`_OWN_ENTROPY_PANEL` (with the detector's +-25% band); those
    arms' entropy ratios on their own log-scale panel; validation success. One legend, outside the axes.

    A ratio is over the probe measurement at step 0 only, never over a later one: a run whose step-0 value is
    missing (no step-0 measurement, a null, or not > 0) has no ratio curve, and the panel's x label names it and
    why (as :func:`ragen_core.apps.reproduce.analysis.entropy_ratios` leaves its end/start ratio None)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    own = [arm for arm in _OWN_ENTROPY_PANEL if any(r["env"] in envs and r["arm"] == arm for r in records)]
    ncol = 5 if own else 4
    fig, axes = plt.subplots(len(envs), ncol, figsize=(3.7 * ncol, 3.2 * len(envs)), squeeze=False)
    handles: dict[str, Any] = {}
    for row, env in zip(axes, envs):
        panels = [("retrieval_margin", row[0], "probe retrieval margin", "margin over chance", False),
                  ("token_entropy", row[1], "probe token entropy / step 0", "ratio to step 0", False),
                  ("cond_entropy_est", row[2], "probe H(Z|X) / step 0", "ratio to step 0", False)]
        if own:
            panels.append(("both_entropies", row[3], f"{', '.join(own)}: entropies / step 0 (log)",
                           "ratio to step 0 (log scale)", True))
        panels.append(("val", row[-1], "validation success", "success (%)", False))
        for key, ax, title, ylabel, own_panel in panels:
            runs = [r for r in records if r["env"] == env]
            if own_panel and not any(r["arm"] in own for r in runs):
                ax.text(0.5, 0.5, f"no {', '.join(own)} run on this env", ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)
                ax.set_axis_off()
                continue
            not_drawn = _draw_panel(ax, runs, key, own_panel, handles)
            ax.set_title(f"{_env(env)}: {title}", fontsize=8)
            ax.set_xlabel("training step" + _not_drawn_text(not_drawn), fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=len(handles), fontsize=8,
                   bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def _step0_base(pts: list[tuple[int, float]]) -> tuple[float | None, str]:
    """The value at step 0 of a probe series (:func:`_series`) that a ratio "to step 0" is over, or None and why
    not: no step-0 measurement (a resumed run that lost it: never the first later one instead), a null, or <= 0."""
    base = next((y for s, y in pts if s == 0), None)
    if base is None:
        first = next((s for s, y in sorted(pts) if math.isfinite(y)), None)
        return None, "no step-0 measurement" + (f", first at step {first}" if first is not None else "")
    if math.isnan(base):
        return None, "step-0 value null"
    if not base > 0:
        return None, f"step-0 value {base:g}"
    return base, ""


def _not_drawn_text(not_drawn: list[str], most: int = 3) -> str:
    """The x-label line naming the runs a ratio to step 0 was not drawn for ("" when none)."""
    if not not_drawn:
        return ""
    shown = "; ".join(not_drawn[:most]) + (f"; +{len(not_drawn) - most} more" if len(not_drawn) > most else "")
    return f"\nnot drawn, no step-0 value: {shown}"


def _draw_panel(ax: Any, runs: list[dict[str, Any]], key: str, own_panel: bool, handles: dict[str, Any]
                ) -> list[str]:
    """One panel of :func:`collapse_figure`: `key`'s curve of every run in `runs` that belongs on it. Returns the
    runs (``"arm sSEED (why)"``) whose ratio to step 0 it could not draw for want of a step-0 value."""
    not_drawn: list[str] = []
    for r in runs:
        separate = r["arm"] in _OWN_ENTROPY_PANEL
        if key in ("token_entropy", "cond_entropy_est") and separate:
            continue  # drawn on its own panel
        if own_panel and not separate:
            continue
        series = [("token_entropy", "-"), ("cond_entropy_est", ":")] if own_panel else [(key, "-")]
        for k, style in series:
            pts = _series(r, k)
            if k in ("token_entropy", "cond_entropy_est"):
                base, why = _step0_base(pts)
                if base is None:
                    if pts:  # a run with probe measurements: say why it has no curve here
                        what = ("token entropy" if k == "token_entropy" else "H(Z|X)") + " " if own_panel else ""
                        not_drawn.append(f"{r['arm']} s{r.get('seed')} ({what}{why})")
                    continue
                pts = [(s, y / base) for s, y in pts]
            if not any(math.isfinite(y) for _, y in pts):
                continue
            xs, ys = zip(*pts)
            if k == "val":
                ys = tuple(100 * y for y in ys)
            (line,) = ax.plot(xs, ys, style, marker="o", ms=2, lw=1, color=_COLORS.get(r["arm"], "k"), alpha=0.75)
            handles.setdefault(r["arm"], line)
    if key in ("token_entropy", "cond_entropy_est") or own_panel:
        for y in (0.75, 1.25):
            ax.axhline(y, color="k", lw=0.6, ls="--")
    if own_panel:
        ax.set_yscale("log")
        ax.text(0.02, 0.97, "solid: token entropy, dotted: H(Z|X)", transform=ax.transAxes, fontsize=6, va="top")
    return not_drawn


def _legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, **kw)


def write_report(result: dict[str, Any], report_dir: str | Path, header: dict[str, Any]) -> Path:
    """Write ``REPORT_DIR/reproduction.md`` and ``REPORT_DIR/reproduction/`` (``results.json`` and the figures).

    Returns the path of the Markdown file.
    """
    root = Path(report_dir)
    folder = root / "reproduction"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(results_json({"header": header, **result}))
    _plots(result, folder)
    path = root / "reproduction.md"
    path.write_text(markdown(result, "reproduction", header))
    return path


def results_json(data: Any) -> str:
    """`data` as the text of a ``results.json``: strict JSON (:mod:`ragen_core.jsonio`: a float that is not finite
    is ``null``, not measured), indented, any other object as its ``str``."""
    return strict_dumps(data, indent=1, default=str) + "\n"


def cost_text(cost: dict | None) -> str:
    """The design's whole cost, per seed and per phase (``header["cost"]``, :func:`ragen_core.apps.reproduce.runner.
    design_cost`), as a clause for the report's header line; "" for results written before it was recorded."""
    if not isinstance(cost, dict) or not cost.get("runs"):
        return ""
    ph = cost["phases_core_minutes"]
    per_seed = cost.get("per_seed_core_minutes")
    return (f"; every phase counted: {cost['whole_core_minutes']:.1f} core-minutes"
            + (f", {per_seed:.1f} per seed" if isinstance(per_seed, (int, float)) else "")
            + f" (warm starts {ph['warm_start_s']:.1f}, RL steps {ph['rl_steps_s']:.1f}, validations "
            f"{ph['validation_s']:.1f}, probes {ph['probe_s']:.1f}, start-up and the rest {ph['other_s']:.1f}; "
            f"{cost['runs_with_phases']} of {cost['runs']} runs recorded their phases, the others count their warm "
            "start and RL steps only)")
