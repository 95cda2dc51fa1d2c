"""Mutation testing of the RL core's math with mutmut (``make mutation``).

For each module in :data:`MODULES` (the RL core's four math modules, and ``theory_reference``: the reference
rules of theory_checks, ``theory_checks/reference.py``) a workspace ``build/mutation/<module>/`` is laid out
with a copy of ``ragen_core`` and ``theory_checks``, the module's fast test files (plus ``tests/conftest.py``)
and a ``setup.cfg`` whose ``[mutmut]`` section mutates only that module and selects only those tests.
``mutmut run`` then generates every mutant of the module's functions (mutmut 3 mutates function bodies, not
module-level constants),
runs the tests that cover each mutated function, and records killed / survived / timeout / no tests.

Results go to ``mutation/results.json`` (counts and every surviving mutant with its diff, per run label:
``initial`` before the mutation-killing tests ``tests/<package>/test_<module>_mutants.py`` existed, ``final`` with
them). ``--report`` writes ``docs/theory_report/mutation.md`` from it and from ``mutation/equivalent.json``
(the argument for each equivalent mutant, with the mutation's own lines: :func:`equivalence_argument`); ``--check``
exits 1 when a survivor has no argument written for its current mutation or a mutant was not run. ``--resume``
keeps the verdicts already in a workspace (see :func:`run_module`), so a run interrupted for time continues where it
stopped; ``--collect`` only gathers what the workspaces hold.

Usage: ``python mutation/run_mutmut.py [--modules filtering advantages losses mi] [--label initial|final]
[--resume [--rerun-only]] [--collect] [--check] [--report PATH] [--timeout-multiplier X]``.
Run it under ``nice``: a module takes from tens of minutes (one free core) to hours (a shared, loaded machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutation"
EQUIVALENT_FILE = Path(__file__).resolve().parent / "equivalent.json"
#: kept in the repository: the initial run (before the mutation-killing tests) cannot be redone later
RESULTS_FILE = Path(__file__).resolve().parent / "results.json"

#: module -> the fast test files that exercise it (its unit tests, the mutation-killing tests, and the
#: reference rules of theory_checks that compare against it)
MODULES: dict[str, list[str]] = {
    "filtering": ["tests/math/test_filtering.py", "tests/math/test_filtering_mutants.py",
                  "tests/math/test_filtering_select_mutants.py", "tests/math/test_select_rows.py",
                  "tests/math/test_filter_spec.py", "tests/math/test_edge_inputs.py",
                  "tests/math/test_math_inputs_s67.py", "tests/math/test_math_inputs_s67b.py",
                  "tests/math/test_complex_inputs_s70.py", "tests/math/test_math_shapes_s70.py",
                  "tests/math/test_filtering_checks_mutants.py"],
    "advantages": ["tests/math/test_advantages.py", "tests/math/test_losses.py",
                   "tests/math/test_advantages_mutants.py", "tests/math/test_math_inputs_s67.py",
                   "tests/math/test_math_inputs_s67b.py", "tests/math/test_complex_inputs_s70.py",
                   "tests/math/test_math_shapes_s70.py", "tests/math/test_advantages_edges_mutants.py"],
    "losses": ["tests/math/test_losses.py", "tests/math/test_losses_mutants.py",
               "tests/math/test_losses_boundary_mutants.py", "tests/math/test_math_inputs_s67.py",
               "tests/math/test_math_inputs_s67b.py", "tests/math/test_complex_inputs_s70.py",
               "tests/math/test_math_shapes_s70.py"],
    "mi": ["tests/math/test_mi.py", "tests/math/test_mi_ties.py", "tests/math/test_cross_score.py",
           "tests/math/test_mi_mutants.py", "tests/math/test_mi_cache_mutants.py", "tests/math/test_mi_null.py",
           "tests/math/test_metrics.py", "tests/math/test_edge_inputs.py", "tests/math/test_math_inputs_s67.py",
           "tests/math/test_math_inputs_s67b.py", "tests/math/test_complex_inputs_s70.py",
           "tests/math/test_mi_null_mutants.py", "tests/math/test_mi_positions_mutants.py",
           "tests/math/test_mi_inputs_mutants.py"],
    "theory_reference": ["tests/theory/test_theory_reference.py", "tests/theory/test_theory_reference_mutants.py"],
}


def mutants_test_file(module: str) -> str:
    """The mutation-killing test file of ``module`` (``tests/<package>/test_<module>_mutants.py``), as listed in
    :data:`MODULES`: the tests mirror the packages, so the folder depends on the module."""
    return next(t for t in MODULES[module] if t.endswith(f"/test_{module}_mutants.py"))

#: module -> the file mutmut mutates (package/name.py)
SOURCES: dict[str, str] = {m: f"ragen_core/math/{m}.py" for m in MODULES if m != "theory_reference"}
SOURCES["theory_reference"] = "theory_checks/reference.py"
#: the packages copied into every workspace (theory_checks' reference tests import the core)
PACKAGES = ("ragen_core", "theory_checks")

SETUP_CFG = """[mutmut]
source_paths = {package}
only_mutate = {source}
pytest_add_cli_args =
    -p
    no:cacheprovider
