"""Math answer checking by mathematical equivalence (MetaMathQA-style gold answers).

`is_equivalent(candidate, gold)` decides whether a model's answer equals the gold answer. The heavy
lifting is done by Hugging Face's `math-verify` (LaTeX and plain answers parsed to sympy, compared
numerically and symbolically); our own rules cover only what it does not:

==========================  ==================================================================
path                        what it catches
==========================  ==================================================================
1. whole-answer LaTeX       the entire answer parsed as one LaTeX formula by math-verify:
                            `\\frac{1}{2}`, `0.5`, `1/2`, `2+3x`, `(x+1)^2`, `50\\%`, `x = 12`
2. math-verify extraction   free text around one value: `12 dollars`, `The answer is 12`,
                            `\\boxed{12}`; *guarded*: every number written in the answer must be
                            inside the extracted expression, so a hedge such as `13 or 12` (from
                            which math-verify would pick 12) is rejected
3. plain sympy (ours)       Python-style input math-verify's extractor drops: `(x+1)**2`,
                            `sqrt(12)`, `3*x + 2`; parsed with an AST whitelist (never `eval`):
                            numbers, symbols, + - * / ** (small integer exponents), unary signs,
                            `sqrt`, tuples; exact rational values; equality by `simplify(a - b) == 0`
4. percent (ours)           `50%` / `50 percent` equals 1/2 (asked as a fraction) and 50 (asked as
                            a percentage)
5. text (ours)              non-mathematical gold answers (`east`, `\\text{(B)}`): equal after
                            removing `\\text{}`, spaces, case and a trailing period
==========================  ==================================================================

Before any path runs, an answer that does more than state one value is refused (`answer_refusal`),
unless the gold answer itself has the same feature:

- a relation other than `=` (`\\ne`, `\\neq`, `\\approx`, `<`, `\\le`, `\\pm`, `\\in`, `\\to`, ...):
  `x \\ne 5` and `5 \\approx 6` deny or hedge the value;
- a word that negates, hedges, approximates or changes the value (`not`, `wrong`, `or`, `maybe`,
  `about`, `minus`, `thousand`, `squared`, ..., `REFUSED_WORDS`), or a verb after the value
  (`5 is wrong`, `5 is bogus`: a statement about the value, not a unit);
- a subscript `_` (`1_2` is 1 in LaTeX but 12 as a Python digit separator; `5_0` is 5 or 50);
- an equation is accepted only as `variable = value` (either order) or when every side is itself a
  correct answer: `x = 12` is right for 12 and `2+3 = 5` for 5, but `6 = 5` is wrong for 5 (LaTeX
  parsing alone would take its right side); a gold answer that is an equation is compared whole.

So every accepted answer denotes exactly one value, and is accepted for a gold answer only when that
value equals the gold's: `\\sqrt 9` is right for 3 and wrong for 9, `4!` right for 24 and wrong for 4,
`\\log 10` (math-verify reads `\\log` as base 10) right for 1 and wrong for 10. The free-text path
(2.) therefore also requires that what lies outside the extracted value is only words (no LaTeX
command but `\\text`-like and `\\boxed`, no operator, no single letter that could be a variable:
`5x` is not 5). A gold answer with a subscript (`1011_2`, a number in base 2) is matched as text
(spaces, braces and `$` ignored), since its value depends on reading the subscript as a base.

Deliberate leniency (documented in docs/protocol.md): `50%` and `50 percent` are right for 1/2 and
for 50 (rule 4); other words around the value (units, nouns: `12 dollars`, `12 cookies`) are ignored;
`x = 12` is right for 12.

Numeric tolerance is math-verify's: values are compared after rounding to 6 decimal places, so
`0.333333` equals 1/3 but `0.333` and `0.49` (for 1/2) do not.

Cost guards (the answer is model text, so it may be written to stall the checker), all checked on
the text before any parser sees it (`answer_guard`); an answer that fails one is wrong:

- at most `MAX_ANSWER_CHARS` characters;
- every power (`^` or `**`) has a small exponent (integers of magnitude <= `MAX_EXPONENT`, a letter,
  or a short linear term such as `{n+1}`) that is not itself raised to a power (`a^b^c`);
- magnitude: a power of a bracketed base multiplies the exponents inside it (`((9^{64})^{64})^{64}`
  is 9^262144), and the estimated number of digits of any power (digits of the largest literal in the
  base times the product of exponents) is at most `MAX_RESULT_DIGITS`;
- factorials only of literals up to `MAX_FACTORIAL` (or of letters);
- at most `MAX_BARS` `|` characters (absolute-value bars make the LaTeX grammar ambiguous: `1||1||...`
  took math-verify 17 s in a worker thread) and brackets nested at most `MAX_NESTING` deep.

Without them `9^{9^{9^{9}}}` or `(((9**64)**64)**64)**64` takes math-verify seconds to minutes. The
guards are heuristics, so the check is also bounded by a hard wall-clock limit that works in any
thread: `ragen_envs.math.checker` runs it in a worker process and kills the worker when the limit
passes (math-verify's own `signal.alarm` timeout only works in the main thread).
"""

