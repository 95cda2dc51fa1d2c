"""Reward integrity of `ragen/Code-v0`: programs that do not solve the task earn no success.

Hostile answers: a constant, the identity, a memoriser of the statement's example, a lookup table of
the tests repair feedback revealed, a float that rounds to the right integer only approximately, an
int too large for a float, a program that sleeps, and the red team's wrong readings of a statement
(the textbook palindrome check, FizzBuzz without its "both" branch, ...; every family's wrong readings
over many seeds are in test_code_wrong_readings.py). Most checks run in-process against the judge
(`values_equal` / `answer_passes`) and the generated tests; a few run real programs in the sandbox.

"No reward above a committed wrong answer" reads here: what the hostile program learns from the
example or from feedback earns nothing; its reward is at most that of its own fallback (the constant
it answers for an input it has not seen; for the example exactly that), and it never succeeds.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.code import FAMILIES, CodeEnv, CodeTaskConfig, answer_passes, generate_task, values_equal
from ragen_envs.code.tasks import passing_standins

SEEDS = range(200)
CONFIGS = {
    "default": {},
    "tiny": {"max_len": 2, "max_value": 5},  # few distinct inputs: the hardest case for the generator
    "one test": {"num_tests": 1},  # one hidden test can never defeat every constant: extras are needed
}


def _answer(program: str) -> str:
    return f"<think>t</think><answer>\n```python\n{program}\n```\n</answer>"


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _binet(n: int) -> float:
    s5 = math.sqrt(5)
    return (((1 + s5) / 2) ** n - ((1 - s5) / 2) ** n) / s5


# ----------------------------------------------------------------------------------------------- stand-ins
def _key(task, test):
    """A test's input as a program that splits its stdin sees it (or the arguments)."""
    return tuple(test.input.split()) if task.fn_name is None else json.dumps(list(test.args))


def _answer_of(task, test):
    return test.output if task.fn_name is None else test.expected


def _identity(task, test):
    return test.input if task.fn_name is None else test.args[0]


def _standins(task):
    """Independent stand-ins (not the generator's own): constants (every hidden answer, which is
    complete for exact answers, and a few usual guesses), the identity, and lookup tables of the
    example alone and of every public test, falling back to those constants or to the identity."""
    hidden_answers = [_answer_of(task, t) for t in task.tests]
    guesses = ["0\n", "", "1\n"] if task.fn_name is None else [True, False, 0, 1, [], None, ""]
    constants = hidden_answers + guesses
    example = {_key(task, task.public_tests[0]): _answer_of(task, task.public_tests[0])}
    public = {_key(task, t): _answer_of(task, t) for t in task.public_tests}
    out = {f"constant {c!r}": (lambda t, c=c: c) for c in constants}
    out["identity"] = lambda t: _identity(task, t)
    for name, table in (("example", example), ("public tests", public)):
        for c in constants:
            out[f"{name} lookup, else {c!r}"] = lambda t, table=table, c=c: table.get(_key(task, t), c)
        out[f"{name} lookup, else identity"] = lambda t, table=table: table.get(_key(task, t), _identity(task, t))
    return out


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_standin_fails_a_hidden_test_on_every_seed(family, config):
    """Seeds 0..199 of every family and three configs: each stand-in fails at least one hidden test;
    no hidden test repeats a public input (up to whitespace); the example is public, not hidden."""
    cfg = CodeTaskConfig(families=(family,), **CONFIGS[config])
    for seed in SEEDS:
        task = generate_task(np.random.default_rng(seed), cfg)
        assert len(task.tests) >= cfg.num_tests and len(task.public_tests) == cfg.num_public_tests
        passing = [
            name for name, f in _standins(task).items() if all(answer_passes(task, t, f(t)) for t in task.tests)
        ]
        assert not passing, (family, config, seed, passing)
        assert not passing_standins(task), (family, config, seed)
        seen = {_key(task, t) for t in task.public_tests}
        assert not any(_key(task, t) in seen for t in task.tests), (family, config, seed)


@pytest.mark.parametrize("seed", [8, 12, 17, 37, 38, 49])
def test_always_true_is_no_palindrome_checker(seed):
    # These seeds once had six palindromes as hidden tests: `return True` passed them all.
    task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=("is_palindrome",)))
    assert not all(answer_passes(task, t, True) for t in task.tests)
    assert not all(answer_passes(task, t, False) for t in task.tests)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 2**32 - 1),
    num_tests=st.integers(1, 8),
    constant=st.one_of(
        st.integers(-100, 100), st.booleans(), st.none(), st.text(max_size=8),
        st.lists(st.integers(-50, 50), max_size=8),
    ),
)
def test_no_constant_answer_passes_a_generated_task(family, seed, num_tests, constant):
    task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=(family,), num_tests=num_tests))
    answer = f"{constant}\n" if task.fn_name is None else constant
    assert not all(answer_passes(task, t, answer) for t in task.tests)


