"""Programming tasks with hidden tests: a procedural generator and a loader for public formats.

A `CodeTask` is a problem statement plus hidden tests, in one of two styles:

- stdin/stdout (TACO / DeepCoder / Codeforces): each test is `(input, output)` text; the program
  reads the input on stdin and must print the output (compared with `sandbox.outputs_match`).
- function (LeetCode / DeepCoder "functional"): `fn_name` plus tests `(args, expected)`; the
  program defines the function (or a `class Solution` method) and the sandbox calls it with the
  JSON arguments (compared with `sandbox.values_match`).

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
`max_value` (magnitude of numbers), `families` (subset), `style` ("stdin" | "function" | "mixed").

Public and hidden tests are separate (`CodeTask.public_tests`, `CodeTask.tests`): the agent may see a
public test (the example in the statement, a failing test in repair feedback), never a hidden one, and
reward and success come from the hidden tests only. A generated task's hidden tests are checked at
generation against stand-in programs that do not solve the task (`passing_standins`): a constant
answer (any constant), the identity (echo the input / return the first argument), and a lookup table
of the public tests falling back to a constant or to the identity. Each stand-in must fail at least one
hidden test; while one passes them all, the generator draws further hidden tests (so a task can hold
more than `num_tests`; over seeds 0..199 per family this is rare, see tests/envs/test_reward_integrity_code.py).

Data sets (`load_tasks(path)`, `.jsonl` or `.json`, validated by `ragen_envs.data.load_records`):

    {"problem": str, "tests": [{"input": str, "output": str}, ...], "solutions": [str, ...]?}     stdin style
    {"problem": str, "fn_name": str, "tests": [{"input": [args...] | str, "output": value}, ...]}  function style

For function tests a string `input` holds one JSON value per line, one per argument (the
LiveCodeBench / DeepCoder "functional" layout). `solutions` (optional) gives reference programs; the
first becomes the oracle answer. `public_tests` (optional, same layout as `tests`; LiveCodeBench's
public test cases) are the tests repair feedback may show; `tests` stay hidden and judge. A record
without `public_tests` gets repair feedback without test contents (verdict counts only). A missing
field or a wrong type raises ValueError naming the file, the line (for .jsonl; the record number for
.json) and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragen_envs.code.sandbox import outputs_match
from ragen_envs.data import strict_json
from ragen_envs.data.loading import Field, load_numbered_records, validate_record
from ragen_envs.validation import require_int

__all__ = [
    "FAMILIES",
    "CodeTask",
    "CodeTaskConfig",
    "CodeTest",
    "generate_task",
    "load_tasks",
    "passing_standins",
    "standin_answers",
    "answer_passes",
    "values_equal",
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
    feedback reveals failing ones) and never count toward reward.
    """

    problem: str
    tests: tuple[CodeTest, ...]
    fn_name: str | None = None
    reference: str | None = None
    family: str = "dataset"
    params: dict[str, Any] = field(default_factory=dict)
    public_tests: tuple[CodeTest, ...] = ()

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
            fams = tuple(self.families)
            unknown = [f for f in fams if f not in FAMILIES]
            if unknown or not fams:
                raise ValueError(f"families must be a non-empty subset of {sorted(FAMILIES)}, got {self.families!r}")
            object.__setattr__(self, "families", fams)
        if not self.candidates():
            raise ValueError(f"no family of style {self.style!r} among {self.families}")

    def candidates(self) -> list[str]:
        names = list(self.families) if self.families is not None else list(FAMILIES)
        if self.style != "mixed":
            names = [n for n in names if FAMILIES[n].style == self.style]
        return names


# ----------------------------------------------------------------------------------------------- families
@dataclass(frozen=True)
class _Family:
    name: str
    style: str
    params: Callable[[np.random.Generator], dict[str, Any]]
    problem: Callable[[dict[str, Any]], str]
    reference: Callable[[dict[str, Any]], str]
    make_input: Callable[[np.random.Generator, CodeTaskConfig, dict[str, Any], int], Any]
    solve: Callable[[dict[str, Any], Any], Any]
    fn_name: str | None = None


