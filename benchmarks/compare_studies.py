"""Two runs of the same `ragen reproduce` study side by side: did a change of the code change what it finds?

    python -m benchmarks.compare_studies OLD/results.json NEW/results.json [--label-old A] [--label-new B]

A faster code path that draws its random numbers differently (or computes in another order, so that rounding
differs and sampled tokens eventually diverge) cannot give bit-identical runs; what must not change is what the
study concludes. This compares, from the two studies' run records (the same runs, the same seeds):

- every verdict of the report (findings 1-4, each comparison and outcome);
- per config and arm, the mean over seeds of the final validation success and of the final probe retrieval margin
  with their 95% t-intervals (the curves' bands at the end), and how many seeds show the collapse signature;
- the wall time of the studies (the sum of their runs' training and validation seconds).

Writes ``benchmarks/results/study_comparison.json`` with a Markdown table (docs/performance.md, ``results:
study_comparison``) and ``study_comparison.png`` (the validation-success and probe-margin curves of both studies,
mean and 95% band per arm).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from benchmarks.machine import describe_machine
from benchmarks.readme_tables import write_result
from ragen_core.math.stats import mean_ci, t_quantile

RESULTS = Path(__file__).resolve().parent / "results"


def verdicts(analysis: dict[str, Any]) -> dict[str, str]:
    """Every verdict of a study's analysis, by a stable name."""
    out: dict[str, str] = {}
    for env, e in analysis.get("collapse", {}).items():
        out[f"finding 1, {env}"] = e["verdict"]
    for p in analysis.get("correlations", {}).get("pairs", []):
        out[f"finding 2, {p['mi']} vs {p['entropy']}"] = p["verdict"]
    for env, e in analysis.get("filtering", {}).items():
        for comp, outcomes in e["comparisons"].items():
            for outcome, c in outcomes.items():
                out[f"finding 3, {env}, {comp}, {outcome}"] = c["verdict"]
    q = analysis.get("quartiles", {})
    for when in ("equal_steps", "at_end"):
        for measure, c in q.get(when, {}).items():
            out[f"finding 4, {when}, {measure}"] = c["verdict"]
    return out


def _final(points: list, key: str | None = None) -> float | None:
    if not points:
        return None
    last = points[-1]
    return float(last[1]) if key is None else (float(last[key]) if last.get(key) is not None else None)