pytest_add_cli_args_test_selection =
{tests}
process_isolation = forkserver
timeout_multiplier = {timeout_multiplier}
"""


#: mutmut's default is 15: a mutant's test run may take 2 x 15 x (its clean time + 1 s) of CPU time and half of
#: that in *wall-clock* time. On a shared machine where mutmut runs under nice, a test run can take 30 times its
#: clean time in wall-clock time, and passing runs were reported as timeouts; the modules have no loop a mutant
#: could make endless (no ``while``; every loop runs over a tensor dimension), so a generous limit costs nothing.
TIMEOUT_MULTIPLIER = 200.0


def _selection_hash(tests: list[str]) -> str:
    """mutmut's fingerprint of ``pytest_add_cli_args_test_selection`` (``Config.config_fingerprint``)."""
    return hashlib.sha256(repr(tuple(tests)).encode()).hexdigest()[:12]


def _keep_kills_when_tests_were_added(ws: Path, tests: list[str]) -> None:
    """When the only change to a workspace's tests is new test files (every old file byte-identical to the
    repository's), keep mutmut's verdicts: a mutant killed by a subset of the tests is killed by all of them.

    mutmut resets every verdict when the list of test files changes. Here the stored fingerprint of that list is
    set to the new list's, so mutmut keeps the kills, collects the timings and coverage of the new tests as it
    does for tests added to an existing file, and runs every mutant without a verdict; :func:`run_module` then
    re-runs every mutant that is not killed. Anything else (an old test file changed or dropped) leaves the
    fingerprint alone, and mutmut starts over.
    """
    stats_file = ws / "mutants" / "mutmut-stats.json"
    if not stats_file.exists() or not (ws / "setup.cfg").exists():
        return
    import configparser

    cp = configparser.ConfigParser()
    cp.read(ws / "setup.cfg")
    old = [x for x in cp.get("mutmut", "pytest_add_cli_args_test_selection", fallback="").split("\n") if x]
    stats = json.loads(stats_file.read_text())
    fp = stats.get("config_fingerprint", {})
    if old == tests or fp.get("test_selection") != _selection_hash(old) or not set(old) < set(tests):
        return
    if any(not (ws / t).exists() or (ws / t).read_bytes() != (ROOT / t).read_bytes() for t in old):
        return
    fp["test_selection"] = _selection_hash(tests)
    stats_file.write_text(json.dumps(stats, indent=4))
    print(f"{ws.name}: test files added ({', '.join(sorted(set(tests) - set(old)))}); the kills of the earlier run "
          "are kept", flush=True)


