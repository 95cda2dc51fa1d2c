"""The one verdict rule of `ragen reproduce`: a paired comparison read off its intervals, as numbers and an enum.

Every experiment judges a difference with :func:`compare` (or :func:`paired`, which pairs two arms by seed):

- the paired mean difference ``d_bar`` of n differences, their SD ``s`` (ddof 1), the decision interval
  ``d_bar +- t_{(1 + level)/2, n-1} s / sqrt(n)`` (``level`` 0.95) and the equivalence interval
  ``d_bar +- t_{1 - alpha, n-1} s / sqrt(n)`` (two one-sided tests at ``alpha`` 0.05: the 90% interval), and the
  effect detectable at the rule's power (:func:`ragen_core.math.stats.min_detectable_effect`);
- the verdict, in this order: :attr:`Verdict.HELD` when the decision interval excludes 0 on the side of the
  rule's direction, :attr:`Verdict.CONTRADICTED` when it excludes 0 on the other side,
  :attr:`Verdict.EQUIVALENT` when a bound B is given and the equivalence interval lies inside ``(-B, +B)``,
  else :attr:`Verdict.INCONCLUSIVE` (also with one difference: no interval); :attr:`Verdict.NOT_TESTED` without
  any difference. :attr:`Verdict.NOT_TESTABLE` is set by a caller's own rule (a metric at its ceiling).

A direction-free reading of the same logic (the mechanism experiment's falls / rises / stable / unclear, the
paired "lower / higher / equal") is the same verdict under its own labels (:data:`CHANGE_LABELS`,
:data:`DIRECTION_LABELS`). The verdict is stored as its string value and every number as a number
(:meth:`Comparison.as_dict`); the report words it (:func:`verdict_text`). Missing values are handled one way
everywhere: :func:`mean_of` skips None and non-finite values, and :func:`compare` / :func:`paired` leave such a
difference out with its seed.

The study's findings 1 and 2 are judged by their own rules (:mod:`ragen_core.apps.reproduce.analysis`) and store
their verdicts the same way: the bare word of a :class:`Verdict` under ``"verdict"``, why under ``"reason"`` (a
fixed code, None where the word needs no reason) and the reason's numbers as numbers in sibling fields; the report
words the reason from those fields. Results files written before that kept the reason inside the verdict string
(``"inconclusive (signature on 3 of 5; ...)"``); :func:`verdict_word` reads either form as the bare word.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from typing import Any

from ragen_core.math.stats import min_detectable_effect, t_quantile

__all__ = ["Verdict", "PairedRule", "ChangeRule", "ShareRule", "Comparison", "compare", "paired", "mean_of", "mde",
           "verdict_text", "verdict_word", "CHANGE_LABELS", "DIRECTION_LABELS", "pct", "unpaired", "unpaired_text"]


class Verdict(str, Enum):
    """A verdict; its value is what results.json stores.

    A paired comparison (:func:`compare`) gives HELD, CONTRADICTED, EQUIVALENT, INCONCLUSIVE or NOT_TESTED; a
    caller's ceiling rule NOT_TESTABLE. The study's other rules map onto the same members where they mean the same:

    - finding 1, a positive control (:func:`ragen_core.apps.reproduce.analysis.finding_collapse`): PASSED (the
      detector finds the built-in collapse on enough seeds), FAILED (on most seeds the MI drop comes only with an
      entropy alarm at or before it), INCONCLUSIVE (neither), NOT_TESTED (no no-filter run with probe
      measurements). A control passes or fails; it does not hold a claim of the paper, hence its own two members.
    - finding 2, a pair of correlations (:func:`ragen_core.apps.reproduce.analysis.finding_correlations`): HELD /
      CONTRADICTED (the bootstrap interval of ``|rho_MI| - |rho_H|`` above / below 0), INCONCLUSIVE (no interval,
      a metric constant/tied, or the interval contains 0), NOT_TESTABLE (the MI at its ceiling), NOT_TESTED (a
      metric not measured).
    """

    HELD = "held"
    CONTRADICTED = "contradicted"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    NOT_TESTED = "not tested"
    NOT_TESTABLE = "not testable"
    PASSED = "passed"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PairedRule:
    """How a paired difference is judged (module docstring): the decision interval's `level`, each one-sided
    test's `equivalence_alpha` (the equivalence interval has level ``1 - 2 alpha``), the `power` at which the
    detectable effect is reported (two-sided at ``1 - level``), the paper's `direction` (+1: the first arm
    higher) and the equivalence `bounds` per outcome (none: no equivalence verdict)."""

    level: float = 0.95
    equivalence_alpha: float = 0.05
    power: float = 0.8
    direction: int = 1
    bounds: Mapping[str, float] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # A rule out of range would not fail loudly later: direction 0 turns every "held" into "contradicted",
        # equivalence_alpha >= 0.5 inverts the equivalence interval (a looser test that still reads "equivalent").
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"PairedRule level must be in (0, 1); got {self.level!r}")
        if not 0.0 < self.equivalence_alpha < 0.5:
            raise ValueError("PairedRule equivalence_alpha must be in (0, 0.5) (the equivalence interval has level "
                             f"1 - 2 alpha); got {self.equivalence_alpha!r}")
        if not 0.0 < self.power < 1.0:  # (and above 1 - level for a detectable effect: min_detectable_effect says so)
            raise ValueError(f"PairedRule power must be in (0, 1); got {self.power!r}")
        if isinstance(self.direction, bool) or not isinstance(self.direction, (int, float)) or not (
                math.isfinite(self.direction) and self.direction != 0):
            raise ValueError(f"PairedRule direction must be +1 or -1 (its sign is the paper's); got {self.direction!r}")
        for name, b in self.bounds.items():
            _check_bound(b, f"PairedRule bounds[{name!r}]")

    @property
    def alpha(self) -> float:
        """The two-sided level of the test the decision interval makes."""
        return round(1.0 - self.level, 12)

    @property
    def equivalence_level(self) -> float:
        return 1.0 - 2.0 * self.equivalence_alpha


@dataclass(frozen=True)
class ChangeRule:
    """A direction-free reading of :class:`PairedRule` with one bound: a mean change (or a paired difference) is
    *falls* / *rises* (the decision interval below / above 0), *stable* (the equivalence interval inside
    +-`bound`) or *unclear*; the labels of :data:`CHANGE_LABELS`."""

    bound: float
    paired: PairedRule = PairedRule()

    def __post_init__(self) -> None:
        _check_bound(self.bound, "ChangeRule bound")


def _check_bound(bound: Any, what: str = "bound") -> None:
    """An equivalence bound is a finite number > 0: with 0, a negative or a NaN bound no interval fits inside
    (+-B) and "equivalent" could never be read; with an infinite one every interval would."""
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"{what} must be a finite number > 0 (or None: no equivalence verdict); got {bound!r}")


@dataclass(frozen=True)
class ShareRule:
    """A criterion met on enough seeds: at least `share` of them, with at least `min_seeds` seeds."""

    share: float
    min_seeds: int = 1

    def needed(self, n: int) -> int:
        """Seeds of `n` that must meet the criterion."""
        return math.ceil(self.share * n - 1e-9)

    def met(self, hits: int, n: int) -> bool:
        return n >= max(self.min_seeds, 1) and hits >= self.needed(n)


#: The mechanism experiment's classes of a mean change, from the verdict of ``change - 0`` (direction +1).
CHANGE_LABELS = {Verdict.HELD: "rises", Verdict.CONTRADICTED: "falls", Verdict.EQUIVALENT: "stable",
                 Verdict.INCONCLUSIVE: "unclear", Verdict.NOT_TESTED: "unclear"}
#: A paired difference read the same way: the first arm higher / lower / equal (within the bound) / unclear.
DIRECTION_LABELS = {Verdict.HELD: "higher", Verdict.CONTRADICTED: "lower",
                    Verdict.EQUIVALENT: "equal (within the bound)", Verdict.INCONCLUSIVE: "unclear",
                    Verdict.NOT_TESTED: "unclear"}


def verdict_word(v: Any) -> str:
    """The bare verdict word of `v`, whichever form it has: a :class:`Verdict`, its stored value (``"inconclusive"``),
    an older results file's string with its reason inline (``"inconclusive (signature on 3 of 5)"``,
    ``"equivalent (within +-0.150)"``: the words before the reason), or a dict holding either under ``"verdict"``.
    Two verdicts of either form are the same verdict when their words are equal."""
    if isinstance(v, Mapping):
        v = v.get("verdict")
    if v is None:
        return ""
    if isinstance(v, Verdict):
        return v.value
    return str(v).split(" (", 1)[0].strip()


def pct(x: float) -> str:
    """A share or a level as a percentage, e.g. 0.95 -> "95%"."""
    return f"{100 * x:.0f}%" if abs(100 * x - round(100 * x)) < 1e-9 else f"{100 * x:g}%"


def mean_of(values: Iterable[Any]) -> float | None:
    """The mean of the finite numbers of `values`, None and non-finite values skipped (a missing measurement is
    left out, never counted as 0); None when none is left."""
    xs = [float(v) for v in values
          if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return sum(xs) / len(xs) if xs else None


@cache
def _mde_unit(n: int, alpha: float, power: float) -> float:
    """The detectable effect for a paired SD of 1 (it scales linearly with the SD)."""
    return min_detectable_effect(1.0, n, alpha=alpha, power=power)


def mde(sd: float | None, n: int, power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest paired mean difference the two-sided paired t-test at `alpha` detects with probability
    `power`: ``sd * MDE(1, n)`` (:func:`ragen_core.math.stats.min_detectable_effect`); None when n < 2 or the SD is
    unknown or 0."""
    if sd is None or n < 2 or not math.isfinite(sd) or sd <= 0:
        return None
    return sd * _mde_unit(n, alpha, power)


