"""Reward integrity of SearchQA: hedged, wrapped or perturbed answers never pay more than a committed wrong one.

Generated variants (hypothesis) take the gold answer g of a generated question and a wrong candidate w
(another entity's name or attribute from the same world, a number, or a word) and build answers that
list both (in either order, with separators), negate or qualify g, repeat it, or add a word; each is
sent as `finish[...]` through the env. None may succeed, and its reward may not exceed what
`finish[w]` earns. Responses with the right answer only in <think>, after the answer block or in a
second answer block do not finish with the right answer.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_envs.searchqa import SearchQAEnv, normalize_answer, score_answer

#: Examples per generated test (the report counts these).
EXAMPLES = 200

_ENV = SearchQAEnv(kb_seed=3)

HEDGES = (
    "{g} {w}",
    "{w} {g}",
    "{g}, {w}",
    "{w}, {g}",
    "{g} or {w}",
    "{w} or {g}",
    "either {w} or {g}",
    "{g} / {w}",
    "{g}; {w}",
    "{g} and {w}",
    "not {g}",
    "{g} is wrong",
    "maybe {g}",
    "{g} {g}",
    "{g} (or {w})",
    "{w} {g} {w}",
)


def _finish(env: SearchQAEnv, seed: int, answer: str) -> tuple[float, dict]:
    env.reset(seed=seed)
    _, reward, _, _, info = env.step(f"<think>t</think><answer>finish[{answer}]</answer>")
    return reward, info


def _candidates(env: SearchQAEnv) -> list[str]:
    """Wrong candidates from the current question's world: every other passage title."""
    golds = {normalize_answer(g) for g in env.golds}
    titles = {p.title for p in env.retriever.passages if p.title}
    return sorted(t for t in titles if normalize_answer(t) not in golds)


@given(
    seed=st.integers(0, 10**6),
    template=st.sampled_from(HEDGES),
    pick=st.integers(0, 10**6),
    wrong_kind=st.sampled_from(["entity", "number", "word"]),
)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_hedged_or_wrapped_answers_pay_no_more_than_a_committed_wrong_answer(seed, template, pick, wrong_kind):
    env = _ENV
    env.reset(seed=seed)
    gold = env.golds[0]
    if wrong_kind == "entity":
        candidates = _candidates(env)
        wrong = candidates[pick % len(candidates)]
    elif wrong_kind == "number":
        wrong = str(1000 + pick % 9000)
    else:
        wrong = ["Zentrix", "blue", "Paris", "engineer", "unknown"][pick % 5]
    if normalize_answer(wrong) in {normalize_answer(g) for g in env.golds}:
        return
    answer = template.replace("{g}", gold).replace("{w}", wrong)
    if "[" in answer or "]" in answer:
        return
    committed, _ = _finish(env, seed, wrong)
    reward, info = _finish(env, seed, answer)
    assert not info["success"], (answer, env.golds)
    assert reward <= committed, (answer, env.golds, reward, committed)


@given(k=st.integers(2, 8), gold=st.integers(1000, 2100), others=st.lists(st.integers(1000, 2100), min_size=7))
@settings(max_examples=EXAMPLES, deadline=None)
def test_listing_k_candidates_pays_nothing(k, gold, others):
    """HotpotQA's F1 pays 2/(k+1) for k candidates one of which is right; here it pays 0."""
    wrong = [str(o) for o in others if o != gold][: k - 1]
    if not wrong:
        return
    answer = " ".join([*wrong[: len(wrong) // 2], str(gold), *wrong[len(wrong) // 2 :]])
    assert score_answer(answer, str(gold))[:2] == (0.0, False)


@pytest.mark.parametrize("seed", range(5))
def test_the_right_answer_outside_the_finish_action_earns_nothing(seed):
    env = _ENV
    env.reset(seed=seed)
    gold = env.golds[0]
    wrong = _candidates(env)[0]
    committed, _ = _finish(env, seed, wrong)
    for response in (
        f"<think>finish[{gold}]</think><answer>finish[{wrong}]</answer>",
        f"<think>t</think><answer>finish[{wrong}]</answer><answer>finish[{gold}]</answer>",
        f"<think>t</think><answer>finish[{wrong}]</answer> finish[{gold}]",
        f"<think>t</think><answer>finish[{wrong}] || finish[{gold}]</answer>",
    ):
        env.reset(seed=seed)
        _, reward, _, _, info = env.step(response)
        assert not info["success"] and reward <= committed, (response, reward)
    reward, info = _finish(env, seed, gold)
    assert info["success"] and reward == 1.0  # the check can fail: the right answer still earns 1
    # The first action is the committed one: `finish[gold] || finish[wrong]` answers gold, and the
    # dropped second action costs the format penalty (RAGEN's action budget), so it pays less than 1.
    env.reset(seed=seed)
    _, reward, _, _, info = env.step(f"<think>t</think><answer>finish[{gold}] || finish[{wrong}]</answer>")
    assert info["success"] and reward < 1.0
