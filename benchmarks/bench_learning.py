"""Learning curves of the shipped CPU configs, with and without SNR-aware filtering.

    python -m benchmarks.bench_learning [--quick] [--configs bandit,sokoban] [--seeds 0 1 2] [--workers 2] [--no-run]

Each (config, seed, variant) is one `ragen train` run in its own process (`--workers` at a time, one torch thread
each), in `--runs-dir` (default `runs/bench_learning[-quick]`, not committed). The runs are resumable: a finished
run (its `done.json` exists) is never re-run, a killed one continues from its last checkpoint; `--no-run`
starts nothing and aggregates the finished runs, naming the missing ones in the table. Variants:
`top_p` (the config as shipped: top-p filtering, rho = 0.9) and `no_filter` (`filter.enabled=false`).

Results: `benchmarks/results/learning.json` (`learning_quick.json` with `--quick`): per run the validation
curve (greedy success on the config's held-out seeds against the RL step; step 0 is after the warm start), per
config and variant the mean curve with its min-max band over seeds, the gain after RL with its 95% t-interval over
seeds, and a Markdown table for the README; `learning.png` plots the curves. A validation whose success is null (not
finite) stays a point of its run's curve with no value, a gap in the plot and the mean, and a seed without a value
at step 0 or at its last validation has no gain (the table says over how many seeds the gain is).
`sokoban_vision_image` is the vision config with the text withheld (`env.kwargs.obs_format="image"`). The full run
(13 configs x 3 seeds x 2 variants) takes hours; `--quick` (one seed, top-p only, `run.steps` / 3) is what
`make bench` runs.
A run of some configs (`--configs a,b`) keeps the other configs' runs of the results file it rewrites (each record
names the commit it was measured at), so the table grows config by config.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: name -> config file, in the order they are reported.
CONFIGS = {
    "bandit": "configs/bandit_tiny.toml",
    "sokoban": "configs/sokoban_tiny.toml",
    "frozenlake": "configs/frozenlake_tiny.toml",
    "countdown": "configs/countdown_tiny.toml",
    "pocketcube": "configs/pocketcube_tiny.toml",
    "searchqa": "configs/searchqa_tiny.toml",
    "webshop": "configs/webshop_tiny.toml",
    "sudoku": "configs/sudoku_tiny.toml",
    "game2048": "configs/game2048_tiny.toml",
    "math": "configs/math_tiny.toml",
    "code": "configs/code_tiny.toml",
    "sokoban_vision": "configs/sokoban_vision_tiny.toml",
    "sokoban_vision_image": "configs/sokoban_vision_tiny.toml",
}
#: name -> overrides of its config file: Sokoban with the text withheld (the image alone shows the level), which
#: shows whether the vision policy reads the picture; the shipped vision config's text carries the coordinates.
CONFIG_OVERRIDES: dict[str, list[str]] = {"sokoban_vision_image": ['env.kwargs.obs_format="image"']}
VARIANTS = {"top_p": [], "no_filter": ["filter.enabled=false"]}


def run_one(name: str, seed: int, variant: str, runs_dir: Path, extra: list[str], workers: int = 1) -> dict[str, Any]:
    """Train one (config, seed, variant) in a subprocess unless it is done; return its curve record, with the commit
    the run trained (its provenance.json, written when it started) and how many runs shared the cores with it."""
    run_dir = runs_dir / f"{name}-{variant}-s{seed}"
    done = run_dir / "done.json"
    if done.is_file():
        return json.loads(done.read_text())
    overrides = [f"run.seed={seed}", "run.progress=false", *CONFIG_OVERRIDES.get(name, []), *VARIANTS[variant],
                 *extra]
    if (run_dir / "checkpoints" / "latest.pt").is_file() and (run_dir / "config.toml").is_file():
        cmd = [sys.executable, "-m", "ragen_core.apps.train", "--resume", str(run_dir)]
    else:
        cmd = [sys.executable, "-m", "ragen_core.apps.train", str(ROOT / CONFIGS[name]), *overrides,
               "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(run_dir / "train.log", "a", encoding="utf-8") as log:
        status = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if status != 0:
        raise RuntimeError(f"{run_dir.name} failed (exit {status}); see {run_dir / 'train.log'}")
    record = curve_record(run_dir, name, seed, variant)
    record["wall_s"] = time.perf_counter() - start
    record["commit"] = run_commit(run_dir)
    record["workers"] = workers
    done.write_text(json.dumps(record))
    return record


def run_commit(run_dir: Path) -> str:
    """The commit a run trained: its provenance.json's (written at the start; "+changes" when tracked files
    differed), not the checkout's at the end, which a commit made while the run trained would misname. A run
    without one (older code) gets the checkout's."""
    prov = run_dir / "provenance.json"
    if prov.is_file():
        data = json.loads(prov.read_text())
        if data.get("commit"):
            return str(data["commit"])[:7] + ("+changes" if data.get("dirty") else "")
    from benchmarks.machine import _commit  # the checkout's commit, "+changes" when tracked files differ

    return _commit()


