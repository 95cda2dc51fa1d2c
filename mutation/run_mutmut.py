"""Mutation testing of the RL core's math with mutmut (``make mutation``).

For each module in :data:`MODULES` a workspace ``build/mutation/<module>/`` is laid out with a copy of
``ragen_core``, the module's fast test files (plus ``tests/conftest.py``) and a ``setup.cfg`` whose
``[mutmut]`` section mutates only that module and selects only those tests. ``mutmut run`` then generates
every mutant of the module's functions (mutmut 3 mutates function bodies, not module-level constants),
runs the tests that cover each mutated function, and records killed / survived / timeout / no tests.

Results go to ``mutation/results.json`` (counts and every surviving mutant with its diff, per run label:
``initial`` before the mutation-killing tests ``tests/test_<module>_mutants.py`` existed, ``final`` with
them). ``--report`` writes ``docs/theory_report/mutation.md`` from it and from ``mutation/equivalent.json``
(the argument for each equivalent mutant); ``--check`` exits 1 when a survivor is not listed there.

Usage: ``python mutation/run_mutmut.py [--modules filtering advantages losses mi] [--label initial|final]
[--check] [--report PATH]``.
Run it under ``nice``: each module takes minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutation"
EQUIVALENT_FILE = Path(__file__).resolve().parent / "equivalent.json"
#: kept in the repository: the initial run (before the mutation-killing tests) cannot be redone later
RESULTS_FILE = Path(__file__).resolve().parent / "results.json"

#: module -> the fast test files that exercise it (its unit tests, the mutation-killing tests, and the
#: reference rules of theory_checks that compare against it)
MODULES: dict[str, list[str]] = {
    "filtering": ["tests/test_filtering.py", "tests/test_filtering_mutants.py"],
    "advantages": ["tests/test_advantages.py", "tests/test_losses.py", "tests/test_advantages_mutants.py"],
    "losses": ["tests/test_losses.py", "tests/test_losses_mutants.py"],
    "mi": ["tests/test_mi.py", "tests/test_mi_ties.py", "tests/test_mi_mutants.py"],
}

SETUP_CFG = """[mutmut]
source_paths = ragen_core
only_mutate = ragen_core/{module}.py
pytest_add_cli_args =
    -p
    no:cacheprovider
