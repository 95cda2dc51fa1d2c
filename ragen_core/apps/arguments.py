"""Command-line values shared by the `ragen` sub-commands: one reading, and one wording of its errors.

:func:`comma_list` reads every comma-separated list option (``ragen eval --envs``, ``ragen reproduce --envs``).
Nothing here imports torch.
"""

from __future__ import annotations

__all__ = ["comma_list"]


def comma_list(flag: str, text: str, what: str) -> list[str]:
    """The entries of a comma-separated option value, each stripped of spaces, in order (repeats kept).

    `flag` names the option and `what` one entry (``"env"``, ``"env id"``) in the messages. Raises ValueError, one
    line, when no entry is given (``''``, ``','``: ``--envs: no env given``) or when one entry is empty (a stray
    comma, ``'a,'``, ``'a,,b'``: the message names its position), rather than reading it as an entry named ``''``.
    """
    entries = [part.strip() for part in text.split(",")]
    if not any(entries):
        raise ValueError(f"{flag}: no {what} given")
    empty = [i for i, entry in enumerate(entries, 1) if not entry]
    if empty:
        raise ValueError(f"{flag} {text!r}: entry {empty[0]} of {len(entries)} is empty (a stray comma?); give "
                         f"{what}s separated by single commas, e.g. {flag} A,B")
    return entries
