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

In terminals and pipes every command behaves alike (:func:`guarded`, around each command and `ragen --help` /
`--version`): a reader that closes the pipe early (`ragen envs | head -1`) ends a listing with status 0 and a
command whose output must not pass for complete (`ragen train | head`) with one line on stderr and status 141
(128 + SIGPIPE, what the shell reports for a tool that a closed pipe stopped), never a traceback nor Python's
"Exception ignored ... BrokenPipeError" at exit; Ctrl-C is one line and status 130 wherever it lands (while a
command's modules load too); and text that the output's encoding cannot write (an ASCII locale) is written as
``\\uXXXX`` escapes instead of stopping the command with UnicodeEncodeError.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

# Re-exported: tests and callers patch and read them here (the dispatcher calls its own module-level names).
from ragen_core.apps.install import TRAIN_EXTRA_MODULES, checkout_root, extra_hint, missing_train_modules

__all__ = ["CLOSED_PIPE_STATUS", "COMMANDS", "Command", "TRAIN_EXTRA_MODULES", "build_parser", "checkout_root",
           "extra_hint", "guarded", "main", "missing_train_modules", "version"]

#: The exit status of a command (not a listing) whose stdout reader went away: 128 + SIGPIPE (13), the status the
#: shell gives `yes | head -1`'s `yes`, so that `set -o pipefail` scripts see the output was cut short.
CLOSED_PIPE_STATUS = 141
#: The exit status after Ctrl-C: 128 + SIGINT (2).
INTERRUPTED_STATUS = 130
T = TypeVar("T")


@dataclass(frozen=True)
class Command:
    """One `ragen` sub-command: the module with ``build_parser(prog)`` and ``main(argv, prog)``, its help line."""

    module: str
    help: str
    #: The whole command needs the `train` extra (checked before the module is imported).
    needs_train: bool = False
    #: A reader that closes stdout early (`ragen configs | head`) ends it with status 0 and no traceback; off for
    #: commands whose work must not pass for a success when their output cannot be written (training, reports):
    #: those end with one line and :data:`CLOSED_PIPE_STATUS` (:func:`guarded`).
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
    ``main(argv, prog="ragen NAME")``; its exit status (argparse's --help and parse errors raise SystemExit).
    Closed pipes, Ctrl-C and unencodable text are handled as for every command (:func:`guarded`)."""
    command = COMMANDS[name]
    return guarded(f"ragen {name}", lambda: _run(name, command, list(argv)),
                   quiet_on_closed_pipe=command.quiet_on_closed_pipe)


def _run(name: str, command: Command, argv: list[str]) -> int:
    if command.needs_train and not any(a in ("-h", "--help") for a in argv):
        missing = missing_train_modules()
        if missing:
            print(extra_hint(name, missing), file=sys.stderr)
            return 2
        problem = _environment_problem()
        if problem:
            print(f"ragen {name}: error: {problem}", file=sys.stderr)
            return 2
    try:
        module = importlib.import_module(command.module)
        return int(module.main(argv, prog=f"ragen {name}") or 0)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in TRAIN_EXTRA_MODULES:
            print(extra_hint(name, [exc.name.split(".")[0]]), file=sys.stderr)
            return 2
        raise


def _environment_problem() -> str | None:
    """One line on an environment variable that a run would refuse part-way (the decoding step's
    ``RAGEN2_DECODE_KERNEL``), so that the command refuses it before it starts; None when there is none."""
    from ragen_core.policy.native import decode_kernel

    try:
        decode_kernel()
    except ValueError as exc:
        return str(exc)
    return None


def guarded(prog: str, call: Callable[[], T], *, quiet_on_closed_pipe: bool) -> T | int:
    """``call()``'s result (a command's exit status), or the status below: the terminal-and-pipe conventions of
    every `ragen` command.

    - stdout writes what its encoding cannot as backslash escapes (a strict stream only: an ASCII locale's
      ``print("é")`` was a UnicodeEncodeError traceback; UTF-8 mode's surrogateescape is left as it is);
    - stdout is flushed here, so that a closed pipe shows while it can be handled, not in the interpreter's exit
      flush ("Exception ignored ... BrokenPipeError" and status 120 when Python buffers a piped stdout);
    - a BrokenPipeError from a closed stdout or stderr: 0 when `quiet_on_closed_pipe` (a listing read by `head`),
      else one line on stderr and :data:`CLOSED_PIPE_STATUS`; one from elsewhere (a socket, a worker's pipe)
      is not the reader's doing and propagates;
    - Ctrl-C (KeyboardInterrupt) that the command did not handle itself, e.g. while its modules import: one line,
      :data:`INTERRUPTED_STATUS`.

    SystemExit (argparse's --help, --version and usage errors) passes through, after the flush; a closed pipe
    met there ends quietly, with argparse's status, whatever the command (a help text is read like a listing).
    """
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if callable(reconfigure) and getattr(sys.stdout, "errors", None) == "strict":
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):  # a closed or detached stream: the first write says so
            pass
    exit_status = None  # argparse's, once it exits
    try:
        try:
            status = call()
        except SystemExit as exc:
            exit_status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            _flush_stdout()
            raise
        _flush_stdout()
        return status
    except BrokenPipeError:
        if exit_status is not None:  # --help, --version: a text read like a listing (`ragen train --help | head`)
            _silence_stdout()
            return exit_status
        if not quiet_on_closed_pipe and not _output_closed():
            raise
        _silence_stdout()
        if quiet_on_closed_pipe:
            return 0
        _say(f"{prog}: stopped: its output was closed by the reader (e.g. `| head`); the output is incomplete")
        return CLOSED_PIPE_STATUS
    except KeyboardInterrupt:
        _say(f"\n{prog}: interrupted")
        return INTERRUPTED_STATUS


def _flush_stdout() -> None:
    if sys.stdout is not None:  # None: started with fd 1 closed (`>&-`), where print() writes nothing
        sys.stdout.flush()


def _output_closed() -> bool:
    """Whether stdout or stderr is a pipe whose reader has gone: poll reports POLLERR on its write end (Linux,
    macOS). False where that cannot be asked (no ``select.poll``: Windows; a stream without a file descriptor)."""
    import select

    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poller.register(stream.fileno(), select.POLLOUT)
        except (AttributeError, OSError, ValueError):
            continue
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _silence_stdout(stream: object = None) -> None:
    """Point `stream`'s (None: stdout's) file descriptor at devnull, so that Python's flush at exit, which writes
    what is still buffered, raises no second BrokenPipeError (the Python docs' recipe, "Note on SIGPIPE")."""
    try:
        fd = (sys.stdout if stream is None else stream).fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _say(line: str) -> None:
    """`line` on stderr, unless stderr is gone too (`2>&1 | head`): then stderr goes to devnull as stdout did."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        _silence_stdout(sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """The `ragen` console script: `ragen NAME ARGS...` (:func:`run_command`), `ragen --help`, `ragen --version`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    # --help, --version, an unknown command: argparse exits (guarded: `ragen --help | head -1` as a listing)
    args = guarded("ragen", lambda: build_parser().parse_args(argv), quiet_on_closed_pipe=True)
    if isinstance(args, int):  # parse_args only writes on its way out: the closed pipe's status
        return args
    # Options before the command (`ragen -- envs`): the command's arguments are what follows its name.
    return run_command(args.command, argv[argv.index(args.command) + 1:])


if __name__ == "__main__":
    sys.exit(main())