def _workers_text(records: list[dict[str, Any]]) -> str:
    """How many runs trained at a time, over the records (older records did not say)."""
    counts = sorted({int(r["workers"]) for r in records if r.get("workers")})
    unknown = sum(1 for r in records if not r.get("workers"))
    text = "/".join(str(c) for c in counts) + " at a time" if counts else ""
    if unknown:
        text += (", " if text else "") + f"not recorded for {unknown}"
    return text


def kept_records(previous: dict[str, Any] | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of an earlier results file that this run did not redo: a (config, variant, seed) measured now
    replaces the earlier record; configs no longer in CONFIGS are dropped."""
    if not previous:
        return []
    redone = {(r["config"], r["variant"], r["seed"]) for r in new}
    return [r for r in previous.get("runs", []) if r.get("config") in CONFIGS
            and (r["config"], r["variant"], r["seed"]) not in redone]


def _share(v: Any) -> float | None:
    """A validation success as a float; None for a null (a NaN is written as null) or anything not a finite number."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def curve_record(run_dir: Path, name: str, seed: int, variant: str) -> dict[str, Any]:
    """The validation curve and the run's headline numbers, read from its metrics.jsonl.

    The curve has a point at every step the run validated (a row with ``val/success``), a null value kept as a gap
    (None) at its own step: never dropped, which shortened the curve. ``before`` is the value at step 0 and
    ``after`` at the last validation, each None when that validation has no value (never an earlier one's)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [(int(r["step"]), _share(r["val/success"])) for r in rows if "val/success" in r]
    # Step 0 is validated once, after the warm start; keep the last record of each step.
    by_step = dict(curve)
    sft = next((r for r in rows if "sft/loss_last" in r), {})
    mi = [r["collapse/mi_seq_est"] for r in rows if isinstance(r.get("collapse/mi_seq_est"), (int, float))]
    acc = [r["collapse/retrieval_acc"] for r in rows if isinstance(r.get("collapse/retrieval_acc"), (int, float))]
    steps = [r for r in rows if "perf/step_s" in r]
    return {
        "config": name, "seed": seed, "variant": variant,
        "curve": sorted(by_step.items()),
        "before": by_step.get(0), "after": by_step[max(by_step)] if by_step else None,
        "steps": max((int(r["step"]) for r in steps), default=0),
        "sft_s": sft.get("perf/sft_s"),
        "rl_s": sum(float(r["perf/step_s"]) + float(r.get("perf/eval_s", 0.0) or 0.0) for r in steps),
        "mi_seq_first_last": [mi[0], mi[-1]] if mi else None,
        "retrieval_acc_first_last": [acc[0], acc[-1]] if acc else None,
    }


def aggregate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (config, variant): mean curve and min-max band over seeds (at the steps every seed reached), each seed's
    whole curve (a run stopped by its time cap ends earlier than the others), gain with its 95% t-interval.

    A null validation (None) is a gap: at a step where a seed's value is null the mean, min and max are None (a
    mean over the other seeds would be another quantity under the same line), and a seed without both a before
    and an after value has no gain; ``gain_seeds`` names the seeds the gain is over (``gain_mean`` and both bounds
    are None when no seed has both)."""
    from ragen_core.math.stats import mean_ci

    out: dict[str, Any] = {}
    for name in CONFIGS:
        for variant in VARIANTS:
            runs = sorted((r for r in records if r["config"] == name and r["variant"] == variant and r["curve"]),
                          key=lambda r: r["seed"])
            if not runs:
                continue
            steps = sorted(set.intersection(*(set(s for s, _ in r["curve"]) for r in runs)))
            curves = [dict(r["curve"]) for r in runs]
            at = [[c[s] for c in curves] for s in steps]
            whole = [r for r in runs if r["after"] is not None and r["before"] is not None]
            gain, lo, hi = mean_ci([r["after"] - r["before"] for r in whole]) if whole else (None, None, None)
            out[f"{name}/{variant}"] = {
                "seeds": [r["seed"] for r in runs],
                "steps": steps,
                "mean": [None if None in v else sum(v) / len(v) for v in at],
                "min": [None if None in v else min(v) for v in at],
                "max": [None if None in v else max(v) for v in at],
                "seed_curves": [[list(p) for p in r["curve"]] for r in runs],
                "before": [r["before"] for r in runs], "after": [r["after"] for r in runs],
                "gain_mean": gain, "gain_ci95": [lo, hi], "gain_seeds": [r["seed"] for r in whole],
                "minutes_per_run": sum((r["sft_s"] or 0.0) + r["rl_s"] for r in runs) / len(runs) / 60.0,
            }
    return out


def _commits_text(records: list[dict[str, Any]]) -> str:
    by_commit: dict[str, set[str]] = {}
    for r in records:
        by_commit.setdefault(r.get("commit") or "not recorded", set()).add(r["config"])
    return "; ".join(f"{c} ({', '.join(n for n in CONFIGS if n in names)})" for c, names in by_commit.items())


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| config | filter | seeds | after warm start (%) | after RL (%) | gain (points) | 95% CI of the gain | "
             "min per run |", "|---|---|---|---|---|---|---|---|"]
    for key, s in summary.items():
        name, variant = key.split("/")
        before = ", ".join(_pct(b) for b in s["before"])
        after = ", ".join(_pct(a) for a in s["after"])
        lo, hi = s["gain_ci95"]
        n_gain = len(s.get("gain_seeds", s["seeds"]))  # older summaries: every seed had a gain
        short = f" (over {n_gain} of {len(s['seeds'])} seeds: a null before or after)" if n_gain < len(s["seeds"]) \
            else ""
        if s["gain_mean"] is None:
            gain, ci = "n/a", "n/a (no seed with both values)"
        else:
            gain = f"{100 * s['gain_mean']:+.1f}{short}"
            ci = f"n/a ({n_gain} seed)" if lo is None or math.isnan(lo) else f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"
        lines.append(f"| {name} | {'top-p 0.9' if variant == 'top_p' else 'off'} | {len(s['seeds'])} | {before} | "
                     f"{after} | {gain} | {ci} | {s['minutes_per_run']:.1f} |")
    return "\n".join(lines)


