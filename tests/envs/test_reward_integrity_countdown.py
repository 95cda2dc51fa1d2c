"""Reward integrity of Countdown: only an expression over exactly the given numbers that equals the target succeeds.

A committed wrong answer (the given numbers, another value) earns the 0.1 format credit. Generated
variants (hypothesis) over reset seeds: the correct expression E wrapped or hedged with a wrong one W
("E or W", "E, W", "not E", two expressions, "W = target"), and expressions that reach the target
with the wrong numbers (one left out, one used twice, one added, two concatenated into one literal).
None may succeed or earn more than 0.1.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

from hedge_templates import OUTSIDE_THE_ANSWER, WITHOUT_AN_ANSWER, fill
from hypothesis import HealthCheck, example, given, settings
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
    target, nums, right = _ENV.target, tuple(_ENV.nums), _ENV.oracle()[0]
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


#: The most numbers a changed list holds (an instance's numbers plus one, "repeat" or "add").
_MAX_CHANGED = 7
#: Wrappers that keep the value but add one literal: (the literal, the template).
_NEUTRAL_WRAPPERS = (("1", "({e}) * 1"), ("0", "({e}) + 0"))


def _changed_numbers(nums: tuple[int, ...], change: str, index: int, extra: int) -> list[str]:
    """The instance's numbers (as literals) with one number dropped, repeated, added, or two concatenated."""
    numbers = [str(n) for n in nums]
    i = index % len(numbers)
    if change == "drop":
        numbers.pop(i)
    elif change == "repeat":
        numbers.append(numbers[i])
    elif change == "add":
        numbers.append(str(extra))
    else:
        j = (i + 1) % len(numbers)
        numbers = [n for k, n in enumerate(numbers) if k not in (i, j)] + [numbers[i] + numbers[j]]
    return numbers


def _neutral_wrappings(expression: str, numbers: list[str], nums: tuple[int, ...]) -> list[str]:
    """`(E) * 1` and `(E) + 0` (same value, one literal more), each kept only when its literals are still not
    the given multiset: `(41 + 3 + 13) * 1` puts back the 1 that was dropped from (41, 3, 1, 13), so it uses
    every number once and is rightly scored as such. At most one of the two can put the number back."""
    given_numbers = Counter(str(n) for n in nums)
    return [
        template.replace("{e}", expression)
        for literal, template in _NEUTRAL_WRAPPERS
        if Counter([*numbers, literal]) != given_numbers
    ]


@given(
    seed=SEEDS,
    change=st.sampled_from(["drop", "repeat", "add", "concat"]),
    index=st.integers(0, _MAX_CHANGED - 1),
    extra=st.integers(0, 100),
    order=st.permutations(range(_MAX_CHANGED)),
    ops=st.lists(st.sampled_from("+-*/"), min_size=_MAX_CHANGED - 1, max_size=_MAX_CHANGED - 1),
)
# Seed 0 is (41, 3, 1, 13) with target 1: dropping the 1 and wrapping `(41 + 3 + 13) * 1` used every number once.
@example(seed=0, change="drop", index=2, extra=0, order=tuple(range(_MAX_CHANGED)), ops=["+"] * (_MAX_CHANGED - 1))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_expressions_over_the_wrong_numbers_never_succeed(seed, change, index, extra, order, ops):
    target, nums, right, _ = _instance(seed)
    assert len(nums) + 1 <= _MAX_CHANGED
    numbers = _changed_numbers(nums, change, index, extra)
    # The generator's own invariant: the literals are never exactly the given numbers (else the test is wrong).
    assert Counter(numbers) != Counter(str(n) for n in nums), (numbers, nums)
    ordered = [numbers[k] for k in order if k < len(numbers)]
    expression = ordered[0] + "".join(f" {op} {n}" for op, n in zip(ops, ordered[1:]))
    wrapped = _neutral_wrappings(expression, numbers, nums)
    assert wrapped  # at least one wrapper keeps the multiset wrong
    for answer in (expression, *wrapped, f"{expression} = {target}", f"{right} + 0", f"{right} * 1"):
        # the env's own scoring function (the env adds nothing to a well-formed answer's score)
        score, details = score_countdown(answer, target, list(nums))
        assert score <= 0.1 and not details["numbers_ok"], (answer, nums, target, score)


def test_a_neutral_wrapper_that_puts_the_dropped_number_back_uses_the_right_numbers():
    """The draw that made the generated test above wrong: the env rightly counts `(41 + 3 + 13) * 1` as using
    every number of (41, 3, 1, 13) once (57, not the target 1: the 0.1 format credit)."""
    target, nums, _, _ = _instance(0)
    assert (target, sorted(nums)) == (1, [1, 3, 13, 41])
    score, details = score_countdown("(41 + 3 + 13) * 1", target, list(nums))
    assert details["numbers_ok"] and score == 0.1
    assert _neutral_wrappings("41 + 3 + 13", ["41", "3", "13"], nums) == ["(41 + 3 + 13) + 0"]


def test_the_right_expression_outside_the_answer_does_not_count():
    for seed in range(10):
        target, _, right, wrong = _instance(seed)
        for response in fill(OUTSIDE_THE_ANSWER + WITHOUT_AN_ANSWER, right, wrong):
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
