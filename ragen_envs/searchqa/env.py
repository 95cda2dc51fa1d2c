"""`ragen/SearchQA-v0`: answer a (multi-hop) question by searching a passage corpus with BM25."""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragen_envs import protocol
from ragen_envs.base import TextAgentEnv
from ragen_envs.data import Field, record_index
from ragen_envs.data.cache import BuildCache, file_version
from ragen_envs.data.loading import load_numbered_records
from ragen_envs.searchqa.knowledge import (
    KnowledgeBase,
    KnowledgeConfig,
    QAItem,
    generate_kb,
    generate_question,
    oracle_retrieves_support,
)
from ragen_envs.searchqa.retriever import (
    ENGLISH_STOPWORDS,
    Passage,
    PassageRetriever,
    cached_file_retriever,
    passages_from_texts,
)
from ragen_envs.spaces import MAX_OBSERVATION_CHARS, fit_observation
from ragen_envs.validation import require_int, require_path

#: Answers scoring a token F1 at or below this earn nothing (the issue's rule).
F1_THRESHOLD = 0.3
#: Questions drawn per world before a new world is drawn (generation is retried, never loops forever).
_QUESTION_TRIES = 64
_WORLD_TRIES = 16


# ---------------------------------------------------------------------------------------------- scoring
#: The words HotpotQA's normaliser drops as articles.
ARTICLES = frozenset({"a", "an", "the"})
_PUNCTUATION = frozenset(string.punctuation)
#: HotpotQA's answers that only match themselves (F1 0 against anything else).
_SPECIAL = ("yes", "no", "noanswer")


def _cased_words(text: str) -> list[str]:
    """The words of `text` in their own case: punctuation removed, split on whitespace (HotpotQA's steps)."""
    return "".join(ch for ch in text if ch not in _PUNCTUATION).split()


def answer_words(text: str) -> list[str]:
    """HotpotQA's normalisation without its article step: lower case, punctuation removed, split on whitespace."""
    return [w.lower() for w in _cased_words(text)]


def _is_determiner(words: list[str], i: int) -> bool:
    """Whether word i (lower case) can be an article: a/an/the standing before another word."""
    return words[i] in ARTICLES and i + 1 < len(words)


def content_words(text: str) -> list[str]:
    """`answer_words` without the articles, where an article is a/an/the *before another word* ("the" of
    "The Beatles", "a" of "A Tale of Two Cities") and not a capital "A" after the first word. So the last
    word is never an article and a text with a word always keeps one: the "A" of "Vitamin A", "Plan A" and
    of the answer "A", and the "A" of "Type A personality", are words.

    HotpotQA's normaliser drops a/an/the everywhere, which emptied answers ("A", "the", "." all became "")
    and made "Vitamin" equal "Vitamin A".
    """
    cased = _cased_words(text)
    words = [w.lower() for w in cased]
    return [
        w for i, w in enumerate(words)
        if not (_is_determiner(words, i) and not (cased[i] == "A" and i > 0))
    ]


def normalize_answer(s: str) -> str:
    """The normalised answer: `content_words` joined by single spaces (lower case, no punctuation, no
    articles before a word); "" for a text without a word, which matches nothing."""
    return " ".join(content_words(s))


def _spells(words: list[str], content: list[str]) -> bool:
    """Whether deleting some articles that stand before another word (`_is_determiner`) from `words` leaves
    exactly `content`, in order. A dynamic programme over (words read, content words matched)."""
    reachable = {0}
    for i, word in enumerate(words):
        deletable = _is_determiner(words, i)
        reachable = {j + 1 for j in reachable if j < len(content) and content[j] == word} | (
            reachable if deletable else set()
        )
        if not reachable:
            return False
    return len(content) in reachable


def exact_match(prediction: str, gold: str) -> bool:
    """Exact match: the gold has a word, and the prediction is the gold's `content_words`, in order, plus
    at most some articles before a word (case and punctuation ignored).

    The gold decides which of its words are articles: for "Type A personality" the "A" is a word, so
    "type a personality" matches and "Type personality" does not; for "The Beatles" both "Beatles" and
    "the beatles" match. An answer is never an exact match by losing a word of the gold, and an answer
    without a word ("the", ".") matches nothing.
    """
    content = content_words(gold)
    return bool(content) and _spells(answer_words(prediction), content)


