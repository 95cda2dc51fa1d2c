"""The `ragen` command line: `ragen envs | play | train | diagnose | reproduce | verify | bench`.

Sub-commands import their modules lazily so that `ragen envs` starts without loading torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_envs(args: argparse.Namespace) -> int:
    from ragen_envs.registration import ENV_SPECS

    width = max(len(spec.id) for spec in ENV_SPECS)
    for spec in ENV_SPECS:
        print(f"{spec.id:<{width}}  {spec.description}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    from ragen_core.play import play

    return play(args.env_id, seed=args.seed, kwargs=args.env_kwargs)


#: Sub-commands whose arguments belong to another module's own parser: name -> (module, help).
DELEGATED: dict[str, tuple[str, str]] = {
    "train": ("ragen_core.train", "train an agent: ragen train CONFIG [key=value ...] [--resume RUN_DIR]"),
    "diagnose": ("ragen_core.diagnose", "RV heterogeneity and MI proxies of a rollouts JSONL file"),
    "reproduce": ("ragen_core.reproduce.cli", "the paper's four findings as a small-scale study, with its report"),
    "verify": ("theory_checks.__main__", "check the paper's bounds numerically (python -m theory_checks)"),
    "bench": ("benchmarks.run_all", "run every benchmark and regenerate the README tables (source checkout)"),
}

#: Why `ragen bench` stops after a plain `pip install`. The benchmarks are left out of the wheel on purpose:
#: they write `benchmarks/results/*.json`, regenerate the README's tables and build side venvs next to the
#: sources, none of which exists in site-packages. From a checkout (editable install) they run.
BENCH_NEEDS_CHECKOUT = (
    "ragen bench needs a source checkout: the benchmarks are not part of the installed ragen2 (they rewrite "
    "the repository's result files and README tables).\n"
    "Clone the repository, then from its root run `make bench`, or `pip install -e .` and `ragen bench`."
)


def checkout_root() -> Path | None:
    """The source checkout this `ragen_core` is imported from (editable install or repository root), or None
    when it is an installed wheel (no `benchmarks/` next to it)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "benchmarks" / "run_all.py").is_file() else None


def _run_delegated(name: str, rest: Sequence[str]) -> int:
    if name == "bench":
        # The console script's sys.path holds the installed packages only; `benchmarks` lives in the checkout.
        root = checkout_root()
        if root is None:
            print(BENCH_NEEDS_CHECKOUT, file=sys.stderr)
            return 2
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    return int(importlib.import_module(DELEGATED[name][0]).main(list(rest)) or 0)


def _parse_kwargs(pairs: Sequence[str]) -> dict[str, object]:
    """`key=value` strings -> kwargs; values parsed as Python literals when possible."""
    import ast

    out: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"env kwarg {pair!r} must look like key=value")
        key, value = pair.split("=", 1)
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragen",
        description="Agent tasks, SNR-aware RL training and reasoning-collapse diagnostics for LLM agents.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("envs", help="list every registered env id with a one-line description")
    p.set_defaults(handler=_cmd_envs)

    p = sub.add_parser("play", help="play a text env in the terminal (q quits)")
    p.add_argument("env_id", help="a registered id, e.g. ragen/Sokoban-v0")
    p.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    p.add_argument("env_kwargs", nargs="*", metavar="key=value", help="keyword arguments for gym.make")
    p.set_defaults(handler=_cmd_play)

    for name, (_, text) in DELEGATED.items():
        # Listed for `ragen --help`; main() hands their arguments to the module's own parser.
        sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return _run_delegated(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "env_kwargs", None) is not None:
        args.env_kwargs = _parse_kwargs(args.env_kwargs)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
