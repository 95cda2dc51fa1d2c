"""``python -m theory_checks [--quick] [--mutants] [--seed N] [--json PATH] [--report DIR]`` (also ``ragen verify``).

Prints a table (check, type, method, category, instances, max ratio, tight ratio, status) and returns exit
status 1 when a true bound is violated or an expected counterexample is not reproduced (see
:mod:`theory_checks.report`).  With ``--mutants`` it also lists every deliberately wrong variant of every
check and whether it was caught, counts only the informative ones (those whose rejection the check's own
acceptance does not imply), and returns 1 when one of a verified result survives or a verified result has
none (:mod:`theory_checks.mutants`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .inputs import MAX_SEED
from .mutants import mutation_summary
from .report import format_mutants, format_table, run_all, write_json, write_report


def build_parser(prog: str = "python -m theory_checks") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Verify the theory of the paper (T1-T9, MI proxies) exactly, by Monte Carlo, and symbolically.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer testbeds and draws (under a minute)")
    parser.add_argument("--mutants", action="store_true",
                        help="also list every deliberately wrong variant of every check; "
                             "exit 1 if one of a verified result survives")
    parser.add_argument("--seed", type=int, default=0,
                        help=f"seed of every random draw, an integer in [0, {MAX_SEED}] (default 0)")
    parser.add_argument("--json", metavar="PATH", help="write the summary as JSON to PATH")
    parser.add_argument("--report", metavar="DIR", help="write report.md (and mutants.md) and PNG plots into DIR")
    parser.add_argument("--quiet", action="store_true", help="print only the tables and the verdict")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m theory_checks") -> int:
    """Run all checks; 0 when everything holds (and, with --mutants, every mutant is caught), 1 otherwise; 2 for a
    bad argument (a seed outside [0, 2**32 - 1]; a --json or --report path that cannot be written, or the two
    colliding: checked first, before the run) or an output that could not be written after it, 130 on Ctrl-C.

    `prog` names the program in the usage line and parse errors (``ragen verify`` passes its own name)."""
    args = build_parser(prog).parse_args(argv)
    if not 0 <= args.seed <= MAX_SEED:
        print(f"{prog}: --seed must be an integer in [0, {MAX_SEED}] (2**32 - 1), got {args.seed}", file=sys.stderr)
        return 2
    for flag, path, kind in (("--json", args.json, "file"), ("--report", args.report, "folder")):
        problem = _output_problem(Path(path), kind) if path is not None else None
        if problem is not None:  # before the checks run (half a minute or more), not after
            print(f"{prog}: {flag} {path}: {problem}", file=sys.stderr)
            return 2
    if args.json is not None and args.report is not None:
        json_path, report_dir = Path(args.json).resolve(), Path(args.report).resolve()
        if json_path == report_dir or json_path in report_dir.parents:
            print(f"{prog}: --json {args.json} and --report {args.report}: the JSON file would take the place of "
                  "the report folder (or of a folder above it); give them different paths", file=sys.stderr)
            return 2
    try:
        return _run(args, prog)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130


def _output_problem(path: Path, kind: str) -> str | None:
    """Why `path` cannot be written as a `kind` ("file" or "folder"; one line), or None.

    Besides the kind, a file or folder is tried for writing: an existing file is opened for appending (its
    content untouched), otherwise a temporary file is made and removed in the deepest existing folder."""
    if path.exists() and path.is_dir() != (kind == "folder"):
        return f"it is a {'folder' if path.is_dir() else 'file'}, not a {kind}"
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"{above} is a file, not a folder"
    try:
        if path.is_file():
            with path.open("a"):
                pass
        else:
            with tempfile.TemporaryFile(dir=path if path.is_dir() else above):
                pass
    except OSError as exc:
        where = path if path.exists() else above
        return f"cannot write {'to' if path.is_file() else 'in'} {where} ({exc.strerror or exc})"
    return None


def _run(args: argparse.Namespace, prog: str) -> int:
    """Run the checks of parsed `args` and print (and write) their results; the exit status of :func:`main`
    (2 when an output cannot be written after all: the verdict above is still printed)."""
    log = None if args.quiet else (lambda s: print(s, flush=True))
    result = run_all(seed=args.seed, quick=args.quick, progress=not args.quiet, log=log, mutants=args.mutants)
    print(format_table(result.summaries))
    t = result.timings
    counted = sum(s.counted for s in result.summaries)
    print(
        f"\n{'PASS' if result.ok else 'FAIL'}: {len(result.summaries)} checks ({counted} verified results), "
        f"{len(result.checks)} records, "
        f"{t['total']:.1f} s (exact {t['exact']:.1f}, Monte Carlo {t['monte_carlo']:.1f}, symbolic {t['symbolic']:.1f})"
    )
    if result.mutants is not None:
        print("\n" + format_mutants(result.mutants))
        s = mutation_summary(result.mutants)
        print(f"\nMUTANTS {'PASS' if result.mutants_ok else 'FAIL'}: {s['caught']}/{s['total']} informative mutants "
              f"of {s['rows']} verified results caught, {s['failed']} failed "
              f"({s['no_informative']} verified results without an informative mutant); reported apart: "
              f"{s['by_construction']} by construction (rejected whenever the check itself passes), "
              f"{s['equivalent']} equivalent (true statements), {s['not_claimed']} not claimed, "
              f"{s['sanity']} of sanity rows")
    if args.json:
        try:
            write_json(result, args.json)
        except OSError as exc:
            print(f"{prog}: --json {args.json}: could not write it: {exc}", file=sys.stderr)
            return 2
        print(f"JSON written to {args.json}")
    if args.report:
        cmd = ("python -m theory_checks" + (" --quick" if args.quick else "") + (" --mutants" if args.mutants else "")
               + f" --seed {args.seed} --report {args.report}")
        try:
            md = write_report(result, args.report, command=cmd)
        except OSError as exc:
            print(f"{prog}: --report {args.report}: could not write it: {exc}", file=sys.stderr)
            return 2
        print(f"report written to {md}")
    return 0 if result.ok and result.mutants_ok else 1


if __name__ == "__main__":
    sys.exit(main())
