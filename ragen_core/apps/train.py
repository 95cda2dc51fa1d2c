"""`ragen train CONFIG|PRESET [key=value ...] [--run-dir DIR]`, `ragen train --resume RUN_DIR [key=value ...]`.

The command line of the trainer (:class:`ragen_core.training.trainer.Trainer`): :func:`main` parses the arguments
and :func:`run` runs them. Everything that can be checked before training is checked before the run folder is
made (the config's values, what it names: :func:`preflight`; the folder itself: :func:`check_new_run_dir`), then
the run folder is made (:func:`claim_new_run_dir`, or ``--run-dir``) and the trainer fits. A new run never writes into
a folder that holds another run or other files, and a run holds a lock on its folder while it trains
(:func:`lock_run_dir`): a second ``ragen train`` in it, new or ``--resume``, is refused in one line, and runs of one
``run.name`` started at once get a folder each. A resume may change only
:data:`ragen_core.training.config.RESUME_KEYS`, may not lower ``run.steps`` below the steps already trained, and
continues in its own folder (no ``--run-dir``); each resume is logged in the run's ``resume_log.jsonl``
(:data:`RESUME_LOG`). Config errors and Ctrl-C are one line each (exit status 2 and 130); Ctrl-C says how to
resume, and a start that fails before its first checkpoint removes the folder it made. The same program runs as
``python -m ragen_core.apps.train`` (what ``ragen reproduce`` starts for each run).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragen_core.locks import FolderLocked, lock_folder, release_folder
from ragen_core.policy import TINY_PATHS
from ragen_core.policy.tiny import CorruptTinyModelError
from ragen_core.training.checkpoint import LATEST, CheckpointError
from ragen_core.training.config import (
    RESUME_KEYS,
    ConfigError,
    TrainConfig,
    load_config,
    read_config_file,
    resume_changes,
)
from ragen_core.training.provenance import CODE_PATCH, PROVENANCE
from ragen_core.training.report import METRICS, RESUME_LOG, VAL_OUTCOMES, markdown_to_text
from ragen_core.training.sft import check_demonstrator
from ragen_core.training.trainer import Trainer, check_runnable

__all__ = ["PROG", "DESCRIPTION", "RESUME_LOG", "RESTARTABLE", "build_parser", "check_new_run_dir",
           "claim_new_run_dir", "lock_run_dir", "main", "new_run_dir", "preflight", "run"]

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
    parser.add_argument("--run-dir", default=None,
                        help="exact run folder of a new run, new or empty (default: run.out_dir/run.name[-N]); "
                             "not with --resume, which continues in RUN_DIR")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Parse `argv` (default ``sys.argv[1:]``) and :func:`run` it: 0 when the run finished, 2 on a config error,
    130 when interrupted."""
    # Intermixed: overrides may follow a flag (`ragen train CONFIG --run-dir D key=value`), as with most CLIs.
    args = build_parser(prog).parse_intermixed_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


def new_run_dir(cfg: TrainConfig) -> Path:
    """``run.out_dir/run.name``, or the first free ``run.out_dir/run.name-N`` (free when looked at: a run started
    beside this one may take it before it is made; :func:`claim_new_run_dir` makes it)."""
    base = Path(cfg.run.out_dir) / cfg.run.name
    if not base.exists():
        return base
    i = 1
    while Path(f"{base}-{i}").exists():
        i += 1
    return Path(f"{base}-{i}")


def claim_new_run_dir(cfg: TrainConfig) -> Path:
    """Make and return the folder :func:`new_run_dir` names. The folder is made with ``exist_ok=False``: when runs of
    one ``run.name`` start at once (seeds in parallel), each gets a folder of its own, since a name another process
    made between the look and the make moves this one on to the next ``-N`` instead of into that run's folder."""
    Path(cfg.run.out_dir).mkdir(parents=True, exist_ok=True)
    while True:
        run_dir = new_run_dir(cfg)
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:  # taken since new_run_dir looked: the next free name
            continue


class _RunDirBusy(Exception):
    """Another process trains in the run folder right now (the message says what to do)."""


