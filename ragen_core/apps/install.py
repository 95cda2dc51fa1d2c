"""What this install has: the modules of the `train` extra, and whether `ragen_core` runs from a source checkout.

Shared by the command line (:mod:`ragen_core.apps.cli`, which checks a command's extra before importing it) and the
commands that need the extra for one option only (`ragen diagnose --model`). Nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

#: The modules of the `train` extra (pyproject.toml), by import name.
TRAIN_EXTRA_MODULES = ("torch", "transformers", "tokenizers", "rich", "matplotlib", "tqdm")


def missing_train_modules(modules: Sequence[str] = TRAIN_EXTRA_MODULES) -> list[str]:
    """The modules of `modules` that cannot be imported here (found without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def extra_hint(command: str, missing: Sequence[str]) -> str:
    """The one line a command prints when the `train` extra is not installed."""
    return (f"ragen {command} needs the training extra (missing: {', '.join(missing)}): "
            f"pip install 'ragen2[train]' (from a clone: pip install -e '.[train]'; docs/install.md)")


def checkout_root() -> Path | None:
    """The source checkout this `ragen_core` is imported from (editable install or repository root), or None
    when it is an installed wheel (no `benchmarks/` next to it)."""
    root = Path(__file__).resolve().parents[2]  # ragen_core/apps/install.py -> the checkout
    return root if (root / "benchmarks" / "run_all.py").is_file() else None