@cache
def _t(p: float, df: int) -> float:
    return t_quantile(p, df)


@dataclass(frozen=True)
class Comparison:
    """The numbers of one paired comparison and its verdict (module docstring)."""

    n: int
    seeds: list[Any]
    diffs: list[float]
    mean: float | None
    ci95: list[float | None]
    ci90: list[float | None]
    sd: float | None
    mde: float | None
    bound: float | None
    verdict: Verdict
    direction: int = 1

    def as_dict(self) -> dict[str, Any]:
        """The comparison as results.json keeps it: numbers as numbers, the verdict as its string value."""
        return {"n": self.n, "seeds": list(self.seeds), "diffs": list(self.diffs), "mean": self.mean,
                "ci95": list(self.ci95), "ci90": list(self.ci90), "sd": self.sd, "mde": self.mde,
                "bound": self.bound, "verdict": self.verdict.value}


def compare(diffs: Iterable[float], rule: PairedRule = PairedRule(), bound: float | None = None,
            seeds: Iterable[Any] | None = None) -> Comparison:
    """Judge the paired differences `diffs` by `rule` (equivalence within +-`bound` when it is given). A NaN or
    infinite difference is a missing measurement: left out with its seed, as :func:`mean_of` does."""
    if bound is not None:
        _check_bound(bound)
    ds = [float(d) for d in diffs]
    keys = list(seeds) if seeds is not None else list(range(len(ds)))
    if len(keys) != len(ds):
        raise ValueError(f"seeds must name one seed per difference; got {len(keys)} seeds for {len(ds)} differences")
    kept = [(k, d) for k, d in zip(keys, ds) if math.isfinite(d)]
    keys, ds = [k for k, _ in kept], [d for _, d in kept]
    n = len(ds)
    if not ds:
        return Comparison(0, keys, ds, None, [None, None], [None, None], None, None, bound, Verdict.NOT_TESTED,
                          rule.direction)
    m = sum(ds) / n
    if n < 2:
        return Comparison(n, keys, ds, m, [None, None], [None, None], None, None, bound, Verdict.INCONCLUSIVE,
                          rule.direction)
    sd = math.sqrt(sum((d - m) ** 2 for d in ds) / (n - 1))
    if sd <= 1e-12 * max(abs(d) for d in ds):  # every seed the same difference (rounding aside): a point interval
        sd = 0.0  # (relative to the differences' own scale: a spread of 1e-13 among differences of 1e-13 is real)
    half = _t(0.5 + rule.level / 2.0, n - 1) * sd / math.sqrt(n)
    half_eq = _t(1.0 - rule.equivalence_alpha, n - 1) * sd / math.sqrt(n)
    lo, hi = m - half, m + half
    above, below = lo > 0, hi < 0  # the interval excludes 0 on one side
    if (above and rule.direction > 0) or (below and rule.direction < 0):
        verdict = Verdict.HELD
    elif above or below:
        verdict = Verdict.CONTRADICTED
    elif bound is not None and -bound < m - half_eq and m + half_eq < bound:
        verdict = Verdict.EQUIVALENT
    else:
        verdict = Verdict.INCONCLUSIVE
    return Comparison(n, keys, ds, m, [lo, hi], [m - half_eq, m + half_eq], sd,
                      mde(sd, n, rule.power, rule.alpha), bound, verdict, rule.direction)


