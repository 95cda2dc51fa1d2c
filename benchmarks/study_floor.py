"""The full study's time rebuilt from the per-phase profile: at 43a82f3, now, at the dense floor and at the lean floor.

    python -m benchmarks.study_floor [--profile benchmarks/results/profile.json] [--first-seed 20] [--seeds 5]
                                     [--out PATH]

``benchmarks/bench_profile.py`` measures, per shipped config, the seconds of one warm-start demonstration, one RL
step, one in-batch MI measurement, one validation and one probe (at 43a82f3 and now, side by side) and each
phase's two floors: the **dense floor** (its dense arithmetic at the core's MLP-shape matrix rate) and the **lean
floor** (only the work whose result is read, at the rates of the model's own shapes; see that module). This script
counts how many of each the ``ragen reproduce`` study does (:func:`ragen_core.apps.reproduce.study.build_study`,
each run's own config; 13 runs per seed) and multiplies:

    core-seconds(phase) = sum over runs of  count(run, phase) * seconds per unit(config, phase)

The counts, per column:

- **now** and the **dense floor**: what the code computes. Demonstrations of each distinct warm start (the runs of
  one env and seed share it through the cache), RL steps, in-batch MI measurements (every ``mi.every`` steps up to
  ``mi.until``), validations (step 0 and every ``eval.every`` steps up to ``eval.until``, and the last step) and
  probes (step 0 and every ``mi.probe_every`` up to ``mi.probe_until``, then the last step:
  :func:`ragen_core.training.probe.probe_due`), with the step-0 validation and probe once per (env, seed): the arms
  of a seed share them through the warm-start cache (``cached_step0``, keyed by
  :func:`ragen_core.training.warm_cache.step0_key`).
- **43a82f3**: the same, but every run computed its own step-0 validation and probe, and measured at every step of
  each cadence (it had no ``mi.probe_until``, ``mi.until`` or ``eval.until``).
- **lean floor**: only the measurements that a finding of the study's analysis
  (:func:`ragen_core.apps.reproduce.analysis.analyse`) reads, each priced at its lean floor (:data:`READS`: which
  measurements of which runs each finding reads, and why the others are dropped). Step 0 counts once per
  (env, seed), as now.

The study's learning configs get the probe of 32 prompts (``PROBE_OVERRIDES``), which the profile does not run on
them; their probe is priced at the collapse config of the same env (the same prompt count, group size and game; a
stated approximation). Runs that stop early and steps whose traces grow are not modelled, nor the batch each run
samples at its end for ``rollouts.jsonl`` (read by ``ragen diagnose``, by no finding): it is an estimate, which the
measured totals of the study run check (docs/performance.md).

Writes ``benchmarks/results/study_floor.json`` with a Markdown table (``results:study_floor`` in docs/performance.md);
a quick profile's rebuild goes to ``study_floor_quick.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("warm_start", "rl_steps", "mi", "validation", "probe")
#: The measurement phases, whose counts differ between the columns.
MEASUREMENTS = ("mi", "validation", "probe")
#: The columns: 43a82f3's code, now, the dense floor (now's counts), the lean floor (the read measurements).
KINDS = ("base", "now", "floor", "lean")
#: Which profiled config prices a study env's probe when the profile has none for its own config.
PROBE_STAND_IN = {"sokoban_tiny": "collapse_sokoban", "frozenlake_tiny": "collapse_frozenlake"}
#: The study's groups whose findings read the probe curves (findings 1 and 3), and those of findings 2 and 4.
COLLAPSE_ENVS = ("collapse_sokoban", "collapse_frozenlake")
LEARNING_ENVS = ("sokoban", "frozenlake")
#: Finding 3's arms (its comparisons: top-p minus no filter, top-p minus random) and finding 4's (the Sokoban
#: learning config's RV quartiles); tests check them against the analysis's defaults.
FINDING3_ARMS = ("top_p", "no_filter", "random")
QUARTILE_ENV = "sokoban"
QUARTILE_ARMS = ("rv_top_quartile", "rv_bottom_quartile")

_PAIRED_ANY_STEP = ("a partner that stops early makes the last step both runs have any step (runs do stop: "
                    "3 of the 5 bottom-quartile runs and one random-drop run at seeds 20-24)")
#: What each finding reads, per measurement, group of runs and rule: ``all`` measurements, ``none``, ``early``
#: (steps <= the analysis's EARLY_FRACTION of the planned steps), ``ends`` (step 0 and the last) or
#: ``early+ends``. The first matching entry applies (``arms`` None: every arm).
READS: tuple[dict[str, Any], ...] = (
    {"what": "probe", "envs": COLLAPSE_ENVS, "arms": None, "rule": "all",
     "reason": "finding 1's detector reads the whole curve (the margin's drop, its reference peak, the entropies at "
               "both); finding 3 the steps to the drop; the co-movement the within-run correlation"},
    {"what": "probe", "envs": (QUARTILE_ENV,), "arms": QUARTILE_ARMS, "rule": "all",
     "reason": "finding 4 compares the probe's MI-Seq / log N at the last step both arms of a seed have one; "
               + _PAIRED_ANY_STEP},
    {"what": "probe", "envs": LEARNING_ENVS, "arms": None, "rule": "early+ends",
     "reason": "finding 2 reads the early window (steps <= a quarter of the run); the per-run table the end margin; "
               "no finding reads the probes in between"},
    {"what": "validation", "envs": COLLAPSE_ENVS, "arms": FINDING3_ARMS, "rule": "all",
     "reason": "finding 3 compares success at the last evaluation both runs of a pair have; " + _PAIRED_ANY_STEP},
    {"what": "validation", "envs": (QUARTILE_ENV,), "arms": QUARTILE_ARMS, "rule": "all",
     "reason": "finding 4 compares success at equal steps; " + _PAIRED_ANY_STEP},
    {"what": "validation", "envs": COLLAPSE_ENVS + LEARNING_ENVS, "arms": None, "rule": "ends",
     "reason": "findings 1, 2 and the co-movement read the final success, the per-run table the success after the "
               "warm start; only the per-run table's peak reads the ones in between"},
    {"what": "mi", "envs": (QUARTILE_ENV,), "arms": QUARTILE_ARMS, "rule": "all",
     "reason": "finding 4 compares the in-batch MI-Seq / log P at equal steps; " + _PAIRED_ANY_STEP},
    {"what": "mi", "envs": LEARNING_ENVS, "arms": None, "rule": "early",
     "reason": "finding 2 reads the early window's in-batch values (MI-ZScore-EMA, MI-Seq, retrieval, H(Z|X))"},
    {"what": "mi", "envs": COLLAPSE_ENVS, "arms": None, "rule": "none",
     "reason": "findings 1 and 3 read the probe; no finding reads the collapse configs' in-batch MI (only the "
               "per-run table's early columns)"},
)


def measurement_steps(steps: int, every: int, at_end: bool) -> list[int]:
    """The steps at which a measurement taken at step 0 and every `every` steps of a `steps`-step run happens
    (plus the last step when `at_end` and it is not a multiple of `every`); none for `every` 0."""
    if every <= 0:
        return []
    taken = list(range(0, steps + 1, every))
    if at_end and taken[-1] != steps:
        taken.append(steps)
    return taken


def measurement_points(steps: int, every: int, at_end: bool) -> int:
    """How many times a measurement of :func:`measurement_steps` happens.

    >>> measurement_points(40, 20, True), measurement_points(45, 20, True), measurement_points(45, 20, False)
    (3, 4, 3)
    """
    return len(measurement_steps(steps, every, at_end))


def read_rule(env: str, arm: str, what: str) -> dict[str, Any]:
    """The entry of :data:`READS` for measurement `what` of a run of `env` and `arm`."""
    for entry in READS:
        if entry["what"] == what and env in entry["envs"] and (entry["arms"] is None or arm in entry["arms"]):
            return entry
    raise KeyError(f"no rule says which {what} measurements of {env}/{arm} a finding reads")


def read_steps(rule: str, taken: list[int], planned: int) -> list[int]:
    """The steps of `taken` that `rule` keeps (:data:`READS`) for a run of `planned` steps."""
    from ragen_core.apps.reproduce.analysis import EARLY_FRACTION

    if not taken or rule == "none":
        return []
    if rule == "all":
        return list(taken)
    keep = set()
    if "early" in rule:  # the analysis's early window: steps <= fraction x steps, at least the first measurement
        cut = max(EARLY_FRACTION * planned, taken[0])
        keep |= {s for s in taken if s <= cut}
    if "ends" in rule:
        keep |= {s for s in (0, taken[-1]) if s in taken}
    return sorted(keep)


def unit_seconds(profile: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """config -> phase -> {"base", "now", "floor", "lean"}: seconds per unit (warm start: per demonstration);
    "lean" None where the profile predates the lean floor."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for c in profile["configs"]:
        phases = {}
        for p in c["phases"]:
            per = float(p.get("episodes") or 1) if p["phase"] == "warm_start" else 1.0
            lean = p.get("lean_floor_s")
            phases[p["phase"]] = {"base": p.get("base_s", float("nan")) / per, "now": p["now_s"] / per,
                                  "floor": p["floor_s"] / per, "lean": None if lean is None else lean / per}
        out[c["config"]] = phases
    return out


