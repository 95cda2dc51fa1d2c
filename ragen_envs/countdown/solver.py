"""Exhaustive Countdown solver: is `target` reachable from `nums` using every number exactly once?

Rules: binary `+ - * /` over exact rationals (intermediate fractions allowed, division by zero not),
every number used exactly once, parentheses free.

Algorithm (target-directed search over subsets, complete):

- `values(S)`: every value reachable from the sub-multiset S, with one expression for each. For |S| = 1
  it is the number itself; otherwise the union, over the unordered splits S = A + B, of
  `a + b, a * b, a - b, b - a, a / b, b / a` for a in values(A), b in values(B). Memoised by the sorted
  multiset, so equal numbers share work.
- `solve(S, t)`: for |S| <= `DIRECT_LIMIT` look t up in values(S). Otherwise every expression over S has
  a root operation joining two parts; for each unordered split take A = the smaller part (exactly
  enumerated) and B = the other, and for every a in values(A) derive the value b that B must reach
  for each operation (t = a + b -> b = t - a; t = a - b -> b = a - t; t = b - a -> b = t + a;
  t = a * b -> b = t / a; t = a / b -> b = a / t; t = b / a -> b = t * a), then `solve(B, b)`.
  Both orders of every operation are covered, so the search is complete; memoised on (multiset, t).

Cost: for 6 numbers an unsolvable target costs about 10^5 rational operations (well under a second);
solvable targets usually return much earlier. Tests check the solver against an independent
brute force (pairwise reduction of the list) on small instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from itertools import combinations

#: Multisets up to this size are solved by looking the target up in their full value table.
DIRECT_LIMIT = 3
#: The solver accepts at most this many numbers (the value tables grow exponentially).
MAX_NUMBERS = 7
#: Work units of one pair of part values combined into a value table: six rational operations, six hashed
#: inserts and their expressions, measured at about 4 times one call of the target-directed search (the unit).
#: Counting a pair as 1 let draws of 3 and 4 numbers, whose time is mostly their tables, run 2-4 times longer
#: than their work said.
PAIR_WORK = 4

Key = tuple[Fraction, ...]


def _splits(key: Key):
    """Unordered splits of a sorted multiset into two non-empty sorted parts (smaller part first)."""
    n = len(key)
    seen: set[tuple[Key, Key]] = set()
    for size in range(1, n // 2 + 1):
        for idx in combinations(range(n), size):
            a = tuple(key[i] for i in idx)
            rest = tuple(key[i] for i in range(n) if i not in idx)
            pair = (a, rest) if size < n - size else tuple(sorted((a, rest)))  # type: ignore[assignment]
            if pair in seen:
                continue
            seen.add(pair)
            yield pair


class CountdownSolver:
    """One solver instance per set of numbers; memo tables live on the instance.

    Args:
        nums: the numbers (integers or Fractions), 1 to MAX_NUMBERS of them.
    """

    def __init__(self, nums: Sequence[int | Fraction]):
        if not 1 <= len(nums) <= MAX_NUMBERS:
            raise ValueError(f"the solver takes 1 to {MAX_NUMBERS} numbers, got {len(nums)}")
        self.key: Key = tuple(sorted(Fraction(n) for n in nums))
        self._values: dict[Key, dict[Fraction, str]] = {}
        self._solved: dict[tuple[Key, Fraction], str | None] = {}
        #: Work done so far, a deterministic measure of time (about 10 us a unit): PAIR_WORK units per pair of part
        #: values combined into a value table and one per call of the target-directed search
        #: (`CountdownConfig.max_work` budgets it).
        self.work = 0

    def values(self, key: Key | None = None) -> dict[Fraction, str]:
        """All values reachable from `key` (default: all numbers) -> one expression (fully parenthesised)."""
        key = self.key if key is None else key
        cached = self._values.get(key)
        if cached is not None:
            return cached
        if len(key) == 1:
            table = {key[0]: _literal(key[0])}
        else:
            table: dict[Fraction, str] = {}
            for a_key, b_key in _splits(key):
                a_vals, b_vals = self.values(a_key), self.values(b_key)
                self.work += PAIR_WORK * len(a_vals) * len(b_vals)
                for a, ea in a_vals.items():
                    for b, eb in b_vals.items():
                        table.setdefault(a + b, f"({ea} + {eb})")
                        table.setdefault(a * b, f"({ea} * {eb})")
                        table.setdefault(a - b, f"({ea} - {eb})")
                        table.setdefault(b - a, f"({eb} - {ea})")
                        if b != 0:
                            table.setdefault(a / b, f"({ea} / {eb})")
                        if a != 0:
                            table.setdefault(b / a, f"({eb} / {ea})")
        self._values[key] = table
        return table

    def solve(self, target: int | Fraction) -> str | None:
        """An expression using every number exactly once whose value is `target`, or None if none exists."""
        expr = self._solve(self.key, Fraction(target))
        return None if expr is None else _strip_outer(expr)

    def _solve(self, key: Key, t: Fraction) -> str | None:
        self.work += 1
        if len(key) <= DIRECT_LIMIT:
            return self.values(key).get(t)
        memo_key = (key, t)
        if memo_key in self._solved:
            return self._solved[memo_key]
        self._solved[memo_key] = None  # provisional; the recursion only visits smaller multisets
        result = None
        for a_key, b_key in _splits(key):
            for a, ea in self.values(a_key).items():
                # (b needed, how to write t from a and B's expression)
                needs = [(t - a, "({a} + {b})"), (a - t, "({a} - {b})"), (t + a, "({b} - {a})")]
                if a != 0:
                    needs += [(t / a, "({a} * {b})"), (t * a, "({b} / {a})")]
                    if t != 0:
                        needs.append((a / t, "({a} / {b})"))
                for b, template in needs:
                    if "/ {b}" in template and b == 0:
                        continue
                    eb = self._solve(b_key, b)
                    if eb is not None:
                        result = template.format(a=ea, b=eb)
                        break
                if result is not None:
                    break
            if result is not None:
                break
        self._solved[memo_key] = result
        return result


def _literal(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"({x.numerator} / {x.denominator})"


def _strip_outer(expr: str) -> str:
    """Remove one pair of parentheses enclosing the whole expression."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(expr) - 1:
            return expr
    return expr[1:-1]


def solve(nums: Sequence[int], target: int | Fraction) -> str | None:
    """An expression reaching `target` with every number of `nums` exactly once, or None (none exists)."""
    return CountdownSolver(nums).solve(target)


def is_solvable(nums: Sequence[int], target: int | Fraction) -> bool:
    """Whether `target` is reachable (see `solve`)."""
    return solve(nums, target) is not None
