"""MetaMathQA-style math: answer equivalence, retry rewards, generator answers vs independent arithmetic."""

from __future__ import annotations

import os
import time
from fractions import Fraction
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.data import fixture_path, load_records
from ragen_envs.math.answer import (
    MAX_ANSWER_CHARS,
    check_answer,
    exponents_are_small,
    extract_gold,
    is_equivalent,
    plain_to_sympy,
)
from ragen_envs.math.env import INCORRECT_FEEDBACK, METAMATHQA_SCHEMA, MathEnv
from ragen_envs.math.generator import (
    PROBLEM_KINDS,
    MathConfig,
    format_answer,
    generate_dataset,
    generate_problem,
)
from ragen_envs.protocol import FORMAT_PENALTY


def _respond(answer: str) -> str:
    return f"<think>working</think><answer>{answer}</answer>"


# ---------------------------------------------------------------------- equivalence
ACCEPT = [
    (
        "\\frac{1}{2}",
        [
            "1/2",
            "0.5",
            "\\frac{1}{2}",
            "\\frac12",
            "\\dfrac{1}{2}",
            "50%",
            "50\\%",
            "0.50",
            "\\boxed{1/2}",
            "$\\frac{1}{2}$",
            "1 / 2.",
        ],
    ),
    ("12", ["12", "12.0", "x = 12", "12 dollars", "The answer is 12", "\\$12", "12.00"]),
    # the forms models write around one value: boxes, one $...$ span, lead-in words, units
    (
        "12",
        [
            "\\boxed{12}",
            "$\\boxed{12}$",
            "The answer is $\\boxed{12}$.",
            "x = \\boxed{12}",
            "\\boxed{x = 12}",
            "$x = 12$",
            "$12",
            "\\$12.00",
            "Answer: 12",
            "Final answer: 12",
            "Therefore, the answer is 12",
            "There are 12 apples",
            "a total of 12",
            "12 \\text{ dollars}",
            "\\boxed{12 \\text{ dollars}}",
            "12 square feet",
            "12 miles per hour",
            "12 \\mathrm{cm}",
            "\\textbf{12}",
            "\\(12\\)",
        ],
    ),
    ("90", ["90^\\circ", "90^{\\circ}", "90 degrees"]),
    ("5", ["5 \\text{ cm}^2", "5.0", "\\boxed{5}"]),
    ("1000", ["1,000", "1000.0"]),
    ("-3", ["-3", "- 3", "-3.0", "−3", "(-3)", "\\boxed{-3}"]),
    ("x^2+5x+6", ["x**2 + 5*x + 6", "6 + 5x + x^2", "x^{2} + 5 x + 6"]),
    ("(x+2)(x+3)", ["(x+3)(x+2)", "(x+2)*(x+3)"]),  # a gold not in expanded form: no form rule
    ("2\\sqrt{3}", ["\\sqrt{12}", "sqrt(12)", "2*sqrt(3)", "2 \\sqrt 3", "\\sqrt{3} \\cdot 2"]),
    ("50", ["50%", "50"]),
    ("\\frac{7}{4}", ["1.75", "7/4", "\\frac{-7}{-4}", "\\dfrac{7}{4}", "\\left(\\frac{7}{4}\\right)"]),
    ("2ab", ["2ab", "2 a b", "2ba", "a \\cdot 2b"]),
    ("east", ["East", "\\text{east}", "east."]),
    ("(2,3)", ["(2, 3)"]),
]
REJECT = [
    ("\\frac{1}{2}", ["0.49", "0.333", "-1/2", "2", "1/3", "13 or 1/2", "0.5 or 0.49", "", "   "]),
    ("12", ["13", "13 or 12", "12, 13", "12 13", "1,2", "twelve", "120", "1.2", "1 2", "1\\,2", "12 grand"]),
    # a mixed number is also a product (1 \\cdot 3/4): the readers disagree, so it is refused
    ("\\frac{7}{4}", ["1\\frac{3}{4}", "1 \\frac{3}{4}", "1 (3/4)"]),
    ("0", ["0 (not)", "0not", "0 \\text{ is wrong}"]),
    ("20", ["(4)(5)", "4 (5)", "4 5"]),  # math-verify reads 9 (a sum), sympy 20: refused for both
    ("9", ["(4)(5)", "4 (5)", "4 5", "4\\frac{5}{1}"]),
    ("x^2+5x+6", ["x^2+5x+7", "(x+2)(x-3)", "x^2+5x"]),
    ("2\\sqrt{3}", ["3.46", "sqrt(13)"]),
    ("east", ["west", "eastward"]),
    ("(2,3)", ["(3,2)", "(2,4)"]),
    ("\\frac{7}{4}", ["1.7", "7/5"]),
]


