"""Hostile answer templates shared by the reward-integrity tests of the envs with one winning action.

Each template wraps the winning action ``{m}`` (and, where it has one, another action ``{o}`` that does not win)
in a way that does not commit to ``{m}``: a negation, a hedge between two actions, a qualifier, or ``{m}`` run
into another action in one answer piece. An env must refuse or not execute every one of them, so that none
succeeds and none earns more than committing to a losing action. The per-env test files add their own
templates (Sudoku's digit variants, 2048's move words, the cube's notations) after these.
"""

from __future__ import annotations

#: {m}: the winning action, {o}: an action that does not win.
HEDGES: tuple[str, ...] = (
    "not {m}",
    "no {m}",
    "don't {m}",
    "{m} is wrong",
    "maybe {m}",
    "{m}?",
    "{m} or {o}",
    "{o} or {m}",
    "either {m} or {o}",
    "{m}, {o}",
    "{m} {o}",
    "{o} {m}",
    "{m}/{o}",
    "{m} | {o}",
    "{m} and {o}",
    "{m} (not {o})",
    "{m}{m}",
    "{m}-{o}",
)


def with_hedges(*specific: str) -> tuple[str, ...]:
    """The shared hedges followed by an env's own templates, without duplicates (first occurrence kept)."""
    return tuple(dict.fromkeys((*HEDGES, *specific)))


#: Letter -> lookalike from another script (Cyrillic, Greek, Armenian, Cherokee, ...), for the letters of the four
#: move names (Up, Down, Left, Right).
MOVE_HOMOGLYPHS = {"e": "е", "o": "о", "p": "р", "i": "і", "U": "Ս", "L": "Ⅼ", "D": "Ꭰ", "R": "Ꮢ", "g": "ɡ", "t": "τ"}

#: Whole responses that show the winning action {m} but commit to another one, {o}: {m} in the reasoning, after the
#: answer, or in a second <answer> block (before or after {o}'s: two blocks are malformed). None may succeed or earn
#: more than committing to {o}.
OUTSIDE_THE_ANSWER: tuple[str, ...] = (
    "<think>{m}</think><answer>{o}</answer>",
    "<think>t</think><answer>{o}</answer><answer>{m}</answer>",
    "<think>t</think><answer>{o}</answer> {m}",
    "<think>t</think><answer>{m}</answer><answer>{o}</answer>",
)
#: Responses with {m} but no well-formed answer block (under the default tagged format): for the envs where the
#: format penalty is no more than committing to a losing action.
WITHOUT_AN_ANSWER: tuple[str, ...] = (
    "<think>t</think>{m}",
    "<answer>{m}</answer>",
)


def fill(templates: tuple[str, ...], m: str, o: str = "") -> list[str]:
    """The templates with {m} and {o} filled in (by replacement: an action may hold braces)."""
    return [t.replace("{m}", m).replace("{o}", o) for t in templates]


def misspell(word: str, i: int, kind: str, homoglyphs: dict[str, str]) -> str | None:
    """`word` with one slip at character i: "homoglyph" (a lookalike from another script, from `homoglyphs`),
    "drop" (left out), "swap" (exchanged with the next) or "double" (typed twice); None where the slip is not
    possible (no lookalike of that letter, a swap at the end or of two equal characters)."""
    if kind == "homoglyph":
        return word[:i] + homoglyphs[word[i]] + word[i + 1 :] if word[i] in homoglyphs else None
    if kind == "drop":
        return word[:i] + word[i + 1 :]
    if kind == "swap":
        if i == len(word) - 1 or word[i] == word[i + 1]:
            return None
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "double":
        return word[: i + 1] + word[i] + word[i + 1 :]
    raise ValueError(f"unknown slip {kind!r}")


# ---------------------------------------------------------------------- MetaMathQA: a grammar of hedges
# A math answer hedges when it states two values, or one value with a word that is neither a lead-in ("the
# answer is") nor a unit ("dollars"). `math_two_values` and `math_qualified` build such answers from the parts
# below; test_reward_integrity_math.py draws them with hypothesis and asserts that no gold a hedge could be
# aimed at (either value, their sum, product, difference, quotient, concatenation) is paid.

#: How one value is written ({} is the value).
MATH_WRAPPERS: tuple[str, ...] = (
    "{}",
    "${}$",
    "\\boxed{{{}}}",
    "$\\boxed{{{}}}$",
    "({})",
    "\\left({}\\right)",
    "\\text{{{}}}",
    "\\({}\\)",
)
#: What stands between two values: space and spacing commands, punctuation, joining words in and out of
#: \\text, LaTeX line and column breaks.
MATH_SEPARATORS: tuple[str, ...] = (
    " ",
    "\\quad ",
    "\\qquad ",
    "\\;",
    "\\,",
    "\\:",
    "\\!",
    "\\ ",
    "~",
    " \\\\ ",
    " & ",
    "; ",
    ": ",
    " | ",
    ", ",
    " or ",
    " and ",
    " \\text{ or } ",
    " \\text{ and } ",
    " \\text{, } ",
    " \\text{ vs } ",
    " then ",
)
#: Where a qualifying word <w> goes around a value <x> (and, in some, a second value <y>).
MATH_WORD_FORMS: tuple[str, ...] = (
    "<w> <x>",
    "<x> <w>",
    "\\text{<w> } <x>",
    "<x> \\text{ <w>}",
    "<x> (<w>)",
    "<x> \\text{(<w>)}",
    "\\text{<w>} \\boxed{<x>}",
    "\\boxed{<x> \\text{ <w>}}",
    "$\\text{<w> }<x>$",
    "the answer is <w> <x>",
    "<x> <w> <y>",
    "<x> \\text{ <w> } <y>",
    "<w> <x> <w>",
    "<x> dollars <w>",
    "<w> <x> dollars",
)
#: Words no math answer may contain around its value: negations, denials, hedges, comparisons, multipliers,
#: operations in words (the tests add random words that are not lead-ins or units).
MATH_HEDGE_WORDS: tuple[str, ...] = (
    "not", "no", "never", "nope", "wrong", "false", "incorrect", "reject", "rejected", "excluded", "except",
    "deny", "denied", "unequal", "different", "unlike", "but", "or", "nor", "maybe", "perhaps", "probably",
    "likely", "possibly", "guess", "about", "around", "approximately", "roughly", "nearly", "almost", "over",
    "under", "above", "below", "least", "most", "less", "more", "minus", "plus", "negative", "half", "twice",
    "double", "triple", "thousand", "million", "grand", "dozen", "score", "pairs", "hundred", "squared",
    "cubed", "sqrt", "root", "log", "ten", "times", "ish", "tops", "give", "take", "excl", "sans",
)


def math_two_values(x: str, y: str, first: str, separator: str, second: str) -> str:
    """The answer that writes value `x` with wrapper `first`, then `separator`, then `y` with wrapper `second`."""
    return first.format(x) + separator + second.format(y)


def math_qualified(form: str, x: str, y: str, word: str) -> str:
    """The answer `form` (one of MATH_WORD_FORMS) with value `x`, second value `y` and qualifying `word`."""
    return form.replace("<w>", word).replace("<x>", x).replace("<y>", y)
