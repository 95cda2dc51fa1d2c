"""`ragen envs`: every registered env id with its one-line description (base install, no torch)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

PROG = "ragen envs"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """`ragen envs` takes no arguments."""
    return argparse.ArgumentParser(prog=prog)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Print one line per env id, `ID  DESCRIPTION`, the ids padded to one width; returns 0."""
    build_parser(prog).parse_args(argv)
    from ragen_envs.registration import ENV_SPECS

    width = max(len(spec.id) for spec in ENV_SPECS)
    for spec in ENV_SPECS:
        print(f"{spec.id:<{width}}  {spec.description}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