def lock_run_dir(run_dir: Path, resume: bool) -> int | None:
    """Hold the run folder's lock (:func:`ragen_core.locks.lock_folder`) for as long as the run trains here;
    returns its descriptor (None where no lock can be taken).

    Raises:
        _RunDirBusy: another ``ragen train`` holds it (two runs in one folder would interleave their metrics and
            overwrite each other's checkpoints).
    """
    try:
        return lock_folder(run_dir)
    except FolderLocked:
        what = ("resume it once that process has finished (or stop it first): two processes would write the same "
                "checkpoints and metrics" if resume else "give another --run-dir (or leave it out: run.out_dir/"
                "run.name-N), or wait for that run and resume it")
        raise _RunDirBusy(f"{run_dir} is being trained by another `ragen train` process right now: {what}") from None


#: What a folder may hold for a new run to start in it (:func:`check_new_run_dir`): what a start that stopped before
#: its first checkpoint leaves (nothing to resume; `--resume` prints the command that restarts it there) and
#: ``train.log``, the log ``ragen reproduce`` keeps beside each run (it makes the folder and its log first).
RESTARTABLE = frozenset({"config.toml", PROVENANCE, CODE_PATCH, METRICS, VAL_OUTCOMES, "checkpoints", "tensorboard",
                         "train.log"})


def check_new_run_dir(run_dir: Path) -> None:
    """ConfigError unless a new run may start in `run_dir`: a folder that does not exist yet, an empty one, or one
    holding only :data:`RESTARTABLE` entries and no checkpoint. A new run rewrites ``config.toml``,
    ``metrics.jsonl`` and the checkpoints, so a folder with a run that got further (a checkpoint) or with anything
    else is refused rather than overwritten."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ConfigError(f"--run-dir {run_dir} is a file, not a folder: give a new or empty folder")
    entries = sorted(p.name for p in run_dir.iterdir())
    checkpoints = sorted(run_dir.glob("checkpoints/*.pt"))
    if checkpoints:
        raise ConfigError(f"--run-dir {run_dir} already holds a run ({checkpoints[-1].relative_to(run_dir)}): "
                          f"continue it with `ragen train --resume {run_dir}`, or give a new or empty folder")
    other = [name for name in entries if name not in RESTARTABLE]
    if other:
        shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        raise ConfigError(f"--run-dir {run_dir} is not empty (it holds {shown}): a new run would overwrite it; give "
                          f"a new or empty folder, or `ragen train --resume {run_dir}` to continue a run there")


def _checkpoint_step(run_dir: Path) -> int | None:
    """The step of the run's latest checkpoint, read without loading its tensors (None when it cannot be read: the
    trainer's resume then reports the damage)."""
    import torch

    try:
        state = torch.load(run_dir / LATEST, map_location="cpu", weights_only=False, mmap=True)
        return int(state["step"])
    except Exception:  # noqa: BLE001 - a damaged file: CheckpointError later, with its own message
        return None


