"""`ragen bench [--quick] [--only NAMES] [--full NAMES]`: every benchmark, then the README tables (source checkout).

The benchmarks are left out of the wheel on purpose: they write `benchmarks/results/*.json`, regenerate the README's
tables and build side venvs next to the sources, none of which exists in site-packages. From a checkout (editable
install) they run: this module puts the checkout on `sys.path` (the console script's holds the installed packages
only) and hands the arguments to `benchmarks.run_all.main`, whose parser is the benchmarks' own. Before that, the
names of `--only` and `--full` are checked (:func:`list_problem`): a stray comma, an empty list or an unknown name
is one line and exit status 2, where `benchmarks.run_all` would skip the name (`--only typo` ran nothing, then
rewrote the tables) or read an empty list as every benchmark (`--only ''` ran all of them, hours).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ragen_core.apps.arguments import comma_list
from ragen_core.apps.install import checkout_root

PROG = "ragen bench"

#: Why `ragen bench` stops after a plain `pip install` (see the module docstring).
BENCH_NEEDS_CHECKOUT = (
    "ragen bench needs a source checkout: the benchmarks are not part of the installed ragen2 (they rewrite "
    "the repository's result files and README tables).\n"
    "Clone the repository, then from its root run `make bench`, or `pip install -e .` and `ragen bench`."
)


def list_problem(argv: Sequence[str], names: Sequence[str], full_names: Sequence[str]) -> str | None:
    """Why the `--only` / `--full` values of `argv` cannot be used (one line), or None: each must be a
    comma-separated list (:func:`ragen_core.apps.arguments.comma_list`) of `names` (`--only`: every benchmark's
    result name) or `full_names` (`--full`: the benchmarks with a long full form). A flag not given is fine."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--only", default=None)
    parser.add_argument("--full", default=None)
    known, _ = parser.parse_known_args(list(argv))  # the rest (--quick, --help, mistakes) is run_all's to parse
    for flag, text, accepted in (("--only", known.only, names), ("--full", known.full, full_names)):
        if text is None:
            continue
        try:
            entries = comma_list(flag, text, "benchmark name")
        except ValueError as e:
            return str(e)
        unknown = [name for name in entries if name not in accepted]
        if unknown:
            return f"{flag}: unknown benchmark name {unknown[0]!r}; one of: {', '.join(accepted)}"
    return None


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run `benchmarks.run_all` with `argv`; 2 with :data:`BENCH_NEEDS_CHECKOUT` outside a checkout (even for
    --help: there is nothing to describe). Its parser takes its name from ``sys.argv[0]``, so that is `prog` while
    it runs (restored after), and its usage and errors name `ragen bench`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    root = checkout_root()
    if root is None:
        print(BENCH_NEEDS_CHECKOUT, file=sys.stderr)
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    argv0 = sys.argv[0] if sys.argv else ""
    try:
        from benchmarks import run_all

        problem = list_problem(argv, [name for name, _ in run_all.BENCHMARKS], sorted(run_all.QUICK_ALWAYS))
        if problem is not None and not {"-h", "--help"} & set(argv):  # --help is always answered
            print(f"{prog}: {problem}", file=sys.stderr)
            return 2
        if sys.argv:
            sys.argv[0] = prog
        return int(run_all.main(argv) or 0)
    finally:
        if sys.argv:
            sys.argv[0] = argv0


if __name__ == "__main__":
    raise SystemExit(main())
