"""Programming tasks with hidden tests: a procedural generator and a loader for public formats.

A `CodeTask` is a problem statement plus hidden tests, in one of two styles:

- stdin/stdout (TACO / DeepCoder / Codeforces): each test is `(input, output)` text; the program
  reads the input on stdin and must print the output (compared with `sandbox.outputs_match`).
- function (LeetCode / DeepCoder "functional"): `fn_name` plus tests `(args, expected)`; the
  program defines the function (or a `class Solution` method) and the sandbox calls it with the
  JSON arguments (compared with `values_equal`).

Generator (`generate_task`, the default of `CodeEnv`): ten families of small problems, each with
parameters drawn from the env's generator, a *reference solution* (program text, returned by the
env's oracle) and an in-process solver used to compute the expected outputs. The two are separate
implementations of the same parameterised spec; the test suite runs every family's reference
program in the sandbox against the solver's outputs, so a disagreement between them fails a test
(the env itself never executes anything in its own process: the solver is our trusted code, not
the model's).

Families (style): sum_multiples, reverse_words, count_letters, fizzbuzz, subarray_extreme,
gcd_lcm_pairs (stdin); rotate, is_palindrome, count_primes, running_stat (function).

Difficulty knobs (`CodeTaskConfig`): `num_tests` (hidden tests per task), `num_public_tests` (the
statement's example plus the tests repair feedback may reveal), `max_len` (list / text length),
`max_value` (magnitude of numbers; count_primes's n stays at most 10**6, the solver sieves up to n),
`families` (subset), `style` ("stdin" | "function" | "mixed").

Public and hidden tests are separate (`CodeTask.public_tests`, `CodeTask.tests`): the agent may see a
public test (the example in the statement, a failing test in repair feedback), never a hidden one, and
reward and success come from the hidden tests only. No hidden test repeats a public test's input (up to
whitespace, `_test_key`): the generator redraws or leaves out such a test, the loader leaves it out, and
`CodeTask` refuses one, so the statement's example is never paid.

A generated task's hidden tests are checked at generation against two kinds of program that do not
solve it, both run in-process as plain Python (the project's own trusted code, not the sandbox):

- stand-ins (`passing_standins`): a constant answer (any constant), the identity (echo the input /
  return the first argument), and a lookup table of the public tests falling back to a constant or to
  the identity;
- wrong readings of the statement (`wrong_readings`, `passing_wrong_readings`), listed per family: its
  other rule variants (the other case of reverse_words, the other palindrome rules, the other bound of
  count_primes, ...), the textbook version (the letters-and-digits palindrome check, FizzBuzz 3/5,
  multiples of 3 or 5, the vowels), a missing branch (FizzBuzz without "both"), off-by-one (the first
  or last number left out, k +- 1, range(n)), min/max or gcd/lcm swapped, sign handling (positive
  multiples only, the empty subarray allowed), case handling (case-sensitive counts, swapcase).

Each must fail at least one hidden test; while one passes them all, the generator draws further hidden
tests (so a task can hold more than `num_tests`: over seeds 0..199 of the default config, 160
is_palindrome tasks, 36 subarray_extreme, 19 sum_multiples, 12 rotate and 2 others). The input drawers
make the distinguishing inputs likely: near palindromes (one case flip or one inserted space, mark or
digit), FizzBuzz n reaching lcm(a, b), lists of one sign, negative multiples, made-up words that repeat
a counted letter, lists of at least 3 numbers for rotate and running_stat (on two, left and right
rotations agree). tests/envs/test_code_wrong_readings.py checks independently written wrong programs
of every family over many seeds.

Data sets (`load_tasks(path)`, `.jsonl` or `.json`, validated by `ragen_envs.data.load_records`):

    {"problem": str, "tests": [{"input": str, "output": str}, ...], "solutions": [str, ...]?}     stdin style
    {"problem": str, "fn_name": str, "tests": [{"input": [args...] | str, "output": value}, ...]}  function style

For function tests a string `input` holds one JSON value per line, one per argument (the
LiveCodeBench / DeepCoder "functional" layout). `solutions` (optional) gives reference programs; the
first becomes the oracle answer. `public_tests` (optional, same layout as `tests`; LiveCodeBench's
public test cases) are the tests repair feedback may show; `tests` stay hidden and judge. A record
without `public_tests` gets repair feedback without test contents (verdict counts only). A missing
field or a wrong type raises ValueError naming the file, the line (for .json, the line on which the
record starts) and the field. A record no program could earn is refused too: an `fn_name` that is a keyword or
not in NFKC form (no program defines that exact name), or a `problem` longer than `MAX_PROBLEM_CHARS`
(the observation would cut the statement and the submission style after it).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import keyword
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragen_envs.code.sandbox import outputs_match
from ragen_envs.data import strict_json
from ragen_envs.data.loading import Field, load_numbered_records, validate_record
from ragen_envs.spaces import MAX_OBSERVATION_CHARS
from ragen_envs.validation import require_int

__all__ = [
    "FAMILIES",
    "CodeTask",
    "CodeTaskConfig",
    "CodeTest",
    "generate_task",
    "load_tasks",
    "passing_standins",
    "passing_wrong_readings",
    "plan_sentence",
    "standin_answers",
    "answer_passes",
    "values_equal",
    "wrong_readings",
]

_STYLES = ("stdin", "function", "mixed")


@dataclass(frozen=True)
class CodeTest:
    """One hidden test. stdin style: `input`/`output` text. Function style: `args`/`expected`."""

    input: str = ""
    output: str = ""
    args: tuple[Any, ...] = ()
    expected: Any = None


@dataclass(frozen=True)
class CodeTask:
    """A problem statement with hidden tests (`fn_name` None: stdin/stdout style).

    `tests` are the hidden tests: they judge (reward, success) and are never shown to the agent.
    `public_tests` may be shown (generated tasks: `public_tests[0]` is the statement's example; repair
    feedback reveals failing ones) and never count toward reward: a hidden test whose input repeats a
    public one (`_test_key`) is refused with ValueError.
    """

    problem: str
    tests: tuple[CodeTest, ...]
    fn_name: str | None = None
    reference: str | None = None
    family: str = "dataset"
    params: dict[str, Any] = field(default_factory=dict)
    public_tests: tuple[CodeTest, ...] = ()

    def __post_init__(self) -> None:
        public = {_test_key(self.style, t) for t in self.public_tests}
        repeats = [k for k, t in enumerate(self.tests) if _test_key(self.style, t) in public]
        if repeats:
            raise ValueError(f"hidden tests {repeats} repeat a public test: a test the agent may see is never paid")

    @property
    def style(self) -> str:
        return "stdin" if self.fn_name is None else "function"


@dataclass(frozen=True)
class CodeTaskConfig:
    """Difficulty knobs of the generator (validated; see the module docstring)."""

    num_tests: int = 6
    max_len: int = 8
    max_value: int = 50
    families: tuple[str, ...] | None = None
    style: str = "mixed"
    num_public_tests: int = 3

    def __post_init__(self) -> None:
        for name, low, high in (("num_tests", 1, 50), ("max_len", 2, 1000), ("max_value", 5, 10**9),
                                ("num_public_tests", 1, 50)):
            object.__setattr__(self, name, require_int(name, getattr(self, name), low, high))
        if self.style not in _STYLES:
            raise ValueError(f"style must be one of {_STYLES}, got {self.style!r}")
        if self.families is not None:
            # A list or tuple of names: a bare string ("fizzbuzz") would otherwise be split into its characters.
            fams = self.families
            if not (isinstance(fams, (list, tuple)) and fams
                    and all(isinstance(f, str) and f in FAMILIES for f in fams)):
                raise ValueError(f"families must be a non-empty list of names from {sorted(FAMILIES)}, got {fams!r}")
            object.__setattr__(self, "families", tuple(fams))
        if not self.candidates():
            raise ValueError(f"no family of style {self.style!r} among {self.families}")

    def candidates(self) -> list[str]:
        names = list(self.families) if self.families is not None else list(FAMILIES)
        if self.style != "mixed":
            names = [n for n in names if FAMILIES[n].style == self.style]
        return names


# ----------------------------------------------------------------------------------------------- families
Reading = Callable[[Any], Any]  # a wrong reading: a test's input (stdin text or argument list) -> its answer


@dataclass(frozen=True)
class _Family:
    name: str
    style: str
    params: Callable[[np.random.Generator], dict[str, Any]]
    problem: Callable[[dict[str, Any]], str]
    reference: Callable[[dict[str, Any]], str]
    make_input: Callable[[np.random.Generator, CodeTaskConfig, dict[str, Any], int], Any]
    solve: Callable[[dict[str, Any], Any], Any]
    wrong_readings: Callable[[dict[str, Any]], dict[str, Reading]]
    fn_name: str | None = None


def _ints(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[int]:
    return [int(v) for v in rng.integers(lo, hi + 1, size=n)]


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


_WORDS = (
    "apple river stone cloud maple tiger ocean lemon piano rocket silver garden window yellow quartz "
    "violin bridge candle desert forest harbor island jungle kettle ladder meadow"
).split()


# Wrong readings ------------------------------------------------------------------------------------------
# Each family lists the plausible wrong readings of its statement as plain functions from a test's input
# (stdin text, or the argument list) to the answer such a program gives: the family's other rule
# variants, the textbook version, a missing branch, an off-by-one, a swapped min/max, sign or case
# handling. They are the project's own trusted code, run in-process at generation time (never model
# text), and the generator adds hidden tests until each of them fails at least one.


def _printed(fn: Callable[[Any], Any], parse: Callable[[str], Any]) -> Reading:
    """A stdin reading that parses its input with `parse` and prints `fn` of it on one line."""
    return lambda text: f"{fn(parse(text))}\n"


# sum_multiples -------------------------------------------------------------------------------------------
def _sum_mult_input(rng, cfg, p, i):
    n = 0 if i == 1 else int(rng.integers(1, cfg.max_len + 1))
    xs = [_sum_mult_number(rng, cfg, p["m"]) for _ in range(n)]
    return f"{n}\n{' '.join(map(str, xs))}\n"


def _sum_mult_number(rng, cfg, m):
    """Half of the time a multiple of m (either sign): then a reading that drops the negative ones, the
    last one or the sum itself shows, and the answer is rarely the 0 that a constant program prints."""
    if rng.random() < 0.5:
        top = cfg.max_value // m
        return m * int(rng.integers(-top, top + 1))
    return int(rng.integers(-cfg.max_value, cfg.max_value + 1))


def _sum_mult_solve(p, text):
    lines = text.split("\n")
    total = 0
    for tok in lines[1].split():
        if int(tok) % p["m"] == 0:
            total += int(tok)
    return f"{total}\n"


def _sum_mult_numbers(text: str) -> list[int]:
    lines = text.split("\n")
    return [int(t) for t in lines[1].split()][: int(lines[0])]


def _sum_mult_readings(p):
    m = p["m"]

    def summed(keep: Callable[[int], bool], value: Callable[[int], int] = lambda x: x) -> Reading:
        return _printed(lambda xs: sum(value(x) for x in xs if keep(x)), _sum_mult_numbers)

    readings = {f"multiples of {k} instead": summed(lambda x, k=k: x % k == 0) for k in range(2, 7) if k != m}
    readings.update(
        {
            "positive multiples only": summed(lambda x: x % m == 0 and x > 0),
            "absolute values of the multiples": summed(lambda x: x % m == 0, abs),
            "how many multiples (a count, not a sum)": summed(lambda x: x % m == 0, lambda x: 1),
            "the numbers that are not multiples": summed(lambda x: x % m != 0),
            "every number": summed(lambda x: True),
            "the last number left out": _printed(lambda xs: sum(x for x in xs[:-1] if x % m == 0), _sum_mult_numbers),
            "the first number left out": _printed(lambda xs: sum(x for x in xs[1:] if x % m == 0), _sum_mult_numbers),
        }
    )
    readings["multiples of 3 or 5 (the textbook problem)"] = summed(lambda x: x % 3 == 0 or x % 5 == 0)
    return readings


# reverse_words -------------------------------------------------------------------------------------------
def _rev_input(rng, cfg, p, i):
    n = int(rng.integers(1, cfg.max_len + 1))
    words = []
    for _ in range(n):
        w = _pick(rng, _WORDS)
        words.append(w.capitalize() if rng.random() < 0.3 else w)
    gaps = [" " * int(rng.integers(1, 3)) for _ in range(n - 1)]
    line = words[0] + "".join(g + w for g, w in zip(gaps, words[1:]))
    return " " * int(rng.integers(0, 2)) + line + "\n"


def _rev_solve(p, text):
    words = text.split()
    words.reverse()
    out = " ".join(words)
    if p["case"] == "upper":
        out = out.upper()
    elif p["case"] == "lower":
        out = out.lower()
    return out + "\n"


_REV_CASE = {"keep": "", "upper": ".upper()", "lower": ".lower()"}
_CASE_FN: dict[str, Callable[[str], str]] = {"keep": str, "upper": str.upper, "lower": str.lower}


def _rev_readings(p):
    convert = _CASE_FN[p["case"]]

    def on_line(fn: Callable[[str], str]) -> Reading:
        return lambda text: convert(fn(text.split("\n")[0])) + "\n"

    readings = {f"case: {c}": (lambda text, c=c: _rev_solve({"case": c}, text)) for c in _CASE_FN if c != p["case"]}
    readings.update(
        {
            "characters reversed": on_line(lambda line: line.strip()[::-1]),
            "each word's letters reversed, order kept": on_line(lambda line: " ".join(w[::-1] for w in line.split())),
            "words in the original order": on_line(lambda line: " ".join(line.split())),
            "split on single spaces (gaps kept)": on_line(lambda line: " ".join(reversed(line.split(" ")))),
            # For upper case: right on lower-case words only, wrong on a capitalised one.
            "case swapped": lambda text: " ".join(reversed(text.split())).swapcase() + "\n",
        }
    )
    return readings


# count_letters -------------------------------------------------------------------------------------------


def _count_params(rng):
    if rng.random() < 0.5:
        letters = "aeiou"
    else:
        pool = list("abcdefghijklmnopqrstuvwxyz")
        k = int(rng.integers(3, 6))
        letters = "".join(sorted(rng.choice(pool, size=k, replace=False).tolist()))
    return {"letters": letters}


def _count_input(rng, cfg, p, i):
    t = int(rng.integers(1, 4))
    lines = []
    for _ in range(t):
        n = int(rng.integers(1, cfg.max_len + 1))
        ws = [_pick(rng, _WORDS) if rng.random() < 0.8 else _letter_soup(rng, p["letters"]) for _ in range(n)]
        ws = [w.upper() if rng.random() < 0.25 else w for w in ws]
        lines.append(" ".join(ws))
    return f"{t}\n" + "\n".join(lines) + "\n"


def _letter_soup(rng, letters: str) -> str:
    """A made-up word, about half of it the counted letters: unlike the dictionary words it often holds
    one of them twice, which tells "letters" from "words holding a letter" (e.g. for k, q, y)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    return "".join(_pick(rng, letters if rng.random() < 0.5 else alphabet) for _ in range(int(rng.integers(3, 7))))


