"""`ragen train CONFIG|PRESET [key=value ...] [--run-dir DIR]`, `ragen train --resume RUN_DIR [key=value ...]`.

The command line of the trainer (:class:`ragen_core.training.trainer.Trainer`): :func:`main` parses the arguments
and :func:`run` runs them. Everything the config names is checked before anything starts (:func:`preflight`), then
the run folder is made (:func:`new_run_dir`, or ``--run-dir``) and the trainer fits. A resume may change only
:data:`ragen_core.training.config.RESUME_KEYS`, and each resume is logged in the run's ``resume_log.jsonl``
(:data:`RESUME_LOG`). Config errors and Ctrl-C are one line each (exit status 2 and 130); Ctrl-C says how to
resume, and a start that fails before its first checkpoint removes the folder it made. The same program runs as
``python -m ragen_core.apps.train`` (what ``ragen reproduce`` starts for each run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ragen_core.policy import TINY_PATHS
from ragen_core.training.checkpoint import LATEST, CheckpointError
from ragen_core.training.config import RESUME_KEYS, ConfigError, TrainConfig, dump_toml, load_config, resume_changes
from ragen_core.training.report import markdown_to_text
from ragen_core.training.trainer import Trainer

__all__ = ["PROG", "DESCRIPTION", "RESUME_LOG", "build_parser", "main", "new_run_dir", "preflight", "run"]

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
    """Parse `argv` (default ``sys.argv[1:]``) and :func:`run` it: 0 when the run finished, 2 on a config error,
    130 when interrupted."""
    args = build_parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


def new_run_dir(cfg: TrainConfig) -> Path:
    """``run.out_dir/run.name``, or the first free ``run.out_dir/run.name-N``."""
    base = Path(cfg.run.out_dir) / cfg.run.name
    if not base.exists():
        return base
    i = 1
    while Path(f"{base}-{i}").exists():
        i += 1
    return Path(f"{base}-{i}")


#: Every resume of a run, one JSON line each: when, from which step, and the config keys it changed.
RESUME_LOG = "resume_log.jsonl"


def preflight(cfg: TrainConfig) -> None:
    """Check what the config names before anything starts (no run folder yet): the env id and its kwargs (one env
    is made and closed) and the model path. Raises ConfigError naming the key."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)

    try:
        gym.spec(cfg.env.id)
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


class _NothingToResume(Exception):
    """`--resume` on a run folder without a checkpoint (the message says how to restart it)."""


def _nothing_to_resume(run_dir: Path) -> str:
    return (f"nothing to resume in {run_dir}: it has no checkpoint ({LATEST}), so it stopped before its warm start "
            f"finished. Start it again from its config: ragen train {run_dir / 'config.toml'} --run-dir {run_dir}")


def _record_resume(run_dir: Path, step: int, changes: dict[str, tuple[Any, Any]]) -> None:
    rec = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "step": step,
           "changes": {k: {"from": a, "to": b} for k, (a, b) in changes.items()}}
    with open(run_dir / RESUME_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


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
        run_dir = Path(args.resume)
        cfg_path = run_dir / "config.toml"
        if not cfg_path.is_file():
            raise ConfigError(f"--resume {run_dir}: {cfg_path} does not exist (is {run_dir} a run folder?)")
        if not (run_dir / LATEST).is_file():
            raise _NothingToResume(_nothing_to_resume(run_dir))
        saved = load_config(cfg_path)
        cfg = load_config(cfg_path, overrides)
        changes = resume_changes(saved, cfg)
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
    preflight(cfg)
    run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(cfg)
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
    created = not run_dir.exists()
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
            _record_resume(run_dir, trainer.state.step, changes)
            (run_dir / "config.toml").write_text(dump_toml(cfg))
        elif cfg.warm_start.sft_episodes:
            trainer.say(f"warm start: {cfg.warm_start.sft_episodes} demonstrations x {cfg.warm_start.epochs} epochs "
                        "(cached by warm_start.cache_dir when set)")
        trainer.fit()
    except CheckpointError as e:
        print(f"cannot resume: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        saved = trainer.saved_step if trainer is not None else None
        if saved is None:
            if created and run_dir.exists():
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
        # A start that failed before its first checkpoint leaves no folder behind (it has nothing to resume).
        if created and run_dir.exists() and (trainer is None or trainer.saved_step is None):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    print(f"run folder: {run_dir}")
    print(markdown_to_text((run_dir / "summary.md").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