# Equal to the gold but not its result: a computation (the question's own expression, a factorial, a root, a
# product) or a form the question did not ask for (an unexpanded product, a fraction not in lowest terms). Each
# is right by equivalence alone (check_answer(..., final_form=False)); the env pays only the final form.
COMPUTATIONS = [
    ("5", ["\\frac{10}{2}", "2 + 3", "\\sqrt{25}", "\\boxed{\\frac{10}{2}}", "x = 2+3", "5 = 2+3"]),
    ("20", ["4 \\cdot 5", "4 \\times 5", "4 × 5", "(4) \\cdot (5)", "200 - (7*18 + 7*9) + 9"]),
    ("1000", ["10^3", "10^{3}"]),
    ("120", ["5!"]),
    ("\\frac{7}{5}", ["\\frac{5}{10} + \\frac{2}{5} + \\frac{1}{2}", "\\frac{14}{10}", "14/10", "0.5 + 0.9"]),
    ("\\frac{7}{4}", ["\\frac{14}{8}", "1 + 3/4", "3.5/2"]),
    ("x^2+5x+6", ["(x+2)(x+3)", "x(x+5) + 6", "(x+2)^2 + x + 2"]),
    ("3x^{3} + 78x^{2} + 504x", ["3(x + 14)(x + 12)(x)", "3x(x+14)(x+12)", "3x^3 + (26*3)x^2 + 504x"]),
]


@pytest.mark.parametrize("gold, answers", COMPUTATIONS)
def test_a_computation_of_the_value_is_not_its_final_form(gold, answers):
    for answer in answers:
        assert not is_equivalent(answer, gold), (answer, gold)
        assert check_answer(answer, gold, final_form=False) is not None, (answer, gold)


@pytest.mark.parametrize("gold, answers", ACCEPT)
def test_equivalent_answers_are_accepted(gold, answers):
    for answer in answers:
        assert is_equivalent(answer, gold), (answer, gold)


@pytest.mark.parametrize("gold, answers", REJECT)
def test_other_answers_are_rejected(gold, answers):
    for answer in answers:
        assert not is_equivalent(answer, gold), (answer, gold)


# Answers that deny, hedge or relate the gold (gold 5): none is a correct answer.
DENIALS = [
    "5 \\text{ is wrong}",
    "x \\ne 5",
    "x \\neq 5",
    "\\text{not } 5",
    "not 5",
    "6 = 5",
    "5 = 6",
    "x = 5 = 6",
    "x = y = 5",
    "5 \\approx 6",
    "x > 5",
    "x \\le 5",
    "5 \\pm 1",
    "\\neg 5",
    "5 != 6",
    "5 is bogus",
    "minus 5",
    "5 thousand",
    "maybe 5",
    "5x",
    "5 \\text{or } 6",
]


# The red team's forms: denials and value-changing words (none of them on any word list; the answer grammar
# refuses every word that is not a lead-in or a unit) ...
DENIALS += [
    "\\text{different from } 5",
    "\\text{reject } 5",
    "5 \\text{(excluded)}",
    "\\text{anything but } 5",
    "\\text{definitely not } 5",
    "5 \\text{(wrong)}",
    "5 \\text{ is false}",
    "\\text{exclude } 5",
    "\\text{other than } 5",
    "\\text{unequal to } 5",
    "5 \\text{ -- no}",
    "\\text{never } 5",
    "5 \\text{ (ruled out)}",
    "\\text{deny } 5",
    "5 \\text{ nope}",
    "5 \\text{ grand}",
    "\\text{sqrt of } 5",
    "\\text{ten times } 5",
    "5 \\text{ k}",
    "5 \\text{ squared}",
    "\\text{half of } 5",
    "5 \\text{ dozen}",
    "5 \\text{ pairs}",
    "\\text{twice } 5",
    "5 \\text{ score}",
    "\\text{negative } 5",
    "5 \\text{ hundred}",
    "\\text{log of } 5",
    "5 \\text{ cubed}",
    "5 \\text{ million}",
    "5?",
    "5 (ish)",
]


@pytest.mark.parametrize("answer", DENIALS)
def test_answers_that_deny_or_hedge_the_gold_are_wrong(answer):
    assert check_answer(answer, "5") is None, answer


