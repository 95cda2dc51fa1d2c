"""Reward integrity of MetaMathQA: answers that deny, hedge, relate or perturb the gold never succeed.

A committed wrong answer earns 0 on the first attempt, so every hostile answer below must earn 0 and
`success` False. Generated variants (hypothesis) wrap a correct answer x of a generated problem with a
different value y: negations, hedges, relations, false equations, value-changing words, ambiguous
forms; a grammar of hedges (`hedge_templates.MATH_*`) writes two values in one answer, or one value with a
word outside the answer grammar's closed lists, and no gold the hedge could be aimed at is paid. Correct
answers in the forms models write are generated from exact fractions (the independent reference) and must
pass. The env-level tests put the right answer only in <think> or in a second <answer> block.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hedge_templates import (
    MATH_HEDGE_WORDS,
    MATH_SEPARATORS,
    MATH_WORD_FORMS,
    MATH_WRAPPERS,
    math_qualified,
    math_two_values,
)
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ragen_envs.math.answer import check_answer, is_equivalent
from ragen_envs.math.env import MathEnv
from ragen_envs.math.generator import MathConfig, generate_problem
from ragen_envs.math.grammar import LEAD_WORDS, UNIT_WORDS

#: Examples per generated test (the report counts these).
EXAMPLES = 150
#: Each ambiguity example checks 5 forms against up to 5 values (about 25 checks).
AMBIGUOUS_EXAMPLES = 40
#: Each hedge example checks one answer against up to 9 golds.
HEDGE_EXAMPLES = 200

# {x}: the correct answer; {y}: a different value.
HOSTILE_TEMPLATES = (
    "not {x}",
    "\\text{not } {x}",
    "{x} \\text{ is wrong}",
    "{x} is wrong",
    "{x} is incorrect",
    "{x} is false",
    "it is not {x}",
    "x \\ne {x}",
    "x \\neq {x}",
    "x \\not= {x}",
    "{x} != {y}",
    "{y} = {x}",
    "{x} = {y}",
    "x = {y} = {x}",
    "{x} \\approx {y}",
    "{y} \\approx {x}",
    "x < {x}",
    "x > {x}",
    "x \\le {x}",
    "x \\geq {x}",
    "{x} \\pm 1",
    "{x} or {y}",
    "{y} or {x}",
    "{x}, {y}",
    "\\{{x}, {y}\\}",
    "[{x}, {y}]",
    "({x}, {y})",
    "\\boxed{{x}} \\boxed{{y}}",
    "either {x} or {y}",
    "maybe {x}",
    "probably {x}",
    "about {x}",
    "approximately {x}",
    "roughly {x}",
    "{x} or so",
    "at least {x}",
    "less than {x}",
    "minus {x}",
    "{x} thousand",
    "{x} squared",
    "{x} and a half",
    "{x} is bogus",
    "{x}x",
    "{x}_0",
    "{x} (not {y})",
    # the red team's forms: one answer, several readings or words that deny or change the value
    "{x} ({y})",
    "{x} \\text{(excluded)}",
    "\\text{different from } {x}",
    "\\text{reject } {x}",
    "{x} \\text{ grand}",
    "\\text{sqrt of } {x}",
    "\\text{ten times } {x}",
    "${y}$ \\text{ and } ${x}$",
    "$\\boxed{{y}}$ $\\boxed{{x}}$",
    "\\boxed{{x}}{y}",
    "{y}\\boxed{{x}}",
)


def _golds(n: int, seed: int) -> list[str]:
    """Gold answers of generated problems with a numeric answer (integers, money, fractions)."""
    rng = np.random.default_rng(seed)
    config = MathConfig(kinds=("change", "rate", "fraction_of", "percent_off", "chain", "fraction_sum"))
    return [generate_problem(rng, config)["answer"] for _ in range(n)]


GOLDS = _golds(12, seed=7)


def _plain(gold: str) -> str:
    """A plain rendering of a numeric gold (`\\frac{7}{4}` -> `7/4`)."""
    if gold.startswith("-\\frac{") or gold.startswith("\\frac{"):
        sign = "-" if gold.startswith("-") else ""
        num, den = gold[gold.index("{") + 1 : gold.index("}")], gold[gold.rindex("{") + 1 : -1]
        return f"{sign}{num}/{den}"
    return gold


@given(
    gold=st.sampled_from(GOLDS),
    template=st.sampled_from(HOSTILE_TEMPLATES),
    offset=st.integers(1, 40),
    latex=st.booleans(),
)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_wrapped_negated_or_hedged_answers_are_wrong(gold, template, offset, latex):
    x = gold if latex else _plain(gold)
    y = str(Fraction(_plain(gold)) + offset)
    answer = template.replace("{x}", x).replace("{y}", y)
    assert check_answer(answer, gold) is None, (answer, gold)


@given(n=st.integers(2, 30), k=st.integers(0, 9))
@settings(max_examples=AMBIGUOUS_EXAMPLES, deadline=None)
def test_one_answer_is_not_right_for_two_values(n, k):
    """Ambiguous forms (a root, a factorial, a subscript, a logarithm) count only for the value they denote, and
    as computations they are not a number's final form."""
    square = str(n * n)
    forms = {
        f"\\sqrt{{{square}}}": sympy.Integer(n),
        # an unbraced LaTeX argument is one token: TeX reads `\\sqrt 16` as sqrt(1) * 6, a person as 4, so a
        # multi-digit one is refused (right for no value); a single digit is the whole argument
        f"\\sqrt {square}": sympy.Integer(n) if len(square) == 1 else None,
        f"{n}!": sympy.factorial(n) if n <= 12 else None,
        f"{n}_{k}": None,  # a subscript the gold does not have: right for no value
        f"\\log {10**k}": sympy.Integer(k),  # math-verify reads \\log as base 10
    }
    for answer, value in forms.items():
        for decoy in {n, n * n, int(f"{n}{k}"), 10**k, k, int(square[0]) * int(square[1:] or 1)}:
            if value is None or sympy.Integer(decoy) != value:
                assert not is_equivalent(answer, str(decoy)), (answer, decoy)
        if value is not None:  # read right, and still not the final form of a number: paid nothing
            assert check_answer(answer, sympy.latex(value), final_form=False) is not None, (answer, value)
            assert not is_equivalent(answer, sympy.latex(value)), (answer, value)


