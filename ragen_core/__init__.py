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

The modules' paths before this layout (``ragen_core.filtering``, ``ragen_core.train``,
``ragen_core.integrations.verl_core``, ...) still import, as the same module objects, with a
``DeprecationWarning``; they are removed in the next release (:data:`MOVED`).
"""

from ragen_envs._moved import install as _install_moved

_LAZY = {"warm_start": "ragen_core.integrations.warm", "warm_start_tools": "ragen_core.integrations.warm"}

#: old module path -> new module path (deprecated aliases, one release)
MOVED: dict[str, str] = {
    **{f"ragen_core.{m}": f"ragen_core.math.{m}"
       for m in ("advantages", "filtering", "losses", "mi", "metrics", "stats", "collapse")},
    **{f"ragen_core.{m}": f"ragen_core.training.{m}"
       for m in ("algorithms", "config", "checkpoint", "report", "sft", "demonstrators", "warm_cache", "probe",
                 "presets")},
    "ragen_core.train": "ragen_core.training.trainer",
    **{f"ragen_core.{m}": f"ragen_core.apps.{m}" for m in ("cli", "play", "demo", "env_demo", "diagnose")},
    **{f"ragen_core.reproduce{m}": f"ragen_core.apps.reproduce{m}"
       for m in ("", ".analysis", ".cli", ".report", ".runner", ".study")},
    "ragen_core.warm": "ragen_core.integrations.warm",
    **{f"ragen_core.integrations.trl_{m}": f"ragen_core.integrations.trl.{m}" for m in ("env", "rows", "version")},
    **{f"ragen_core.integrations.verl_{m}": f"ragen_core.integrations.verl.{m}"
       for m in ("core", "agent", "env", "mi", "trainer", "version")},
}
_install_moved(MOVED)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ragen_core' has no attribute {name!r}")
