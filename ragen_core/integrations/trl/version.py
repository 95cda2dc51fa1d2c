"""The TRL versions the TRL adapter supports, and the import-time check.

The adapter overrides private hooks of ``trl.GRPOTrainer`` (``_calculate_rewards`` and
``_generate_and_score_completions``) whose signatures and output keys change between TRL minor releases, so it
accepts only the minor series it was tested with. ``RAGEN2_ALLOW_UNTESTED_TRL=1`` turns the refusal into a
warning, for users who want to try a newer TRL at their own risk.
"""

from __future__ import annotations

from ragen_core.integrations.versions import VersionGate

__all__ = ["TESTED_TRL_VERSION", "SUPPORTED_TRL_RANGE", "TRL_GATE", "check_trl_version", "UnsupportedTRLVersionError"]

#: The exact version the test suite ran against (the ``trl`` extra of pyproject.toml pins it).
TESTED_TRL_VERSION = "1.16.0"
#: Half-open range ``[low, high)`` of accepted versions: the tested minor series.
SUPPORTED_TRL_RANGE = ((1, 16, 0), (1, 17, 0))


class UnsupportedTRLVersionError(ImportError):
    """TRL is missing, or its version is outside ``SUPPORTED_TRL_RANGE``."""


TRL_GATE = VersionGate("trl", "TRL", TESTED_TRL_VERSION, SUPPORTED_TRL_RANGE, UnsupportedTRLVersionError,
                       why="It overrides GRPOTrainer hooks whose signatures change between TRL releases.")
#: ``check_trl_version(version=None) -> str``: the installed TRL version, or UnsupportedTRLVersionError.
check_trl_version = TRL_GATE.check
