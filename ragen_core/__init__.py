"""ragen_core.

``ragen_core.warm_start`` and ``ragen_core.warm_start_tools`` (:mod:`ragen_core.warm`) are loaded on first use,
so that importing the package needs no torch (the envs-only install).
"""

_LAZY = {"warm_start": "ragen_core.warm", "warm_start_tools": "ragen_core.warm"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ragen_core' has no attribute {name!r}")
