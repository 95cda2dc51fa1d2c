"""SearchQA: HotpotQA scoring, BM25 retrieval (against a plain-loop BM25), the procedural world, loaders, env."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from observation_checks import assert_async_vector_env_cleans

from ragen_envs.data import fixture_path
from ragen_envs.protocol import FORMAT_PENALTY
from ragen_envs.searchqa import (
    BM25Index,
    KnowledgeConfig,
    Passage,
    PassageRetriever,
    SearchQAEnv,
    f1_score,
    generate_kb,
    generate_question,
    load_corpus,
    normalize_answer,
    score_answer,
)
from ragen_envs.searchqa.env import match_searchqa_action
from ragen_envs.searchqa.knowledge import RELATIONS
from ragen_envs.searchqa.retriever import cached_file_retriever, tokenize


def respond(action: str) -> str:
    return f"<think>t</think><answer>{action}</answer>"


def run_oracle(env, seed, options=None):
    env.reset(seed=seed, options=options)
    total, done, info = 0.0, False, {}
    while not done:
        _, r, term, trunc, info = env.step(respond(env.oracle()[0]))
        total += r
        done = term or trunc
    return total, info


# ---------------------------------------------------------------------------------------------- scoring
@pytest.mark.parametrize(
    "text, expected",
    [
        ("The  Eiffel Tower!", "eiffel tower"),
        ("An apple, a day.", "apple day"),
        ("A.B.C.", "abc"),
        ("theater of the absurd", "theater of absurd"),  # 'the' only as a whole word
        ("  Mira   TALVEN ", "mira talven"),
        ("", ""),
        # an article is a/an/the before another word; the last word and a capital A after the first are words
        ("A", "a"),
        ("the", "the"),
        (".", ""),
        ("Vitamin A", "vitamin a"),
        ("Type A personality", "type a personality"),
        ("type a personality", "type personality"),
        ("A Tale of Two Cities", "tale of two cities"),
        ("The The", "the"),
    ],
)
def test_normalize_answer_hand_cases(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    "pred, gold, reward, em",
    [
        # the red team's cases: HotpotQA's normaliser made all of these exact matches
        (".", "A", 0.0, False),
        ("the", "A", 0.0, False),
        ("an", "A", 0.0, False),
        ("Vitamin", "Vitamin A", 2 / 3, False),  # an incomplete answer: its F1, not a success
        # the gold's letter A is a word, matched in any case and with articles before words
        ("a", "A", 1.0, True),
        ("A.", "A", 1.0, True),
        ("the A", "A", 1.0, True),
        ("vitamin a", "Vitamin A", 1.0, True),
        ("Vitamin the", "Vitamin A", 0.0, False),
        ("Type personality", "Type A personality", 0.8, False),
        ("type a personality", "Type A personality", 1.0, True),
        ("Type B personality", "Type A personality", 0.0, False),
        ("Type personality", "type a personality", 1.0, True),  # this gold's lower-case "a" is an article
        # articles before a word are still ignored
        ("Beatles", "The Beatles", 1.0, True),
        ("a beatles", "The Beatles", 1.0, True),
        ("Beatles the", "The Beatles", 0.0, False),  # a last "the" is a word of its own
        ("Tale of Two Cities", "A Tale of Two Cities", 1.0, True),
        (".", ".", 0.0, False),  # a gold without a word matches nothing
        ("", "Korford", 0.0, False),
    ],
)
def test_answers_that_lose_a_word_or_have_none_are_not_exact(pred, gold, reward, em):
    got, got_em, _ = score_answer(pred, gold)
    assert got == pytest.approx(reward) and got_em == em


@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        ("the cat sat", "cat sat on mat", 2 * 1.0 * 0.5 / 1.5),  # P = 2/2, R = 2/4
        ("x x y", "x y y", 2 / 3),  # multiset overlap {x, y}: P = R = 2/3
        ("Korford", "korford.", 1.0),
        ("blue", "red", 0.0),
        ("no", "no way", 0.0),  # yes/no/noanswer only match themselves (official script)
        ("yes", "yes", 1.0),
        ("", "anything", 0.0),
    ],
)
def test_f1_hand_cases(pred, gold, expected):
    assert f1_score(pred, gold) == pytest.approx(expected)


def test_score_answer_rules():
    assert score_answer("The Korford", "korford") == (1.0, True, 1.0)
    # F1 = 2 * (1 * 1/5) / (1 + 1/5) = 1/3 > 0.3: counted.
    r, em, f1 = score_answer("alpha", "alpha beta gamma delta epsilon")
    assert not em and r == pytest.approx(1 / 3) and f1 == pytest.approx(1 / 3)
    # F1 = 0.25 <= 0.3: nothing.
    r, em, f1 = score_answer("alpha b c d", "alpha x y z")
    assert (r, em) == (0.0, False) and f1 == pytest.approx(0.25)
    assert score_answer("1990", ["1989", "1990"])[0] == 1.0
    # An incomplete answer keeps its F1: "Smith" of "John Smith", 2 * (1 * 1/2) / (1 + 1/2) = 2/3.
    assert score_answer("Smith", "John Smith")[0] == pytest.approx(2 / 3)
    assert score_answer("the Smith", "John Smith")[0] == pytest.approx(2 / 3)  # articles are dropped


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("1115 1956", "1956"),  # HotpotQA F1 2/3
        ("1956 1115", "1956"),
        ("1115, 1956 or 1957", "1956"),  # F1 2/(k+1) = 1/2
        ("1956 1956", "1956"),  # a repeated word: F1 2/3
        ("John Smith or Jane Doe", "John Smith"),  # F1 2/3
        ("Smith Jones", "John Smith"),  # F1 1/2: a word of its own
        ("not 1956", "1956"),
        ("1956 is wrong", "1956"),
    ],
)
def test_listing_candidates_pays_no_more_than_a_committed_wrong_answer(answer, gold):
    reward, em, f1 = score_answer(answer, gold)
    assert f1 > 0.3  # HotpotQA's F1 would pay it
    assert (reward, em) == (0.0, False)


_WORDS = st.lists(st.sampled_from(["red", "blue", "the", "a", "cat", "dog", "1990", "x"]), max_size=6).map(
    " ".join
)


@given(_WORDS, _WORDS)
@settings(max_examples=150, deadline=None)
def test_f1_is_a_symmetric_multiset_overlap(a, b):
    f = f1_score(a, b)
    assert f == pytest.approx(f1_score(b, a)) and 0.0 <= f <= 1.0
    ta, tb = Counter(normalize_answer(a).split()), Counter(normalize_answer(b).split())
    special = {"yes", "no", "noanswer"}
    if ta and ta == tb and not (set(ta) & special):
        assert f == 1.0
    if not (ta & tb):
        assert f == 0.0


@pytest.mark.parametrize(
    "piece, expected",
    [
        ("search[Zentrix Labs]", "search[Zentrix Labs]"),
        ("  SEARCH [ Zentrix   Labs ] ", "search[Zentrix Labs]"),
        ("Finish[1920]", "finish[1920]"),
        ("search[]", None),
        ("finish[   ]", None),
        ("search Zentrix", None),
        ("lookup[x]", None),
        ("search[a] finish[b]", None),
        ("search[a[b]]", None),
        # Non-ASCII letters that Unicode re.IGNORECASE / casefold equate with ASCII ones are not verbs.
        ("\u017fearch[Zentrix Labs]", None),  # long s: used to run as finish
        ("finish[x]".replace("i", "\u0131", 1), None),  # dotless i
        ("f\u0130nish[x]", None),  # dotted capital I
        ("SEARCH[x]", "search[x]"),  # ASCII upper case stays fine
        ("\uff53earch[x]", None),  # fullwidth s
    ],
)
def test_action_matcher(piece, expected):
    assert match_searchqa_action(piece) == expected


# ---------------------------------------------------------------------------------------------- BM25
def reference_bm25(docs: list[list[str]], query: list[str], k1=1.5, b=0.75) -> list[float]:
    """Plain-loop BM25 (Lucene variant, as bm25s): idf = ln(1 + (N - df + .5)/(df + .5))."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    out = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t in query:
            df = sum(1 for x in docs if t in x)
            if df == 0 or tf[t] == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def test_bm25_scores_and_ranking_match_a_plain_loop():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(30)]
    texts = [" ".join(rng.choice(vocab, size=int(rng.integers(3, 15)))) for _ in range(60)]
    index = BM25Index(texts)
    docs = [tokenize(t) for t in texts]
    for _ in range(20):
        q = " ".join(rng.choice(vocab, size=int(rng.integers(1, 4))))
        ref = reference_bm25(docs, tokenize(q))
        assert np.allclose(index.scores(q), ref, rtol=1e-4, atol=1e-5)
        top = index.top_k(q, 5)
        expected = sorted((i for i in range(len(ref)) if ref[i] > 0), key=lambda i: (-round(ref[i], 4), i))[
            :5
        ]
        assert [i for i, _ in top] == expected


