"""The study's reference runs retrained by this checkout, against the committed study's records, seed by seed.

    python -m benchmarks.study_equivalence [--groups collapse_sokoban/no_filter,...] [--seeds 20,21,22,23,24]
                                          [--workers 2] [--out runs/study_equivalence] [--old PATH]
    python -m benchmarks.study_equivalence --new NEW/results.json --groups all --seeds 20,21,22 --result NAME

``--new``: the new side is another finished study's records (a ``ragen reproduce`` run of this checkout), nothing
is retrained; ``--groups all``: every group both sides have; ``--result NAME``: write
``benchmarks/results/NAME.json`` instead.

The old side is a committed study's per-run records (default ``docs/reproduction/results.json``: the 65 runs on
seeds 20-24, trained before the tiny model was pinned, by a tiny model whose tokenizer was built from another
corpus, so no number can be equal bit for bit). This checkout retrains the chosen groups (``env/arm``) on the same
seeds with the study's own run specs (:func:`ragen_core.apps.reproduce.study.build_study`: the same configs and
overrides, its warm starts cached under OUT), finished runs kept (a rerun continues). Per group and outcome, new
minus old paired by seed, judged by the study's rule (:func:`ragen_core.apps.reproduce.verdicts.compare`):
**equivalent** when the 90% interval lies within +-10 points of success or +-0.15 of margin, **differs** when the
95% interval excludes 0, else inconclusive with the effect detectable at 80% power. Outcomes: greedy validation
success after the warm start (step 0) and at the end, the held-out probe's retrieval margin at step 0 and at the
end (runs without a probe: success only).

Writes ``benchmarks/results/study_equivalence.json``, shown in docs/performance.md (``results:study_equivalence``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import RESULTS, write_result

ROOT = Path(__file__).resolve().parent.parent
#: The groups retrained by default: the collapse-prone configs' no-filter arms (findings 1 and 3 rest on them).
DEFAULT_GROUPS = ("collapse_sokoban/no_filter", "collapse_frozenlake/no_filter")
#: Equivalence bounds (success as a share: 10 points; the probe's retrieval margin: 0.15).
BOUNDS = {"success_0": 0.10, "success_end": 0.10, "margin_0": 0.15, "margin_end": 0.15}


def outcomes(record: dict[str, Any]) -> dict[str, float | None]:
    """A run record's (:func:`ragen_core.apps.reproduce.runner.read_run`) success and margin at step 0 and at the
    end (its last measurement of each)."""
    val = sorted((int(s), float(v)) for s, v in record.get("val") or [])
    probe = sorted((int(p["step"]), p.get("retrieval_margin")) for p in record.get("probe") or []
                   if p.get("retrieval_margin") is not None)

    def first(points: list) -> float | None:
        return float(points[0][1]) if points and points[0][0] == 0 else None

    def last(points: list) -> float | None:
        return float(points[-1][1]) if points else None

    return {"success_0": first(val), "success_end": last(val), "margin_0": first(probe), "margin_end": last(probe)}


def compare_groups(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ``env/arm`` of `new` and outcome: new - old paired by seed (records of the same env, arm and seed)."""
    from ragen_core.apps.reproduce.verdicts import PairedRule, compare

    before = {(r["env"], r["arm"], r["seed"]): outcomes(r) for r in old}
    after = {(r["env"], r["arm"], r["seed"]): outcomes(r) for r in new}
    out: dict[str, dict[str, Any]] = {}
    for env, arm in sorted({(e, a) for e, a, _ in after}):
        seeds = sorted(s for e, a, s in after if (e, a) == (env, arm) and (e, a, s) in before)
        group: dict[str, Any] = {"seeds": seeds, "runs": {
            s: {"old": before[(env, arm, s)], "new": after[(env, arm, s)]} for s in seeds}}
        for key, bound in BOUNDS.items():
            pairs = [(s, after[(env, arm, s)][key], before[(env, arm, s)][key]) for s in seeds]
            pairs = [(s, a, b) for s, a, b in pairs if a is not None and b is not None]
            if not pairs:
                continue
            c = compare([a - b for _, a, b in pairs], PairedRule(bounds=BOUNDS), bound, [s for s, _, _ in pairs])
            word = {"held": "differs (new higher)", "contradicted": "differs (new lower)"}.get(c.verdict.value,
                                                                                           c.verdict.value)
            if word == "inconclusive" and c.mde is not None:
                word = f"inconclusive (detectable effect {c.mde:.3f})"
            group[key] = {**c.as_dict(), "reading": word}
        out[f"{env}/{arm}"] = group
    return out