def f1_score(prediction: str, gold: str) -> float:
    """HotpotQA's token F1 (hotpot_evaluate_v1.py `f1_score`) over `content_words`.

    common = multiset intersection of the two content-word lists; P = |common| / |pred|,
    R = |common| / |gold|, F1 = 2PR / (P + R), and 0 when nothing is common (so 0 when either side has no
    word). As in the official script, "yes" / "no" / "noanswer" only match themselves (F1 0 otherwise).
    """
    p_toks, r_toks = content_words(prediction), content_words(gold)
    pred, ref = " ".join(p_toks), " ".join(r_toks)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    common = Counter(p_toks) & Counter(r_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p_toks), same / len(r_toks)
    return 2 * precision * recall / (precision + recall)


def is_key_word(word: str) -> bool:
    """Whether a (normalised) word can carry an answer on its own: it is not an English stop word
    (`ENGLISH_STOPWORDS`: "of", "the", "a", "and", ...) and has more than one character ("J", "V", "1")."""
    return len(word) > 1 and word not in ENGLISH_STOPWORDS


def is_part_of(prediction: str, gold: str) -> bool:
    """Whether the prediction has a word and every word of it is a word of `gold` (multiset inclusion of
    `content_words`), i.e. the prediction is a part of the gold answer ("Smith" of "John Smith"), with no
    word of its own."""
    pred = Counter(content_words(prediction))
    return bool(pred) and not (pred - Counter(content_words(gold)))


def _earns_partial_credit(prediction: str, gold: str) -> bool:
    """Whether an inexact answer may earn its F1: it is a part of `gold` (`is_part_of`) and has a key word
    (`is_key_word`). A stop word or a single letter or digit alone is a part of many golds ("of" of "Bank of
    America", F1 1/2; "a" of "Vitamin A", 2/3; "J" of "J. K. Rowling", 1/2), so one fixed answer, guessed
    without reading anything, would be paid on every such question."""
    return is_part_of(prediction, gold) and any(is_key_word(w) for w in content_words(prediction))


def score_answer(prediction: str, golds: list[str] | tuple[str, ...] | str) -> tuple[float, bool, float]:
    """(reward, exact match, best F1) of an answer against one or several gold answers.

    reward = 1 if some gold matches exactly (`exact_match`); else the best token F1 over the golds of
    which the answer is a part (`is_part_of`: no word outside that gold) with a key word (`is_key_word`: not
    only stop words and single characters) when it is above F1_THRESHOLD (0.3); else 0. The returned F1 is
    the best over all golds (HotpotQA's F1 over `content_words`), for measurement; it is 1 for an exact match
    (whose content words may differ from the gold's only in a letter "a" the gold has as a word: "type a
    personality" for "Type A personality").

    Why partial credit only for a part of the gold: token F1 pays for listing candidates. For gold
    "1956", `1115 1956` has F1 2/3, and k candidates one of which is right have F1 2/(k+1), while
    committing to one wrong candidate earns 0; an agent unsure between k answers would learn to list
    them all. An answer with a word that is not in the gold (a second candidate, a wrong word, a
    repeated word) earns nothing unless it matches exactly, so a hedge never pays more than committing
    to its wrong candidate would; an incomplete answer ("Smith" for "John Smith", "Vitamin" for
    "Vitamin A") keeps its F1 but is not a success. A part made only of stop words or single characters
    ("of" of "Bank of America", "a" of "Vitamin A") earns nothing: it says nothing about the answer, and one
    fixed answer of that kind would be paid on every gold that has it.
    """
    golds = [golds] if isinstance(golds, str) else list(golds)
    em = any(exact_match(prediction, g) for g in golds)
    f1 = max(f1_score(prediction, g) for g in golds)
    if em:
        return 1.0, True, 1.0
    partial = max((f1_score(prediction, g) for g in golds if _earns_partial_credit(prediction, g)), default=0.0)
    return (partial if partial > F1_THRESHOLD else 0.0), False, f1


# ---------------------------------------------------------------------------------------------- actions
# The verb is ASCII letters only: under Unicode re.IGNORECASE "ſearch" (U+017F) and "fınish" (U+0131)
# would match, and a verb the model never wrote would run. It is dispatched on its ASCII lower case.
_ACTION = re.compile(r"^\s*([A-Za-z]+)\s*\[([^\[\]]*)\]\s*$", re.DOTALL)
VERBS = ("search", "finish")


def match_searchqa_action(piece: str) -> str | None:
    """`search[query]` / `finish[answer]` (ASCII verb in any case, non-empty argument without brackets)
    -> canonical `search[query]` / `finish[answer]` with whitespace collapsed; anything else -> None."""
    m = _ACTION.match(piece)
    if not m:
        return None
    verb = m.group(1).lower()
    if verb not in VERBS:
        return None
    arg = " ".join(m.group(2).split())
    if not arg:
        return None
    return f"{verb}[{arg}]"


