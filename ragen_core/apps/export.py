"""`ragen export RUN_DIR [--out DIR]`: a run's policy as a transformers model folder.

The trainer checkpoints its whole state (``RUN_DIR/checkpoints/latest.pt``: weights, optimiser, RNG streams). This
command loads the policy the run's ``config.toml`` names, puts the checkpoint's weights into it and writes a folder
that any transformers-based tool loads (``AutoModelForCausalLM.from_pretrained``, vLLM, TRL, the Hub, and
``ragen diagnose --model``): ``save_pretrained`` weights and config, the tokenizer, and ``ragen_export.json``
(``{"run": ..., "step": ..., "weights_sha256": ...}``; the hash is :func:`ragen_core.policy.identity.weights_sha256`,
the one a run's ``rollouts.jsonl`` names its sampler by). Default ``--out``: ``RUN_DIR/model``.

``--out`` is a new folder, an empty one, or an earlier export (a folder holding ``ragen_export.json``), which is
replaced as a whole. Every export is written to a hidden folder beside ``--out`` first and then takes its place, so
that no file of an earlier one (another tokenizer's, a shard of a larger model) is left mixed in, and a failed or
interrupted export (a full disk, Ctrl-C) leaves ``--out`` as it was: absent, empty or the earlier export, never
half-written. Any other non-empty folder (a run folder, a folder of one's own) is refused
(:func:`export_out_problem`). A checkpoint whose weights do not fit the model ``config.toml`` names (the model
folder was replaced after training) is one line naming the first mismatch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

PROG = "ragen export"
#: What the export writes beside the model files.
EXPORT_INFO = "ragen_export.json"

__all__ = ["EXPORT_INFO", "build_parser", "export_is_stale", "export_out_problem", "export_run", "exported_model",
           "folder_problem", "is_earlier_export", "is_run_dir", "main"]


def is_run_dir(path: str | Path) -> bool:
    """Whether `path` is a training run folder (a ``config.toml`` and a latest checkpoint)."""
    p = Path(path)
    return (p / "config.toml").is_file() and (p / "checkpoints" / "latest.pt").is_file()


def folder_problem(folder: str | Path) -> str | None:
    """Why `folder` cannot be made or written as a folder (one line), or None: it, or a folder above it, is an
    existing file."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"{above} is a file, not a folder"
    return None


def is_earlier_export(folder: str | Path) -> bool:
    """Whether `folder` is a folder an earlier export wrote (it holds :data:`EXPORT_INFO`)."""
    return (Path(folder) / EXPORT_INFO).is_file()


