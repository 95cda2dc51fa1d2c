"""Reward integrity of SearchQA: hedged, wrapped or perturbed answers never pay more than a committed wrong one.

Generated variants (hypothesis) take the gold answer g of a generated question and a wrong candidate w
(another entity's name or attribute from the same world, a number, or a word) and build answers that
list both (in either order, with separators), negate or qualify g, repeat it, or add a word; each is
sent as `finish[...]` through the env. None may succeed, and its reward may not exceed what
`finish[w]` earns. Responses with the right answer only in <think>, after the answer block or in a
second answer block do not finish with the right answer.

Article removal must not make a different answer the gold: generated golds and answers made of single
letters, articles and words are scored against a brute-force reference of the documented rule (an
article is a/an/the before another word, never a capital A after the first word; the gold's own reading
decides), an answer without a word never matches, and an answer that lacks a word of the gold is never
an exact match.
"""

from __future__ import annotations

import itertools
import json
import re
import string
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ragen_envs.searchqa import SearchQAEnv, exact_match, score_answer

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
    titles = {p.title for p in env.retriever.passages if p.title}
    return sorted(t for t in titles if not any(exact_match(t, g) for g in env.golds))


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
    if any(exact_match(wrong, g) for g in env.golds):
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


# ---------------------------------------------------------------------------------------------- articles
_ARTICLE_WORDS = {"a", "an", "the"}
#: Words for generated golds and answers: single letters, articles in several cases, ordinary words.
_WORD_POOL = ["a", "A", "an", "An", "the", "The", "THE", "b", "B", "vitamin", "Vitamin", "type", "Smith", "1990",
              ".", "A.", "the,", "(a)", "x"]
_TEXTS = st.lists(st.sampled_from(_WORD_POOL), max_size=5).map(" ".join)


def _words(text: str) -> list[tuple[str, str]]:
    """(lower case, as written) per word: punctuation deleted by a regular expression, split on spaces."""
    cleaned = re.sub("[" + re.escape(string.punctuation) + "]", "", text)
    return [(w.lower(), w) for w in cleaned.split()]


def _content(text: str) -> list[str]:
    """The words without the articles: a/an/the that is not the last word and not a capital A after the first
    word."""
    words = _words(text)
    return [low for k, (low, raw) in enumerate(words)
            if not (low in _ARTICLE_WORDS and k < len(words) - 1 and not (raw == "A" and k > 0))]


def _reference_exact(pred: str, gold: str) -> bool:
    """Brute force over every set of deletable articles of the answer (a/an/the before another word): an exact
    match when one deletion leaves the gold's words, and the gold has a word."""
    target = _content(gold)
    words = [low for low, _ in _words(pred)]
    optional = [k for k in range(len(words) - 1) if words[k] in _ARTICLE_WORDS]
    for dropped in itertools.product((False, True), repeat=len(optional)):
        gone = {k for k, d in zip(optional, dropped) if d}
        if target and [w for k, w in enumerate(words) if k not in gone] == target:
            return True
    return False


@given(pred=_TEXTS, gold=_TEXTS)
@example(pred=".", gold="A")
@example(pred="the", gold="A")
@example(pred="Vitamin", gold="Vitamin A")
@example(pred="Type personality", gold="Type A personality")
@example(pred="Smith vitamin", gold="vitamin Smith")
@settings(max_examples=EXAMPLES, deadline=None)
def test_exact_match_follows_the_documented_article_rule(pred, gold):
    reward, em, _ = score_answer(pred, gold)
    assert em == _reference_exact(pred, gold), (pred, gold)
    if em:
        assert reward == 1.0
    elif reward == 1.0:  # token F1 1 without an exact match: the gold's words, all of them, in another order
        assert Counter(_content(pred)) == Counter(_content(gold)) != Counter(), (pred, gold)
        assert _content(pred) != _content(gold), (pred, gold)


@given(pred=_TEXTS, gold=_TEXTS)
@settings(max_examples=EXAMPLES, deadline=None)
def test_article_removal_never_makes_a_different_answer_the_gold(pred, gold):
    """An exact match has every word of the gold (as many times) and nothing else but articles; an answer
    without a word earns nothing; a paid answer that is not exact has only words of the gold (articles
    before a word not counted)."""
    reward, em, _ = score_answer(pred, gold)
    pred_words = Counter(low for low, _ in _words(pred))
    gold_words = Counter(low for low, _ in _words(gold))
    if em:
        assert not (Counter(_content(gold)) - pred_words), (pred, gold)
        assert set(pred_words - Counter(_content(gold))) <= _ARTICLE_WORDS, (pred, gold)
    if not pred_words or not gold_words:
        assert (reward, em) == (0.0, False), (pred, gold)
    if 0 < reward < 1:
        assert _content(pred) and not (Counter(_content(pred)) - Counter(_content(gold))), (pred, gold, reward)


@given(gold=_TEXTS, drop=st.integers(0, 4), article=st.sampled_from(["the", "a", "An", "THE"]))
@settings(max_examples=EXAMPLES, deadline=None)
def test_the_gold_matches_itself_in_any_case_but_not_without_one_of_its_words(gold, drop, article):
    content = _content(gold)
    if not content:
        assert not score_answer(gold, gold)[1]  # a gold without a word matches nothing, itself included
        return
    for same in (gold, gold.lower(), gold.upper(), f"{article} {gold}"):
        assert score_answer(same, gold)[:2] == (1.0, True), (same, gold)  # the check can fail
    shorter = " ".join(w for k, w in enumerate(content) if k != drop % len(content))
    assert not score_answer(shorter, gold)[1], (shorter, gold)


def test_a_data_set_gold_a_is_not_answered_by_an_article_or_punctuation(tmp_path):
    """Through the env: a HotpotQA-style record whose answer is the letter "A"."""
    record = {"question": "Which blood group is the universal plasma donor?", "answer": "AB",
              "answer_aliases": ["A"], "context": [["Blood", "Group AB plasma can be given to anyone."]]}
    path = tmp_path / "letters.jsonl"
    path.write_text(json.dumps(record) + "\n")
    env = SearchQAEnv(dataset=path)
    for answer, success in ((".", False), ("the", False), ("an", False), ("a.", True), ("AB", True)):
        env.reset(seed=0, options={"index": 0})
        _, reward, terminated, _, info = env.step(f"<think>t</think><answer>finish[{answer}]</answer>")
        assert terminated and info["success"] == success and reward == (1.0 if success else 0.0), answer
