"""The `ragen` command line: `ragen envs | play | configs | train | diagnose | reproduce | verify | bench`.

Sub-commands import their modules lazily: `ragen envs`, `ragen play`, `ragen configs` and the reward-variance part
of `ragen diagnose` run on the base install (no torch); the others need the `train` extra and say so in one line
when it is missing (:data:`TRAIN_EXTRA_MODULES`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: The modules of the `train` extra (pyproject.toml), by import name.
TRAIN_EXTRA_MODULES = ("torch", "transformers", "tokenizers", "rich", "matplotlib", "tqdm")
#: Sub-commands that need the `train` extra as a whole (`diagnose` needs it only with --model).
NEEDS_TRAIN = ("train", "reproduce", "verify", "bench")


def missing_train_modules(modules: Sequence[str] = TRAIN_EXTRA_MODULES) -> list[str]:
    """The modules of `modules` that cannot be imported here (found without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def extra_hint(command: str, missing: Sequence[str]) -> str:
    """The one line a command prints when the `train` extra is not installed."""
    return (f"ragen {command} needs the training extra (missing: {', '.join(missing)}): "
            f"pip install 'ragen2[train]' (from a clone: pip install -e '.[train]'; README, Install)")


def version() -> str:
    """The installed distribution's version (``ragen2``), or "unknown" outside an install."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("ragen2")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _cmd_envs(args: argparse.Namespace) -> int:
    from ragen_envs.registration import ENV_SPECS

    width = max(len(spec.id) for spec in ENV_SPECS)
    for spec in ENV_SPECS:
        print(f"{spec.id:<{width}}  {spec.description}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    from ragen_core.apps.play import play

    return play(args.env_id, seed=args.seed, kwargs=args.env_kwargs)


def _cmd_configs(args: argparse.Namespace) -> int:
    from ragen_core.training.presets import list_presets, preset_path, presets_dir

    if args.name:
        path = preset_path(args.name)
        if path is None:
            names = ", ".join(n for n, _, _ in list_presets())
            print(f"config error: no shipped preset {args.name!r}; presets: {names}", file=sys.stderr)
            return 2
        print(path.read_text(encoding="utf-8"), end="")
        return 0
    presets = list_presets()
    if not presets:
        print("no shipped configs found (neither the wheel's ragen_core/_configs nor a checkout's configs/)",
              file=sys.stderr)
        return 2
    width = max(len(name) for name, _, _ in presets)
    for name, _, text in presets:
        print(f"{name:<{width}}  {text}")
    print(f"\n{len(presets)} presets in {presets_dir()}; train one with `ragen train NAME [key=value ...]`, "
          "print one with `ragen configs NAME`")
    return 0


#: Sub-commands whose arguments belong to another module's own parser: name -> (module, help).
DELEGATED: dict[str, tuple[str, str]] = {
    "train": ("ragen_core.training.trainer",
              "train an agent: ragen train CONFIG|PRESET [key=value ...] [--resume RUN_DIR]"),
    "diagnose": ("ragen_core.apps.diagnose", "RV heterogeneity and MI proxies of a rollouts JSONL file"),
    "reproduce": ("ragen_core.apps.reproduce.cli", "the paper's four findings as a small-scale study, with its report"),
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
    root = Path(__file__).resolve().parents[2]  # ragen_core/apps/cli.py -> the checkout
    return root if (root / "benchmarks" / "run_all.py").is_file() else None


def _reproduce_args(rest: Sequence[str]) -> list[str]:
    """`ragen reproduce` outside a checkout: point it at the shipped configs (its default is the checkout's)."""
    rest = list(rest)
    if any(a == "--configs-dir" or a.startswith("--configs-dir=") for a in rest) or checkout_root() is not None:
        return rest
    from ragen_core.training.presets import presets_dir

    folder = presets_dir()
    return rest + ["--configs-dir", str(folder)] if folder is not None else rest


def _run_delegated(name: str, rest: Sequence[str]) -> int:
    if name in NEEDS_TRAIN and not any(a in ("-h", "--help") for a in rest):
        missing = missing_train_modules()
        if missing:
            print(extra_hint(name, missing), file=sys.stderr)
            return 2
    if name == "reproduce":
        rest = _reproduce_args(rest)
    if name == "bench":
        # The console script's sys.path holds the installed packages only; `benchmarks` lives in the checkout.
        root = checkout_root()
        if root is None:
            print(BENCH_NEEDS_CHECKOUT, file=sys.stderr)
            return 2
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    argv0 = sys.argv[0] if sys.argv else ""
    try:
        module = importlib.import_module(DELEGATED[name][0])
        if name == "verify":
            # theory_checks names itself `python -m theory_checks`; under `ragen` its help and its parse errors
            # name the command the user typed, so the arguments are checked first by a parser called
            # `ragen verify` (a bad argument exits 2 with that usage line, before any check runs).
            parser = module.build_parser(prog="ragen verify")
            if any(a in ("-h", "--help") for a in rest):
                print(parser.format_help(), end="")
                return 0
            parser.parse_args(list(rest))
        if sys.argv:  # parsers that take their name from argv[0] (the benchmarks') print `ragen bench`
            sys.argv[0] = f"ragen {name}"
        return int(module.main(list(rest)) or 0)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in TRAIN_EXTRA_MODULES:
            print(extra_hint(name, [exc.name.split(".")[0]]), file=sys.stderr)
            return 2
        raise
    finally:
        if sys.argv:
            sys.argv[0] = argv0


def _parse_kwargs(pairs: Sequence[str]) -> dict[str, object]:
    """`key=value` strings -> kwargs; values parsed as Python literals when possible."""
    import ast

    out: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"env kwarg {pair!r} must look like key=value")
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
    parser.add_argument("--version", action="version", version=f"ragen2 {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("envs", help="list every registered env id with a one-line description")
    p.set_defaults(handler=_cmd_envs)

    p = sub.add_parser("play", help="play a text env in the terminal (q quits)")
    p.add_argument("env_id", help="a registered id, e.g. ragen/Sokoban-v0")
    p.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    p.add_argument("env_kwargs", nargs="*", metavar="key=value", help="keyword arguments for gym.make")
    p.set_defaults(handler=_cmd_play)

    p = sub.add_parser("configs", help="list the shipped configs (presets) with their first comment line")
    p.add_argument("name", nargs="?", default=None, help="print this preset's TOML instead")
    p.set_defaults(handler=_cmd_configs)

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
        try:
            args.env_kwargs = _parse_kwargs(args.env_kwargs)
        except ValueError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            return 2
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # the reader closed the pipe (`ragen configs | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