def test_bm25_ties_unknown_terms_and_bad_k():
    index = BM25Index(["red shirt", "red shirt", "blue jeans", "the of and"])
    assert [i for i, _ in index.top_k("red", 5)] == [0, 1]  # ties by corpus order; zero scores dropped
    assert index.top_k("zzz unknown", 3) == []
    assert index.top_k("the", 3) == []  # stop words only
    with pytest.raises(ValueError, match="k must be"):
        index.top_k("red", 0)
    # Single characters survive tokenisation (sizes such as "M").
    assert tokenize("Size M, 3 pack") == ["size", "m", "3", "pack"]


def test_retriever_rejects_duplicate_ids_and_empty_corpus():
    with pytest.raises(ValueError, match="unique"):
        PassageRetriever([Passage("a", "", "x"), Passage("a", "", "y")])
    with pytest.raises(ValueError, match="no passages"):
        PassageRetriever([])


# ---------------------------------------------------------------------------------------------- world
def test_generated_questions_are_readable_from_their_supporting_passages():
    cfg = KnowledgeConfig(num_entities=40, hops=(1, 4), distractors=3)
    for seed in range(6):
        rng = np.random.default_rng(seed)
        kb = generate_kb(rng, cfg)
        names = [e.name for e in kb.entities.values()]
        assert len(set(n.lower() for n in names)) == len(names)  # unique names
        for _ in range(15):
            hops = int(rng.integers(1, 5))
            item = generate_question(rng, kb, hops)
            if item is None:
                continue
            assert len(item.supporting) == hops == len(item.queries)
            texts = {p.pid: p.text for p in kb.passages}
            assert all(pid in texts for pid in item.supporting)
            # Each search target is named in the question or in the previous supporting passage ...
            assert item.queries[0] in item.question
            for prev, nxt in zip(item.supporting, item.queries[1:], strict=False):
                assert nxt in texts[prev]
            # ... and the answer is stated in the last supporting passage.
            assert item.answer in texts[item.supporting[-1]]
            # BM25 returns every supporting passage for its entity name (top 3, the env default) in
            # most cases; the env rejects the rest (checked in the oracle test).
            found = [
                pid in {p.pid for p, _ in kb.retriever.search(q, 3)}
                for q, pid in zip(item.queries, item.supporting, strict=True)
            ]
            assert sum(found) >= len(found) - 1


