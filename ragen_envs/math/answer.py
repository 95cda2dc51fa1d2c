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
    if not text or len(text) > MAX_ANSWER_CHARS or not re.fullmatch(r"[\w\s.+\-*/(),]+", text):
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
    return parsed


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
    if not cand:
        return None
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
