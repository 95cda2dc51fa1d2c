"""`ragen reproduce [--quick] [--seeds N] [--out DIR] [--workers N] [--ray ADDRESS] [--report-dir DIR]`.

Runs the study of :mod:`ragen_core.apps.reproduce.study` (resumable: finished runs are not re-run), then writes
``reproduction.md``, its figures and ``results.json`` to ``--report-dir`` (default: ``--out``). ``--report-only``
starts nothing and reports the finished runs (listing the missing ones). ``--from-results RESULTS_JSON`` starts
nothing and reads no run folder: it re-analyses the run records kept in a ``results.json`` (``{"header",
"analysis", "records"}``) with this version's analysis and writes the report again (the records and the study's
header are kept as they are).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from ragen_core.apps.reproduce.analysis import analyse
from ragen_core.apps.reproduce.report import write_report
from ragen_core.apps.reproduce.runner import finished_records, run_local, run_ray
from ragen_core.apps.reproduce.study import ARMS, DEFAULT_SEEDS, ENVS, build_study, find_configs_dir, study_seeds

PROG = "ragen reproduce"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The `ragen reproduce` parser, named `prog`."""
    p = argparse.ArgumentParser(prog=prog, description=(
        "Reproduce the paper's four findings at small scale (docs/reproduction.md): template collapse invisible to "
        "entropy and filtering against it (no filter / top-p / random drop, on the collapse-prone configs, judged "
        "on the held-out MI probe), MI vs entropy as predictors of success and the RV quartile ablation (on the "
        "learning configs)."))
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: one seed, a third of the steps, under 30 minutes on 2 cores (no intervals)")
    p.add_argument("--seeds", type=int, default=None,
                   help=f"number of training seeds, S..S+N-1 (default {DEFAULT_SEEDS}; --quick 1); the tuning seeds "
                        "100-199 are never used")
    p.add_argument("--first-seed", type=int, default=0,
                   help="S, the first training seed (default 0): a study on seeds that an earlier config's study "
                        "did not see")
    p.add_argument("--out", default=None, help="run folders and the warm-start cache (default runs/reproduce[-quick])")
    p.add_argument("--workers", type=int, default=2, help="local runs at a time, one core each (default 2)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run every training run as a Ray task on this cluster ('auto', 'ray://host:10001', or "
                        "'local' for a single-node Ray instance here); needs pip install 'ragen2[ray]'")
    p.add_argument("--report-dir", default=None, help="where reproduction.md and reproduction/ go (default: --out)")
    p.add_argument("--configs-dir", default=None,
                   help="folder with the base configs (default: the checkout's configs/)")
    p.add_argument("--envs", default=None, help=f"comma-separated subset of {','.join(ENVS)} (default all)")
    p.add_argument("--report-only", action="store_true", help="start nothing: report the finished runs")
    p.add_argument("--experiment", default=None, metavar="NAME",
                   help="run a pre-registered collapse experiment instead of the findings study: "
                        "mechanism (fresh seeds), search (tuning seeds 100-199) or confirm (fresh seeds: the "
                        "search's candidates); docs/collapse.md section 7")
    p.add_argument("--from-results", metavar="RESULTS_JSON", default=None,
                   help="start nothing, read no run folder: regenerate the report from the run records kept in a "
                        "results.json (written to --report-dir, default: the folder that holds RESULTS_JSON's "
                        "reproduction/ folder)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def default_configs_dir() -> str | None:
    """The default of --configs-dir: None (the checkout's ``configs/``, :func:`find_configs_dir`) in a source
    checkout; outside one (an installed wheel) the shipped presets' folder, which holds the same base configs."""
    from ragen_core.apps.install import checkout_root

    if checkout_root() is not None:
        return None
    from ragen_core.training.presets import presets_dir

    folder = presets_dir()
    return str(folder) if folder is not None else None


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run the study and write its report; 0, 1 (a run failed, or nothing to report) or 2 (bad arguments)."""
    args = build_parser(prog).parse_args(argv)
    if args.from_results:
        return from_results(args.from_results, args.report_dir)
    if args.configs_dir is None:
        args.configs_dir = default_configs_dir()
    if args.experiment:
        return run_experiment(args)
    try:
        seeds = study_seeds(args.seeds, args.quick, args.first_seed)
    except ValueError as e:
        print(f"ragen reproduce: {e}", file=sys.stderr)
        return 2
    n_seeds = len(seeds)
    out = Path(args.out or ("runs/reproduce-quick" if args.quick else "runs/reproduce")).resolve()
    try:
        envs = tuple(e.strip() for e in args.envs.split(",")) if args.envs else None
        configs = find_configs_dir(args.configs_dir, envs)
        specs = build_study(seeds, args.quick, configs, out / "warm_cache", envs)
    except (FileNotFoundError, ValueError) as e:
        print(f"ragen reproduce: {e}", file=sys.stderr)
        return 2
    runs_dir = out / "runs"
    if not args.report_only:  # reporting reads what exists and creates nothing
        runs_dir.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "full"
    print(f"study: {len(specs)} runs ({mode}, seeds {seeds[0]}..{seeds[-1]}) in {runs_dir}", file=sys.stderr)
    failed = "" if args.report_only else _run(specs, runs_dir, args, ray=args.ray)
    records, missing = finished_records(specs, runs_dir)
    if missing:
        print(f"ragen reproduce: {len(missing)} of {len(specs)} runs missing (reported as such): "
              + ", ".join(missing), file=sys.stderr)
    if not records:
        print("ragen reproduce: no finished run to report", file=sys.stderr)
        return 1
    command = "ragen reproduce" + (" --quick" if args.quick else "") + (
        f" --seeds {n_seeds}" if n_seeds != (1 if args.quick else DEFAULT_SEEDS) else "") + (
        f" --first-seed {args.first_seed}" if args.first_seed else "") + (
        f" --envs {args.envs}" if args.envs else "") + (
        f" --report-dir {args.report_dir}" if args.report_dir else "")
    header = {
        "mode": "quick" if args.quick else "full",
        "command": command,
        "seeds": seeds,
        "n_runs": len(records),
        "n_missing": len(missing),
        "missing": missing,
        "core_minutes": sum(((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0)) / 60.0 for r in records),
        "machine": _machine(),
        "arms": {name: {"overrides": list(ARMS[name].overrides), "purpose": ARMS[name].purpose}
                 for name in dict.fromkeys(s.arm for s in specs)},
        "regenerate": _regenerate_command(args.report_dir or str(out)),
    }
    path = write_report({"analysis": analyse(records), "records": records}, args.report_dir or out, header)
    print(f"report: {path}", file=sys.stderr)
    return 1 if failed else 0


def _run(specs: list, runs_dir: Path, args: argparse.Namespace, ray: str | None = None) -> str:
    """Run the specs not finished yet: local workers (``--workers``), or Ray tasks on the cluster `ray`. Returns
    "" when every run finished, else the failures (also printed)."""
    try:
        if ray:
            run_ray(specs, runs_dir, ray, progress=not args.no_progress)
        else:
            run_local(specs, runs_dir, workers=args.workers, progress=not args.no_progress)
    except RuntimeError as e:
        print(f"ragen reproduce: {e}", file=sys.stderr)
        return str(e)
    return ""


def run_experiment(args: argparse.Namespace) -> int:
    """``--experiment NAME``: its runs on --first-seed .. (+ --seeds, default 5), then its report."""
    from ragen_core.apps.reproduce.experiments import build_experiment

    n = args.seeds if args.seeds is not None else DEFAULT_SEEDS
    seeds = list(range(args.first_seed, args.first_seed + n))
    out = Path(args.out or f"runs/experiment-{args.experiment}").resolve()
    configs = Path(args.configs_dir) if args.configs_dir else Path(__file__).resolve().parents[3] / "configs"
    try:
        specs = build_experiment(args.experiment, seeds, configs, out / "warm_cache")
    except ValueError as e:
        print(f"ragen reproduce: {e}", file=sys.stderr)
        return 2
    runs_dir = out / "runs"
    print(f"experiment {args.experiment}: {len(specs)} runs (seeds {seeds[0]}..{seeds[-1]}) in {runs_dir}",
          file=sys.stderr)
    failed = ""
    if not args.report_only:
        runs_dir.mkdir(parents=True, exist_ok=True)
        failed = _run(specs, runs_dir, args)
    records, missing = finished_records(specs, runs_dir)
    if not records:
        print("ragen reproduce: no finished run to report", file=sys.stderr)
        return 1
    header = {"command": f"ragen reproduce --experiment {args.experiment} --first-seed {args.first_seed} "
                         f"--seeds {n}", "seeds": seeds, "n_runs": len(records), "n_missing": len(missing),
              "missing": missing, "machine": _machine(),
              "core_minutes": sum(((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0)) / 60.0 for r in records)}
    path = write_experiment(args.experiment, records, args.report_dir or str(out), header)
    print(f"report: {path}", file=sys.stderr)
    return 1 if failed else 0


def write_experiment(name: str, records: list, report_dir: str | Path, header: dict) -> Path:
    """Analyse an experiment's records and write ``NAME.md``, ``NAME/results.json`` and ``NAME/curves.png``."""
    from ragen_core.apps.reproduce.experiments import analyse as analyse_experiment
    from ragen_core.apps.reproduce.experiments import figure, markdown

    folder = Path(report_dir)
    (folder / name).mkdir(parents=True, exist_ok=True)
    result = analyse_experiment(name, records)
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


def _regenerate_command(report_dir: str) -> str:
    """The command that regenerates a report written to `report_dir` from its results.json alone."""
    results = Path(report_dir) / "reproduction" / "results.json"
    return f"ragen reproduce --from-results {results} --report-dir {report_dir}"


def from_results(results: str | Path, report_dir: str | None = None) -> int:
    """Re-analyse the records of `results` (a results.json) and write the report to `report_dir` (default: the
    folder above the one holding `results`); 0, or 1 when the file cannot be read or holds no record.

    The records and the study's header are kept; only the analysis is recomputed, so the report follows this
    version's rules. The header's ``regenerate`` is set to the command that repeats this from the new file."""
    path = Path(results)
    try:
        data = json.loads(path.read_text())
        records, header = data["records"], dict(data["header"])
        if data.get("experiment"):
            target = report_dir if report_dir is not None else str(path.resolve().parent.parent)
            out = write_experiment(data["experiment"], records, target, header)
            print(f"report: {out} (from the {len(records)} records of {path})", file=sys.stderr)
            return 0
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"ragen reproduce: cannot read the records of {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not records:
        print(f"ragen reproduce: {path} holds no run record", file=sys.stderr)
        return 1
    target = report_dir if report_dir is not None else str(path.resolve().parent.parent)
    header["regenerate"] = _regenerate_command(target)
    out = write_report({"analysis": analyse(records), "records": records}, target, header)
    print(f"report: {out} (from the {len(records)} records of {path})", file=sys.stderr)
    return 0


def _machine() -> str:
    import os

    import torch

    from ragen_core.training.provenance import cpu_model

    cpu = cpu_model() or platform.processor() or platform.machine()
    return (f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, torch {torch.__version__}, "
            "one torch thread per run")


if __name__ == "__main__":
    sys.exit(main())