# ---------------------------------------------------------------------- a grammar of hedges (generated)
def _latex(value: Fraction) -> str:
    """An exact value as a MetaMathQA gold: an integer, or `\\frac{p}{q}` (sign in front)."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _written(value: Fraction, latex: bool) -> str:
    """How an answer writes a non-negative value: an integer, `p/q` or `\\frac{p}{q}`."""
    if value.denominator == 1:
        return str(value.numerator)
    return _latex(value) if latex else f"{value.numerator}/{value.denominator}"


def _aimed_at(x: Fraction, y: Fraction) -> set[str]:
    """Every gold an answer holding x and y could be aimed at: each value, their sum, product, differences,
    quotients, and the digits of both run together (computed with exact fractions, not by the checker)."""
    targets = {x, y, x + y, x * y, x - y, y - x}
    targets |= {x / y} if y else set()
    targets |= {y / x} if x else set()
    golds = {_latex(t) for t in targets}
    if x.denominator == y.denominator == 1:
        golds.add(f"{x.numerator}{y.numerator}")
    return golds


VALUES = st.one_of(
    st.integers(0, 60).map(Fraction),
    st.builds(Fraction, st.integers(1, 30), st.integers(2, 12)),
)
#: Random lowercase words that the answer grammar does not list (no lead-in, no unit, not "percent").
_LISTED = LEAD_WORDS | UNIT_WORDS | {"percent", "per", "cent", "square", "sq", "cubic", "cu"}
OTHER_WORDS = st.text("abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=9).filter(
    lambda w: w not in _LISTED and w.removesuffix("s") not in UNIT_WORDS and w.removesuffix("es") not in UNIT_WORDS
)


@given(
    x=VALUES,
    y=VALUES,
    first=st.sampled_from(MATH_WRAPPERS),
    separator=st.sampled_from(MATH_SEPARATORS),
    second=st.sampled_from(MATH_WRAPPERS),
    latex=st.booleans(),
)
@example(x=Fraction(5), y=Fraction(7, 5), first="{}", separator=" ", second="({})", latex=False)  # 5 (7/5)
@example(x=Fraction(5), y=Fraction(4), first="{}", separator=" ", second="({})", latex=False)  # 5 (4)
@example(x=Fraction(4), y=Fraction(5), first="${}$", separator=" \\text{ and } ", second="${}$", latex=False)
@example(x=Fraction(4), y=Fraction(5), first="$\\boxed{{{}}}$", separator=" ", second="$\\boxed{{{}}}$", latex=False)
@example(x=Fraction(5), y=Fraction(7), first="|{}|", separator=" ", second="{}", latex=False)  # |5| 7 = 35
@example(x=Fraction(2), y=Fraction(1, 2), first="{}", separator="", second="{}", latex=True)  # 2\frac{1}{2}
@settings(max_examples=HEDGE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_two_values_in_one_answer_are_paid_for_no_gold(x, y, first, separator, second, latex):
    assume(x != y)  # a list of one value twice (`5, 5`, math-verify's set {5}) states one value
    answer = math_two_values(_written(x, latex), _written(y, latex), first, separator, second)
    for gold in _aimed_at(x, y):
        assert check_answer(answer, gold) is None, (answer, gold)


@given(
    x=VALUES,
    y=VALUES,
    form=st.sampled_from(MATH_WORD_FORMS),
    word=st.one_of(st.sampled_from(MATH_HEDGE_WORDS), OTHER_WORDS),
    latex=st.booleans(),
)
@example(x=Fraction(5), y=Fraction(6), form="<x> <w>", word="grand", latex=False)
@example(x=Fraction(5), y=Fraction(6), form="\\text{<w> } <x>", word="reject", latex=False)
@example(x=Fraction(5), y=Fraction(6), form="<x> \\text{(<w>)}", word="excluded", latex=False)
@settings(max_examples=HEDGE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_word_outside_the_answer_grammar_is_never_paid(x, y, form, word, latex):
    answer = math_qualified(form, _written(x, latex), _written(y, latex), word)
    for gold in _aimed_at(x, y):
        assert check_answer(answer, gold) is None, (answer, gold)


#: Correct answers as models write them ({v}: the value, as an integer, `p/q`, `\\frac{p}{q}` or a decimal).
RIGHT_FORMS = (
    "{v}",
    "\\boxed{{{v}}}",
    "${v}$",
    "$\\boxed{{{v}}}$",
    "x = {v}",
    "x = \\boxed{{{v}}}",
    "The answer is {v}",
    "The answer is ${v}$.",
    "Answer: {v}",
    "So there are {v} cookies",
    "{v} dollars",
    "{v} \\text{{ cm}}",
    "\\left({v}\\right)",
)


def _spellings(value: Fraction) -> list[str]:
    """The ways to write `value`: as a fraction in LaTeX and plain, as a `\\dfrac`, and as a decimal when it
    terminates (from the exact fraction, not from any parser)."""
    spellings = [_latex(value), _latex(value).replace("\\frac", "\\dfrac")]
    if value.denominator != 1:
        spellings.append(f"{value.numerator}/{value.denominator}")
    q = value.denominator
    while q % 2 == 0:
        q //= 2
    while q % 5 == 0:
        q //= 5
    if q == 1:
        digits = 0
        while (value * 10**digits).denominator != 1:
            digits += 1
        scaled = abs(value.numerator * 10**digits // value.denominator)
        text = str(scaled).rjust(digits + 1, "0")
        sign = "-" if value < 0 else ""
        spellings.append(sign + (f"{text[:-digits]}.{text[-digits:]}" if digits else text))
    return spellings


@given(
    value=st.builds(Fraction, st.integers(-200, 200), st.sampled_from([1, 1, 2, 3, 4, 5, 8, 10, 12, 25])),
    form=st.sampled_from(RIGHT_FORMS),
    spelling=st.integers(0, 3),
)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_correct_answers_in_model_forms_are_paid(value, form, spelling):
    """A right answer in any of the forms models write is accepted, and the same form with a value off by a
    small amount is not (the reference is Fraction arithmetic)."""
    spellings = _spellings(value)
    gold = _latex(value)
    answer = form.format(v=spellings[spelling % len(spellings)])
    assert check_answer(answer, gold) is not None, (answer, gold)
    off = value + Fraction(1, 7)
    wrong = form.format(v=_spellings(off)[spelling % len(_spellings(off))])
    assert check_answer(wrong, gold) is None, (wrong, gold)


# ---------------------------------------------------------------------- env level
def _env_with_problem(seed: int) -> MathEnv:
    env = MathEnv(kinds=("change", "chain"))
    env.reset(seed=seed)
    return env


@pytest.mark.parametrize("seed", range(4))
def test_right_answer_outside_the_answer_block_earns_nothing(seed):
    env = _env_with_problem(seed)
    gold = env.oracle()[0]
    wrong = str(Fraction(_plain(gold)) + 1)
    committed_wrong = _env_with_problem(seed).step(f"<think>guess</think><answer>{wrong}</answer>")[1]
    for response in (
        f"<think>it is {gold}</think><answer>{wrong}</answer>",
        f"<think>x</think><answer>{wrong}</answer><answer>{gold}</answer>",
        f"<think>x</think><answer>{gold}</answer><answer>{wrong}</answer>",
        f"<think>x</think><answer>{wrong}</answer> {gold}",
        f"<answer>{gold} or {wrong}</answer>",
        f"<think>x</think><answer>{gold} \\text{{ is wrong}}</answer>",
        f"<think>x</think><answer>{wrong} = {gold}</answer>",
        f"<think>x</think><answer>{gold} ({wrong})</answer>",
        f"<think>x</think><answer>$\\boxed{{{wrong}}}$ $\\boxed{{{gold}}}$</answer>",
    ):
        env = _env_with_problem(seed)
        _, reward, _, _, info = env.step(response)
        assert not info["success"] and reward <= committed_wrong, (response, reward)
    _, reward, _, _, info = _env_with_problem(seed).step(f"<think>x</think><answer>{gold}</answer>")
    assert info["success"] and reward == 1.0  # the check can fail: the right answer still earns 1


# ---------------------------------------------------------------------- restating the question
def _math_spans(text: str) -> list[str]:
    """Every `$...$` span of a question, in order."""
    import re

    return re.findall(r"\$([^$]+)\$", text)


def test_restating_the_question_is_never_paid():
    """An outside review found that answering with the question's own expression (`\\frac{5}{10} + \\frac{2}{5} +
    \\frac{1}{2}` for a sum, `3(x + 14)(x + 12)(x)` for a product to expand) was paid in full: 35 of seeds 0-149,
    every `fraction_sum` and `expand_product` problem. Every span of every question, for 150 seeds of every kind,
    is paid nothing (no question here already states its answer), while the gold is paid."""
    paid, spans = [], 0
    for seed in range(150):
        env = MathEnv()
        obs, _ = env.reset(seed=seed)
        gold = env.oracle()[0]
        for span in _math_spans(obs):
            spans += 1
            env = MathEnv()
            env.reset(seed=seed)
            _, reward, _, _, info = env.step(f"<think>x</think><answer>{span}</answer>")
            if info["success"] or reward > 0:
                paid.append((seed, span, gold))
    assert spans >= 60 and paid == []


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), how=st.sampled_from(["{g} + 0", "2 \\cdot {g} - {g}", "({g}) \\cdot 1",
                                                          "\\frac{{2 \\cdot {g}}}{{2}}", "{g} + 1 - 1"]))
def test_a_computation_equal_to_the_gold_is_not_paid(seed, how):
    """The class of the finding: any expression equal to the gold that is not its final form (a number for a
    number, an expanded polynomial for one) is a computation, not the answer."""
    item = generate_problem(np.random.default_rng(seed))
    gold = item["answer"]
    answer = how.format(g=f"({gold})" if any(c in gold for c in "+-") else gold)
    assert check_answer(answer, gold, final_form=False) is not None, (answer, gold)  # equal to the gold
    assert not is_equivalent(answer, gold), (answer, gold)