def preflight(cfg: TrainConfig) -> None:
    """Check what the config names before anything starts (no run folder yet): the env id and its kwargs (one env
    is made and closed), the model path, what the trainer checks before it builds anything
    (:func:`ragen_core.training.trainer.check_runnable`: disjoint seed streams, the device), and that the env serves
    the demonstrator hooks the warm start will call (:func:`ragen_core.training.sft.check_demonstrator`: an oracle
    for ``warm_start.policy = "oracle"``, ...). Raises ConfigError naming the key."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)
    from ragen_envs.registration import find_spec

    try:
        find_spec(cfg.env.id)  # as gym.make finds it ("module:id" imports the module that registers the id)
    except gym.error.Error as e:
        raise ConfigError(f"env.id: {e} (`ragen envs` lists the ids)") from None
    try:
        env = gym.make(cfg.env.id, **cfg.env.kwargs)
    except (TypeError, ValueError, gym.error.Error) as e:
        from ragen_envs.registration import kwarg_error

        raise ConfigError(f"env.kwargs {cfg.env.kwargs!r} for {cfg.env.id}: "
                          f"{kwarg_error(cfg.env.id, dict(cfg.env.kwargs), e)}") from None
    env.close()
    if cfg.model.path not in TINY_PATHS:
        if not Path(cfg.model.path).expanduser().is_dir():
            raise ConfigError(f"model.path {cfg.model.path!r} is not a folder: give a local transformers model "
                              "folder (weights, config and tokenizer), or tiny for the offline tiny model (tiny-base: "
                              "the tiny model pre-trained to copy and look up)")
    check_runnable(cfg)
    try:
        check_demonstrator(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None


class _NothingToResume(Exception):
    """`--resume` on a run folder without a checkpoint (the message says how to restart it)."""


def _nothing_to_resume(run_dir: Path) -> str:
    return (f"nothing to resume in {run_dir}: it has no checkpoint ({LATEST}), so it stopped before its warm start "
            f"finished. Start it again from its config: ragen train {run_dir / 'config.toml'} --run-dir {run_dir}")


def _prepare(args: argparse.Namespace) -> tuple[TrainConfig, Path, dict[str, tuple[Any, Any]]]:
    """The config, the run folder and (resume) the accepted changes; ConfigError or ValueError when unusable."""
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config:  # `ragen train --resume DIR key=value`: no CONFIG given
        overrides.insert(0, config)
        config = None
    if args.resume:
        if config is not None:
            raise ConfigError(f"--resume uses the run's own config.toml: drop {config!r} (only key=value overrides "
                              f"of {', '.join(RESUME_KEYS)} are allowed)")
        if args.run_dir:
            raise ConfigError(f"--run-dir cannot be used with --resume: a resume continues in {args.resume} itself "
                              f"(copy the folder first to continue a copy)")
        run_dir = Path(args.resume)
        cfg_path = run_dir / "config.toml"
        if not cfg_path.is_file():
            raise ConfigError(f"--resume {run_dir}: {cfg_path} does not exist (is {run_dir} a run folder?)")
        if not (run_dir / LATEST).is_file():
            raise _NothingToResume(_nothing_to_resume(run_dir))
        saved = load_config(cfg_path)
        cfg = load_config(cfg_path, overrides)
        changes = resume_changes(saved, cfg)
        done = _checkpoint_step(run_dir)
        if done is not None and cfg.run.steps < done:
            raise ConfigError(f"run.steps={cfg.run.steps} is below the {done} steps this run has already trained: a "
                              f"resume may keep or raise run.steps, not lower it")
        preflight(cfg)
        return cfg, run_dir, changes
    if config is None:
        raise ConfigError("a CONFIG file or preset name is required (`ragen configs` lists the presets), "
                          "or --resume RUN_DIR")
    from ragen_core.training.presets import resolve_config

    try:
        path, note = resolve_config(config)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if note:
        print(note, file=sys.stderr)
    cfg = load_config(path, overrides)
    if not read_config_file(path):  # said first: a typo'd or truncated file would otherwise train the defaults
        print(f"note: {path} sets no keys (empty or only comments): every setting not given as key=value is its "
              f"default (run.name={cfg.run.name!r}, env.id={cfg.env.id}, run.steps={cfg.run.steps})", file=sys.stderr)
    preflight(cfg)
    run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(cfg)
    check_new_run_dir(run_dir)
    return cfg, run_dir, {}


def run(args: argparse.Namespace) -> int:
    """Run `ragen train` from parsed arguments; returns an exit code (2: config error, 130: interrupted).

    Everything the config names is checked before the run folder is made (:func:`preflight`); a start that fails
    before the first checkpoint removes the folder it made. Ctrl-C stops with one line saying how to resume.
    """
    try:
        cfg, run_dir, changes = _prepare(args)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except _NothingToResume as e:
        print(str(e), file=sys.stderr)
        return 2
    try:  # only now, every check passed: a folder that cannot be made is one line, not a traceback
        if args.resume or args.run_dir:
            created = _make_run_dir(run_dir)
        else:  # run.out_dir/run.name[-N]: a name another run took since _prepare looked moves this one on
            run_dir, created = claim_new_run_dir(cfg), True
    except OSError as e:
        print(f"cannot make the run folder {run_dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        lock = lock_run_dir(run_dir, bool(args.resume))
    except _RunDirBusy as e:  # the folder is that process's: leave it as it is, even if this one made it
        print(f"{'cannot resume' if args.resume else 'cannot start'}: {e}", file=sys.stderr)
        return 2
    try:
        if not args.resume:  # again, under the lock: a run may have written its first checkpoint since _prepare
            check_new_run_dir(run_dir)
        return _train(args, cfg, run_dir, changes, created)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    finally:
        release_folder(lock)  # the Trainer in _train took no lock of its own: this process held the folder's


def _make_run_dir(run_dir: Path) -> bool:
    """Make `run_dir` (and the folders above it) unless it exists; whether this process made it (only a folder it
    made is removed after a failed start: ``exist_ok=False`` gives that answer to exactly one of two processes)."""
    try:
        run_dir.mkdir(parents=True)
        return True
    except FileExistsError:
        if not run_dir.is_dir():
            raise
        return False


def _train(args: argparse.Namespace, cfg: TrainConfig, run_dir: Path, changes: dict[str, tuple[Any, Any]],
           created: bool) -> int:
    """Train in `run_dir` (made, and locked by this process); the exit code of :func:`run`."""
    trainer: Trainer | None = None
    print(f"run folder: {run_dir}", file=sys.stderr, flush=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars are noise between the run's own lines
    try:
        trainer = Trainer(cfg, run_dir, resume=bool(args.resume))
        trainer.messages = sys.stderr
        if args.resume:
            print(f"resuming at step {trainer.state.step} of {cfg.run.steps} (the last checkpoint)", file=sys.stderr)
            if changes:
                print("resume: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()),
                      file=sys.stderr)
        elif cfg.warm_start.sft_episodes:
            trainer.say(f"warm start: {cfg.warm_start.sft_episodes} demonstrations x {cfg.warm_start.epochs} epochs "
                        "(cached by warm_start.cache_dir when set)")
        trainer.fit()
    except CheckpointError as e:
        print(f"cannot resume: {e}", file=sys.stderr)
        return 2
    except (CorruptTinyModelError, OSError) as e:
        if trainer is not None:  # during training (a full disk): the traceback says where
            _remove_failed_start(run_dir, created, trainer)
            raise
        # Loading the model: a damaged cached tiny model, a cache folder that cannot be written (one line each,
        # naming the folder and what to do).
        _remove_failed_start(run_dir, created, trainer)
        print(f"cannot load the model: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:  # a check of the trainer's own (the same ones ran above, so rare): no traceback
        _remove_failed_start(run_dir, created, trainer)
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        saved = trainer.saved_step if trainer is not None else None
        if saved is None:
            if _removable(run_dir, created):
                shutil.rmtree(run_dir, ignore_errors=True)
                where = f"removed {run_dir}"
            else:
                where = f"restart with: ragen train {run_dir / 'config.toml'} --run-dir {run_dir}"
            print(f"\ninterrupted before the first checkpoint (warm start): nothing to resume; {where}",
                  file=sys.stderr)
        else:
            at = trainer.state.step if trainer is not None else saved
            print(f"\ninterrupted at step {at} of {cfg.run.steps} (last checkpoint: step {saved}); resume with "
                  f"`ragen train --resume {run_dir}`", file=sys.stderr)
        return 130
    except BaseException:
        _remove_failed_start(run_dir, created, trainer)
        raise
    print(f"run folder: {run_dir}")
    print(markdown_to_text((run_dir / "summary.md").read_text()))
    # The loop ends at run.steps, on the empty-step rule (should_stop) or at the time limit: say how the last
    # continues (a resume gets run.max_minutes afresh), as the Ctrl-C line does.
    if trainer.state.step < cfg.run.steps and not trainer.should_stop():
        print(f"stopped at step {trainer.state.step} of {cfg.run.steps} by the time limit (run.max_minutes="
              f"{cfg.run.max_minutes:g}); continue with `ragen train --resume {run_dir}` (each resume gets "
              f"run.max_minutes again; run.max_minutes=M changes it)")
    return 0


def _remove_failed_start(run_dir: Path, created: bool, trainer: Trainer | None) -> None:
    """A start that failed before its first checkpoint leaves no folder behind (it has nothing to resume), unless
    the folder was there before (a folder the user made is never removed)."""
    if (trainer is None or trainer.saved_step is None) and _removable(run_dir, created):
        shutil.rmtree(run_dir, ignore_errors=True)


def _removable(run_dir: Path, created: bool) -> bool:
    """Whether a start that failed before its first checkpoint may remove `run_dir`: only a folder it made, and
    never one holding a checkpoint (a run's that is not this start's: removing it would lose that run)."""
    return created and run_dir.is_dir() and not any(run_dir.glob("checkpoints/*.pt"))


if __name__ == "__main__":
    sys.exit(main())