# ... and two values in one answer: each is right for none of the golds it could be aimed at.
TWO_VALUES = [
    "$4$ \\text{ and } $5$",
    "$\\boxed{4}$ $\\boxed{5}$",
    "\\boxed{4}5",
    "4\\boxed{5}",
    "\\boxed{4} \\text{ or } \\boxed{5}",
    "$4$, $5$",
    "4 \\quad 5",
    "4 \\; 5",
    "4~5",
    "\\boxed{4 \\text{ and } 5}",
    "\\boxed{4}\\boxed{5}",
    "4 (5)",
    "(4)(5)",
    "4\\frac{5}{1}",
    "\\text{4 or 5}",
    "$4$ $5$",
    "4\\!5",
    "4\\,5",
    "|4| 5",
    "4 \\\\ 5",
    "4 & 5",
]


@pytest.mark.parametrize("answer", TWO_VALUES)
def test_two_values_in_one_answer_are_wrong_for_every_gold(answer):
    for gold in ("4", "5", "9", "20", "45", "\\frac{4}{5}", "\\frac{5}{4}", "-1", "1"):
        assert check_answer(answer, gold) is None, (answer, gold)


@pytest.mark.parametrize("g", [2, 3, 7, 12])
def test_a_value_with_a_parenthesised_variant_is_paid_for_nothing(g):
    """`g (g+1/g)` was paid as g (math-verify's extraction), as g^2+1 (sympy's product) and as a mixed number
    (math-verify's LaTeX reading); one answer, three readings: it is right for none."""
    answer = f"{g} ({g}+1/{g})"
    for gold in (g, g * g + 1, Fraction(g) + g + Fraction(1, g), g + 1, Fraction(1, g)):
        gold = Fraction(gold)
        text = str(gold.numerator) if gold.denominator == 1 else f"\\frac{{{gold.numerator}}}{{{gold.denominator}}}"
        assert check_answer(answer, text) is None, (answer, text)


# One answer, two golds: it denotes one value, so it may be right for at most one of them.
AMBIGUOUS = [
    ("\\sqrt 9", "3", "9"),
    ("\\sqrt{9}", "3", "9"),
    ("4!", "24", "4"),
    ("\\log 10", "1", "10"),
    ("\\sqrt{8}", "2\\sqrt{2}", "8"),
    ("1_2", None, "1"),
    ("1_2", None, "12"),
    ("5_0", None, "5"),
    ("5_0", None, "50"),
]


@pytest.mark.parametrize("answer, right, wrong", AMBIGUOUS)
def test_an_answer_is_right_for_its_value_only(answer, right, wrong):
    """Read by equivalence alone (a rational gold's final form is a number, so the env refuses `\\sqrt 9` for 3
    as a computation; the reading is what is checked here), and by the env's rule for an irrational gold."""
    assert check_answer(answer, wrong, final_form=False) is None, (answer, wrong)
    if right is not None:
        assert check_answer(answer, right, final_form=False) is not None, (answer, right)


def test_equations_and_subscripted_golds():
    for answer in ("x = 5", "5 = x", "2+3 = 5", "\\theta = 5"):
        assert is_equivalent(answer, "5"), answer
    for answer in ("x = 2+3", "5 = 2+3", "2+3 = 1+4"):  # work without a result in final form
        assert not is_equivalent(answer, "5"), answer
    assert is_equivalent("x \\ne 5", "x \\ne 5")  # a relation the gold has is allowed
    assert is_equivalent("1011_2", "1011_2") and is_equivalent("1011_{2}", "1011_2")
    assert not is_equivalent("1011", "1011_2") and not is_equivalent("11", "1011_2")
    assert is_equivalent("not possible", "\\text{not possible}")  # a word the gold has is allowed


def test_checker_rules_and_guards():
    assert check_answer("x**2 + 5*x + 6", "x^2+5x+6") == "sympy"  # math-verify drops Python syntax
    assert check_answer("12 dollars", "12") == "latex"  # unit words around one value, read by math-verify
    assert check_answer("0.5", "\\frac{1}{2}") == "latex" and check_answer("50%", "50") == "percent"
    assert check_answer("East", "east") == "text"
    assert not is_equivalent("1" * (MAX_ANSWER_CHARS + 1), "1" * (MAX_ANSWER_CHARS + 1))
    assert not is_equivalent(None, "1")  # type: ignore[arg-type]
    assert plain_to_sympy("x**(10**10)") is None  # huge exponents are refused, not expanded
    assert plain_to_sympy("__import__('os')") is None
    assert plain_to_sympy("(1).__class__") is None


@pytest.mark.parametrize(
    "answer",
    ["9^{9^{9^{9}}}", "10^{10^{10}}", "(x+1)^{100000}", "9**9**9**9", "2^(3^4)", "2^{99+1}", "2^{n*n}"],
)
def test_power_towers_and_huge_exponents_are_refused_without_parsing(answer):
    assert not exponents_are_small(answer)
    assert not is_equivalent(answer, "12")