def _count_solve(p, text):
    lines = text.split("\n")
    t = int(lines[0])
    out = []
    for line in lines[1 : 1 + t]:
        c = 0
        for ch in line:
            if ch.lower() in p["letters"]:
                c += 1
        out.append(str(c))
    return "\n".join(out) + "\n"


def _count_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[1 : 1 + int(lines[0])]


def _count_readings(p):
    letters = p["letters"]

    def per_line(count: Callable[[str], int]) -> Reading:
        return lambda text: "".join(f"{count(line)}\n" for line in _count_lines(text))

    readings = {
        "case-sensitive (lower-case letters only)": per_line(lambda line: sum(ch in letters for ch in line)),
        "every letter": per_line(lambda line: sum(ch.isalpha() for ch in line)),
        "distinct letters of the set": per_line(lambda line: len(set(line.lower()) & set(letters))),
        "words holding one of the letters": per_line(
            lambda line: sum(any(ch in letters for ch in w.lower()) for w in line.split())
        ),
        "the first line only": lambda text: f"{sum(ch.lower() in letters for ch in _count_lines(text)[0])}\n",
    }
    if letters != "aeiou":
        readings["the vowels a, e, i, o, u"] = per_line(lambda line: sum(ch in "aeiou" for ch in line.lower()))
    return readings


