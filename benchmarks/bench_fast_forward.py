"""``model.fast_forward`` off against on: the same short runs with transformers' forward and with the lean forward.

    python -m benchmarks.bench_fast_forward [--quick] [--seeds 3] [--first-seed 300] [--steps 20]
                                            [--config collapse_sokoban] [--workers 2]

Each seed trains CONFIG (``configs/CONFIG.toml``) for STEPS RL steps twice from scratch, once with
``model.fast_forward=false`` (transformers' forward for the warm start's SFT, generation, the update and the
probe) and once with ``true`` (the lean forward of ``ragen_core/policy/fast_qwen2.py``): warm start included and
no warm-start cache, so each setting computes its own warm start; one torch thread a run, `workers` runs at a time.

The two settings compute the same function up to float rounding (tests/policy/test_fast_qwen2.py checks log-probs,
entropies, gradients and sampled tokens against transformers'), so a pair starts from nearly the same weights and
can drift apart only where rounding flips a sampled token. What this benchmark adds to those tests is the whole
run: per run, greedy validation success and the held-out probe's retrieval margin at step 0 (after the warm start)
and at the end; per outcome, the paired difference on - off over seeds, judged by the study's rule
(:func:`ragen_core.apps.reproduce.verdicts.compare`): **equivalent** when the 90% interval lies within +-10
points of success or +-0.15 of margin (the bounds of the study's per-seed equivalence), **differs** when the 95%
interval excludes 0, else inconclusive with the detectable effect. And the wall time of each run, off / on.

Writes ``benchmarks/results/fast_forward.json`` (``--quick``: one seed of 4 steps, ``fast_forward_quick.json``),
shown in docs/performance.md (``results:fast_forward``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import RESULTS, write_result

ROOT = Path(__file__).resolve().parent.parent
#: Equivalence bounds per outcome (success as a share: 10 points; the probe's retrieval margin: 0.15).
BOUNDS = {"success_end": 0.10, "margin_end": 0.15, "success_0": 0.10, "margin_0": 0.15}
SETTINGS = ("off", "on")


def run_one(config: Path, seed: int, steps: int, setting: str, out: Path,
            key: str = "model.fast_forward") -> dict[str, Any]:
    """Train one run (`setting` "off" or "on" of the boolean config `key`) into ``out/SETTING-sSEED``; its outcomes
    and wall seconds, also kept in ``out/SETTING-sSEED.record.json``.

    A benchmark kept in an ``--out`` folder resumes: a run whose record is there (of the same config, steps and key)
    is read, not trained again, so a long A/B can span sittings; a run folder without a record (a run that was
    killed) is trained again from scratch."""
    run_dir = out / f"{setting}-s{seed}"
    record_path = out / f"{setting}-s{seed}.record.json"
    design = {"config": config.name, "steps": steps, "key": key}
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if record.get("design") == design:
            return record["run"]
        raise RuntimeError(f"{record_path} is a run of another design ({record.get('design')}, not {design}): "
                           f"give this benchmark its own --out")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "ragen_core.apps.train", str(config), f"run.seed={seed}", f"run.steps={steps}",
           f"{key}={'true' if setting == 'on' else 'false'}", 'warm_start.cache_dir=""',
           "run.progress=false", "run.threads=1", "run.max_minutes=0", "run.save_every=0",
           "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    with open(out / f"{setting}-s{seed}.log", "w", encoding="utf-8") as log:
        status = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if status:
        raise RuntimeError(f"{run_dir.name} exited {status}: see {out / f'{setting}-s{seed}.log'}")
    run = {"seed": seed, "setting": setting, "wall_s": wall, **outcomes(run_dir / "metrics.jsonl")}
    record_path.write_text(json.dumps({"design": design, "run": run}))
    return run


def outcomes(metrics: Path) -> dict[str, float | None]:
    """Greedy validation success and the probe's retrieval margin at step 0 and at the run's last measurement, and
    the seconds of each phase (``phase_s``: the warm start, RL steps, validations and probes by the run's clocks)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    val = [(r["step"], r["val/success"]) for r in rows if "val/success" in r]
    probe = [(r["step"], r["probe/retrieval_margin"]) for r in rows if "probe/retrieval_margin" in r]

    def at(points: list[tuple[int, float]], first: bool) -> float | None:
        if not points:
            return None
        return float((points[0] if first else max(points))[1])

    def total(key: str) -> float:  # a phase's seconds by the run's own clocks
        return float(sum(r[key] for r in rows if isinstance(r.get(key), (int, float))))

    return {"success_0": at(val, True), "success_end": at(val, False), "margin_0": at(probe, True),
            "margin_end": at(probe, False), "steps": max((r["step"] for r in rows), default=0),
            "phase_s": {"warm start": total("perf/sft_s"), "RL steps": total("perf/step_s"),
                        "validations": total("perf/eval_s"), "probes": total("perf/probe_s")}}


def judge(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per outcome, on - off paired by seed (:func:`ragen_core.apps.reproduce.verdicts.compare`)."""
    from ragen_core.apps.reproduce.verdicts import PairedRule, compare

    by = {(r["setting"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs if ("on", r["seed"]) in by and ("off", r["seed"]) in by})
    out = {}
    for key, bound in BOUNDS.items():
        pairs = [(s, by[("on", s)][key], by[("off", s)][key]) for s in seeds]
        pairs = [(s, a, b) for s, a, b in pairs if a is not None and b is not None]
        c = compare([a - b for _, a, b in pairs], PairedRule(bounds=BOUNDS), bound, [s for s, _, _ in pairs])
        word = {"held": "differs (on higher)", "contradicted": "differs (on lower)"}.get(c.verdict.value,
                                                                                      c.verdict.value)
        out[key] = {**c.as_dict(), "reading": word}
    return out


def markdown(runs: list[dict[str, Any]], verdicts: dict[str, dict[str, Any]], config: str, steps: int,
             footer: str, key: str = "model.fast_forward") -> str:
    def f(x: float | None, spec: str = ".3f") -> str:
        return "-" if x is None else format(x, spec)

    lines = [f"`configs/{config}.toml`, {steps} RL steps from scratch (warm start included, no cache), per seed "
             f"once with `{key}=false` and once with `true`:", "",
             "| seed | setting | success step 0 | success end | margin step 0 | margin end | wall s |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in sorted(runs, key=lambda r: (r["seed"], r["setting"])):
        lines.append(f"| {r['seed']} | {r['setting']} | {f(r['success_0'])} | {f(r['success_end'])} | "
                     f"{f(r['margin_0'])} | {f(r['margin_end'])} | {r['wall_s']:.0f} |")
    lines += ["", "| outcome (on - off) | n | mean | 95% CI | 90% CI | bound | verdict |",
              "|---|---:|---:|---|---|---:|---|"]
    for key, c in verdicts.items():
        ci95 = "-" if c["ci95"][0] is None else f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]"
        ci90 = "-" if c["ci90"][0] is None else f"[{c['ci90'][0]:+.3f}, {c['ci90'][1]:+.3f}]"
        reading = c["reading"] if c["verdict"] != "inconclusive" or c["mde"] is None else (
            f"inconclusive (detectable effect {c['mde']:.3f})")
        lines.append(f"| {key} | {c['n']} | {f(c['mean'], '+.3f')} | {ci95} | {ci90} | {c['bound']} | {reading} |")
    off = sum(r["wall_s"] for r in runs if r["setting"] == "off")
    on = sum(r["wall_s"] for r in runs if r["setting"] == "on")
    lines += ["", f"Wall time of all runs: off {off:.0f} s, on {on:.0f} s (off / on {off / on:.2f}x). {footer}"]
    if all("phase_s" in r for r in runs):
        parts = []
        for phase in runs[0]["phase_s"]:
            a, b = (sum(r["phase_s"][phase] for r in runs if r["setting"] == s) for s in ("off", "on"))
            parts.append(f"{phase} {a:.0f} -> {b:.0f} s" + (f" ({a / b:.2f}x)" if b > 0 else ""))
        lines += ["", "Per phase, off -> on (the runs' own clocks, summed over the seeds): " + "; ".join(parts) + "."]
    return "\n".join(lines)


def build_parser(prog: str, description: str, seeds: int, first_seed: int) -> argparse.ArgumentParser:
    """The command line of an off/on benchmark (this one and :mod:`benchmarks.bench_fused_training`)."""
    from benchmarks.machine import non_negative_int, positive_int

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--seeds", type=positive_int, default=seeds, help="seeds (pairs of runs)")
    parser.add_argument("--first-seed", type=non_negative_int, default=first_seed,
                        help="the first seed (outside the study's 0-199)")
    parser.add_argument("--steps", type=positive_int, default=20, help="RL steps per run")
    parser.add_argument("--config", default="collapse_sokoban", help="a config of configs/ with a probe")
    parser.add_argument("--workers", type=positive_int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--out", type=Path, default=None, help="keep the run folders here (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="one seed of 4 steps (a smoke run)")
    return parser


def run_ab(parser: argparse.ArgumentParser, argv: list[str] | None, key: str, name: str) -> int:
    """Parse `argv`, train every seed with `key` off and on (each seed's two runs side by side with 2 workers), judge
    the pairs and write ``benchmarks/results/NAME.json`` (``NAME_quick.json`` for ``--quick``)."""
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = 1, 4
    config = ROOT / "configs" / f"{args.config}.toml"
    if not config.is_file():
        parser.error(f"no config {config}")
    load_before = load_average()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        jobs = [(s, setting) for s in range(args.first_seed, args.first_seed + args.seeds) for setting in SETTINGS]
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            runs = list(pool.map(lambda job: run_one(config, job[0], args.steps, job[1], out, key), jobs))
    verdicts = judge(runs)
    machine = describe_machine()
    footer = (f"{args.workers} runs at a time, one torch thread each; 1-minute load average {load_before} before, "
              f"{load_average()} after, on {machine['cores']} cores.")
    md = markdown(runs, verdicts, args.config, args.steps, footer, key)
    result = {"benchmark": name, "config": args.config, "steps": args.steps, "runs": runs,
              "verdicts": verdicts, "bounds": BOUNDS, "machine": machine, "markdown": md,
              "wall_s": time.perf_counter() - t0}
    write_result(result, RESULTS / (f"{name}_quick.json" if args.quick else f"{name}.json"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("python -m benchmarks.bench_fast_forward", __doc__.split("\n")[0], 3, 300)
    return run_ab(parser, argv, "model.fast_forward", "fast_forward")


if __name__ == "__main__":
    raise SystemExit(main())