pytest_add_cli_args_test_selection =
{tests}
process_isolation = forkserver
"""


def _layout(module: str) -> Path:
    ws = WORK / module
    if ws.exists():
        shutil.rmtree(ws)
    (ws / "tests").mkdir(parents=True)
    shutil.copytree(ROOT / "ragen_core", ws / "ragen_core", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", ws / "pyproject.toml")  # pytest markers and warning filters
    shutil.copy2(ROOT / "tests" / "conftest.py", ws / "tests" / "conftest.py")
    tests = [t for t in MODULES[module] if (ROOT / t).exists()]
    for t in tests:
        shutil.copy2(ROOT / t, ws / t)
    (ws / "setup.cfg").write_text(SETUP_CFG.format(module=module, tests="\n".join(f"    {t}" for t in tests)))
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
    import difflib
    import re

    ws = WORK / module
    meta = json.loads((ws / "mutants" / "ragen_core" / f"{module}.py.meta").read_text())["exit_code_by_key"]
    src = (ws / "mutants" / "ragen_core" / f"{module}.py").read_text()
    funcs = {n.name: ast.get_source_segment(src, n) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)}
    counts: dict[str, int] = {}
    survivors = []
    not_checked = []
    for name, code in meta.items():
        status = _STATUS.get(code, f"exit {code}")
        counts[status] = counts.get(status, 0) + 1
        if status == "not checked":
            not_checked.append(name)
        if status in ("survived", "no tests", "skipped", "timeout"):
            short = name.split(".")[-1]
            orig = funcs.get(re.sub(r"__mutmut_\d+$", "", short) + "__mutmut_orig", "")
            diff = difflib.unified_diff(orig.splitlines()[1:], funcs.get(short, "").splitlines()[1:], lineterm="", n=0)
            survivors.append({"name": name, "status": status, "diff": "\n".join(diff)})
    total = len(meta)
    detected = counts.get("killed", 0)  # a timeout is not counted as a kill (see the notes of the report)
    return {"module": module, "total": total, "killed": detected, "counts": counts,
            "checked": total - counts.get("not checked", 0), "score": detected / total if total else float("nan"),
            "survivors": survivors, "not_checked": not_checked}


def run_module(module: str) -> dict[str, object]:
    """Lay out the workspace, run mutmut, and return counts and survivors (name, status, diff)."""
    ws = _layout(module)
    run = _mutmut(ws, "run", "--max-children", "1")
    (ws / "mutmut-run.log").write_text(run.stdout + "\n" + run.stderr)
    out = collect(module)
    if out["checked"] == 0:
        raise RuntimeError(f"mutmut did not run any mutant of {module}; see {ws / 'mutmut-run.log'}")
    out["returncode"] = run.returncode
    return out


def _changed_lines(diff: str) -> str:
    """The - / + lines of a mutmut diff (without the file headers)."""
    keep = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return "\n".join(keep)


def report_md(results: dict[str, dict[str, object]], equivalent: dict[str, str]) -> str:
    """docs/theory_report/mutation.md: scores before and after the mutation-killing tests, and every mutant that
    survived the unit tests with what became of it (killed by a new test, or equivalent with the argument)."""
    initial, final = results.get("initial", {}), results.get("final", {})
    modules = list(MODULES)
    lines = [
        "# Mutation testing of the RL core (mutmut)",
        "",
        "Generated by `python mutation/run_mutmut.py` (mutmut 3; `make mutation` runs the final label for filtering,",
        "advantages and losses and fails on a survivor not shown equivalent): every mutant of the functions of",
        "each module is run against that module's fast test files (the tests mutmut finds covering the mutated",
        "function), in a workspace under `build/mutation/`. *initial*: the unit tests as they were (`--label",
        "initial`, before the mutation-killing tests existed); *final*: with the mutation-killing tests",
        "(`tests/test_<module>_mutants.py`). A mutant is *equivalent* when no input can tell it from the",
        "original; each one is listed with the argument (`mutation/equivalent.json`).",
        "",
        "| module | test files | mutants | killed, initial | killed, final | equivalent | timeouts | "
        "surviving, not equivalent |",
        "|---|---|---|---|---|---|---|---|",
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
        eq = [x for x in surv if x["name"] in equivalent and x["status"] != "timeout"]
        left = [x for x in surv if x["name"] not in equivalent and x["status"] != "timeout"]
        timeouts = sum(x["status"] == "timeout" for x in surv)

        tests = ", ".join(f"`{t}`" for t in MODULES[m])
        total = (fin or ini or {}).get("total", "-")
        done = fin is not None and not fin.get("not_checked")
        lines.append(f"| {m} | {tests} | {total} | {score(ini)} | {score(fin)} | {len(eq)} | {timeouts} | "
                     f"{len(left) if done else 'final run not finished'} |")
    for m in modules:
        ini, fin = initial.get(m), final.get(m)
        lines += ["", f"## {m}", ""]
        if not ini:
            lines += ["Not run with the unit tests alone." + (
                f" Final run: {score(fin)}." if fin else " No run recorded."), ""]
            if not fin:
                continue
            ini = {"survivors": fin["survivors"], "total": fin["total"], "checked": fin.get("checked")}
        fin_status = {x["name"]: x["status"] for x in fin["survivors"]} if fin else {}
        fin_pending = set(fin.get("not_checked", [])) if fin else set()
        if ini.get("checked", ini["total"]) < ini["total"]:
            lines += [f"The initial run was stopped after {ini['checked']} of {ini['total']} mutants (time); the "
                      "survivors among those:", ""]
        lines += [f"{len(ini['survivors'])} mutants survived the unit tests. What became of each:", ""]
        for x in ini["survivors"]:
            name = x["name"]
            if name in equivalent:
                fate = f"**equivalent**: {equivalent[name]}"
            elif fin is None or name in fin_pending:
                fate = f"targeted by `tests/test_{m}_mutants.py`; not re-run with it yet"
            elif fin_status.get(name) == "timeout":
                fate = "**timeout** in the final run (unresolved: re-run needed)"
            elif name in fin_status:
                fate = f"**{fin_status[name].upper()}** (not killed, not shown equivalent)"
            else:
                fate = f"killed by `tests/test_{m}_mutants.py`"
            lines += [f"- `{name.split('.')[-1]}`: {fate}", "", "  ```diff",
                      *("  " + ln for ln in _changed_lines(x["diff"]).splitlines()), "  ```", ""]
    notes = Path(__file__).resolve().parent / "notes.md"
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="*", default=["filtering", "advantages", "losses", "mi"], choices=MODULES)
    ap.add_argument("--label", default="final", choices=("initial", "final"),
                    help="initial: before the mutation-killing tests existed; final: with them (default)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a survivor is not listed as equivalent")
    ap.add_argument("--report", metavar="PATH", help="write the Markdown report (e.g. docs/theory_report/mutation.md)")
    ap.add_argument("--collect", action="store_true",
                    help="do not run mutmut: collect the (possibly partial) results already in the workspaces")
    args = ap.parse_args(argv)
    out_file = RESULTS_FILE
    results: dict[str, dict[str, object]] = json.loads(out_file.read_text()) if out_file.exists() else {}
    equivalent = json.loads(EQUIVALENT_FILE.read_text()) if EQUIVALENT_FILE.exists() else {}
    bad = []
    for module in args.modules:
        r = collect(module) if args.collect else run_module(module)
        results.setdefault(args.label, {})[module] = r
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(results, indent=2) + "\n")
        unexplained = [s["name"] for s in r["survivors"] if s["name"] not in equivalent]
        bad += unexplained
        print(f"{module}: {r['killed']}/{r['total']} killed ({r['score']:.1%}); counts {r['counts']}; "
              f"{len(r['survivors'])} not killed, {len(unexplained)} not shown equivalent", flush=True)
        for s in r["survivors"]:
            tag = "equivalent" if s["name"] in equivalent else "SURVIVED"
            print(f"  {s['name']}: {s['status']} [{tag}]")
    print(f"results written to {out_file}")
    if args.report:
        Path(args.report).write_text(report_md(results, equivalent))
        print(f"report written to {args.report}")
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
