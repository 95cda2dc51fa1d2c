"""A procedural knowledge base (people, companies, cities, countries) and multi-hop questions over it.

The world is a small typed graph. Every entity has attributes (values shown as text) and functional
relations to other entities:

    person   attributes occupation, birth_year    relations birthplace -> city, employer -> company
    company  attributes industry, founded         relations founder -> person, headquarters -> city
    city     attributes founded, river            relations country -> country
    country  attributes currency, language        relations capital -> city (one of its own cities)

Each entity is rendered as one passage titled with its name (the facts as sentences), like a
Wikipedia lead paragraph. Names are built from syllable word lists with `np.random.Generator`, and
are unique within a world; people share surnames on purpose (a query "Mira Talven" also matches
"Oren Talven").

A question starts at a named entity, follows a chain of relations and either asks for the last
entity's name or for one of its attributes:

    hops = number of passages needed = (relations followed) + (1 if it asks for an attribute)
    "In which city was the founder of Zentrix Labs born?"        founder, birthplace      -> 2 hops
    "What is the currency of the country of Korford?"             country + currency       -> 2 hops

Relations are functional and chains never revisit an entity, so every answer is unique.
`QAItem.supporting` lists the passage ids the reader needs, in order, `QAItem.queries` the
entity names an oracle searches for (one per supporting passage) and `QAItem.facts` the relation or
attribute read from each of them (what the demonstrator names when it explains a search).

Difficulty knobs (`KnowledgeConfig`): `hops` (1-4; the oracle needs hops searches + 1 finish, so 4 is
the most that fits in 5 turns), `num_entities` (corpus size), `distractors` (how many other passages
mention each entity by name, so that searching a name also returns passages that do not hold the fact).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragen_envs.searchqa.retriever import Passage, PassageRetriever
from ragen_envs.validation import require_float, require_int, require_int_range

__all__ = ["Entity", "KnowledgeBase", "KnowledgeConfig", "QAItem", "generate_kb", "generate_question"]

# ---------------------------------------------------------------------------------------------- word lists
SYLLABLES = (
    "ka", "lo", "mi", "ra", "ven", "tor", "sa", "li", "dor", "ne", "ar", "bel", "cor", "da", "el", "fin",
    "ga", "hal", "is", "jor", "kel", "lan", "mar", "nor", "os", "pel", "quin", "ros", "sil", "tam", "ul",
    "vor", "wyn", "yar", "zel", "bru", "cas", "dem", "fal", "gor",
)  # fmt: skip
CITY_SUFFIXES = ("ford", "burg", "haven", "port", "dale", "mont", "field", "ton", "wick", "stead")
COUNTRY_SUFFIXES = ("ia", "land", "stan", "ora", "mark")
COMPANY_SUFFIXES = ("Labs", "Corp", "Industries", "Systems", "Works", "Group", "Holdings", "Dynamics")
LANGUAGE_SUFFIXES = ("ese", "ic", "ish", "ian")
OCCUPATIONS = (
    "architect", "botanist", "cartographer", "chemist", "composer", "engineer", "geologist", "historian",
    "journalist", "linguist", "mathematician", "novelist", "painter", "pharmacist", "photographer",
    "physicist", "pilot", "sculptor", "surgeon", "violinist", "astronomer", "economist",
)  # fmt: skip
INDUSTRIES = (
    "aerospace", "agriculture", "biotechnology", "construction", "cosmetics", "energy", "fashion",
    "finance", "logistics", "mining", "publishing", "robotics", "shipping", "software", "textiles",
    "tourism",
)  # fmt: skip

KINDS = ("person", "company", "city", "country")
#: Entity (and passage) id prefixes, distinct per kind.
ID_PREFIXES = {"person": "pe", "company": "cm", "city": "ci", "country": "ct"}
#: Share of each kind in a world of n entities (cities and countries need each other; see generate_kb).
KIND_SHARES = {"person": 0.45, "company": 0.2, "city": 0.25, "country": 0.1}

#: relation -> (source kind, target kind, noun phrase of the target given x, direct question about x).
RELATIONS: dict[str, tuple[str, str, str, str]] = {
    "birthplace": ("person", "city", "the birthplace of {x}", "In which city was {x} born?"),
    "employer": ("person", "company", "the employer of {x}", "Which company does {x} work for?"),
    "founder": ("company", "person", "the founder of {x}", "Who founded {x}?"),
    "headquarters": (
        "company",
        "city",
        "the headquarters city of {x}",
        "In which city is {x} headquartered?",
    ),
    "country": ("city", "country", "the country of {x}", "In which country is {x} located?"),
    "capital": ("country", "city", "the capital of {x}", "What is the capital of {x}?"),
}
#: (kind, attribute) -> question about x.
ATTRIBUTE_QUESTIONS: dict[tuple[str, str], str] = {
    ("person", "occupation"): "What is the occupation of {x}?",
    ("person", "birth_year"): "In what year was {x} born?",
    ("company", "industry"): "In which industry does {x} operate?",
    ("company", "founded"): "In what year was {x} founded?",
    ("city", "founded"): "In what year was {x} founded?",
    ("city", "river"): "On which river does {x} lie?",
    ("country", "currency"): "What is the currency of {x}?",
    ("country", "language"): "What is the official language of {x}?",
}
#: Sentences by which a host passage mentions another entity (distractors); {h} host, {x} mentioned.
MENTION_TEMPLATES: dict[str, str] = {
    "person": "{h} has written an essay about {x}.",
    "company": "{h} once sponsored an exhibition about {x}.",
    "city": "A street in {h} is named after {x}.",
    "country": "Schools in {h} teach a course about {x}.",
}


#: The most entities a world may have. A world (names, passages, BM25 index) is drawn at every reset unless
#: `kb_seed` fixes it, at about 0.15 ms an entity (5,000: under a second a reset); beyond some 40,000 the name
#: space fills up and drawing a unique name retries more and more (100,000 ran past a minute).
MAX_ENTITIES = 5_000


def _check_num_entities(value: object) -> int:
    """`value` as an int in [12, MAX_ENTITIES], else a one-line ValueError that says why the top is where it is."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 12 <= value <= MAX_ENTITIES:
        return int(value)
    raise ValueError(
        f"num_entities must be an integer in [12, {MAX_ENTITIES}], got {value!r}: a world of that many entities "
        "(names, passages and their BM25 index) is drawn at every reset, about 0.15 ms an entity; for a larger "
        "corpus give dataset=... and corpus=..."
    )


