"""Text spaces whose charset covers everything an LLM may write.

Gymnasium's `spaces.Text` needs a finite charset and checks every character against it.
Model output can hold any character, so the charset here is the whole Basic Multilingual
Plane (U+0001-U+FFFF without the surrogate range): newlines, `#`, `<`, `√`, accents, CJK.
Characters outside the BMP (most emoji) are still *accepted* by every env's `step`; they are
only outside `action_space.contains`, which no env relies on.

Building such a space costs ~80 ms (Gymnasium indexes every character), so one prototype
per (max_length, min_length) is built once and shallow-copied: the copies share the
read-only charset tables and each gets its own random generator. Deep copies (Gymnasium's vector envs make one
per sub-env when they batch a space) share the tables too (`UnicodeText.__deepcopy__`).

Vector envs: Gymnasium 1.4's `AsyncVectorEnv(shared_memory=True)` (the default of
`gym.make_vec(..., vectorization_mode="async")`) reads Text observations out of shared memory
once, into a tuple of str, and never again, so every later step returns the first strings
(stale observations). Our spaces are `UnicodeText`, for which the shared-memory read returns a
live view (`SharedTextView`) that decodes the buffer on access, like the numpy views Gymnasium
uses for Box spaces; `deepcopy` of the view (what the vector env returns with `copy=True`)
is a plain tuple of the current strings.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from functools import cache, lru_cache

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory

#: Every character of the Basic Multilingual Plane except NUL and the UTF-16 surrogates.
UNICODE_CHARSET: str = "".join(chr(c) for c in range(1, 0x10000) if not 0xD800 <= c <= 0xDFFF)

#: Longest observation any text env of this package emits, in characters.
MAX_OBSERVATION_CHARS = 16_384
#: Longest response the envs read; longer responses are truncated before parsing.
MAX_RESPONSE_CHARS = 16_384

#: Characters outside UNICODE_CHARSET: NUL, UTF-16 surrogates and everything beyond the BMP.
_OUTSIDE_CHARSET = re.compile("[\x00\ud800-\udfff\U00010000-\U0010ffff]")
_TRUNCATED = "\n[... truncated]"


def fit_observation(text: str) -> str:
    """Make `text` a member of the observation space (`observation_space().contains` is then True).

    Every character outside `UNICODE_CHARSET` (NUL, a lone surrogate such as the `"\\ud800"` a JSON
    API leaves when it cuts an emoji in half, characters beyond the BMP) becomes U+FFFD; text longer
    than `MAX_OBSERVATION_CHARS` is cut with a "[... truncated]" line; an empty text becomes one space.
    `TextAgentEnv` passes every observation it emits through this function, so no env can emit a
    string that breaks the space check or Gymnasium's shared-memory write of async vector envs.
    """
    if _OUTSIDE_CHARSET.search(text):
        text = _OUTSIDE_CHARSET.sub("\ufffd", text)
    if len(text) > MAX_OBSERVATION_CHARS:
        text = text[: MAX_OBSERVATION_CHARS - len(_TRUNCATED)] + _TRUNCATED
    return text or " "


class UnicodeText(spaces.Text):
    """`spaces.Text` whose vector-env shared-memory read is live (see the module docstring)."""

    def __deepcopy__(self, memo: dict) -> UnicodeText:
        """A copy sharing the read-only charset tables, with a deep copy of the random generator (its state and
        stream are the original's, as `copy.deepcopy` gives). Gymnasium deep-copies a space per sub-env when it
        batches it (`gym.vector.utils.batch_space`): copying the 63,000-entry tables took 85 ms per copy, most of
        the 7.5-8.5 s that a 16-env `SyncVectorEnv` took to build."""
        other = copy.copy(self)
        memo[id(self)] = other
        other._np_random = copy.deepcopy(self._np_random, memo)
        return other

    def __repr__(self) -> str:
        # Text's own repr prints the whole charset: 63,000+ characters for the Basic Multilingual Plane.
        return (f"UnicodeText({self.min_length}, {self.max_length}, charset=<{len(self.character_set)} code points, "
                f"U+{ord(min(self.character_set)):04X}..U+{ord(max(self.character_set)):04X}>)")


class SharedTextView(Sequence):
    """The `n` strings stored in a Text shared-memory buffer, decoded on every access.

    Buffer layout (Gymnasium's): int32 `[n, max_length]` of charset indices, padded with
    `len(charset)`.
    """

    def __init__(self, space: spaces.Text, buffer, n: int):
        self._space = space
        self._buffer = buffer
        self._n = n
        self._codepoints = _codepoint_table(space)

    def _decode(self, row: np.ndarray) -> str:
        row = row[row < len(self._codepoints)]
        return self._codepoints[row].astype("<u4").tobytes().decode("utf-32-le")

    def _rows(self) -> np.ndarray:
        data = np.frombuffer(self._buffer.get_obj(), dtype=np.int32)
        return data.reshape((self._n, self._space.max_length))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        rows = self._rows()
        if isinstance(index, slice):
            return tuple(self._decode(r) for r in rows[index])
        return self._decode(rows[index])

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return f"SharedTextView({tuple(self)!r})"

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self):
        return (tuple, (tuple(self),))


@lru_cache(maxsize=8)
def _codepoint_table_cached(charset: str) -> np.ndarray:
    return np.fromiter((ord(c) for c in charset), dtype=np.uint32, count=len(charset))


def _codepoint_table(space: spaces.Text) -> np.ndarray:
    return _codepoint_table_cached("".join(space.character_list))


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_text(space: UnicodeText, shared_memory, n: int = 1) -> SharedTextView:
    return SharedTextView(space, shared_memory, n)


@cache
def _prototype(max_length: int, min_length: int) -> spaces.Text:
    return UnicodeText(max_length=max_length, min_length=min_length, charset=UNICODE_CHARSET)


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
