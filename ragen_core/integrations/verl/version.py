"""The verl versions the verl adapter supports, and the check its verl-importing modules run first.

The trainer mode overrides private hooks of verl's v1 trainer (``PPOTrainerSync._balance_batch``,
``_update_actor``, ``_update_critic``) and the agent loop uses verl's continuous-token helpers of
``AgentLoopBase``, both of which change between verl minor releases, so the adapter accepts only the series it
was tested with. ``RAGEN2_ALLOW_UNTESTED_VERL=1`` turns the refusal into a warning, for users who want to try
another verl at their own risk. Laid out as ``trl_version`` is for TRL.
"""

from __future__ import annotations

from ragen_core.integrations.versions import VersionGate

__all__ = ["TESTED_VERL_VERSION", "SUPPORTED_VERL_RANGE", "VERL_GATE", "check_verl_version",
           "UnsupportedVerlVersionError"]

#: The exact version the test suite ran against (the ``verl`` extra of pyproject.toml pins it).
TESTED_VERL_VERSION = "0.9.1"
#: Half-open range ``[low, high)`` of accepted versions: the 0.9 series from the tested release on.
SUPPORTED_VERL_RANGE = ((0, 9, 1), (0, 10, 0))


class UnsupportedVerlVersionError(ImportError):
    """verl is missing, or its version is outside ``SUPPORTED_VERL_RANGE``."""


VERL_GATE = VersionGate("verl", "verl", TESTED_VERL_VERSION, SUPPORTED_VERL_RANGE, UnsupportedVerlVersionError)
#: ``check_verl_version(version=None) -> str``: the installed verl version, or UnsupportedVerlVersionError.
check_verl_version = VERL_GATE.check