def _ints(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[int]:
    return [int(v) for v in rng.integers(lo, hi + 1, size=n)]


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


_WORDS = (
    "apple river stone cloud maple tiger ocean lemon piano rocket silver garden window yellow quartz "
    "violin bridge candle desert forest harbor island jungle kettle ladder meadow"
).split()


# sum_multiples -------------------------------------------------------------------------------------------
def _sum_mult_input(rng, cfg, p, i):
    n = 0 if i == 1 else int(rng.integers(1, cfg.max_len + 1))
    xs = _ints(rng, n, -cfg.max_value, cfg.max_value)
    return f"{n}\n{' '.join(map(str, xs))}\n"


def _sum_mult_solve(p, text):
    lines = text.split("\n")
    total = 0
    for tok in lines[1].split():
        if int(tok) % p["m"] == 0:
            total += int(tok)
    return f"{total}\n"


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
        ws = [_pick(rng, _WORDS) for _ in range(n)]
        ws = [w.upper() if rng.random() < 0.25 else w for w in ws]
        lines.append(" ".join(ws))
    return f"{t}\n" + "\n".join(lines) + "\n"


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


# fizzbuzz ------------------------------------------------------------------------------------------------
def _fizz_params(rng):
    a, b = (int(v) for v in rng.choice(np.arange(2, 8), size=2, replace=False))
    wa, wb = (str(w) for w in rng.choice(["Fizz", "Buzz", "Bang", "Pop", "Zap", "Whiz"], size=2, replace=False))
    return {"a": a, "b": b, "wa": wa, "wb": wb}


def _fizz_input(rng, cfg, p, i):
    return f"{int(rng.integers(1, max(2, 3 * cfg.max_len) + 1))}\n"


def _fizz_solve(p, text):
    n = int(text)
    out = []
    for i in range(1, n + 1):
        s = (p["wa"] if i % p["a"] == 0 else "") + (p["wb"] if i % p["b"] == 0 else "")
        out.append(s or str(i))
    return "\n".join(out) + "\n"


# subarray_extreme ----------------------------------------------------------------------------------------
def _sub_input(rng, cfg, p, i):
    n = 1 if i == 1 else int(rng.integers(1, cfg.max_len + 1))
    return f"{n}\n{' '.join(map(str, _ints(rng, n, -cfg.max_value, cfg.max_value)))}\n"


def _sub_solve(p, text):
    xs = [int(t) for t in text.split("\n")[1].split()]
    sign = 1 if p["kind"] == "maximum" else -1
    best = cur = sign * xs[0]
    for x in xs[1:]:  # Kadane on sign * x
        cur = max(sign * x, cur + sign * x)
        best = max(best, cur)
    return f"{sign * best}\n"


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


# rotate (function) ---------------------------------------------------------------------------------------
def _rot_input(rng, cfg, p, i):
    n = 0 if i == 1 else int(rng.integers(1, cfg.max_len + 1))
    return [_ints(rng, n, -cfg.max_value, cfg.max_value), int(rng.integers(0, 2 * cfg.max_len + 1))]


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


# is_palindrome (function) --------------------------------------------------------------------------------
def _pal_input(rng, cfg, p, i):
    n = int(rng.integers(0, cfg.max_len + 1))
    chars = [_pick(rng, "abcAB ,!1") for _ in range(n)]
    if rng.random() < 0.5:  # mirror half of the time so that True answers are common
        chars = chars + chars[::-1]
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


# count_primes (function) ---------------------------------------------------------------------------------
def _primes_input(rng, cfg, p, i):
    if i in (1, 2):  # edge cases: no prime up to 1, the first prime
        return [i]
    return [int(rng.integers(3, 3 * cfg.max_value + 1))]


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


# running_stat (function) ---------------------------------------------------------------------------------
def _run_input(rng, cfg, p, i):
    n = 0 if i == 1 else int(rng.integers(1, cfg.max_len + 1))
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
            "running_{stat}",
        ),
    )
}


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
    """What a lookup-table program sees of a test: its exact stdin text, or its arguments."""
    if task_style == "stdin":
        return test.input
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
    const = _answer_of(style, task.tests[0])
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


# ----------------------------------------------------------------------------------------------- generation
_NO_EDGE = -1  # the test index `make_input` gets for a test that must not be a family's edge case
_DRAW_RETRIES = 20  # redraws of a test whose input a public test already has
_MAX_EXTRA_DRAWS = 500  # extra hidden tests tried before the generator gives up (never reached in tests)