def test_small_and_symbolic_exponents_are_still_checked():
    for answer in ("x^{-2}", "10^3", "2^{n+1}", "2^{2n}", "x^n", "(x+1)^{2}"):
        assert exponents_are_small(answer), answer
    assert is_equivalent("2**(n+1)", "2^{n+1}") and is_equivalent("2 \\cdot 2^n", "2^{n+1}")
    assert not is_equivalent("2^{n+2}", "2^{n+1}")


def test_the_checker_works_outside_the_main_thread():
    import threading

    results = []
    worker = threading.Thread(target=lambda: results.append(is_equivalent("0.5", "\\frac{1}{2}")))
    worker.start()
    worker.join(timeout=60)
    assert results == [True]


def test_extract_gold():
    assert extract_gold("so it is 3.\nThe answer is: \\frac{1}{2}") == "\\frac{1}{2}"
    assert extract_gold("The answer is: 1\nThe answer is: 2 ") == "2"
    for bad in ("no marker", "The answer is:   ", None):
        with pytest.raises(ValueError):
            extract_gold(bad)  # type: ignore[arg-type]


def test_format_answer():
    assert format_answer(Fraction(7, 4)) == "\\frac{7}{4}"
    assert format_answer(Fraction(-7, 4)) == "-\\frac{7}{4}"
    assert format_answer(Fraction(25, 2), money=True) == "12.5"
    assert format_answer(Fraction(1, 3), money=True) == "\\frac{1}{3}"
    assert format_answer(12) == "12"


# ---------------------------------------------------------------------- generator vs independent arithmetic
def _poly_coeffs_from_roots(roots: list[int], lead: int) -> list[int]:
    """Coefficients (constant first) of lead * prod(x + r), by plain convolution."""
    coeffs = [lead]
    for r in roots:
        new = [0] * (len(coeffs) + 1)
        for i, c in enumerate(coeffs):
            new[i] += c * r
            new[i + 1] += c
        coeffs = new
    return coeffs


def _expected(item) -> str:
    """The answer recomputed from `params` with Fractions and loops (not sympy, not the generator)."""
    p, kind = item["params"], item["kind"]
    if kind == "change":
        value = Fraction(p["bill"] - sum(c * q for c, q in zip(p["counts"], p["prices"])))
    elif kind == "rate":
        value = Fraction(p["made"], p["t1"]) * p["t2"]
    elif kind == "fraction_of":
        value = p["total"] - Fraction(p["num"], p["den"]) * p["total"]
    elif kind == "percent_off":
        value = Fraction(p["price"] * (100 - p["off"]), 100)
    elif kind == "chain":
        value = Fraction(p["start"])
        for op, k in p["ops"]:
            value = {"add": value + k, "sub": value - k, "mul": value * k, "half": value / 2}[op]
    elif kind == "linear_equation":
        value = Fraction(p["d"] - p["b"], p["a"] - p["c"])
    elif kind == "evaluate_polynomial":
        value = Fraction(sum(c * p["k"] ** i for i, c in enumerate(p["coeffs"])))
    elif kind == "expand_product":
        coeffs = _poly_coeffs_from_roots(p["roots"], p["lead"])
        return " + ".join(f"({c})*x**{i}" for i, c in enumerate(coeffs))
    elif kind == "fraction_sum":
        value = sum((Fraction(n, d) for n, d in p["fractions"]), Fraction(0))
    elif kind == "quadratic_roots":
        r1, r2 = p["roots"]
        value = Fraction({"sum": r1 + r2, "product": r1 * r2, "larger": max(r1, r2)}[p["ask"]])
    else:
        raise AssertionError(kind)
    return str(value)


@pytest.mark.parametrize("kind", PROBLEM_KINDS)
def test_generator_answers_match_an_independent_computation(kind):
    for steps in (1, 3):
        config = MathConfig(kinds=(kind,), steps=steps, max_value=30)
        for item in generate_dataset(4, seed=steps, config=config):
            assert item["kind"] == kind
            assert set(item) >= {"query", "response", "type"}
            assert item["type"] == (
                "GSM_AnsAug"
                if kind in ("change", "rate", "fraction_of", "percent_off", "chain")
                else "MATH_AnsAug"
            )
            assert extract_gold(item["response"]) == item["answer"]
            expected = _expected(item)
            assert check_answer(expected, item["answer"], final_form=False), (item, expected)
            assert not is_equivalent(f"({expected}) + 1", item["answer"])


