"""ragen_core: the RL core, in layers that import only downwards (``make lint`` checks it):

    apps          the ``ragen`` command line and its programs            ragen_core.apps
    integrations  TRL and verl adapters, the warm start for them          ragen_core.integrations
    training      config, algorithms, trainer, checkpoints, warm start    ragen_core.training
    rollout       the env as a chat, multi-turn rollouts                   ragen_core.rollout, ragen_core.episode
    policy        HF transformers, the tiny offline model, vLLM           ragen_core.policy
    math          filtering, advantages, losses, MI, metrics, stats       ragen_core.math

(``ragen_envs`` lies below all of them.) ``ragen_core.warm_start`` and ``ragen_core.warm_start_tools``
(:mod:`ragen_core.integrations.warm`) are loaded on first use, so that importing the package needs no torch (the
envs-only install).
"""

_LAZY = {"warm_start": "ragen_core.integrations.warm", "warm_start_tools": "ragen_core.integrations.warm"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ragen_core' has no attribute {name!r}")
