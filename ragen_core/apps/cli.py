"""The `ragen` command line: `ragen envs | play | configs | train | diagnose | export | eval | reproduce | verify |
bench`.

One convention for every sub-command. `ragen NAME ARGS...` runs a module listed once, in :data:`COMMANDS`
(name -> :class:`Command`: the module, the one-line help of `ragen --help`, whether it needs the `train` extra,
whether a closed stdout pipe ends it quietly). Each command module exposes

    main(argv: Sequence[str] | None, prog: str) -> int      parse `argv`, run the command, return the exit status
    build_parser(prog: str) -> argparse.ArgumentParser     the parser `main` uses (every command that owns its
                                                           parser: all but `ragen bench`, whose parser is the
                                                           benchmarks' own, `benchmarks.run_all`)

and runs alone as ``python -m MODULE`` (then `argv` defaults to ``sys.argv[1:]``). The dispatcher here calls
``main(ARGS, prog="ragen NAME")``, so `ragen NAME --help` and a parse error (exit status 2) print a usage line
naming `ragen NAME`. Before it imports a command that needs the `train` extra (:data:`COMMANDS`) it checks the
extra's modules and, when one is missing, prints the one line of :func:`~ragen_core.apps.install.extra_hint` and
returns 2 (`--help` is always answered); a missing extra module found later (on import or while running) gives the
same line. Commands import their modules lazily: `ragen envs`, `ragen play`, `ragen configs` and the
reward-variance part of `ragen diagnose` run on the base install (no torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

# Re-exported: tests and callers patch and read them here (the dispatcher calls its own module-level names).
from ragen_core.apps.install import TRAIN_EXTRA_MODULES, checkout_root, extra_hint, missing_train_modules

__all__ = ["COMMANDS", "Command", "TRAIN_EXTRA_MODULES", "build_parser", "checkout_root", "extra_hint", "main",
           "missing_train_modules", "version"]


@dataclass(frozen=True)
class Command:
    """One `ragen` sub-command: the module with ``build_parser(prog)`` and ``main(argv, prog)``, its help line."""

    module: str
    help: str
    #: The whole command needs the `train` extra (checked before the module is imported).
    needs_train: bool = False
    #: A reader that closes stdout early (`ragen configs | head`) ends it with status 0 and no traceback; off for
    #: commands whose work must not pass for a success when their output cannot be written (training, reports).
    quiet_on_closed_pipe: bool = False


#: Every `ragen` sub-command, in the order `ragen --help` lists them.
COMMANDS: dict[str, Command] = {
    "envs": Command("ragen_core.apps.envs", "list every registered env id with a one-line description",
                    quiet_on_closed_pipe=True),
    "play": Command("ragen_core.apps.play", "play a text env in the terminal (q quits)", quiet_on_closed_pipe=True),
    "configs": Command("ragen_core.apps.configs", "list the shipped configs (presets) with their first comment line",
                       quiet_on_closed_pipe=True),
    "train": Command("ragen_core.apps.train",
                     "train an agent: ragen train CONFIG|PRESET [key=value ...] [--resume RUN_DIR]", needs_train=True),
    # `diagnose` needs the extra only with --model (it says so itself).
    "diagnose": Command("ragen_core.apps.diagnose", "RV heterogeneity and MI proxies of a rollouts JSONL file",
                        quiet_on_closed_pipe=True),  # a read-only report (`ragen diagnose f.jsonl | head`)
    "export": Command("ragen_core.apps.export", "write a run's policy as a transformers model folder",
                      needs_train=True),
    "eval": Command("ragen_core.apps.eval", "evaluate a model (a folder, a run, tiny or an OpenAI-compatible server) "
                    "on the envs", needs_train=True),
    "reproduce": Command("ragen_core.apps.reproduce.cli",
                         "the paper's four findings as a small-scale study, with its report", needs_train=True),
    "verify": Command("theory_checks.__main__", "check the paper's bounds numerically (python -m theory_checks)",
                      needs_train=True),
    "bench": Command("ragen_core.apps.bench",
                     "run every benchmark and regenerate the README tables (source checkout)", needs_train=True),
}


def version() -> str:
    """The installed distribution's version (``ragen2``), or "unknown" outside an install."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("ragen2")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: `ragen --help` lists :data:`COMMANDS`; `--version`. A command's own arguments belong
    to its module's parser (:func:`run_command`)."""
    parser = argparse.ArgumentParser(
        prog="ragen",
        description="Agent tasks, SNR-aware RL training and reasoning-collapse diagnostics for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"ragen2 {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help, add_help=False)
    return parser


def run_command(name: str, argv: Sequence[str]) -> int:
    """`ragen NAME ARGV...`: check the extra (:attr:`Command.needs_train`), import the module, call
    ``main(argv, prog="ragen NAME")``; its exit status (argparse's --help and parse errors raise SystemExit)."""
    command = COMMANDS[name]
    argv = list(argv)
    if command.needs_train and not any(a in ("-h", "--help") for a in argv):
        missing = missing_train_modules()
        if missing:
            print(extra_hint(name, missing), file=sys.stderr)
            return 2
    try:
        module = importlib.import_module(command.module)
        return int(module.main(argv, prog=f"ragen {name}") or 0)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in TRAIN_EXTRA_MODULES:
            print(extra_hint(name, [exc.name.split(".")[0]]), file=sys.stderr)
            return 2
        raise
    except BrokenPipeError:
        if not command.quiet_on_closed_pipe:
            raise
        # The reader closed the pipe (`ragen configs | head`): stop quietly, as Unix tools do; stdout goes to
        # devnull so that Python's flush at exit raises no second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The `ragen` console script: `ragen NAME ARGS...` (:func:`run_command`), `ragen --help`, `ragen --version`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    args = build_parser().parse_args(argv)  # --help, --version, an unknown command: argparse exits
    # Options before the command (`ragen -- envs`): the command's arguments are what follows its name.
    return run_command(args.command, argv[argv.index(args.command) + 1:])


if __name__ == "__main__":
    sys.exit(main())