def test_world_is_consistent():
    cfg = KnowledgeConfig(num_entities=60, distractors=2)
    kb = generate_kb(np.random.default_rng(3), cfg)
    assert len(kb.passages) == len(kb.entities) == 60
    kinds = Counter(e.kind for e in kb.entities.values())
    assert set(kinds) == {"person", "company", "city", "country"}
    for e in kb.entities.values():
        for rel, target in e.rels.items():
            source_kind, target_kind = RELATIONS[rel][:2]
            assert e.kind == source_kind and kb.entity(target).kind == target_kind
        if e.kind == "country":
            assert kb.entity(e.rels["capital"]).rels["country"] == e.eid  # a capital lies in its country
        # Each passage states its entity's facts.
        text = next(p.text for p in kb.passages if p.pid == e.eid)
        assert all(v in text for v in e.attrs.values())
        assert all(kb.entity(t).name in text for t in e.rels.values())
    # Each entity is mentioned by `distractors` other passages (besides relation mentions).
    for e in list(kb.entities.values())[:10]:
        mentions = [
            p
            for p in kb.passages
            if p.pid != e.eid and ("about " + e.name in p.text or "after " + e.name in p.text)
        ]
        assert len(mentions) >= 2


def test_knowledge_config_validation():
    with pytest.raises(ValueError, match="hops"):
        KnowledgeConfig(hops=5)
    with pytest.raises(ValueError, match="hops"):
        KnowledgeConfig(hops=(2, 1))
    with pytest.raises(ValueError, match="num_entities"):
        KnowledgeConfig(num_entities=3)
    with pytest.raises(ValueError, match="distractors"):
        KnowledgeConfig(distractors=-1)


# ---------------------------------------------------------------------------------------------- env
def test_oracle_reaches_reward_one_on_many_seeds():
    env = SearchQAEnv(hops=(1, 4), distractors=3)
    hops_seen = set()
    for seed in range(40):
        total, info = run_oracle(env, seed)
        assert total == 1.0 and info["success"] and info["exact_match"]
        hops_seen.add(env.hops)
    assert hops_seen == {1, 2, 3, 4}


