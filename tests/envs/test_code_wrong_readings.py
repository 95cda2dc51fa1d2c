"""Generated code tasks pin their statement: no plausible wrong reading of it passes every hidden test.

A red team found that hidden tests did not tell a statement from its usual misreadings (seeds 0..149
of each family): the textbook palindrome check (letters and digits, lower-cased) solved 73 of 121
`is_palindrome` tasks whose rules it breaks, `s == s[::-1]` 67 of 96, FizzBuzz without a "both" branch
61 of 150 (n never reached lcm(a, b)), `print(min(xs))` 7 of 150 `subarray_extreme` tasks, summing
positive multiples 8 of 150 `sum_multiples` tasks, a case-sensitive letter count 1 of 150. Now 0 each.

The wrong programs here are written independently of the generator's own list of wrong readings
(`ragen_envs.code.tasks.wrong_readings`): Python source as a model would write it, formatted with the
task's parameters and run in-process against the hidden tests (they are this file's own trusted
programs, not model text). Each must fail at least one hidden test of every task where it is wrong,
over 60 seeds of every family in three configs; the reference program must pass every test of the
same tasks.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import sys
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.code import FAMILIES, CodeTaskConfig, answer_passes, generate_task
from ragen_envs.code.tasks import CodeTask, CodeTest, _reading_answer, passing_wrong_readings, wrong_readings

SEEDS = range(60)
CONFIGS = {
    "default": {},
    "tiny": {"max_len": 2, "max_value": 5},  # few distinct inputs: the hardest case for the generator
    "one test": {"num_tests": 1},  # every distinguishing test has to be added by the generator
}
_FAILED = object()  # what a program that raised answers


# ----------------------------------------------------------------------------------------------- running programs
@cache
def _compiled(source: str):
    return compile(source, "<wrong reading>", "exec")


def _run(task: CodeTask, source: str, test: CodeTest):
    """The answer of `source` on `test`, run in this process: its stdout for a stdin task, the return
    value of `task.fn_name` for a function task; `_FAILED` if it raised."""
    try:
        if task.fn_name is None:
            out = io.StringIO()
            stdin, sys.stdin = sys.stdin, io.StringIO(test.input)
            try:
                with contextlib.redirect_stdout(out):
                    exec(_compiled(source), {"__name__": "__main__"})
            finally:
                sys.stdin = stdin
            return out.getvalue()
        namespace: dict = {"__name__": "reading"}
        exec(_compiled(source), namespace)
        return namespace[task.fn_name](*copy.deepcopy(list(test.args)))
    except Exception:
        return _FAILED


def _passes_all(task: CodeTask, source: str, tests) -> bool:
    return all(answer_passes(task, t, _run(task, source, t)) for t in tests)


# ----------------------------------------------------------------------------------------------- wrong programs
# Each returns {name: program source} for a task's parameters, leaving out a program that is right for
# those parameters (e.g. the textbook palindrome check when the statement is the textbook rule).
_READ_INTS = "n = int(input())\nxs = [int(t) for t in input().split()][:n]\n"


def _sum_multiples(p):
    m = p["m"]
    out = {
        "positives only": f"print(sum(x for x in xs if x > 0 and x % {m} == 0))",
        "a count": f"print(len([x for x in xs if x % {m} == 0]))",
        "abs": f"print(sum(abs(x) for x in xs if x % {m} == 0))",
        "m + 1": f"print(sum(x for x in xs if x % {m + 1} == 0))",
        "m - 1": f"print(sum(x for x in xs if x % {m - 1} == 0))",
        "last one dropped": f"print(sum(x for x in xs[:n - 1] if x % {m} == 0))",
        "first one dropped": f"print(sum(x for x in xs[1:] if x % {m} == 0))",
        "non-multiples": f"print(sum(x for x in xs if x % {m}))",
        "3 or 5 (Project Euler)": "print(sum(x for x in xs if x % 3 == 0 or x % 5 == 0))",
    }
    return {k: _READ_INTS + v for k, v in out.items()}


def _reverse_words(p):
    case = {"keep": "", "upper": ".upper()", "lower": ".lower()"}
    out = {
        f"case {c}": f"print(' '.join(input().split()[::-1]){suffix})" for c, suffix in case.items() if c != p["case"]
    }
    conv = case[p["case"]]
    out.update(
        {
            "characters reversed": f"print(input().strip()[::-1]{conv})",
            "letters of each word reversed": f"print(' '.join(w[::-1] for w in input().split()){conv})",
            "split(' ')": f"print(' '.join(reversed(input().split(' '))){conv})",
            "order kept": f"print(' '.join(input().split()){conv})",
            "case swapped": "print(' '.join(input().split()[::-1]).swapcase())",
        }
    )
    return out


def _count_letters(p):
    letters = p["letters"]
    head = "t = int(input())\nfor _ in range(t):\n    line = input()\n"
    out = {
        "case-sensitive": f"    print(sum(ch in {letters!r} for ch in line))",
        "upper case only": f"    print(sum(ch in {letters.upper()!r} for ch in line))",
        "words holding a letter": f"    print(sum(any(ch in {letters!r} for ch in w.lower()) for w in line.split()))",
        "every letter": "    print(len(line.replace(' ', '')))",
        "distinct": f"    print(len(set(line.lower()) & set({letters!r})))",
    }
    if letters != "aeiou":
        out["vowels"] = "    print(sum(ch in 'aeiou' for ch in line.lower()))"
    out = {k: head + v for k, v in out.items()}
    out["first line only"] = f"input()\nprint(sum(ch in {letters!r} for ch in input().lower()))"
    return out


def _fizzbuzz(p):
    a, b, wa, wb = p["a"], p["b"], p["wa"], p["wb"]
    loop = "n = int(input())\nfor i in range(1, n + 1):\n"
    out = {
        "if/elif, no both": (
            f"    if i % {a} == 0:\n        print({wa!r})\n    elif i % {b} == 0:\n        print({wb!r})\n"
            "    else:\n        print(i)"
        ),
        "both means a*b": (
            f"    if i % {a * b} == 0:\n        print({wa + wb!r})\n    elif i % {a} == 0:\n        print({wa!r})\n"
            f"    elif i % {b} == 0:\n        print({wb!r})\n    else:\n        print(i)"
        ),
        "words the other way round": f"    print((({wb!r} if i % {b} == 0 else '') + ({wa!r} if i % {a} == 0 else ''))"
        " or i)",
        "divisors swapped": f"    print((({wa!r} if i % {b} == 0 else '') + ({wb!r} if i % {a} == 0 else '')) or i)",
        "textbook 3/5": "    print((('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')) or i)",
    }
    if math.lcm(a, b) == a * b:
        del out["both means a*b"]  # the same rule when a and b are coprime
    if (a, b, wa, wb) == (3, 5, "Fizz", "Buzz"):
        del out["textbook 3/5"]
    out = {k: loop + v for k, v in out.items()}
    stated = f"(({wa!r} if i % {a} == 0 else '') + ({wb!r} if i % {b} == 0 else '')) or i"
    out["range(n)"] = f"n = int(input())\nfor i in range(n):\n    print({stated})"
    out["range(1, n)"] = f"n = int(input())\nfor i in range(1, n):\n    print({stated})"
    return out


def _subarray_extreme(p):
    pick, other = ("max", "min") if p["kind"] == "maximum" else ("min", "max")
    kadane = "best = cur = xs[0]\nfor x in xs[1:]:\n    cur = {f}(x, cur + x)\n    best = {f}(best, cur)\nprint(best)"
    out = {
        "single element": f"print({pick}(xs))",
        "whole sum": "print(sum(xs))",
        "other extreme": kadane.format(f=other),
        "empty allowed": (
            f"best = cur = 0\nfor x in xs:\n    cur = {pick}(0, cur + x)\n    best = {pick}(best, cur)\nprint(best)"
        ),
        "prefix sums only": f"import itertools\nprint({pick}(itertools.accumulate(xs)))",
        "last one dropped": "xs = xs[:-1]\n" + kadane.format(f=pick),
    }
    return {k: _READ_INTS + v for k, v in out.items()}


def _gcd_lcm_pairs(p):
    stated = "math.gcd(a, b)" if p["op"] == "gcd" else "a * b // math.gcd(a, b)"
    other = "a * b // math.gcd(a, b)" if p["op"] == "gcd" else "math.gcd(a, b)"
    loop = "import math\nt = int(input())\nfor _ in range(t):\n    a, b = map(int, input().split())\n"
    out = {name: loop + f"    print({expr})" for name, expr in
           (("other op", other), ("product", "a * b"), ("min", "min(a, b)"), ("max", "max(a, b)"))}
    out["first pair only"] = f"import math\ninput()\na, b = map(int, input().split())\nprint({stated})"
    return out


def _rotate(p):
    left, right = "xs[k:] + xs[:k]", "xs[-k:] + xs[:-k]"
    stated, other = (right, left) if p["direction"] == "right" else (left, right)
    guard = "def rotate(xs, k):\n    if not xs:\n        return []\n"
    return {
        "other direction": guard + f"    k %= len(xs)\n    return {other}",
        "no modulo": guard + f"    return {stated}",
        "k - 1": guard + f"    k = (k - 1) % len(xs)\n    return {stated}",
        "reversed": "def rotate(xs, k):\n    return xs[::-1]",
        "deque": (  # deque.rotate(k) turns right; rotate(-k) left: here the direction is swapped
            "import collections\ndef rotate(xs, k):\n    d = collections.deque(xs)\n"
            f"    d.rotate({'-k' if p['direction'] == 'right' else 'k'})\n    return list(d)"
        ),
    }


def _is_palindrome(p):
    head = "def is_palindrome(s):\n"
    out = {
        "textbook": "    s = ''.join(c.lower() for c in s if c.isalnum())\n    return s == s[::-1]",
        "one-liner": "    return s == s[::-1]",
        "lower only": "    s = s.lower()\n    return s == s[::-1]",
        "alnum, case kept": "    s = ''.join(filter(str.isalnum, s))\n    return s == s[::-1]",
        "spaces removed": "    s = s.replace(' ', '')\n    return s == s[::-1]",
        "spaces removed, lower": "    s = s.replace(' ', '').lower()\n    return s == s[::-1]",
        "letters only, lower": "    s = ''.join(c for c in s if c.isalpha()).lower()\n    return s == s[::-1]",
    }
    stated = {
        (True, True): "textbook",
        (False, False): "one-liner",
        (False, True): "lower only",
        (True, False): "alnum, case kept",
    }[(p["alnum_only"], p["ignore_case"])]
    del out[stated]
    return {k: head + v for k, v in out.items()}


def _count_primes(p):
    top = "n + 1" if p["inclusive"] else "n"
    other = "n" if p["inclusive"] else "n + 1"
    body = "def count_primes(n):\n    return sum(1 for q in range({lo}, {top}) if all(q % d for d in range(2, {root})))"
    return {
        "other bound": body.format(lo=2, top=other, root="int(q ** 0.5) + 1"),
        "short root": body.format(lo=2, top=top, root="int(q ** 0.5)"),
        "1 is prime": body.format(lo=1, top=top, root="int(q ** 0.5) + 1"),
        "odd only": body.format(lo=3, top=top, root="int(q ** 0.5) + 1"),
    }


def _running_stat(p):
    fn = {"max": "max", "min": "min", "sum": "lambda a, b: a + b"}
    name = f"running_{p['stat']}"
    out = {
        f"running {s}": f"import itertools\ndef {name}(xs):\n    return list(itertools.accumulate(xs, {f}))"
        for s, f in fn.items() if s != p["stat"]
    }
    stat = {"max": "max", "min": "min", "sum": "sum"}[p["stat"]]
    out["one behind"] = (
        f"def {name}(xs):\n    return [{stat}(xs[:max(i, 1)]) for i in range(len(xs))]"
    )
    out["suffix"] = f"def {name}(xs):\n    return [{stat}(xs[i:]) for i in range(len(xs))]"
    out["pairs"] = f"def {name}(xs):\n    return [{stat}(xs[max(i - 1, 0):i + 1]) for i in range(len(xs))]"
    return out


WRONG_PROGRAMS = {
    "sum_multiples": _sum_multiples,
    "reverse_words": _reverse_words,
    "count_letters": _count_letters,
    "fizzbuzz": _fizzbuzz,
    "subarray_extreme": _subarray_extreme,
    "gcd_lcm_pairs": _gcd_lcm_pairs,
    "rotate": _rotate,
    "is_palindrome": _is_palindrome,
    "count_primes": _count_primes,
    "running_stat": _running_stat,
}


def _wrong_programs_passing(task: CodeTask) -> list[str]:
    programs = WRONG_PROGRAMS[task.family](task.params)
    return [name for name, src in programs.items() if _passes_all(task, src, task.tests)]


# ----------------------------------------------------------------------------------------------- the checks
def test_every_family_has_wrong_programs_here():
    assert sorted(WRONG_PROGRAMS) == sorted(FAMILIES)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_wrong_reading_passes_every_hidden_test(family, config):
    """60 seeds per family and config: every independent wrong program and every wrong reading the
    generator lists fails at least one hidden test, and the reference passes every test."""
    cfg = CodeTaskConfig(families=(family,), **CONFIGS[config])
    for seed in SEEDS:
        task = generate_task(np.random.default_rng(seed), cfg)
        assert not _wrong_programs_passing(task), (family, config, seed, task.params)
        assert not passing_wrong_readings(task), (family, config, seed, task.params)
        assert _passes_all(task, task.reference, task.tests + task.public_tests), (family, config, seed)


@settings(max_examples=150, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 2**32 - 1), num_tests=st.integers(1, 8))
def test_no_wrong_reading_passes_any_drawn_task(family, seed, num_tests):
    task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=(family,), num_tests=num_tests))
    assert not _wrong_programs_passing(task), task.params
    assert _passes_all(task, task.reference, task.tests + task.public_tests)


def _answers_most_tests(task: CodeTask, answer) -> bool:
    """Whether `answer(test)` gives an answer of the expected kind (stdout text; the expected value's
    type), without raising, for at least half of the tests of `task`."""
    tests = task.tests + task.public_tests
    kinds = [str if task.fn_name is None else type(t.expected) for t in tests]
    return 2 * sum(type(answer(t)) is kind for t, kind in zip(tests, kinds)) >= len(tests)


def test_the_wrong_programs_are_real_programs():
    """Each wrong program (and each wrong reading the generator lists) answers most tests of some task
    of its family without raising: "fails a hidden test" above is not won by a program that crashes."""
    for family in FAMILIES:
        programs: dict[str, bool] = {}
        readings: dict[str, bool] = {}
        for seed in SEEDS:
            task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=(family,)))
            for name, src in WRONG_PROGRAMS[family](task.params).items():
                runs = _answers_most_tests(task, lambda t, s=src, task=task: _run(task, s, t))
                programs[name] = programs.get(name, False) or runs
            for name, fn in wrong_readings(task).items():
                runs = _answers_most_tests(task, lambda t, f=fn, task=task: _reading_answer(task, t, f))
                readings[name] = readings.get(name, False) or runs
        assert all(programs.values()), (family, [k for k, v in programs.items() if not v])
        assert all(readings.values()) and len(readings) >= 5, (family, [k for k, v in readings.items() if not v])


def _task(family: str, params: dict, inputs: list) -> CodeTask:
    """A task of `family` with hand-picked hidden inputs (expected answers from the family's solver)."""
    fam = FAMILIES[family]
    if fam.style == "stdin":
        tests = tuple(CodeTest(input=x, output=fam.solve(params, x)) for x in inputs)
        return CodeTask("p", tests, None, None, family, params)
    tests = tuple(CodeTest(args=tuple(x), expected=fam.solve(params, x)) for x in inputs)
    return CodeTask("p", tests, fam.fn_name.format(**params), None, family, params)


def test_the_old_weak_test_sets_are_caught():
    """Test sets like the ones the red team found are flagged by the generator's check (so it is what
    makes the generated sets strong): FizzBuzz 6/5 with n below 30, a palindrome task with only mirror
    images and random strings, the maximum subarray on lists of one number."""
    fizz = {"a": 6, "b": 5, "wa": "Fizz", "wb": "Buzz"}
    passing = passing_wrong_readings(_task("fizzbuzz", fizz, [f"{n}\n" for n in (3, 7, 12, 20, 24, 29)]))
    assert "no both branch (6 tested first)" in passing and "both words in the other order" in passing
    assert not passing_wrong_readings(_task("fizzbuzz", fizz, [f"{n}\n" for n in (3, 30)]))
    strict = {"alnum_only": False, "ignore_case": False}
    weak = _task("is_palindrome", strict, [["abba"], ["a,b"], ["AbcbA"], ["ab!1"]])
    assert "letters and digits, case ignored" in passing_wrong_readings(weak)  # the textbook check
    assert "letters and digits, case ignored" not in passing_wrong_readings(
        _task("is_palindrome", strict, [["abba"], ["a,b"], ["Aa"]])
    )
    one = _task("subarray_extreme", {"kind": "minimum"}, ["1\n4\n", "1\n-3\n"])
    assert "the minimum single number" in passing_wrong_readings(one)


# ----------------------------------------------------------------------------------------------- shown tests unpaid
def _tokens(test: CodeTest, style: str) -> str:
    return " ".join(test.input.split()) if style == "stdin" else repr(test.args)


@pytest.mark.parametrize("config", sorted(CONFIGS) + ["many public"])
def test_no_hidden_test_repeats_the_example_or_another_public_test(config):
    kwargs = CONFIGS.get(config, {"max_len": 2, "max_value": 5, "num_public_tests": 6})
    for family in FAMILIES:
        for seed in SEEDS:
            task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=(family,), **kwargs))
            shown = {_tokens(t, task.style) for t in task.public_tests}
            assert not [t for t in task.tests if _tokens(t, task.style) in shown], (family, config, seed)
            # The example in the statement is the first public test.
            example = task.public_tests[0]
            assert (example.output.rstrip() if task.style == "stdin" else str(example.expected)).lower() in (
                task.problem.lower()
            )


def test_an_example_memoriser_earns_what_its_fallback_earns():
    """sum_multiples, 15 seeds: a program that answers the statement's example from memory and prints 0
    otherwise earns exactly what `print(0)` earns (the example is not a paid test) and never succeeds."""
    for seed in range(15):
        task = generate_task(np.random.default_rng(seed), CodeTaskConfig(families=("sum_multiples",)))
        example = task.public_tests[0]
        memoriser = (
            "import sys\n"
            f"print({example.output!r} if sys.stdin.read().split() == {example.input!r}.split() else 0)"
        )
        paid = [answer_passes(task, t, _run(task, memoriser, t)) for t in task.tests]
        fallback = [answer_passes(task, t, "0\n") for t in task.tests]
        assert paid == fallback and not all(paid), seed


def test_a_task_refuses_a_hidden_test_that_is_public():
    shown = CodeTest(input="3\n1 2 3\n", output="2\n")
    with pytest.raises(ValueError, match="repeat a public test"):
        CodeTask("p", (CodeTest(input="3\n1  2 3", output="2\n"),), public_tests=(shown,))
    CodeTask("p", (CodeTest(input="3\n1 2 4\n", output="6\n"),), public_tests=(shown,))