# fizzbuzz ------------------------------------------------------------------------------------------------
def _fizz_params(rng):
    a, b = (int(v) for v in rng.choice(np.arange(2, 8), size=2, replace=False))
    wa, wb = (str(w) for w in rng.choice(["Fizz", "Buzz", "Bang", "Pop", "Zap", "Whiz"], size=2, replace=False))
    return {"a": a, "b": b, "wa": wa, "wb": wb}


def _fizz_input(rng, cfg, p, i):
    if i == 1 or rng.random() < 0.25:
        # n reaches lcm(a, b), the first i divisible by both: without it a program that forgets the
        # "both" branch (or writes the two words in the other order) passes. The range is wider than the
        # public tests can cover, so a hidden test can always reach it.
        both = math.lcm(p["a"], p["b"])
        return f"{int(rng.integers(both, both + cfg.max_len + cfg.num_public_tests + 1))}\n"
    return f"{int(rng.integers(1, max(2, 3 * cfg.max_len) + 1))}\n"


def _fizz_solve(p, text):
    n = int(text)
    out = []
    for i in range(1, n + 1):
        s = (p["wa"] if i % p["a"] == 0 else "") + (p["wb"] if i % p["b"] == 0 else "")
        out.append(s or str(i))
    return "\n".join(out) + "\n"


def _fizz_readings(p):
    a, b, wa, wb = p["a"], p["b"], p["wa"], p["wb"]

    def lines(word: Callable[[int], str], first: int = 1, past_n: int = 0) -> Reading:
        """Print word(i) or i for i = first .. n + past_n."""
        return lambda text: "".join(f"{word(i) or i}\n" for i in range(first, int(text) + 1 + past_n))

    def stated(i: int) -> str:
        return (wa if i % a == 0 else "") + (wb if i % b == 0 else "")

    readings = {
        f"no both branch ({a} tested first)": lines(lambda i: wa if i % a == 0 else wb if i % b == 0 else ""),
        f"no both branch ({b} tested first)": lines(lambda i: wb if i % b == 0 else wa if i % a == 0 else ""),
        "both words in the other order": lines(lambda i: (wb if i % b == 0 else "") + (wa if i % a == 0 else "")),
        "the two words swapped": lines(lambda i: (wb if i % a == 0 else "") + (wa if i % b == 0 else "")),
        "counts from 0": lines(stated, first=0),
        "stops at n - 1": lines(stated, past_n=-1),
        "goes on to n + 1": lines(stated, past_n=1),
    }
    if a * b != math.lcm(a, b):
        readings[f"both means divisible by {a * b}"] = lines(
            lambda i: wa + wb if i % (a * b) == 0 else wa if i % a == 0 else wb if i % b == 0 else ""
        )
    if (a, b, wa, wb) != (3, 5, "Fizz", "Buzz"):
        readings["the textbook FizzBuzz (3, 5)"] = lines(
            lambda i: ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
        )
    return readings


# subarray_extreme ----------------------------------------------------------------------------------------
def _sub_input(rng, cfg, p, i):
    n = 1 if i == 1 else int(rng.integers(1, cfg.max_len + 1))
    if rng.random() < 0.25:
        # One sign only: all-negative numbers tell "the empty subarray (sum 0) is allowed" from the
        # statement's non-empty subarray (all-positive ones do for the minimum).
        sign = _pick(rng, (-1, 1))
        return f"{n}\n{' '.join(str(sign * v) for v in _ints(rng, n, 1, cfg.max_value))}\n"
    return f"{n}\n{' '.join(map(str, _ints(rng, n, -cfg.max_value, cfg.max_value)))}\n"


def _sub_solve(p, text):
    xs = [int(t) for t in text.split("\n")[1].split()]
    sign = 1 if p["kind"] == "maximum" else -1
    best = cur = sign * xs[0]
    for x in xs[1:]:  # Kadane on sign * x
        cur = max(sign * x, cur + sign * x)
        best = max(best, cur)
    return f"{sign * best}\n"


def _sub_numbers(text: str) -> list[int]:
    lines = text.split("\n")
    return [int(t) for t in lines[1].split()][: int(lines[0])]


def _best_run(xs: list[int], pick: Callable[..., int]) -> int:
    """The pick (max or min) sum of a non-empty contiguous run of xs (Kadane); IndexError on []."""
    best = cur = xs[0]
    for x in xs[1:]:
        cur = pick(x, cur + x)
        best = pick(best, cur)
    return best


def _best_run_or_empty(xs: list[int], pick: Callable[..., int]) -> int:
    """Kadane started at 0, the usual slip: the empty run (sum 0) competes too."""
    best = cur = 0
    for x in xs:
        cur = pick(0, cur + x)
        best = pick(best, cur)
    return best


