"""Old import paths of moved modules: they keep working for one release, with a ``DeprecationWarning``.

When a module moves (``ragen_core.filtering`` -> ``ragen_core.math.filtering``), its package installs a
:class:`MovedModules` finder with a table ``{old dotted name: new dotted name}``. Importing an old name then
imports the new module, warns once per old name, and binds the *same module object* under the old name in
``sys.modules``: private names, ``monkeypatch.setattr`` on the old path and ``isinstance`` checks all keep
working, and no copy of any module exists. It lives in ``ragen_envs`` because both packages use it and
``ragen_core`` sits on top of ``ragen_envs`` (never the other way round).

The finder answers only for the names of its table, so every other import goes through Python's normal
machinery untouched. ``python -m OLD`` does not go through it (runpy needs source code): the docs name the new
paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Mapping
from types import ModuleType

__all__ = ["MovedModules", "forward_to", "install"]


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta-path finder and loader that maps old module names onto the modules that replaced them.

    Args:
        moves: old dotted name -> new dotted name, e.g. ``{"ragen_core.mi": "ragen_core.math.mi"}``.
        removal: when the old names go away, for the warning (e.g. ``"the next release"``).
    """

    def __init__(self, moves: Mapping[str, str], removal: str = "the next release"):
        self.moves = dict(moves)
        self.removal = removal

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102  (importlib's protocol)
        if fullname not in self.moves:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=False)

    def create_module(self, spec):  # noqa: D102  (a blank module; exec_module swaps it for the new one)
        return None

    def exec_module(self, module: ModuleType) -> None:  # noqa: D102
        new = self.moves[module.__name__]
        # stacklevel 2 names the importing line: warn() skips importlib's own frames when it counts.
        warnings.warn(f"{module.__name__} moved to {new}; the old path is removed in {self.removal}. "
                      f"Import {new} instead.", DeprecationWarning, stacklevel=2)
        # The importer returns whatever sys.modules holds under the old name once exec_module is done, so
        # both names bind one module object, whose own __name__ and __spec__ stay those of its new path.
        sys.modules[module.__name__] = importlib.import_module(new)


def install(moves: Mapping[str, str], removal: str = "the next release") -> MovedModules:
    """Put a :class:`MovedModules` for `moves` first on ``sys.meta_path`` (once per table) and return it."""
    for finder in sys.meta_path:
        if isinstance(finder, MovedModules) and finder.moves == dict(moves):
            return finder
    finder = MovedModules(moves, removal)
    sys.meta_path.insert(0, finder)
    return finder


def forward_to(package: str, module: str):
    """A module-level ``__getattr__`` for `package` that serves every name from `module`, imported on first use.

    A package whose public names live in one heavy module (``ragen_core.integrations.trl`` -> its ``grpo``,
    which imports TRL) uses it so that importing the package, or a light sibling module, loads nothing heavy;
    ``__all__`` too is the module's, so ``from package import *`` matches the module's own list.
    """

    def __getattr__(name: str):
        if name.startswith("__") and name != "__all__":  # copy, pickle and doctest probe dunders: load nothing
            raise AttributeError(name)
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
