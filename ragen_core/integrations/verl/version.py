"""The verl versions the verl adapter supports, and the check its verl-importing modules run first.

The trainer mode overrides private hooks of verl's v1 trainer (``PPOTrainerSync._balance_batch``,
``_update_actor``, ``_update_critic``) and the agent loop uses verl's continuous-token helpers of
``AgentLoopBase``, both of which change between verl minor releases, so the adapter accepts only the series it
was tested with. ``RAGEN2_ALLOW_UNTESTED_VERL=1`` turns the refusal into a warning, for users who want to try
another verl at their own risk. Laid out as ``trl_version`` is for TRL.
"""

from __future__ import annotations

from ragen_core.integrations.versions import check_supported

__all__ = ["TESTED_VERL_VERSION", "SUPPORTED_VERL_RANGE", "check_verl_version", "UnsupportedVerlVersionError"]

#: The exact version the test suite ran against (the ``verl`` extra of pyproject.toml pins it).
TESTED_VERL_VERSION = "0.9.1"
#: Half-open range ``[low, high)`` of accepted versions: the 0.9 series from the tested release on.
SUPPORTED_VERL_RANGE = ((0, 9, 1), (0, 10, 0))
_OVERRIDE_ENV = "RAGEN2_ALLOW_UNTESTED_VERL"


class UnsupportedVerlVersionError(ImportError):
    """verl is missing, or its version is outside ``SUPPORTED_VERL_RANGE``."""


def check_verl_version(version: str | None = None) -> str:
    """Return the installed verl version, or raise :class:`UnsupportedVerlVersionError` with the supported range.

    Args:
        version: the version string to check (default: the installed ``verl`` distribution's).

    Raises:
        UnsupportedVerlVersionError: verl is not installed, or ``version`` is outside ``SUPPORTED_VERL_RANGE``
            (unless ``RAGEN2_ALLOW_UNTESTED_VERL=1``, which warns instead).
    """
    return check_supported("verl", version, label="verl", supported=SUPPORTED_VERL_RANGE, tested=TESTED_VERL_VERSION,
                           extra="verl", override_env=_OVERRIDE_ENV, error=UnsupportedVerlVersionError)