def study_counts(first_seed: int, seeds: int) -> list[dict[str, Any]]:
    """Per run of the study: its group, arm, seed and config name and how many units of each phase it computes
    now (the phases' keys), at 43a82f3 (``base``: the measurements that differ) and at the lean floor (``read``),
    with the steps of each measurement it takes now (``taken``) and at 43a82f3 (``taken_base``: every step of the
    probe's cadence) and of those a finding reads (``read_steps``)."""
    from ragen_core.apps.reproduce.study import build_study, find_configs_dir
    from ragen_core.training.config import load_config
    from ragen_core.training.probe import cadence_due, probe_due
    from ragen_core.training.warm_cache import step0_key

    with tempfile.TemporaryDirectory() as cache:
        specs = build_study(list(range(first_seed, first_seed + seeds)), False, find_configs_dir(), Path(cache))
        rows, warm_seen, step0_seen = [], set(), set()
        for spec in specs:
            cfg = load_config(spec.config, list(spec.overrides))
            name = Path(spec.config).stem
            warm_key = (name, spec.seed)  # the arms of one env and seed share the cached warm start
            demos = cfg.warm_start.sft_episodes if warm_key not in warm_seen else 0
            warm_seen.add(warm_key)
            steps = cfg.run.steps
            probe_every = cfg.mi.probe_every or cfg.mi.every or 1
            taken = {
                "mi": [s for s in range(1, steps + 1) if cadence_due(s, cfg.mi.every, cfg.mi.until)],
                "validation": [s for s in measurement_steps(steps, cfg.eval.every, True)
                               if (s or cfg.eval.at_start) and (s == steps or cadence_due(s, cfg.eval.every,
                                                                                          cfg.eval.until))],
                "probe": [s for s in range(steps + 1) if probe_due(s, steps, probe_every, cfg.mi.probe_until)]
                if cfg.mi.probe_prompts else []}
            # 43a82f3 had no mi.probe_until, mi.until or eval.until: it measured at every step of each cadence.
            taken_base = {
                "mi": [s for s in range(1, steps + 1) if cadence_due(s, cfg.mi.every)],
                "validation": [s for s in measurement_steps(steps, cfg.eval.every, True) if s or cfg.eval.at_start],
                "probe": measurement_steps(steps, probe_every, False) if cfg.mi.probe_prompts else []}
            read = {what: read_steps(read_rule(spec.env, spec.arm, what)["rule"], taken[what], steps)
                    for what in MEASUREMENTS}
            # A step-0 measurement already taken by an arm of this (env, seed) is read from the cache.
            shared = {}
            for what in ("validation", "probe"):
                key = step0_key(cfg, what) if cfg.warm_start.cache_dir else None
                shared[what] = int(0 in taken[what] and key is not None and key in step0_seen)
                if 0 in taken[what] and key is not None:
                    step0_seen.add(key)
            rows.append({"run": spec.name, "env": spec.env, "arm": spec.arm, "seed": spec.seed, "config": name,
                         "warm_start": demos, "rl_steps": steps,
                         **{what: len(taken[what]) - shared.get(what, 0) for what in MEASUREMENTS},
                         "base": {what: len(taken_base[what]) for what in MEASUREMENTS},
                         "read": {what: len(read[what]) - (shared.get(what, 0) if 0 in read[what] else 0)
                                  for what in MEASUREMENTS},
                         "taken": taken, "read_steps": read,
                         "taken_base": taken_base})
    return rows