def test_oracle_with_a_fixed_world_and_its_searches_return_the_supporting_passages():
    env = SearchQAEnv(kb_seed=7, num_entities=80, hops=(2, 3))
    kb = env.kb
    for seed in range(15):
        env.reset(seed=seed)
        assert env.kb is kb  # the fixed world is not rebuilt
        retrieved = []
        done = False
        while not done:
            _, r, term, trunc, info = env.step(respond(env.oracle()[0]))
            retrieved += info.get("search_results", [])
            done = term or trunc
        assert r == 1.0
        assert set(env.supporting) <= set(retrieved)


def test_check_env_and_determinism():
    check_env(SearchQAEnv(), skip_render_check=True)
    check_env(SearchQAEnv(dataset=fixture_path("searchqa_sample.jsonl")), skip_render_check=True)
    a, b = SearchQAEnv(), SearchQAEnv()
    oa, _ = a.reset(seed=11)
    ob, _ = b.reset(seed=11)
    assert oa == ob
    for act in ("search[founder]", "bad", a.oracle()[0]):
        ra, rb = a.step(respond(act)), b.step(respond(act))
        assert ra[0] == rb[0] and ra[1] == rb[1]
    questions = {SearchQAEnv().reset(seed=s)[1]["question"] for s in range(8)}
    assert len(questions) > 4


def _state_lines(obs: str) -> list[str]:
    """The observation without the invalid-action notice and the turn counter."""
    return [ln for ln in obs.split("\n") if not ln.startswith(("Your answer had no valid action", "Turn "))]


def test_invalid_actions_cost_the_penalty_and_change_nothing_but_the_turn():
    env = SearchQAEnv()
    obs0, _ = env.reset(seed=3)
    env.step(respond("search[" + env.queries[0] + "]"))
    obs1 = env._state_text()
    for bad in ("hello", "search[]", "<answer>search[x]"):  # 1 search + 3 invalid: turn 4 of 5
        obs, r, term, trunc, info = env.step(respond(bad) if not bad.startswith("<") else bad)
        assert r == pytest.approx(FORMAT_PENALTY) and not info["action_is_valid"] and not term
        assert _state_lines(obs) == _state_lines(obs1)
    # Two actions: the first runs, the second is dropped and penalised.
    _, r, term, _, info = env.step(respond(f"finish[{env.golds[0]}] || search[b]"))
    assert term and info["dropped_actions"] == ["search[b]"] and r == pytest.approx(1.0 + FORMAT_PENALTY)


def test_five_turns_without_finishing_terminate_with_no_reward():
    env = SearchQAEnv()
    env.reset(seed=0)
    for t in range(5):
        _, r, term, trunc, info = env.step(respond("search[anything]"))
        assert r == 0.0 and not trunc
        assert term == (t == 4)
    assert not info["success"] and info["turns_left"] == 0
    assert env.step(respond("finish[x]"))[1] == 0.0  # no-op after the end


def test_partial_answer_earns_f1():
    env = SearchQAEnv(dataset=fixture_path("searchqa_sample.jsonl"))
    env.reset(seed=0, options={"index": 1})  # gold "Ada Morrow"
    _, r, term, _, info = env.step(respond("finish[Morrow]"))
    assert term and r == pytest.approx(2 / 3) and not info["success"] and info["f1"] == pytest.approx(2 / 3)


def test_nasty_responses_never_crash():
    env = SearchQAEnv()
    env.reset(seed=1)
    for resp in [
        "",
        "\x00\x01",
        "x" * 100_000,
        "<answer>",
        "<think>a</think><answer>search[" + "q " * 5000 + "]</answer>",
        "🙂<think>思考</think><answer>finish[日本]</answer>",
        12345,
        b"bytes",
    ]:
        obs, r, term, trunc, info = env.step(resp)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        if term:
            env.reset(seed=1)


# ---------------------------------------------------------------------------------------------- data
def test_fixtures_load_and_the_oracle_solves_them():
    for corpus in (None, fixture_path("searchqa_corpus.jsonl")):
        env = SearchQAEnv(dataset=fixture_path("searchqa_sample.jsonl"), corpus=corpus)
        assert len(env.items) == 4
        for i in range(4):
            total, info = run_oracle(env, 0, {"index": i})
            assert total == 1.0 and info["success"]
    corpus = load_corpus(fixture_path("searchqa_corpus.jsonl"))
    assert [p.pid for p in corpus][-1] == "7"  # a record without id gets its record number
    env = SearchQAEnv(
        dataset=fixture_path("searchqa_sample.jsonl"), corpus=fixture_path("searchqa_corpus.jsonl")
    )
    env.reset(seed=0, options={"index": 0})
    _, _, _, _, info = env.step(respond("search[Tallis Observatory]"))
    assert info["search_results"][0] == "c1"


