"""The full study's time rebuilt from the per-phase profile: at 43a82f3, now, and at the arithmetic floor.

    python -m benchmarks.study_floor [--profile benchmarks/results/profile.json] [--first-seed 20] [--seeds 5]

``benchmarks/bench_profile.py`` measures, per shipped config, the seconds of one warm-start demonstration, one RL
step, one validation and one probe (at 43a82f3 and now, side by side) and the phase's dense arithmetic floor (its
floating-point work at the core's measured matrix rate). This script counts how many of each the ``ragen
reproduce`` study does (its 65 runs: :func:`ragen_core.apps.reproduce.study.build_study`, each run's own config)
and multiplies:

    core-seconds(phase) = sum over runs of  count(run, phase) * seconds per unit(config, phase)

with count = demonstrations of each distinct warm start (runs of one env and seed share it through the cache),
RL steps, validations (step 0, every ``eval.every`` and the last step) and probes (step 0 and every
``mi.probe_every``). The study's learning configs get the probe of 32 prompts (``PROBE_OVERRIDES``), which the
profile does not run on them; their probe is priced at the collapse config of the same env (the same prompt count,
group size and game; a stated approximation). Runs that stop early and steps whose traces grow are not modelled:
it is an estimate, which the measured totals of the study run check (docs/performance.md).

The point of the floor column: computing the same dense arithmetic, the study's wall time on 2 cores can be no less
than its floor core-minutes / 2. Only skipping work the floor counts (the lean forward's prompt tokens, say) goes
below it.

Writes ``benchmarks/results/study_floor.json`` with a Markdown table (``results:study_floor`` in
docs/performance.md).
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
PHASES = ("warm_start", "rl_steps", "validation", "probe")
#: Which profiled config prices a study env's probe when the profile has none for its own config.
PROBE_STAND_IN = {"sokoban_tiny": "collapse_sokoban", "frozenlake_tiny": "collapse_frozenlake"}


def measurement_points(steps: int, every: int, at_end: bool) -> int:
    """How many times a measurement taken at step 0 and every `every` steps of a `steps`-step run happens
    (plus once at the last step when `at_end` and the last step is not a multiple of `every`).

    >>> measurement_points(40, 20, True), measurement_points(45, 20, True), measurement_points(45, 20, False)
    (3, 4, 3)
    """
    if every <= 0:
        return 0
    points = 1 + steps // every
    if at_end and steps % every:
        points += 1
    return points


def unit_seconds(profile: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """config -> phase -> {"base", "now", "floor"}: seconds per unit (warm start: per demonstration)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c in profile["configs"]:
        phases = {}
        for p in c["phases"]:
            per = float(p.get("episodes") or 1) if p["phase"] == "warm_start" else 1.0
            phases[p["phase"]] = {"base": p.get("base_s", float("nan")) / per, "now": p["now_s"] / per,
                                  "floor": p["floor_s"] / per}
        out[c["config"]] = phases
    return out


def study_counts(first_seed: int, seeds: int) -> list[dict[str, Any]]:
    """Per run of the study: its config name and how many units of each phase it computes."""
    from ragen_core.apps.reproduce.study import build_study, find_configs_dir
    from ragen_core.training.config import load_config

    with tempfile.TemporaryDirectory() as cache:
        specs = build_study(list(range(first_seed, first_seed + seeds)), False, find_configs_dir(), Path(cache))
        rows, warm_seen = [], set()
        for spec in specs:
            cfg = load_config(spec.config, list(spec.overrides))
            name = Path(spec.config).stem
            warm_key = (name, spec.seed)  # the arms of one env and seed share the cached warm start
            demos = cfg.warm_start.sft_episodes if warm_key not in warm_seen else 0
            warm_seen.add(warm_key)
            probe_every = cfg.mi.probe_every or cfg.mi.every or 1
            rows.append({"run": spec.name, "config": name, "warm_start": demos, "rl_steps": cfg.run.steps,
                         "validation": measurement_points(cfg.run.steps, cfg.eval.every, True),
                         "probe": measurement_points(cfg.run.steps, probe_every, False) if cfg.mi.probe_prompts
                         else 0})
    return rows