def _perturb(value, kind: int):
    """A near miss of a correct function answer."""
    if isinstance(value, bool):
        return [not value, int(value), str(value), [value]][kind % 4]
    if isinstance(value, int):
        return [value + 1, value - 1, float(value) + 0.5, str(value), [value], value != 0][kind % 6]
    if isinstance(value, list):
        options = [value + [0], value[:-1] if value else [0], [value], tuple(value) + (1,), str(value)]
        if len(value) > 1 and value != value[::-1]:
            options.append(value[::-1])
        return options[kind % len(options)]
    raise AssertionError(f"unexpected answer type {type(value)}")


def _perturb_text(text: str, kind: int) -> str:
    """A near miss of a correct stdout (wrapped, hedged, prefixed, with a changed character)."""
    body = text.rstrip("\n")
    options = [
        body + "\n0\n",  # an extra candidate line (a hedge)
        f"[{body}]\n",
        f"Answer: {body}\n",
        body + "\n" + body + "\n",
        " " + body + "\n",  # leading whitespace counts
    ]
    digits = [i for i, ch in enumerate(body) if ch.isdigit() or ch.isalpha()]
    if digits:
        i = digits[kind % len(digits)]
        ch = body[i]
        new = str((int(ch) + 1) % 10) if ch.isdigit() else ("a" if ch.lower() != "a" else "b")
        options.append(body[:i] + new + body[i + 1 :] + "\n")
    return options[kind % len(options)]


@settings(max_examples=300, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 2**32 - 1), kind=st.integers(0, 60))
def test_a_perturbed_correct_answer_fails(family, seed, kind):
    task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=(family,)))
    test = task.tests[kind % len(task.tests)]
    if task.fn_name is None:
        assert answer_passes(task, test, test.output)
        near = _perturb_text(test.output, kind)
    else:
        assert answer_passes(task, test, test.expected)
        near = _perturb(test.expected, kind)
    assert not answer_passes(task, test, near), (family, test, near)


# ----------------------------------------------------------------------------------------------- judge
def test_a_float_that_rounds_to_the_answer_is_wrong_for_an_int_test():
    # Binet in doubles: within 1e-6 relative of fib(n) (a tolerance accepted it), but not equal to it;
    # rounded, it is the wrong integer from fib(71) on.
    for n in range(72, 91):
        assert math.isclose(_binet(n), _fib(n), rel_tol=1e-12) and _binet(n) != _fib(n)
        assert not values_equal(_binet(n), _fib(n))
    assert [n for n in range(60, 91) if round(_binet(n)) != _fib(n)] == list(range(71, 91))
    for n in range(60, 91):
        assert values_equal(round(_binet(n)), _fib(n)) == (n < 71)
        assert values_equal(_binet(n), _fib(n)) == (_binet(n) == _fib(n))
    # A float of exactly the right value is right (JSON has one number type); a bool never is.
    assert values_equal(3.0, 3) and values_equal(3, 3.0) and values_equal(0.1 + 0.2, 0.3)
    assert not values_equal(True, 1) and not values_equal(1, True) and not values_equal(1.0, True)
    assert not values_equal(2.0000000001, 2) and not values_equal([1, 2.0000001], [1, 2])


def test_huge_and_odd_values_are_wrong_answers_not_exceptions():
    for expected in (1.5, [1.5], {"a": 1.5}, 1e308, float("inf")):
        got = 10**400 if not isinstance(expected, (list, dict)) else (
            [10**400] if isinstance(expected, list) else {"a": 10**400}
        )
        assert values_equal(got, expected) is False
    assert values_equal(float("inf"), float("inf")) and not values_equal(float("inf"), 1e308)
    assert values_equal(float("nan"), float("nan")) and not values_equal(float("nan"), 1.0)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert values_equal(deep, deep) is False  # RecursionError inside: a failed test

    class Hostile:
        def __eq__(self, other):
            raise RuntimeError("no")

    assert values_equal(Hostile(), Hostile()) is False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(10**300, 10**400)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(a=_JSON, b=_JSON)
def test_the_judge_never_raises(a, b):
    assert values_equal(a, b) in (True, False)
    assert values_equal(b, a) in (True, False)


@settings(max_examples=300, deadline=None)
@given(
    e=st.integers(-(10**30), 10**30),
    d=st.floats(-1e6, 1e6, allow_nan=False).filter(lambda v: v != 0),
    k=st.integers(-5, 5).filter(lambda v: v != 0),
)
def test_an_int_test_takes_only_the_exact_value(e, d, k):
    assert values_equal(e, e) and not values_equal(e + k, e)
    near = float(e) + d
    assert values_equal(near, e) == (near == e)  # exact comparison of int and float, no tolerance
    assert not values_equal(bool(e), e)