def test_word_problem_answers_are_non_negative_integers_or_money():
    for item in generate_dataset(
        60, seed=9, config=MathConfig(kinds=("change", "rate", "fraction_of", "chain"))
    ):
        assert Fraction(_expected(item)).denominator == 1 and Fraction(_expected(item)) >= 0, item


def test_difficulty_knobs_change_the_problems():
    short = generate_problem(np.random.default_rng(0), MathConfig(kinds=("fraction_sum",), steps=1))
    long = generate_problem(np.random.default_rng(0), MathConfig(kinds=("fraction_sum",), steps=4))
    assert len(short["params"]["fractions"]) == 2 and len(long["params"]["fractions"]) == 5
    big = generate_dataset(20, seed=1, config=MathConfig(kinds=("linear_equation",), max_value=1000))
    assert max(abs(it["params"]["b"]) for it in big) > 30


def test_generator_determinism_and_validation():
    assert generate_dataset(6, seed=2) == generate_dataset(6, seed=2)
    assert generate_dataset(6, seed=2) != generate_dataset(6, seed=3)
    for bad in (
        {"kinds": ()},
        {"kinds": ("nope",)},
        {"max_value": 2},
        {"steps": 0},
        {"steps": 6},
        {"max_value": True},
    ):
        with pytest.raises(ValueError):
            MathConfig(**bad)


# ---------------------------------------------------------------------- env
def _env(gold="\\frac{1}{2}", **kwargs):
    env = MathEnv(**kwargs)
    env.reset(seed=0)
    env.gold, env.query = gold, "What is 1/4 + 1/4?"
    return env


def test_first_answer_right_earns_one():
    env = _env()
    obs, r, terminated, truncated, info = env.step(_respond("0.5"))
    assert r == 1.0 and terminated and not truncated and info["success"] and info["correct"]
    assert obs.startswith("Correct!")


def test_retry_rewards_halve_per_attempt():
    env = _env(max_turns=5)
    rewards = []
    for answer in ("0.49", "1/3", "\\frac{1}{2}"):
        obs, r, terminated, truncated, info = env.step(_respond(answer))
        rewards.append(r)
    assert rewards == [0.0, 0.0, 0.25] and terminated and info["attempts"] == 3
    env = _env(max_turns=5)
    obs, r, terminated, _, info = env.step(_respond("2"))
    assert obs.startswith(INCORRECT_FEEDBACK) and "What is 1/4 + 1/4?" in obs and not terminated
    assert info["correct"] is False and info["success"] is False
    _, r, terminated, _, info = env.step(_respond("50%"))
    assert r == 0.5 and terminated and info["match_rule"] is not None


def test_a_malformed_turn_costs_the_penalty_and_counts_as_an_attempt():
    env = _env(max_turns=3)
    _, r, terminated, _, info = env.step("no tags at all")
    assert r == pytest.approx(FORMAT_PENALTY) and not terminated and info["correct"] is None
    _, r, terminated, _, _ = env.step(_respond("1/2"))
    assert r == 0.5 and terminated


def test_attempts_run_out_and_the_episode_terminates():
    env = _env(max_turns=2)
    assert not env.step(_respond("3"))[2]
    _, r, terminated, truncated, info = env.step(_respond("4"))
    assert r == 0.0 and terminated and not truncated and not info["success"]
    env = _env(max_turns=1)
    _, r, terminated, truncated, _ = env.step("garbage")
    assert r == pytest.approx(FORMAT_PENALTY) and terminated and not truncated
    _, r, _, _, info = env.step(_respond("1/2"))  # after the end: a no-op
    assert r == 0.0 and not info["success"]
    with pytest.raises(ValueError):
        MathEnv(max_turns=0)


def test_check_env_oracle_and_determinism():
    env = MathEnv()
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=4)
    assert obs.startswith("Question: ") and info["kind"] in PROBLEM_KINDS
    assert env.reset(seed=4)[0] == obs
    assert len({env.reset(seed=s)[0] for s in range(10)}) > 5
    for seed in range(15):
        env.reset(seed=seed)
        _, r, terminated, _, _ = env.step(_respond(env.oracle()[0]))
        assert r == 1.0 and terminated, (env.query, env.gold)


def test_registered_form_passes_check_env():
    if "ragen/MetaMathQA-v0" not in gym.registry:
        gym.register("ragen/MetaMathQA-v0", entry_point="ragen_envs.math.env:MathEnv")
    env = gym.make("ragen/MetaMathQA-v0", kinds=("quadratic_roots",), max_turns=3)
    check_env(env.unwrapped, skip_render_check=True)
    assert "3 attempts" in env.reset(seed=0)[1]["instructions"]




