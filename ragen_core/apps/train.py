"""`ragen train CONFIG|PRESET [key=value ...] [--run-dir DIR]`, `ragen train --resume RUN_DIR [key=value ...]`.

The command line of the trainer: this module parses the arguments and hands them to
:func:`ragen_core.training.trainer.run`, which checks the config before anything starts, makes the run folder,
trains, and turns config errors and Ctrl-C into one line each (exit status 2 and 130). The same program runs as
``python -m ragen_core.apps.train`` (what ``ragen reproduce`` starts for each run).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ragen_core.training.config import RESUME_KEYS
from ragen_core.training.trainer import run

PROG = "ragen train"
#: The first line of `ragen train --help`.
DESCRIPTION = ("The small-scale trainer: `ragen train CONFIG|PRESET [key=value ...]`, "
               "`ragen train --resume RUN_DIR [key=value]`.")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """`ragen train` arguments: CONFIG [key=value ...] [--resume RUN_DIR] [--run-dir DIR]."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("config", nargs="?", default=None,
                        help="TOML config file, or the name of a shipped preset (`ragen configs`); "
                             "optional with --resume")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. algo.lr=1e-6")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue the run in RUN_DIR from its latest checkpoint (its config.toml is used; "
                             "key=value may change only: " + ", ".join(RESUME_KEYS) + ")")
    parser.add_argument("--run-dir", default=None, help="exact run folder (default: run.out_dir/run.name[-N])")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Parse `argv` (default ``sys.argv[1:]``) and run it (:func:`ragen_core.training.trainer.run`): 0 when the run
    finished, 2 on a config error, 130 when interrupted."""
    args = build_parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
