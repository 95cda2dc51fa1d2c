"""Countdown: safe expression parser, exhaustive solver vs brute force, generator, env rewards, fixture."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ragen_envs.countdown.env import COUNTDOWN_SCHEMA, CountdownEnv, score_countdown
from ragen_envs.countdown.expression import (
    MAX_VALUE_BITS,
    ExpressionError,
    parse_expression,
    uses_numbers_exactly,
)
from ragen_envs.countdown.generator import CountdownConfig, generate_countdown, generate_dataset
from ragen_envs.countdown.solver import CountdownSolver, solve
from ragen_envs.data import fixture_path, load_records
from ragen_envs.protocol import FORMAT_PENALTY


def _respond(answer: str) -> str:
    return f"<think>working</think><answer>{answer}</answer>"


# ---------------------------------------------------------------------- independent brute force
def brute_force_values(nums: list[Fraction]) -> set[Fraction]:
    """Every value reachable using all numbers once: reduce the list by combining any ordered pair."""
    if len(nums) == 1:
        return {nums[0]}
    out: set[Fraction] = set()
    for i in range(len(nums)):
        for j in range(len(nums)):
            if i == j:
                continue
            a, b = nums[i], nums[j]
            rest = [nums[k] for k in range(len(nums)) if k not in (i, j)]
            results = [a + b, a - b, a * b] + ([a / b] if b != 0 else [])
            for r in results:
                out |= brute_force_values(rest + [r])
    return out


def test_solver_agrees_with_brute_force_on_small_instances():
    rng = np.random.default_rng(0)
    checked_unsolvable = checked_solvable = 0
    for count, trials in ((2, 10), (3, 12), (4, 4)):
        for _ in range(trials):
            nums = [int(x) for x in rng.integers(0, 13, size=count)]  # 0 included: division by zero paths
            reachable = brute_force_values([Fraction(n) for n in nums])
            solver = CountdownSolver(nums)
            for target in [Fraction(t) for t in range(-5, 40)] + [Fraction(1, 2), Fraction(7, 3)]:
                expr = solver.solve(target)
                assert (expr is not None) == (target in reachable), (nums, target, expr)
                if expr is None:
                    checked_unsolvable += 1
                    continue
                checked_solvable += 1
                parsed = parse_expression(expr) if target.denominator == 1 and target >= 0 else None
                if parsed is not None:  # the parser takes non-negative integers only: check those
                    assert parsed.value == target and uses_numbers_exactly(parsed, nums), (nums, target, expr)
    assert checked_solvable > 100 and checked_unsolvable > 100


def brute_force_with_signs(nums: list[Fraction]) -> set[Fraction]:
    """Like brute_force_values, but any intermediate value may also be negated (unary minus)."""
    if len(nums) == 1:
        return {nums[0], -nums[0]}
    out: set[Fraction] = set()
    for i in range(len(nums)):
        for j in range(len(nums)):
            if i == j:
                continue
            rest = [nums[k] for k in range(len(nums)) if k not in (i, j)]
            for a in (nums[i], -nums[i]):
                for b in (nums[j], -nums[j]):
                    for r in [a + b, a - b, a * b] + ([a / b] if b != 0 else []):
                        out |= brute_force_with_signs(rest + [r])
    return out | {-v for v in out}


def test_unary_minus_reaches_no_new_positive_target():
    """The parser accepts unary signs; the (binary) solver stays exact for non-negative targets."""
    rng = np.random.default_rng(5)
    for count in (2, 3, 3, 3):
        nums = [Fraction(int(x)) for x in rng.integers(0, 9, size=count)]
        binary = {v for v in brute_force_values(nums) if v >= 0}
        signed = {v for v in brute_force_with_signs(nums) if v >= 0}
        assert binary == signed, nums


def test_solver_full_value_table_matches_brute_force():
    for nums in ([1, 2, 3], [4, 4, 0], [2, 3, 5, 7], [6, 6, 1, 1]):
        assert set(CountdownSolver(nums).values()) == brute_force_values([Fraction(n) for n in nums])


def test_solver_known_cases():
    assert parse_expression(solve([3, 3, 8, 8], 24)).value == 24  # needs the fraction 8/3
    assert parse_expression(solve([1, 5, 5, 5], 24)).value == 24  # needs 1/5
    assert solve([1, 1, 1], 100) is None
    assert solve([7], 7) == "7" and solve([7], 8) is None
    with pytest.raises(ValueError):
        CountdownSolver([])


# ---------------------------------------------------------------------- parser
@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('echo hi')",
        "(1).__class__",
        "abs(3) + 1",
        "x + 1",
        "2 ** 3",
        "9 ** 9 ** 9",
        "2 ** 99999999",
        "7 // 2",
        "7 % 2",
        "~3 + 5",
        "not 3",
        "1.5 + 2",
        "1e5 + 1",
        "0x10",
        "1_000 + 1",
        "'3' + '4'",
        "[1, 2]",
        "(1, 2)",
        "1 if 1 else 2",
        "lambda: 1",
        "1 < 2",
        "1 + (2",
        "1 2",
        "",
        "   ",
        "1 / 0",
        "4 / (2 - 2)",
        "True + 1",
        "1 == 1",
        "0b11",
        "1" * 13,
        "(" * 300 + "1" + ")" * 300,
        "+".join(["1"] * 400),
        "a = 3",
        "3; 4",
        "3\n4",
        "1 + 1 = 2 = 2",
    ],
)
def test_parser_rejects_everything_but_integer_arithmetic(text):
    with pytest.raises(ExpressionError):
        parse_expression(text)


def test_expression_error_is_a_value_error_and_non_strings_are_rejected():
    assert issubclass(ExpressionError, ValueError)
    with pytest.raises(ExpressionError):
        parse_expression(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text, value, numbers",
    [
        ("8 / (3 - 8 / 3)", Fraction(24), (8, 3, 8, 3)),
        ("8 ÷ (3 − 8 ÷ 3)", Fraction(24), (8, 3, 8, 3)),
        ("(1 + 2) × 3", Fraction(9), (1, 2, 3)),
        ("(1 + 2) * 3 = 9", Fraction(9), (1, 2, 3)),
        ("$ 1 + 2 $", Fraction(3), (1, 2)),
        ("7 / 2", Fraction(7, 2), (7, 2)),
        ("((((5))))", Fraction(5), (5,)),
        ("-3 + 5", Fraction(2), (3, 5)),  # unary signs: reasoning-gym writes them
        ("27 * (-2 + +4)", Fraction(54), (27, 2, 4)),
    ],
)
def test_parser_evaluates_exactly(text, value, numbers):
    parsed = parse_expression(text)
    assert parsed.value == value and parsed.numbers == numbers


def test_a_false_trailing_equation_is_refused():
    # the right-hand side is never trusted: a true one is accepted (only the left side is scored), a false one is
    # not an expression of its value
    with pytest.raises(ExpressionError, match="false equation"):
        parse_expression("(1 + 2) * 3 = 24")
    assert parse_expression("(1 + 2) × 3 = 9").value == 9


def test_huge_intermediate_values_are_refused():
    # A twelve-digit factor has 40 bits: 20 of them (800 bits) pass, 30 (1200 bits) exceed the bound.
    factor = "999999999999"
    assert parse_expression(" * ".join([factor] * 20)).value == 999999999999**20
    with pytest.raises(ExpressionError, match="bits"):
        parse_expression(" * ".join([factor] * 30))
    assert (999999999999**20).bit_length() <= MAX_VALUE_BITS < (999999999999**30).bit_length()


# ---------------------------------------------------------------------- generator
@pytest.mark.parametrize("count", [3, 4, 5, 6])
def test_every_generated_instance_is_solvable_and_in_range(count):
    config = CountdownConfig(num_count=count, num_range=(1, 30), target_range=(10, 60))
    items = generate_dataset(6 if count < 6 else 3, seed=count, config=config)
    for item in items:
        assert len(item["nums"]) == count
        assert all(1 <= n <= 30 for n in item["nums"]) and 10 <= item["target"] <= 60
        parsed = parse_expression(item["solution"])  # the solver's proof, checked by the parser
        assert parsed.value == item["target"] and uses_numbers_exactly(parsed, item["nums"])
        if count <= 4:  # and by the brute force
            assert Fraction(item["target"]) in brute_force_values([Fraction(n) for n in item["nums"]])


def test_generator_is_deterministic_and_seed_dependent():
    assert generate_dataset(5, seed=3) == generate_dataset(5, seed=3)
    assert generate_dataset(5, seed=3) != generate_dataset(5, seed=4)


def test_generator_count_range_and_impossible_config():
    rng = np.random.default_rng(1)
    counts = {len(generate_countdown(rng, CountdownConfig(num_count=(3, 4)))["nums"]) for _ in range(20)}
    assert counts == {3, 4}
    with pytest.raises(ValueError, match="no solvable"):
        generate_countdown(
            rng, CountdownConfig(num_count=3, num_range=(1, 1), target_range=(50, 60), max_tries=20)
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_count": 2},
        {"num_count": 7},
        {"num_count": (4, 3)},
        {"num_count": True},
        {"num_range": (0, 10)},
        {"num_range": (10, 1)},
        {"target_range": (5,)},
        {"max_tries": 0},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        CountdownConfig(**kwargs)


# ---------------------------------------------------------------------- env
def _env_at(target, nums, **kwargs):
    env = CountdownEnv(**kwargs)
    env.reset(seed=0)
    env.target, env.nums, env._solution = target, list(nums), None
    return env


@pytest.mark.parametrize(
    "answer, reward, success",
    [
        ("8 / (3 - 8 / 3)", 1.0, True),
        ("8 * 3 - 8 + 3", 0.1, False),  # the numbers, wrong value
        ("8 * 3", 0.0, False),  # numbers missing
        ("8 / (3 - 8 / 3) + 0", 0.0, False),  # an extra number
        ("8 * 3 + 3 - 3", 0.0, False),  # 3 used three times, 8 once
        ("8 / (3 - 8 / 3) = 24", 1.0, True),
    ],
)
def test_reward_cases(answer, reward, success):
    env = _env_at(24, [3, 3, 8, 8])
    obs, r, terminated, truncated, info = env.step(_respond(answer))
    assert r == pytest.approx(reward) and info["success"] is success
    assert terminated and not truncated and info["action_is_valid"]
    assert info["score"] == pytest.approx(reward) and info["format_penalty"] == 0.0
    assert obs == "Target: 24, nums: [3, 3, 8, 8]"


@pytest.mark.parametrize(
    "response",
    [
        _respond("twenty-four"),
        _respond("2 ** 3"),
        _respond("__import__('os')"),
        "8 / (3 - 8 / 3)",  # no tags
        "<answer>8 / (3 - 8 / 3)</answer>",  # tagged format requires <think>
    ],
)
def test_invalid_answers_cost_the_format_penalty_and_forfeit(response):
    env = _env_at(24, [3, 3, 8, 8])
    _, r, terminated, truncated, info = env.step(response)
    assert r == pytest.approx(FORMAT_PENALTY)
    assert terminated and not truncated and info["forfeited"] and not info["action_is_valid"]
    assert "score" not in info
    # stepping after the end is a no-op
    _, r2, terminated2, _, info2 = env.step(_respond("8 / (3 - 8 / 3)"))
    assert r2 == 0.0 and terminated2 and not info2["success"]


def test_max_answers_allows_a_retry_after_an_invalid_answer():
    env = _env_at(24, [3, 3, 8, 8], max_answers=2)
    _, r, terminated, _, _ = env.step(_respond("nope"))
    assert r == pytest.approx(FORMAT_PENALTY) and not terminated
    _, r, terminated, _, info = env.step(_respond("8 / (3 - 8 / 3)"))
    assert r == 1.0 and terminated and info["success"]
    with pytest.raises(ValueError):
        CountdownEnv(max_answers=0)


def test_score_function_directly():
    assert score_countdown("1 + 2", 3, [2, 1])[0] == 1.0
    assert score_countdown("1 + 2", 4, [2, 1])[0] == 0.1
    score, details = score_countdown("1 +", 3, [1, 2])
    assert score == 0.0 and details["error"]


def test_check_env_and_oracle_and_determinism():
    env = CountdownEnv()
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=11)
    assert obs == f"Target: {info['target']}, nums: {info['nums']}"
    assert env.reset(seed=11)[0] == obs
    _, r, terminated, _, info = env.step(_respond(env.oracle()[0]))
    assert r == 1.0 and terminated and info["success"]
    assert "Countdown" in env.instructions() and "<answer>" in env.instructions()


def test_registered_form_passes_check_env():
    if "ragen/Countdown-v0" not in gym.registry:
        gym.register("ragen/Countdown-v0", entry_point="ragen_envs.countdown.env:CountdownEnv")
    env = gym.make("ragen/Countdown-v0", num_count=3)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=2)
    assert len(env.unwrapped.nums) == 3 and obs.startswith("Target: ")




# ---------------------------------------------------------------------- data sets
def test_fixture_loads_and_every_record_is_solved_by_the_oracle():
    path = fixture_path("countdown_sample.jsonl")
    records = load_records(path, COUNTDOWN_SCHEMA)
    assert len(records) >= 5
    env = CountdownEnv(dataset=path)
    for index, record in enumerate(records):
        obs, info = env.reset(seed=0, options={"index": index})
        assert obs == f"Target: {record['target']}, nums: {record['nums']}" and info["index"] == index
        _, r, *_ = env.step(_respond(env.oracle()[0]))
        assert r == 1.0
    seen = {env.reset(seed=s)[1]["index"] for s in range(40)}
    assert len(seen) > 1
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": len(records)})
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": True})  # a bool is not a record number
    assert env.reset(seed=0, options={"index": np.int64(1)})[1]["index"] == 1


def test_bad_dataset_file_is_rejected_with_file_line_and_field(tmp_path):
    path = tmp_path / "cd.jsonl"
    path.write_text('{"target": 24, "nums": [3, 3, 8, 8]}\n{"target": 24, "numbers": [1, 2]}\n')
    with pytest.raises(ValueError, match=r"cd\.jsonl:2: missing field 'nums'"):
        CountdownEnv(dataset=path)


# ---------------------------------------------------------------------- reasoning-gym cross-check
def test_reasoning_gym_countdown_reference_answers_score_one(tmp_path):
    reasoning_gym = pytest.importorskip("reasoning_gym")
    dataset = reasoning_gym.create_dataset("countdown", seed=5, size=8)
    entries = list(dataset)
    path = tmp_path / "rg.jsonl"
    path.write_text(
        "".join(
            json.dumps({"target": e["metadata"]["target"], "nums": e["metadata"]["numbers"]}) + "\n"
            for e in entries
        )
    )
    env = CountdownEnv(dataset=path)
    for index, entry in enumerate(entries):
        env.reset(seed=0, options={"index": index})
        _, r, *_ = env.step(_respond(entry["answer"]))
        assert r == 1.0, entry["answer"]
        # and the other way round: our solver's answer is accepted by reasoning-gym's scorer
        ours = solve(entry["metadata"]["numbers"], entry["metadata"]["target"])
        assert ours is not None
        assert Counter(parse_expression(ours).numbers) == Counter(entry["metadata"]["numbers"])
        assert dataset.score_answer(ours, entry) == 1.0


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"num_count": True}, "num_count"),
        ({"num_count": (5, 4)}, "num_count"),
        ({"num_count": 7}, "num_count"),
        ({"num_range": 5}, "num_range"),
        ({"num_range": (0, 9)}, "num_range"),
        ({"target_range": (3, 2)}, "target_range"),
        ({"max_tries": 0}, "max_tries"),
    ],
)
def test_config_rejects_bad_ranges_with_the_argument_named(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        CountdownConfig(**kwargs)


def test_num_count_range_is_inclusive():
    assert CountdownConfig(num_count=(3, 5)).count_range == (3, 5)
    assert CountdownConfig(num_count=np.int64(4)).count_range == (4, 4)