def _layout(module: str, resume: bool = False, timeout_multiplier: float = TIMEOUT_MULTIPLIER) -> Path:
    """Write the workspace of ``module``. ``resume`` keeps mutmut's results (``mutants/``) and refreshes the
    sources and tests: mutmut then re-tests only the mutants of functions whose code changed (it hashes each
    function) and, when the timeout setting changed, the timeouts; a change of the test file list resets all."""
    ws = WORK / module
    if ws.exists() and not resume:
        shutil.rmtree(ws)
    tests = [t for t in MODULES[module] if (ROOT / t).exists()]
    if resume:
        _keep_kills_when_tests_were_added(ws, tests)
    (ws / "tests").mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        if (ws / package).exists():
            shutil.rmtree(ws / package)
        shutil.copytree(ROOT / package, ws / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", ws / "pyproject.toml")  # pytest markers and warning filters
    shutil.copy2(ROOT / "tests" / "conftest.py", ws / "tests" / "conftest.py")
    for t in tests:
        (ws / t).parent.mkdir(parents=True, exist_ok=True)  # tests/<package>/: the tests mirror the packages
        shutil.copy2(ROOT / t, ws / t)
    cfg = SETUP_CFG.format(package=SOURCES[module].split("/")[0], source=SOURCES[module],
                           tests="\n".join(f"    {t}" for t in tests), timeout_multiplier=timeout_multiplier)
    if not (ws / "setup.cfg").exists() or (ws / "setup.cfg").read_text() != cfg:
        (ws / "setup.cfg").write_text(cfg)
    return ws


def _mutmut(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "mutmut"
    env = dict(os.environ, CI="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    return subprocess.run([str(exe), *args], cwd=ws, env=env, text=True, capture_output=True)


#: mutmut's exit codes in the .meta file: 1 killed, 0 survived, -24 (SIGXCPU) timeout, None not run
_STATUS = {1: "killed", 0: "survived", -24: "timeout", None: "not checked", 33: "no tests", 34: "skipped"}


def collect(module: str) -> dict[str, object]:
    """Counts and survivors (with a diff of the mutated function) from a workspace's mutmut metadata; works on a
    partial run (mutants not run yet are counted as ``not checked``)."""
    import ast

    ws = WORK / module
    meta = json.loads((ws / "mutants" / f"{SOURCES[module]}.meta").read_text())["exit_code_by_key"]
    src = (ws / "mutants" / SOURCES[module]).read_text()
    lines = src.splitlines()  # (ast.get_source_segment re-splits the whole file per call: minutes on 1000s of defs)
    funcs = {n.name: "\n".join(lines[n.lineno - 1:n.end_lineno]) for n in ast.walk(ast.parse(src))
             if isinstance(n, ast.FunctionDef)}
    counts: dict[str, int] = {}
    survivors = []
    not_checked = []
    mutations = {}  # every mutant's changed lines: tells whether a name still means the same mutation later
    for name, code in meta.items():
        status = _STATUS.get(code, f"exit {code}")
        counts[status] = counts.get(status, 0) + 1
        if status == "not checked":
            not_checked.append(name)
        short = name.split(".")[-1]
        orig = funcs.get(re.sub(r"__mutmut_\d+$", "", short) + "__mutmut_orig", "")
        diff = mutant_diff(orig, funcs.get(short, ""))
        mutations[name] = _changed_lines(diff)
        if status in ("survived", "no tests", "skipped", "timeout"):
            survivors.append({"name": name, "status": status, "diff": diff})
    total = len(meta)
    detected = counts.get("killed", 0)  # a timeout is not counted as a kill (see the notes of the report)
    return {"module": module, "total": total, "killed": detected, "counts": counts,
            "checked": total - counts.get("not checked", 0), "score": detected / total if total else float("nan"),
            "survivors": survivors, "not_checked": not_checked, "mutations": mutations}


def run_module(module: str, resume: bool = False, timeout_multiplier: float = TIMEOUT_MULTIPLIER,
               rerun_only: bool = False, children: int = 1) -> dict[str, object]:
    """Lay out the workspace, run mutmut, and return counts and survivors (name, status, diff).

    With ``resume`` the verdicts of an earlier run in the workspace are kept for unchanged functions (a mutant
    killed stays killed: tests were only added since). First every mutant that was not killed (survived,
    timeout, no tests) is run again with the current tests (the most informative runs when time is short), then,
    unless ``rerun_only``, every mutant without a verdict (new, from a changed function, or never reached).
    """
    ws = _layout(module, resume=resume, timeout_multiplier=timeout_multiplier)
    meta = ws / "mutants" / f"{SOURCES[module]}.meta"
    t0 = time.monotonic()

    def log(title: str, run: subprocess.CompletedProcess[str]) -> None:
        with open(ws / "mutmut-run.log", "a") as f:
            f.write(f"\n--- {title} ---\n{run.stdout}\n{run.stderr}")

    if resume and meta.exists():
        again = [s["name"] for s in collect(module)["survivors"]]
        if again:
            log("re-run of the mutants not killed", _mutmut(ws, "run", "--max-children", str(children), *again))
    if not (resume and rerun_only):
        log("run of the mutants without a verdict", _mutmut(ws, "run", "--max-children", str(children)))
    wall = time.monotonic() - t0
    out = collect(module)
    if out["checked"] == 0:
        raise RuntimeError(f"mutmut did not run any mutant of {module}; see {ws / 'mutmut-run.log'}")
    out["run_s"] = round(wall, 1)
    out["resumed"] = resume
    out["timeout_multiplier"] = timeout_multiplier
    return out


def mutant_diff(original: str, mutant: str) -> str:
    """The unified diff (no context lines) from a function's original code to its mutant's, as mutmut writes both
    (``def x_f__mutmut_orig(...)`` and ``def x_f__mutmut_3(...)``): the signature included, the names left out."""
    import difflib

    return "\n".join(difflib.unified_diff(_unnamed(original), _unnamed(mutant), lineterm="", n=0))


def _unnamed(code: str) -> list[str]:
    """A mutant's (or the original's) lines with the function's own name taken out of its ``def`` line
    (``x_f__mutmut_3(`` and ``x_f__mutmut_orig(`` both become ``x_f(``), so that a mutation of the signature (a
    default argument: ``n_perm: int = 9999`` -> ``10000``) shows in the diff and an unchanged signature does not."""
    lines = code.splitlines()
    if lines:
        lines[0] = re.sub(r"__mutmut_(?:orig|\d+)\(", "(", lines[0], count=1)
    return lines


def equivalence_argument(equivalent: dict[str, Any], name: str, mutation: str) -> str | None:
    """The recorded argument that mutant ``name`` is equivalent, if it was written for this very mutation, else None.

    mutmut numbers the mutants of a function in order, so when a function changes, ``..._mutmut_19`` can name
    another mutation than the one an argument was written for. Each entry of ``mutation/equivalent.json`` is
    ``{"mutation": the - / + lines of the mutant, "why": the argument}``, and the argument counts only while those
    lines are the mutant's lines now (:func:`stale_arguments` lists the others)."""
    entry = equivalent.get(name)
    if not isinstance(entry, dict) or entry.get("mutation") != mutation:
        return None
    return str(entry["why"])


def stale_arguments(equivalent: dict[str, Any], survivors: list[dict[str, Any]]) -> list[str]:
    """The survivors that have an argument in ``equivalent`` written for another mutation (the function changed and
    its mutants were renumbered): each needs a new verdict."""
    return [s["name"] for s in survivors if s["name"] in equivalent
            and equivalence_argument(equivalent, s["name"], _changed_lines(s["diff"])) is None]


def _changed_lines(diff: str) -> str:
    """The - / + lines of a mutmut diff (without the file headers)."""
    keep = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return "\n".join(keep)


def _machine() -> str:
    """One line on where the runs ran (CPU model and cores, Python, torch, mutmut)."""
    import importlib.metadata
    import platform

    from ragen_core.training.provenance import cpu_model

    cpu = cpu_model() or "unknown CPU"
    try:
        import torch

        torch_v = torch.__version__
    except ImportError:  # pragma: no cover
        torch_v = "not installed"
    return (f"{os.cpu_count()}-core {cpu}, shared with other jobs (mutmut runs one mutant at a time per module; "
            f"run times are wall-clock on that shared machine); Python {platform.python_version()}, torch {torch_v}, "
            f"mutmut {importlib.metadata.version('mutmut')}")


def _argued(equivalent: dict[str, Any], survivor: dict[str, Any]) -> str | None:
    """The equivalence argument of a survivor (its name and diff), if one was written for its mutation."""
    return equivalence_argument(equivalent, survivor["name"], _changed_lines(survivor["diff"]))


def _minutes(r: dict[str, object]) -> str:
    run_s = r.get("run_s_total", r.get("run_s"))
    return "-" if run_s is None else f"{float(run_s) / 60:.0f} min"


def report_md(results: dict[str, dict[str, object]], equivalent: dict[str, Any]) -> str:
    """docs/theory_report/mutation.md: scores before and after the mutation-killing tests, and every mutant that
    survived the unit tests with what became of it (killed by a new test, or equivalent with the argument)."""
    initial, final = results.get("initial", {}), results.get("final", {})
    modules = list(MODULES)
    lines = [
        "# Mutation testing of the RL core and of theory_checks' reference rules (mutmut)",
        "",
        "Generated by `python mutation/run_mutmut.py --report docs/theory_report/mutation.md` (`make mutation`",
        "runs every module and fails on a mutant that is neither killed nor shown equivalent). mutmut generates",
        "every mutant of the functions of each module and runs it against that module's fast test files (the",
        "tests mutmut finds covering the mutated function), in a workspace under `build/mutation/`. *initial*: the",
        "unit tests as they were, before the mutation-killing tests existed (`--label initial`); *final*: with the",
        "mutation-killing tests (`tests/<package>/test_<module>_mutants.py`). A mutant is *equivalent* when no",
        "input can tell it from the original; each one is listed below with the argument",
        "(`mutation/equivalent.json`). The score is killed / mutants; a timeout is not counted as a kill.",
        "",
        f"Machine: {_machine()}.",
        "",
        "| module | test files | mutants | killed, initial | killed, final | equivalent | timeouts | "
        "surviving, not equivalent | run time (recorded runs) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def score(r: dict[str, object] | None) -> str:
        if not r or not r["total"]:
            return "not run"
        checked = r.get("checked", r["total"])
        if checked < r["total"]:
            return (f"{r['killed']}/{checked} of the mutants run ({checked} of {r['total']} run, "
                    f"{r['killed'] / checked:.1%})")
        return f"{r['killed']}/{r['total']} ({r['killed'] / r['total']:.1%})"

    for m in modules:
        ini, fin = initial.get(m), final.get(m)
        surv = fin["survivors"] if fin else (ini["survivors"] if ini else [])
        eq = [x for x in surv if _argued(equivalent, x) and x["status"] != "timeout"]
        left = [x for x in surv if not _argued(equivalent, x) and x["status"] != "timeout"]
        timeouts = sum(x["status"] == "timeout" for x in surv)

        tests = ", ".join(f"`{t}`" for t in MODULES[m])
        total = (fin or ini or {}).get("total", "-")
        done = fin is not None and not fin.get("not_checked")
        lines.append(f"| {m} | {tests} | {total} | {score(ini)} | {score(fin)} | {len(eq)} | {timeouts} | "
                     f"{len(left) if done else 'final run not finished'} | {_minutes(fin) if fin else '-'} |")
    for m in modules:
        ini, fin = initial.get(m), final.get(m)
        lines += ["", f"## {m}", ""]
        if not ini:
            lines += ["Not run with the unit tests alone." + (
                f" Final run: {score(fin)}." if fin else " No run recorded."), ""]
            if not fin:
                continue
            ini = {"survivors": fin["survivors"], "total": fin["total"], "checked": fin.get("checked"),
                   "final_only": True}
        fin_status = {x["name"]: x["status"] for x in fin["survivors"]} if fin else {}
        fin_surv = {x["name"]: x for x in fin["survivors"]} if fin else {}
        fin_pending = set(fin.get("not_checked", [])) if fin else set()
        fin_mut = fin.get("mutations", {}) if fin else {}
        if ini.get("checked", ini["total"]) < ini["total"]:
            lines += [f"The initial run was stopped after {ini['checked']} of {ini['total']} mutants (time); the "
                      "survivors among those:", ""]
        which = "the final run (all its test files)" if ini.get("final_only") else "the unit tests"
        lines += [f"{len(ini['survivors'])} mutants survived {which}. What became of each:", ""]
        for x in ini["survivors"]:
            name = x["name"]
            now = fin_surv.get(name, x if fin is None else None)  # the same mutant in the latest run, if not killed
            if fin_mut and name in fin_mut and fin_mut[name] != _changed_lines(x["diff"]):
                fate = ("the function was changed since the initial run, so this mutation no longer exists as such "
                        "(its function's mutants were regenerated and run again in the final run)")
            elif now is not None and now["status"] != "timeout" and _argued(equivalent, now):
                fate = f"**equivalent**: {_argued(equivalent, now)}"
            elif fin is None or name in fin_pending:
                fate = f"targeted by `{mutants_test_file(m)}`; not re-run with it yet"
            elif fin_status.get(name) == "timeout":
                fate = "**timeout** in the final run (unresolved: re-run needed)"
            elif name in fin_status:
                fate = f"**{fin_status[name].upper()}** (not killed, not shown equivalent)"
            elif fin_mut and name not in fin_mut:
                fate = ("the function was changed since the initial run, so this mutation no longer exists as such "
                        "(its function's mutants were regenerated and run again in the final run)")
            else:
                fate = f"killed by `{mutants_test_file(m)}`"
            lines += [f"- `{name.split('.')[-1]}`: {fate}", "", "  ```diff",
                      *("  " + ln for ln in _changed_lines(x["diff"]).splitlines()), "  ```", ""]
        if fin and ini is not fin:
            # an initial survivor whose name now stands for another mutation is not that mutant: list it again
            seen = {x["name"] for x in ini["survivors"] if fin_mut.get(x["name"]) == _changed_lines(x["diff"])}
            extra = [x for x in fin["survivors"] if x["name"] not in seen]
            if extra:
                lines += [f"Not killed in the final run, and not among the survivors above ({len(extra)}):", ""]
                for x in extra:
                    name = x["name"]
                    fate = (f"**equivalent**: {_argued(equivalent, x)}" if _argued(equivalent, x)
                            and x["status"] != "timeout" else f"**{x['status'].upper()}** (not shown equivalent)")
                    lines += [f"- `{name.split('.')[-1]}`: {fate}", "", "  ```diff",
                              *("  " + ln for ln in _changed_lines(x["diff"]).splitlines()), "  ```", ""]
    notes = Path(__file__).resolve().parent / "notes.md"
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    return "\n".join(lines).rstrip() + "\n"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="*", default=list(MODULES), choices=MODULES)
    ap.add_argument("--label", default="final", choices=("initial", "final"),
                    help="initial: before the mutation-killing tests existed; final: with them (default)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a mutant survived and is not listed as equivalent, or was not run")
    ap.add_argument("--report", metavar="PATH", help="write the Markdown report (e.g. docs/theory_report/mutation.md)")
    ap.add_argument("--collect", action="store_true",
                    help="do not run mutmut: collect the (possibly partial) results already in the workspaces")
    ap.add_argument("--resume", action="store_true",
                    help="keep the verdicts already in the workspaces (unchanged functions) and re-run the rest")
    ap.add_argument("--rerun-only", action="store_true",
                    help="with --resume: only re-run the mutants that were not killed, not those without a verdict")
    ap.add_argument("--max-children", type=_positive_int, default=1,
                    help="mutants tested at once per module (default 1: one core; more on an idle machine)")
    ap.add_argument("--timeout-multiplier", type=float, default=TIMEOUT_MULTIPLIER,
                    help=f"mutmut's timeout_multiplier (default {TIMEOUT_MULTIPLIER}; mutmut's own is 15)")
    args = ap.parse_args(argv)
    out_file = RESULTS_FILE
    results: dict[str, dict[str, object]] = json.loads(out_file.read_text()) if out_file.exists() else {}
    equivalent = json.loads(EQUIVALENT_FILE.read_text()) if EQUIVALENT_FILE.exists() else {}
    bad = []
    for module in args.modules:
        prev = results.get(args.label, {}).get(module, {})
        if args.collect and not (WORK / module / "mutants" / f"{SOURCES[module]}.meta").exists():
            print(f"{module}: no workspace with mutmut results (not run)")
            bad.append(f"{module}: not run")
            continue
        r = (collect(module) if args.collect
             else run_module(module, args.resume, args.timeout_multiplier, args.rerun_only,
                           args.max_children))
        if args.collect:  # keep what only a run knows (its time and settings)
            r.update({k: prev[k] for k in ("run_s", "run_s_total", "resumed", "timeout_multiplier") if k in prev})
        elif args.resume and "run_s" in prev:  # the time of every run that built these verdicts
            r["run_s_total"] = round(prev.get("run_s_total", prev["run_s"]) + r["run_s"], 1)
        # re-read before writing: another driver process may have recorded another module meanwhile
        results = json.loads(out_file.read_text()) if out_file.exists() else {}
        results.setdefault(args.label, {})[module] = r
        out_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, indent=2) + "\n")
        tmp.replace(out_file)
        unexplained = [s["name"] for s in r["survivors"] if not _argued(equivalent, s)]
        stale = stale_arguments(equivalent, r["survivors"])
        bad += unexplained
        for name in stale:
            print(f"  {name}: its recorded argument was written for another mutation (the function changed "
                  "since): a new verdict is needed")
        if r["not_checked"]:  # an unfinished run proves nothing about the mutants it did not reach
            bad.append(f"{module}: {len(r['not_checked'])} mutants not run")
            print(f"{module}: {len(r['not_checked'])} of {r['total']} mutants not run yet (unfinished run)")
        print(f"{module}: {r['killed']}/{r['total']} killed ({r['score']:.1%}); counts {r['counts']}; "
              f"{len(r['survivors'])} not killed, {len(unexplained)} not shown equivalent", flush=True)
        for s in r["survivors"]:
            tag = "equivalent" if _argued(equivalent, s) else "SURVIVED"
            print(f"  {s['name']}: {s['status']} [{tag}]")
    print(f"results written to {out_file}")
    if args.report:
        Path(args.report).write_text(report_md(results, equivalent))
        print(f"report written to {args.report}")
    if args.check and bad:
        print(f"check failed: {len(bad)} mutant(s) neither killed nor shown equivalent, or not run")
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