# ---------------------------------------------------------------------- data sets
def test_fixture_loads_and_the_oracle_solves_every_record():
    path = fixture_path("math_sample.jsonl")
    records = load_records(path, METAMATHQA_SCHEMA)
    assert len(records) >= 5 and {r["type"] for r in records} >= {"GSM_AnsAug", "MATH_AnsAug"}
    env = MathEnv(dataset=path)
    for index, record in enumerate(records):
        obs, info = env.reset(seed=0, options={"index": index})
        assert obs == f"Question: {record['query']}" and info["kind"] == "dataset"
        assert env.oracle()[0] == extract_gold(record["response"])
        _, r, *_ = env.step(_respond(env.oracle()[0]))
        assert r == 1.0
    env.reset(options={"index": 1})  # gold \frac{1}{2}
    assert env.step(_respond("0.5"))[1] == 1.0


def test_generated_items_round_trip_through_the_loader(tmp_path):
    import json

    path = tmp_path / "gen.jsonl"
    items = generate_dataset(5, seed=0)
    path.write_text("".join(json.dumps(it) + "\n" for it in items))
    env = MathEnv(dataset=path)
    for index, item in enumerate(items):
        env.reset(options={"index": index})
        assert env.gold == item["answer"]


@pytest.mark.parametrize(
    "line, expected",
    [
        ('{"query": "q", "response": "no marker here", "type": "GSM_AnsAug"}', "'response'"),
        ('{"query": "q", "response": "The answer is: 3"}', "missing field 'type'"),
        ('{"query": 3, "response": "The answer is: 3", "type": "t"}', "'query'"),
        ('{"query": " ", "response": "The answer is: 3", "type": "t"}', "'query': must not be empty"),
    ],
)
def test_bad_dataset_files_name_line_and_field(tmp_path, line, expected):
    path = tmp_path / "m.jsonl"
    path.write_text('{"query": "q", "response": "The answer is: 1", "type": "t"}\n' + line + "\n")
    with pytest.raises(ValueError) as err:
        MathEnv(dataset=path)
    assert "m.jsonl:2" in str(err.value) and expected in str(err.value)


# ---------------------------------------------------------------------- hostile answers: bounded in time
STALLING_ANSWERS = [
    "(((9**64)**64)**64)**64",  # a tower through parentheses: 9^(64^4)
    "((9^{64})^{64})^{64}",
    "1||" * 170,  # ambiguous absolute-value bars: 17 s in math-verify's LaTeX grammar
    "|" * 200,
    "(" * 300 + "1" + ")" * 300,
    "(10^{9})!",
    "(((2^{60})^{60})^{60})",
]


@pytest.mark.parametrize("answer", STALLING_ANSWERS, ids=range(len(STALLING_ANSWERS)))
def test_stalling_answers_are_refused_by_the_guards(answer):
    from ragen_envs.math.answer import answer_guard

    assert answer_guard(answer) is not None
    assert check_answer(answer, "12") is None


def test_guards_keep_ordinary_answers():
    from ragen_envs.math.answer import answer_guard

    for answer in ("(9^{64})^{2}", "|x-1|+|x+1|", "5!", "n!", "x != 3", "\\left(\\frac{1}{2}\\right)^{2}",
                   "((x+1)^2)^3", "10^{64}", "2^{-2}"):
        assert answer_guard(answer) is None, answer
    assert is_equivalent("((x+1)^2)^3", "(x+1)^6") and check_answer("5!", "120", final_form=False) == "latex"


#: An answer that passes the cost guards and stalls sympy for minutes inside long C calls.
STALL = "\\binom{10^{60}}{10^{30}}"
#: A gold without a final-form rule (irrational), so that STALL reaches the comparison that stalls: against a
#: rational gold the final-form rule refuses it from its text, before any parser runs.
STALL_GOLD = "\\sqrt{2}"


def test_every_check_is_bounded_in_a_worker_thread():
    """The env's checks finish outside the main thread (math-verify's signal timeout is off there): the
    stalling answers are refused by the guards, the rest are cut by the checker's hard limit, and the
    checker recovers. Verdicts only: how long a check takes depends on the machine."""
    import threading

    env = _env(gold=STALL_GOLD, max_turns=len(STALLING_ANSWERS) + 2, check_timeout=2.0)
    results = []

    def play():
        for answer in STALLING_ANSWERS + [STALL, "\\sqrt{2}"]:
            _, r, term, _, info = env.step(_respond(answer))
            results.append((answer, r, info["check_error"], term))

    worker = threading.Thread(target=play)
    worker.start()
    worker.join(timeout=600)  # a hang guard, not a speed test
    assert not worker.is_alive() and len(results) == len(STALLING_ANSWERS) + 2, results
    for answer, r, error, _ in results[:-2]:
        assert r == 0.0 and error.startswith("refused"), (answer, r, error)
    _, r, error, _ = results[-2]  # passes the guards, stalls the checker: cut at the CPU limit
    assert error == "timeout" and r == pytest.approx(FORMAT_PENALTY)
    _, r, error, term = results[-1]  # the checker recovers (a fresh worker) and the episode goes on
    assert error is None and r > 0 and term