def _sub_readings(p):
    pick = max if p["kind"] == "maximum" else min
    other = "minimum" if p["kind"] == "maximum" else "maximum"
    return {
        f"the {other} instead": lambda text: _sub_solve({"kind": other}, text),
        f"the {p['kind']} single number": _printed(pick, _sub_numbers),
        "the sum of the whole list": _printed(sum, _sub_numbers),
        "the empty subarray allowed (sum 0)": _printed(lambda xs: _best_run_or_empty(xs, pick), _sub_numbers),
        "the last number left out": _printed(lambda xs: _best_run(xs[:-1], pick), _sub_numbers),
        "runs from the first number only (prefix sums)": _printed(
            lambda xs: pick(itertools.accumulate(xs)), _sub_numbers
        ),
        "runs to the last number only (suffix sums)": _printed(
            lambda xs: pick(itertools.accumulate(reversed(xs))), _sub_numbers
        ),
    }


# gcd_lcm_pairs -------------------------------------------------------------------------------------------
def _gcd_input(rng, cfg, p, i):
    t = int(rng.integers(1, 5))
    rows = [f"{a} {b}" for a, b in zip(_ints(rng, t, 1, cfg.max_value), _ints(rng, t, 1, cfg.max_value))]
    return f"{t}\n" + "\n".join(rows) + "\n"


