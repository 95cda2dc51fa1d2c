"""The verl versions the verl adapter supports, and the check its verl-importing modules run first.

The trainer mode overrides private hooks of verl's v1 trainer (``PPOTrainerSync._balance_batch``,
``_update_actor``, ``_update_critic``) and the agent loop uses verl's continuous-token helpers of
``AgentLoopBase``, both of which change between verl minor releases, so the adapter accepts only the series it
was tested with. ``RAGEN2_ALLOW_UNTESTED_VERL=1`` turns the refusal into a warning, for users who want to try
another verl at their own risk. Laid out as ``trl_version`` is for TRL.
"""

from __future__ import annotations

import os
import warnings
from importlib import metadata

from ragen_core.integrations.versions import format_release as _fmt
from ragen_core.integrations.versions import release as _release

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
    low, high = SUPPORTED_VERL_RANGE
    wanted = (f"verl>={_fmt(low)},<{_fmt(high)} (tested: {TESTED_VERL_VERSION}); "
              "install it with `pip install ragen2[verl]`")
    if version is None:
        try:
            version = metadata.version("verl")
        except metadata.PackageNotFoundError:
            raise UnsupportedVerlVersionError(f"the verl adapter needs {wanted}; verl is not installed") from None
    if low <= _release(version) < high:
        return version
    message = f"the verl adapter supports {wanted}; found verl {version}"
    if os.environ.get(_OVERRIDE_ENV) == "1":
        warnings.warn(message + f" ({_OVERRIDE_ENV}=1: trying anyway)", stacklevel=2)
        return version
    raise UnsupportedVerlVersionError(message + f" (set {_OVERRIDE_ENV}=1 to try it anyway)")