def test_corpus_index_is_cached_per_file(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "alpha beta"}) + "\n" + json.dumps({"text": "gamma"}) + "\n")
    ds = tmp_path / "d.jsonl"
    ds.write_text(json.dumps({"question": "q?", "answer": "gamma"}) + "\n")
    a = SearchQAEnv(dataset=ds, corpus=path)
    b = SearchQAEnv(dataset=ds, corpus=path)
    assert a.retriever is b.retriever is cached_file_retriever(path)
    r = a.retriever
    for s in range(3):
        a.reset(seed=s)
    assert a.retriever is r


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    "lines, needle",
    [
        (
            ['{"question": "q", "answer": "a", "context": [["t", ["s"]]]}', '{"question": "q2"}'],
            ":2: missing field 'answer'",
        ),
        (['{"question": "q", "answer": 3}'], ":1: field 'answer': expected str"),
        (
            ['{"question": "q", "answer": "a", "context": [["t", ["s"]], 5]}'],
            ":1: field 'context': element 1",
        ),
        (
            ['{"question": "q", "answer": "a", "supporting_facts": [["t", "x"]]}'],
            ":1: field 'supporting_facts': element 0",
        ),
        (['{"question": " ", "answer": "a"}'], ":1: field 'question': must not be empty"),
        (['{"question": "q", "answer": " . "}'], ":1: field 'answer': has no word"),
        (['{"question": "q", "answer": "a", "context": [["t", ["s"]]]}', "{not json"], ":2: invalid JSON"),
    ],
)
def test_dataset_errors_name_file_line_and_field(tmp_path, lines, needle):
    path = _write(tmp_path, "bad.jsonl", lines)
    with pytest.raises(ValueError) as exc:
        SearchQAEnv(dataset=path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_corpus_errors(tmp_path):
    ds = _write(tmp_path, "d.jsonl", ['{"question": "q", "answer": "a"}'])
    with pytest.raises(ValueError, match="no record has 'context'"):
        SearchQAEnv(dataset=ds)
    bad = _write(tmp_path, "c.jsonl", ['{"id": "1", "text": "x"}', '{"id": "2", "title": "t"}'])
    with pytest.raises(ValueError, match=r"c\.jsonl:2: missing field 'text'"):
        SearchQAEnv(dataset=ds, corpus=bad)
    dup = _write(tmp_path, "dup.jsonl", ['{"id": "1", "text": "x"}', '{"id": 1, "text": "y"}'])
    with pytest.raises(ValueError, match="already used"):
        load_corpus(dup)
    with pytest.raises(ValueError, match="needs dataset"):
        SearchQAEnv(corpus=dup)
    with pytest.raises(ValueError, match="not found"):
        SearchQAEnv(dataset=ds, corpus=tmp_path / "missing.jsonl")


def test_constructor_argument_errors():
    for kwargs, needle in (({"top_k": 0}, "top_k"), ({"max_turns": 0}, "max_turns"), ({"hops": 9}, "hops"),
                           ({"kb_seed": "x"}, "kb_seed")):  # fmt: skip
        with pytest.raises(ValueError, match=needle):
            SearchQAEnv(**kwargs)


# ---------------------------------------------------------------------------------------------- hostile text
@pytest.mark.parametrize("verb", ["\u017fearch", "\u017fEARCH", "fini\u017fh", "f\u0131nish", "FINI\u017fH"])
def test_lookalike_verbs_are_invalid_and_do_not_finish(verb):
    env = SearchQAEnv()
    env.reset(seed=2)
    before = env._state_text()
    _, r, term, _, info = env.step(respond(f"{verb}[{env.golds[0]}]"))
    assert not info["action_is_valid"] and not term and r == pytest.approx(FORMAT_PENALTY)
    assert env._final is None and env._state_text() == before


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "\udbff\udc00", "\U0001f600", "\x00x"])
def test_echoed_surrogates_and_astral_characters_stay_in_the_observation_space(text):
    env = SearchQAEnv()
    env.reset(seed=1)
    obs, _, _, _, info = env.step(respond(f"search[{text}]"))
    assert info["action_is_valid"] and env.observation_space.contains(obs)
    assert "\ufffd" in obs or text == "\x00x"
    str(info).encode("utf-8")  # no lone surrogate anywhere in info either
    obs, *_ = env.step(respond(f"finish[{text}]"))
    assert env.observation_space.contains(obs)


def test_async_vector_env_survives_a_lone_surrogate():
    responses = (respond("search[\ud83d]"), respond("search[Zentrix]"), respond("finish[\udfff]"))
    assert_async_vector_env_cleans("ragen/SearchQA-v0", responses, "\ud83d")