# ---------------------------------------------------------------------------------------------- data sets
def _context_problem(value: list) -> str | None:
    for i, el in enumerate(value):
        if isinstance(el, str):
            if not el.strip():
                return f"element {i} is an empty passage"
        elif isinstance(el, dict):
            if not isinstance(el.get("text"), str):
                return f"element {i} must have a string 'text' (an object {{title?, text}})"
            if "title" in el and not isinstance(el["title"], str):
                return f"element {i}: 'title' must be a string"
        elif isinstance(el, list):
            ok = (
                len(el) == 2
                and isinstance(el[0], str)
                and (
                    isinstance(el[1], str)
                    or (isinstance(el[1], list) and all(isinstance(s, str) for s in el[1]))
                )
            )
            if not ok:
                return f"element {i} must be [title, [sentences...]] (HotpotQA) or [title, text]"
        else:
            return f"element {i} must be a string, an object {{title?, text}} or [title, [sentences]]"
    return None


def _facts_problem(value: list) -> str | None:
    for i, el in enumerate(value):
        if not (isinstance(el, list) and len(el) == 2 and isinstance(el[0], str) and isinstance(el[1], int)):
            return f"element {i} must be [title, sentence index]"
    return None


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _answer_problem(value: str) -> str | None:
    """An answer must have a word after normalisation (one of punctuation only could never be matched), and
    some response must match it: its normalised words, sent as `finish[...]` in an `<answer>` block, must
    come through the parser and score an exact match. A word holding a control character does not (the
    parser turns it into a space, splitting the word)."""
    if not value.strip():
        return "must not be empty"
    if not content_words(value):
        return "has no word (letters or digits), so no answer could match it"
    written = normalize_answer(value)
    parsed = protocol.parse_response(f"<answer>finish[{written}]</answer>", match_searchqa_action,
                                     action_format="answer", max_actions=1)
    if not parsed.actions or not exact_match(parsed.actions[0][len("finish["):-1], value):
        return ("cannot be given by any response (it holds a control character, which the parser turns into a "
                "space, or is longer than a response)")
    return None


#: A HotpotQA-style record. `context` is HotpotQA's list of [title, [sentences]] (or {title?, text}
#: objects, or strings); `supporting_passages` the gold passages in the same forms; `supporting_facts`
#: HotpotQA's [[title, sentence index]]. `answer_aliases` are extra accepted answers.
SEARCHQA_SCHEMA = {
    "question": Field(str, check=_non_empty),
    "answer": Field(str, check=_answer_problem),
    "context": Field(list, required=False, check=_context_problem),
    "supporting_passages": Field(list, required=False, check=_context_problem),
    "supporting_facts": Field(list, required=False, check=_facts_problem),
    "answer_aliases": Field(list, required=False, item_type=str),
}


def _passage_pairs(elements: list) -> list[tuple[str, str]]:
    """(title, text) pairs of a context / supporting_passages list (forms validated by the schema)."""
    out = []
    for el in elements:
        if isinstance(el, str):
            out.append(("", el))
        elif isinstance(el, dict):
            out.append((el.get("title", ""), el["text"]))
        else:
            title, body = el
            out.append((title, body if isinstance(body, str) else " ".join(s.strip() for s in body)))
    return out


#: Room in a search turn's observation for what is not the question or the results: the turn line and an
#: invalid-action notice.
_OBSERVATION_RESERVE = 256


def question_room(top_k: int, max_passage_chars: int) -> int:
    """The longest data set question a search turn's observation shows whole, with its `top_k` results
    (each clipped to `max_passage_chars`) and the query line. When the knobs' results alone overflow
    the observation (a knob problem, not the data's), the question alone must fit."""
    results = len('Search results for "": ') + 200 + top_k * (len(f"[{top_k}] ") + max_passage_chars + 1)
    fixed = len("Question: ") + _OBSERVATION_RESERVE
    room = MAX_OBSERVATION_CHARS - fixed - results
    return room if room > 0 else MAX_OBSERVATION_CHARS - fixed


def _check_question_lengths(path: Path, numbered: list[tuple[int, dict[str, Any]]], top_k: int,
                            max_passage_chars: int) -> None:
    """ValueError naming file, line and field for a question the observation would show cut (a cut question,
    or search results pushed out of the observation, could make the record unanswerable)."""
    room = question_room(top_k, max_passage_chars)
    for lineno, rec in numbered:
        if len(rec["question"]) > room:
            raise ValueError(
                f"{path}:{lineno}: field 'question': is {len(rec['question'])} characters; with top_k={top_k} and "
                f"max_passage_chars={max_passage_chars} an observation shows at most {room} beside the search "
                "results, so the question or its results would be shown cut"
            )


