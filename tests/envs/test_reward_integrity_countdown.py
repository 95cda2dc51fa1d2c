"""Reward integrity of Countdown: only an expression over exactly the given numbers that equals the target succeeds.

A committed wrong answer (the given numbers, another value) earns the 0.1 format credit. Generated
variants (hypothesis) over reset seeds: the correct expression E wrapped or hedged with a wrong one W
("E or W", "E, W", "not E", two expressions, "W = target"), and expressions that reach the target
with the wrong numbers (one left out, one used twice, one added, two concatenated into one literal).
None may succeed or earn more than 0.1.
"""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.countdown.env import CountdownEnv, score_countdown

#: Examples per generated test (the report counts these).
EXAMPLES = 200
#: Instances drawn (reset seeds); each generated example picks one.
SEEDS = st.integers(0, 39)

_ENV = CountdownEnv()

#: {e}: a correct expression, {w}: a wrong one over the same numbers, {t}: the target.
HOSTILE = (
    "{e} or {w}",
    "{w} or {e}",
    "{e}, {w}",
    "{e}; {w}",
    "{e} {w}",
    "({e}) ({w})",
    "{e} || {w}",
    "{w} || {e}",
    "not {e}",
    "{e} is wrong",
    "maybe {e}",
    "{w} = {t}",
    "{w} = {e}",
    "{e} = {w}",
    "{e} != {t}",
    "{e} < {t}",
    "{t}",
    "{e} = {t} = {w}",
    "[{e}, {w}]",
)


def _answer(seed: int, answer: str, response: str | None = None) -> tuple[float, dict]:
    _ENV.reset(seed=seed)
    _, reward, _, _, info = _ENV.step(response or f"<think>t</think><answer>{answer}</answer>")
    return reward, info


@cache
def _instance(seed: int) -> tuple[int, tuple[int, ...], str, str]:
    """(target, numbers, a correct expression, a wrong expression over the same numbers)."""
    _ENV.reset(seed=seed)
    target, nums, right = _ENV.target, tuple(_ENV.nums), _ENV.oracle_answer()
    for wrong in (" + ".join(map(str, nums)), " * ".join(map(str, nums)), " - ".join(map(str, nums))):
        if _answer(seed, wrong)[0] == 0.1:
            return target, nums, right, wrong
    raise AssertionError("no wrong expression found")


@given(seed=SEEDS, template=st.sampled_from(HOSTILE))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_wrapped_or_hedged_expressions_earn_no_more_than_a_wrong_one(seed, template):
    target, _, right, wrong = _instance(seed)
    committed_wrong = _answer(seed, wrong)[0]
    assert committed_wrong == 0.1
    answer = template.replace("{e}", right).replace("{w}", wrong).replace("{t}", str(target))
    reward, info = _answer(seed, answer)
    assert not info["success"] and reward <= committed_wrong, (answer, reward)


@given(
    seed=SEEDS,
    change=st.sampled_from(["drop", "repeat", "add", "concat"]),
    data=st.data(),
)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_expressions_over_the_wrong_numbers_never_succeed(seed, change, data):
    target, nums, right, _ = _instance(seed)
    numbers = [str(n) for n in nums]
    i = data.draw(st.integers(0, len(numbers) - 1))
    if change == "drop":
        numbers.pop(i)
    elif change == "repeat":
        numbers.append(numbers[i])
    elif change == "add":
        numbers.append(str(data.draw(st.integers(0, 100))))
    else:
        j = (i + 1) % len(numbers)
        numbers = [n for k, n in enumerate(numbers) if k not in (i, j)] + [numbers[i] + numbers[j]]
    if not numbers:
        return
    order = data.draw(st.permutations(numbers))
    ops = data.draw(st.lists(st.sampled_from("+-*/"), min_size=len(order) - 1, max_size=len(order) - 1))
    expression = order[0] + "".join(f" {op} {n}" for op, n in zip(ops, order[1:]))
    for answer in (expression, f"({expression}) * 1", f"{expression} = {target}", f"{right} + 0", f"{right} * 1"):
        # the env's own scoring function (the env adds nothing to a well-formed answer's score)
        score, details = score_countdown(answer, target, list(nums))
        assert score <= 0.1 and not details["numbers_ok"], (answer, nums, target, score)


def test_the_right_expression_outside_the_answer_does_not_count():
    for seed in range(10):
        target, _, right, wrong = _instance(seed)
        for response in (
            f"<think>{right}</think><answer>{wrong}</answer>",
            f"<think>t</think><answer>{wrong}</answer><answer>{right}</answer>",
            f"<think>t</think><answer>{right}</answer><answer>{wrong}</answer>",
            f"<think>t</think><answer>{wrong}</answer> {right}",
        ):
            reward, info = _answer(seed, "", response)
            assert not info["success"] and reward <= 0.1, (response, reward)
        assert _answer(seed, right)[1]["success"]  # the check can fail: the right expression succeeds


def test_a_false_trailing_equation_is_not_a_success():
    # `E = 999` with E a correct expression states a false equation: never a success; `E = target` still is
    target, _, right, _ = _instance(0)
    for stated in (target + 1, target - 1, 999, 0):
        reward, info = _answer(0, f"{right} = {stated}")
        assert not info["success"] and reward <= 0.1, stated
    assert _answer(0, f"{right} = {target}")[1]["success"]
