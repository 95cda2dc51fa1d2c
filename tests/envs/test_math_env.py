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
    ("1000", ["1,000", "1000.0", "10^3"]),
    ("-3", ["-3", "- 3", "-3.0"]),
    ("x^2+5x+6", ["(x+2)(x+3)", "x**2 + 5*x + 6", "6 + 5x + x^2", "x^{2} + 5 x + 6"]),
    ("2\\sqrt{3}", ["\\sqrt{12}", "sqrt(12)", "2*sqrt(3)"]),
    ("50", ["50%", "50"]),
    ("\\frac{7}{4}", ["1.75", "7/4", "\\frac{14}{8}"]),
    ("east", ["East", "\\text{east}", "east."]),
    ("(2,3)", ["(2, 3)"]),
]
REJECT = [
    ("\\frac{1}{2}", ["0.49", "0.333", "-1/2", "2", "1/3", "13 or 1/2", "0.5 or 0.49", "", "   "]),
    ("12", ["13", "13 or 12", "12, 13", "12 13", "1,2", "twelve", "120", "1.2"]),
    ("x^2+5x+6", ["x^2+5x+7", "(x+2)(x-3)", "x^2+5x"]),
    ("2\\sqrt{3}", ["3.46", "sqrt(13)"]),
    ("east", ["west", "eastward"]),
    ("(2,3)", ["(3,2)", "(2,4)"]),
    ("\\frac{7}{4}", ["1.7", "7/5"]),
]


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


@pytest.mark.parametrize("answer", DENIALS)
def test_answers_that_deny_or_hedge_the_gold_are_wrong(answer):
    assert check_answer(answer, "5") is None, answer


# One answer, two golds: it denotes one value, so it may be right for at most one of them.
AMBIGUOUS = [
    ("\\sqrt 9", "3", "9"),
    ("\\sqrt{9}", "3", "9"),
    ("4!", "24", "4"),
    ("\\log 10", "1", "10"),
    ("1_2", None, "1"),
    ("1_2", None, "12"),
    ("5_0", None, "5"),
    ("5_0", None, "50"),
]


@pytest.mark.parametrize("answer, right, wrong", AMBIGUOUS)
def test_an_answer_is_right_for_its_value_only(answer, right, wrong):
    assert not is_equivalent(answer, wrong), (answer, wrong)
    if right is not None:
        assert is_equivalent(answer, right), (answer, right)


def test_equations_and_subscripted_golds():
    for answer in ("x = 5", "5 = x", "2+3 = 5", "x = 2+3", "\\theta = 5"):
        assert is_equivalent(answer, "5"), answer
    assert is_equivalent("x \\ne 5", "x \\ne 5")  # a relation the gold has is allowed
    assert is_equivalent("1011_2", "1011_2") and is_equivalent("1011_{2}", "1011_2")
    assert not is_equivalent("1011", "1011_2") and not is_equivalent("11", "1011_2")
    assert is_equivalent("not possible", "\\text{not possible}")  # a word the gold has is allowed


def test_checker_rules_and_guards():
    assert check_answer("x**2 + 5*x + 6", "x^2+5x+6") == "sympy"  # math-verify drops Python syntax
    assert check_answer("12 dollars", "12") == "math-verify"  # free text around one value
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
            assert is_equivalent(expected, item["answer"]), (item, expected)
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
        _, r, terminated, _, _ = env.step(_respond(env.oracle_answer()))
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
        assert env.oracle_answer() == extract_gold(record["response"])
        _, r, *_ = env.step(_respond(env.oracle_answer()))
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
    assert is_equivalent("((x+1)^2)^3", "(x+1)^6") and is_equivalent("5!", "120")


def test_every_check_is_bounded_in_a_worker_thread():
    """The env's checks finish in bounded time outside the main thread (math-verify's signal timeout is
    off there): the stalling answers are refused at once, the rest are cut by the checker's hard limit."""
    import threading
    import time

    env = _env(max_turns=len(STALLING_ANSWERS) + 2, check_timeout=2.0)
    results = []

    def play():
        for answer in STALLING_ANSWERS + ["\\binom{10^{60}}{10^{30}}", "1/2"]:
            t0 = time.monotonic()
            _, r, term, _, info = env.step(_respond(answer))
            results.append((answer, time.monotonic() - t0, r, info["check_error"], term))

    worker = threading.Thread(target=play)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive() and len(results) == len(STALLING_ANSWERS) + 2, results
    for answer, seconds, r, error, _ in results[:-2]:
        # refused before the checker's 2 s limit could cut it (not a speed test: a loaded CI machine is slow)
        assert seconds < 2.0 and r == 0.0 and error.startswith("refused"), (answer, seconds, r, error)
    _, seconds, r, error, _ = results[-2]  # passes the guards, stalls the checker: cut at the limit
    assert error == "timeout" and r == pytest.approx(FORMAT_PENALTY) and seconds < 2.0 + 5.0
    _, _, r, error, term = results[-1]  # the checker recovers (a fresh worker) and the episode goes on
    assert error is None and r > 0 and term


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
