"""The tiny base model (``model.path = "tiny-base"``): the tiny model pre-trained to copy and to look up.

The tiny model (:mod:`ragen_core.policy.tiny`) starts RL from random weights and a warm start of 1,000-2,000
demonstrations; that teaches the protocol and the sentence shapes, not the copy that SearchQA, WebShop and Sudoku
need (a name or a year out of a passage, a ten-character ASIN out of a results page, a cell's row and column off a
grid; docs/training.md). A real LLM brings that ability from pre-training (induction heads). The base model is the
default tiny model (same tokenizer, chat template, architecture and initial weights) pre-trained offline on
*generated* text that holds no env's answers:

- **lookup**: a listed table of 2-10 (key, value) rows in one of several layouts, then questions that name a key and
  are answered by its value, copied exactly (``Velorn Dask: B0Q7T2MZ4K`` ... ``Velorn Dask? B0Q7T2MZ4K``). Keys are
  names or short titles; values are 10-character ids (half of them ``B0``-prefixed like ASINs, so that the first two
  characters never tell rows apart), shorter ids, names, years, prices and digits. Two orders: the key before its
  value (``key: value``, a passage's "X ... founded in 1782") and the value before its key (``[value] key | $9.99``,
  a results page).
- **grid**: a 4x4 (sometimes 6x6) grid of digits and dots in the Sudoku env's layout (``R1 . 4 | 1 .``), then
  questions about a cell (``R2C3 is 4``), a row's or a column's digits (``R2 holds 1 4 2``).
- **copy**: spans (ids, names, digit strings) repeated later in the text.
- **chat**: a share of the lookups and grid reads wrapped in the tiny chat template (``<|im_start|>user ...``) with
  the answer in the response format (``<think> Velorn Dask is B0Q7T2MZ4K. </think> <answer> B0Q7T2MZ4K </answer>``).

The loss is the next-token cross-entropy on the answers only (the tables and passages are random: nothing to
predict). Everything is seeded: the same recipe gives the same text, batch by batch (`recipe_digest` hashes the
recipe and a sample of its text; `TINY_BASE_RECIPE_SHA256` records the shipped one, tests/policy/test_tiny_base.py
checks it). The trained weights are a function of the recipe, the tiny model and the machine's float arithmetic:
they are built once per machine and cached (`default_tiny_base_dir`), like the tiny model.

What it costs and what it reaches (held-out exact match, `evaluate_recall`) is in docs/training.md, "The tiny base
model"; ``python scripts/build_tiny_base.py`` builds it and prints the numbers.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import inspect
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragen_core.policy.fast_qwen2 import FastQwen2
from ragen_core.policy.tiny import (
    IM_END,
    IM_START,
    TINY_CORPUS_VERSION,
    TINY_FORMAT_VERSION,
    TINY_MODEL_SHA256,
    CorruptTinyModelError,
    build_tiny_model,
    cache_root,
    tiny_model_digest,
    verify_cached_model,
)
from ragen_envs.validation import require_float, require_int

__all__ = [
    "DEFAULT_RECIPE",
    "TINY_BASE_RECIPE_SHA256",
    "TINY_BASE_VERSION",
    "BaseRecipe",
    "Example",
    "build_tiny_base_model",
    "default_tiny_base_dir",
    "encode_example",
    "evaluate_recall",
    "example_stream",
    "make_example",
    "pretrain",
    "recipe_digest",
]

#: Bump when the generator or the training loop changes in a way the recipe's fields do not show.
#: 2: the lean answer forward (`_answer_logits`: the last layer and the output layer only at read positions).
TINY_BASE_VERSION = 2

# ------------------------------------------------------------------------------------------------ word lists
#: Syllables of the generated names. Disjoint from the envs' name syllables (SearchQA's knowledge base, WebShop's
#: brands): tests/policy/test_tiny_base.py checks that no name of the configs' worlds is ever generated.
SYLLABLES = (
    "ba", "de", "fi", "go", "hu", "ja", "ke", "mu", "na", "pi", "ri", "so", "tu", "va", "we", "xi", "yo", "zu",
    "dro", "ple", "stra", "qua", "bri", "mon", "tev", "orn", "ush", "cle", "thi", "gra",
)  # fmt: skip
#: Words of the generated titles and table layouts (plain English, none of them an env's answer).
NOUNS = (
    "lamp", "kettle", "mug", "towel", "chair", "clock", "pillow", "blanket", "basket", "candle", "mirror", "vase",
    "shelf", "rug", "stool", "tray", "bottle", "jar", "bowl", "plate", "spoon", "brush", "comb", "wallet",
    "scarf", "glove", "boot", "sock", "belt", "hat", "tent", "rope", "map", "kite", "drum", "flute",
)  # fmt: skip
ADJECTIVES = (
    "small", "large", "soft", "round", "square", "light", "heavy", "warm", "cool", "bright", "dark", "plain",
    "smooth", "sturdy", "tall", "short", "wide", "narrow", "quiet", "simple",
)  # fmt: skip
#: The characters of generated ids: an ASIN's alphabet (upper-case letters without I and O, and digits).
ID_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
#: Attributes of the generated passages: (question word, sentence piece, value kind).
ATTRIBUTES = (
    ("year", "was built in", "year"), ("code", "has the code", "id"), ("keeper", "is kept by", "name"),
    ("river", "lies on the river", "name"), ("price", "costs", "price"), ("number", "has the number", "digits"),
    ("leader", "is led by", "name"), ("town", "lies near the town of", "name"), ("maker", "was made by", "name"),
)  # fmt: skip

TASKS = ("lookup", "lookup_rev", "passage", "grid", "copy")


# ------------------------------------------------------------------------------------------------ the recipe
@dataclass(frozen=True)
class BaseRecipe:
    """Everything the pre-training does (its digest keys the cache).

    Attributes:
        steps: optimiser steps.
        batch_size: examples per step.
        lr: AdamW's peak learning rate (weight decay 0), after `warmup` linear steps; held for the first
            `1 - decay` of the steps, then a cosine to 0.
        warmup, decay: see `lr`.
        clip: gradient-norm clip.
        mix: task -> weight (`TASKS`); drawn per example.
        chat: share of examples wrapped in the chat template (lookups, passages and grids).
        stages: the curriculum, ((fraction of the steps, max rows, max id length), ...): up to each fraction the
            tables hold 2..max rows and generated ids have 1..max characters (10-character ids always at least
            half of the time once the max reaches 10). The last stage runs to the end.
        data_seed: seed of the text.
        model: `build_tiny_model` arguments of the starting model (empty: the default tiny model).
    """

    steps: int = 2300
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 100
    decay: float = 0.5
    clip: float = 1.0
    mix: tuple[tuple[str, float], ...] = (
        ("lookup", 0.55), ("lookup_rev", 0.1), ("passage", 0.1), ("grid", 0.15), ("copy", 0.1),
    )
    chat: float = 0.25
    stages: tuple[tuple[float, int, int], ...] = ((0.35, 3, 10), (1.0, 10, 10))
    data_seed: int = 0
    model: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        _check_recipe(self)

    def stage(self, step: int) -> tuple[int, int]:
        """(max rows, max id length) at `step` (0-based)."""
        frac = step / self.steps
        for f, rows, length in self.stages:
            if frac < f:
                return rows, length
        return self.stages[-1][1], self.stages[-1][2]

    def lr_at(self, step: int) -> float:
        """The learning rate of step `step` (1-based)."""
        warm = min(1.0, step / max(1, self.warmup))
        start = self.steps * (1.0 - self.decay)
        if step <= start or self.decay == 0:
            return self.lr * warm
        return self.lr * warm * 0.5 * (1.0 + math.cos(math.pi * (step - start) / (self.steps - start)))


def _check_recipe(r: BaseRecipe) -> None:
    """Every field of a recipe in range, else one ValueError naming the field: a bad value must not surface deep in
    numpy or torch (a NaN task probability, a float step count), nor after the minutes of a build (a negative
    learning rate, a model argument `build_tiny_model` does not take), nor do nothing silently (a zero clip, a
    curriculum stage that is never reached). Checks only: the recipe's values, hence its digest, are unchanged."""
    require_int("steps", r.steps, low=1)
    require_int("batch_size", r.batch_size, low=1)
    require_float("lr", r.lr, low=0.0)
    require_int("warmup", r.warmup, low=0)
    require_float("decay", r.decay, low=0.0, high=1.0)
    require_float("chat", r.chat, low=0.0, high=1.0)
    if require_float("clip", r.clip, low=0.0) == 0.0:
        raise ValueError("clip must be a finite number > 0 (a gradient-norm clip of 0 zeroes every update), got 0")
    require_int("data_seed", r.data_seed, low=0)  # numpy seeds only from integers >= 0
    if not _pairs(r.mix) or any(k not in TASKS or not _finite(w) or w < 0 for k, w in r.mix) or not (
            sum(w for _, w in r.mix) > 0):
        raise ValueError(f"mix must weigh tasks of {TASKS} with finite weights >= 0, not all 0, got {r.mix!r}")
    ok = isinstance(r.stages, (tuple, list)) and r.stages and all(
        isinstance(s, (tuple, list)) and len(s) == 3 and _finite(s[0]) and 0 < s[0] <= 1
        and all(_is_count(x) for x in s[1:]) for s in r.stages)
    if not ok or any(a[0] >= b[0] for a, b in zip(r.stages, r.stages[1:])):
        raise ValueError("stages must be (fraction of the steps in (0, 1], max rows >= 1, max id length >= 1) with "
                         f"increasing fractions (a stage after a later one is never reached), got {r.stages!r}")
    known = set(inspect.signature(build_tiny_model).parameters) - {"out_dir", "corpus", "vision"}
    model = list(r.model.items()) if isinstance(r.model, dict) else r.model  # a dict was always taken here
    if not _pairs(model, allow_empty=True) or any(k not in known for k, _ in model):
        raise ValueError(f"model must be (name, value) pairs of build_tiny_model's arguments {sorted(known)}, got "
                         f"{r.model!r}")


