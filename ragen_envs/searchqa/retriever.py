"""BM25 retrieval over a passage corpus (the `search[...]` tool of SearchQA; WebShop's search engine too).

The scoring is the `bm25s` library's (Lù, 2024: sparse-matrix BM25, default Lucene variant,
k1 = 1.5, b = 0.75):

    score(q, d) = sum_{t in q} IDF(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    IDF(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

(bm25s' "lucene" form drops Robertson's constant factor (k1 + 1), which does not change the ranking;
|d| counts the document's tokens after stop-word removal; a query term counts once per occurrence.)

Tokenisation is ours (so that index and queries agree, and single characters such as the size "M"
survive): lowercase, `\\w+` runs, an optional stop-word list. Ranking is deterministic: passages are
ordered by decreasing score, ties by corpus position, and passages with score 0 (no query term) are
never returned.

`load_corpus(path)` reads a user corpus (`.jsonl`/`.json` of `{id?, title?, text}`) with the strict
shared loader; `cached_file_retriever(path)` keeps one index per file version for the process
(`ragen_envs.data.cache.file_version`: an edited file is read again), so that envs built on the same
corpus, and their resets, never rebuild it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from ragen_envs.data import Field, load_records
from ragen_envs.data.cache import BuildCache

__all__ = [
    "CORPUS_SCHEMA",
    "ENGLISH_STOPWORDS",
    "BM25Index",
    "Passage",
    "PassageRetriever",
    "cached_file_retriever",
    "load_corpus",
    "passages_from_texts",
    "tokenize",
]

_TOKEN = re.compile(r"\w+", re.UNICODE)
#: bm25s' English stop words (the list its own tokenizer uses).
ENGLISH_STOPWORDS: frozenset[str] = frozenset(STOPWORDS_EN)


def tokenize(text: str, stopwords: frozenset[str] = ENGLISH_STOPWORDS) -> list[str]:
    """Lowercase `\\w+` tokens of `text`, without `stopwords` (single characters are kept)."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


class BM25Index:
    """A BM25 index over token lists (bm25s), with deterministic top-k.

    Args:
        documents: the texts to index (one string per document).
        stopwords: tokens dropped from documents and queries.
        k1, b: BM25 parameters (bm25s defaults).
    """

    def __init__(
        self,
        documents: Sequence[str],
        *,
        stopwords: frozenset[str] = ENGLISH_STOPWORDS,
        k1: float = 1.5,
        b: float = 0.75,
    ):
        if len(documents) == 0:
            raise ValueError("a BM25 index needs at least one document")
        self.stopwords = frozenset(stopwords)
        self.size = len(documents)
        tokens = [tokenize(d, self.stopwords) for d in documents]
        self._bm25 = bm25s.BM25(k1=k1, b=b)
        # An all-stop-word document is indexed as empty; bm25s needs a token, so give it a placeholder.
        self._bm25.index([t or ["\x00empty"] for t in tokens], show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query`: float32 array of shape (size,)."""
        terms = [t for t in tokenize(query, self.stopwords) if t in self._vocab]
        if not terms:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._bm25.get_scores(terms), dtype=np.float32)

    def top_k(self, query: str, k: int) -> list[tuple[int, float]]:
        """The (document index, score) pairs of the k best documents with score > 0.

        Order: decreasing score, then increasing index (deterministic ties).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        s = self.scores(query)
        positive = np.flatnonzero(s > 0)
        if positive.size == 0:
            return []
        if positive.size > k:
            # Partial selection, then an exact (score, index) sort of the candidates: keep every
            # document tied with the k-th score so that the tie-break by index is exact.
            kth = np.partition(s[positive], positive.size - k)[positive.size - k]
            positive = positive[s[positive] >= kth]
        order = np.lexsort((positive, -s[positive]))[:k]
        return [(int(positive[i]), float(s[positive[i]])) for i in order]


@dataclass(frozen=True)
class Passage:
    """One retrievable passage: `pid` (unique id), `title` (may be empty) and `text`."""

    pid: str
    title: str
    text: str

    def render(self) -> str:
        """`Title: text` (or the text alone), the form shown to the agent and indexed."""
        return f"{self.title}: {self.text}" if self.title else self.text


class PassageRetriever:
    """BM25 over passages (title and text are indexed together).

    Args:
        passages: the corpus; ids must be unique.
    """

    def __init__(self, passages: Sequence[Passage]):
        passages = list(passages)
        if not passages:
            raise ValueError("the corpus has no passages")
        ids = [p.pid for p in passages]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"passage ids must be unique; {dup!r} occurs more than once")
        self.passages = passages
        self._by_id = {p.pid: i for i, p in enumerate(passages)}
        self.index = BM25Index([p.render() for p in passages])

    def __len__(self) -> int:
        return len(self.passages)

    def __contains__(self, pid: object) -> bool:
        return pid in self._by_id

    def search(self, query: str, k: int = 3) -> list[tuple[Passage, float]]:
        """The top-k passages for `query` with their BM25 scores (score > 0 only)."""
        return [(self.passages[i], s) for i, s in self.index.top_k(query, k)]


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


#: A user corpus record: {"id"?: str|int, "title"?: str, "text": str}.
CORPUS_SCHEMA = {
    "id": Field((str, int), required=False),
    "title": Field(str, required=False),
    "text": Field(str, check=_non_empty),
}


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a corpus file (`.jsonl` / `.json` of `{id?, title?, text}`) into passages.

    A record without `id` gets its 1-based record number. Raises ValueError naming file, line and
    field for a bad record, and for a duplicated id.
    """
    records = load_records(path, CORPUS_SCHEMA)
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for n, rec in enumerate(records, start=1):
        pid = str(rec.get("id", n))
        if pid in seen:
            raise ValueError(f"{path}: record {n}: field 'id': {pid!r} already used by record {seen[pid]}")
        seen[pid] = n
        passages.append(Passage(pid, rec.get("title", "").strip(), rec["text"].strip()))
    return passages


_FILE_RETRIEVERS: BuildCache[PassageRetriever] = BuildCache()


def cached_file_retriever(path: str | Path) -> PassageRetriever:
    """One retriever per corpus file and version (`file_version`: it changes with the content), built on
    first use; a build during which the file changed is not kept."""
    return _FILE_RETRIEVERS.get_for_file(path, lambda: PassageRetriever(load_corpus(Path(path))), "corpus")


def passages_from_texts(texts: Iterable[tuple[str, str]], prefix: str = "p") -> list[Passage]:
    """Passages from (title, text) pairs with ids `prefix0`, `prefix1`, ..., duplicates removed."""
    out: list[Passage] = []
    seen: set[tuple[str, str]] = set()
    for title, text in texts:
        key = (title.strip(), text.strip())
        if key in seen or not key[1]:
            continue
        seen.add(key)
        out.append(Passage(f"{prefix}{len(out)}", key[0], key[1]))
    return out
