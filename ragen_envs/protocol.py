"""Parse an LLM response into env actions: the RAGEN ("StarPO") multi-turn protocol.

One parser serves every env of the package. A response looks like

    <think> the box is left of the target </think> <answer> Up || Left </answer>

Rules (docs/protocol.md):

- The response is truncated to `max_chars` *before* any parsing (a megabyte string costs
  no more than a short one), C0/C1 control characters other than tab/newline become spaces and
  lone UTF-16 surrogates (`"\\ud800"`, left by a JSON API that cut an emoji in half) become U+FFFD,
  so nothing an env echoes from a response (a search query, a clicked element) can carry them.
- `action_format="tagged"` (default): exactly one `<think>...</think>` followed by exactly one
  `<answer>...</answer>`; text around them is tolerated, as in RAGEN's `re.search`.
  `"answer"`: the `<think>` block is optional (but, if present, must be balanced and come first).
  `"plain"`: bare action names are accepted; if answer tags are present they are used.
  Tags match case-insensitively. Several `<answer>` blocks, nested or unbalanced tags are
  malformed: nothing is executed, because guessing which block was meant would reward spam.
- The answer is split on `||` (empty pieces are ignored), each piece is matched by the env's
  matcher (case-insensitive for vocabularies, with `fold_case`), at most `max_actions` pieces are kept and the rest
  are dropped. Unknown pieces are dropped too.
- Format penalty (`FORMAT_PENALTY`, -0.1): a malformed response, an empty answer, or any dropped
  piece. An env leaves its state unchanged when no valid action remains.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ragen_envs.spaces import MAX_RESPONSE_CHARS

FORMAT_PENALTY = -0.1
ACTION_SEPARATOR = "||"
ACTION_FORMATS = ("tagged", "answer", "plain")
ActionFormat = Literal["tagged", "answer", "plain"]

#: The response format shown to the model (RAGEN's wording).
RESPONSE_FORMAT = "<think> [your thoughts] </think> <answer> [your answer] </answer>"

#: A matcher maps one answer piece to a canonical action, or None when it is not an action.
ActionMatcher = Callable[[str], "str | None"]

_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATES = re.compile("[\ud800-\udfff]")
_UNSAFE_CHARS = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_WHITESPACE = re.compile(r"\s+")
# re.ASCII: under Unicode re.IGNORECASE, "ſ" (U+017F) matches "s", "K" (U+212A) "k", "ı"/"İ" "i".
_TAG = {
    name: (re.compile(f"<{name}>", re.IGNORECASE | re.ASCII), re.compile(f"</{name}>", re.IGNORECASE | re.ASCII))
    for name in ("think", "answer")
}
# Non-ASCII characters whose case fold contains ASCII ("ſ" -> "s", "K" -> "k", "ﬁ" -> "fi", "ß" -> "ss",
# "İ" -> "i̇"; the complete list for Python's Unicode tables, checked by the tests): `fold_case` leaves
# them as they are, so they never match an ASCII spelling.
_FOLDS_TO_ASCII = frozenset(
    "\u00df\u0130\u0149\u017f\u01f0\u1e96\u1e97\u1e98\u1e99\u1e9a\u1e9e\u212a"
    "\ufb00\ufb01\ufb02\ufb03\ufb04\ufb05\ufb06"
)


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """What the parser made of one response.

    Attributes:
        actions: canonical actions to execute, in order (at most `max_actions`).
        dropped: answer pieces that were unknown or beyond the per-turn budget.
        think: the reasoning text, when a well-formed `<think>` block was found.
        answer: the raw answer text, when a well-formed answer was found.
        format_error: why the response is malformed, or None when it is well-formed.
        truncated: whether the response was cut to `max_chars` before parsing.
    """

    actions: tuple[str, ...]
    dropped: tuple[str, ...]
    think: str | None
    answer: str | None
    format_error: str | None
    truncated: bool

    @property
    def is_valid(self) -> bool:
        """True when at least one action can be executed."""
        return bool(self.actions)

    @property
    def format_penalty(self) -> float:
        """FORMAT_PENALTY for a malformed response, an empty answer or any dropped piece, else 0."""
        if self.format_error is not None or self.dropped or not self.actions:
            return FORMAT_PENALTY
        return 0.0


def fold_case(text: str) -> str:
    """`str.casefold`, except that no non-ASCII character may turn into ASCII letters.

    Plain casefold maps "ſearch" to "search" and "clic\u212a" to "click", so a matcher built on it
    would dispatch a verb the model never wrote. Here those characters are kept unfolded (they then
    match nothing spelled in ASCII); every other character folds as usual ("É" -> "é").
    """
    if text.isascii():
        return text.lower()
    if _FOLDS_TO_ASCII.isdisjoint(text):
        return text.casefold()
    return "".join(c if c in _FOLDS_TO_ASCII else c.casefold() for c in text)


def normalize_action_text(text: str) -> str:
    """Case-fold (`fold_case`) and collapse whitespace: the key under which vocabularies are matched."""
    return fold_case(_WHITESPACE.sub(" ", text).strip())


class VocabularyMatcher:
    """A matcher for a fixed vocabulary (`vocabulary_matcher`): a class, not a closure, so that an env holding one
    pickles with the standard library (`pickle`, `copy.deepcopy`, multiprocessing), which cannot pickle a
    function defined inside another."""

    def __init__(self, table: dict[str, str]):
        self.table = table

    def __call__(self, piece: str) -> str | None:
        found = self.table.get(fold_case(piece))  # fast path: already stripped, single spaces
        return found if found is not None else self.table.get(normalize_action_text(piece))


def vocabulary_matcher(names: Iterable[str], aliases: Mapping[str, str] | None = None) -> ActionMatcher:
    """A matcher for a fixed vocabulary: `"  up "` -> `"Up"`; aliases map extra spellings.

    Args:
        names: canonical action names (returned as given).
        aliases: extra spelling -> canonical name (e.g. `{"north": "Up"}`).
    """
    table = {normalize_action_text(n): n for n in names}
    for alias, canonical in (aliases or {}).items():
        if canonical not in table.values():
            raise ValueError(f"alias {alias!r} points to {canonical!r}, which is not an action name")
        table[normalize_action_text(alias)] = canonical
    return VocabularyMatcher(table)


def _coerce_text(response: object) -> str | None:
    if isinstance(response, str):
        return str(response)  # also turns numpy.str_ into str
    if isinstance(response, (bytes, bytearray)):
        return bytes(response).decode("utf-8", errors="replace")
    return None


def _single_block(text: str, name: str) -> tuple[tuple[int, int, int, int] | None, str | None]:
    """Locate exactly one `<name>...</name>` block.

    Returns ((open_start, open_end, close_start, close_end), None) when exactly one balanced block
    exists, (None, None) when the tag does not occur at all, and (None, reason) when it is malformed.
    """
    open_re, close_re = _TAG[name]
    opens = list(open_re.finditer(text))
    closes = list(close_re.finditer(text))
    if not opens and not closes:
        return None, None
    if len(opens) != 1 or len(closes) != 1:
        return None, f"expected one <{name}> block, found {len(opens)} opening and {len(closes)} closing tags"
    o, c = opens[0], closes[0]
    if c.start() < o.end():
        return None, f"</{name}> comes before <{name}>"
    return (o.start(), o.end(), c.start(), c.end()), None


def _locate_canonical(text: str) -> tuple[str, str] | None:
    """Fast path for the common well-formed response: exactly the four tags, in order, lower case.

    With exactly four "<" characters and `<think>`, `</think>`, `<answer>`, `</answer>` found in
    this order, no other tag can exist, so the general rules below give the same result.
    """
    if text.count("<") != 4:
        return None
    a = text.find("<think>")
    b = text.find("</think>", a + 7) if a >= 0 else -1
    c = text.find("<answer>", b + 8) if b >= 0 else -1
    d = text.find("</answer>", c + 8) if c >= 0 else -1
    if d < 0:
        return None
    return text[a + 7 : b], text[c + 8 : d]


def _locate_answer(text: str, action_format: str) -> tuple[str | None, str | None, str | None]:
    """Returns (think, answer, format_error) for the given format."""
    canonical = _locate_canonical(text)
    if canonical is not None:
        return canonical[0], canonical[1], None
    return _locate_answer_general(text, action_format)


def _locate_answer_general(text: str, action_format: str) -> tuple[str | None, str | None, str | None]:
    """The general rules (module docstring); `_locate_canonical` is a shortcut for one case."""
    answer_span, answer_err = _single_block(text, "answer")
    think_span, think_err = _single_block(text, "think")
    if answer_err:
        return None, None, answer_err
    if answer_span is None:
        if action_format == "plain" and think_span is None and think_err is None:
            return None, text, None
        if action_format == "plain" and think_span is not None:
            # Plain mode tolerates a think block followed by bare actions.
            return text[think_span[1] : think_span[2]], text[think_span[3] :], None
        return None, None, "missing <answer>...</answer>"
    answer = text[answer_span[1] : answer_span[2]]
    if _TAG["think"][0].search(answer) or _TAG["think"][1].search(answer):
        return None, None, "<think> tag inside <answer>"
    if think_err:
        return None, None, think_err
    if think_span is None:
        if action_format == "tagged":
            return None, None, "missing <think>...</think> before <answer>"
        return None, answer, None
    if think_span[3] > answer_span[0]:
        return None, None, "<think> block must close before <answer>"
    return text[think_span[1] : think_span[2]], answer, None


def parse_response(
    response: object,
    matcher: ActionMatcher,
    *,
    action_format: ActionFormat = "tagged",
    max_actions: int = 2,
    max_chars: int = MAX_RESPONSE_CHARS,
    split_actions: bool = True,
) -> ParsedResponse:
    """Parse a model response into at most `max_actions` canonical actions.

    Args:
        response: the model's raw text (bytes are decoded as UTF-8; other types are malformed).
        matcher: maps an answer piece to a canonical action or None (see `vocabulary_matcher`).
        action_format: "tagged" | "answer" | "plain" (module docstring).
        max_actions: per-turn action budget; pieces beyond it are dropped (and penalised).
        max_chars: the response is cut to this many characters before parsing.
        split_actions: split the answer on "||" (False for free-form answers such as expressions).

    Never raises on model text; raises ValueError only for bad arguments.
    """
    if action_format not in ACTION_FORMATS:
        raise ValueError(f"action_format must be one of {ACTION_FORMATS}, got {action_format!r}")
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    text = _coerce_text(response)
    if text is None:
        return ParsedResponse((), (), None, None, f"response must be a string, got {type(response).__name__}", False)
    truncated = len(text) > max_chars
    if truncated:
        text = text[:max_chars]
    if _UNSAFE_CHARS.search(text):
        text = _SURROGATES.sub("\ufffd", _CONTROL_CHARS.sub(" ", text))

    think, answer, error = _locate_answer(text, action_format)
    if error is not None or answer is None:
        return ParsedResponse((), (), think, None, error, truncated)

    pieces = answer.split(ACTION_SEPARATOR) if split_actions else [answer]
    pieces = [p.strip() for p in pieces if p.strip()]
    if not pieces:
        return ParsedResponse((), (), think, answer, "empty answer", truncated)

    actions: list[str] = []
    dropped: list[str] = []
    for piece in pieces:
        matched = matcher(piece) if len(actions) < max_actions else None
        if matched is None:
            dropped.append(piece)
        else:
            actions.append(matched)
    return ParsedResponse(tuple(actions), tuple(dropped), think, answer, None, truncated)