def rebuild(counts: list[dict[str, Any]], units: dict[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Core-minutes per phase and in all, for the baseline, now and the floor; with the probe stand-ins used."""
    minutes: dict[str, dict[str, float]] = {k: defaultdict(float) for k in ("base", "now", "floor")}
    stand_ins = set()
    for row in counts:
        for phase in PHASES:
            n = row[phase]
            if not n:
                continue
            priced = row["config"]
            if phase not in units.get(priced, {}):
                priced = PROBE_STAND_IN.get(row["config"], priced)
                stand_ins.add(f"{row['config']} -> {priced}")
            if phase not in units.get(priced, {}):
                raise KeyError(f"the profile has no {phase} for {row['config']}: run benchmarks.bench_profile on it")
            for kind in minutes:
                minutes[kind][phase] += n * units[priced][phase][kind] / 60
    totals = {kind: sum(v.values()) for kind, v in minutes.items()}
    return {"phase_core_minutes": {k: dict(v) for k, v in minutes.items()}, "core_minutes": totals,
            "probe_stand_ins": sorted(stand_ins), "runs": len(counts)}


def markdown(result: dict[str, Any]) -> str:
    m, t = result["phase_core_minutes"], result["core_minutes"]
    labels = {"warm_start": "warm starts (demonstrations x SFT)", "rl_steps": "RL steps", "validation": "validations",
              "probe": "probes"}
    lines = [f"The study's {result['runs']} runs (seeds {result['seeds']}) rebuilt from the profile's per-unit "
             "seconds (counts of demonstrations, RL steps, validations and probes from the runs' own configs). "
             "Core-minutes:", "",
             f"| phase | {result['baseline']} | now | floor | now / floor |", "|---|---:|---:|---:|---:|"]
    for phase in PHASES:
        lines.append(f"| {labels[phase]} | {m['base'][phase]:.0f} | {m['now'][phase]:.0f} | {m['floor'][phase]:.0f} | "
                     f"{m['now'][phase] / m['floor'][phase]:.1f}x |")
    lines.append(f"| all | {t['base']:.0f} | {t['now']:.0f} | {t['floor']:.0f} | {t['now'] / t['floor']:.1f}x |")
    target = 60 * 2  # the target: the study within 60 minutes of wall time on the 2 cores
    lines += ["", f"On 2 cores, perfectly packed: {t['base'] / 2:.0f} min at {result['baseline']}, {t['now'] / 2:.0f} "
              f"min now, {t['floor'] / 2:.0f} min at the floor. A 60-minute study is {target} core-minutes, "
              f"{target / t['floor']:.2f}x the floor: every phase would have to run at that fraction of its dense "
              f"arithmetic at the full matrix rate (at most {t['base'] / t['floor']:.1f}x faster than "
              f"{result['baseline']} by computing the same numbers faster). Going further means computing less "
              "than the floor counts, as the lean forward does for prompt tokens (a phase below 1.0x in the profile)."]
    if result["probe_stand_ins"]:
        lines.append(f"Probes priced at a stand-in config: {', '.join(result['probe_stand_ins'])}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(RESULTS / "profile.json"))
    parser.add_argument("--first-seed", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    from benchmarks.readme_tables import write_result

    profile = json.loads(Path(args.profile).read_text())
    result = rebuild(study_counts(args.first_seed, args.seeds), unit_seconds(profile))
    result.update(benchmark="study_floor", baseline=profile["baseline"],
                  seeds=f"{args.first_seed}-{args.first_seed + args.seeds - 1}", machine=profile["machine"],
                  profile=str(Path(args.profile).relative_to(ROOT)) if Path(args.profile).is_relative_to(ROOT)
                  else args.profile)
    result["markdown"] = markdown(result)
    write_result(result, RESULTS / "study_floor.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
