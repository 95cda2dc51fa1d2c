"""Text spaces whose charset covers everything an LLM may write.

Gymnasium's `spaces.Text` needs a finite charset and checks every character against it.
Model output can hold any character, so the charset here is the whole Basic Multilingual
Plane (U+0001-U+FFFF without the surrogate range): newlines, `#`, `<`, `√`, accents, CJK.
Characters outside the BMP (most emoji) are still *accepted* by every env's `step`; they are
only outside `action_space.contains`, which no env relies on.

Building such a space costs ~80 ms (Gymnasium indexes every character), so one prototype
per (max_length, min_length) is built once and shallow-copied: the copies share the
read-only charset tables and each gets its own random generator.
"""

from __future__ import annotations

import copy
from functools import lru_cache

from gymnasium import spaces

#: Every character of the Basic Multilingual Plane except NUL and the UTF-16 surrogates.
UNICODE_CHARSET: str = "".join(chr(c) for c in range(1, 0x10000) if not 0xD800 <= c <= 0xDFFF)

#: Longest observation any text env of this package emits, in characters.
MAX_OBSERVATION_CHARS = 16_384
#: Longest response the envs read; longer responses are truncated before parsing.
MAX_RESPONSE_CHARS = 16_384


@lru_cache(maxsize=None)
def _prototype(max_length: int, min_length: int) -> spaces.Text:
    return spaces.Text(max_length=max_length, min_length=min_length, charset=UNICODE_CHARSET)


def unicode_text(max_length: int, min_length: int = 0) -> spaces.Text:
    """A `spaces.Text` over `UNICODE_CHARSET`, cheap to create (shares the prototype's tables)."""
    space = copy.copy(_prototype(max_length, min_length))
    space._np_random = None  # a fresh generator per copy; seeded by `space.seed()` as usual
    return space


def observation_space() -> spaces.Text:
    """The observation space of every text env: 1 to MAX_OBSERVATION_CHARS characters."""
    return unicode_text(MAX_OBSERVATION_CHARS, min_length=1)


def action_space() -> spaces.Text:
    """The action space of every text env: the model's raw response (empty allowed)."""
    return unicode_text(MAX_RESPONSE_CHARS, min_length=0)
