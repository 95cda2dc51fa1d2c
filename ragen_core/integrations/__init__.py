"""Adapters that bring this project's filtering, collapse metrics and environments to other trainers.

Each adapter is an optional extra and is imported on its own, so that importing ``ragen_core`` never needs the
other trainer installed:

- ``ragen_core.integrations.trl`` (``pip install ragen2[trl]``): :class:`RagenGRPOTrainer`, a TRL ``GRPOTrainer``
  that removes low-signal prompt groups before the loss (``ragen_core.math.filtering``) and logs the filter statistics
  and, every ``mi_every`` steps, the MI collapse proxies (``ragen_core.math.mi``); ``ragen_environment_factory`` exposes
  any ``ragen/`` env through TRL's ``environment_factory`` interface.
- ``ragen_core.integrations.verl`` (``pip install ragen2[verl]``): the advantage estimator ``ragen_snr``, the
  trainer mode ``ragen_snr_sync`` (dropped groups removed before the log-prob, critic and update passes) and the
  agent loop ``ragen_env_agent``, registered into verl by ``register()``; their tensor logic lives in
  ``verl.core`` / ``verl.mi`` / ``verl.env``, which import no verl and are tested on CPU.

See docs/scale_out.md. Each adapter checks the installed version of its trainer before using it
(``trl.version`` / ``verl.version``) and refuses versions it was not tested with, naming the supported range.
"""

__all__: list[str] = []
