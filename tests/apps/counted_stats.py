"""Reference statistics by plain counting and summing, for the tests of the study's analysis (ragen reproduce).

Imported by the test modules of this folder (pytest puts it on ``sys.path``); not a test module itself.
"""

from __future__ import annotations

import math


def ranks_by_counting(xs):
    """Average ranks (1-based): rank = #smaller + (#equal + 1) / 2."""
    return [sum(y < x for y in xs) + (sum(y == x for y in xs) + 1) / 2 for x in xs]


def pearson_loop(xs, ys):
    """Pearson's correlation from its definition."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return num / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))