from __future__ import annotations

import ast
import logging
import re
import threading
from functools import lru_cache
from typing import Any

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from ragen_envs.protocol import fold_case

#: Longest answer that is checked (longer answers are wrong).
MAX_ANSWER_CHARS = 512
#: Bound on integer exponents in the plain-sympy path (`x**10**10` must not be expanded).
MAX_EXPONENT = 64
#: Bound on the estimated digits of any power in an answer (`answer_guard`).
MAX_RESULT_DIGITS = 10_000
#: Largest literal whose factorial an answer may ask for.
MAX_FACTORIAL = 1000
#: Most `|` characters in an answer.
MAX_BARS = 8
#: Deepest nesting of (), [] and {} in an answer.
MAX_NESTING = 24
ANSWER_MARKER = "The answer is:"

_LATEX_ONLY = (LatexExtractionConfig(),)
_DEFAULT_CONFIGS = (LatexExtractionConfig(), ExprExtractionConfig())
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PERCENT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:\\?%|percent)\s*$", re.IGNORECASE | re.ASCII)
_IMPLICIT_MUL = re.compile(r"(?<=[\d)])\s*(?=[A-Za-z(])")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_POWER_OP = re.compile(r"\^|\*\*")
# An exponent: a bare integer or letter, or in braces / parentheses a short linear term such as
# `-2`, `n`, `2n`, `n+1` (no products, no nested powers).
_TERM = r"-?\s*(?:\d+[A-Za-z]?|[A-Za-z])"
_EXPONENT = re.compile(
    rf"\s*(?:\{{\s*({_TERM}(?:\s*[+-]\s*(?:\d+|[A-Za-z]))?)\s*\}}"
    rf"|\(\s*({_TERM}(?:\s*[+-]\s*(?:\d+|[A-Za-z]))?)\s*\)"
    r"|(-?\s*\d+|[A-Za-z]))"
)

# math-verify logs every failed parse at WARNING when it times out; keep the env quiet.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def extract_gold(response: str) -> str:
    """The gold answer of a MetaMathQA `response`: the text after the last "The answer is:".

    Raises:
        ValueError: the marker is missing or nothing follows it.
    """
    if not isinstance(response, str) or ANSWER_MARKER not in response:
        raise ValueError(f"the response has no {ANSWER_MARKER!r} marker")
    gold = response.rsplit(ANSWER_MARKER, 1)[1].strip()
    if not gold:
        raise ValueError(f"nothing follows {ANSWER_MARKER!r} in the response")
    return gold


def _timeout() -> int | None:
    # signal.alarm only works in the main thread (see the module docstring).
    return 5 if threading.current_thread() is threading.main_thread() else None


def exponents_are_small(text: str) -> bool:
    """Whether every power in `text` has a small exponent (`_EXPONENT`, integers <= MAX_EXPONENT), no tower."""
    for op in _POWER_OP.finditer(text):
        exp = _EXPONENT.match(text, op.end())
        if exp is None:
            return False
        exponent = next(g for g in exp.groups() if g is not None)
        if any(int(n) > MAX_EXPONENT for n in re.findall(r"\d+", exponent)):
            return False
        if _POWER_OP.match(text[exp.end() :].lstrip()):
            return False  # a tower: a ** b ** c
    return True


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_DIGITS = re.compile(r"\d+")


