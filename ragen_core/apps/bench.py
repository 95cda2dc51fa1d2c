"""`ragen bench [--quick] [--only NAMES] [--full NAMES]`: every benchmark, then the README tables (source checkout).

The benchmarks are left out of the wheel on purpose: they write `benchmarks/results/*.json`, regenerate the README's
tables and build side venvs next to the sources, none of which exists in site-packages. From a checkout (editable
install) they run: this module puts the checkout on `sys.path` (the console script's holds the installed packages
only) and hands the arguments to `benchmarks.run_all.main`, whose parser is the benchmarks' own.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ragen_core.apps.install import checkout_root

PROG = "ragen bench"

#: Why `ragen bench` stops after a plain `pip install` (see the module docstring).
BENCH_NEEDS_CHECKOUT = (
    "ragen bench needs a source checkout: the benchmarks are not part of the installed ragen2 (they rewrite "
    "the repository's result files and README tables).\n"
    "Clone the repository, then from its root run `make bench`, or `pip install -e .` and `ragen bench`."
)


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

        if sys.argv:
            sys.argv[0] = prog
        return int(run_all.main(argv) or 0)
    finally:
        if sys.argv:
            sys.argv[0] = argv0


if __name__ == "__main__":
    raise SystemExit(main())