def generate_task(rng: np.random.Generator, config: CodeTaskConfig | None = None) -> CodeTask:
    """Draw one task from `rng` (same generator state -> same task).

    Public tests first (`num_public_tests`, distinct; the first is the statement's example; none is
    an edge case), then `num_tests` hidden tests: test 1 (and 2) is an edge case where the family has
    one (empty list, n = 0, n = 1), and a hidden input equal to a public one is redrawn (up to
    `_DRAW_RETRIES` times: tiny configs may not have enough distinct inputs). Then, while a stand-in
    (`standin_answers`) passes every hidden test, further hidden tests are drawn and the first one
    that makes one more stand-in fail is appended.

    Raises:
        RuntimeError: no stand-in-proof test set after `_MAX_EXTRA_DRAWS` extra draws.
    """
    cfg = config or CodeTaskConfig()
    names = cfg.candidates()
    fam = FAMILIES[names[int(rng.integers(len(names)))]]
    p = fam.params(rng)
    fn_name = fam.fn_name.format(**p) if fam.fn_name else None

    def draw(i: int, avoid: set[str]) -> CodeTest:
        for _ in range(_DRAW_RETRIES + 1):
            x = fam.make_input(rng, cfg, p, i)
            test = CodeTest(input=x, output=fam.solve(p, x)) if fam.style == "stdin" else CodeTest(
                args=tuple(x), expected=fam.solve(p, x)
            )
            if _test_key(fam.style, test) not in avoid:
                break
        return test

    public: list[CodeTest] = []
    for _ in range(cfg.num_public_tests):
        public.append(draw(_NO_EDGE, {_test_key(fam.style, t) for t in public}))
    seen = {_test_key(fam.style, t) for t in public}
    hidden = [draw(i, seen) for i in range(cfg.num_tests)]
    problem = fam.problem(p).strip() + "\n" + _example_text(fam.style, fn_name, public[0])
    task = CodeTask(problem, tuple(hidden), fn_name, fam.reference(p), fam.name, p, tuple(public))
    passing = passing_standins(task)
    draws = 0
    while passing:
        if draws >= _MAX_EXTRA_DRAWS:
            raise RuntimeError(f"{fam.name} {p}: stand-ins {passing} pass every hidden test after {draws} extra draws")
        draws += 1
        candidate = dataclasses.replace(task, tests=task.tests + (draw(_NO_EDGE, seen),))
        now = passing_standins(candidate)
        if len(now) < len(passing):
            task, passing = candidate, now
    return task


# ----------------------------------------------------------------------------------------------- loading
_JSON_VALUE = (str, int, float, bool, list, dict)

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
    "fn_name": Field(
        str, required=False, nullable=True, check=lambda v: None if v.isidentifier() else "must be a Python identifier"
    ),
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


def load_tasks(path: str | Path) -> list[CodeTask]:
    """Load a TACO/DeepCoder-style data set (`.jsonl` / `.json`, schema in the module docstring).

    Raises:
        ValueError: missing/unreadable file, bad JSON, empty file, a missing field or a wrong type
            (the message names the file, the line and the field).
    """
    path = Path(path)
    numbered = load_numbered_records(path, _BASE_SCHEMA)
    tasks = []
    for idx, (lineno, rec) in enumerate(numbered):
        where = f"{path}:{lineno}"
        fn_name = rec.get("fn_name")
        groups: dict[str, list[CodeTest]] = {"tests": [], "public_tests": []}
        for key, tests in groups.items():
            for j, t in enumerate(rec.get(key) or []):
                if fn_name is None:
                    validate_record(t, _STDIN_TEST, where, f"{key}[{j}]")
                    tests.append(CodeTest(input=t["input"], output=t["output"]))
                else:
                    args = _function_args(t["input"], where, f"{key}[{j}].input")
                    tests.append(CodeTest(args=args, expected=t["output"]))
        solutions = rec.get("solutions") or []
        tasks.append(
            CodeTask(
                problem=rec["problem"].strip(),
                tests=tuple(groups["tests"]),
                fn_name=fn_name,
                reference=solutions[0] if solutions else None,
                family="dataset",
                params={"record": idx},
                public_tests=tuple(groups["public_tests"]),
            )
        )
    return tasks