def _counts(row: dict[str, Any], kind: str) -> dict[str, int]:
    counts = {phase: row.get(phase, 0) for phase in PHASES}
    extra = row.get("base") if kind == "base" else row.get("read") if kind == "lean" else None
    return {**counts, **(extra or {})}


def rebuild(counts: list[dict[str, Any]], units: dict[str, dict[str, dict[str, float | None]]]) -> dict[str, Any]:
    """Core-minutes per phase and in all, for the baseline, now, the dense floor and the lean floor (None where the
    profile has no lean floor), per seed, with the probe stand-ins used and the phases the profile lacks."""
    minutes: dict[str, dict[str, float | None]] = {k: defaultdict(float) for k in KINDS}
    stand_ins, unpriced = set(), set()
    for row in counts:
        for kind in KINDS:
            for phase, n in _counts(row, kind).items():
                if not n:
                    continue
                priced = row["config"]
                if phase not in units.get(priced, {}):
                    priced = PROBE_STAND_IN.get(row["config"], priced)
                    if phase in units.get(priced, {}):
                        stand_ins.add(f"{row['config']} -> {priced}")
                if phase not in units.get(priced, {}):
                    if phase == "mi":  # a profile recorded before the in-batch MI was measured: said, not priced
                        unpriced.add(phase)
                        continue
                    raise KeyError(f"the profile has no {phase} for {row['config']}: run benchmarks.bench_profile "
                                   "on it")
                unit = units[priced][phase][kind]
                if unit is None or minutes[kind][phase] is None:
                    minutes[kind][phase] = None
                else:
                    minutes[kind][phase] += n * unit / 60
    totals = {kind: None if any(v is None for v in m.values()) else sum(m.values()) for kind, m in minutes.items()}
    seeds = len({row["seed"] for row in counts if "seed" in row}) or 1
    return {"phase_core_minutes": {k: dict(v) for k, v in minutes.items()}, "core_minutes": totals,
            "core_minutes_per_seed": {k: None if v is None else v / seeds for k, v in totals.items()},
            "n_seeds": seeds, "runs_per_seed": len(counts) / seeds, "probe_stand_ins": sorted(stand_ins),
            "unpriced": sorted(unpriced), "runs": len(counts)}