def arm_summary(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (env, arm): final validation success and final probe margin over seeds (mean, 95% CI), seeds."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["env"], r["arm"]), []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        row: dict[str, Any] = {"seeds": sorted(r["seed"] for r in rs)}
        for name, values in (("success", [_final(r.get("val") or []) for r in rs]),
                             ("margin", [_final(r.get("probe") or [], "retrieval_margin") for r in rs])):
            vals = [v for v in values if v is not None]
            row[name] = list(mean_ci(vals)) if len(vals) >= 2 else ([vals[0], math.nan, math.nan] if vals else None)
        out[key] = row
    return out


def _fmt(ci: list[float] | None, pct: bool) -> str:
    if ci is None:
        return "-"
    m, lo, hi = ci
    f = (lambda x: f"{100 * x:.1f}") if pct else (lambda x: f"{x:.3f}")
    return f"{f(m)} [{f(lo)}, {f(hi)}]" if math.isfinite(lo) else f(m)


def _overlap(a: list[float] | None, b: list[float] | None) -> str:
    if a is None or b is None or not (math.isfinite(a[1]) and math.isfinite(b[1])):
        return "-"
    return "yes" if a[1] <= b[2] and b[1] <= a[2] else "**no**"


def compare(old: dict[str, Any], new: dict[str, Any], label_old: str, label_new: str,
            reanalyse: bool = True) -> dict[str, Any]:
    """Compare two studies' results (``{"analysis", "records"}``) on the runs both finished; when one lacks runs,
    both are re-analysed on the common runs (`reanalyse`) so that each verdict compares the same runs."""
    # only the runs both studies finished are compared (a study cut short is compared on what it ran)
    common = {r["name"] for r in old["records"]} & {r["name"] for r in new["records"]}
    n_total = max(len({r["name"] for r in d["records"]}) for d in (old, new))
    old = {**old, "records": [r for r in old["records"] if r["name"] in common]}
    new = {**new, "records": [r for r in new["records"] if r["name"] in common]}
    if reanalyse and len(common) < n_total:
        # verdicts of the same runs on both sides: both studies re-analysed on the runs both finished
        from ragen_core.apps.reproduce.analysis import analyse

        old, new = ({**d, "analysis": analyse(d["records"])} for d in (old, new))
    v_old, v_new = verdicts(old["analysis"]), verdicts(new["analysis"])
    from ragen_core.apps.reproduce.verdicts import verdict_word

    # The same verdict is the same word (held, equivalent, inconclusive, ...), whichever form each file stores it in
    # (results written before the verdict module kept their numbers inside the string).
    rows_v = [{"what": k, "old": v_old.get(k), "new": v_new.get(k),
               "same": k in v_old and k in v_new and verdict_word(v_old[k]) == verdict_word(v_new[k])}
              for k in sorted(set(v_old) | set(v_new))]
    a_old, a_new = arm_summary(old["records"]), arm_summary(new["records"])
    rows_a = []
    for key in sorted(set(a_old) | set(a_new)):
        o, n = a_old.get(key, {}), a_new.get(key, {})
        rows_a.append({"env": key[0], "arm": key[1], "old": o, "new": n,
                       "success_overlap": _overlap(o.get("success"), n.get("success")),
                       "margin_overlap": _overlap(o.get("margin"), n.get("margin"))})
    secs = {label: sum((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0) for r in d["records"]) / 60.0
            for label, d in ((label_old, old), (label_new, new))}
    ratios = {}
    for r in old["records"]:
        m = next(x for x in new["records"] if x["name"] == r["name"])
        if r.get("wall_s") and m.get("wall_s"):
            ratios.setdefault((r["env"], r["arm"]), []).append(r["wall_s"] / m["wall_s"])
    lines = [f"Runs compared: {len(common)} of {n_total} (the runs both studies finished; "
             + ("both studies re-analysed on them" if reanalyse and len(common) < n_total else "each study's own "
                "verdicts") + f"). Verdicts: {sum(r['same'] for r in rows_v)} of {len(rows_v)} the same in both.", "",
             f"| verdict | {label_old} | {label_new} |", "|---|---|---|"]
    for r in rows_v:
        mark = "" if r["same"] else " **(changed)**"
        lines.append(f"| {r['what']} | {r['old']} | {r['new']}{mark} |")
    lines += ["", f"| config | arm | final success (%), {label_old} | {label_new} | bands overlap | final probe "
              f"margin, {label_old} | {label_new} | bands overlap |", "|---|---|---|---|---|---|---|---|"]
    for r in rows_a:
        lines.append(f"| {r['env']} | {r['arm']} | {_fmt(r['old'].get('success'), True)} | "
                     f"{_fmt(r['new'].get('success'), True)} | {r['success_overlap']} | "
                     f"{_fmt(r['old'].get('margin'), False)} | {_fmt(r['new'].get('margin'), False)} | "
                     f"{r['margin_overlap']} |")
    lines += ["", "Core-minutes of training and validation over the compared runs (the runs' own clocks, summed): "
              + ", ".join(f"{k} {v:.0f}" for k, v in secs.items()) + ".", "",
              f"| config | arm | runs | wall time per run, {label_old} / {label_new} (min-max) |", "|---|---|---|---|"]
    for (env, arm), rs in sorted(ratios.items()):
        lines.append(f"| {env} | {arm} | {len(rs)} | {min(rs):.1f}x-{max(rs):.1f}x |")
    lines += ["", "![validation success and probe margin per arm, both studies, mean and 95% band]"
              "(../benchmarks/results/study_comparison.png)"]
    return {"benchmark": "study_comparison", "labels": [label_old, label_new], "runs_compared": len(common),
            "runs_total": n_total, "verdicts": rows_v, "arms": rows_a, "core_minutes": secs,
            "wall_ratio": {f"{e}/{a}": rs for (e, a), rs in ratios.items()}, "markdown": "\n".join(lines) + "\n"}


def figure(old: dict[str, Any], new: dict[str, Any], labels: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = sorted({(r["env"], r["arm"]) for r in old["records"]})
    fig, axes = plt.subplots(2, len(keys), figsize=(2.3 * len(keys), 4.6), squeeze=False, sharey="row")
    for j, key in enumerate(keys):
        for d, label, color in ((old, labels[0], "tab:gray"), (new, labels[1], "tab:blue")):
            runs = [r for r in d["records"] if (r["env"], r["arm"]) == key]
            for row, getter in ((0, lambda r: [(s, v) for s, v in (r.get("val") or [])]),
                                (1, lambda r: [(p["step"], p["retrieval_margin"]) for p in (r.get("probe") or [])
                                               if p.get("retrieval_margin") is not None])):
                curves = [dict(getter(r)) for r in runs]
                steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
                if not steps:
                    continue
                vals = np.array([[c[s] for s in steps] for c in curves], dtype=float)
                m = vals.mean(0)
                # the table's interval (mean_ci: Student's t on n - 1 degrees of freedom), not 1.96 (30% narrower
                # at 5 seeds); one run has no interval
                n = len(vals)
                half = t_quantile(0.975, n - 1) * vals.std(0, ddof=1) / np.sqrt(n) if n > 1 else 0 * m
                axes[row][j].plot(steps, m, color=color, label=label)
                axes[row][j].fill_between(steps, m - half, m + half, color=color, alpha=0.2)
        axes[0][j].set_title(f"{key[0]}\n{key[1]}", fontsize=7)
        axes[1][j].set_xlabel("RL step")
    axes[0][0].set_ylabel("validation success")
    axes[1][0].set_ylabel("probe retrieval margin")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--label-old", default="before")
    p.add_argument("--label-new", default="after")
    args = p.parse_args(argv)
    old, new = (json.loads(Path(x).read_text()) for x in (args.old, args.new))
    result = compare(old, new, args.label_old, args.label_new)
    names = {r["name"] for r in old["records"]} & {r["name"] for r in new["records"]}
    old, new = ({**d, "records": [r for r in d["records"] if r["name"] in names]} for d in (old, new))
    result["machine"] = describe_machine()
    figure(old, new, result["labels"], RESULTS / "study_comparison.png")
    write_result(result, RESULTS / "study_comparison.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
