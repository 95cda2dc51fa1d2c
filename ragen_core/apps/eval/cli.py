"""The ``ragen eval`` command line: parse, check, and run an evaluation (``ragen_core.apps.eval.run``).

Every input mistake is one line starting ``ragen eval:`` and exit status 2, found before the output folder is made
where it can be (``--out`` must be a new or empty folder; ``--device`` must be one this torch can use), else before
an episode is played (the folder made for it is removed again); so is an evaluation whose every env is refused. A
server that is unreachable or keeps failing is one line and exit status 1;
Ctrl-C is one line and 130. Each names the folder and the resume command when episodes were kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from ragen_core.apps.eval.records import EPISODES
from ragen_core.apps.eval.spec import (
    EVAL_JSON,
    RESUME_FLAGS,
    EvalSpec,
    SpecError,
    api_key,
    base_url_problem,
    build_spec,
    default_out_dir,
    load_spec,
)

__all__ = ["PROG", "build_parser", "main", "serve_extra_hint"]

PROG = "ragen eval"


def serve_extra_hint(missing: str) -> str:
    """The one line for a missing client package."""
    return (f"{PROG} --base-url needs the serve extra (missing: {missing}): pip install 'ragen2[serve]' "
            "(from a clone: pip install -e '.[serve]')")


def _missing(module: str) -> bool:
    """Whether `module` cannot be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a module blocked in sys.modules (None) has no spec either
        return True


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The ``ragen eval`` arguments (docs/eval.md lists each with its default)."""
    p = argparse.ArgumentParser(
        prog=prog, description="Evaluate a model on the envs, played exactly as training plays them: in process "
        "(MODEL = a transformers folder, a run folder, tiny or tiny-base) or through any OpenAI-compatible server "
        "(--base-url URL --model-name NAME). Writes episodes.jsonl, summary.json, summary.md and summary.png.")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                   help="a transformers model folder, a training run folder (its policy and its settings), tiny or "
                        "tiny-base (the built-in models)")
    srv = p.add_argument_group("server (instead of MODEL)")
    srv.add_argument("--base-url", default=None, metavar="URL",
                     help="an OpenAI-compatible server's API root, e.g. http://127.0.0.1:8000/v1 "
                          "(not .../chat/completions)")
    srv.add_argument("--model-name", default=None, metavar="NAME", help="the model name the server serves")
    srv.add_argument("--api-key-env", default=None, metavar="VAR",
                     help="environment variable holding the API key (default: OPENAI_API_KEY if set, else none)")
    srv.add_argument("--timeout", type=float, default=None, metavar="S", help="per-request timeout (default 120 s)")
    srv.add_argument("--max-retries", type=int, default=None, metavar="N",
                     help="retries of a request on connection errors, timeouts, 408, 409, 429 and 5xx, with backoff "
                          "(default 4)")
    srv.add_argument("--extra-body", default=None, metavar="JSON",
                     help="server-specific fields added to every request, e.g. '{\"top_k\": 20}' (not the fields "
                          "the evaluation sets: model, messages, max_tokens, temperature, top_p, stop, stream, n)")
    what = p.add_argument_group("what is played")
    what.add_argument("--envs", default=None, metavar="ID,ID...|suite",
                      help="env ids, or suite (every registered id the model can take); default: the config's env, "
                           "else suite")
    what.add_argument("--config", default=None, metavar="CONFIG|PRESET|RUN_DIR",
                      help="play the config's env with its [env] and [rollout] settings (a run folder's MODEL "
                           "brings its own)")
    what.add_argument("--episodes", type=int, default=None, metavar="N", help="seeds per env (default 128)")
    what.add_argument("--seed", type=int, default=None, metavar="S",
                      help="first seed (default 6000: held out from every shipped config's seeds); the last one, "
                           "S + N - 1, is at most 2**32 - 1")
    what.add_argument("--group-size", type=int, default=None, metavar="G",
                      help="samples per seed (default 1); G > 1 adds the reward-variance pre-check")
    samp = p.add_argument_group("sampling (defaults: the config's, else the paper's: temperature 1, top-p 1)")
    samp.add_argument("--temperature", type=float, default=None, metavar="T", help="0 = greedy")
    samp.add_argument("--top-p", type=float, default=None, metavar="P")
    samp.add_argument("--max-tokens", type=int, default=None, metavar="N",
                      help="new tokens per turn (default: the config's, else 128)")
    run = p.add_argument_group("running")
    run.add_argument("--workers", type=int, default=None, metavar="W",
                     help="concurrent episodes: requests in flight (server, default 8) or episodes per batched "
                          "generate (in process, default 64)")
    run.add_argument("--out", default=None, metavar="DIR", help="output folder (default evals/<model>[-N])")
    run.add_argument("--resume", default=None, metavar="DIR",
                     help="finish an interrupted evaluation (only --workers, --timeout, --max-retries, --base-url, "
                          "--api-key-env, --device may be given again)")
    run.add_argument("--device", default=None, help="torch device of an in-process model (default auto)")
    run.add_argument("--mi-groups", type=int, default=None, metavar="N",
                     help="in process: MI proxies on the first N seeds of each env (default 32; 0 = off)")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bar (default: when stderr is a terminal)")
    return p


def _out_problem(folder: Path) -> str | None:
    """Why a fresh evaluation cannot be written to `folder` (one line), or None. It must be a new folder or an empty
    one: an evaluation's folder is resumed (``--resume``), never written over, and any other non-empty folder (a
    training run's) is not this evaluation's to fill."""
    from ragen_core.apps.export import folder_problem

    problem = folder_problem(folder)
    if problem is not None:
        return f"--out {folder}: {problem}"
    if folder.is_dir():
        if (folder / EPISODES).exists() or (folder / EVAL_JSON).exists():
            return f"{folder} already holds an evaluation: finish it with --resume {folder}, or choose another --out"
        if any(folder.iterdir()):
            return (f"--out {folder} is a folder that holds other files (a training run's?), not an evaluation: "
                    "choose a new or empty folder")
    return None


def _discard(folder: Path, created: bool, resumed: bool) -> None:
    """Undo the start of an evaluation that played nothing: remove the folder made for it, or the ``eval.json``
    written into the empty folder given, so that the same command can be run again."""
    if resumed or (folder / EPISODES).exists():
        return
    if created:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        (folder / EVAL_JSON).unlink(missing_ok=True)


def _resume(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[object, Path]:
    folder = Path(args.resume)
    spec = load_spec(folder)
    given = [a for a in vars(args) if a not in ("resume", "progress", *RESUME_FLAGS) and getattr(args, a) is not None]
    if given:
        flags = ", ".join("MODEL" if a == "model" else "--" + a.replace("_", "-") for a in given)
        raise SpecError(f"--resume plays the evaluation as it started: drop {flags} (only "
                        f"{', '.join('--' + f.replace('_', '-') for f in RESUME_FLAGS)} may change)")
    for name in RESUME_FLAGS:
        value = getattr(args, name)
        if value is not None:
            if name in ("base_url", "api_key_env") and spec.backend != "server":
                raise SpecError(f"--{name.replace('_', '-')}: this evaluation runs in process, not on a server")
            setattr(spec, name, value)
    if spec.backend == "server":  # what the resumed run sends, checked as a fresh one's is
        problem = base_url_problem(str(spec.base_url))
        if problem is not None:
            raise SpecError(problem)
        api_key(spec.api_key_env, "--api-key-env" if args.api_key_env else f"{EVAL_JSON}'s api_key_env")
    return spec, folder


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """``ragen eval``: 0 done, 1 the server failed, 2 bad input, 130 interrupted (module docstring)."""
    parser = build_parser(prog)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    notes: list[str] = []
    try:
        if args.resume:
            spec, folder = _resume(args, parser)
        else:
            spec = build_spec(args, notes)
            folder = Path(args.out) if args.out else default_out_dir(spec)
            problem = _out_problem(folder)
            if problem is not None:
                raise SpecError(problem)
        if spec.backend == "server" and _missing("openai"):
            print(serve_extra_hint("openai"), file=sys.stderr)
            return 2
        if spec.backend == "local":  # checked before the folder is made: a bad device must leave nothing behind
            from ragen_core.apps.diagnose import device_problem

            problem = device_problem(spec.device)
            if problem is not None:
                raise SpecError(problem)
    except SpecError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    from ragen_core.apps.eval.run import FolderBusy, lock_folder
    from ragen_core.locks import release_folder

    for note in notes:
        print(note, file=sys.stderr)
    try:
        if args.resume or args.out:
            created = _make_folder(folder)
        else:  # evals/<model>[-N]: a name another evaluation took since it was looked at moves this one on
            folder, created = _claim_default_folder(spec), True
        fd = lock_folder(folder)  # before eval.json is written: a second evaluation of the folder writes nothing
    except FolderBusy as e:  # another process plays into it: the folder is its, leave it as it is
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a folder that cannot be written (permissions, a full disk)
        print(f"{prog}: cannot write {folder}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        return _locked_main(args, prog, spec, folder, created)
    finally:
        release_folder(fd)


def _make_folder(folder: Path) -> bool:
    """Make `folder` (and the folders above it) unless it exists; whether this process made it (``exist_ok=False``
    gives that answer to exactly one of two processes, and only the one that made it removes it again)."""
    try:
        folder.mkdir(parents=True)
        return True
    except FileExistsError:
        if not folder.is_dir():
            raise
        return False


def _claim_default_folder(spec: EvalSpec) -> Path:
    """Make and return :func:`default_out_dir`'s folder; a name another evaluation made between the look and the
    make moves this one on to the next ``-N`` (two evaluations of one model started at once get a folder each)."""
    while True:
        folder = default_out_dir(spec)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


def _locked_main(args: argparse.Namespace, prog: str, spec: EvalSpec, folder: Path, created: bool) -> int:
    """:func:`main` once the folder is made and this process holds its lock."""
    from ragen_core.apps.eval.run import execute

    if not args.resume:  # again, under the lock: another evaluation may have filled the folder since it was checked
        problem = _out_problem(folder)
        if problem is not None:
            print(f"{prog}: {problem}", file=sys.stderr)
            return 2
    try:
        if not args.resume:
            spec.save(folder)
    except OSError as e:  # a folder that cannot be written (permissions, a full disk)
        print(f"{prog}: cannot write {folder}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"evaluation folder: {folder}", file=sys.stderr, flush=True)
    progress = sys.stderr.isatty() if args.progress is None else bool(args.progress)
    try:
        status = execute(spec, folder, progress=progress, prog=prog, locked=True)
    except (ValueError, OSError) as e:  # a model folder that does not load, an env kwarg it refuses, a full disk
        _discard(folder, created, bool(args.resume))  # nothing was played: leave nothing behind
        print(f"{prog}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while a model loads (execute handles it once episodes are being played)
        print(f"\n{prog}: interrupted before the first episode; start again with `ragen eval --resume {folder}`",
              file=sys.stderr)
        return 130
    except Exception:  # anything else (a bug, memory): the traceback, and no folder left that holds nothing played
        _discard(folder, created, bool(args.resume))
        raise
    if status == 2:  # every env refused: nothing was evaluated
        _discard(folder, created, bool(args.resume))
    return status
