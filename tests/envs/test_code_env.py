"""CodeEnv (ragen/Code-v0): generator, loaders, judging, repair mode, Gymnasium contracts."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ragen_envs.code import FAMILIES, CodeEnv, CodeTaskConfig, extract_program, generate_task, load_tasks
from ragen_envs.data import fixture_path
from ragen_envs.protocol import FORMAT_PENALTY

FAST = {"wall_seconds": 2.0, "cpu_seconds": 1}
# The default wall budget of a submission is the per-test wall limit, shared by all its tests; on a
# loaded machine a trivial run can take a second, so tests that do not test the budget give more.
SLACK = 30.0


def _answer(program: str) -> str:
    return f"<think>t</think><answer>\n```python\n{program}\n```\n</answer>"


# ----------------------------------------------------------------------------------------------- generator
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reference_program_passes_the_solver_tests_in_the_sandbox(family):
    # The reference program (run in the sandbox) and the in-process solver are separate implementations.
    env = CodeEnv(families=(family,), num_tests=5, limits=FAST, submission_wall_seconds=SLACK)
    env.reset(seed=3)
    assert env.task.family == family
    _, reward, terminated, _, info = env.step(_answer(env.reference_solution()))
    assert len(env.task.tests) >= 5 and len(env.task.public_tests) == 3
    assert info["verdicts"] == ["passed"] * len(env.task.tests), info["test_results"]
    assert reward == 1.0 and terminated and info["success"]


def _kadane_brute(xs, kind):
    sums = [sum(xs[i:j]) for i in range(len(xs)) for j in range(i + 1, len(xs) + 1)]
    return max(sums) if kind == "maximum" else min(sums)


def test_solvers_agree_with_brute_force_references():
    rng = np.random.default_rng(0)
    for _ in range(200):
        xs = [int(v) for v in rng.integers(-20, 21, size=int(rng.integers(1, 9)))]
        for kind in ("maximum", "minimum"):
            text = f"{len(xs)}\n{' '.join(map(str, xs))}\n"
            assert FAMILIES["subarray_extreme"].solve({"kind": kind}, text) == f"{_kadane_brute(xs, kind)}\n"
        k = int(rng.integers(0, 20))
        right = FAMILIES["rotate"].solve({"direction": "right"}, [xs, k])
        assert right == [xs[(i - k) % len(xs)] for i in range(len(xs))]
        n = int(rng.integers(0, 200))
        trial = sum(1 for q in range(2, n + 1) if all(q % d for d in range(2, q)))
        assert FAMILIES["count_primes"].solve({"inclusive": True}, [n]) == trial
        a, b = (int(v) for v in rng.integers(1, 100, size=2))
        assert FAMILIES["gcd_lcm_pairs"].solve({"op": "lcm"}, f"1\n{a} {b}\n") == f"{math.lcm(a, b)}\n"
    assert FAMILIES["fizzbuzz"].solve({"a": 3, "b": 5, "wa": "Fizz", "wb": "Buzz"}, "15").split()[-1] == "FizzBuzz"
    assert FAMILIES["is_palindrome"].solve(
        {"alnum_only": True, "ignore_case": True}, ["A man, a plan, a canal: Panama"]
    )
    assert not FAMILIES["is_palindrome"].solve({"alnum_only": False, "ignore_case": True}, ["ab, a"])


def test_generator_is_seeded_and_configurable():
    a = generate_task(np.random.default_rng(5))
    b = generate_task(np.random.default_rng(5))
    assert a == b
    tasks = [generate_task(np.random.default_rng(s), CodeTaskConfig(style="function")) for s in range(20)]
    assert all(t.style == "function" for t in tasks)
    assert len({t.family for t in tasks}) > 1
    t = generate_task(np.random.default_rng(1), CodeTaskConfig(num_tests=9, families=("fizzbuzz",)))
    assert len(t.tests) == 9 and t.family == "fizzbuzz"
    t = generate_task(np.random.default_rng(1), CodeTaskConfig(num_public_tests=5, families=("rotate",)))
    assert len(t.public_tests) == 5 and len({json.dumps(x.args) for x in t.public_tests}) == 5
    # The statement's example is the first public test, and no hidden test repeats a public input.
    assert json.dumps(t.public_tests[0].expected) in t.problem
    assert not {json.dumps(x.args) for x in t.tests} & {json.dumps(x.args) for x in t.public_tests}
    for bad in ({"num_tests": 0}, {"style": "both"}, {"families": ("nope",)}, {"max_len": 1},
                {"families": ("rotate",), "style": "stdin"}, {"num_public_tests": 0}):
        with pytest.raises(ValueError):
            CodeTaskConfig(**bad)


# ----------------------------------------------------------------------------------------------- loader
def test_fixture_loads_both_styles_and_its_solutions_pass():
    tasks = load_tasks(fixture_path("code_sample.jsonl"))
    assert [t.style for t in tasks] == ["stdin", "stdin", "function", "function"]
    assert tasks[2].tests[1].args == ([3, 2, 4], 6)  # the string form: one JSON value per line
    env = CodeEnv(dataset=fixture_path("code_sample.jsonl"), limits=FAST, submission_wall_seconds=SLACK)
    for i in range(3):
        env.reset(seed=0, options={"index": i})
        _, reward, _, _, info = env.step(_answer(env.reference_solution()))
        assert reward == 1.0, info["test_results"]
    env.reset(seed=0, options={"index": 3})
    assert env.oracle() is None
    # Float results compare with a tolerance: 0.1 + 0.2 != 0.3 exactly.
    _, reward, _, _, info = env.step(_answer("def mean(xs):\n    return sum(xs) / len(xs)"))
    assert reward == 1.0, info


@pytest.mark.parametrize(
    "record, message",
    [
        ({"tests": [{"input": "1", "output": "1"}]}, "missing field 'problem'"),
        ({"problem": "p"}, "missing field 'tests'"),
        ({"problem": "p", "tests": []}, "field 'tests': must hold at least one test"),
        ({"problem": "p", "tests": [{"input": "1"}]}, "missing field 'tests[0].output'"),
        (
            {"problem": "p", "tests": [{"input": "1", "output": "1"}, {"input": "2", "output": 2}]},
            "field 'tests[1].output'",
        ),
        ({"problem": "p", "fn_name": "f", "tests": [{"input": "[1\nx", "output": 1}]}, "tests[0].input"),
        ({"problem": "p", "fn_name": "not ok", "tests": [{"input": [1], "output": 1}]}, "field 'fn_name'"),
        (
            {"problem": "p", "tests": [{"input": "1", "output": "1"}], "public_tests": [{"input": "1", "output": 1}]},
            "field 'public_tests[0].output'",
        ),
    ],
)
def test_loader_errors_name_file_line_and_field(tmp_path, record, message):
    path = tmp_path / "tasks.jsonl"
    good = {"problem": "ok", "tests": [{"input": "1\n", "output": "1\n"}]}
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(record) + "\n")
    with pytest.raises(ValueError) as exc:
        load_tasks(path)
    assert f"{path}:3" in str(exc.value) and message in str(exc.value), str(exc.value)


def test_loader_leaves_out_hidden_tests_that_are_public(tmp_path):
    """A hidden test whose input a public test has (up to whitespace) is not paid: repair feedback may
    show it. A record left with no hidden test is an error naming the file, line and field."""
    path = tmp_path / "t.jsonl"
    stdin = {
        "problem": "Print the number doubled.",
        "tests": [{"input": "2\n", "output": "4\n"}, {"input": "7\n", "output": "14\n"}],
        "public_tests": [{"input": " 2", "output": "4\n"}],
    }
    function = {
        "problem": "Return x doubled.", "fn_name": "double",
        "tests": [{"input": [3], "output": 6}, {"input": "5", "output": 10}],
        "public_tests": [{"input": "3\n", "output": 6}],
    }
    path.write_text(json.dumps(stdin) + "\n" + json.dumps(function) + "\n")
    first, second = load_tasks(path)
    assert [t.input for t in first.tests] == ["7\n"] and len(first.public_tests) == 1
    assert [t.args for t in second.tests] == [(5,)]
    all_public = {**stdin, "tests": stdin["tests"][:1]}
    path.write_text(json.dumps(stdin) + "\n" + json.dumps(all_public) + "\n")
    with pytest.raises(ValueError) as exc:
        load_tasks(path)
    assert f"{path}:2" in str(exc.value) and "every test repeats a public test" in str(exc.value)


def test_count_primes_inputs_stay_below_a_million():
    # n up to 3 * max_value made the solver's sieve allocate gigabytes for a large max_value.
    task = generate_task(np.random.default_rng(0), CodeTaskConfig(families=("count_primes",), max_value=10**9))
    assert all(0 <= t.args[0] <= 10**6 for t in task.tests + task.public_tests)
    assert max(t.args[0] for t in task.tests + task.public_tests) > 3 * 50  # the range did grow


# ----------------------------------------------------------------------------------------------- judging
def test_extract_program():
    assert extract_program("```python\nprint(1)\n```") == "print(1)"
    assert extract_program("Here:\n```py\nx = 1\nprint(x)\n```\nand text") == "x = 1\nprint(x)"
    assert extract_program("```\nprint(2)\n```") == "print(2)"
    assert extract_program("print(3)") == "print(3)"
    assert extract_program("```python\nprint(4)") == "print(4)"  # unterminated fence
    assert extract_program("   \n ") is None


def test_partial_credit_equals_fraction_of_tests_passed():
    env = CodeEnv(families=("sum_multiples",), num_tests=6, limits=FAST, submission_wall_seconds=SLACK)
    env.reset(seed=11)
    zeros = sum(t.output == "0\n" for t in env.task.tests)
    assert zeros >= 1  # test 1 is the empty list
    _, reward, terminated, _, info = env.step(_answer("print(0)"))
    assert reward == pytest.approx(zeros / 6)
    assert info["tests_passed"] == zeros and info["verdicts"].count("wrong answer") == 6 - zeros
    assert terminated and info["success"] is False


def test_runtime_error_and_time_limit_verdicts():
    env = CodeEnv(families=("reverse_words",), num_tests=2, limits={"wall_seconds": 1.0, "cpu_seconds": 1},
                  submission_wall_seconds=SLACK)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(_answer("raise KeyError('x')"))
    assert reward == 0.0 and info["verdicts"] == ["runtime error"] * 2
    env.reset(seed=0)
    _, _, _, _, info = env.step(_answer("while True:\n    pass"))
    assert info["verdicts"] == ["time limit"] * 2
    assert "expected" not in json.dumps(info["test_results"]).lower()


def test_malformed_response_costs_the_penalty_and_runs_nothing():
    env = CodeEnv(limits=FAST, submission_wall_seconds=SLACK)
    obs, _ = env.reset(seed=2)
    obs2, reward, terminated, truncated, info = env.step("print(1)")  # no tags
    assert reward == pytest.approx(FORMAT_PENALTY) and not info["action_is_valid"]
    assert "verdicts" not in info and terminated and not truncated  # the single turn is used up
    assert obs in obs2


def test_multi_turn_repair_shows_the_first_failing_test_and_rewards_improvement():
    env = CodeEnv(families=("fizzbuzz",), num_tests=4, multi_turn_repair=True, limits=FAST,
                  submission_wall_seconds=SLACK)
    obs, info = env.reset(seed=4)
    assert "corrected program" in info["instructions"]
    obs, r1, term, trunc, info = env.step(_answer("print(1)"))
    assert not term and not trunc
    assert "First failing test" in obs and "Expected output:" in obs and "Submit a corrected program." in obs
    obs, r_same, term, trunc, _ = env.step(_answer("print(1)"))
    assert r_same == 0.0 and not term  # no reward for repeating the same partial answer
    obs, r2, term, trunc, info = env.step(_answer(env.reference_solution()))
    assert term and not trunc and info["success"]
    assert r1 + r_same + r2 == pytest.approx(1.0)
    assert "Submit a corrected program." not in obs


def test_repair_feedback_shows_public_tests_only(tmp_path):
    """Feedback shows the first failing public test; a hidden test's contents (its input, expected
    answer, the program's output or stderr) never reach the observation, only verdict counts."""
    path = tmp_path / "t.jsonl"
    rec = {
        "problem": "Print the input number doubled.",
        "tests": [{"input": "7301\n", "output": "14602\n"}, {"input": "8123\n", "output": "16246\n"}],
        "public_tests": [{"input": "2\n", "output": "4\n"}],
    }
    path.write_text(json.dumps(rec) + "\n" + json.dumps({k: v for k, v in rec.items() if k != "public_tests"}) + "\n")
    leak = "import sys\nx = input()\nprint('seen', x, file=sys.stderr)\nprint(x)\nraise SystemExit(1)"
    for index, shown in ((0, True), (1, False)):
        env = CodeEnv(dataset=path, limits=FAST, submission_wall_seconds=SLACK, multi_turn_repair=True, max_turns=2)
        env.reset(seed=0, options={"index": index})
        obs, reward, _, _, info = env.step(_answer(leak))
        assert reward == 0.0 and info["verdicts"] == ["runtime error"] * 2
        assert "7301" not in obs and "14602" not in obs and "8123" not in obs
        assert ("seen 2" in obs and "Input:\n2" in obs) == shown
        assert "0/2 hidden tests passed" in obs and "Submit a corrected program." in obs
        assert ("Hidden tests failed (2 runtime error)" in obs) != shown
        # Passing the public test but not the hidden ones: counts only.
        obs, reward, term, _, info = env.step(_answer("print(4)"))
        assert term and not info["success"] and "7301" not in obs and "16246" not in obs
        assert ("Every visible test passes" in obs) == shown