def paired(a: Mapping[Any, float | None], b: Mapping[Any, float | None], rule: PairedRule = PairedRule(),
           bound: float | None = None) -> Comparison:
    """``a - b`` paired by key (seed), over the keys where both have a value (None and non-finite values are
    missing, as in :func:`mean_of`), judged by :func:`compare`."""
    common = sorted(s for s in set(a) & set(b) if _known(a[s]) and _known(b[s]))
    return compare([float(a[s]) - float(b[s]) for s in common], rule, bound, common)  # type: ignore[arg-type]


def unpaired(arms: Mapping[str, Iterable[Any]]) -> dict[str, list[Any]]:
    """The seeds of each arm of a paired comparison (arm -> its seeds with a run) that another of its arms lacks:
    arm -> those seeds, sorted; arms with none left out ({} when every seed has a run in every arm). A paired
    comparison uses only the seeds all its arms share; these are the ones it cannot use, which a report names
    (:func:`unpaired_text`) instead of dropping them unsaid."""
    sets = {arm: set(seeds) for arm, seeds in arms.items()}
    common = set.intersection(*sets.values()) if sets else set()
    return {arm: sorted(s - common) for arm, s in sets.items() if s - common}


def unpaired_text(lone: Mapping[str, Sequence[Any]]) -> str:
    """The report's wording of :func:`unpaired`, e.g. "`top_p` seed 22 has no partner run (not paired)"; "" for
    none."""
    if not lone:
        return ""
    parts = [f"`{arm}` seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
             for arm, seeds in lone.items()]
    n = sum(len(seeds) for seeds in lone.values())
    return f"{' and '.join(parts)} {'has' if n == 1 else 'have'} no partner run (not paired)"


