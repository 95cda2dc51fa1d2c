"""SearchQA: answer (multi-hop) questions by searching a passage corpus with BM25 (RAGEN's search testbed).

Modules: `retriever` (bm25s index, passages, corpus loader with a per-file cache), `knowledge`
(procedural world of people / companies / cities / countries and its multi-hop questions), `env`
(`SearchQAEnv`, id `ragen/SearchQA-v0`; HotpotQA normaliser and F1).
"""

from ragen_envs.searchqa.env import (
    SEARCHQA_SCHEMA,
    SearchQAEnv,
    exact_match,
    f1_score,
    normalize_answer,
    score_answer,
)
from ragen_envs.searchqa.knowledge import (
    KnowledgeBase,
    KnowledgeConfig,
    QAItem,
    generate_kb,
    generate_question,
)
from ragen_envs.searchqa.retriever import (
    BM25Index,
    Passage,
    PassageRetriever,
    cached_file_retriever,
    load_corpus,
)

__all__ = [
    "SEARCHQA_SCHEMA",
    "BM25Index",
    "KnowledgeBase",
    "KnowledgeConfig",
    "Passage",
    "PassageRetriever",
    "QAItem",
    "SearchQAEnv",
    "cached_file_retriever",
    "exact_match",
    "f1_score",
    "generate_kb",
    "generate_question",
    "load_corpus",
    "normalize_answer",
    "score_answer",
]
