"""Safe parsing and exact evaluation of a Countdown answer (an arithmetic expression written by a model).

Model text is never passed to `eval`. The answer goes through three gates:

1. a character whitelist: digits, `+ - * /`, parentheses and spaces (after mapping the Unicode
   signs `× · ÷ − –` to ASCII), at most `MAX_EXPRESSION_CHARS` characters;
2. `ast.parse(..., mode="eval")` and an AST whitelist: `Expression`, `BinOp` with `Add`, `Sub`,
   `Mult`, `Div`, unary `-`/`+`, and integer `Constant`s of at most `MAX_LITERAL_DIGITS` digits.
   Everything else is rejected: names, calls, attributes, subscripts, `**`, `//`, `%`, floats,
   strings, comparisons, lambdas;
3. exact evaluation with `fractions.Fraction` (no floating point: `8 / (3 - 8 / 3)` is exactly 24),
   division by zero rejected, and every intermediate value bounded (`MAX_VALUE_BITS` bits of
   numerator and denominator) so that no answer can make the env compute with huge numbers.

Unary signs are accepted (reasoning-gym's reference answers use them, e.g. `27*(-2 + ...)`, and
RAGEN's validator allows `-` anywhere). They do not make more positive targets reachable: with
non-negative numbers, if a binary-only expression over a set reaches a negative v, one also reaches -v
(induction over the root operation: `y - x` for `x - y`; negate the negative operand of `+ * /`).
So the solver, which uses binary operations only, stays exact for the targets the generator draws.

One convenience: a trailing `= <integer>` (models like to write `(a + b) * c = 24`) is accepted when the
equation is true; only the left-hand side is scored, so writing the target on the right earns nothing, and a
false equation (`E = 999` with E = 24) is not an expression of its value: it is rejected like any malformed
answer.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

#: Longest accepted expression, in characters (after normalisation).
MAX_EXPRESSION_CHARS = 512
#: Longest accepted integer literal, in digits (Countdown numbers are small).
MAX_LITERAL_DIGITS = 12
#: Bound on the bit length of numerator and denominator of every intermediate value.
MAX_VALUE_BITS = 1024
#: Most digits a value can have (2**MAX_VALUE_BITS has 309): a stated `= <integer>` with more is false.
_MAX_VALUE_DIGITS = len(str(2**MAX_VALUE_BITS))

_UNICODE_SIGNS = str.maketrans(
    {"×": "*", "·": "*", "∗": "*", "÷": "/", "∕": "/", "−": "-", "–": "-"}
)
_ALLOWED_CHARS = re.compile(r"^[0-9+\-*/()\s]+$")
_TRAILING_EQUALS = re.compile(r"^(?P<lhs>[^=]*)=\s*-?\d+\s*$")
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class ExpressionError(ValueError):
    """The text is not a well-formed Countdown expression (the message says why)."""


@dataclass(frozen=True)
class ParsedExpression:
    """A well-formed expression.

    Attributes:
        text: the normalised expression that was evaluated.
        value: its exact value.
        numbers: the integer literals, in order of appearance.
    """

    text: str
    value: Fraction
    numbers: tuple[int, ...]


def normalize_expression(text: str) -> str:
    """Map Unicode operator signs to ASCII, drop surrounding `$`/backticks and a trailing `= <int>`."""
    if not isinstance(text, str):
        raise ExpressionError(f"expected a string, got {type(text).__name__}")
    text = text.translate(_UNICODE_SIGNS).strip().strip("$`").strip()
    match = _TRAILING_EQUALS.match(text)
    if match:
        text = match.group("lhs").strip()
    return text


def _check_size(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_VALUE_BITS or value.denominator.bit_length() > MAX_VALUE_BITS:
        raise ExpressionError(f"intermediate value exceeds {MAX_VALUE_BITS} bits")
    return value


def _evaluate(node: ast.AST, numbers: list[int]) -> Fraction:
    if isinstance(node, ast.Constant):
        value = node.value
        # bool is an int subclass; the character whitelist already excludes True/False, but be explicit.
        if type(value) is not int:
            raise ExpressionError(f"only integer literals are allowed, got {type(value).__name__}")
        if len(str(value)) > MAX_LITERAL_DIGITS:
            raise ExpressionError(f"integer literal longer than {MAX_LITERAL_DIGITS} digits")
        numbers.append(value)
        return Fraction(value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left = _evaluate(node.left, numbers)
        right = _evaluate(node.right, numbers)
        op = type(node.op)
        if op is ast.Add:
            return _check_size(left + right)
        if op is ast.Sub:
            return _check_size(left - right)
        if op is ast.Mult:
            return _check_size(left * right)
        if right == 0:
            raise ExpressionError("division by zero")
        return _check_size(left / right)
    if isinstance(node, ast.BinOp):
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed (only + - * /)")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _evaluate(node.operand, numbers)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.UnaryOp):
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed (only + - * /)")
    raise ExpressionError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def parse_expression(text: str) -> ParsedExpression:
    """Parse and evaluate an arithmetic expression exactly.

    Args:
        text: model text, e.g. `"(100 - 4) / (2 + 6)"`.

    Returns:
        ParsedExpression(text, value, numbers).

    Raises:
        ExpressionError (a ValueError): the text is not a well-formed expression of integers,
            `+ - * /` and parentheses, divides by zero, or is too long / too large.
    """
    stated = _stated_value(text)
    text = normalize_expression(text)
    if not text:
        raise ExpressionError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    if not _ALLOWED_CHARS.match(text):
        bad = sorted({c for c in text if not re.match(r"[0-9+\-*/()\s]", c)})[:5]
        raise ExpressionError(f"characters {bad} are not allowed (only digits, + - * /, parentheses)")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(f"not a well-formed expression ({type(exc).__name__})") from None
    numbers: list[int] = []
    try:
        value = _evaluate(tree.body, numbers)
    except RecursionError:
        raise ExpressionError("expression nested too deeply") from None
    if stated is not None and Fraction(stated) != value:
        raise ExpressionError(f"a false equation: the left side is {value}, not {stated}")
    return ParsedExpression(" ".join(text.split()), value, tuple(numbers))


def _stated_value(text: str) -> int | None:
    """The integer after a trailing `=` (see :func:`normalize_expression`), or None without one.

    Raises ExpressionError (a false equation) when it has more digits than any value of an expression can
    have (`_MAX_VALUE_DIGITS`, from `MAX_VALUE_BITS`): such a number cannot equal the left side, and it is
    not converted (Python refuses int() of over 4,300 digits, and the check used to skip the comparison
    then, accepting `E = 999...9` as a true equation).
    """
    if not isinstance(text, str):
        return None
    match = _TRAILING_EQUALS.match(text.translate(_UNICODE_SIGNS).strip().strip("$`").strip())
    if not match:
        return None
    rhs = match.group(0)[len(match.group("lhs")) + 1:].strip()
    sign = -1 if rhs.startswith("-") else 1
    # `\d` also matches other scripts' digits ("２４"): read each as its ASCII digit, then drop leading zeros.
    digits = "".join(str(unicodedata.decimal(c)) for c in rhs.lstrip("-")).lstrip("0") or "0"
    if len(digits) > _MAX_VALUE_DIGITS:
        raise ExpressionError(f"a false equation: the right side has more than {_MAX_VALUE_DIGITS} digits")
    return sign * int(digits)


def uses_numbers_exactly(parsed: ParsedExpression, nums: Sequence[int]) -> bool:
    """True when the literals are exactly `nums` as a multiset (each number used once, none added)."""
    return Counter(parsed.numbers) == Counter(int(n) for n in nums)


def arithmetic_steps(expression: str) -> str:
    """The arithmetic of an expression, innermost operation first: ``(2 * 5) - 1`` -> ``2 * 5 = 10, 10 - 1 = 9.``

    Values are exact fractions (``8 / 3`` is written ``8/3``), as the env evaluates them. For well-formed answers
    over integers with binary + - * / only (the solver's and the generator's); a ValueError otherwise.
    """
    ops = {ast.Add: ("+", lambda a, b: a + b), ast.Sub: ("-", lambda a, b: a - b),
           ast.Mult: ("*", lambda a, b: a * b), ast.Div: ("/", lambda a, b: a / b)}
    steps: list[str] = []

    def show(v: Fraction) -> str:
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            a, b = walk(node.left), walk(node.right)
            sym, fn = ops[type(node.op)]
            v = fn(a, b)
            steps.append(f"{show(a)} {sym} {show(b)} = {show(v)}")
            return v
        raise ValueError(f"not an arithmetic expression over integers: {expression!r}")

    walk(ast.parse(expression, mode="eval").body)
    return ", ".join(steps) + "."