# ----------------------------------------------------------------------------------------------- in the sandbox
FAST = {"wall_seconds": 2.0, "cpu_seconds": 1}
# A generous per-submission budget where the budget is not under test: on a loaded machine a trivial
# run can take a second, and the default budget (the per-test wall limit) is shared by all tests.
BUDGET = 30.0


def _step(env, program: str):
    return env.step(_answer(program))


@pytest.mark.parametrize("seed", [8, 12, 17, 37, 38, 49])
def test_return_true_does_not_solve_is_palindrome(seed):
    env = CodeEnv(families=("is_palindrome",), limits=FAST, submission_wall_seconds=BUDGET)
    env.reset(seed=seed)
    _, reward, _, _, info = _step(env, "def is_palindrome(s):\n    return True")
    assert not info["success"] and reward < 1.0, info["verdicts"]


# The red team's wrong readings, each at a seed where it once passed every hidden test (seed: the task's
# parameters): they must now fail one in the sandbox too, while the reference passes all.
RED_TEAM = {
    "textbook palindrome (is_palindrome 1: case matters, every character)": (
        "is_palindrome", 1,
        "def is_palindrome(s):\n    s = ''.join(c.lower() for c in s if c.isalnum())\n    return s == s[::-1]",
    ),
    "one-line palindrome (is_palindrome 2: letters and digits, case ignored)": (
        "is_palindrome", 2, "def is_palindrome(s):\n    return s == s[::-1]",
    ),
    "FizzBuzz without a both branch (fizzbuzz 0: 6 and 5)": (
        "fizzbuzz", 0,
        "a, b, wa, wb = {a}, {b}, {wa!r}, {wb!r}\nfor i in range(1, int(input()) + 1):\n"
        "    print(wa if i % a == 0 else wb if i % b == 0 else i)",
    ),
    "the smallest number (subarray_extreme 41: minimum)": (
        "subarray_extreme", 41, "input()\nprint(min(map(int, input().split())))",
    ),
    "positive multiples only (sum_multiples 0)": (
        "sum_multiples", 0, "input()\nprint(sum(x for x in map(int, input().split()) if x > 0 and x % {m} == 0))",
    ),
    "case-sensitive letter count (count_letters 0)": (
        "count_letters", 0, "for _ in range(int(input())):\n    print(sum(ch in {letters!r} for ch in input()))",
    ),
}


@pytest.mark.parametrize("case", sorted(RED_TEAM))
def test_the_red_teams_wrong_readings_fail_in_the_sandbox(case):
    family, seed, template = RED_TEAM[case]
    env = CodeEnv(families=(family,), limits=FAST, submission_wall_seconds=BUDGET)
    env.reset(seed=seed)
    _, reward, _, _, info = _step(env, template.format(**env.task.params))
    assert not info["success"] and reward < 1.0, (env.task.params, info["verdicts"])
    env.reset(seed=seed)
    _, reward, _, _, info = _step(env, env.reference_solution())
    assert info["success"] and reward == 1.0, info["verdicts"]


def _example(obs: str) -> tuple[str, str]:
    m = re.search(r"Example input:\n(.*?)\nExample output:\n(.*?)\nSubmission style", obs, re.DOTALL)
    return m.group(1), m.group(2)


@pytest.mark.parametrize("seed", [5, 36])
def test_an_example_memoriser_earns_no_more_than_its_fallback(seed):
    env = CodeEnv(families=("sum_multiples",), limits=FAST, submission_wall_seconds=BUDGET)
    obs, _ = env.reset(seed=seed)
    ex_in, ex_out = _example(obs)
    memoriser = (
        "import sys\n"
        f"print({ex_out!r} if sys.stdin.read().split() == {ex_in!r}.split() else 0)"
    )
    _, reward, _, _, info = _step(env, memoriser)
    env.reset(seed=seed)
    _, fallback, _, _, _ = _step(env, "print(0)")
    # The example is not a paid test: memorising it earns exactly what the fallback earns.
    assert not info["success"] and reward == fallback < 1.0, info["verdicts"]


@pytest.mark.parametrize("seed, memorise", [(52, False), (126, False), (98, True), (106, True)])
def test_the_identity_does_not_solve_rotate(seed, memorise):
    # Seeds where the identity (52, 126) or the example, else the identity (98, 106) once passed all.
    env = CodeEnv(families=("rotate",), limits=FAST, submission_wall_seconds=BUDGET)
    obs, _ = env.reset(seed=seed)
    program = "def rotate(xs, k):\n    return xs"
    if memorise:
        m = re.search(r"Example: rotate\((\[.*?\]), (\d+)\) returns (\[.*?\])\n", obs)
        program = f"def rotate(xs, k):\n    return {m.group(3)} if [xs, k] == [{m.group(1)}, {m.group(2)}] else xs"
    _, reward, _, _, info = _step(env, program)
    assert not info["success"] and reward < 1.0, info["verdicts"]