def markdown(groups: dict[str, dict[str, Any]], old_label: str, footer: str,
             new_label: str = "this checkout") -> str:
    lines = [f"New ({new_label}) minus old ({old_label}), paired by seed:", "",
             "| group | outcome | seeds | old per seed | new per seed | mean new - old | 95% CI | 90% CI | bound "
             "| verdict |", "|---|---|---|---|---|---:|---|---|---:|---|"]
    for name, g in groups.items():
        for key in BOUNDS:
            c = g.get(key)
            if c is None:
                continue
            olds = ", ".join(f"{g['runs'][s]['old'][key]:.3f}" for s in c["seeds"])
            news = ", ".join(f"{g['runs'][s]['new'][key]:.3f}" for s in c["seeds"])
            ci95 = "-" if c["ci95"][0] is None else f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]"
            ci90 = "-" if c["ci90"][0] is None else f"[{c['ci90'][0]:+.3f}, {c['ci90'][1]:+.3f}]"
            lines.append(f"| {name} | {key} | {', '.join(map(str, c['seeds']))} | {olds} | {news} | "
                         f"{c['mean']:+.3f} | {ci95} | {ci90} | {c['bound']} | {c['reading']} |")
    return "\n".join(lines + ["", footer])


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import positive_int
    from ragen_core.apps.reproduce.runner import run_local
    from ragen_core.apps.reproduce.study import build_study, find_configs_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.study_equivalence", description=__doc__.split("\n")[0])
    parser.add_argument("--groups", default=",".join(DEFAULT_GROUPS), help="env/arm groups of the study to retrain")
    parser.add_argument("--seeds", default="20,21,22,23,24", help="seeds (comma-separated)")
    parser.add_argument("--workers", type=positive_int, default=2, help="runs at a time")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "study_equivalence", help="run folders")
    parser.add_argument("--old", type=Path, default=ROOT / "docs" / "reproduction" / "results.json",
                        help="the committed study's results.json (its per-run records are the old side)")
    parser.add_argument("--quick", action="store_true", help="accepted for run_all; runs the same (no quick form)")
    parser.add_argument("--new", type=Path, default=None,
                        help="a finished study's results.json as the new side (nothing is retrained)")
    parser.add_argument("--result", default="study_equivalence", help="write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    old = json.loads(args.old.read_text())["records"]
    load_before = load_average()
    t0 = time.perf_counter()
    if args.new is not None:
        new = [r for r in json.loads(args.new.read_text())["records"] if r["seed"] in seeds]
        groups = ({(r["env"], r["arm"]) for r in new} if args.groups == "all"
                  else {tuple(g.split("/", 1)) for g in args.groups.split(",") if g})
        new = [r for r in new if (r["env"], r["arm"]) in groups]
        if not new:
            parser.error(f"no record of {args.new} matches {sorted(groups)} on seeds {seeds}")
        where = args.new.resolve().relative_to(ROOT) if args.new.resolve().is_relative_to(ROOT) else args.new
        source = f"{len(new)} runs of the study in {where} (not retrained)"
    else:
        where = None
        groups = {tuple(g.split("/", 1)) for g in args.groups.split(",") if g}
        specs = [s for s in build_study(seeds, False, find_configs_dir(), args.out / "warm_cache")
                 if (s.env, s.arm) in groups]
        if not specs:
            parser.error(f"no run of the study matches {sorted(groups)}")
        new = run_local(specs, args.out / "runs", workers=args.workers, progress=True)
        source = (f"{len(specs)} runs retrained ({args.workers} at a time; finished runs kept from earlier calls)")
    result_groups = compare_groups(old, new)
    machine = describe_machine()
    wall = time.perf_counter() - t0
    footer = (f"{source}; {wall / 60:.0f} min of wall time this call; 1-minute load average {load_before} before, "
              f"{load_average()} after, on {machine['cores']} cores.")
    old_label = str(args.old.relative_to(ROOT)) if args.old.is_relative_to(ROOT) else str(args.old)
    md = markdown(result_groups, old_label, footer,
                  new_label="this checkout" if args.new is None else f"the study in {where}")
    write_result({"benchmark": "study_equivalence", "old": old_label, "groups": result_groups, "bounds": BOUNDS,
                  "seeds": seeds, "machine": machine, "markdown": md, "wall_s": wall},
                 RESULTS / f"{args.result}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
