"""`ragen reproduce [--experiment NAME] [--quick] [--seeds N] [--first-seed S] [--out DIR] [--warm-cache DIR]
[--workers N] [--ray ADDRESS] [--report-dir DIR]`.

Runs an experiment of the registry :data:`ragen_core.apps.reproduce.experiments.EXPERIMENTS` (default: the study
of :mod:`ragen_core.apps.reproduce.study`; resumable: finished runs are not re-run), then writes its report (the
study: ``reproduction.md``, its figures and ``results.json``) to ``--report-dir`` (default: ``--out``). Every flag
works for every experiment: nothing here depends on which one it is. ``--report-only``
starts nothing and reports the finished runs (listing the missing ones). ``--from-results RESULTS_JSON`` starts
nothing and reads no run folder: it re-analyses the run records kept in a ``results.json`` (``{"header",
"analysis", "records"}``) with this version's analysis and writes the report again (the records and the study's
header are kept as they are); a file of another shape, or a record whose fields are not of the kinds the analysis
reads (:func:`ragen_core.apps.reproduce.spec.record_problem`), is refused with one line naming what is wrong.
The report's paths are checked before any run starts. Ctrl-C (exit 130) or SIGTERM (a scheduler's stop, exit 143)
starts no further run, stops the running ones at their last checkpoint and says in one line what finished, what was
stopped and the command that continues the study.

Warm starts and their step-0 validation and probe go to one cache shared by every study and experiment
(``--warm-cache``, default :func:`ragen_core.training.warm_cache.default_warm_cache_dir`): its key covers every
input of a warm start, the code included, so a run of another study on the same (config, seed) reads the weights
it would have trained, and nothing else does.
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from ragen_core.apps.arguments import comma_list
from ragen_core.apps.reproduce.analysis import check_one_run_each
from ragen_core.apps.reproduce.experiments import EXPERIMENTS, own_records, write_experiment
from ragen_core.apps.reproduce.runner import Interrupted, design_cost, finished_records, run_local, run_ray
from ragen_core.apps.reproduce.spec import Experiment, RunRecord, build_runs, choose_seeds
from ragen_core.apps.reproduce.study import ENVS, find_configs_dir

__all__ = ["main", "build_parser", "from_results", "write_experiment", "default_configs_dir"]

PROG = "ragen reproduce"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The `ragen reproduce` parser, named `prog`."""
    p = argparse.ArgumentParser(prog=prog, description=(
        "Reproduce the paper's four findings at small scale (docs/reproduction.md): template collapse invisible to "
        "entropy and filtering against it (no filter / top-p / random drop, on the collapse-prone configs, judged "
        "on the held-out MI probe), MI vs entropy as predictors of success and the RV quartile ablation (on the "
        "learning configs); or another registered experiment (--experiment)."))
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: one seed, a third of the steps, under 30 minutes on 2 cores (no intervals)")
    p.add_argument("--seeds", type=int, default=None,
                   help="number of training seeds, S..S+N-1 (default: the experiment's, 5 for the study; --quick "
                        "1); the tuning seeds 100-199 are used only by a search and never by the others")
    p.add_argument("--first-seed", type=int, default=None,
                   help="S, the first training seed (default: the experiment's, 0 for the study): a study on seeds "
                        "that an earlier config's study did not see; S+N-1 is at most 2**32 - 1, the largest seed")
    p.add_argument("--out", default=None, help="run folders (default runs/reproduce[-quick] "
                                               "for the study, runs/experiment-NAME[-quick] for the others)")
    p.add_argument("--warm-cache", default=None, metavar="DIR",
                   help="the warm-start cache, shared by studies (default $RAGEN2_CACHE/warm_starts or "
                        "~/.cache/ragen2/warm_starts; its key covers config, seed and code, so sharing changes no "
                        "result); OUT/warm_cache keeps a study's own")
    p.add_argument("--workers", type=int, default=2, help="local runs at a time, one core each (default 2)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run every training run as a Ray task on this cluster ('auto', 'ray://host:10001', or "
                        "'local' for a single-node Ray instance here); needs pip install 'ragen2[ray]'")
    p.add_argument("--report-dir", default=None, help="where reproduction.md and reproduction/ go (default: --out)")
    p.add_argument("--configs-dir", default=None,
                   help="folder with the base configs (default: the checkout's configs/)")
    p.add_argument("--envs", default=None, help=f"comma-separated subset of the experiment's run groups (the "
                                                f"study's envs: {','.join(ENVS)}; default all)")
    p.add_argument("--report-only", action="store_true", help="start nothing: report the finished runs")
    p.add_argument("--experiment", default="study", metavar="NAME", choices=list(EXPERIMENTS),
                   help="what to run (default study); one of: " + "; ".join(
                       f"{name}: {exp.about} ({'tuning' if exp.seeds.kind == 'tuning' else 'fresh'} seeds, "
                       f"default {exp.seeds.first}..{exp.seeds.first + exp.seeds.count - 1})"
                       for name, exp in EXPERIMENTS.items()))
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
    """Run an experiment and write its report; 0, 1 (a run failed, or nothing to report), 2 (bad arguments), or 130
    / 143 (stopped by Ctrl-C / SIGTERM: 128 + the signal's number)."""
    args = build_parser(prog).parse_args(argv)
    problem = _argument_problem(args)
    if problem is not None:  # before anything is printed or created
        print(f"ragen reproduce: {problem}", file=sys.stderr)
        return 2
    if args.from_results:
        return from_results(args.from_results, args.report_dir)
    if args.configs_dir is None:
        args.configs_dir = default_configs_dir()
    exp = EXPERIMENTS[args.experiment]
    try:
        seeds = choose_seeds(exp, args.seeds, args.first_seed, args.quick)
    except ValueError as e:
        print(f"ragen reproduce: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or _default_out(exp, args.quick)).resolve()
    problem = report_problem(exp, args.report_dir or out)
    if problem is not None:  # before any run: a study of hours must not end in a traceback at its report
        print(f"ragen reproduce: {'--report-dir' if args.report_dir else '--out'} {problem}", file=sys.stderr)
        return 2
    try:
        groups = tuple(comma_list("--envs", args.envs, "env")) if args.envs is not None else None
        configs = find_configs_dir(args.configs_dir, groups if groups is not None else exp.groups())
        from ragen_core.training.warm_cache import default_warm_cache_dir  # imports torch: only when runs are built

        warm = Path(args.warm_cache).resolve() if args.warm_cache else default_warm_cache_dir()
        specs = build_runs(exp, seeds, configs, warm, quick=args.quick, groups=groups)
    except (FileNotFoundError, ValueError) as e:
        print(f"ragen reproduce: {e}", file=sys.stderr)
        return 2
    runs_dir = out / "runs"
    if not args.report_only:  # reporting reads what exists and creates nothing
        runs_dir.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "full"
    try:  # from the first line on, a Ctrl-C ends in one line (it used to land in this print as a traceback)
        print(f"{exp.name}: {len(specs)} runs ({mode}, seeds {seeds[0]}..{seeds[-1]}) in {runs_dir}",
              file=sys.stderr)
        failed = "" if args.report_only else _run(specs, runs_dir, args, ray=args.ray)
    except KeyboardInterrupt as e:  # one line, not a traceback: what is kept and how to go on
        # A plain KeyboardInterrupt came before any run started (run_local and run_ray raise Interrupted once
        # they have): every run not finished was not started.
        stop = e if isinstance(e, Interrupted) else Interrupted(
            not_started=[s.name for s in specs if not (runs_dir / s.name / "done.json").is_file()])
        if stop.failed:
            print("ragen reproduce: some runs failed before the stop:\n  " + "\n  ".join(stop.failed),
                  file=sys.stderr)
        print("\n" + interrupted_line(stop, len(finished_records(specs, runs_dir)[0]), len(specs), runs_dir,
                                      _continue_command(exp, args, seeds)), file=sys.stderr)
        return 128 + int(stop.signum)
    records, missing = finished_records(specs, runs_dir)
    if missing:
        print(f"ragen reproduce: {len(missing)} of {len(specs)} runs missing (reported as such): "
              + ", ".join(missing), file=sys.stderr)
        if any(" (unreadable" in m or " (another design)" in m for m in missing):
            print(f"ragen reproduce: a run folder listed as unreadable or of another design is not counted and not "
                  f"run again: remove it from {runs_dir} to run it again (or give this design its own --out)",
                  file=sys.stderr)
    if not records:
        print("ragen reproduce: no finished run to report", file=sys.stderr)
        return 1
    variants = {(v.same_runs_as or (v.group or exp.name, v.name))[1]: v for v in exp.variants}
    header = {
        "mode": mode,
        "command": _command(exp, args, seeds),
        "seeds": seeds,
        "n_runs": len(records),
        "n_missing": len(missing),
        "missing": missing,
        "core_minutes": sum(((r.get("sft_s") or 0.0) + (r.get("rl_s") or 0.0)) / 60.0 for r in records),
        "cost": design_cost(records, len(seeds)),
        "machine": _machine(),
        "arms": {name: {"overrides": list(variants[name].overrides), "purpose": variants[name].purpose}
                 for name in dict.fromkeys(s.arm for s in specs) if name in variants},
    }
    path = _write(exp, records, args.report_dir or str(out), header)
    if path is None:
        return 1
    print(f"report: {path}", file=sys.stderr)
    return 1 if failed else 0


def interrupted_line(stop: Interrupted, finished: int, total: int, runs_dir: Path, command: str) -> str:
    """The one line a stopped study prints: what stopped it, how many runs finished, which were stopped (each
    continues from its last checkpoint), how many were not started, and the command that continues."""
    why = "interrupted" if stop.signum == signal.SIGINT else f"stopped by {signal.Signals(stop.signum).name}"
    stopped = (f"stopped {len(stop.stopped)} at their last checkpoint ({', '.join(stop.stopped)})" if stop.stopped
               else "stopped none")
    return (f"ragen reproduce: {why}; no further run was started: {finished} of {total} runs finished (kept in "
            f"{runs_dir}), {stopped}, {len(stop.not_started)} not started. Continue with: {command}")


def report_problem(exp: Experiment, report_dir: str | Path) -> str | None:
    """Why the report of `exp` cannot be written to `report_dir` (one line, starting with the path), or None.

    The report is ``reproduction.md`` and ``reproduction/`` (results.json and figures) for the study, ``NAME.md``
    and ``NAME/`` for the other experiments (:func:`ragen_core.apps.reproduce.report.write_report`,
    :func:`ragen_core.apps.reproduce.experiments.write_experiment`): each folder must be a folder or not exist yet,
    each file must not be a folder. Existing report files are replaced (a report is regenerated, never edited)."""
    from ragen_core.apps.export import folder_problem

    root = Path(report_dir)
    stem = "reproduction" if exp.name == "study" else exp.name
    for folder in (root, root / stem):
        problem = folder_problem(folder)
        if problem is not None:
            return f"{folder}: {problem} (the report goes there)"
    for file in (root / f"{stem}.md", root / stem / "results.json"):
        if file.is_dir():
            return f"{file}: it is a folder, and the report writes a file of that name"
    return None


def _write(exp: Experiment, records: list, report_dir: str, header: dict) -> Path | None:
    """`exp`'s report of `records` in `report_dir`; None (the reason printed) when it cannot be written."""
    try:
        return exp.write(records, report_dir, header)
    except OSError as e:  # a full disk, a permission: the records are kept, so say how to write it again
        print(f"ragen reproduce: cannot write the report to {report_dir} ({type(e).__name__}: {e}); nothing of "
              "the runs is lost: `--report-only` (or `--from-results`) writes it again", file=sys.stderr)
        return None


def _argument_problem(args: argparse.Namespace) -> str | None:
    """The first argument that cannot work, as one line (None when every one can): checked before anything is
    printed or created, so that a mistake costs nothing and leaves nothing behind."""
    from ragen_core.apps.export import folder_problem

    if args.workers < 1:
        return f"--workers must be an integer >= 1; got {args.workers}"
    if args.envs is not None:
        if not args.envs.replace(",", "").strip():
            return "--envs: no env given (leave --envs out for all of them)"
        try:
            comma_list("--envs", args.envs, "env")  # an empty entry ('a,'): a stray comma, not an env named ''
        except ValueError as e:
            return str(e)
    for flag, folder in (("--out", args.out), ("--report-dir", args.report_dir), ("--warm-cache", args.warm_cache)):
        problem = folder_problem(folder) if folder is not None else None
        if problem is not None:
            return f"{flag} {folder}: {problem}"
    return None


def _default_out(exp: Experiment, quick: bool) -> str:
    base = "runs/reproduce" if exp.name == "study" else f"runs/experiment-{exp.name}"
    return base + ("-quick" if quick else "")


def _command(exp: Experiment, args: argparse.Namespace, seeds: list[int]) -> str:
    """The command that reruns or resumes these runs (flags at their defaults left out)."""
    n_default = exp.seeds.quick_count if args.quick else exp.seeds.count
    return ("ragen reproduce" + (f" --experiment {exp.name}" if exp.name != "study" else "")
            + (" --quick" if args.quick else "") + (f" --seeds {len(seeds)}" if len(seeds) != n_default else "")
            + (f" --first-seed {seeds[0]}" if seeds[0] != exp.seeds.first else "")
            + (f" --envs {args.envs}" if args.envs else "")
            # the folders as given: without them the command would run (not resume) the study in the defaults
            + (f" --out {args.out}" if args.out else "") + (f" --configs-dir {args.configs_dir}" if args.configs_dir
                                                             and args.configs_dir != default_configs_dir() else "")
            + (f" --report-dir {args.report_dir}" if args.report_dir else ""))


def _continue_command(exp: Experiment, args: argparse.Namespace, seeds: list[int]) -> str:
    """:func:`_command` with the flags that say where and how the runs ran (``--warm-cache``, ``--workers``,
    ``--ray``): the command that continues this study as it was run."""
    return (_command(exp, args, seeds) + (f" --warm-cache {args.warm_cache}" if args.warm_cache else "")
            + (f" --ray {args.ray}" if args.ray else f" --workers {args.workers}" if args.workers != 2 else ""))


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


def from_results(results: str | Path, report_dir: str | None = None) -> int:
    """Re-analyse the records of `results` (a results.json) and write the report of its experiment (``"experiment"``,
    default the study) to `report_dir` (default: the folder above the one holding `results`); 0, or 1 when the file
    cannot be read or holds no record.

    The records (read as :class:`ragen_core.apps.reproduce.spec.RunRecord`, which keeps them unchanged) and the
    header are kept; only the analysis is recomputed, so the report follows this version's rules. The header's
    ``regenerate`` is set to the command that repeats this from the new file."""
    path = Path(results)
    try:
        data = json.loads(path.read_text())
        problem = _results_problem(data)
        if problem is not None:
            raise ValueError(problem)
        records = [RunRecord.from_dict(r).to_dict() for r in data["records"]]
        header = dict(data["header"])
        exp = EXPERIMENTS[data.get("experiment") or "study"]
        # Two records of one run (a file merged by hand) are named here, with the file, not after the analysis.
        check_one_run_each(records if exp.name == "study" else own_records(exp.name, records))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"ragen reproduce: cannot read the records of {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not records:
        print(f"ragen reproduce: {path} holds no run record", file=sys.stderr)
        return 1
    absent = [k for k in STUDY_HEADER if k not in header] if exp.name == "study" else []
    if absent:  # the study's report prints each of them
        print(f"ragen reproduce: cannot read the records of {path}: its header lacks {absent} (a study's "
              f"results.json header has {list(STUDY_HEADER)})", file=sys.stderr)
        return 1
    target = report_dir if report_dir is not None else str(path.resolve().parent.parent)
    problem = report_problem(exp, target)
    if problem is not None:
        print(f"ragen reproduce: --report-dir {problem}", file=sys.stderr)
        return 1
    out = _write(exp, records, target, header)
    if out is None:
        return 1
    print(f"report: {out} (from the {len(records)} records of {path})", file=sys.stderr)
    return 0


#: The header keys a study's report prints (what :func:`main` writes into every results.json).
STUDY_HEADER = ("mode", "command", "seeds", "n_runs", "n_missing", "missing", "core_minutes", "machine", "arms")


def _results_problem(data: object) -> str | None:
    """Why `data` (a parsed results.json) is not ``{"header": {...}, "records": [...], "experiment": NAME}``
    (one line), or None; the records themselves are checked by :meth:`RunRecord.from_dict`."""
    if not isinstance(data, dict):
        return f"a results.json is a JSON object with \"header\" and \"records\"; got a JSON {type(data).__name__}"
    for key, kind in (("header", dict), ("records", list)):
        if not isinstance(data.get(key), kind):
            return f"its {key!r} must be a JSON {'object' if kind is dict else 'list'}; got {data.get(key)!r:.60}"
    name = data.get("experiment")
    if name is not None and name not in EXPERIMENTS:
        return f"its experiment {name!r} is not one of {', '.join(EXPERIMENTS)}"
    return None


def _machine() -> str:
    import os

    import torch

    from ragen_core.training.provenance import cpu_model

    cpu = cpu_model() or platform.processor() or platform.machine()
    return (f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, torch {torch.__version__}, "
            "one torch thread per run")


if __name__ == "__main__":
    sys.exit(main())