def _known(v: Any) -> bool:
    """A measured value: one that reads as a finite number (None, NaN and infinities are missing)."""
    return v is not None and math.isfinite(float(v))


def verdict_text(c: Mapping[str, Any], fmt: Callable[[float], str] = "{:.3f}".format) -> str:
    """The report's wording of a comparison dict (:meth:`Comparison.as_dict`): the verdict, and for equivalent /
    inconclusive / not tested why, numbers formatted by `fmt`. A verdict of an older results.json that already
    carries its reason is returned as it is."""
    v = str(c.get("verdict", ""))
    if "(" in v:
        return v
    if v == Verdict.EQUIVALENT.value:
        return f"equivalent (within +-{fmt(c['bound'])})"
    if v == Verdict.INCONCLUSIVE.value:
        if (c.get("n") or 0) < 2:
            return "inconclusive (1 seed: no interval)"
        what = fmt(c["mde"]) if c.get("mde") is not None else "n/a: no spread between seeds"
        return f"inconclusive (detectable effect {what})"
    if v == Verdict.NOT_TESTED.value:
        return "not tested (no seed has a value for both arms)"
    if v == Verdict.NOT_TESTABLE.value and c.get("ceiling"):
        parts = [f"{x['n_at_ceiling']} of {x['n']} {side}" for x, side in zip(c["ceiling"], ("top", "bottom"))]
        return f"not testable (at the ceiling: above {c['ceiling'][0]['norm']} on {' and '.join(parts)} runs)"
    return v