@dataclass(frozen=True)
class KnowledgeConfig:
    """Knobs of the procedural world and its questions (validated).

    Attributes:
        num_entities: entities in a world, 12..MAX_ENTITIES (5,000); one passage each.
        hops: passages needed per question, an int or an inclusive (low, high) range within 1..4.
        distractors: other passages that mention each entity by name (>= 0).
        attribute_share: probability that a question asks for an attribute rather than a name.
    """

    num_entities: int = 40
    hops: int | tuple[int, int] = (1, 2)
    distractors: int = 2
    attribute_share: float = 0.5

    def __post_init__(self):
        _check_num_entities(self.num_entities)
        require_int_range("hops", self.hops, 1, 4)
        require_int("distractors", self.distractors, 0, 20)
        require_float("attribute_share", self.attribute_share, 0.0, 1.0)

    @property
    def hop_range(self) -> tuple[int, int]:
        return require_int_range("hops", self.hops, 1, 4)


@dataclass
class Entity:
    """One entity: `eid` (its passage id), `kind`, unique `name`, `attrs` (text values), `rels` (eids)."""

    eid: str
    kind: str
    name: str
    attrs: dict[str, str] = field(default_factory=dict)
    rels: dict[str, str] = field(default_factory=dict)


@dataclass
class KnowledgeBase:
    """A generated world: entities by id, one passage per entity (same id), and its BM25 retriever."""

    entities: dict[str, Entity]
    passages: list[Passage]
    retriever: PassageRetriever

    def entity(self, eid: str) -> Entity:
        return self.entities[eid]


@dataclass(frozen=True)
class QAItem:
    """A question with its gold answer, supporting passage ids and the oracle's search queries.

    `facts[i]` is the relation (a key of RELATIONS) or attribute (e.g. "birth_year") that passage
    `supporting[i]` is read for: the relation leading to the next entity of the chain, or at the end the
    asked relation or attribute (empty for items built without it).
    """

    question: str
    answer: str
    supporting: tuple[str, ...]
    queries: tuple[str, ...]
    hops: int
    facts: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------- names
def _word(rng: np.random.Generator, n: int) -> str:
    return "".join(SYLLABLES[int(i)] for i in rng.integers(len(SYLLABLES), size=n))


