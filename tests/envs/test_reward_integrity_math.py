"""Reward integrity of MetaMathQA: answers that deny, hedge, relate or perturb the gold never succeed.

A committed wrong answer earns 0 on the first attempt, so every hostile answer below must earn 0 and
`success` False. Generated variants (hypothesis) wrap a correct answer x of a generated problem with a
different value y: negations, hedges, relations, false equations, value-changing words, ambiguous
forms; the env-level tests put the right answer only in <think> or in a second <answer> block.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.math.answer import check_answer, is_equivalent
from ragen_envs.math.env import MathEnv
from ragen_envs.math.generator import MathConfig, generate_problem

#: Examples per generated test (the report counts these).
EXAMPLES = 150
#: Each ambiguity example checks 5 forms against up to 5 values (about 25 checks).
AMBIGUOUS_EXAMPLES = 40

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
    """Ambiguous forms (a root, a factorial, a subscript, a logarithm) count only for the value they denote."""
    square = str(n * n)
    forms = {
        f"\\sqrt{{{square}}}": sympy.Integer(n),
        # an unbraced LaTeX argument is one token: `\\sqrt 16` is sqrt(1) * 6 = 6, `\\sqrt 25` is 5 sqrt(2)
        f"\\sqrt {square}": sympy.sqrt(int(square[0])) * (int(square[1:]) if len(square) > 1 else 1),
        f"{n}!": sympy.factorial(n) if n <= 12 else None,
        f"{n}_{k}": None,  # a subscript the gold does not have: right for no value
        f"\\log {10**k}": sympy.Integer(k),  # math-verify reads \\log as base 10
    }
    for answer, value in forms.items():
        for decoy in {n, n * n, int(f"{n}{k}"), 10**k, k}:
            if value is None or sympy.Integer(decoy) != value:
                assert not is_equivalent(answer, str(decoy)), (answer, decoy)
        if value is not None:
            assert is_equivalent(answer, sympy.latex(value)), (answer, value)


def _env_with_problem(seed: int) -> MathEnv:
    env = MathEnv(kinds=("change", "chain"))
    env.reset(seed=seed)
    return env


@pytest.mark.parametrize("seed", range(4))
def test_right_answer_outside_the_answer_block_earns_nothing(seed):
    env = _env_with_problem(seed)
    gold = env.oracle_answer()
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
    ):
        env = _env_with_problem(seed)
        _, reward, _, _, info = env.step(response)
        assert not info["success"] and reward <= committed_wrong, (response, reward)
    _, reward, _, _, info = _env_with_problem(seed).step(f"<think>x</think><answer>{gold}</answer>")
    assert info["success"] and reward == 1.0  # the check can fail: the right answer still earns 1
