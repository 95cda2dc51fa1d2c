"""TRL adapter (``pip install ragen2[trl]``): :class:`RagenGRPOTrainer` and ``ragen/`` envs in TRL.

- :mod:`~ragen_core.integrations.trl.grpo`: ``RagenGRPOTrainer`` / ``RagenGRPOConfig`` (imports TRL, after the
  version check)
- :mod:`~ragen_core.integrations.trl.env`: the env adapter for ``environment_factory`` and ``EnvReward``
  (no TRL import)
- :mod:`~ragen_core.integrations.trl.rows`: row selection of a generation batch (torch only)
- :mod:`~ragen_core.integrations.trl.version`: the supported TRL range

The package's names (``__all__`` included) are those of :mod:`~ragen_core.integrations.trl.grpo`, loaded on
first use, so importing this package (or its TRL-free modules) never needs TRL;
``from ragen_core.integrations.trl import RagenGRPOTrainer`` checks the installed TRL
first and raises ``UnsupportedTRLVersionError`` naming the supported range.
"""

from ragen_core.integrations._lazy import forward_to

__getattr__ = forward_to(__name__, "ragen_core.integrations.trl.grpo")