def test_submission_wall_budget_is_validated():
    for bad in (0, -1.0, float("nan"), True, "4", 7200):
        with pytest.raises(ValueError, match="submission_wall_seconds"):
            CodeEnv(submission_wall_seconds=bad)
    assert CodeEnv(limits={"wall_seconds": 3.0}).submission_wall_seconds == 3.0


def test_repair_mode_ends_after_max_turns():
    env = CodeEnv(families=("rotate",), num_tests=2, multi_turn_repair=True, max_turns=2, limits=FAST,
                  submission_wall_seconds=SLACK)
    env.reset(seed=0)
    _, _, term, trunc, _ = env.step(_answer("def rotate(xs, k):\n    return None"))
    assert not (term or trunc)
    obs, _, term, trunc, info = env.step(_answer("def rotate(xs, k):\n    return None"))
    assert term and not trunc and "Got: null" in obs and not info["success"]
    with pytest.raises(ValueError):
        CodeEnv(max_turns=3)  # several turns need repair mode


# ----------------------------------------------------------------------------------------------- gymnasium
def test_check_env_and_determinism():
    env = CodeEnv(limits=FAST, submission_wall_seconds=SLACK)
    check_env(env, skip_render_check=True)
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=7)
    others = {env.reset(seed=s)[0] for s in range(8, 14)}
    assert a == b and len(others) > 1