def dropped(counts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rule of :data:`READS` that drops anything: the measurements the code takes now and the lean floor does
    not count, per seed, with the runs and the reason."""
    out: dict[tuple, dict[str, Any]] = {}
    seeds = len({row["seed"] for row in counts}) or 1
    for row in counts:
        for what in MEASUREMENTS:
            n = row[what] - row["read"][what]
            if n <= 0:
                continue
            rule = read_rule(row["env"], row["arm"], what)
            key = (what, rule["rule"], rule["reason"])
            entry = out.setdefault(key, {"what": what, "rule": rule["rule"], "reason": rule["reason"], "runs": [],
                                         "dropped": 0, "of": 0})
            entry["dropped"] += n
            entry["of"] += row[what]
            name = f"{row['env']}/{row['arm']}"
            if name not in entry["runs"]:
                entry["runs"].append(name)
    return [{**e, "dropped_per_seed": e["dropped"] / seeds, "of_per_seed": e["of"] / seeds} for e in out.values()]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


LABELS = {"warm_start": "warm starts (demonstrations x SFT)", "rl_steps": "RL steps", "mi": "in-batch MI",
          "validation": "validations", "probe": "probes"}
WHAT_LABELS = {"mi": "in-batch MI measurements", "validation": "validations", "probe": "probes"}


def markdown(result: dict[str, Any]) -> str:
    m, t, ps = result["phase_core_minutes"], result["core_minutes"], result["core_minutes_per_seed"]
    per = result["runs_per_seed"]
    lines = [f"The study's {result['runs']} runs ({per:.0f} per seed, seeds {result['seeds']}) rebuilt from the "
             "profile's per-unit seconds (counts of demonstrations, RL steps, in-batch MI measurements, validations "
             "and probes from the runs' own configs). Core-minutes:", "",
             f"| phase | {result['baseline']} | now | dense floor | lean floor | now / dense floor | "
             "now / lean floor |", "|---|---:|---:|---:|---:|---:|---:|"]
    for phase in PHASES:
        if phase in result.get("unpriced", []):
            continue
        lines.append(f"| {LABELS[phase]} | {_num(m['base'][phase])} | {_num(m['now'][phase])} | "
                     f"{_num(m['floor'][phase])} | {_num(m['lean'][phase])} | "
                     f"{_ratio(m['now'][phase], m['floor'][phase])} | {_ratio(m['now'][phase], m['lean'][phase])} |")
    lines.append(f"| all | {_num(t['base'])} | {_num(t['now'])} | {_num(t['floor'])} | {_num(t['lean'])} | "
                 f"{_ratio(t['now'], t['floor'])} | {_ratio(t['now'], t['lean'])} |")
    lines.append(f"| per seed ({per:.0f} runs) | {_num(ps['base'])} | {_num(ps['now'])} | {_num(ps['floor'])} | "
                 f"{_num(ps['lean'])} | {_ratio(ps['now'], ps['floor'])} | {_ratio(ps['now'], ps['lean'])} |")
    lines += ["", f"Counts: now and the dense floor count what the code computes, with the step-0 validation and "
              f"probe once per (env, seed) (its arms read them from the warm-start cache); {result['baseline']} "
              "computed them in every run. The lean floor counts only the measurements a finding reads; per seed "
              "it leaves out:"]
    for d in result.get("dropped", []):
        lines.append(f"- {d['dropped_per_seed']:.0f} of {d['of_per_seed']:.0f} {WHAT_LABELS[d['what']]} of "
                     f"{', '.join(d['runs'])} (kept: {d['rule']}): {d['reason']}.")
    lines += ["", f"On 2 cores, perfectly packed: {_num(t['base'] / 2)} min at {result['baseline']}, "
              f"{_num(t['now'] / 2)} min now, {_num(t['floor'] / 2)} min at the dense floor, "
              f"{_num(None if t['lean'] is None else t['lean'] / 2)} min at the lean floor."]
    if t["lean"] is not None:
        over = [f"{LABELS[p]} {m['now'][p] / m['lean'][p]:.1f}x" for p in PHASES
                if m["lean"].get(p) and m["now"].get(p) and m["now"][p] > 1.5 * m["lean"][p]]
        lines.append("Phases above 1.5x their lean floor: " + (", ".join(over) if over else "none") + ".")
    else:
        lines.append("The profile predates the lean floor: rerun `python -m benchmarks.bench_profile` for it.")
    if result["probe_stand_ins"]:
        lines.append(f"Probes priced at a stand-in config: {', '.join(result['probe_stand_ins'])}.")
    if result.get("unpriced"):
        lines.append("Not in this profile, so not counted: the in-batch MI (rerun `python -m "
                     "benchmarks.bench_profile`).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, non_negative_int, positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(RESULTS / "profile.json"))
    parser.add_argument("--first-seed", type=non_negative_int, default=20)
    parser.add_argument("--seeds", type=positive_int, default=5)
    parser.add_argument("--out", default="", help="where to write (default: results/study_floor.json, or "
                                                  "study_floor_quick.json for a quick profile)")
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    from benchmarks.readme_tables import write_result

    profile = json.loads(Path(args.profile).read_text())
    counts = study_counts(args.first_seed, args.seeds)
    result = rebuild(counts, unit_seconds(profile))
    result.update(benchmark="study_floor", baseline=profile["baseline"], dropped=dropped(counts),
                  seeds=f"{args.first_seed}-{args.first_seed + args.seeds - 1}", machine=profile["machine"],
                  profile=str(Path(args.profile).relative_to(ROOT)) if Path(args.profile).is_relative_to(ROOT)
                  else args.profile)
    result["markdown"] = markdown(result)
    out = Path(args.out) if args.out else RESULTS / ("study_floor_quick.json" if profile.get("quick")
                                                     else "study_floor.json")
    write_result(result, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