def _gcd_solve(p, text):
    out = []
    for row in text.split("\n")[1:]:
        if not row.strip():
            continue
        a, b = (int(v) for v in row.split())
        x, y = a, b
        while y:
            x, y = y, x % y
        out.append(str(x if p["op"] == "gcd" else a * b // x))
    return "\n".join(out) + "\n"


def _gcd_pairs(text: str) -> list[tuple[int, int]]:
    lines = text.split("\n")
    return [(int(a), int(b)) for a, b in (row.split() for row in lines[1 : 1 + int(lines[0])])]


def _gcd_readings(p):
    stated = math.gcd if p["op"] == "gcd" else math.lcm
    other = "lcm" if p["op"] == "gcd" else "gcd"

    def per_pair(fn: Callable[[int, int], int]) -> Reading:
        return lambda text: "".join(f"{fn(a, b)}\n" for a, b in _gcd_pairs(text))

    return {
        f"the {other} instead": lambda text: _gcd_solve({"op": other}, text),
        "the product a * b": per_pair(lambda a, b: a * b),
        "the smaller number": per_pair(min),
        "the larger number": per_pair(max),
        "the first pair only": lambda text: f"{stated(*_gcd_pairs(text)[0])}\n",
    }


# rotate (function) ---------------------------------------------------------------------------------------
def _list_len(cfg: CodeTaskConfig) -> int:
    """The longest list of the list families: at least 3, since on one or two elements a left and a
    right rotation (a prefix and a pairwise statistic) are the same and no test could tell them apart."""
    return max(cfg.max_len, 3)


def _rot_input(rng, cfg, p, i):
    n = 0 if i == 1 else int(rng.integers(1, _list_len(cfg) + 1))
    return [_ints(rng, n, -cfg.max_value, cfg.max_value), int(rng.integers(0, 2 * _list_len(cfg) + 1))]


def _rot_solve(p, args):
    xs, k = args
    if not xs:
        return []
    out = list(xs)
    for _ in range(k % len(xs)):
        if p["direction"] == "right":
            out.insert(0, out.pop())
        else:
            out.append(out.pop(0))
    return out


def _rot_readings(p):
    other = "left" if p["direction"] == "right" else "right"

    def unreduced(args):  # the slicing answer without k %= len(xs): past len(xs) it returns xs unchanged
        xs, k = args
        return xs[-k:] + xs[:-k] if p["direction"] == "right" else xs[k:] + xs[:k]

    return {
        f"rotated {other}": lambda args: _rot_solve({"direction": other}, args),
        "k not reduced modulo len(xs)": unreduced,
        "rotated by k - 1": lambda args: _rot_solve(p, [args[0], args[1] - 1]),
        "rotated by k + 1": lambda args: _rot_solve(p, [args[0], args[1] + 1]),
        "the list reversed": lambda args: list(reversed(args[0])),
    }


# is_palindrome (function) --------------------------------------------------------------------------------
_PAL_CHARS = "abcAB ,!1"


def _pal_input(rng, cfg, p, i):
    n = int(rng.integers(0, cfg.max_len + 1))
    chars = [_pick(rng, _PAL_CHARS) for _ in range(n)]
    mode = rng.random()
    if mode < 3 / 4:  # a mirror image, so that True answers are common
        chars = chars + chars[::-1]
    if mode < 1 / 2:
        # A near palindrome: one letter's case flipped, or one space, punctuation mark or digit put in.
        # It is a palindrome under some readings of "reads the same" and not under others, so it tells
        # the statement's rules (case, which characters count) from the other ones.
        letters = [k for k, c in enumerate(chars) if c.isalpha()]
        if letters and rng.random() < 0.5:
            k = _pick(rng, letters)
            chars[k] = chars[k].swapcase()
        else:
            chars.insert(int(rng.integers(0, len(chars) + 1)), _pick(rng, " ,!1"))
    return ["".join(chars)]


def _pal_solve(p, args):
    s = args[0]
    kept = [c for c in s if c.isalnum()] if p["alnum_only"] else list(s)
    if p["ignore_case"]:
        kept = [c.lower() for c in kept]
    i, j = 0, len(kept) - 1
    while i < j:
        if kept[i] != kept[j]:
            return False
        i, j = i + 1, j - 1
    return True


# Which characters a palindrome check keeps: the statement's two rules and two other usual choices.
_PAL_KEEP: dict[str, Callable[[str], bool]] = {
    "every character": lambda c: True,
    "letters and digits": str.isalnum,
    "every character but spaces": lambda c: c != " ",
    "letters only": str.isalpha,
}


def _pal_readings(p):
    stated = ("letters and digits" if p["alnum_only"] else "every character", p["ignore_case"])

    def check(keep: Callable[[str], bool], fold: bool) -> Reading:
        def is_palindrome(args):
            s = "".join(c for c in args[0] if keep(c))
            s = s.lower() if fold else s
            return s == s[::-1]

        return is_palindrome

    return {
        f"{name}, {'case ignored' if fold else 'case matters'}": check(keep, fold)
        for name, keep in _PAL_KEEP.items()
        for fold in (False, True)
        if (name, fold) != stated
    }


# count_primes (function) ---------------------------------------------------------------------------------
_PRIMES_MAX_N = 10**6  # the largest n of a test: the solver sieves up to n


def _primes_input(rng, cfg, p, i):
    if i in (1, 2):  # edge cases: no prime up to 1, the first prime
        return [i]
    return [int(rng.integers(3, min(3 * cfg.max_value, _PRIMES_MAX_N) + 1))]


def _primes_solve(p, args):
    n = args[0]
    top = n if p["inclusive"] else n - 1
    if top < 2:
        return 0
    sieve = bytearray([1]) * (top + 1)
    sieve[0] = sieve[1] = 0
    for q in range(2, math.isqrt(top) + 1):
        if sieve[q]:
            sieve[q * q :: q] = bytearray(len(sieve[q * q :: q]))
    return int(sum(sieve))


def _smallest_factors(top: int) -> np.ndarray:
    """spf[q] = the smallest prime factor of q, for q in 0..top (spf[0] = 0, spf[1] = 1)."""
    spf = np.arange(max(top, 1) + 1, dtype=np.int64)
    for q in range(2, math.isqrt(top) + 1):
        if spf[q] == q:
            spf[q * q :: q] = np.minimum(spf[q * q :: q], q)
    return spf


def _primes_readings(p):
    def counted(rule: Callable[[np.ndarray, np.ndarray], np.ndarray], inclusive: bool = p["inclusive"]) -> Reading:
        """How many q in 2..top (top = n or n - 1) satisfy rule(q, spf[q])."""

        def count(args):
            top = args[0] if inclusive else args[0] - 1
            if top < 2:
                return 0
            spf = _smallest_factors(top)
            q = np.arange(2, top + 1, dtype=np.int64)
            return int(np.count_nonzero(rule(q, spf[2:])))

        return count

    def prime(q, spf):
        return spf == q

    def short_root(q, spf):
        # `all(q % d for d in range(2, int(q ** 0.5)))`: no divisor below floor(sqrt(q)), so 4, 6, 8, 9,
        # 15, 25, ... count as primes too.
        root = np.sqrt(q).astype(np.int64)
        root -= (root * root > q).astype(np.int64)  # floor(sqrt(q)) exactly, whatever the float rounding
        root += ((root + 1) * (root + 1) <= q).astype(np.int64)
        return spf >= root

    def one_too(args):
        top = args[0] if p["inclusive"] else args[0] - 1
        return counted(prime)(args) + (1 if top >= 1 else 0)

    return {
        ("strictly less than n" if p["inclusive"] else "up to n inclusive"): counted(prime, not p["inclusive"]),
        "1 counted as a prime": one_too,
        "trial division stops short of the square root": counted(short_root),
        "2 left out": counted(lambda q, spf: (spf == q) & (q != 2)),
    }


# running_stat (function) ---------------------------------------------------------------------------------
def _run_input(rng, cfg, p, i):
    n = 0 if i == 1 else int(rng.integers(1, _list_len(cfg) + 1))
    return [_ints(rng, n, -cfg.max_value, cfg.max_value)]


def _run_solve(p, args):
    out, acc = [], None
    for x in args[0]:
        if acc is None:
            acc = x
        elif p["stat"] == "max":
            acc = acc if acc >= x else x
        elif p["stat"] == "min":
            acc = acc if acc <= x else x
        else:
            acc = acc + x
        out.append(acc)
    return out


_RUN_FOLD: dict[str, Callable[[list[int]], int]] = {"max": max, "min": min, "sum": sum}


def _run_readings(p):
    fold = _RUN_FOLD[p["stat"]]

    def each(window: Callable[[list[int], int], list[int]]) -> Reading:
        """result[i] = the statistic of window(xs, i)."""
        return lambda args: [fold(window(args[0], i)) for i in range(len(args[0]))]

    readings = {
        f"running {s} instead": (lambda args, s=s: _run_solve({"stat": s}, args)) for s in _RUN_FOLD if s != p["stat"]
    }
    readings.update(
        {
            "one behind (xs[0..i-1], the first kept)": each(lambda xs, i: xs[: max(i, 1)]),
            "suffixes (xs[i..])": each(lambda xs, i: xs[i:]),
            "pairs (xs[i-1..i])": each(lambda xs, i: xs[max(i - 1, 0) : i + 1]),
        }
    )
    return readings


FAMILIES: dict[str, _Family] = {
    f.name: f
    for f in (
        _Family(
            "sum_multiples",
            "stdin",
            lambda rng: {"m": int(rng.integers(2, 6))},
            lambda p: (
                f"The first line holds an integer n (n >= 0), the second line n integers separated by spaces. "
                f"Print the sum of those integers that are divisible by {p['m']} (0 if there are none)."
            ),
            lambda p: (
                "n = int(input())\n"
                "xs = [int(t) for t in input().split()][:n]\n"
                f"print(sum(x for x in xs if x % {p['m']} == 0))\n"
            ),
            _sum_mult_input,
            _sum_mult_solve,
            _sum_mult_readings,
        ),
        _Family(
            "reverse_words",
            "stdin",
            lambda rng: {"case": _pick(rng, ("keep", "upper", "lower"))},
            lambda p: (
                "Read one line of words separated by one or more spaces. Print the words in reverse order, "
                "separated by single spaces"
                + {"keep": ".", "upper": ", converted to upper case.", "lower": ", converted to lower case."}[p["case"]]
            ),
            lambda p: f'print(" ".join(reversed(input().split())){_REV_CASE[p["case"]]})\n',
            _rev_input,
            _rev_solve,
            _rev_readings,
        ),
        _Family(
            "count_letters",
            "stdin",
            _count_params,
            lambda p: (
                "The first line holds an integer t, then t lines of text follow. For each line print, on its own "
                f"line, how many of its characters are one of the letters {', '.join(p['letters'])} "
                "(upper or lower case)."
            ),
            lambda p: (
                "t = int(input())\n"
                "for _ in range(t):\n"
                f"    print(sum(ch in {p['letters']!r} for ch in input().lower()))\n"
            ),
            _count_input,
            _count_solve,
            _count_readings,
        ),
        _Family(
            "fizzbuzz",
            "stdin",
            _fizz_params,
            lambda p: (
                f"Read an integer n. For i = 1..n print one line: '{p['wa']}{p['wb']}' if i is divisible by both "
                f"{p['a']} and {p['b']}, '{p['wa']}' if only by {p['a']}, '{p['wb']}' if only by {p['b']}, "
                "otherwise i itself."
            ),
            lambda p: (
                "n = int(input())\n"
                "for i in range(1, n + 1):\n"
                f"    s = ({p['wa']!r} if i % {p['a']} == 0 else '') + ({p['wb']!r} if i % {p['b']} == 0 else '')\n"
                "    print(s or i)\n"
            ),
            _fizz_input,
            _fizz_solve,
            _fizz_readings,
        ),
        _Family(
            "subarray_extreme",
            "stdin",
            lambda rng: {"kind": _pick(rng, ("maximum", "minimum"))},
            lambda p: (
                "The first line holds n (n >= 1), the second n integers. Print the "
                f"{p['kind']} sum of a non-empty contiguous subarray."
            ),
            lambda p: (
                "n = int(input())\n"
                "xs = [int(t) for t in input().split()][:n]\n"
                f"pick = {'max' if p['kind'] == 'maximum' else 'min'}\n"
                "best = cur = xs[0]\n"
                "for x in xs[1:]:\n"
                "    cur = pick(x, cur + x)\n"
                "    best = pick(best, cur)\n"
                "print(best)\n"
            ),
            _sub_input,
            _sub_solve,
            _sub_readings,
        ),
        _Family(
            "gcd_lcm_pairs",
            "stdin",
            lambda rng: {"op": _pick(rng, ("gcd", "lcm"))},
            lambda p: (
                "The first line holds t, then t lines with two positive integers a b. For each pair print the "
                + ("greatest common divisor" if p["op"] == "gcd" else "least common multiple")
                + " of a and b on its own line."
            ),
            lambda p: (
                "import math\n"
                "t = int(input())\n"
                "for _ in range(t):\n"
                "    a, b = map(int, input().split())\n"
                + ("    print(math.gcd(a, b))\n" if p["op"] == "gcd" else "    print(a * b // math.gcd(a, b))\n")
            ),
            _gcd_input,
            _gcd_solve,
            _gcd_readings,
        ),
        _Family(
            "rotate",
            "function",
            lambda rng: {"direction": _pick(rng, ("left", "right"))},
            lambda p: (
                f"Write a function rotate(xs, k) that returns a new list: the list xs rotated {p['direction']} by k "
                "positions (k >= 0; k may exceed len(xs); an empty list stays empty)."
            ),
            lambda p: (
                "def rotate(xs, k):\n"
                "    if not xs:\n"
                "        return []\n"
                "    k %= len(xs)\n"
                + (
                    "    return xs[len(xs) - k:] + xs[:len(xs) - k]\n"
                    if p["direction"] == "right"
                    else "    return xs[k:] + xs[:k]\n"
                )
            ),
            _rot_input,
            _rot_solve,
            _rot_readings,
            "rotate",
        ),
        _Family(
            "is_palindrome",
            "function",
            lambda rng: {"alnum_only": bool(rng.random() < 0.5), "ignore_case": bool(rng.random() < 0.5)},
            lambda p: (
                "Write a function is_palindrome(s) that returns True if the string s reads the same forwards and "
                "backwards, else False. "
                + (
                    "Only letters and digits count (ignore every other character). "
                    if p["alnum_only"]
                    else "Every character counts, spaces and punctuation included. "
                )
                + ("Upper and lower case are the same." if p["ignore_case"] else "Case matters.")
            ),
            lambda p: (
                "def is_palindrome(s):\n"
                + ("    s = ''.join(c for c in s if c.isalnum())\n" if p["alnum_only"] else "")
                + ("    s = s.lower()\n" if p["ignore_case"] else "")
                + "    return s == s[::-1]\n"
            ),
            _pal_input,
            _pal_solve,
            _pal_readings,
            "is_palindrome",
        ),
        _Family(
            "count_primes",
            "function",
            lambda rng: {"inclusive": bool(rng.random() < 0.5)},
            lambda p: (
                "Write a function count_primes(n) that returns how many prime numbers are "
                + ("less than or equal to n" if p["inclusive"] else "strictly less than n")
                + " (n >= 0)."
            ),
            lambda p: (
                "def count_primes(n):\n"
                f"    top = n{'' if p['inclusive'] else ' - 1'}\n"
                "    return sum(1 for q in range(2, top + 1) if all(q % d for d in range(2, int(q ** 0.5) + 1)))\n"
            ),
            _primes_input,
            _primes_solve,
            _primes_readings,
            "count_primes",
        ),
        _Family(
            "running_stat",
            "function",
            lambda rng: {"stat": _pick(rng, ("max", "min", "sum"))},
            lambda p: (
                f"Write a function running_{p['stat']}(xs) that returns a list whose i-th element is the "
                f"{ {'max': 'maximum', 'min': 'minimum', 'sum': 'sum'}[p['stat']] } of xs[0..i] (an empty list for "
                "an empty input)."
            ),
            lambda p: (
                "import itertools\n"
                f"def running_{p['stat']}(xs):\n"
                + (
                    "    return list(itertools.accumulate(xs))\n"
                    if p["stat"] == "sum"
                    else f"    return list(itertools.accumulate(xs, {p['stat']}))\n"
                )
            ),
            _run_input,
            _run_solve,
            _run_readings,
            "running_{stat}",
        ),
    )
}


#: One-line plans of the generated families (`plan_sentence`), from the task's parameters.
_PLANS: dict[str, Callable[[dict[str, Any]], str]] = {
    "sum_multiples": lambda p: f"Sum the numbers divisible by {p['m']}.",
    "reverse_words": lambda p: "Reverse the words" + {"keep": ".", "upper": ", then upper case.",
                                                       "lower": ", then lower case."}[p["case"]],
    "count_letters": lambda p: f"Count the letters {p['letters']} in each line.",
    "fizzbuzz": lambda p: f"{p['wa']} if i % {p['a']} == 0, {p['wb']} if i % {p['b']} == 0, else i.",
    "subarray_extreme": lambda p: f"Kadane with {'max' if p['kind'] == 'maximum' else 'min'}.",
    "gcd_lcm_pairs": lambda p: f"Print the {p['op']} of each pair.",
    "rotate": lambda p: f"Rotate {p['direction']} by k mod len(xs).",
    "is_palindrome": lambda p: ("Keep letters and digits, " if p["alnum_only"] else "Keep every character, ")
    + ("lower case, " if p["ignore_case"] else "") + "compare with the reverse.",
    "count_primes": lambda p: f"Count the primes {'<=' if p['inclusive'] else '<'} n.",
    "running_stat": lambda p: f"Accumulate the {p['stat']} over xs.",
}


def plan_sentence(task: CodeTask) -> str:
    """A one-line plan of the program that solves `task`, from its family and parameters (``Reverse the words,
    then lower case.``); ``I write the reference program.`` for a data set task."""
    plan = _PLANS.get(task.family)
    return plan(task.params) if plan is not None and task.params else "I write the reference program."


def _example_text(task_style: str, fn_name: str | None, test: CodeTest) -> str:
    if task_style == "stdin":
        return f"Example input:\n{test.input.rstrip()}\nExample output:\n{test.output.rstrip()}"
    call = f"{fn_name}({', '.join(json.dumps(a) for a in test.args)})"
    return f"Example: {call} returns {json.dumps(test.expected)}"


# ----------------------------------------------------------------------------------------------- judging
def values_equal(actual: Any, expected: Any, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Judge a function's return value against a test's expected JSON value; never raises.

    - An int expected value (not a bool) accepts an int of the same value, or a float of exactly
      that value (Python compares int and float exactly; JSON has one number type, so a data set may
      write 1 for 1.0). No tolerance: a float that rounds to a nearby integer is wrong.
    - A float expected value accepts an int or a float with `math.isclose(rel_tol, abs_tol)`; NaN
      equals only NaN; an int too large for a float (e.g. 10**400) is wrong, not an OverflowError.
    - Bools equal only bools (JSON true is not 1); lists/tuples compare element-wise, dicts key-wise;
      anything else by type and `==`.
    - Whatever the values hold (deep nesting, odd types), an exception in the comparison is a
      mismatch.
    """
    try:
        return _equal(actual, expected, rel_tol, abs_tol)
    except Exception:  # RecursionError, OverflowError, a hostile __eq__: a failed test, never a crash
        return False


def _equal(actual: Any, expected: Any, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if type(expected) is int:
        if type(actual) is int:
            return actual == expected
        return type(actual) is float and math.isfinite(actual) and actual == expected  # exact, no rounding
    if type(expected) is float:
        if type(actual) not in (int, float):
            return False
        if math.isnan(expected) or (type(actual) is float and math.isnan(actual)):
            return type(actual) is float and math.isnan(actual) and math.isnan(expected)
        if type(actual) is int:
            if abs(actual) > 2**1024:  # beyond any float: float(actual) would raise OverflowError
                return False
            actual = float(actual)
        if math.isinf(actual) or math.isinf(expected):
            return actual == expected
        return math.isclose(actual, expected, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(expected)
            and all(_equal(a, e, rel_tol, abs_tol) for a, e in zip(actual, expected))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_equal(actual[k], expected[k], rel_tol, abs_tol) for k in expected)
        )
    return type(actual) is type(expected) and bool(actual == expected)


def answer_passes(task: CodeTask, test: CodeTest, answer: Any) -> bool:
    """Whether `answer` (stdout text for stdin tasks, the return value for function tasks) passes `test`.

    stdin: `sandbox.outputs_match` (line by line, trailing whitespace and blank lines forgiven);
    function: `values_equal`. Never raises: an answer of the wrong type fails.
    """
    if task.fn_name is None:
        return isinstance(answer, str) and outputs_match(answer, test.output)
    return values_equal(answer, test.expected)


# ----------------------------------------------------------------------------------------------- stand-ins
def _test_key(task_style: str, test: CodeTest) -> str:
    """What a lookup-table program sees of a test: its stdin text up to whitespace (its tokens: one
    `input().split()` away from the same answer), or its arguments."""
    if task_style == "stdin":
        return " ".join(test.input.split())
    return json.dumps(list(test.args), sort_keys=True)


def _answer_of(task_style: str, test: CodeTest) -> Any:
    return test.output if task_style == "stdin" else test.expected


def _identity(task_style: str, test: CodeTest) -> Any:
    if task_style == "stdin":
        return test.input  # prints its input back
    return test.args[0] if test.args else None  # returns its first argument


def standin_answers(task: CodeTask) -> dict[str, Callable[[CodeTest], Any]]:
    """Programs that do not solve a task, as pure functions from a test to their answer.

    They are the project's own trusted code (they never run model text) and model the cheapest
    reward hacks:

    - "constant": one fixed answer. The constant is the first hidden test's expected answer, which
      makes the check complete: some constant passes every hidden test iff this one does (the
      generator's answers compare exactly, so equality is transitive).
    - "identity": echoes its input (stdin) or returns its first argument (function).
    - "lookup, else constant": answers a public test (the example, revealed feedback tests) from a
      table and anything else with a constant (the first unseen hidden answer: complete as above).
    - "lookup, else identity": the table, else the identity.
    """
    style = task.style
    table = {_test_key(style, t): _answer_of(style, t) for t in task.public_tests}
    unseen = [t for t in task.tests if _test_key(style, t) not in table]
    const = _answer_of(style, task.tests[0]) if task.tests else None
    fallback = _answer_of(style, unseen[0]) if unseen else const
    return {
        "constant": lambda t: const,
        "identity": lambda t: _identity(style, t),
        "lookup, else constant": lambda t: table.get(_test_key(style, t), fallback),
        "lookup, else identity": lambda t: table.get(_test_key(style, t), _identity(style, t)),
    }


def passing_standins(task: CodeTask) -> list[str]:
    """The names of the `standin_answers` that pass every hidden test of `task` (empty: the tests are
    strong enough that each stand-in fails at least one)."""
    return [
        name
        for name, answer in standin_answers(task).items()
        if all(answer_passes(task, t, answer(t)) for t in task.tests)
    ]


# ----------------------------------------------------------------------------------------------- wrong readings
_RAISED = object()  # the answer of a wrong reading that raised on a test's input: it fails that test


def wrong_readings(task: CodeTask) -> dict[str, Reading]:
    """The plausible wrong readings of a generated task's statement, by name: functions from a test's
    input (stdin text, or the argument list) to the answer a program with that reading gives (its
    family's other rule variants, the textbook version, a missing branch, an off-by-one, ...; see each
    family's `_*_readings`). Empty for a data set record, which has no family."""
    fam = FAMILIES.get(task.family)
    return fam.wrong_readings(task.params) if fam is not None else {}


def _reading_answer(task: CodeTask, test: CodeTest, reading: Reading) -> Any:
    try:
        # A copy of the arguments: the test's own lists must stay as they are whatever a reading does.
        return reading(test.input if task.fn_name is None else copy.deepcopy(list(test.args)))
    except Exception:  # e.g. xs[0] of an empty list: that reading's program would crash, a failed test
        return _RAISED


def passing_wrong_readings(task: CodeTask) -> list[str]:
    """The names of the `wrong_readings` that pass every hidden test of `task` (empty: each wrong
    reading of the statement fails at least one hidden test)."""
    return [
        name
        for name, reading in wrong_readings(task).items()
        if all(answer_passes(task, t, _reading_answer(task, t, reading)) for t in task.tests)
    ]


def _undefeated(task: CodeTask) -> list[str]:
    """The stand-ins and wrong readings that pass every hidden test of `task`; ["no hidden test"] when
    it has none (an empty test set would pay anything)."""
    if not task.tests:
        return ["no hidden test"]
    return passing_standins(task) + passing_wrong_readings(task)


# ----------------------------------------------------------------------------------------------- generation
_NO_EDGE = -1  # the test index `make_input` gets for a test that must not be a family's edge case
_DRAW_RETRIES = 20  # redraws of a test whose input a public test already has
_MAX_EXTRA_DRAWS = 500  # extra hidden tests tried before the generator gives up (never reached in tests)


def _draw_test(rng: np.random.Generator, cfg: CodeTaskConfig, fam: _Family, p: dict[str, Any], i: int) -> CodeTest:
    x = fam.make_input(rng, cfg, p, i)
    if fam.style == "stdin":
        return CodeTest(input=x, output=fam.solve(p, x))
    return CodeTest(args=tuple(x), expected=fam.solve(p, x))


def _draw_unseen(
    rng: np.random.Generator, cfg: CodeTaskConfig, fam: _Family, p: dict[str, Any], i: int, seen: set[str]
) -> CodeTest | None:
    """A test whose input (`_test_key`) is not in `seen`, from at most 1 + `_DRAW_RETRIES` draws; None
    when every draw was a repeat (a tiny config may have few distinct inputs)."""
    for _ in range(_DRAW_RETRIES + 1):
        test = _draw_test(rng, cfg, fam, p, i)
        if _test_key(fam.style, test) not in seen:
            return test
    return None


def _draw_public(rng: np.random.Generator, cfg: CodeTaskConfig, fam: _Family, p: dict[str, Any]) -> list[CodeTest]:
    """`num_public_tests` tests, none an edge case, distinct where the config has enough inputs."""
    public: list[CodeTest] = []
    for _ in range(cfg.num_public_tests):
        seen = {_test_key(fam.style, t) for t in public}
        public.append(_draw_unseen(rng, cfg, fam, p, _NO_EDGE, seen) or _draw_test(rng, cfg, fam, p, _NO_EDGE))
    return public


def _add_tests_until_defeated(task: CodeTask, draw: Callable[[], CodeTest | None]) -> CodeTask:
    """Append hidden tests from `draw` (each one that makes one more stand-in or wrong reading fail)
    until each of them fails at least one hidden test.

    Raises:
        RuntimeError: some still pass after `_MAX_EXTRA_DRAWS` draws.
    """
    passing = _undefeated(task)
    draws = 0
    while passing:
        if draws >= _MAX_EXTRA_DRAWS:
            raise RuntimeError(
                f"{task.family} {task.params}: {passing} pass every hidden test after {draws} extra draws "
                "(the public tests may use up the inputs this config can draw)"
            )
        draws += 1
        test = draw()
        if test is None:
            continue
        candidate = dataclasses.replace(task, tests=task.tests + (test,))
        now = _undefeated(candidate)
        if len(now) < len(passing):  # adding a test only removes passers: now is a subset of passing
            task, passing = candidate, now
    return task


def generate_task(rng: np.random.Generator, config: CodeTaskConfig | None = None) -> CodeTask:
    """Draw one task from `rng` (same generator state -> same task).

    Public tests first (`num_public_tests`, distinct where possible; the first is the statement's
    example; none is an edge case), then `num_tests` hidden tests: test 1 (and 2) is an edge case where
    the family has one (empty list, n = 0, n = 1, n reaching lcm(a, b)). A hidden test never repeats a
    public input (`_test_key`): a repeat is redrawn up to `_DRAW_RETRIES` times, then left out, so a
    test the agent may see is never paid. Then, while a stand-in (`standin_answers`) or a wrong reading
    of the statement (`wrong_readings`) passes every hidden test, further hidden tests are drawn and
    the first one that makes one more of them fail is appended.

    Raises:
        RuntimeError: no test set that defeats every stand-in and wrong reading after
            `_MAX_EXTRA_DRAWS` extra draws (a config whose public tests use up its inputs).
    """
    cfg = config or CodeTaskConfig()
    names = cfg.candidates()
    fam = FAMILIES[names[int(rng.integers(len(names)))]]
    p = fam.params(rng)
    fn_name = fam.fn_name.format(**p) if fam.fn_name else None
    public = _draw_public(rng, cfg, fam, p)
    seen = {_test_key(fam.style, t) for t in public}
    drawn = (_draw_unseen(rng, cfg, fam, p, i, seen) for i in range(cfg.num_tests))
    hidden = tuple(t for t in drawn if t is not None)
    problem = fam.problem(p).strip() + "\n" + _example_text(fam.style, fn_name, public[0])
    task = CodeTask(problem, hidden, fn_name, fam.reference(p), fam.name, p, tuple(public))
    return _add_tests_until_defeated(task, lambda: _draw_unseen(rng, cfg, fam, p, _NO_EDGE, seen))


# ----------------------------------------------------------------------------------------------- loading
_JSON_VALUE = (str, int, float, bool, list, dict)
#: The longest `problem` plus `fn_name` a record may have: the observation shows the statement and then the
#: submission style line naming the function; this leaves room for that line and a submission's result.
MAX_PROBLEM_CHARS = MAX_OBSERVATION_CHARS - 512


def _fn_name_problem(name: str) -> str | None:
    """Why no program can define a function called `name`, or None. A keyword (`class`, `def`) cannot be
    defined, and Python stores a name in NFKC form (`ﬁnd`, with the ligature, is defined as `find`), so the
    sandbox, looking `name` up as written, would find no function in any program."""
    if not name.isidentifier():
        return "must be a Python identifier"
    if keyword.iskeyword(name):
        return "is a Python keyword, so no program can define a function of that name"
    if unicodedata.normalize("NFKC", name) != name:
        return (f"is not in NFKC form: Python defines it as {unicodedata.normalize('NFKC', name)!r}, so no program "
                "defines a function of this exact name")
    return None

_BASE_SCHEMA = {
    "problem": Field(str, check=lambda v: None if v.strip() else "must not be empty"),
    "tests": Field(
        list,
        item_type=dict,
        schema={"input": Field((str, list)), "output": Field(_JSON_VALUE, nullable=True)},
        check=lambda v: None if v else "must hold at least one test",
    ),
    "public_tests": Field(
        list,
        required=False,
        item_type=dict,
        schema={"input": Field((str, list)), "output": Field(_JSON_VALUE, nullable=True)},
    ),
    "fn_name": Field(str, required=False, nullable=True, check=_fn_name_problem),
    "solutions": Field(list, required=False, item_type=str),
}
_STDIN_TEST = {"input": str, "output": str}


def _function_args(raw: Any, where: str, fld: str) -> tuple[Any, ...]:
    if isinstance(raw, list):
        return tuple(raw)
    args = []
    for k, line in enumerate(raw.split("\n")):
        if not line.strip():
            continue
        try:
            args.append(strict_json.loads(line))
        except strict_json.JSONValueError as exc:
            raise ValueError(
                f"{where}: field {fld!r}: line {k + 1} of the argument text is not JSON ({exc.msg})"
            ) from None
    return tuple(args)


def _unseen_tests(tests: list[CodeTest], public: list[CodeTest], style: str) -> tuple[CodeTest, ...]:
    """The tests whose input no public test has: a test repair feedback may show is not paid."""
    shown = {_test_key(style, t) for t in public}
    return tuple(t for t in tests if _test_key(style, t) not in shown)


def load_tasks(path: str | Path) -> list[CodeTask]:
    """Load a TACO/DeepCoder-style data set (`.jsonl` / `.json`, schema in the module docstring).

    A hidden test whose input repeats a public test's (`_test_key`) is left out: repair feedback may
    show it, so it is never paid.

    Raises:
        ValueError: missing/unreadable file, bad JSON, empty file, a missing field or a wrong type, or a
            record whose every test repeats a public test (the message names the file, the line and
            the field).
    """
    path = Path(path)
    numbered = load_numbered_records(path, _BASE_SCHEMA)
    tasks = []
    for idx, (lineno, rec) in enumerate(numbered):
        where = f"{path}:{lineno}"
        fn_name = rec.get("fn_name")
        size = len(rec["problem"].strip()) + len(fn_name or "")
        if size > MAX_PROBLEM_CHARS:
            raise ValueError(
                f"{where}: field 'problem': is {size} characters with the function name; an observation shows at "
                f"most {MAX_PROBLEM_CHARS}, so the statement or the submission style after it would be shown cut"
            )
        groups: dict[str, list[CodeTest]] = {"tests": [], "public_tests": []}
        for key, tests in groups.items():
            for j, t in enumerate(rec.get(key) or []):
                if fn_name is None:
                    validate_record(t, _STDIN_TEST, where, f"{key}[{j}]")
                    tests.append(CodeTest(input=t["input"], output=t["output"]))
                else:
                    args = _function_args(t["input"], where, f"{key}[{j}].input")
                    tests.append(CodeTest(args=args, expected=t["output"]))
        hidden = _unseen_tests(groups["tests"], groups["public_tests"], "stdin" if fn_name is None else "function")
        if not hidden:
            raise ValueError(f"{where}: field 'tests': every test repeats a public test (a visible test is never paid)")
        solutions = rec.get("solutions") or []
        tasks.append(
            CodeTask(
                problem=rec["problem"].strip(),
                tests=hidden,
                fn_name=fn_name,
                reference=solutions[0] if solutions else None,
                family="dataset",
                params={"record": idx},
                public_tests=tuple(groups["public_tests"]),
            )
        )
    return tasks