def _in_thread(function, *args):
    """Run `function(*args)` in a thread; (the thread, the list its result is appended to)."""
    import threading

    out: list = []
    thread = threading.Thread(target=lambda: out.append(function(*args)))
    thread.start()
    return thread, out


def _wait_for_cpu(worker, seconds: float, thread) -> None:
    """Wait until the checker `worker` has spent `seconds` more CPU time (or the check in `thread` ended)."""
    start = worker.cpu_seconds()
    while thread.is_alive() and worker.cpu_seconds() - start < seconds:
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the worker's CPU time from /proc")
def test_a_check_starved_mid_parse_gets_the_same_verdict():
    """The verdict must not depend on the machine's load. A loaded machine starves the worker mid-parse; here
    it is stopped (SIGSTOP) for 6 s, longer than math-verify's own 5 s wall-clock alarm, which used to cut
    the parse then and return "wrong, no error" (0.0) where an idle machine returned "timeout" (-0.1)."""
    import signal

    from ragen_envs.math import checker

    quiet = checker.check_answer_bounded(STALL, STALL_GOLD, timeout=1.0)
    assert quiet == checker.CheckResult(None, "timeout")
    assert checker.check_answer_bounded("1/2", "0.5").error is None  # a fresh, ready worker
    worker = checker._worker
    thread, result = _in_thread(checker.check_answer_bounded, STALL, STALL_GOLD, 1.0)
    _wait_for_cpu(worker, 0.3, thread)  # inside math-verify's parse
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(6.0)
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    thread.join(timeout=300)
    assert result == [quiet]


def _burners(count: int) -> list:
    import subprocess
    import sys

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def test_verdicts_are_the_same_on_a_busy_machine():
    """The same checks give the same verdicts while other processes burn every core (3 per core, up to 12):
    a right answer is right, a hedge wrong and a stalling answer a timeout, with or without the load. (Under
    this load the stalling check takes longer than math-verify's 5 s wall-clock alarm, which used to turn its
    timeout into a plain wrong answer.)"""
    from ragen_envs.math import checker

    checks = [("1/2", "0.5"), ("\\frac{7}{4}", "1.75"), ("5 (4)", "20"), ("x**2 + 1", "x^2+1"), (STALL, STALL_GOLD)]
    quiet = [checker.check_answer_bounded(a, g, timeout=2.0) for a, g in checks]
    assert [r.rule is not None for r in quiet] == [True, True, False, True, False]
    assert quiet[-1].error == "timeout"
    assert checker.check_answer_bounded("1/2", "0.5").error is None  # a ready worker before the load starts
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    burners = _burners(min(3 * cores, 12))
    try:
        loaded = [checker.check_answer_bounded(a, g, timeout=2.0) for a, g in checks]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert loaded == quiet


