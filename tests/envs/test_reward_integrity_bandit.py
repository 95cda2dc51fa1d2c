"""Reward integrity of the Bandit: only naming the better arm alone pulls it.

Success is pulling the arm with the higher mean (the high-risk arm with the defaults); the committed
wrong answer names the low arm (0.1, no success). Generated variants (hypothesis) over reset seeds
wrap the high arm's name H with the low arm's L: both names ("H or L", "H, L", "H || L"), negations
("not H"), qualifiers, homoglyphs, H only in <think>, two <answer> blocks. None may pull H (no
success), and none may earn more than the low arm's 0.1.
"""

from __future__ import annotations

from hedge_templates import OUTSIDE_THE_ANSWER, WITHOUT_AN_ANSWER, fill, misspell
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.bandit import BanditEnv

#: Examples per generated test (the report counts these).
EXAMPLES = 200

_ENV = BanditEnv()

#: {h}: the better arm, {l}: the other.
HOSTILE = (
    "not {h}",
    "{h} is wrong",
    "maybe {h}",
    "{h}?",
    "{h} or {l}",
    "{l} or {h}",
    "either {h} or {l}",
    "{h}, {l}",
    "{h} {l}",
    "{h}/{l}",
    "{h} | {l}",
    "{h} || {l}",
    "{l} || {h}",
    "{h} and {l}",
    "both {h} and {l}",
    "{h} (not {l})",
    "{h}{h}",
    "pull {h} or {l}",
    "<answer>{h}</answer>",
)
HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "i": "і", "r": "г", "x": "х", "y": "у"}


def _pull(seed: int, answer: str, response: str | None = None) -> tuple[float, dict]:
    _ENV.reset(seed=seed)
    _, reward, _, _, info = _ENV.step(response or f"<think>t</think><answer>{answer}</answer>")
    return reward, info


def _arms(seed: int) -> tuple[str, str]:
    _ENV.reset(seed=seed)
    better = _ENV.oracle()[0]
    return better, _ENV.low_arm if better == _ENV.high_arm else _ENV.high_arm


@given(seed=st.integers(0, 10**6), template=st.sampled_from(HOSTILE), case=st.sampled_from(["as is", "lower", "upper"]))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_naming_both_arms_or_hedging_pulls_nothing_better(seed, template, case):
    better, other = _arms(seed)
    h = {"as is": better, "lower": better.lower(), "upper": better.upper()}[case]
    committed_wrong, _ = _pull(seed, other)
    reward, info = _pull(seed, template.replace("{h}", h).replace("{l}", other))
    assert not info["success"] and reward <= committed_wrong, (template, better, other, reward)


@given(seed=st.integers(0, 10**6), data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_lookalike_or_misspelled_names_pull_nothing(seed, data):
    better, other = _arms(seed)
    i = data.draw(st.integers(0, len(better) - 1))
    kind = data.draw(st.sampled_from(["homoglyph", "drop", "double", "space"]))
    if kind == "space":
        if i == 0 or better[i - 1] == " " or better[i] == " ":
            return
        bad = better[:i] + " " + better[i:]
    else:
        bad = misspell(better, i, kind, HOMOGLYPHS)
        if bad is None:
            return
    committed_wrong, _ = _pull(seed, other)
    reward, info = _pull(seed, bad)
    assert not info["success"] and reward <= committed_wrong, (bad, reward)


def test_the_better_arm_outside_the_answer_does_not_count():
    for seed in range(10):
        better, other = _arms(seed)
        committed_wrong, _ = _pull(seed, other)
        for response in fill(OUTSIDE_THE_ANSWER + WITHOUT_AN_ANSWER, better, other):
            reward, info = _pull(seed, "", response)
            assert not info["success"] and reward <= committed_wrong, (response, reward)
        assert _pull(seed, better)[1]["success"]  # the check can fail: naming it alone pulls it
