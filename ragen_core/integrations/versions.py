"""Version parsing shared by the adapters' version checks (``trl_version``, ``verl_version``)."""

from __future__ import annotations

__all__ = ["release", "format_release"]


def release(version: str) -> tuple[int, ...]:
    """The first three numeric parts of a version, padded with zeros: ``"1.16.0"`` -> ``(1, 16, 0)``.

    Pre/post/dev suffixes are ignored (``"1.17.0.dev0"`` -> ``(1, 17, 0)``, ``"1.0.0rc1"`` -> ``(1, 0, 0)``);
    parsing stops at the first part that does not start with a digit (``"2.x"`` -> ``(2, 0, 0)``).
    """
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