@dataclass(frozen=True)
class _DatasetItem:
    question: str
    answers: tuple[str, ...]
    queries: tuple[str, ...]


def _dataset_items(records: list[dict[str, Any]]) -> list[_DatasetItem]:
    items = []
    for rec in records:
        titles: list[str] = []
        for title, _ in rec.get("supporting_facts", []):
            if title not in titles:
                titles.append(title)
        if not titles:
            titles = [t for t, _ in _passage_pairs(rec.get("supporting_passages", [])) if t]
        queries = tuple(titles) or (rec["question"],)
        answers = (rec["answer"], *rec.get("answer_aliases", []))
        items.append(_DatasetItem(rec["question"], tuple(answers), queries))
    return items


_DATASET_RETRIEVERS: BuildCache[PassageRetriever] = BuildCache()
_WORLDS: BuildCache[KnowledgeBase] = BuildCache()
#: The validated (line, record) pairs of each data set file version, read once per process.
_DATASETS: BuildCache[list[tuple[int, dict[str, Any]]]] = BuildCache()


def _dataset_version(path: Path) -> tuple | None:
    """The data set file's version (`file_version`) taken *before* its records are read; None when it
    cannot be taken (the loader then names the problem)."""
    try:
        return file_version(path, "data set")
    except ValueError:
        return None


def _dataset_retriever(path: Path, records: list[dict[str, Any]], version: tuple | None) -> PassageRetriever:
    """One index per data set file version over all its context / supporting passages (deduplicated).

    `version` is the file's version before `records` were read: the index is cached under it only when
    the file still has it, so an index is never kept under a version whose records it does not hold
    (the file changed while it was read)."""

    def build() -> PassageRetriever:
        pairs = []
        for rec in records:
            pairs += _passage_pairs(rec.get("context", [])) + _passage_pairs(
                rec.get("supporting_passages", [])
            )
        passages = passages_from_texts(pairs)
        if not passages:
            raise ValueError(
                f"{path}: no record has 'context' or 'supporting_passages' to search; give corpus=PATH "
                "(a .jsonl of {id?, title?, text})"
            )
        return PassageRetriever(passages)

    if version is None or _dataset_version(path) != version:
        return build()
    return _DATASET_RETRIEVERS.get(version, build)


def _as_argument(text: str) -> str:
    """`text` as the argument of an action the parser reads whole: brackets, which would end the action, become
    parentheses, and a run of '|', which the parser reads as the separator of two actions ("||"), becomes one
    '|'. Both are punctuation, which the answer's normalisation drops, so the argument matches as `text`."""
    return re.sub(r"\|{2,}", "|", text.replace("[", "(").replace("]", ")"))


#: How the demonstrator names each relation and attribute (`QAItem.facts`).
FACT_WORDS = {
    "birthplace": "birthplace", "employer": "employer", "founder": "founder", "headquarters": "headquarters",
    "country": "country", "capital": "capital", "occupation": "occupation", "birth_year": "birth year",
    "industry": "industry", "founded": "founding year", "river": "river", "currency": "currency",
    "language": "language",
}  # fmt: skip


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