def _gaps(values: list[float | None]) -> list[float]:
    """`values` with None as NaN, which matplotlib draws as a gap."""
    return [math.nan if v is None else float(v) for v in values]


_VARIANT_STYLE = {"top_p": ("top-p 0.9", "tab:blue"), "no_filter": ("no filter", "tab:orange")}


def _seeds_text(summary: dict[str, Any], name: str) -> str:
    """How many seeds each variant of config `name` has, for its panel's title: "3 seeds", or per variant when
    they differ ("top-p 0.9 3 seeds, no filter 2 seeds")."""
    counts = {v: len(summary[f"{name}/{v}"]["seeds"]) for v in VARIANTS if f"{name}/{v}" in summary}
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        return f"{n} seed{'s' if n != 1 else ''}"
    return ", ".join(f"{_VARIANT_STYLE[v][0]} {n} seed{'s' if n != 1 else ''}" for v, n in counts.items())


def plot(summary: dict[str, Any], path: Path) -> None:
    """One panel per config: per variant the mean validation curve over seeds at the steps every seed reached
    (a dot per step), the band between the lowest and the highest seed there (min-max, not an interval of the mean),
    and each seed's whole curve (thin, dashed: a run stopped by its time cap ends earlier). One legend, above the
    panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    names = [n for n in CONFIGS if any(k.startswith(n + "/") for k in summary)]
    cols = min(4, max(len(names), 1))
    rows = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows + 0.8), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        for variant, (_, color) in _VARIANT_STYLE.items():
            s = summary.get(f"{name}/{variant}")
            if not s:
                continue
            # a null (None) is NaN: a break in the line and the band, never a line across the missing step
            ax.plot(s["steps"], _gaps(s["mean"]), color=color, marker="o", ms=3)
            ax.fill_between(s["steps"], _gaps(s["min"]), _gaps(s["max"]), color=color, alpha=0.2)
            for curve in s.get("seed_curves", []):  # each seed to its own last step (thin, dashed)
                ax.plot([x for x, _ in curve], _gaps([y for _, y in curve]), color=color, lw=0.8, ls="--",
                        alpha=0.6)
        ax.set_title(f"{name} ({_seeds_text(summary, name)})")
        ax.set_xlabel("RL step (0 = after the warm start)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # validation steps are whole
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("validation success (greedy, held-out)")
    used = [v for v in _VARIANT_STYLE if any(k.endswith("/" + v) for k in summary)]
    handles: list[Any] = []
    for v in used:
        label, color = _VARIANT_STYLE[v]
        handles += [Line2D([], [], color=color, marker="o", ms=3, label=f"{label}: mean over seeds"),
                    Patch(color=color, alpha=0.2, label=f"{label}: min-max over seeds"),
                    Line2D([], [], color=color, lw=0.8, ls="--", label=f"{label}: each seed")]
    fig.suptitle("Validation success against the RL step; mean and min-max band at the steps every seed reached")
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0 - 0.45 / fig.get_figheight()),
               ncol=len(handles), fontsize=8, frameon=False)  # above the panels, never over a curve
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.7 / fig.get_figheight()))
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import non_negative_int, positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, a third of the steps (make bench)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names of CONFIGS")
    parser.add_argument("--seeds", type=non_negative_int, nargs="*", default=None,
                        help="training seeds (default 0 1 2)")
    parser.add_argument("--variants", default=None,
                        help="comma-separated: top_p,no_filter (default both; --quick: top_p)")
    parser.add_argument("--workers", type=positive_int, default=2, help="runs at a time (one core each)")
    parser.add_argument("--runs-dir", default=None, help="where the runs go (default runs/bench_learning[-quick])")
    parser.add_argument("--no-run", action="store_true",
                        help="start nothing: aggregate the finished runs only and list the missing ones")
    args = parser.parse_args(argv)
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown config(s) {unknown}; choose from {list(CONFIGS)}")
    variants = [v for v in (args.variants or ("top_p" if args.quick else ",".join(VARIANTS))).split(",") if v]
    if any(v not in VARIANTS for v in variants):
        parser.error(f"variants must be among {list(VARIANTS)}")
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    suffix = "_quick" if args.quick else ""
    runs_dir = Path(args.runs_dir or ROOT / "runs" / f"bench_learning{suffix.replace('_', '-')}")
    # Variant-major order: the filtered runs (the configs' own setting) finish first if the run is cut short.
    jobs = [(n, s, v) for v in variants for n in names for s in seeds]
    extra: dict[str, list[str]] = {}
    if args.quick:
        from ragen_core.training.config import load_config

        for n in names:
            cfg = load_config(ROOT / CONFIGS[n], CONFIG_OVERRIDES.get(n, []))
            extra[n] = [f"run.steps={max(1, cfg.run.steps // 3)}",
                        f"eval.every={max(1, cfg.eval.every // 3)}", f"run.max_minutes={cfg.run.max_minutes / 3:g}"]
    from tqdm.auto import tqdm

    start = time.perf_counter()
    records, failures = [], []
    missing: list[str] = []
    if args.no_run:
        for n, s, v in list(jobs):
            done = runs_dir / f"{n}-{v}-s{s}" / "done.json"
            if done.is_file():
                records.append(json.loads(done.read_text()))
            else:
                missing.append(f"{n}/{v}/s{s}")
        jobs = []
    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        futures = {pool.submit(run_one, n, s, v, runs_dir, extra.get(n, []), max(1, args.workers)): (n, s, v)
                   for n, s, v in jobs}
        for fut in tqdm(as_completed(futures), total=len(futures), desc="learning runs", unit="run"):
            try:
                records.append(fut.result())
            except Exception as exc:  # report and go on: the other runs still count
                failures.append(f"{futures[fut]}: {exc}")
                print(f"FAILED {futures[fut]}: {exc}", file=sys.stderr)
    out_json = RESULTS / f"learning{suffix}.json"
    previous = json.loads(out_json.read_text()) if out_json.is_file() else None
    records = [*records, *kept_records(previous, records)]
    summary = aggregate(records)
    run_minutes = sum((r.get("sft_s") or 0.0) + r["rl_s"] for r in records) / 60.0
    from benchmarks.machine import describe_machine

    RESULTS.mkdir(parents=True, exist_ok=True)
    png = RESULTS / f"learning{suffix}.png"
    plot(summary, png)
    result = {
        "benchmark": "learning", "quick": args.quick, "seeds": sorted({int(r["seed"]) for r in records}),
        "runs": sorted(
            records, key=lambda r: (list(CONFIGS).index(r["config"]), r["variant"], r["seed"])),
        "summary": summary, "wall_minutes": (time.perf_counter() - start) / 60.0, "failures": failures,
        "missing": missing, "run_minutes_total": run_minutes,
        "machine": describe_machine(),
        "markdown": markdown(summary)
        + f"\n\n{len(records)} runs, {run_minutes:.0f} minutes of one core in all (warm start + RL + "
        f"validation; {_workers_text(records)}); measured at commit(s) "
        f"{_commits_text(records)}. "
        f"Curves: `benchmarks/results/{png.name}`."
        + (f" Not run yet: {', '.join(missing)}." if missing else ""),
    }
    out_json.write_text(json.dumps(result, indent=1))
    print(markdown(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