class _Namer:
    """Unique names per world (bounded retries, then a longer word: never loops forever)."""

    def __init__(self, rng: np.random.Generator, num_people: int):
        self.rng = rng
        self.used: set[str] = set()
        # A small surname pool so that people share surnames (search distractors by construction).
        n_surnames = max(3, num_people // 3)
        self.surnames = [_word(rng, 2 + int(rng.integers(2))).capitalize() for _ in range(n_surnames)]

    def _unique(self, make) -> str:
        for attempt in range(200):
            name = make(attempt // 50)
            if name not in self.used and name.lower() not in self.used:
                self.used.add(name)
                self.used.add(name.lower())
                return name
        raise RuntimeError("could not draw a unique name")  # unreachable for valid configs

    def person(self) -> str:
        return self._unique(
            lambda extra: (
                f"{_word(self.rng, 2 + extra).capitalize()} "
                f"{self.surnames[int(self.rng.integers(len(self.surnames)))]}"
            )
        )

    def city(self) -> str:
        return self._unique(
            lambda extra: (
                _word(self.rng, 2 + extra) + CITY_SUFFIXES[int(self.rng.integers(len(CITY_SUFFIXES)))]
            ).capitalize()
        )

    def country(self) -> str:
        return self._unique(
            lambda extra: (
                _word(self.rng, 2 + extra) + COUNTRY_SUFFIXES[int(self.rng.integers(len(COUNTRY_SUFFIXES)))]
            ).capitalize()
        )

    def company(self) -> str:
        return self._unique(
            lambda extra: (
                f"{_word(self.rng, 2 + extra).capitalize()} "
                f"{COMPANY_SUFFIXES[int(self.rng.integers(len(COMPANY_SUFFIXES)))]}"
            )
        )

    def plain(self, suffixes: tuple[str, ...] = ("",)) -> str:
        """An attribute value (river, currency, language): need not be unique (answers are reached
        through the chain, not looked up by name), so no retries; 2 or 3 syllables."""
        word = _word(self.rng, 2 + int(self.rng.integers(2)))
        return (word + suffixes[int(self.rng.integers(len(suffixes)))]).capitalize()


def _article(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


# ---------------------------------------------------------------------------------------------- world
def _counts(n: int) -> dict[str, int]:
    counts = {k: max(2, int(round(KIND_SHARES[k] * n))) for k in KINDS}
    counts["city"] = max(counts["city"], counts["country"])  # every country needs a capital of its own
    counts["person"] = max(2, n - counts["company"] - counts["city"] - counts["country"])
    return counts


def _fact_sentences(e: Entity, ents: dict[str, Entity]) -> list[str]:
    a, r = e.attrs, e.rels
    if e.kind == "person":
        return [
            f"{e.name} is {_article(a['occupation'])} {a['occupation']} born in {a['birth_year']} "
            f"in {ents[r['birthplace']].name}.",
            f"{e.name} works for {ents[r['employer']].name}.",
        ]
    if e.kind == "company":
        return [
            f"{e.name} is {_article(a['industry'])} {a['industry']} company founded in {a['founded']} "
            f"by {ents[r['founder']].name}.",
            f"It is headquartered in {ents[r['headquarters']].name}.",
        ]
    if e.kind == "city":
        return [
            f"{e.name} is a city in {ents[r['country']].name}, founded in {a['founded']}.",
            f"It lies on the {a['river']} river.",
        ]
    return [
        f"{e.name} is a country whose capital is {ents[r['capital']].name}.",
        f"Its currency is the {a['currency']} and its official language is {a['language']}.",
    ]


def generate_kb(rng: np.random.Generator, config: KnowledgeConfig) -> KnowledgeBase:
    """Draw a world of `config.num_entities` entities and index its passages (BM25)."""
    counts = _counts(int(config.num_entities))
    namer = _Namer(rng, counts["person"])
    ents: dict[str, Entity] = {}
    by_kind: dict[str, list[str]] = {k: [] for k in KINDS}

    def add(kind: str, name: str) -> Entity:
        e = Entity(f"{ID_PREFIXES[kind]}{len(by_kind[kind])}", kind, name)
        ents[e.eid] = e
        by_kind[kind].append(e.eid)
        return e

    for _ in range(counts["country"]):
        c = add("country", namer.country())
        c.attrs["currency"] = namer.plain().lower()
        c.attrs["language"] = namer.plain(LANGUAGE_SUFFIXES)
    for i in range(counts["city"]):
        c = add("city", namer.city())
        # The first cities go one per country (each country gets one to be its capital).
        country = (
            by_kind["country"][i]
            if i < counts["country"]
            else by_kind["country"][int(rng.integers(counts["country"]))]
        )
        c.rels["country"] = country
        c.attrs["founded"] = str(int(rng.integers(900, 1900)))
        c.attrs["river"] = namer.plain()
    cities_of: dict[str, list[str]] = {c: [] for c in by_kind["country"]}
    for cid in by_kind["city"]:
        cities_of[ents[cid].rels["country"]].append(cid)
    for country in by_kind["country"]:
        own = cities_of[country]
        ents[country].rels["capital"] = own[int(rng.integers(len(own)))]
    for _ in range(counts["company"]):
        c = add("company", namer.company())
        c.attrs["industry"] = INDUSTRIES[int(rng.integers(len(INDUSTRIES)))]
        c.attrs["founded"] = str(int(rng.integers(1850, 2020)))
    for _ in range(counts["person"]):
        p = add("person", namer.person())
        p.attrs["occupation"] = OCCUPATIONS[int(rng.integers(len(OCCUPATIONS)))]
        p.attrs["birth_year"] = str(int(rng.integers(1920, 2000)))
        p.rels["birthplace"] = by_kind["city"][int(rng.integers(counts["city"]))]
        p.rels["employer"] = by_kind["company"][int(rng.integers(counts["company"]))]
    for cid in by_kind["company"]:
        ents[cid].rels["founder"] = by_kind["person"][int(rng.integers(counts["person"]))]
        ents[cid].rels["headquarters"] = by_kind["city"][int(rng.integers(counts["city"]))]

    sentences = {eid: _fact_sentences(e, ents) for eid, e in ents.items()}
    order = list(ents)
    n = len(order)
    d = min(int(config.distractors), n - 1)
    if d:
        for i, eid in enumerate(order):
            # d distinct hosts other than the entity itself.
            hosts = rng.choice(n - 1, size=d, replace=False)
            for h in hosts:
                host = order[int(h) + (1 if h >= i else 0)]
                tmpl = MENTION_TEMPLATES[ents[host].kind]
                sentences[host].append(tmpl.format(h=ents[host].name, x=ents[eid].name))
    passages = [Passage(eid, ents[eid].name, " ".join(sentences[eid])) for eid in order]
    return KnowledgeBase(ents, passages, PassageRetriever(passages))


# ---------------------------------------------------------------------------------------------- questions
def _draw_chain(
    rng: np.random.Generator, kb: KnowledgeBase, n_relations: int, want_attribute: bool
) -> tuple[list[str], list[str], str | None] | None:
    """A random walk: (entity ids e0..em, relation names r1..rm, attribute or None); None on a dead end."""
    eids = list(kb.entities)
    start = eids[int(rng.integers(len(eids)))]
    chain, rels = [start], []
    for _ in range(n_relations):
        e = kb.entity(chain[-1])
        options = sorted(r for r, t in e.rels.items() if t not in chain)
        if not options:
            return None
        r = options[int(rng.integers(len(options)))]
        rels.append(r)
        chain.append(e.rels[r])
    attribute = None
    if want_attribute:
        e = kb.entity(chain[-1])
        attrs = sorted(a for a in e.attrs if (e.kind, a) in ATTRIBUTE_QUESTIONS)
        attribute = attrs[int(rng.integers(len(attrs)))]
    return chain, rels, attribute


def _phrase(kb: KnowledgeBase, chain: list[str], rels: list[str]) -> str:
    """The noun phrase naming chain[len(rels)] from chain[0]: "the capital of the country of X"."""
    text = kb.entity(chain[0]).name
    for r in rels:
        text = RELATIONS[r][2].format(x=text)
    return text


def generate_question(
    rng: np.random.Generator, kb: KnowledgeBase, hops: int, attribute_share: float = 0.5
) -> QAItem | None:
    """One question needing `hops` passages, or None when the random walk hit a dead end (retry).

    With probability `attribute_share` (always when hops allow only that) the question asks for an
    attribute of the last entity; otherwise for the name of the entity reached by the last relation.
    """
    if not 1 <= hops <= 4:
        raise ValueError(f"hops must be in 1..4, got {hops}")
    want_attribute = bool(rng.random() < attribute_share)
    n_rel = hops - 1 if want_attribute else hops
    drawn = _draw_chain(rng, kb, n_rel, want_attribute)
    if drawn is None:
        return None
    chain, rels, attribute = drawn
    last = kb.entity(chain[-1])
    if attribute is not None:
        question = ATTRIBUTE_QUESTIONS[(last.kind, attribute)].format(x=_phrase(kb, chain, rels))
        answer = last.attrs[attribute]
        support = chain
    else:
        question = RELATIONS[rels[-1]][3].format(x=_phrase(kb, chain[:-1], rels[:-1]))
        answer = last.name
        support = chain[:-1]
    question = question[0].upper() + question[1:]
    queries = tuple(kb.entity(eid).name for eid in support)
    facts = tuple(rels) + ((attribute,) if attribute is not None else ())
    return QAItem(question, answer, tuple(support), queries, hops, facts)


def oracle_retrieves_support(kb_retriever: PassageRetriever, item: QAItem, k: int) -> bool:
    """Whether searching each query of `item` returns its supporting passage among the top k.

    This is the answerability check of generated questions: the supporting passages are in the
    corpus and an oracle that searches the entity names, in order, reads every fact it needs.
    """
    for query, pid in zip(item.queries, item.supporting, strict=True):
        if pid not in kb_retriever:
            return False
        if pid not in {p.pid for p, _ in kb_retriever.search(query, k)}:
            return False
    return True
