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


def total_or_zero(statuses: dict[str, str]) -> int:
    return len(statuses) if statuses else -1


def run_module(module: str) -> dict[str, object]:
    """Lay out the workspace, run mutmut, and return counts and survivors (name, status, diff)."""
    ws = _layout(module)
    run = _mutmut(ws, "run", "--max-children", "1")
    (ws / "mutmut-run.log").write_text(run.stdout + "\n" + run.stderr)
    res = _mutmut(ws, "results", "--all", "true")
    statuses: dict[str, str] = {}
    for line in res.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("ragen_core."):
            statuses[name] = status
    counts: dict[str, int] = {}
    for s in statuses.values():
        counts[s] = counts.get(s, 0) + 1
    survivors = []
    if counts.get("not checked", 0) == total_or_zero(statuses):
        raise RuntimeError(f"mutmut did not run any mutant of {module}; see {ws / 'mutmut-run.log'}")
    for name, status in statuses.items():
        if status not in ("killed", "caught by type check", "not checked"):
            show = _mutmut(ws, "show", name)
            survivors.append({"name": name, "status": status, "diff": show.stdout.strip()})
    killed = counts.get("killed", 0)
    total = len(statuses)
    return {"module": module, "total": total, "killed": killed, "counts": counts,
            "score": killed / total if total else float("nan"), "survivors": survivors,
            "returncode": run.returncode}


def _changed_lines(diff: str) -> str:
    """The - / + lines of a mutmut diff (without the file headers)."""
    keep = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return "\n".join(keep)


def report_md(results: dict[str, dict[str, object]], equivalent: dict[str, str]) -> str:
    """docs/theory_report/mutation.md: scores before and after the mutation-killing tests, and every mutant that
    survived the unit tests with what became of it (killed by a new test, or equivalent with the argument)."""
    initial, final = results.get("initial", {}), results.get("final", {})
    modules = [m for m in MODULES if m in initial or m in final]
    lines = [
        "# Mutation testing of the RL core (mutmut)",
        "",
        "Generated by `make mutation` (`python mutation/run_mutmut.py`, mutmut 3): every mutant of the functions of",
        "each module is run against that module's fast test files (the tests mutmut finds covering the mutated",
        "function), in a workspace under `build/mutation/`. *initial*: the unit tests as they were; *final*: with",
        "the mutation-killing tests (`tests/test_<module>_mutants.py`). A mutant is *equivalent* when no input can",
        "tell it from the original; each one is listed with the argument (`mutation/equivalent.json`).",
        "",
        "| module | test files | mutants | killed, initial | killed, final | equivalent | surviving, not equivalent |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in modules:
        ini, fin = initial.get(m), final.get(m)
        surv = fin["survivors"] if fin else (ini["survivors"] if ini else [])
        eq = [x for x in surv if x["name"] in equivalent]
        left = [x for x in surv if x["name"] not in equivalent]

        def score(r: dict[str, object] | None) -> str:
            return f"{r['killed']}/{r['total']} ({r['killed'] / r['total']:.1%})" if r and r["total"] else "not run"

        tests = ", ".join(f"`{t}`" for t in MODULES[m])
        total = (fin or ini or {}).get("total", "-")
        lines.append(f"| {m} | {tests} | {total} | {score(ini)} | {score(fin)} | {len(eq)} | "
                     f"{len(left) if fin else 'final run pending'} |")
    for m in modules:
        ini, fin = initial.get(m), final.get(m)
        lines += ["", f"## {m}", ""]
        if not ini:
            lines += ["No initial run recorded.", ""]
            continue
        fin_status = {x["name"]: x["status"] for x in fin["survivors"]} if fin else {}
        lines += [f"{len(ini['survivors'])} mutants survived the unit tests. What became of each:", ""]
        for x in ini["survivors"]:
            name = x["name"]
            if name in equivalent:
                fate = f"**equivalent**: {equivalent[name]}"
            elif fin is None:
                fate = "final run pending"
            elif name in fin_status:
                fate = f"**{fin_status[name].upper()}** (not killed, not shown equivalent)"
            else:
                fate = f"killed by `tests/test_{m}_mutants.py`"
            lines += [f"- `{name.split('.')[-1]}`: {fate}", "", "  ```diff",
                      *("  " + ln for ln in _changed_lines(x["diff"]).splitlines()), "  ```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="*", default=["filtering", "advantages", "losses", "mi"], choices=MODULES)
    ap.add_argument("--label", default="final", choices=("initial", "final"),
                    help="initial: before the mutation-killing tests existed; final: with them (default)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a survivor is not listed as equivalent")
    ap.add_argument("--report", metavar="PATH", help="write the Markdown report (e.g. docs/theory_report/mutation.md)")
    args = ap.parse_args(argv)
    out_file = RESULTS_FILE
    results: dict[str, dict[str, object]] = json.loads(out_file.read_text()) if out_file.exists() else {}
    equivalent = json.loads(EQUIVALENT_FILE.read_text()) if EQUIVALENT_FILE.exists() else {}
    bad = []
    for module in args.modules:
        r = run_module(module)
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