def _pairs(value: Any, allow_empty: bool = False) -> bool:
    """Whether `value` is a tuple or list of (str, value) pairs (and not empty unless `allow_empty`)."""
    return (isinstance(value, (tuple, list)) and (allow_empty or bool(value))
            and all(isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) for p in value))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and math.isfinite(x)


def _is_count(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1


DEFAULT_RECIPE = BaseRecipe()


# ------------------------------------------------------------------------------------------------ text
@dataclass(frozen=True)
class Example:
    """A generated text and the character spans of its answers (the only positions trained on)."""

    text: str
    spans: tuple[tuple[int, int], ...]
    task: str


class _Text:
    """Builds a text and the spans of its answers."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[tuple[int, int]] = []
        self.n = 0

    def add(self, s: str, answer: bool = False) -> None:
        if answer:
            self.spans.append((self.n, self.n + len(s)))
        self.parts.append(s)
        self.n += len(s)

    def text(self) -> str:
        return "".join(self.parts)


def _pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def _word(rng: np.random.Generator) -> str:
    return "".join(_pick(rng, SYLLABLES) for _ in range(int(rng.integers(2, 4)))).capitalize()


def gen_name(rng: np.random.Generator) -> str:
    """A person- or place-like name: one or two generated words."""
    return " ".join(_word(rng) for _ in range(int(rng.integers(1, 3))))


def gen_title(rng: np.random.Generator) -> str:
    """A product-like title: a generated brand, an adjective or two, a noun."""
    adj = " ".join(_pick(rng, ADJECTIVES) for _ in range(int(rng.integers(1, 3))))
    return f"{_word(rng)} {adj} {_pick(rng, NOUNS)}".title()


def gen_id(rng: np.random.Generator, length: int, prefix: str = "") -> str:
    body = "".join(ID_CHARS[int(i)] for i in rng.integers(len(ID_CHARS), size=length))
    return (prefix + body[len(prefix):]) if length > len(prefix) else body


def _values(rng: np.random.Generator, kind: str, n: int, max_len: int) -> list[str]:
    """`n` values of one kind (not necessarily distinct: a short id may repeat). Ids: one length per table, 10
    characters half of the time once `max_len` is 10 (`kind="id10"`: always), `B0`-prefixed in half the tables."""
    out: list[str] = []
    prefix = "B0" if rng.random() < 0.5 else ""
    if kind == "id10" or (max_len >= 10 and rng.random() < 0.5):
        length = 10
    else:
        length = int(rng.integers(1, max_len + 1))
    for _ in range(n):
        if kind in ("id", "id10"):
            v = gen_id(rng, length, prefix if length >= 4 else "")
        elif kind == "name":
            v = gen_name(rng)
        elif kind == "year":
            v = str(int(rng.integers(1000, 2030)))
        elif kind == "price":
            v = f"${int(rng.integers(1, 200))}.{int(rng.integers(100)):02d}"
        else:  # digits
            v = " ".join(str(int(d)) for d in rng.integers(1, 10, size=int(rng.integers(1, 4))))
        out.append(v)
    return out


def _keys(rng: np.random.Generator, n: int, kind: str) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        k = gen_name(rng) if kind == "name" else gen_title(rng)
        if k not in out:
            out.append(k)
    return out


#: Value kinds of the lookups (ids four times as often as the rest) and the word a question uses for each.
_VALUE_KINDS = ("id", "id", "id", "id", "name", "year", "price", "digits")
_KIND_WORD = {"id": "id", "id10": "id", "name": "name", "year": "year", "price": "price", "digits": "number"}


def _noise_line(rng: np.random.Generator) -> str:
    """A line of page furniture around a table (none of it an env's text): a results header, navigation links, a
    turn counter, a request."""
    kind = int(rng.integers(4))
    if kind == 0:
        pages = int(rng.integers(1, 5))
        return (f'Results for "{_pick(rng, ADJECTIVES)} {_pick(rng, NOUNS)}": page {int(rng.integers(1, pages + 1))} '
                f"of {pages} ({int(rng.integers(2, 40))} in all)")
    if kind == 1:
        return " ".join(_pick(rng, ("[Back]", "[Next >]", "[< Prev]", "[Home]", "[Back to list]"))
                        for _ in range(int(rng.integers(1, 3))))
    if kind == 2:
        return f"Step {int(rng.integers(1, 6))} of {int(rng.integers(6, 10))}."
    return f"Request: a {_pick(rng, ADJECTIVES)} {_pick(rng, NOUNS)} under ${int(rng.integers(10, 200))}.00"


def _n_rows(rng: np.random.Generator, rows: int, exact: bool) -> int:
    return rows if exact else int(rng.integers(2, max(2, rows) + 1))


def _lookup(rng: np.random.Generator, rows: int, max_len: int, chat: bool, reverse: bool, *,
            exact: bool = False, kind: str | None = None, queries: int | None = None) -> _Text:
    """A table of (key, value) rows, then questions naming keys, answered by their values."""
    n = _n_rows(rng, rows, exact)
    # The value before its key (a results page) only as WebShop shows it: a bracketed 10-character id, so that the
    # key's first token is a fixed distance after the id's characters (what a 2-layer model can use).
    kind = kind or ("id10" if reverse else _pick(rng, _VALUE_KINDS))
    word = _KIND_WORD[kind]
    keys = _keys(rng, n, _pick(rng, ("name", "title")))
    vals = _values(rng, kind, n, max_len)
    t = _Text()
    for _ in range(int(rng.integers(3)) if rng.random() < 0.5 else 0):
        t.add(_noise_line(rng) + "\n")
    if reverse:
        layout = int(rng.integers(3))
        for k, v in zip(keys, vals):
            if layout < 2:
                t.add(f"[{v}] {k} | ${int(rng.integers(5, 200))}.{int(rng.integers(100)):02d}\n")
            else:
                t.add(f"[{v}] {k}\n")
    else:
        layout = int(rng.integers(4))
        for i, (k, v) in enumerate(zip(keys, vals)):
            if layout == 0:
                t.add(f"{k}: {v}\n")
            elif layout == 1:
                t.add(f"{k} ({word} {v})\n")
            elif layout == 2:
                t.add(f"[{i + 1}] {k} = {v}\n")
            else:
                t.add(f"The {word} of {k} is {v}. ")
        if layout == 3:
            t.add("\n")
    for _ in range(int(rng.integers(3)) if rng.random() < 0.5 else 0):
        t.add(_noise_line(rng) + "\n")
    order = [int(i) for i in rng.permutation(n)]
    if chat:
        i = order[0]
        q = _pick(rng, (f"What is the {word} of {keys[i]}?", f"{keys[i]}?", f"Find {keys[i]}."))
        _chat(t, q, f"{keys[i]} is {vals[i]}.", vals[i])
        return t
    for i in order[: queries or n]:
        style = int(rng.integers(3))
        if style == 0:
            t.add(f"{keys[i]}? ")
        elif style == 1:
            t.add(f"The {word} of {keys[i]} is ")
        else:
            t.add(f"{keys[i]} -> ")
        t.add(vals[i], answer=True)
        t.add("\n")
    return t


def _chat(t: _Text, question: str, reasoning: str, answer: str) -> None:
    """Wrap the table built so far in the chat template and append the question and the answered response."""
    body = t.text()
    t.parts, t.spans, t.n = [], [], 0
    t.add(f"{IM_START}user\n{body}{question}{IM_END}\n{IM_START}assistant\n")
    t.add(f"<think> {reasoning} </think> <answer> {answer} </answer>{IM_END}", answer=True)
    t.add("\n")


def _passage(rng: np.random.Generator, rows: int, max_len: int, chat: bool, *, exact: bool = False,
             queries: int | None = None) -> _Text:
    """Short passages about named places (a search result's shape: ``[2] Name: Name was built in 1782. It is kept by
    Other. ...``), each giving three attributes in varied sentences and mentioning another place; questions ask one
    (place, attribute): ``The keeper of Name is`` -> its value."""
    n = _n_rows(rng, rows if exact else min(rows, 6), exact)  # passages are long: at most 6 unless asked
    names = _keys(rng, n, "name")
    attrs = [ATTRIBUTES[int(i)] for i in rng.choice(len(ATTRIBUTES), size=3, replace=False)]
    facts = {a[0]: _values(rng, a[2], n, max_len) for a in attrs}
    numbered = rng.random() < 0.5
    t = _Text()
    for i, nm in enumerate(names):
        sentences = []
        for j, a in enumerate(attrs[k] for k in rng.permutation(3)):
            v = facts[a[0]][i]
            form = int(rng.integers(3)) if j else 0
            sentences.append(f"{nm} {a[1]} {v}." if form == 0 else f"It {a[1]} {v}." if form == 1 else
                             f"Its {a[0]} is {v}.")
        if n > 1 and rng.random() < 0.5:  # a mention of another place: its name is no key here
            other = names[(i + 1 + int(rng.integers(n - 1))) % n]
            sentences.insert(int(rng.integers(1, len(sentences) + 1)),
                             f"A {_pick(rng, NOUNS)} in {nm} is named after {other}.")
        body = " ".join(sentences)
        t.add(f"[{i + 1}] {nm}: {body}\n" if numbered else f"{body}\n")
    asks = [(int(i), attrs[int(j)]) for i, j in zip(rng.permutation(n), rng.integers(3, size=n))]
    if chat:
        i, a = asks[0]
        v = facts[a[0]][i]
        _chat(t, f"What is the {a[0]} of {names[i]}?", f"The {a[0]} of {names[i]} is {v}.", v)
        return t
    for i, a in asks[: queries or n]:
        t.add(f"The {a[0]} of {names[i]} is ")
        t.add(facts[a[0]][i], answer=True)
        t.add(".\n")
    return t


def _grid_text(cells: np.ndarray, box_r: int, box_c: int) -> str:
    """A grid in the Sudoku env's layout (column header, row labels, box separators), '.' for an empty cell."""
    size = cells.shape[0]
    head = "   " + " | ".join(" ".join(f"C{c + 1}" for c in range(b, b + box_c)) for b in range(0, size, box_c))
    lines = [head]
    for r in range(size):
        if r and r % box_r == 0:
            lines.append("   " + "+".join("-" * (3 * box_c) for _ in range(size // box_c)))
        row = " | ".join(" ".join(f"{(str(cells[r, c]) if cells[r, c] else '.'):>2}" for c in range(b, b + box_c))
                         for b in range(0, size, box_c))
        lines.append(f"R{r + 1} {row}")
    return "\n".join(lines) + "\n"


def _grid(rng: np.random.Generator, chat: bool, *, queries: int | None = None) -> _Text:
    """A grid of random digits and dots (never a filled grid: a quarter to three fifths of the cells empty), then
    reads of cells, rows, columns, boxes (named by one of their cells: "the box of R1C2") and of the distinct digits
    a cell's row, column and box hold together ("R1C2 sees 1 3 4")."""
    size, box_r, box_c = (4, 2, 2) if rng.random() < 0.8 else (6, 2, 3)
    cells = rng.integers(1, size + 1, size=(size, size))
    n_empty = int(rng.integers(size * size // 4, size * size * 3 // 5 + 1))
    cells.ravel()[rng.permutation(size * size)[:n_empty]] = 0
    t = _Text()
    t.add(_grid_text(cells, box_r, box_c))

    def digits(vals: np.ndarray) -> str:
        d = [str(int(v)) for v in vals if v]
        return " ".join(d) if d else "nothing"

    asks = []
    for _ in range(queries or int(rng.integers(1, 5))):
        r, c = (int(x) for x in rng.integers(size, size=2))
        what = int(rng.integers(5))
        if what == 0:
            asks.append((f"R{r + 1}C{c + 1} is ", str(int(cells[r, c])) if cells[r, c] else "empty"))
        elif what == 1:
            asks.append((f"R{r + 1} holds ", digits(cells[r])))
        elif what == 2:
            asks.append((f"C{c + 1} holds ", digits(cells[:, c])))
        else:
            br, bc = r // box_r * box_r, c // box_c * box_c
            in_box = cells[br:br + box_r, bc:bc + box_c].ravel()
            if what == 3:
                asks.append((f"The box of R{r + 1}C{c + 1} holds ", digits(in_box)))
            else:  # the distinct digits of the cell's row, column and box, in order
                seen = sorted({int(v) for v in (*cells[r], *cells[:, c], *in_box) if v})
                asks.append((f"R{r + 1}C{c + 1} sees ", " ".join(map(str, seen)) or "nothing"))
    if chat:
        q, a = asks[0]
        _chat(t, f"{q.strip()}?", f"{q}{a}.", a)
        return t
    for q, a in asks:
        t.add(q)
        t.add(a, answer=True)
        t.add(".\n")
    return t


def _copy(rng: np.random.Generator, rows: int, max_len: int, *, kind: str | None = None) -> _Text:
    """One to three (at most `rows`) values in a line, then repeated in the same order (induction: continue what was
    seen)."""
    n = int(rng.integers(1, max(1, min(3, rows)) + 1))
    kind = kind or _pick(rng, ("id", "id", "name", "digits"))
    vals = _values(rng, kind, n, max_len)
    t = _Text()
    t.add(_pick(rng, ("Note: ", "Codes: ", "Seen: ")) + ", ".join(vals) + ".\n")
    t.add(_pick(rng, ("Again: ", "Copy: ", "Once more: ")))
    t.add(", ".join(vals), answer=True)
    t.add(".\n")
    return t


def make_example(rng: np.random.Generator, task: str, rows: int = 10, max_len: int = 10, chat: bool = False, *,
                 exact_rows: bool = False, kind: str | None = None, queries: int | None = None) -> Example:
    """One example of `task` (`TASKS`): tables of 2..`rows` rows (`exact_rows`: `rows`), ids of up to `max_len`
    characters; `kind` fixes the value kind ("id10": 10-character ids), `queries` the number of questions."""
    if task in ("lookup", "lookup_rev"):
        t = _lookup(rng, rows, max_len, chat, task == "lookup_rev", exact=exact_rows, kind=kind, queries=queries)
    elif task == "passage":
        t = _passage(rng, rows, max_len, chat, exact=exact_rows, queries=queries)
    elif task == "grid":
        t = _grid(rng, chat, queries=queries)
    elif task == "copy":
        t = _copy(rng, rows, max_len, kind=kind)
    else:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return Example(t.text(), tuple(t.spans), task)


#: First word of the text stream's seed: keeps the stream apart from any generator seeded by a small integer.
_STREAM_TAG = 0x7B45E


def example_stream(recipe: BaseRecipe = DEFAULT_RECIPE) -> Iterator[list[Example]]:
    """The recipe's batches, in order (seeded by `recipe.data_seed`): `recipe.steps` lists of `batch_size`."""
    # Seeded apart from every env: an env that seeds numpy with a small integer (WebShop's catalogue, 0) draws the
    # same bits as `default_rng(0)` would, and an id drawn here could then be one of its ASINs (it was: B062K4VJ2F).
    rng = np.random.default_rng([_STREAM_TAG, recipe.data_seed])
    names = [k for k, _ in recipe.mix]
    p = np.array([w for _, w in recipe.mix], dtype=np.float64)
    p = p / p.sum()
    for step in range(recipe.steps):
        rows, max_len = recipe.stage(step)
        batch = []
        for _ in range(recipe.batch_size):
            task = names[int(rng.choice(len(names), p=p))]
            chat = task != "copy" and rng.random() < recipe.chat
            batch.append(make_example(rng, task, rows, max_len, chat))
        yield batch


# ------------------------------------------------------------------------------------------------ training
def encode_example(tokenizer: Any, example: Example) -> tuple[list[int], list[bool]]:
    """Token ids of `example.text` and, per token, whether it is (part of) an answer: a token that overlaps an
    answer span is one (`" B"` opens the answer `B0...` after a space). Special tokens are matched in the text."""
    enc = tokenizer(example.text, return_offsets_mapping=True, add_special_tokens=False)
    ids = list(enc["input_ids"])
    marks = [any(a < e and b > s for s, e in example.spans) and b > a for a, b in enc["offset_mapping"]]
    return ids, marks


def _batch(encoded: Sequence[tuple[list[int], list[bool]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids `[B, T]` and next-token targets `[B, T]` (-100 where not an answer token)."""
    length = max(len(ids) for ids, _ in encoded)
    x = torch.full((len(encoded), length), pad_id, dtype=torch.long)
    y = torch.full((len(encoded), length), -100, dtype=torch.long)
    for r, (ids, marks) in enumerate(encoded):
        x[r, : len(ids)] = torch.tensor(ids)
        for j in range(1, len(ids)):
            if marks[j]:
                y[r, j - 1] = ids[j]
    return x, y


#: Examples per forward pass within a step (a step's batch is split by length; the update is the same).
MICRO_BATCH = 8


def _answer_logits(model: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[N, V]`` at the N positions that predict an answer token, and their targets ``[N]``, of right-padded
    rows `x` ``[B, T]`` with targets `y` ``[B, T]`` (-100 elsewhere), in row-major order.

    The lean forward (`FastQwen2`'s pieces, equal to transformers' forward up to rounding): every layer but the
    last runs at every position; the last layer computes keys and values everywhere but its attention, output
    projection and MLP, and then the output layer, only at the read positions (about 5% of a lookup's tokens),
    since nothing reads the others. Right padding needs no attention mask: a causal model's real tokens never see
    the pads after them."""
    fast = FastQwen2(model)
    inner = model.model
    b, t = x.shape
    read = y != -100
    pos = torch.arange(t).expand(b, t)
    h = inner.embed_tokens(x)
    cos, sin = fast._rope(pos, h.dtype)
    layers = list(inner.layers)
    for layer in layers[:-1]:
        q, k, v = fast._qkv(layer, h, cos, sin)
        h = fast._finish_layer(layer, h, fast._attend(q, k, v, None))
    q, k, v = fast._qkv(layers[-1], h, cos, sin)
    # Each row's read positions first (ascending), then padding slots that point at position 0 and are dropped.
    counts = read.sum(dim=1)
    a = max(1, int(counts.max()))
    at = torch.sort(torch.where(read, pos, t + pos), dim=1).values[:, :a]  # [B, A]
    slot_real = torch.arange(a)[None, :] < counts[:, None]  # [B, A]
    at = torch.where(slot_real, at, torch.zeros_like(at))
    q_at = q.gather(2, at[:, None, :, None].expand(b, q.shape[1], a, q.shape[3]))
    sees = pos[:, None, None, :] <= at[:, None, :, None]  # [B, 1, A, T]: causal
    h_at = h.gather(1, at[:, :, None].expand(b, a, h.shape[2]))
    h_at = fast._finish_layer(layers[-1], h_at, fast._attend(q_at, k, v, sees))
    return fast.logits(h_at[slot_real]), y.gather(1, at)[slot_real]


def pretrain(model: Any, tokenizer: Any, recipe: BaseRecipe = DEFAULT_RECIPE, *,
             log: Callable[[dict[str, Any]], None] | None = None, log_every: int = 100,
             eval_every: int = 0, eval_n: int = 64, state_file: str | os.PathLike | None = None) -> dict[str, Any]:
    """Train `model` (a `Qwen2ForCausalLM`) in place on the recipe's text; returns the last metrics.

    One torch thread is the caller's choice (the build sets it); the loop is deterministic given the recipe on one
    machine. `log` gets {"step", "loss", "lr", "cpu_s"} (the mean loss since the last call, process CPU seconds
    of the training so far, evaluations left out) every `log_every` steps and at the end, with "eval"
    (`evaluate_recall` on `eval_n` examples a shape) every `eval_every` steps (0: never; an experiment's probe).

    `state_file`: the progress of an interrupted run. Saved there (weights, optimiser, step) every `log_every`
    steps; when it holds a saved step of this recipe, the training goes on from it, to the same weights as an
    uninterrupted run (nothing else is random: the text stream is replayed to the saved step). A file that
    cannot be read or belongs to another recipe is said on stderr and the training starts over.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    pad = tokenizer.pad_token_id
    model.train()
    stream = example_stream(recipe)
    done, cpu_before = _restore_progress(state_file, model, opt, recipe, log_every) if state_file else (0, 0.0)
    for _ in range(done):  # the text of the steps already trained: the stream's generator must pass them
        next(stream)
    cpu0 = time.process_time() - cpu_before
    eval_cpu = 0.0
    metrics: dict[str, Any] = {}
    running = 0.0
    for step, batch in enumerate(stream, start=done + 1):
        for group in opt.param_groups:
            group["lr"] = recipe.lr_at(step)
        opt.zero_grad(set_to_none=True)
        # Micro-batches of similar length (sorted, `MICRO_BATCH` each) pad less; the loss is the mean over all the
        # step's answer tokens, so the gradient is the whole batch's whatever the split.
        encoded = sorted((encode_example(tokenizer, e) for e in batch), key=lambda r: len(r[0]))
        total = sum(sum(m[1:]) for _, m in encoded)
        loss_sum = 0.0
        for i in range(0, len(encoded), MICRO_BATCH):
            x, y = _batch(encoded[i:i + MICRO_BATCH], pad)
            logits, target = _answer_logits(model, x, y)
            loss = torch.nn.functional.cross_entropy(logits, target, reduction="sum") / max(1, total)
            loss.backward()
            loss_sum += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, recipe.clip)
        opt.step()
        running += loss_sum
        if step % log_every == 0 or step == recipe.steps:
            n = step % log_every or log_every
            metrics = {"step": step, "loss": running / n, "lr": recipe.lr_at(step),
                       "cpu_s": time.process_time() - cpu0 - eval_cpu}
            running = 0.0
            if eval_every and (step % eval_every == 0 or step == recipe.steps):
                e0 = time.process_time()
                metrics["eval"] = evaluate_recall(model, tokenizer, eval_n)
                model.train()
                eval_cpu += time.process_time() - e0
            if log is not None:
                log(metrics)
            if state_file and step % log_every == 0 and step < recipe.steps:  # `running` is 0 here
                _save_progress(state_file, model, opt, recipe, log_every, step, metrics["cpu_s"])
    model.eval()
    return metrics


def _progress_key(recipe: BaseRecipe, log_every: int) -> str:
    """What a saved progress must have been made with: the recipe and the cadence of its running loss."""
    return json.dumps({"recipe": dataclasses.asdict(recipe), "log_every": log_every, "version": TINY_BASE_VERSION},
                      sort_keys=True, default=repr)


def _save_progress(path: str | os.PathLike, model: Any, opt: torch.optim.Optimizer, recipe: BaseRecipe,
                   log_every: int, step: int, cpu_s: float) -> None:
    """Write the training's state after `step` to `path` atomically (a kill mid-write keeps the previous one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    torch.save({"key": _progress_key(recipe, log_every), "step": step, "cpu_s": float(cpu_s),
                "model": model.state_dict(), "opt": opt.state_dict()}, part)
    os.replace(part, path)


def _restore_progress(path: str | os.PathLike, model: Any, opt: torch.optim.Optimizer, recipe: BaseRecipe,
                      log_every: int) -> tuple[int, float]:
    """(steps done, CPU seconds spent) of the progress saved in `path`, loaded into `model` and `opt`; (0, 0.0)
    when there is none or it is not usable (said on stderr, and removed). Checked whole before anything is
    loaded, so that a refused file leaves the model as it was."""
    path = Path(path)
    if not path.is_file():
        return 0, 0.0
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        why = _progress_problem(state, model, opt, recipe, log_every)
    except Exception as err:  # noqa: BLE001 - a truncated or garbled file, whatever torch raised: start over
        why = f"it cannot be read ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    if why is not None:
        print(f"tiny-base: the saved progress {path} is not used, {why}; starting over", file=sys.stderr, flush=True)
        path.unlink(missing_ok=True)
        return 0, 0.0
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"]), float(state["cpu_s"])


def _progress_problem(state: Any, model: Any, opt: torch.optim.Optimizer, recipe: BaseRecipe,
                      log_every: int) -> str | None:
    """Why a loaded progress `state` cannot continue this training (None: it can)."""
    if not isinstance(state, dict) or state.get("key") != _progress_key(recipe, log_every):
        return "it was saved by another recipe or version"
    step = state.get("step")
    if not isinstance(step, int) or not 0 < step < recipe.steps or step % log_every:
        return f"its step {step!r} is not a saved step of this recipe"
    want = {k: (v.shape, v.dtype) for k, v in model.state_dict().items()}
    got = state.get("model")
    if not isinstance(got, dict) or {k: (getattr(v, "shape", None), getattr(v, "dtype", None))
                                     for k, v in got.items()} != want:
        return "its weights are not this model's"
    saved = state.get("opt")
    if not isinstance(saved, dict) or [len(g.get("params", ())) for g in saved.get("param_groups", [])] != [
            len(g["params"]) for g in opt.param_groups]:
        return "its optimiser state is not this model's"
    return None


# ------------------------------------------------------------------------------------------------ evaluation
#: The held-out evaluation's shapes: name -> (task, rows, value kind or None for the task's own mix, chat).
EVAL_SHAPES: dict[str, tuple[str, int, str | None, bool]] = {
    "id_lookup_3": ("lookup", 3, "id10", False),
    "id_lookup_5": ("lookup", 5, "id10", False),
    "id_lookup_10": ("lookup", 10, "id10", False),
    "id_lookup_rev_3": ("lookup_rev", 3, "id10", False),
    "id_lookup_rev_10": ("lookup_rev", 10, "id10", False),
    "id_lookup_chat_5": ("lookup", 5, "id10", True),
    "passage_5": ("passage", 5, None, False),
    "grid": ("grid", 0, None, False),
    "copy_id": ("copy", 3, "id10", False),
}
#: Seed of the held-out text: never a training seed (`BaseRecipe.data_seed` is small).
EVAL_SEED = 2**31 - 1


def eval_examples(shape: str, n: int, seed: int = EVAL_SEED) -> list[Example]:
    """`n` held-out examples of `shape` (`EVAL_SHAPES`), one question each."""
    task, rows, kind, chat = EVAL_SHAPES[shape]
    rng = np.random.default_rng([seed, sorted(EVAL_SHAPES).index(shape)])
    return [make_example(rng, task, rows, 10, chat, exact_rows=True, kind=kind, queries=1) for _ in range(n)]


@torch.no_grad()
def exact_match(model: Any, tokenizer: Any, examples: Sequence[Example], batch_size: int = 32) -> float:
    """Share of `examples` whose every answer token is the model's argmax given the text before it: the greedy
    answer, token for token (teacher forcing with all argmaxes right is exactly greedy decoding reproducing it)."""
    was_training = model.training
    model.eval()
    hits = 0
    for i in range(0, len(examples), batch_size):
        x, y = _batch([encode_example(tokenizer, e) for e in examples[i:i + batch_size]], tokenizer.pad_token_id)
        hidden = model.model(input_ids=x).last_hidden_state
        pred = model.lm_head(hidden).argmax(-1)
        hits += int(((pred == y) | (y == -100)).all(dim=1).sum())
    model.train(was_training)
    return hits / max(1, len(examples))


def evaluate_recall(model: Any, tokenizer: Any, n: int = 200, shapes: Sequence[str] | None = None,
                    seed: int = EVAL_SEED) -> dict[str, float]:
    """Held-out exact match per shape (`EVAL_SHAPES`): `n` fresh examples each, one question per example, greedy.

    `id_lookup_k`: a table of k (key, 10-character id) rows, key before value, asked one key;
    `id_lookup_rev_k`: the value before its key (``[B0...] Title | $9.99``); `id_lookup_chat_5`: the whole chat
    response (``<think> Key is ID. </think> <answer> ID </answer><|im_end|>``) exact; `passage_5`: an attribute of
    one of five entities in running text; `grid`: a cell, row, column, box or "sees" read of a 4x4/6x6 grid;
    `copy_id`: repeat the one to three 10-character ids shown on the line before, in order.
    """
    return {s: exact_match(model, tokenizer, eval_examples(s, n, seed)) for s in (shapes or EVAL_SHAPES)}


# ------------------------------------------------------------------------------------------------ build and cache
def _sample_digest(recipe: BaseRecipe, examples: int = 256, per_task: int = 16) -> str:
    """SHA-256 of the generator: its word lists, the stream's first `examples` texts and `per_task` examples of every
    task (chat and not) at every stage of the curriculum."""
    h = hashlib.sha256(json.dumps([SYLLABLES, NOUNS, ADJECTIVES, ID_CHARS, ATTRIBUTES, TASKS]).encode())

    def put(e: Example) -> None:
        h.update(json.dumps([e.task, e.text, e.spans]).encode())

    seen = 0
    for batch in example_stream(recipe):
        for e in batch[: examples - seen]:
            put(e)
            seen += 1
        if seen >= examples:
            break
    for f, _, _ in recipe.stages:
        rows, max_len = recipe.stage(min(recipe.steps - 1, max(0, int(f * recipe.steps) - 1)))
        rng = np.random.default_rng([recipe.data_seed, rows, max_len])
        for task in TASKS:
            for i in range(per_task):
                put(make_example(rng, task, rows, max_len, task != "copy" and i % 2 == 1))
    return h.hexdigest()


def recipe_digest(recipe: BaseRecipe = DEFAULT_RECIPE) -> str:
    """SHA-256 of what makes the base model: `TINY_BASE_VERSION`, the recipe's fields, the starting tiny model's
    identity (its recipe and corpus versions and recorded digest) and the generator (`_sample_digest`: its word lists
    and a sample of its text at every stage), so that an edit of the generator shows even when no field changed."""
    blob = {
        "version": TINY_BASE_VERSION,
        "recipe": dataclasses.asdict(recipe),
        "tiny": {"format": TINY_FORMAT_VERSION, "corpus": TINY_CORPUS_VERSION, "sha256": TINY_MODEL_SHA256["text"]},
        "text": _sample_digest(recipe),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=repr).encode()).hexdigest()


#: `recipe_digest(DEFAULT_RECIPE)`: tests/policy/test_tiny_base.py fails when the shipped recipe (or the generator,
#: or the tiny model it starts from) changes without this being recorded anew (and `TINY_BASE_VERSION` bumped when
#: the change is one the recipe's fields do not show).
TINY_BASE_RECIPE_SHA256 = "cce1ac6d313d0274e642e2eef59c6a6db001c0e24fd44fe797626bbc6abac252"


def build_tiny_base_model(out_dir: str | os.PathLike, recipe: BaseRecipe = DEFAULT_RECIPE, *,
                          log: Callable[[dict[str, Any]], None] | None = None, eval_n: int = 200,
                          eval_every: int = 0, state_file: str | os.PathLike | None = None) -> Path:
    """Build the tiny model (`build_tiny_model` with `recipe.model`), pre-train it on the recipe's text with one
    torch thread, evaluate it before and after (`evaluate_recall`, `eval_n` examples a shape; 0: skip) and save
    it with `ragen_tiny_base.json` (recipe, digest, cost, accuracies). Returns `out_dir`. `log`, `eval_every` and
    `state_file` (the progress an interrupted build goes on from) as in `pretrain`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build_tiny_model(out, **dict(recipe.model))
        start = tiny_model_digest(out)
        tokenizer = AutoTokenizer.from_pretrained(out)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        before = evaluate_recall(model, tokenizer, eval_n) if eval_n else {}
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.data_seed)
            last = pretrain(model, tokenizer, recipe, log=log, eval_every=eval_every, state_file=state_file)
        cost = {"cpu_s": last.get("cpu_s", time.process_time() - cpu0), "wall_s": time.perf_counter() - wall0}
        after = evaluate_recall(model, tokenizer, eval_n) if eval_n else {}
        model.save_pretrained(out)
    finally:
        torch.set_num_threads(threads)
    meta = {
        "version": TINY_BASE_VERSION,
        "recipe": dataclasses.asdict(recipe),
        "recipe_sha256": recipe_digest(recipe),
        "start_model_sha256": start,
        "torch": torch.__version__,
        "cost": cost,
        "last": last,
        "eval_n": eval_n,
        "before": before,
        "after": after,
        "sha256": tiny_model_digest(out),  # of the saved, pre-trained model: a cached folder is checked against it
    }
    (out / "ragen_tiny_base.json").write_text(json.dumps(meta, indent=2))
    return out


#: Held-out examples per shape that a cached build evaluates before and after (recorded in its meta file).
BUILD_EVAL_N = 200


def default_tiny_base_dir(cache_dir: str | os.PathLike | None = None, recipe: BaseRecipe | None = None, *,
                          log: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The cached base model, built on first use (about 28 core-minutes for the default recipe; docs/training.md).

    The cache folder (under `cache_dir`, default `$RAGEN2_CACHE` or `~/.cache/ragen2`) is named after
    `recipe_digest(recipe)` (default: `DEFAULT_RECIPE`) and the torch version. Built into a temporary folder and
    renamed; a lock file makes a second process that asks for the same model meanwhile wait for the first one's build
    instead of starting its own (it says so on stderr). Without `log` the build reports its progress on stderr.
    An interrupted build (Ctrl-C, a killed process) goes on from its last 100 steps on the next call (the progress
    is kept in ``.<folder>.progress/``), to the same weights; temporary folders of killed builds are removed.

    A cached folder whose files no longer give the digest its build recorded (``"sha256"`` in
    ``ragen_tiny_base.json``), that records another recipe than its name says, or that exists without its
    ``ragen_tiny_base.json`` (a partly copied or partly deleted folder) raises `CorruptTinyModelError` naming the
    folder to delete, before any build. A cache folder that cannot be written is one OSError naming it and
    ``RAGEN2_CACHE``.
    """
    recipe = DEFAULT_RECIPE if recipe is None else recipe
    root = cache_root(cache_dir)
    digest = recipe_digest(recipe)
    key = json.dumps({"recipe": digest, "torch": torch.__version__}, sort_keys=True)
    name = f"tiny-base-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    target = root / name
    if (target / META_NAME).exists():
        _verify_base(target, digest)
        return target
    with _build_lock(root, name):
        if (target / META_NAME).exists():  # built by another process while this one waited
            _verify_base(target, digest)
            return target
        if target.exists() or target.is_symlink():  # the rename below would fail only after the whole build
            raise CorruptTinyModelError(
                f"the cached tiny base model at {target} has no {META_NAME} (a partly written, copied or deleted "
                f"folder); delete the folder (rm -r '{target}') and it is rebuilt on the next call")
        for orphan in root.glob(f".{name}-*"):  # temporary folders of builds that were killed (this lock is held)
            shutil.rmtree(orphan, ignore_errors=True)
        progress = root / f".{name}.progress"
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            build_tiny_base_model(tmp, recipe, log=log or _stderr_progress(recipe, target, progress),
                                  eval_n=BUILD_EVAL_N, state_file=progress / "pretrain_state.pt")
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(progress, ignore_errors=True)  # built: nothing left to go on from
    return target


#: The meta file of a built base model (recipe, digests, cost, accuracies).
META_NAME = "ragen_tiny_base.json"


def _verify_base(folder: Path, digest: str) -> None:
    """`verify_cached_model` (the files give the digest the build recorded), and the recipe the build recorded is
    the one the folder's name stands for: a folder put there by hand from another recipe or version is refused,
    not loaded as this one."""
    verify_cached_model(folder, None, META_NAME)
    try:
        recorded = json.loads((folder / META_NAME).read_text()).get("recipe_sha256")
    except (OSError, ValueError, AttributeError) as err:
        raise CorruptTinyModelError(f"the cached tiny base model at {folder} cannot be read ({err}); delete the "
                                    f"folder (rm -r '{folder}') and it is rebuilt on the next call") from err
    if recorded != digest:
        raise CorruptTinyModelError(
            f"the cached tiny base model at {folder} was built from another recipe (recipe_sha256 "
            f"{str(recorded)[:12]}, this one {digest[:12]}): it is not the model its name stands for; delete the "
            f"folder (rm -r '{folder}') and it is rebuilt on the next call")


class _build_lock:
    """The exclusive lock of one cached base model's build (`fcntl.flock` on ``.<name>.lock`` in `root`; the
    kernel drops it when its holder exits, SIGKILL too). A process that finds it held says so on stderr before it
    waits. A cache root that cannot be made or written is one OSError naming it and what to do."""

    def __init__(self, root: Path, name: str):
        self.root, self.name, self.handle = root, name, None

    def __enter__(self) -> _build_lock:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.root / f".{self.name}.lock", "a")
            probe = tempfile.mkdtemp(prefix=f".{self.name}-", dir=self.root)  # the build's own first write
            os.rmdir(probe)
        except OSError as err:
            if self.handle is not None:
                self.handle.close()
            raise OSError(f"cannot build the tiny base model in the cache folder {self.root} "
                          f"({err.strerror or err}): set RAGEN2_CACHE to a folder this process can write in "
                          f"(or build it there once: python scripts/build_tiny_base.py --cache-dir DIR)") from None
        try:
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"tiny-base: waiting for another process that is building the tiny base model "
                      f"{self.root / self.name} (about 28 CPU-minutes for the default recipe)", file=sys.stderr,
                      flush=True)
                fcntl.flock(self.handle, fcntl.LOCK_EX)
        except BaseException:
            self.handle.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()  # releases the lock


def _stderr_progress(recipe: BaseRecipe, target: Path, progress: Path) -> Callable[[dict[str, Any]], None]:
    """The build's log when its caller gave none (`load_policy("tiny-base")` on first use): a line on stderr when
    it starts and every 100 steps, so that a half-hour build is not a silent hang."""
    cost = "about 28 CPU-minutes, " if recipe == DEFAULT_RECIPE else ""
    print(f"tiny-base: building the tiny base model into {target}: {recipe.steps} steps of {recipe.batch_size} "
          f"({cost}once per machine); an interrupted build goes on from its last 100 steps (kept in {progress})",
          file=sys.stderr, flush=True)
    wall0 = time.perf_counter()
    first: list[tuple[int, float]] = []

    def log(m: dict[str, Any]) -> None:
        now = time.perf_counter() - wall0
        if not first:  # the rate is measured from this session's first line (a resumed build starts mid-way)
            first.append((m["step"], now))
        (s0, t0), step = first[0], m["step"]
        left = (now - t0) / (step - s0) * (recipe.steps - step) if step > s0 else None
        eta = f", about {left / 60:.0f} min left" if left is not None and step < recipe.steps else ""
        print(f"tiny-base: step {step}/{recipe.steps}, loss {m['loss']:.3f}{eta}", file=sys.stderr, flush=True)

    return log