def test_a_lookup_table_of_revealed_tests_never_succeeds_in_repair_mode():
    """count_primes, 6 turns: each turn submits a table of every test the feedback showed so far
    (falling back to 0). It never succeeds and earns no more than `return 0` alone."""
    env = CodeEnv(families=("count_primes",), limits=FAST, multi_turn_repair=True, max_turns=6,
                  submission_wall_seconds=BUDGET)
    obs, _ = env.reset(seed=0)
    table: dict[int, int] = {}
    total, success, turns = 0.0, False, 0
    for _ in range(6):
        for args, expected in re.findall(r"Arguments: \[(-?\d+)\]\nExpected: (-?\d+)", obs):
            table[int(args)] = int(expected)
        m = re.search(r"count_primes\((\d+)\) returns (\d+)", obs)  # the statement's example
        if m:
            table[int(m.group(1))] = int(m.group(2))
        obs, reward, terminated, truncated, info = _step(
            env, f"T = {table!r}\ndef count_primes(n):\n    return T.get(n, 0)"
        )
        total, success, turns = total + reward, success or info["success"], turns + 1
        if terminated or truncated:
            break
    assert turns == 6 and len(table) >= 2  # the feedback did reveal tests
    env.reset(seed=0)
    _, fallback, _, _, _ = _step(env, "def count_primes(n):\n    return 0")
    assert not success and total <= fallback < 1.0, (total, fallback, table)


def _fn_dataset(tmp_path, name: str, fn_name: str, tests: list[tuple[list, object]]):
    path = tmp_path / f"{name}.jsonl"
    rec = {"problem": name, "fn_name": fn_name, "tests": [{"input": a, "output": o} for a, o in tests]}
    path.write_text(json.dumps(rec) + "\n")
    return path


def test_binet_fibonacci_fails_the_int_tests(tmp_path):
    path = _fn_dataset(tmp_path, "fib", "fib", [([n], _fib(n)) for n in (72, 80, 90)])
    env = CodeEnv(dataset=path, limits=FAST, submission_wall_seconds=BUDGET)
    env.reset(seed=0)
    binet = "import math\ndef fib(n):\n    s = math.sqrt(5)\n    return (((1 + s) / 2) ** n - ((1 - s) / 2) ** n) / s"
    _, reward, _, _, info = _step(env, binet)
    assert reward == 0.0 and info["verdicts"] == ["wrong answer"] * 3, info["test_results"]
    env.reset(seed=0)
    exact = "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a"
    _, reward, _, _, info = _step(env, exact)
    assert reward == 1.0 and info["success"]


@pytest.mark.parametrize("repair", [False, True])
def test_a_huge_int_for_a_float_test_is_a_wrong_answer(tmp_path, repair):
    path = _fn_dataset(tmp_path, "mean", "mean", [([[1, 2]], 1.5), ([[0.1, 0.2]], 0.15)])
    env = CodeEnv(dataset=path, limits=FAST, multi_turn_repair=repair, submission_wall_seconds=BUDGET)
    env.reset(seed=0)
    obs, reward, _, _, info = _step(env, "def mean(xs):\n    return 10 ** 400")
    assert reward == 0.0 and info["verdicts"] == ["wrong answer"] * 2 and not info["success"]
    assert env.observation_space.contains(obs)
    # The verl agent loop's episode calls env.step: it gets the verdict too.
    from ragen_core.integrations.verl.env import EnvEpisode

    episode = EnvEpisode("ragen/Code-v0", seed=0, max_turns=1,
                         env_kwargs={"dataset": str(path), "limits": FAST, "multi_turn_repair": repair})
    episode.start()
    assert episode.step(_answer("def mean(xs):\n    return 10 ** 400")) is None
    assert episode.total_reward == 0.0 and not episode.success


@pytest.mark.parametrize("repair", [False, True])
def test_a_sleeping_program_costs_one_budget_per_step(repair):
    """Six hidden tests (and three public ones in repair mode) share one 1 s budget: one run uses it
    up, and the tests the budget did not reach fail without running."""
    env = CodeEnv(families=("reverse_words",), num_tests=6, multi_turn_repair=repair,
                  limits={"wall_seconds": 1.0, "cpu_seconds": 1})
    env.reset(seed=0)
    _, reward, _, _, info = _step(env, "import time\ntime.sleep(30)")
    assert reward == 0.0 and info["verdicts"] == ["time limit"] * len(env.task.tests)
    # One run used up the budget (it was 6 runs of 1 s); the others never started.
    ran = [r for r in info["test_results"] if r["run_id"]]
    assert len(ran) == 1 and "budget" in info["test_results"][-1]["detail"]
