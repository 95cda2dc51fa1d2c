"""Math answer checking by mathematical equivalence (MetaMathQA-style gold answers).

`is_equivalent(candidate, gold)` decides whether a model's answer equals the gold answer. The rule is that an
accepted answer denotes exactly one value, that value equals the gold's, and it is stated as a result. It is
enforced in three steps.

1. The answer's shape (`ragen_envs.math.grammar.parse_statement`): it must be lead-in words ("The answer
   is"), one math span (bare, in one `$...$` or in one `\\boxed{}`) and unit words after it (`dollars`,
   `cookies`, `cm`), from closed lists; any other word, a second span or box, text inside the math, two
   numbers side by side (`5 5`, `5 (4)`, `2\\frac{1}{2}`) or an unbraced argument TeX reads differently from a
   person (`\\sqrt 16`) refuses the answer. Features the gold itself has (its words, commands, characters)
   are allowed. Only the math span is read on; the words never reach a parser.
2. The value of the math span, read by every reader that accepts its syntax; *all* of them must find it
   equal to the gold (so no reader can pick one of several values the others see):

==========================  ==================================================================
rule                        what it reads
==========================  ==================================================================
"latex"                     math-verify's LaTeX parser (`\\frac{1}{2}`, `0.5`, `1/2`, `2+3x`, `4!`,
                            `\\sqrt 9`); its reading counts only when it consumed the whole span (it
                            silently drops what it takes for units: `2ab` reads as 2, `5 more` as 5)
"sympy"                     ours, Python-style input math-verify drops: `(x+1)**2`, `sqrt(12)`,
                            `3*x + 2`; an AST whitelist (never `eval`): numbers, symbols, + - * / **
                            (small integer exponents), unary signs, `sqrt`, tuples; exact rationals
"percent"                   `50%` / `50 percent` equals 1/2 (asked as a fraction) and 50 (asked as a
                            percentage): the one deliberate two-valued form
"text"                      non-mathematical gold answers (`east`, `\\text{(B)}`): equal after removing
                            `\\text{}`, spaces, case and a trailing period
==========================  ==================================================================

3. Its form (`final_form_refusal`): the answer is the result, not a computation of it. For a rational gold the
   span must be a number written out (a decimal numeral, or one fraction of two integers in lowest terms: `1.75`,
   `7/4`, `\\frac{7}{4}`; not `\\frac{14}{8}`, `1 + 3/4`, `4 \\cdot 5`, `5!`, `\\sqrt{25}`); for an expanded
   polynomial gold it must be expanded (not `3(x + 14)(x + 12)x`). Without this rule the question's own
   expression was paid as its answer (every fraction sum and every product to expand). Other golds (roots,
   tuples, text) have no form rule. `check_answer(..., final_form=False)` checks equivalence alone.

The rule name returned is "latex" when math-verify read the span (and the plain reader, if it could read it,
agreed), "sympy" when only our reader could. An equation is accepted only as `variable = value` (either
order) or when every side equals the gold and the last states it in final form: `x = 12` is right for 12 and
`2+3 = 5` for 5, but `6 = 5`, `5 = 2+3` and `x = 2+3` are wrong for 5; a gold answer that is an equation is
compared whole. `\\sqrt 9` is right for 3 and wrong for 9,
`4!` right for 24 and wrong for 4, `\\log 10` (math-verify reads `\\log` as base 10) right for 1 and wrong
for 10. A gold answer with a subscript (`1011_2`, a number in base 2) is matched as text (spaces, braces and
`$` ignored), since its value depends on reading the subscript as a base; a subscript in a candidate is
refused otherwise (`1_2` is 1 in LaTeX and 12 in Python).

Deliberate leniency (documented in docs/protocol.md): `50%` and `50 percent` are right for 1/2 and for 50;
unit words from the closed list around the value (`12 dollars`, `12 cookies`) are ignored; `x = 12` is right
for 12. Numeric tolerance is math-verify's: values are compared after rounding to 6 decimal places, so
`0.333333` equals 1/3 but `0.333` and `0.49` (for 1/2) do not.

Cost guards (the answer is model text, so it may be written to stall the checker), all checked on the text
before any parser sees it (`answer_guard`); an answer that fails one is wrong:

- at most `MAX_ANSWER_CHARS` characters, and at most `grammar.MAX_MATH_TOKENS` tokens in its math span
  (the grammar refuses a longer span before any parser runs: 512 letters cost math-verify about a second);
- every power (`^` or `**`) has a small exponent (integers of magnitude <= `MAX_EXPONENT`, a letter,
  or a short linear term such as `{n+1}`) that is not itself raised to a power (`a^b^c`);
- magnitude: a power of a bracketed base multiplies the exponents inside it (`((9^{64})^{64})^{64}`
  is 9^262144), and the estimated number of digits of any power (digits of the largest literal in the
  base times the product of exponents) is at most `MAX_RESULT_DIGITS`;
- factorials only of literals up to `MAX_FACTORIAL` (or of letters);
- at most `MAX_BARS` `|` characters (absolute-value bars make the LaTeX grammar ambiguous: `1||1||...`
  took math-verify 17 s in a worker thread) and brackets nested at most `MAX_NESTING` deep.

Without them `9^{9^{9^{9}}}` or `(((9**64)**64)**64)**64` takes math-verify seconds to minutes. The guards
are heuristics, so the env's check is also bounded by a hard limit on CPU time that works in any thread:
`ragen_envs.math.checker` runs it in a worker process and kills the worker when the limit passes. There
math-verify's own `signal.alarm` timeouts (wall-clock, so their verdict would depend on the machine's load)
are switched off with `set_signal_timeouts(False)`; called directly in a main thread, they stay on (5 s).
"""