def _bracket_pairs(text: str) -> dict[int, int] | None:
    """close index -> open index of every bracket pair, or None when brackets nest too deep."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, c in enumerate(text):
        if c in _OPENERS:
            stack.append(i)
            if len(stack) > MAX_NESTING:
                return None
        elif c in ")]}" and stack and _OPENERS[text[stack[-1]]] == c:
            pairs[i] = stack.pop()
    return pairs


def _base_span(text: str, end: int, pairs: dict[int, int]) -> tuple[int, int]:
    """The span [start, end) of the operand that ends just before `end` (a bracket group or a token)."""
    j = end
    while j > 0 and text[j - 1].isspace():
        j -= 1
    if j > 0 and text[j - 1] in ")]}" and (j - 1) in pairs:
        return pairs[j - 1], j
    start = j
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "._\\"):
        start -= 1
    return start, j


def answer_guard(text: str) -> str | None:
    """Why the answer is refused before parsing (the module docstring's cost guards), or None."""
    if len(text) > MAX_ANSWER_CHARS:
        return f"longer than {MAX_ANSWER_CHARS} characters"
    if text.count("|") > MAX_BARS:
        return f"more than {MAX_BARS} '|' characters"
    if not exponents_are_small(text):
        return "an exponent that is not small"
    pairs = _bracket_pairs(text)
    if pairs is None:
        return f"brackets nested deeper than {MAX_NESTING}"
    # The magnitude of every power: exponent x the largest power inside a bracketed base.
    effective: list[tuple[int, int, int]] = []  # (op position, product of exponents, digits of the base)
    for op in _POWER_OP.finditer(text):
        exp = _EXPONENT.match(text, op.end())
        numbers = [int(n) for n in _DIGITS.findall(next(g for g in exp.groups() if g is not None))]
        exponent = max([1, *numbers])
        start, end = _base_span(text, op.start(), pairs)
        inner = [e for pos, e, _ in effective if start <= pos < end]
        product = exponent * max([1, *inner])
        digits = max([1, *(len(n) for n in _DIGITS.findall(text[start:end]))])
        if product * digits > MAX_RESULT_DIGITS:
            return f"a power with about {product * digits} digits or more"
        effective.append((op.start(), product, digits))
    for bang in re.finditer(r"!(?!=)", text):
        start, end = _base_span(text, bang.start(), pairs)
        if any(int(n) > MAX_FACTORIAL for n in _DIGITS.findall(text[start:end])) or _POWER_OP.search(text[start:end]):
            return f"a factorial of more than {MAX_FACTORIAL}"
    return None


# ---------------------------------------------------------------------- refusals (one value, stated)
#: LaTeX commands that relate, negate or hedge (`\\ne`, `\\approx`, `\\pm`, ...): refused unless the gold has them.
RELATION_COMMANDS = frozenset(
    "ne neq not ncong nleq ngeq nless ngtr approx sim simeq cong equiv doteq le leq leqslant ge geq geqslant lt gt "
    "ll gg lessgtr gtrless prec succ pm mp neg lnot in notin ni cup cap lor land vee wedge to rightarrow "
    "Rightarrow longrightarrow Longrightarrow implies impliedby iff leftrightarrow Leftrightarrow mid nmid "
    "setminus subset subseteq supset supseteq propto".split()
)
#: Relation symbols written directly (Unicode or ASCII); `!=` is matched separately.
RELATION_SYMBOLS = frozenset("<>≠≈≃≅≡≤≥≦≧≪≫±∓¬~∼∈∉∪∩∨∧→⇒⇔↔∣∤")
#: Words that negate, hedge, approximate, compare or change the value written next to them.
REFUSED_WORDS = frozenset(
    # negation and denial
    "not no non none nope never nor neither isnt arent wasnt werent doesnt dont cannot cant wont shouldnt "
    "wrong false incorrect untrue invalid impossible bogus except excluding without but unless instead rather "
    # hedges and alternatives
    "or either otherwise maybe perhaps possibly probably likely unlikely guess unsure uncertain unknown "
    "alternatively else "
    # approximation and comparison
    "approx approximately about around roughly nearly almost circa close estimate estimated "
    "than least most between under over above below less more greater fewer within upto "
    # words that change the number
    "minus negative negated opposite plus half halves quarter quarters thirds fourths fifths sixths sevenths "
    "eighths ninths tenths hundredths thousandths squared cubed root roots factorial inverse reciprocal "
    "double twice triple thrice hundred hundreds thousand thousands million millions billion billions "
    "trillion trillions dozen dozens".split()
)
#: Verbs that make text after the value a statement about it (`5 is wrong`) rather than a unit.
_COPULAS = frozenset("is are was were be been being seems seem looks equals".split())
_COMMAND = re.compile(r"\\([A-Za-z]+)")
_WORDS = re.compile(r"[A-Za-z]+")
#: `variable` side of an equation: one letter or a Greek letter command.
_VARIABLE = re.compile(
    r"\s*(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|epsilon|theta|lambda|mu|nu|rho|sigma|tau|phi|omega))\s*"
)
#: LaTeX commands allowed outside the value extracted from free text (formatting, not mathematics).
_FREE_TEXT_COMMANDS = frozenset({"text", "textbf", "textit", "mathrm", "mbox", "boxed"})


def _words(text: str) -> list[str]:
    """The lowercase words of `text` outside LaTeX command names (`\\text{not } 5` -> ["not"])."""
    return [w.lower() for w in _WORDS.findall(_COMMAND.sub(" ", text.replace("'", "").replace("’", "")))]


def answer_refusal(candidate: str, gold: str) -> str | None:
    """Why `candidate` does more than state one value (module docstring, "refused"), or None.

    A feature the gold answer itself has (a relation, a word, a subscript) is not held against the candidate.
    """
    gold_commands = set(_COMMAND.findall(gold))
    relation = [c for c in _COMMAND.findall(candidate) if c in RELATION_COMMANDS and c not in gold_commands]
    if relation:
        return f"a relation (\\{relation[0]})"
    symbols = [c for c in candidate if c in RELATION_SYMBOLS and c not in gold]
    if symbols:
        return f"a relation ({symbols[0]})"
    if "!=" in candidate and "!=" not in gold:
        return "a relation (!=)"
    if "_" in candidate and "_" not in gold:
        return "a subscript"
    gold_words = set(_words(gold))
    words = [w for w in _words(candidate) if w in REFUSED_WORDS and w not in gold_words]
    if words:
        return f"the word {words[0]!r}"
    last_digit = max((i for i, c in enumerate(candidate) if c.isdigit()), default=-1)
    if last_digit >= 0:
        verbs = [w for w in _words(candidate[last_digit:]) if w in _COPULAS and w not in gold_words]
        if verbs:
            return f"a statement after the value ({verbs[0]!r})"
    return None


def _clean(text: str) -> str:
    text = text.strip()
    if text.lower().startswith(ANSWER_MARKER.lower()):
        text = text[len(ANSWER_MARKER) :]
    text = text.strip().rstrip(".").strip()
    if len(text) >= 2 and text[0] == text[-1] == "$":
        text = text[1:-1].strip()
    return text


def _mv_parse(text: str, configs) -> list:
    try:
        return parse(text, extraction_config=list(configs), parsing_timeout=_timeout())
    except Exception:  # math-verify raises on some inputs despite raise_on_error=False
        return []


def _mv_verify(gold: list, cand: list) -> bool:
    if not gold or not cand:
        return False
    try:
        return bool(verify(gold, cand, timeout_seconds=_timeout()))
    except Exception:
        return False


# ---------------------------------------------------------------------- plain sympy path (ours)
class _Unsupported(ValueError):
    pass


def _to_sympy(node: ast.AST, source: str) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if type(node.value) is int:
            return sympy.Integer(node.value)
        # Exact decimal from the source text, not the binary float.
        return sympy.Rational(ast.get_source_segment(source, node) or repr(node.value))
    if isinstance(node, ast.Name):
        if node.id == "pi":
            return sympy.pi
        if len(node.id) <= 3 and node.id.isalpha():
            return sympy.Symbol(node.id)
        raise _Unsupported(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _to_sympy(node.operand, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _to_sympy(node.left, source), _to_sympy(node.right, source)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise _Unsupported("division by zero")
            return left / right
        if isinstance(node.op, ast.Pow):
            small_number = right.is_Rational and abs(right.p) <= MAX_EXPONENT and right.q <= 2
            symbolic = not right.is_number and not right.has(sympy.Pow)  # e.g. n + 1
            if not (small_number or symbolic):
                raise _Unsupported("exponent")
            return left**right
        raise _Unsupported(type(node.op).__name__)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sqrt":
        if len(node.args) != 1 or node.keywords:
            raise _Unsupported("sqrt takes one argument")
        return sympy.sqrt(_to_sympy(node.args[0], source))
    if isinstance(node, ast.Tuple) and 1 < len(node.elts) <= 10:
        return sympy.Tuple(*(_to_sympy(e, source) for e in node.elts))
    raise _Unsupported(type(node).__name__)


def plain_to_sympy(text: str) -> Any | None:
    """Parse a plain (Python-style) math expression to sympy via an AST whitelist, or None.

    `^` means power and implicit multiplication after a number or `)` is inserted (`3x`, `2(x+1)`).
    """
    text = _THOUSANDS.sub("", text.strip()).replace("^", "**")
    # [A-Za-z0-9], not \w: `1_2` would be Python's digit separator (12), a subscript in LaTeX (1).
    if not text or len(text) > MAX_ANSWER_CHARS or not re.fullmatch(r"[A-Za-z0-9\s.+\-*/(),]+", text):
        return None
    text = _IMPLICIT_MUL.sub("*", text)
    text = re.sub(r"\bsqrt\*\(", "sqrt(", text)
    try:
        tree = ast.parse(text, mode="eval")
        return _to_sympy(tree.body, text)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, _Unsupported):
        return None


def _sympy_equal(a: Any, b: Any) -> bool:
    try:
        if isinstance(a, sympy.Tuple) or isinstance(b, sympy.Tuple):
            return (
                isinstance(a, sympy.Tuple)
                and isinstance(b, sympy.Tuple)
                and len(a) == len(b)
                and all(_sympy_equal(x, y) for x, y in zip(a, b))
            )
        return bool(sympy.simplify(a - b) == 0)
    except Exception:
        return False


# ---------------------------------------------------------------------- gold side
@lru_cache(maxsize=4096)
def _gold_forms(gold: str) -> tuple[list, list, str]:
    """(math-verify parse, sympy values for our own rules, normalised text) of a gold answer.

    The sympy values are the plain parse of the gold and math-verify's LaTeX parse of it, so that a
    LaTeX gold (`x^{2} - x`) can be compared with a Python-style answer (`x**2 - x`).
    """
    cleaned = _clean(gold)
    mv = _mv_parse(f"${cleaned}$", _LATEX_ONLY)
    values = [plain_to_sympy(cleaned)]
    if mv and isinstance(mv[0], sympy.Expr):
        # math-verify's symbols carry assumptions (real=True); ours are plain, and sympy treats
        # Symbol("x") and Symbol("x", real=True) as different variables.
        values.append(mv[0].xreplace({s: sympy.Symbol(s.name) for s in mv[0].free_symbols}))
    return mv, [v for v in values if v is not None], _normalise_text(cleaned)


def _normalise_text(text: str) -> str:
    text = _TEXT_CMD.sub(r"\1", text)
    return fold_case(re.sub(r"\s+", "", text).rstrip("."))


def _numbers(text: str) -> list[str]:
    return [n.rstrip("0").rstrip(".") if "." in n else n for n in _NUMBER.findall(_THOUSANDS.sub("", text))]


def _guarded_extraction(candidate: str) -> list:
    """math-verify's free-text extraction, kept only when no other number is written in the answer."""
    parsed = _mv_parse(candidate, _DEFAULT_CONFIGS)
    if len(parsed) < 2 or not isinstance(parsed[-1], str):
        return []
    inside = _numbers(parsed[-1])
    for number in _numbers(candidate):
        if number in inside:
            inside.remove(number)
        else:
            return []  # a number outside the extracted value: a hedge or a worked solution
    if not _only_words_around(candidate, parsed[-1]):
        return []
    return parsed


def _only_words_around(candidate: str, value: str) -> bool:
    """Whether everything in `candidate` outside the extracted `value` is plain words.

    `\\sqrt 9`, `4!`, `\\log 10` and `5x` yield 9, 4, 10 and 5 by extraction; the operator, command or
    letter left over means the answer is another value (or no single value), so it is not free text.
    """
    text = _THOUSANDS.sub("", candidate)
    at = text.find(value)
    if at < 0:
        return False
    rest = text[:at] + " " + text[at + len(value) :]
    if any(c not in _FREE_TEXT_COMMANDS for c in _COMMAND.findall(rest)):
        return False
    rest = _COMMAND.sub(" ", rest)
    if re.search(r"[^A-Za-z\s.,:;'\"{}$?]", rest):
        return False
    # a single letter next to the value reads as a variable (`5x`, `5 a`), elsewhere only `a` / `I` are words
    after = text[at + len(value) :]
    if re.match(r"\s*[A-Za-z](?![A-Za-z])", after) or re.search(r"(?<![A-Za-z])[A-Za-z]\s*$", text[:at]):
        return False
    return all(len(w) > 1 or w in ("a", "A", "I") for w in _WORDS.findall(rest))


def is_equivalent(candidate: str, gold: str) -> bool:
    """Whether `candidate` is mathematically equal to `gold` (the module docstring lists the rules)."""
    return check_answer(candidate, gold) is not None


def check_answer(candidate: str, gold: str) -> str | None:
    """Which rule accepted `candidate` ("latex", "math-verify", "sympy", "percent", "text"), or None.

    Args:
        candidate: the model's answer text (the content of its `<answer>` block).
        gold: the gold answer (e.g. from `extract_gold`).
    """
    if not isinstance(candidate, str) or not isinstance(gold, str):
        return None
    if answer_guard(candidate) is not None:
        return None
    cand = _clean(candidate)
    if not cand or answer_refusal(cand, gold) is not None:
        return None
    if "_" in gold:
        # A subscripted gold (`1011_2`): its value depends on reading the subscript, so it is matched as text.
        return "text" if _subscript_text(cand) == _subscript_text(_clean(gold)) else None
    if "=" in cand and "=" not in gold:
        return _check_equation(cand, gold)
    return _check_value(cand, gold)


def _subscript_text(text: str) -> str:
    return fold_case(re.sub(r"[\s{}$]", "", _TEXT_CMD.sub(r"\1", text)))


def _check_equation(cand: str, gold: str) -> str | None:
    """An equation answer: right when it is `variable = value` (either order, one variable side) or when
    every side is a right answer (`2+3 = 5`); `6 = 5` is wrong for 5."""
    sides = cand.split("=")
    values = [side for side in sides if not _VARIABLE.fullmatch(side)]
    if len(sides) - len(values) > 1 or not values or any(not side.strip() for side in values):
        return None
    rules = [_check_value(side.strip(), gold) for side in values]
    return rules[0] if all(rule is not None for rule in rules) else None


def _check_value(cand: str, gold: str) -> str | None:
    """The equivalence paths of the module docstring, on an answer without refused features."""
    gold_mv, gold_values, gold_text = _gold_forms(gold)

    if _mv_verify(gold_mv, _mv_parse(f"${cand}$", _LATEX_ONLY)):
        return "latex"
    if _mv_verify(gold_mv, _guarded_extraction(cand)):
        return "math-verify"
    plain = plain_to_sympy(cand)
    if plain is not None and any(_sympy_equal(plain, g) for g in gold_values):
        return "sympy"
    percent = _PERCENT.match(cand)
    if percent:
        value = sympy.Rational(percent.group(1))
        for g in gold_values:
            if _sympy_equal(value / 100, g) or _sympy_equal(value, g):
                return "percent"
    if gold_text and _normalise_text(cand) == gold_text:
        return "text"
    return None