def test_gym_make_with_the_entry_point():
    if "ragen-test/Code-v0" not in gym.registry:
        gym.register("ragen-test/Code-v0", entry_point="ragen_envs.code.env:CodeEnv")
    env = gym.make("ragen-test/Code-v0", style="stdin", limits=FAST, submission_wall_seconds=SLACK)
    obs, info = env.reset(seed=1)
    assert info["task_style"] == "stdin" and "Problem:" in obs
    assert env.unwrapped.observation_space.contains(obs)
    env.close()


# ----------------------------------------------------------------------------------------------- hostile answers
HOSTILE_FUNCTIONS = {
    "990 levels": "def solve(x):\n    a = [1]\n    for _ in range(990):\n        a = [a]\n    return a",
    "replaced json.dumps": (
        "import json\njson.dumps = lambda *a, **k: '[' * 100000 + ']' * 100000\ndef solve(x):\n    return x"
    ),
    "5000 digits": "import sys\nsys.set_int_max_str_digits(0)\ndef solve(x):\n    return 10 ** 4999",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FUNCTIONS))
@pytest.mark.parametrize("repair", [False, True])
def test_a_hostile_function_result_is_a_verdict_not_an_exception(tmp_path, case, repair):
    """Issue 11.1: a model answer whose return value the caller cannot parse used to raise out of
    env.step (RecursionError); it is a failed test, and the episode goes on in repair mode."""
    path = tmp_path / "fn.jsonl"
    path.write_text(json.dumps({"problem": "p", "fn_name": "solve", "tests": [{"input": [1], "output": 1}]}) + "\n")
    env = CodeEnv(dataset=path, limits=FAST, submission_wall_seconds=SLACK, multi_turn_repair=repair)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(_answer(HOSTILE_FUNCTIONS[case]))
    assert reward == 0.0 and info["verdicts"] == ["runtime error"], info["test_results"]
    assert "no readable result" in info["test_results"][0]["detail"]
    assert terminated != repair and env.observation_space.contains(obs)
    json.dumps(info)
    if repair:
        # A hidden test's contents are never shown, only its verdict.
        assert "Hidden tests failed (1 runtime error)" in obs
        _, reward, terminated, _, info = env.step(_answer("def solve(x):\n    return x"))
        assert reward == 1.0 and terminated and info["verdicts"] == ["passed"]
