"""The adapters' version check (``trl.version``, ``verl.version``): parse a version, accept a tested range."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from importlib import metadata

__all__ = ["release", "format_release", "check_supported", "VersionGate"]


def release(version: str) -> tuple[int, ...]:
    """The first three numeric parts of a version, padded with zeros: ``"1.16.0"`` -> ``(1, 16, 0)``.

    Pre/post/dev suffixes are ignored (``"1.17.0.dev0"`` -> ``(1, 17, 0)``, ``"1.0.0rc1"`` -> ``(1, 0, 0)``);
    parsing stops at the first part that does not start with a digit (``"2.x"`` -> ``(2, 0, 0)``). A `version`
    that is not a string raises TypeError.
    """
    if not isinstance(version, str):
        raise TypeError(f"version must be a string such as '1.16.0'; got {type(version).__name__} {version!r}")
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def format_release(v: tuple[int, ...]) -> str:
    """``(1, 16, 0)`` -> ``"1.16.0"``."""
    return ".".join(str(x) for x in v)


def check_supported(
    dist: str,
    version: str | None,
    *,
    label: str,
    supported: tuple[tuple[int, ...], tuple[int, ...]],
    tested: str,
    extra: str,
    override_env: str,
    error: type[ImportError],
    why: str = "",
) -> str:
    """Return `dist`'s version if it lies in ``supported = [low, high)``; otherwise raise `error` naming the range.

    Args:
        dist: the distribution (``"trl"``); `version` None reads its installed version.
        label: how the messages name it (``"TRL"``).
        tested: the exact version the test suite ran against; `extra`: the ragen2 extra that installs it.
        override_env: an environment variable; ``=1`` turns the refusal into a ``RuntimeWarning``.
        why: a sentence on why other versions are refused (appended to the message).

    Raises:
        error: `dist` is not installed, or its version is outside `supported` (without the override).
        TypeError: `version` is neither a string nor None (``1.16`` is not the version ``"1.16"``).
    """
    if version is not None and not isinstance(version, str):
        raise TypeError(f"version must be a string such as '1.16.0' or None (the installed {dist}); got "
                        f"{type(version).__name__} {version!r}")
    low, high = supported
    wanted = (f"{dist}>={format_release(low)},<{format_release(high)} (tested: {tested}); "
              f"install it with `pip install ragen2[{extra}]`")
    if version is None:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            raise error(f"the {label} adapter needs {wanted}; {label} is not installed") from None
    if low <= release(version) < high:
        return version
    message = f"the {label} adapter supports {wanted}; found {dist}=={version}" + (f". {why}" if why else "")
    if os.environ.get(override_env) == "1":
        warnings.warn(f"{message} ({override_env}=1: trying anyway)", RuntimeWarning, stacklevel=3)
        return version
    raise error(f"{message} (set {override_env}=1 to try it anyway)")


@dataclass(frozen=True)
class VersionGate:
    """What an adapter accepts of the library it adapts, and the check its modules run first.

    Attributes:
        dist: the distribution (``"trl"``), also the name of the ragen2 extra that installs it.
        label: how the messages name it (``"TRL"``).
        tested: the exact version the test suite ran against (the extra pins it).
        supported: half-open range ``(low, high)`` of accepted releases.
        error: the ImportError subclass raised for a missing or unsupported version.
        why: a sentence on why other versions are refused (appended to the message).
    """

    dist: str
    label: str
    tested: str
    supported: tuple[tuple[int, ...], tuple[int, ...]]
    error: type[ImportError]
    why: str = ""

    @property
    def override_env(self) -> str:
        """``RAGEN2_ALLOW_UNTESTED_<DIST>=1`` turns the refusal into a ``RuntimeWarning``."""
        return f"RAGEN2_ALLOW_UNTESTED_{self.dist.upper()}"

    def check(self, version: str | None = None) -> str:
        """Return the installed version (or `version`) if supported, else raise ``error`` naming the range.

        Raises:
            error: the library is not installed, or its version is outside ``supported`` (unless
                ``override_env`` is ``1``, which warns instead).
        """
        return check_supported(self.dist, version, label=self.label, supported=self.supported, tested=self.tested,
                               extra=self.dist, override_env=self.override_env, error=self.error, why=self.why)
