"""The closed grammar of a MetaMathQA answer: what may surround the one mathematical value it states.

An answer is accepted only when it denotes exactly one value. A list of the words that hedge, deny or change a
value always loses to the next word (`5 grand`, `\\text{reject } 5`), so the grammar is closed instead: an
answer is refused unless it has this shape, and everything outside it is refused.

    answer  :=  lead*  span  unit*
    lead    :=  a word of LEAD_WORDS ("the answer is", "so", "there are", "a total of") | ":" | "," | "$" | "\\$"
    span    :=  math | "$" math "$" | "\\(" math "\\)" | "\\[" math "\\]" | "\\boxed{" answer "}"
    unit    :=  a word of UNIT_WORDS (dollars, cm, cookies, ...), "square"/"cubic" before one, "per" between two,
                a power ^2 / ^3 after one; or "percent" alone (`50 percent` is `50%`)
    math    :=  one expression (`math_refusal`): numbers, single letters, + - * / ^ ! , = | %, brackets, the
                LaTeX commands of CORE_COMMANDS, `pi`, functions such as `sqrt(...)`; letters run together
                (`2ab`) only when each is a variable of the gold

The words of `\\text{...}`, `\\mathrm{...}` and the like count as words. So one answer has at most one
`$...$` span and at most one box, and a word that is neither a lead-in nor a unit (`not`, `or`, `and`,
`grand`, `excluded`, a made-up word) refuses it wherever it stands. Features the gold answer itself has (its
words, LaTeX commands and characters) are allowed: a gold `x \\ne 5` may be answered `x \\ne 5`.

Inside the math, `math_refusal` refuses the forms that readers take for different values: two numeric operands
side by side (`5 5`, `5 (4)`, `(5)(4)`, `2\\frac{1}{2}`: math-verify reads a sum or a mixed number, a person or
sympy a product, and each is a way to state two answers at once); an unbraced argument longer than TeX reads
(`\\sqrt 16` is √1·6 in TeX, 4 to a person); a `.` outside a number (`5.5.5`); more than one `=`; unbalanced
brackets; and more than MAX_MATH_TOKENS tokens, which bounds the parsers' cost before they run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: Most tokens (numbers, letters, commands, operators, brackets) in the math of an answer, or twice the gold's
#: when that is more: bounds the parsers' cost before they run (the generator's longest gold has 25 tokens;
#: 512 letters cost math-verify about a second, a product of 12 binomials 0.2 s).
MAX_MATH_TOKENS = 64

#: Words that may lead in to the value ("The answer is 12", "So there are 12", "a total of 12"): none of
#: them negates, hedges, compares or changes a value.
LEAD_WORDS = frozenset(
    "the a an final answer answers is are so thus therefore hence total result value solution it we get have "
    "find found that this there number amount of equals gives".split()
)
#: Units and counted nouns that may follow the value (`12 dollars`, `12 cookies`); none changes the number.
#: Plurals in -s / -es are accepted too. Multipliers (thousand, dozen, grand, pairs) are deliberately absent.
UNIT_WORDS = frozenset(
    # money
    "dollar cent euro pound usd buck rupee yen "
    # time
    "second sec minute min hour hr hrs day week month year yr yrs "
    # length, area, volume, mass, speed, angle
    "millimeter millimetre mm centimeter centimetre cm meter metre km kilometer kilometre inch inches foot feet "
    "ft yard yd mile unit liter litre ml milliliter gallon gal cup quart pint ounce oz gram kg kilogram mg lb lbs "
    "ton tonne mph kph kmh degree deg radian "
    # counted things (GSM answers)
    "point people person student child children kid adult friend item piece slice cookie apple orange banana "
    "book page ball marble candy candies cupcake cake pie pencil pen egg box bag car tree flower ticket dog cat "
    "bird animal chicken cow sheep horse fish toy game card sticker bottle glass shirt sock shoe hat house room "
    "seat chair table plant seed stamp coin bill lap step word movie song visitor customer worker employee member "
    "player team girl boy man men woman women baby babies teacher bowl plate jar bucket pizza sandwich notebook "
    "mug poster candle brick".split()
)
#: Unit modifiers: "square"/"cubic" must precede a unit, "per" must stand between two.
_UNIT_PREFIXES = frozenset({"square", "sq", "cubic", "cu"})
_PERCENT_WORDS = (("percent",), ("per", "cent"))

#: Letters run together that a math span may use as they are: constants, and functions before a bracket.
MATH_CONSTANTS = frozenset({"pi", "inf", "infinity"})
MATH_FUNCTIONS = frozenset({"sqrt", "sin", "cos", "tan", "log", "ln", "exp"})
#: LaTeX commands a math span may use (formatting, arithmetic, functions, constants, Greek letters).
CORE_COMMANDS = frozenset(
    "frac dfrac tfrac cfrac binom dbinom tbinom sqrt cdot times div pi infty circ degree left right "
    "log ln lg exp sin cos tan sec csc cot arcsin arccos arctan sinh cosh tanh quad qquad "
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma "
    "tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Phi Psi Omega".split()
)
#: Characters a math span may use besides letters, digits and whitespace.
CORE_CHARS = frozenset("+-*/^()[]{}=!|%,")
#: Escaped symbols a math span may use: percent and spacing.
CORE_ESCAPES = frozenset({"\\%", "\\,", "\\;", "\\:", "\\!", "\\ "})
#: Commands that take two arguments, and one (with an optional [index] for \\sqrt).
_TWO_ARGUMENTS = frozenset({"frac", "dfrac", "tfrac", "cfrac", "binom", "dbinom", "tbinom"})
_ONE_ARGUMENT = frozenset({"sqrt"})
#: Commands that only space or size things: ignored when looking for side-by-side operands.
_SPACING = frozenset({"quad", "qquad", "left", "right", "\\,", "\\;", "\\:", "\\!", "\\ "})
#: Binary operator commands (like + or *).
_OPERATOR_COMMANDS = frozenset({"cdot", "times", "div"})
#: Postfix operators: `5!`, `50%`, `90^\\circ` stay one operand.
_POSTFIX = frozenset({"!", "%", "\\%"})

#: Formatting commands whose argument is text: `\\text{ dollars}` is the word "dollars".
_TEXT_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|textsf|textnormal|mathrm|mathbf|mathit|mathsf|mbox)\s*\{([^{}]*)\}"
)
_BOXES = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
#: Unicode operators models write, with their ASCII / LaTeX spelling.
_UNICODE_OPERATORS = str.maketrans(
    {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot "}
)
_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<letters>[A-Za-z]+)|(?P<number>\d+(?:\.\d+)?|\.\d+)|(?P<command>\\[A-Za-z]+)"
    r"|(?P<escape>\\.)|(?P<char>.)",
    re.S,
)
#: Characters that end a word (`dollars.`, `answer:`), besides whitespace and the ends of the text.
_WORD_BOUNDARY = frozenset(" \t\n.,:;?$")
_LEAD_PUNCTUATION = frozenset({":", ","})
_CURRENCY = "\\$"
#: `x = ` before a box: `x = \boxed{12}` states x = 12.
_VARIABLE_IS = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)\s*=\s*(?=\\(?:boxed|fbox))")
_UNIT_POWER = re.compile(r"([A-Za-z]{2,})\s*\^\s*(?:\{\s*[23]\s*\}|[23])(?![\d.])")
#: The openers each closing bracket may close: `(2, 5]` is an interval.
_CLOSES = {")": "([", "]": "([", "}": "{"}


@dataclass(frozen=True)
class Token:
    """One token of an answer: `kind` is space, word (a standalone word), letters (letters glued into
    mathematics), number, command, escape or char."""

    kind: str
    text: str
    start: int


@dataclass(frozen=True)
class Statement:
    """What an answer states: its one math span ("" for a text answer) and whether it was a percentage in
    words (`50 percent`)."""

    math: str
    percent: bool = False


@dataclass(frozen=True)
class GoldFeatures:
    """The words and letters (lowercase), LaTeX commands and characters of a gold answer, allowed in a
    candidate, and its number of tokens."""

    words: frozenset[str]
    letters: frozenset[str]
    commands: frozenset[str]
    chars: frozenset[str]
    tokens: int


@lru_cache(maxsize=4096)
def gold_features(gold: str) -> GoldFeatures:
    """The features of `gold` that a candidate may share (see the module docstring)."""
    tokens = tokenize(normalise_operators(_TEXT_WRAPPER.sub(r" \1 ", gold)))
    return GoldFeatures(
        words=frozenset(t.text.lower() for t in tokens if t.kind in ("word", "letters")),
        letters=frozenset("".join(t.text.lower() for t in tokens if t.kind == "letters")),
        commands=frozenset(t.text for t in tokens if t.kind in ("command", "escape")),
        chars=frozenset(t.text for t in tokens if t.kind == "char"),
        tokens=sum(t.kind != "space" for t in tokens),
    )


def normalise_operators(text: str) -> str:
    """`text` with the Unicode operators models write (−, ×, ÷, ·) in ASCII / LaTeX."""
    return text.translate(_UNICODE_OPERATORS)


def tokenize(text: str) -> list[Token]:
    """The tokens of `text`; a run of letters is a `word` when it stands alone (whitespace, punctuation or an
    end of the text on both sides), else `letters` (part of the mathematics: `2ab`, `sqrt(12)`)."""
    tokens = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "letters" and _stands_alone(text, match.start(), match.end()):
            kind = "word"
        tokens.append(Token(kind, match.group(), match.start()))
    return _articles_as_words(tokens)


def _stands_alone(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return before in _WORD_BOUNDARY and after in _WORD_BOUNDARY and end - start >= 2


def _articles_as_words(tokens: list[Token]) -> list[Token]:
    """A lone `a` / `A` followed by a word is the article ("a total of 12"), not a variable."""
    solid = [i for i, t in enumerate(tokens) if t.kind != "space"]
    for here, following in zip(solid, solid[1:]):
        token = tokens[here]
        if token.kind == "letters" and token.text in ("a", "A") and tokens[following].kind == "word":
            if here + 1 < len(tokens) and tokens[here + 1].kind == "space":
                tokens[here] = Token("word", token.text, token.start)
    return tokens


def _is_math(token: Token) -> bool:
    """Whether `token` belongs to the math span (words, spaces, currency and lead punctuation do not)."""
    if token.kind in ("space", "word"):
        return False
    if token.kind == "escape" and token.text == _CURRENCY:
        return False
    return not (token.kind == "char" and token.text in ".:;?,")


def parse_statement(text: str, gold: str) -> Statement | str:
    """The `Statement` of an answer `text` (already stripped of "The answer is:" and a final period), or
    the reason it is refused (a str). A text without any mathematics is a text answer (`Statement("")`)."""
    features = gold_features(gold)
    text = normalise_operators(text)
    if len(_BOXES.findall(text)) > 1 + len(_BOXES.findall(gold)):
        return "more than one box"
    text = _TEXT_WRAPPER.sub(r" \1 ", text).replace("\\displaystyle", " ")
    text = _UNIT_POWER.sub(lambda m: m.group(1) if _is_unit(m.group(1).lower()) else m.group(0), text)
    text, span = _math_delimiters(text)
    if isinstance(span, str):
        return span
    tokens = tokenize(text)
    math = [i for i, t in enumerate(tokens) if _is_math(t)]
    if not math:
        return Statement("")
    first, last = math[0], math[-1]
    if span is not None and not (span[0] <= tokens[first].start and tokens[last].start < span[1]):
        return "mathematics outside the $...$ span"
    reason = _lead_refusal(tokens[:first], features)
    if reason:
        return reason
    percent = _unit_words(tokens[last + 1 :], features)
    if isinstance(percent, str):
        return percent
    end = tokens[last].start + len(tokens[last].text)
    core = text[tokens[first].start : end].strip()
    inner = _box_content(core)
    equation = _VARIABLE_IS.match(core)
    if inner is None and equation:
        inner = _box_content(core[equation.end() :])  # `x = \boxed{12}`
        inner = None if inner is None else equation.group() + inner
    if inner is not None:
        statement = parse_statement(inner, gold)
        if isinstance(statement, Statement) and percent:
            return "a unit outside the box"
        return statement
    if _BOXES.search(core):
        return "mathematics outside the box"
    reason = math_refusal(core, features)
    return reason if reason else Statement(core, percent)


def _math_delimiters(text: str) -> tuple[str, tuple[int, int] | None | str]:
    """`text` with its math delimiters blanked out, and the span they enclosed (None when there is none), or a
    refusal: one `$...$` (or `\\(...\\)`, `\\[...\\]`) span at most; a single `$` before a number is currency."""
    text = text.replace("$$", "$")
    text = re.sub(r"\\[()\[\]]", "$", text)
    marks = [m.start() for m in re.finditer(r"(?<!\\)\$", text)]
    if not marks:
        return text, None
    if len(marks) == 1:
        if re.match(r"\$\s*\d", text[marks[0] :]):
            return text[: marks[0]] + _CURRENCY + text[marks[0] + 1 :], None
        return text, "an unpaired $"
    if len(marks) > 2:
        return text, "more than one $...$ span"
    p, q = marks
    return text[:p] + " " + text[p + 1 : q] + " " + text[q + 1 :], (p, q)


def _lead_refusal(tokens: list[Token], features: GoldFeatures) -> str | None:
    """Why the tokens before the math are not lead-in words, punctuation or currency, or None."""
    for token in tokens:
        if token.kind == "space" or (token.kind == "escape" and token.text == _CURRENCY):
            continue
        if token.kind == "word" and (token.text.lower() in LEAD_WORDS or token.text.lower() in features.words):
            continue
        if token.kind == "char" and token.text in _LEAD_PUNCTUATION:
            continue
        return f"{token.text!r} before the value"
    return None


def _is_unit(word: str) -> bool:
    for suffix in ("", "s", "es"):
        if suffix and not word.endswith(suffix):
            continue
        if word[: len(word) - len(suffix)] in UNIT_WORDS:
            return True
    return False


def _unit_words(tokens: list[Token], features: GoldFeatures) -> bool | str:
    """Whether the tokens after the math say "percent", or why they are not units (a str)."""
    words = []
    for token in tokens:
        if token.kind == "space":
            continue
        if token.kind != "word":
            return f"{token.text!r} after the value"
        words.append(token.text.lower())
    if tuple(words) in _PERCENT_WORDS:
        return True
    for i, word in enumerate(words):
        if word in features.words or _is_unit(word):
            continue
        following = words[i + 1] if i + 1 < len(words) else None
        if word in _UNIT_PREFIXES and following is not None and _is_unit(following):
            continue
        if word == "per" and i > 0 and following is not None:
            continue
        return f"{word!r} after the value"
    return False


def _box_content(core: str) -> str | None:
    """The content of `core` when it is exactly one `\\boxed{...}`, else None."""
    match = _BOXES.match(core)
    if not match:
        return None
    at = match.end()
    while at < len(core) and core[at].isspace():
        at += 1
    if at >= len(core) or core[at] != "{":
        return None
    depth = 0
    for i in range(at, len(core)):
        depth += {"{": 1, "}": -1}.get(core[i], 0)
        if depth == 0:
            return core[at + 1 : i] if i == len(core) - 1 else None
    return None


# ---------------------------------------------------------------------- the math span
def math_refusal(core: str, features: GoldFeatures) -> str | None:
    """Why the math span `core` is not one expression with one reading (module docstring), or None."""
    tokens = [t for t in tokenize(core) if t.kind != "space"]
    limit = max(MAX_MATH_TOKENS, 2 * features.tokens)
    if len(tokens) > limit:
        return f"more than {limit} tokens"
    for i, token in enumerate(tokens):
        following = tokens[i + 1].text if i + 1 < len(tokens) else ""
        reason = _token_refusal(token, following, features)
        if reason:
            return reason
    if core.count("=") > 1 and "=" not in features.chars:
        return "more than one '='"
    if "!=" in core:
        return "a relation (!=)"
    tree = _bracket_tree(tokens)
    if isinstance(tree, str):
        return tree
    return _operands_refusal(tree)


def _token_refusal(token: Token, following: str, features: GoldFeatures) -> str | None:
    """Why one token of a math span is outside the grammar (`following`: the next token's text), or None."""
    if token.kind == "word" and token.text.lower() not in features.words:
        return f"the word {token.text!r} in the value"
    if token.kind == "letters" and len(token.text) > 1 and not _letters_allowed(token.text, following, features):
        return f"the letters {token.text!r} in the value"
    if token.kind == "command" and token.text[1:] not in CORE_COMMANDS and token.text not in features.commands:
        return f"the command {token.text}"
    if token.kind == "escape" and token.text not in CORE_ESCAPES and token.text not in features.commands:
        return f"the symbol {token.text}"
    if token.kind == "char" and token.text not in CORE_CHARS and token.text not in features.chars:
        return f"the character {token.text!r}"
    return None


def _letters_allowed(letters: str, following: str, features: GoldFeatures) -> bool:
    """Letters run together in a math span: a constant (`pi`), a function applied to a bracket (`sqrt(12)`),
    or a product of the gold's own variables (`2ab` for a gold `2ab`); not a word (`0not` is no product)."""
    lower = letters.lower()
    if lower in MATH_CONSTANTS or (lower in MATH_FUNCTIONS and following == "("):
        return True
    return set(lower) <= features.letters


def _bracket_tree(tokens: list[Token]) -> list | str:
    """The tokens nested by brackets: a group is (opener, [items]); or why the brackets do not balance."""
    stack: list[tuple[str, list]] = [("", [])]
    for token in tokens:
        if token.kind == "char" and token.text in "([{":
            stack.append((token.text, []))
        elif token.kind == "char" and token.text in _CLOSES:
            if len(stack) == 1 or stack[-1][0] not in _CLOSES[token.text]:
                return "unbalanced brackets"
            group = stack.pop()
            stack[-1][1].append(group)
        elif not (token.kind in ("command", "escape") and _command_name(token) in _SPACING):
            stack[-1][1].append(token)
    if len(stack) != 1:
        return "unbalanced brackets"
    return stack[0][1]


def _command_name(token: Token) -> str:
    return token.text[1:] if token.kind == "command" else token.text


def _has_letters(item) -> bool:
    """Whether an item (token or group) holds a variable: letters or a non-operator command."""
    if isinstance(item, tuple):
        return any(_has_letters(i) for i in item[1])
    if item.kind in ("letters", "word"):
        return True
    return item.kind == "command" and _command_name(item) not in _TWO_ARGUMENTS | _ONE_ARGUMENT | _OPERATOR_COMMANDS


def _operands_refusal(items: list) -> str | None:
    """Why a sequence of items puts two numeric operands side by side or gives a command an ambiguous
    unbraced argument, or None (checked in every bracket group too)."""
    previous_numeric = False
    i = 0
    while i < len(items):
        item = items[i]
        if isinstance(item, tuple):
            if item[0] == "{" and [getattr(t, "text", None) for t in item[1]] == [","]:
                previous_numeric, i = False, i + 1  # `1{,}000`: a thousands separator
                continue
            reason = _operands_refusal(item[1])
            if reason:
                return reason
            numeric = not _has_letters(item)
            if numeric and previous_numeric:
                return "two numbers side by side"
            previous_numeric, i = numeric, i + 1
            continue
        name = _command_name(item) if item.kind in ("command", "escape") else None
        if item.kind == "number":
            if previous_numeric:
                return "two numbers side by side"
            previous_numeric, i = True, i + 1
        elif name in _TWO_ARGUMENTS or name in _ONE_ARGUMENT:
            arguments = _arguments(items, i + 1, 2 if name in _TWO_ARGUMENTS else 1, optional=name in _ONE_ARGUMENT)
            if isinstance(arguments, str):
                return arguments
            end, args = arguments
            for arg in args:
                reason = _operands_refusal(arg[1]) if isinstance(arg, tuple) else None
                if reason:
                    return reason
            numeric = name in _TWO_ARGUMENTS and not any(_has_letters(a) for a in args)
            if numeric and previous_numeric:
                return "two numbers side by side"
            previous_numeric, i = numeric, end
        elif (item.kind == "char" and item.text in _POSTFIX | {"|"}) or name in _POSTFIX:
            i += 1  # the operand goes on: `5! 3` and `|5| 7` are still two numbers side by side
        else:
            previous_numeric, i = False, i + 1  # an operator, a letter or a function
    return None


def _arguments(items: list, at: int, needed: int, optional: bool) -> tuple[int, list] | str:
    """The `needed` arguments of a command from `items[at:]`: braced groups, or unbraced single digits,
    letters or commands (`\\frac12`, `\\sqrt 9`); (index after them, the arguments) or a refusal."""
    args: list = []
    if optional and at < len(items) and isinstance(items[at], tuple) and items[at][0] == "[":
        at += 1  # \\sqrt[3]{8}: the index
    while needed:
        if at >= len(items):
            return "a command without its argument"
        item = items[at]
        if isinstance(item, tuple):
            args.append(item)
            needed -= 1
        elif item.kind in ("number", "letters"):
            if len(item.text) > needed or "." in item.text:
                return f"an unbraced argument {item.text!r} that TeX reads differently"
            args.extend([item] * len(item.text))
            needed -= len(item.text)
        elif item.kind == "command" and _command_name(item) not in _TWO_ARGUMENTS | _ONE_ARGUMENT:
            args.append(item)
            needed -= 1
        else:
            return "a command without its argument"
        at += 1
    return at, args
