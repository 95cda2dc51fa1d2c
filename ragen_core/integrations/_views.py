"""Read-only views: an adapter object that wraps a ``ragen_core.episode.ChatEpisode`` shows parts of its state."""

from __future__ import annotations

from operator import attrgetter

__all__ = ["read_only"]


def read_only(path: str, doc: str | None = None) -> property:
    """A read-only property whose value is ``self.<path>`` (a dotted path: ``read_only("chat.done")``).

    A property, not a method: TRL offers an environment's public *functions* as tools, and a property is not one.
    """
    return property(attrgetter(path), doc=doc)