def test_a_reply_over_the_cpu_limit_is_a_timeout():
    """The worker reports each check's CPU time; a reply that took longer than the limit is a timeout even when
    the caller only read it afterwards (on a busy machine it may look late), so the verdict is the CPU time's."""
    from ragen_envs.math.checker import CheckResult, _reply

    assert _reply('{"rule": "latex", "error": null, "cpu": 1.5}', 1.0) == CheckResult(None, "timeout")
    assert _reply('{"rule": "latex", "error": null, "cpu": 0.5}', 1.0) == CheckResult("latex", None)
    assert _reply("not json", 1.0).error.startswith("checker failed")


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXCPU"), reason="RLIMIT_CPU is a Unix limit")
def test_the_kernel_ends_a_worker_that_overruns_its_cpu_limit():
    """The worker's own RLIMIT_CPU (set before every check) ends it even if its caller is starved."""
    import signal
    import subprocess
    import sys

    code = (
        "from ragen_envs.math.checker import _limit_cpu, _no_core_dumps\n"
        "_no_core_dumps()\n_limit_cpu(0.1)\nwhile True: pass\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert proc.returncode == -signal.SIGXCPU


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the worker's CPU time from /proc")
def test_a_worker_ended_by_its_cpu_limit_is_a_timeout():
    import signal

    from ragen_envs.math import checker

    assert checker.check_answer_bounded("1/2", "0.5").error is None
    worker = checker._worker
    thread, result = _in_thread(checker.check_answer_bounded, STALL, STALL_GOLD, 60.0)
    _wait_for_cpu(worker, 0.1, thread)
    os.kill(worker.proc.pid, signal.SIGXCPU)  # what the kernel sends at the RLIMIT_CPU soft limit
    thread.join(timeout=300)
    assert result == [checker.CheckResult(None, "timeout")]
    assert checker.check_answer_bounded("1/2", "0.5").rule is not None  # and a fresh worker takes over


def test_the_checker_starts_ahead_of_the_first_answer():
    """The worker is started when the env is built and again at reset if it is gone (killed by a timeout, or
    in a forked vector-env worker), so an episode's first answer does not wait for sympy's import."""
    from ragen_envs.math import checker

    env = MathEnv()
    assert checker._worker is not None and checker._worker.alive()
    checker._worker.kill()
    env.reset(seed=0)
    assert checker._worker.alive()


@pytest.mark.parametrize(
    "junk",
    ["a" * MAX_ANSWER_CHARS, "a " * 256, "word " * 100, "1 + " * 100 + "1", "\\frac{a}{b}" * 40, "x" * 300 + " 5"],
    ids=["letters", "spaced letters", "words", "long sum", "fractions", "letters and a number"],
)
def test_junk_answers_are_refused_before_any_parser_runs(junk, monkeypatch):
    """512 letters cost math-verify about a second of CPU; the answer grammar refuses such answers (words
    outside its lists, more than MAX_MATH_TOKENS tokens) before math-verify or sympy sees them."""
    from ragen_envs.math import answer

    answer._gold_forms("12")  # the gold is read once and cached, before the parsers are watched
    calls: list = []
    monkeypatch.setattr(answer, "_mv_parse", lambda *args: calls.append(args) or [])
    monkeypatch.setattr(answer, "plain_to_sympy", lambda *args: calls.append(args))
    assert answer.check_answer(junk[:MAX_ANSWER_CHARS], "12") is None
    assert calls == []


_PIECES = ["1", "12", "0.5", "x", "ab", " ", "$", "\\$", "\\boxed{", "{", "}", "(", ")", "[", "|", "\\frac", "\\sqrt",
           "^", "_", "=", "!", "%", ",", ".", "\\text{", "dollars", "not", "\\,", "\\\\", "\\(", "−", "\\left(",
           "é", "\x00", "\\"]  # fmt: skip


@given(
    text=st.lists(st.sampled_from(_PIECES), max_size=12).map("".join),
    gold=st.sampled_from(["12", "\\frac{1}{2}", "x^2+1", "east", "1011_2", "x \\ne 5", "2\\frac{1}{2}", "50\\%"]),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_answer_text_gets_a_verdict_without_raising(text, gold):
    assert check_answer(text, gold) in (None, "latex", "sympy", "percent", "text")


def test_check_timeout_argument_is_validated():
    for bad in (0, -1, "2", True, 1e9):
        with pytest.raises(ValueError, match="check_timeout"):
            MathEnv(check_timeout=bad)


def test_bounded_checker_survives_a_killed_worker():
    from ragen_envs.math import checker

    assert checker.check_answer_bounded("0.5", "\\frac{1}{2}").rule == "latex"
    checker._worker.proc.kill()
    checker._worker.proc.wait()
    result = checker.check_answer_bounded("0.5", "\\frac{1}{2}")
    assert result.rule == "latex" or result.error.startswith("checker failed")
    assert checker.check_answer_bounded("0.5", "\\frac{1}{2}").rule == "latex"
    assert checker.check_answer_bounded(None, "1") == checker.CheckResult(None, "refused: not a string")  # type: ignore[arg-type]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the CPU-time limit reads /proc")
def test_a_starved_checker_is_not_a_timeout():
    """The limit is the worker's CPU time: a worker that gets no CPU for longer than the limit (a loaded
    machine; here it is stopped with SIGSTOP for 2.5 s against a 1 s limit) still returns the right answer."""
    import signal
    import threading

    from ragen_envs.math import checker

    assert checker.check_answer_bounded("1/2", "0.5", timeout=5.0).error is None  # a ready worker
    pid = checker._worker.proc.pid
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(2.5, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        t0 = time.monotonic()
        result = checker.check_answer_bounded("1/2", "0.5", timeout=1.0)
        waited = time.monotonic() - t0
    finally:
        resume.join()
        os.kill(pid, signal.SIGCONT)
    assert result.error is None and result.rule is not None, result
    assert waited >= 2.0  # it really waited through the stop, longer than the limit
