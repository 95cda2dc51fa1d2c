"""Lazy package attributes: a package whose public names live in one heavy module serves them on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["forward_to"]


def forward_to(package: str, module: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for `package` that serves every name from `module`, imported on first use.

    A package whose public names live in one heavy module (``ragen_core.integrations.trl`` -> its ``grpo``,
    which imports TRL) uses it so that importing the package, or a light sibling module, loads nothing heavy;
    ``__all__`` too is the module's, so ``from package import *`` matches the module's own list.
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name != "__all__":  # copy, pickle and doctest probe dunders: load nothing
            raise AttributeError(name)
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