from __future__ import annotations

import ast
import logging
import re
import threading
from functools import lru_cache
from math import gcd as math_gcd
from typing import Any, NamedTuple

import sympy
from math_verify import LatexExtractionConfig, parse, verify
from math_verify.parser import NormalizationConfig, normalize_latex  # the config type of LatexExtractionConfig

from ragen_envs.math.grammar import Statement, normalise_operators, parse_statement
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

#: math-verify's LaTeX reading of a math span, without its unit removal (it drops a trailing `m`, `ab`, `more`,
#: `less`, ...: `2ab` read as 2, `5 more` as 5) and box extraction (the grammar handles units and boxes).
_READING_NORMALISATION = NormalizationConfig(
    basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="none", equations=False
)
_LATEX_ONLY = (LatexExtractionConfig(boxed_match_priority=-1, normalization_config=_READING_NORMALISATION),)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PERCENT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:\\?%|percent)\s*$", re.IGNORECASE | re.ASCII)
_IMPLICIT_MUL = re.compile(r"(?<=[\d)])\s*(?=[A-Za-z(])")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_POWER_OP = re.compile(r"\^|\*\*")
# An exponent: a bare integer or letter, or in braces / parentheses a short linear term such as
# `-2`, `n`, `2n`, `n+1` (no products, no nested powers), or the degree sign.
_TERM = r"-?\s*(?:\d+[A-Za-z]?|[A-Za-z])"
_EXPONENT = re.compile(
    rf"\s*(?:\{{\s*({_TERM}(?:\s*[+-]\s*(?:\d+|[A-Za-z]))?)\s*\}}"
    rf"|\(\s*({_TERM}(?:\s*[+-]\s*(?:\d+|[A-Za-z]))?)\s*\)"
    r"|(-?\s*\d+|[A-Za-z])"
    r"|(\{?\s*\\circ\s*\}?))"  # degrees: 90^\circ
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


_signal_timeouts = True


def set_signal_timeouts(enabled: bool) -> None:
    """Switch math-verify's own `signal.alarm` timeouts on or off for this process (module docstring).

    The checker's worker process switches them off: they count wall-clock seconds, so on a busy machine they
    cut a check that an idle machine finishes, and the verdict would depend on the load. The worker is bounded
    by CPU time instead.
    """
    global _signal_timeouts
    _signal_timeouts = bool(enabled)


def _timeout() -> int | None:
    # signal.alarm only works in the main thread (see the module docstring).
    if not _signal_timeouts:
        return None
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


#: `variable` side of an equation: one letter or a Greek letter command.
_VARIABLE = re.compile(
    r"\s*(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|epsilon|theta|lambda|mu|nu|rho|sigma|tau|phi|omega))\s*"
)


def _clean(text: str) -> str:
    """`text` without surrounding space, a leading "The answer is:", a final period and enclosing `$`."""
    text = normalise_operators(text).strip()
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
            # letters run together are a product of variables, as in LaTeX: `2ab` is 2 a b
            return sympy.Mul(*(sympy.Symbol(c) for c in node.id))
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


# ---------------------------------------------------------------------- readers
#: What may differ between math-verify's reported LaTeX and the normalised span: spacing, sizing, braces.
_SQUASH = re.compile(r"\\(?:left|right|displaystyle)(?![A-Za-z])|\\[,;:! ]|\s|[{}]")
_FRAC_VARIANTS = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_BINOM_VARIANTS = re.compile(r"\\[dt]binom(?![A-Za-z])")


def _squash(text: str) -> str:
    text = _BINOM_VARIANTS.sub(r"\\binom", _FRAC_VARIANTS.sub(r"\\frac", text))
    return _SQUASH.sub("", text)


def latex_reading(math: str) -> list:
    """math-verify's reading of the math span `math` ([value, its LaTeX]), or [] when it has none or it read
    only a part of the span (its reported LaTeX is not the whole normalised span)."""
    parsed = _mv_parse(f"${math}$", _LATEX_ONLY)
    if len(parsed) != 2 or isinstance(parsed[0], str) or not isinstance(parsed[1], str):
        return []
    try:
        expected = normalize_latex(math, _READING_NORMALISATION)
    except Exception:  # the normaliser is regex code, but the text is model text
        return []
    return parsed if _squash(parsed[1]) == _squash(expected) else []


def _plain_symbols(value: Any) -> Any:
    """`value` with math-verify's symbols (real=True) replaced by plain ones, which ours are: sympy treats
    Symbol("x") and Symbol("x", real=True) as different variables."""
    try:
        return value.xreplace({s: sympy.Symbol(s.name) for s in value.free_symbols})
    except (AttributeError, TypeError):
        return value


# ---------------------------------------------------------------------- gold side
class GoldForms(NamedTuple):
    """A gold answer prepared once: math-verify's reading, sympy values for our readers, normalised text."""

    mv: list
    values: list
    text: str


@lru_cache(maxsize=4096)
def _gold_forms(gold: str) -> GoldForms:
    """The `GoldForms` of a gold answer: its math span (the same grammar as the candidate's, all of the gold's
    own features allowed) read by both readers, so that a LaTeX gold (`x^{2} - x`) can be compared with a
    Python-style answer (`x**2 - x`)."""
    cleaned = _clean(gold)
    statement = parse_statement(cleaned, gold)
    math = cleaned
    if isinstance(statement, Statement):
        math = statement.math + ("\\%" if statement.percent else "") if statement.math else ""
    mv = latex_reading(math) if math else []
    values = [plain_to_sympy(math)] if math else []
    if mv and isinstance(mv[0], sympy.Expr):
        values.append(_plain_symbols(mv[0]))
    return GoldForms(mv, [v for v in values if v is not None], _normalise_text(cleaned))


def _normalise_text(text: str) -> str:
    text = _TEXT_CMD.sub(r"\1", text)
    return fold_case(re.sub(r"\s+", "", text).rstrip("."))


# ---------------------------------------------------------------------- final form
_SPACING = re.compile(r"\\(?:left|right|displaystyle)(?![A-Za-z])|\\[,;:! ]|\s")
_DECIMAL = r"(?:\d+(?:\.\d*)?|\.\d+)"
_NUMERAL = re.compile(rf"[+-]?(?:\\\$)?{_DECIMAL}")
_FRACTION = re.compile(r"([+-]?)(?:\\frac(?:\{([+-]?\d+)\}\{([+-]?\d+)\}|(\d)(\d))|([+-]?\d+)/([+-]?\d+))")
_DEGREES = re.compile(r"\^\{?\\circ\}?$")


def _numeral_refusal(math: str) -> str | None:
    r"""None when `math` is a number written out: a decimal numeral (`12`, `-0.75`, `1,200`, `\$12.50`, `90^\circ`)
    or one fraction of two integers in lowest terms (`\frac{7}{4}`, `\frac74`, `-7/4`, `\frac{-7}{4}`); else why
    not."""
    text = _FRAC_VARIANTS.sub(r"\\frac", _SPACING.sub("", _THOUSANDS.sub("", math)))
    while len(text) >= 2 and text[0] + text[-1] in ("()", "{}"):  # (12), {12}: grouping only
        text = text[1:-1]
    text = _DEGREES.sub("", text)  # 90^\circ is the number 90 in degrees
    if _NUMERAL.fullmatch(text):
        return None
    fraction = _FRACTION.fullmatch(text)
    if fraction is None:
        return "a computation, not its result: state the value as a number"
    parts = [g for g in fraction.groups()[1:] if g is not None]
    num, den = int(parts[0]), int(parts[1])
    if den == 0 or math_gcd(num, den) != 1:
        return "a fraction not in lowest terms"
    return None


def _is_rational_gold(gold: GoldForms) -> bool:
    values = [v for v in gold.values if isinstance(v, sympy.Expr)]
    return bool(values) and all(v.is_Rational or v.is_Float for v in values)  # math-verify reads 16.5 as a Float


def _is_expanded_polynomial(value: Any) -> bool:
    try:
        return bool(value.free_symbols) and bool(value.is_polynomial()) and sympy.expand(value) == value
    except (AttributeError, TypeError, ValueError):
        return False


def final_form_refusal(math: str, gold: GoldForms, readings: list) -> str | None:
    r"""Why the math span `math` (read as `readings`, sympy values) does not state its value in the gold's final
    form, or None. An answer must be the result, not a restatement of the question: the expression a question
    asks to evaluate (`\frac{5}{10} + \frac{2}{5} + \frac{1}{2}`, `200 - (7 \cdot 18 + 7 \cdot 9)`) or the
    product it asks to expand (`3(x + 14)(x + 12)x`) equals the gold too, and paid full reward before.

    - a rational gold (`12`, `\frac{7}{4}`, `12.5`): the answer is a decimal numeral or one fraction of two
      integers in lowest terms (`1.75`, `7/4`; not `14/8`, `3.5/2`, `1 + 3/4`);
    - an expanded polynomial gold (`3x^3 + 78x^2 + 504x`): the answer is expanded too (no product of sums, no
      power of a sum) and has no brackets unless the gold has them (`(26 \cdot 3)x^2` shows work, not a result);
    - any other gold (a root, a tuple, a set, text): no rule here.
    """
    if _is_rational_gold(gold):
        return _numeral_refusal(math)
    values = [v for v in gold.values if isinstance(v, sympy.Expr)]
    if values and all(_is_expanded_polynomial(v) for v in values):
        if any(not _is_expanded_polynomial(r) for r in readings):
            return "not expanded"
        if re.search(r"[(\[]", math) and not re.search(r"[(\[]", gold.text):
            return "brackets in an expanded polynomial"
    return None


# ---------------------------------------------------------------------- candidate side
def is_equivalent(candidate: str, gold: str) -> bool:
    """Whether `candidate` is mathematically equal to `gold` (the module docstring lists the rules)."""
    return check_answer(candidate, gold) is not None


def answer_refusal(candidate: str, gold: str) -> str | None:
    """Why `candidate` is not one stated value by the answer grammar (`grammar.parse_statement`), or None."""
    statement = parse_statement(_clean(candidate), gold)
    return statement if isinstance(statement, str) else None


def check_answer(candidate: str, gold: str, final_form: bool = True) -> str | None:
    """Which rule accepted `candidate` ("latex", "sympy", "percent", "text"), or None.

    Args:
        candidate: the model's answer text (the content of its `<answer>` block).
        gold: the gold answer (e.g. from `extract_gold`).
        final_form: require the value in the gold's final form (:func:`final_form_refusal`; what the env
            pays for). False checks equivalence alone: `2 + 3` is then right for 5.
    """
    if not isinstance(candidate, str) or not isinstance(gold, str):
        return None
    if answer_guard(candidate) is not None:
        return None
    cand = _clean(candidate)
    if not cand:
        return None
    if "_" in gold:
        # A subscripted gold (`1011_2`): its value depends on reading the subscript, so it is matched as text.
        return "text" if _subscript_text(cand) == _subscript_text(_clean(gold)) else None
    statement = parse_statement(cand, gold)
    if isinstance(statement, Statement) and statement.math:
        rule = _check_statement(statement, gold, final_form)
        if rule is not None:
            return rule
    return "text" if _text_match(cand, gold) else None


def _text_match(cand: str, gold: str) -> bool:
    """The text rule: the gold written out verbatim, or, for a gold without a mathematical reading (`east`),
    the same text up to case, spaces and `\\text{}`. Not for a numeric gold: `1 2` is not 12."""
    if cand == _clean(gold):
        return True
    forms = _gold_forms(gold)
    return not forms.mv and not forms.values and bool(forms.text) and _normalise_text(cand) == forms.text


def _subscript_text(text: str) -> str:
    return fold_case(re.sub(r"[\s{}$]", "", _TEXT_CMD.sub(r"\1", text)))


def _check_statement(statement: Statement, gold: str, final_form: bool = True) -> str | None:
    math = statement.math + ("\\%" if statement.percent else "")
    if "=" in math and "=" not in gold:
        return _check_equation(math, gold, final_form)
    return _check_value(math, gold, final_form)


def _check_equation(math: str, gold: str, final_form: bool = True) -> str | None:
    """An equation answer: right when it is `variable = value` (either order, one variable side) or when
    every side equals the gold and the last one states it in final form (`2+3 = 5`; `5 = 2+3` and `x = 2+3`
    are work without a result); `6 = 5` is wrong for 5."""
    sides = math.split("=")
    values = [side for side in sides if not _VARIABLE.fullmatch(side)]
    if len(sides) - len(values) > 1 or not values or any(not side.strip() for side in values):
        return None
    last = len(values) - 1
    rules = [_check_value(side.strip(), gold, final_form=final_form and i == last) for i, side in enumerate(values)]
    return rules[0] if all(rule is not None for rule in rules) else None


def _agrees(value: Any, gold: GoldForms, reading: list | None = None) -> bool:
    """Whether one reader's `value` equals the gold: by math-verify's comparison (its tolerance, sets and
    intervals) or by `simplify(a - b) == 0` against the gold's sympy values."""
    if gold.mv and _mv_verify(gold.mv, reading or [value]):
        return True
    if reading is None and gold.mv and _is_number(value) and _mv_verify(gold.mv, [value.evalf(30)]):
        return True  # our decimals are exact rationals; compared as numbers they get math-verify's tolerance
    plain = _plain_symbols(value)
    return any(_sympy_equal(plain, g) for g in gold.values)


def _is_number(value: Any) -> bool:
    return isinstance(value, sympy.Expr) and bool(value.is_number) and bool(value.is_real)


def _check_value(math: str, gold: str, final_form: bool = True) -> str | None:
    """The value of one math span against the gold: every reader that reads it must agree (module docstring);
    with `final_form`, the span must also state the value in the gold's final form (:func:`final_form_refusal`)."""
    forms = _gold_forms(gold)
    percent = _PERCENT.match(math)
    if percent:
        value = sympy.Rational(percent.group(1))
        hit = any(_sympy_equal(value / 100, g) or _sympy_equal(value, g) for g in forms.values)
        return "percent" if hit else None
    if final_form and _is_rational_gold(forms) and _numeral_refusal(math) is not None:
        return None  # before any parser: a computation is refused by its text alone
    latex = latex_reading(math)
    plain = plain_to_sympy(math)
    if not latex and plain is None:
        return None
    readings = [_plain_symbols(latex[0])] if latex else []
    readings += [plain] if plain is not None else []
    if final_form and final_form_refusal(math, forms, readings) is not None:
        return None
    if latex and not _agrees(latex[0], forms, latex):
        return None
    if plain is not None and not _agrees(plain, forms):
        return None
    return "latex" if latex else "sympy"