class SearchQAEnv(TextAgentEnv):
    """Answer a question by searching a corpus (HotpotQA-style search QA; RAGEN's SearchQA testbed).

    ## Description
    The agent gets a question and a search tool: `search[query]` returns the top-k passages of a
    BM25 index (the `bm25s` library) over the corpus; `finish[answer]` submits the answer. Questions
    are single- or multi-hop: a 2-hop question needs a fact from one passage to know what to look up
    next ("In which city was the founder of Zentrix Labs born?").

    By default the questions come from a procedural world (`ragen_envs.searchqa.knowledge`: people,
    companies, cities, countries with attributes and relations, one passage per entity), drawn with
    `self.np_random`; every generated question is checked to be answerable (its supporting passages
    are in the corpus and searching the entity names returns them in the top k). A new world is drawn
    per episode (`kb_seed=None`, so nothing can be memorised) or one fixed world is used
    (`kb_seed=int`). With `dataset=path` the questions are read from a HotpotQA-style file and the
    corpus is either a user corpus file (`corpus=path`) or all the passages of the data set's
    `context` fields. Indexes of files are built once per file and cached.

    ## Action Space
    `Text` (Unicode, up to 16,384 characters): the model's raw response. The `<answer>` holds exactly
    one action: `search[query]` or `finish[answer]` (verb case-insensitive, non-empty argument without
    square brackets). Anything else is an invalid action.

    ## Observation Space
    `Text` (1 to 16,384 characters): the question, the turn counter and the results of the last
    search (each passage `[i] Title: text`, clipped to `max_passage_chars`).

    ## Starting State
    A question (with its world, unless `kb_seed` fixes it) drawn with `self.np_random`, or a record of
    the data set chosen with it (`options={"index": i}` picks record i). No search results yet.

    ## Rewards
    On `finish[answer]`: 1.0 when the answer equals the gold answer after HotpotQA's normalisation
    (lowercase, no punctuation, single spaces) with articles ignored only where they stand before a word
    (`exact_match`: "the Beatles" for "The Beatles", but "Vitamin" is not "Vitamin A", and an answer
    without a word, "the" or ".", matches nothing); otherwise, for an answer that is a part of the gold
    (every word of it is a gold word), the token F1 (HotpotQA's `f1_score`, over those words) when it is
    above 0.3; else 0. An answer with any word not in the gold (a second candidate: `1115 1956` for
    1956) earns 0, so listing candidates never pays more than committing to a wrong one
    (`score_answer`). A part made only of stop words or single characters (`finish[of]` for "Bank of
    America", `finish[a]` for "Vitamin A") earns 0: one such fixed answer would be paid on every gold that
    has the word. `search` earns 0. An invalid action (not one of the two
    forms, several actions, malformed response) costs `format_penalty` (-0.1) and changes nothing but
    the turn counter.

    ## Episode End
    Terminated by `finish[...]`, or when `max_turns` (5) turns are used without finishing (no reward
    can follow, so the episode terminates rather than truncates, as Code and Countdown do). Never
    truncates; stepping again is a no-op.

    ## Information
    Base keys (`action_is_valid`, `actions_executed`, `success`, `format_penalty`, ...; `instructions`
    on reset) plus `question` and `hops` (None for data sets) on reset; `search_results` (passage
    ids) after a search; after `finish`: `score`, `exact_match`, `f1`, `gold_answer`. `success` is
    True iff the answer matched exactly. `turns_left` after every step.

    ## Arguments
    ```python
    import gymnasium as gym
    import ragen_envs
    env = gym.make("ragen/SearchQA-v0", hops=(1, 3), num_entities=60, distractors=3, top_k=3)
    env = gym.make("ragen/SearchQA-v0", dataset="hotpot_dev.jsonl", corpus="wiki_abstracts.jsonl")
    ```
    - `hops`: passages a question needs, int or (low, high) within 1..4 (default (1, 2)).
    - `num_entities`: entities (= passages) per world (default 40, 12 to 5,000: a world is drawn every reset).
    - `distractors`: other passages that mention each entity by name (default 2).
    - `attribute_share`: share of questions that ask for an attribute rather than a name (0.5).
    - `kb_seed`: None (a new world per episode) or an int (one fixed world).
    - `dataset`: HotpotQA-style `.jsonl`/`.json`: `{question, answer, context?, supporting_passages?,
      supporting_facts?, answer_aliases?}` (strictly validated: errors name file, line and field).
    - `corpus`: `.jsonl`/`.json` of `{id?, title?, text}` passages to search (with `dataset`).
    - `top_k`: passages per search (default 3); `max_passage_chars`: clip per passage (default 600).
    - `max_turns` (default 5), `action_format`, `format_penalty`, `render_mode` (None or "ansi").

    ## Version History
    - v0: first version (procedural multi-hop world, bm25s retrieval, HotpotQA loaders and scoring).

    ## Text format
    ```
    Question: In which city was the founder of Zentrix Labs born?
    Search results for "Zentrix Labs":
    [1] Zentrix Labs: Zentrix Labs is a robotics company founded in 1921 by Mira Talven. ...
    [2] ...
    Turn 2 of 5.
    ```
    The turn line is part of the observation but not of `_state_text()` / `render()` (the state an
    invalid action leaves unchanged).

    ## Action format
    `<think> I need the founder first. </think> <answer> search[Zentrix Labs] </answer>`, later
    `<answer> finish[Korford] </answer>`.

    ## Training hooks
    `oracle_step()` (the oracle's next action with a sentence about the fact it looks for or has
    read), `random_action(rng)` (a search for a word of the question or an answer naming a random
    entity) and `is_final_action(action)` (`finish[...]` is the answer; `search[...]` is the tool).
    """

    #: The reset options this env reads (``reset(options=...)``); any other key is refused.
    RESET_OPTIONS: ClassVar[frozenset[str] | None] = frozenset({"index"})

    ROLE: ClassVar[str] = "You are answering a question by searching a collection of passages."

    def __init__(
        self,
        *,
        hops: int | tuple[int, int] = (1, 2),
        num_entities: int = 40,
        distractors: int = 2,
        attribute_share: float = 0.5,
        kb_seed: int | None = None,
        dataset: str | Path | None = None,
        corpus: str | Path | None = None,
        top_k: int = 3,
        max_passage_chars: int = 600,
        max_turns: int = 5,
        action_format: protocol.ActionFormat = "tagged",
        format_penalty: float = protocol.FORMAT_PENALTY,
        render_mode: str | None = None,
    ):
        super().__init__(
            action_format=action_format,
            max_actions_per_turn=1,
            turn_limit=require_int("max_turns", max_turns, 1),  # the last turn terminates (Episode End)
            format_penalty=format_penalty,
            render_mode=render_mode,
        )
        require_int("top_k", top_k, 1)
        require_int("max_passage_chars", max_passage_chars, 40)
        kb_seed = require_int("kb_seed", kb_seed, 0, allow_none=True)  # numpy seeds are >= 0
        dataset = require_path("dataset", dataset, allow_none=True)
        corpus = require_path("corpus", corpus, allow_none=True)
        if corpus is not None and dataset is None:
            raise ValueError("corpus=... needs dataset=... (the generated questions use their own world)")
        self.top_k = int(top_k)
        self.max_passage_chars = int(max_passage_chars)
        self.config = KnowledgeConfig(
            num_entities=num_entities, hops=hops, distractors=distractors, attribute_share=attribute_share
        )
        self.kb_seed = kb_seed

        self.dataset_path = None if dataset is None else Path(dataset)
        self.items: list[_DatasetItem] | None = None
        self.retriever: PassageRetriever | None = None
        self.kb: KnowledgeBase | None = None
        if self.dataset_path is not None:
            version = _dataset_version(self.dataset_path)
            numbered = _DATASETS.get_for_file_or_build(
                self.dataset_path, lambda: load_numbered_records(self.dataset_path, SEARCHQA_SCHEMA), "data set"
            )
            _check_question_lengths(self.dataset_path, numbered, self.top_k, self.max_passage_chars)
            records = [rec for _, rec in numbered]
            self.items = _dataset_items(records)
            if corpus is not None:
                self.retriever = cached_file_retriever(corpus)
            else:
                self.retriever = _dataset_retriever(self.dataset_path.resolve(), records, version)
        elif self.kb_seed is not None:
            self.kb = _WORLDS.get(
                (self.config, self.kb_seed),
                lambda: generate_kb(np.random.default_rng(self.kb_seed), self.config),
            )
            self.retriever = self.kb.retriever

        self.question = ""
        self.golds: tuple[str, ...] = ()
        self.queries: tuple[str, ...] = ()
        self.hops: int | None = None
        self.supporting: tuple[str, ...] = ()
        self.facts: tuple[str, ...] = ()
        self._last_query: str | None = None
        self._last_results: list[tuple[Passage, float]] = []
        self._final: dict[str, Any] | None = None
        self._searches = 0

    # ------------------------------------------------------------------ episode
    def _draw_generated(self) -> QAItem:
        lo, hi = self.config.hop_range
        for _ in range(_WORLD_TRIES):
            if self.kb_seed is None:
                self.kb = generate_kb(self.np_random, self.config)
                self.retriever = self.kb.retriever
            for _ in range(_QUESTION_TRIES):
                hops = int(self.np_random.integers(lo, hi + 1))
                item = generate_question(self.np_random, self.kb, hops, self.config.attribute_share)
                if item is not None and oracle_retrieves_support(self.retriever, item, self.top_k):
                    return item
            if self.kb_seed is not None:
                break  # a fixed world that yields nothing will not change
        raise RuntimeError(
            f"no answerable question found with {self.config} and top_k={self.top_k}; "
            "raise top_k or lower distractors"
        )

    def _reset_task(self, options: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.items is not None:
            index = record_index(options, len(self.items), self.np_random)
            item = self.items[index]
            self.question, self.golds, self.queries = item.question, item.answers, item.queries
            self.hops, self.supporting, self.facts = None, (), ()
            extra["index"] = index
        else:
            qa = self._draw_generated()
            self.question, self.golds, self.queries = qa.question, (qa.answer,), qa.queries
            self.hops, self.supporting, self.facts = qa.hops, qa.supporting, qa.facts
        self._last_query = None
        self._last_results = []
        self._final = None
        self._searches = 0
        return {"question": self.question, "hops": self.hops, **extra}

    def _match_action(self, piece: str) -> str | None:
        return match_searchqa_action(piece)

    def _execute(self, action: str) -> tuple[float, bool]:
        verb, arg = action.split("[", 1)
        arg = arg[:-1]
        if verb == "search":
            self._last_query = arg
            self._last_results = self.retriever.search(arg, self.top_k)
            self._searches += 1
            return 0.0, False
        reward, em, f1 = score_answer(arg, self.golds)
        self._final = {"answer": arg, "score": reward, "exact_match": em, "f1": f1}
        return reward, True

    def _step_info(self, info: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        executed = info["actions_executed"]
        if executed and executed[0].startswith("search["):
            extra["search_results"] = [p.pid for p, _ in self._last_results]
        if self._final is not None and info["action_is_valid"]:
            extra.update(
                score=self._final["score"],
                exact_match=self._final["exact_match"],
                f1=self._final["f1"],
                gold_answer=self.golds[0],
            )
        extra["turns_left"] = max(0, self.turn_limit - self._turn)
        return extra

    def _is_success(self) -> bool:
        return self._final is not None and bool(self._final["exact_match"])

    # ------------------------------------------------------------------ text
    def _task_instructions(self) -> str:
        return (
            "Answer the question. You can search a collection of passages: search[query] shows the "
            f"{self.top_k} best-matching passages (BM25 keyword search, so use names and keywords). "
            "When you know the answer, give it with finish[answer]; keep the answer short (a name, a "
            "word or a number).\n"
            f"One action per turn; you have {self.turn_limit} turns. Reward: 1 for the exact answer "
            "(case, punctuation and articles before a word ignored: 'the Beatles' is 'Beatles', but the A of "
            "'Vitamin A' is a word); an incomplete answer whose words are all in the answer "
            f"earns its word-overlap F1 when above {F1_THRESHOLD:g}; an answer with any other word (such as a "
            "second guess) earns 0."
        )

    def _answer_example(self) -> str:
        return "search[Zentrix Labs]"

    def _state_text(self) -> str:
        lines = [f"Question: {self.question}"]
        if self._final is not None:
            lines.append(
                f"You answered: {_clip(self._final['answer'], 200)} (score {self._final['score']:.2f})."
            )
        elif self._last_query is None:
            lines.append("No search yet. Use search[query] to search, finish[answer] to answer.")
        elif not self._last_results:
            lines.append(f'Search results for "{_clip(self._last_query, 200)}": no passage matches.')
        else:
            lines.append(f'Search results for "{_clip(self._last_query, 200)}":')
            for i, (p, _) in enumerate(self._last_results, start=1):
                lines.append(f"[{i}] {_clip(p.render(), self.max_passage_chars)}")
        return fit_observation("\n".join(lines))

    def _observation_text(self, notice: str | None) -> str:
        # The turn counter is shown to the agent (the turn limit is part of the task) but is not part
        # of the state text, which an invalid action must leave unchanged.
        text = self._state_text()
        if self._final is None:
            if self._turn >= self.turn_limit:
                text += "\nNo turns left: the episode is over (reward 0)."
            else:
                text += f"\nTurn {self._turn + 1} of {self.turn_limit}."
        return f"{notice}\n{text}" if notice else text

    # ------------------------------------------------------------------ oracle
    def oracle(self) -> list[str]:
        """[the next answer of an oracle policy] (the action, e.g. `search[Zentrix Labs]`, to put in
        `<answer>...</answer>`, as `ragen_core.apps.env_demo` does): search each supporting entity, then finish.

        Generated questions: the oracle searches the names of the entities whose passages hold the
        facts (in chain order) and then answers with the gold answer; the generator verified that
        each search returns the needed passage. Data sets: it searches the supporting titles (or the
        question) and then answers. It always leaves a turn for `finish`.
        """
        n_search = min(len(self.queries), self.turn_limit - 1)
        if self._searches < n_search and self._turn < self.turn_limit - 1:
            action = f"search[{_as_argument(self.queries[self._searches])}]"
        else:
            # Brackets cannot appear inside the action; parentheses normalise the same (punctuation).
            action = f"finish[{_as_argument(self.golds[0])}]"
        return [action]

    # ------------------------------------------------------------------ training hooks
    def _hop_read(self) -> int:
        """The hop whose passage the screen shows: i when the last search was for the chain's i-th entity
        (`queries[i]`, case and spacing aside) and returned its passage; -1 otherwise."""
        if self._last_query is None:
            return -1
        query = " ".join(self._last_query.split()).lower()
        shown = {p.pid for p, _ in self._last_results}
        hits = [i for i, (name, pid) in enumerate(zip(self.queries, self.supporting, strict=True))
                if " ".join(_as_argument(name).split()).lower() == query and pid in shown]
        return max(hits, default=-1)

    def oracle_step(self, reasoning: str = "full") -> tuple[str, list[str]]:
        """(reasoning, [action]): the oracle's next action with one sentence on why, read off the screen.

        Generated questions: the action follows what the screen shows, the last query and its results.
        When the last search was for the chain's last entity and returned its passage, the answer is
        read from it (``The birth year of Mira Talven is 1982.``, `finish[1982]`); when it was for the
        j-th entity, the next entity is read from that passage (``The founder of Zentrix Labs is Mira
        Talven; next the birthplace of Mira Talven.``, `search[Mira Talven]`); otherwise the chain
        starts (``I need the birth year of Mira Talven, so I search Mira Talven.``). On the oracle's own
        path this is `oracle()`'s action; after a wasted search it searches again instead of answering
        blind. The last turn always answers, as `oracle()` does. Data sets (no supporting passages
        known): `oracle()`'s action, with ``I search <query>.`` or ``The passages say <answer>.``
        """
        if not self.question:
            raise RuntimeError("call reset() before asking for the oracle")
        answer = _as_argument(self.golds[0])
        if not self.supporting:
            (action,) = self.oracle()
            if action.startswith("search["):
                return f"I search {action[7:-1]}.", [action]
            return f"The passages say {answer}.", [action]
        if self._turn >= self.turn_limit - 1:
            return f"This is my last turn, so I answer {answer}.", [f"finish[{answer}]"]
        j = self._hop_read()
        names = [_as_argument(q) for q in self.queries]
        facts = [FACT_WORDS.get(f, f.replace("_", " ")) for f in self.facts]
        if j == len(self.supporting) - 1:
            return f"The {facts[j]} of {names[j]} is {answer}.", [f"finish[{answer}]"]
        k = j + 1
        if j < 0:
            text = f"I need the {facts[k]} of {names[k]}, so I search {names[k]}."
        else:
            text = f"The {facts[j]} of {names[j]} is {names[k]}; next the {facts[k]} of {names[k]}."
        return text, [f"search[{names[k]}]"]

    #: The habit's answer (`warm_start.noise_action = "first"`): a fixed answer that no generated world's question
    #: has as its gold.
    HABIT_ANSWER = "finish[unknown]"

    def noise_answer(self, kind: str, rng: np.random.Generator) -> str:
        """The habit ``"first"``: search as the oracle does, but answer `HABIT_ANSWER` instead of reading the fact
        off the results (the oracle's search on a turn it searches, `finish[unknown]` on a turn it answers: a habit
        that ignores the passages); ``"random"``: the default, the env's `random_action` (a search for one word of
        the question, or a random entity as the answer)."""
        if kind == "first":
            action = self.oracle_step()[1][0]
            return self.HABIT_ANSWER if action.startswith("finish[") else action
        return super().noise_answer(kind, rng)

    def random_action(self, rng: np.random.Generator) -> str:
        """A valid but uninformed action (the random-action hook): with probability 1/2 a search for one
        word of the question, drawn uniformly (`search[born]`), else an answer naming an entity of the
        world drawn uniformly (`finish[Korford]`; data sets: a word of the question). Draws only from `rng`."""
        if not self.question:
            raise RuntimeError("call reset() before asking for a random action")
        words = _cased_words(self.question) or ["question"]
        if rng.random() < 0.5:
            return f"search[{words[int(rng.integers(len(words)))]}]"
        if self.items is None and self.kb is not None:
            names = sorted(_as_argument(e.name) for e in self.kb.entities.values())
        else:
            names = words
        return f"finish[{names[int(rng.integers(len(names)))]}]"

    def is_final_action(self, action: str) -> bool:
        """Whether `action` (an action text, e.g. from `info["actions_executed"]`) answers the question:
        `finish[...]` does; `search[...]`, the tool, and anything that is not an action do not."""
        canonical = match_searchqa_action(action)
        return canonical is not None and canonical.startswith("finish[")