def export_out_problem(folder: str | Path) -> str | None:
    """Why an export may not be written to `folder` (one line), or None: it must be a new folder, an empty one or
    an earlier export (:func:`is_earlier_export`, replaced as a whole); a file, or a folder holding anything else,
    is refused rather than written into."""
    path = Path(folder)
    problem = folder_problem(path)
    if problem is not None:
        return problem
    if path.is_dir() and not is_earlier_export(path):
        entries = sorted(p.name for p in path.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
            return (f"it is not empty (it holds {shown}) and is not an earlier export (no {EXPORT_INFO}): the "
                    "export would mix its files with these; give a new or empty folder")
    return None


def export_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the run's latest policy as a transformers folder (module docstring); returns the folder.

    `out` (default ``RUN_DIR/model``) is a new or empty folder, written directly, or an earlier export, replaced as
    a whole: the new export is written to a folder beside it, which then takes its place.

    Raises:
        ValueError: `run_dir` is not a run folder, `out` cannot take an export (:func:`export_out_problem`), the
            model its config names cannot be loaded, or the checkpoint cannot be read or does not fit that model
            (the message says which).
    """
    from ragen_core.policy import load_policy
    from ragen_core.policy.identity import weights_sha256
    from ragen_core.policy.tiny import CorruptTinyModelError
    from ragen_core.training.checkpoint import load_checkpoint
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import policy_path

    run = Path(run_dir)
    if not is_run_dir(run):
        raise ValueError(f"{run} is not a run folder (it needs config.toml and checkpoints/latest.pt)")
    target = Path(out) if out is not None else run / "model"
    problem = export_out_problem(target)
    if problem is not None:  # before the policy is loaded: a bad --out costs nothing
        where = f"--out {target}" if out is not None else f"{target} (the run's export folder, RUN_DIR/model)"
        raise ValueError(f"{where}: {problem}")
    cfg = load_config(run / "config.toml")
    try:
        policy = load_policy(policy_path(cfg), dtype=cfg.model.dtype)
    except (OSError, ValueError, CorruptTinyModelError) as e:  # transformers' OSError: a damaged model folder
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot load the model {run / 'config.toml'} names (model.path = {cfg.model.path!r}): "
                         f"{why}") from None
    try:
        state = load_checkpoint(run)
    except Exception as e:  # noqa: BLE001 - a damaged checkpoint is reported in one line, whatever torch raised
        raise ValueError(f"cannot read the checkpoint of {run}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    try:
        policy.model.load_state_dict(state["model"])
    except RuntimeError as e:  # torch's message starts with a line that names no key: report the first mismatch
        raise ValueError(f"the checkpoint of {run} does not fit the model its config.toml names (model.path = "
                         f"{cfg.model.path!r}; replaced since the run?): {_first_mismatch(str(e))}") from None
    info = {"run": str(run.resolve()), "step": int(state.get("step", 0)),
            "weights_sha256": weights_sha256(policy.model)}
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.parent / f".{target.name}.export-{uuid.uuid4().hex[:12]}"
    fresh.mkdir()  # (not tempfile.mkdtemp: its folder would keep mode 0700)
    try:
        _write_export(policy, info, fresh)
        _swap_into_place(fresh, target)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)  # --out stays as it was: absent, empty or the earlier export
        raise
    return target


def _first_mismatch(message: str) -> str:
    """The first line of torch's `load_state_dict` error that names a key (``size mismatch for ...``, ``Missing
    key(s) ...``), cut to 300 characters, and how many more such lines there are."""
    lines = [line.strip() for line in message.splitlines()[1:] if line.strip()] or [message.strip()]
    first = lines[0] if len(lines[0]) <= 300 else lines[0][:297] + "..."
    return first + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def _swap_into_place(fresh: Path, target: Path) -> None:
    """Move the finished export `fresh` to `target` (absent, an empty folder or an earlier export). The earlier
    export is renamed aside first and removed only once `fresh` is in place; were that rename to fail, it is put
    back, so that `target` never ends up missing or half-written."""
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()  # an empty folder: rename onto it is POSIX-only
    if not target.exists():
        fresh.rename(target)
        return
    aside = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:12]}"
    target.rename(aside)
    try:
        fresh.rename(target)
    except BaseException:
        aside.rename(target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _write_export(policy: object, info: dict[str, object], folder: Path) -> None:
    """The files of an export in `folder` (an existing folder): weights and config, tokenizer, :data:`EXPORT_INFO`."""
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    (folder / EXPORT_INFO).write_text(json.dumps(info, indent=1) + "\n")


def export_is_stale(run: str | Path, exported: str | Path) -> bool:
    """Whether `exported` (a folder :func:`export_run` wrote) is missing, unreadable, or from another step than the
    run's latest checkpoint (the run trained on after the export)."""
    try:
        info = json.loads((Path(exported) / EXPORT_INFO).read_text())
        import torch

        step = torch.load(Path(run) / "checkpoints" / "latest.pt", map_location="cpu", weights_only=False).get("step")
    except Exception:  # noqa: BLE001 - unreadable: export again (export_run reports a damaged checkpoint)
        return True
    return info.get("step") != step


def exported_model(run: str | Path) -> Path:
    """The run's policy as a transformers folder, ``RUN/model``: exported (:func:`export_run`) when missing or
    stale (:func:`export_is_stale`), else the folder as it is.

    Raises:
        ValueError: as :func:`export_run`.
    """
    out = Path(run) / "model"
    if export_is_stale(run, out):
        export_run(run, out)
    return out


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Write a run's policy as a transformers model folder "
                                "(save_pretrained weights, config and tokenizer).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run folder (config.toml, checkpoints/latest.pt)")
    p.add_argument("--out", default=None,
                   help="where to write it (default RUN_DIR/model): a new or empty folder, or an earlier export "
                        f"(a folder with {EXPORT_INFO}), which is replaced as a whole; any other folder is refused")
    return p


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        target = export_run(args.run_dir, args.out)
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a folder that cannot be written (permissions, a full disk)
        print(f"{prog}: cannot write {args.out or Path(args.run_dir) / 'model'}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"exported to {target} ({_how_to_load(target)}, or ragen diagnose --model)")
    return 0


def _how_to_load(folder: Path) -> str:
    """How transformers loads the export: the tiny vision model's architecture is this package's own, registered
    with transformers' Auto classes when ``ragen_core.policy.tiny`` is imported (a fresh Python that skips it gets
    "model type ... not recognised")."""
    import json

    from ragen_core.policy.tiny import VISION_MODEL_TYPE

    try:
        model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        model_type = None
    if model_type == VISION_MODEL_TYPE:
        return "load it with `import ragen_core.policy.tiny` (which registers its architecture) and then " \
               "AutoModelForCausalLM.from_pretrained, or with ragen_core.policy.HFPolicy.from_pretrained"
    return "load it with AutoModelForCausalLM.from_pretrained"


if __name__ == "__main__":
    raise SystemExit(main())
