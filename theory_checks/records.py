"""The record every check returns (:class:`Check`) and the acceptance rules that build it.

Every check compares two numbers computed independently and returns :class:`Check` records.  Kinds:

- ``bound``: a true inequality ``lhs <= rhs``; holds when ``lhs <= rhs (1 + RTOL) + atol``;
  ``ratio = (lhs - atol) / rhs`` (the largest ratio seen says how close the bound gets; removing the
  rounding allowance keeps ratio <= 1 + RTOL exactly when the check holds, so a bound met at the 1e-12
  floor never shows a ratio above 1); instances with rhs <= atol get no ratio.
  ``tight=True`` marks an instance of an equality family: it must also reach ``|ratio - 1| <= TIGHT_TOL``.
- ``strict``: a true strict inequality ``lhs < rhs``; holds when ``ratio < 1 - RTOL``.
- ``identity``: ``lhs == rhs``; holds when ``|lhs - rhs| <= rtol max(|lhs|, |rhs|) + atol`` (``rtol`` = RTOL
  unless given); ``ratio`` is the relative error ``|lhs - rhs| / max(|lhs|, |rhs|, atol / rtol)`` (``atol`` in
  place of ``atol / rtol`` when rtol = 0).
- ``counterexample``: a claim ``lhs <= rhs`` that is false in general; the check holds
  (the counterexample is reproduced) when ``lhs > rhs (1 + CE_MARGIN)``.
- ``search``: the best ratio of an adversarial or random search (:func:`search_record`, never a failure).

The Monte Carlo (:mod:`theory_checks.montecarlo`) and symbolic (:mod:`theory_checks.symbolic`) checks build
their own ``mc-validation``, ``bound``, ``counterexample`` and ``symbolic`` records.

The absolute tolerances ``atol`` only absorb float64 rounding around exact zeros (scaled by the
magnitudes involved, about 1e-12 of them, :mod:`theory_checks.magnitudes`); they are documented where they
are set.

Arguments (``ValueError``/``TypeError`` naming the argument otherwise): lhs and rhs are real numbers or arrays
with the same number of elements (or one of them a single number), not empty, never NaN (+-inf allowed: an
infinite bound); ``atol`` finite and >= 0; ``rtol`` in [0, 1) (an rtol of 1 accepts any two numbers of one sign,
e.g. 1 == 1000); a ``strict`` rhs positive.  The same holds for every variant's numbers.

Every constructor also evaluates deliberately wrong variants of its statement on the same numbers
(``Check.mutants``, see :mod:`theory_checks.mutants`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from . import catalog
from .inputs import require_array, require_bool, require_real

__all__ = ["Check", "RTOL", "TIGHT_TOL", "CE_MARGIN", "Variants", "bound", "strict", "identity", "counterexample",
           "search_record"]

RTOL = 1e-9
TIGHT_TOL = 1e-9
CE_MARGIN = 1e-6


@dataclass(frozen=True)
class Check:
    """One compared pair of numbers (see the module docstring for the kinds).

    ``id`` names the check (its row): a key of :data:`~theory_checks.catalog.CATALOG`, or for a search of
    :data:`~theory_checks.catalog.SEARCHES`; any other id raises ``ValueError``.  Every record of one check
    (random instances, equality instances marked ``tight``) carries the same id, and :attr:`name` is the label
    the catalog gives it, for display only.

    ``mutants`` holds ``(label, holds)`` for every deliberately wrong variant of the statement that was
    evaluated on the same numbers by the same acceptance rule (:mod:`theory_checks.mutants`): a mutant is
    *caught* when ``holds`` is False.  ``detect`` is a per-record power figure (Monte Carlo: the smallest
    relative error of the exact value that this record would have flagged).
    """

    id: str
    lhs: float
    rhs: float
    holds: bool
    ratio: float
    kind: str = "bound"
    tight: bool = False
    method: str = "exact"
    note: str = ""
    mutants: tuple[tuple[str, bool], ...] = ()
    detect: float = math.nan

    def __post_init__(self) -> None:
        known = self.id in (catalog.SEARCHES if self.kind == "search" else catalog.CATALOG)
        if not known:
            where = "SEARCHES" if self.kind == "search" else "CATALOG"
            raise ValueError(f"check id {self.id!r} ({self.kind}) is not in theory_checks.catalog.{where}")

    @property
    def name(self) -> str:
        """The check's label (display text), from the catalog."""
        return catalog.label(self.id)


Variants = Mapping[str, tuple["float | np.ndarray", "float | np.ndarray"]]


def _flat(a: float | np.ndarray, name: str = "value") -> np.ndarray:
    """`a` as a flat float64 array: real, not empty, no NaN (``ValueError``/``TypeError`` naming `name`)."""
    return np.atleast_1d(require_array(name, a, allow_inf=True)).ravel()


def _bound_eval(lhs_a: np.ndarray, rhs_a: np.ndarray, atol_a: np.ndarray, tight: bool) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise acceptance of ``lhs <= rhs`` and the reported ratio (see the module docstring)."""
    with np.errstate(invalid="ignore"):
        ok = lhs_a <= rhs_a * (1.0 + RTOL) + atol_a
    # ratio after the rounding allowance (raw lhs/rhs for an equality family): holds <=> ratio <= 1 + RTOL
    num = lhs_a if tight else np.where(lhs_a > 0, np.maximum(lhs_a - atol_a, 0.0), lhs_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(rhs_a > atol_a, num / np.where(rhs_a > 0, rhs_a, 1.0), np.nan)
    ratio = np.where(~ok & np.isnan(ratio), np.inf, ratio)
    if tight:
        ok = ok & (np.abs(ratio - 1.0) <= TIGHT_TOL)
    return ok, ratio


def _pair(lhs: float | np.ndarray, rhs: float | np.ndarray, what: str = "") -> tuple[np.ndarray, np.ndarray]:
    """lhs and rhs flattened and broadcast to one length (`what` says whose numbers they are, for errors)."""
    a, b = _flat(lhs, "lhs" + what), _flat(rhs, "rhs" + what)
    if a.size != b.size and 1 not in (a.size, b.size):
        raise ValueError(f"lhs and rhs{what} must have the same number of elements (or one of them 1), "
                         f"got {a.size} and {b.size}")
    a, b = np.broadcast_arrays(a, b)
    return a, b


def _atol(atol: float | np.ndarray, n: int) -> np.ndarray:
    """The absolute tolerance: finite, >= 0, one number or one per element (n of them)."""
    a = np.atleast_1d(require_array("atol", atol, nonneg=True)).ravel()
    if a.size not in (1, n):
        raise ValueError(f"atol must be one number or one per element ({n}), got {a.size}")
    return a


#: an elementwise acceptance rule: (lhs, rhs, atol), arrays of one shape -> (accepted, ratio)
_Rule = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
#: the fixed mutants of a rule, from the record's (lhs, rhs, atol): [(label, (lhs', rhs'))]
_Fixed = Callable[[np.ndarray, np.ndarray, np.ndarray], list[tuple[str, tuple[np.ndarray, np.ndarray]]]]


def _record(check_id: str, kind: str, rule: _Rule, lhs: float | np.ndarray, rhs: float | np.ndarray,
            atol: float | np.ndarray, worst: Callable[[np.ndarray], int], fixed: _Fixed, tight: bool, method: str,
            note: str, variants: Variants | None) -> Check:
    """The record of ``rule`` applied to lhs and rhs elementwise (broadcast, flattened).

    It holds when every element is accepted and keeps the first rejected element, else the element ``worst``
    picks from the ratios.  Its mutants are the ``fixed`` ones (e.g. ``rhs x0.5``) and then the ``variants``,
    each judged by the same rule with the same atol.
    """
    lhs_a, rhs_a = _pair(lhs, rhs)
    atol_f = _atol(atol, lhs_a.size)
    atol_a = np.broadcast_to(atol_f, lhs_a.shape)
    ok, ratio = rule(lhs_a, rhs_a, atol_a)
    i = int(np.flatnonzero(~ok)[0]) if not ok.all() else worst(ratio)

    def holds(label: str, lv: float | np.ndarray, rv: float | np.ndarray) -> bool:
        la, ra = _pair(lv, rv, f" of variant {label!r}")
        if atol_f.size not in (1, la.size):
            raise ValueError(f"variant {label!r} must have as many elements as the record ({atol_f.size}), "
                             f"got {la.size}")
        return bool(rule(la, ra, np.broadcast_to(atol_f, la.shape))[0].all())

    cases = fixed(lhs_a, rhs_a, atol_a) + list((variants or {}).items())
    muts = tuple((label, holds(label, lv, rv)) for label, (lv, rv) in cases)
    return Check(check_id, float(lhs_a[i]), float(rhs_a[i]), bool(ok.all()), float(ratio[i]), kind, tight, method,
                 note, muts)


def bound(
    check_id: str,
    lhs: float | np.ndarray,
    rhs: float | np.ndarray,
    atol: float | np.ndarray = 0.0,
    tight: bool = False,
    method: str = "exact",
    note: str = "",
    variants: Variants | None = None,
) -> Check:
    """lhs <= rhs (elementwise over arrays); the record keeps the worst element.

    Mutants (same rule, same numbers): ``rhs x0.5``, ``rhs x0.9``, ``reversed`` (rhs <= lhs), ``rhs x2``
    on an equality instance (``tight``), and every ``variants`` entry ``label -> (lhs', rhs')`` (a wrong
    formula evaluated on the same instance, e.g. with a factor dropped).
    """

    tight = require_bool("tight", tight)

    def rule(la: np.ndarray, ra: np.ndarray, aa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _bound_eval(la, ra, aa, tight)

    def worst(ratio: np.ndarray) -> int:
        if np.all(np.isnan(ratio)):
            return 0
        return int(np.nanargmax(np.abs(ratio - 1.0)) if tight else np.nanargmax(ratio))

    def fixed(la: np.ndarray, ra: np.ndarray, aa: np.ndarray) -> list[tuple[str, tuple[np.ndarray, np.ndarray]]]:
        out = [("rhs x0.5", (la, 0.5 * ra)), ("rhs x0.9", (la, 0.9 * ra)), ("reversed", (ra, la))]
        return out + [("rhs x2", (la, 2.0 * ra))] if tight else out

    return _record(check_id, "bound", rule, lhs, rhs, atol, worst, fixed, tight, method, note, variants)


def _strict_eval(lhs_a: np.ndarray, rhs_a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(rhs_a > 0, lhs_a / np.where(rhs_a > 0, rhs_a, 1.0), np.inf)
    return ratio < 1.0 - RTOL, ratio


def strict(check_id: str, lhs: float | np.ndarray, rhs: float | np.ndarray, method: str = "exact", note: str = "",
           variants: Variants | None = None) -> Check:
    """lhs < rhs strictly (ratio < 1 - RTOL); rhs must be positive (``ValueError`` otherwise: the ratio lhs / rhs
    decides).  Mutants: ``rhs x0.5``, ``reversed``."""
    r = _flat(rhs, "rhs")
    if np.any(r <= 0):
        raise ValueError(f"rhs of a strict inequality must be positive, got {float(r[np.argmax(r <= 0)])!r}")
    return _record(check_id, "strict", lambda la, ra, _: _strict_eval(la, ra), lhs, rhs, 0.0,
                   lambda ratio: int(np.argmax(ratio)),
                   lambda la, ra, _: [("rhs x0.5", (la, 0.5 * ra)), ("reversed", (ra, la))],
                   False, method, note, variants)


def _identity_eval(
    lhs_a: np.ndarray, rhs_a: np.ndarray, atol_a: np.ndarray, rtol: float
) -> tuple[np.ndarray, np.ndarray]:
    diff = np.abs(lhs_a - rhs_a)
    scale = np.maximum(np.abs(lhs_a), np.abs(rhs_a))
    with np.errstate(invalid="ignore"):
        ok = diff <= rtol * scale + atol_a
    # relative to the larger value, or to the rounding floor atol / rtol when both are below it
    floor = np.maximum(scale, atol_a / rtol if rtol > 0 else atol_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(floor > 0, diff / np.where(floor > 0, floor, 1.0), 0.0)
    return ok, rel


def identity(
    check_id: str,
    lhs: float | np.ndarray,
    rhs: float | np.ndarray,
    atol: float | np.ndarray = 0.0,
    rtol: float = RTOL,
    method: str = "exact",
    note: str = "",
    variants: Variants | None = None,
) -> Check:
    """lhs == rhs up to rtol (relative) and atol (absolute); ratio = relative error.

    Mutants: ``rhs x0.5``, ``rhs x0.9``, ``rhs x2`` (only when some element is above the absolute floor:
    scaling 0 = 0 changes nothing) and the ``variants``.  ``rtol`` lies in [0, 1).
    """
    rtol = require_real("rtol", rtol, 0.0, 1.0, high_open=True)

    def fixed(la: np.ndarray, ra: np.ndarray, aa: np.ndarray) -> list[tuple[str, tuple[np.ndarray, np.ndarray]]]:
        if not np.any(np.maximum(np.abs(la), np.abs(ra)) > 2 * aa):
            return []
        return [(f"rhs x{c:g}", (la, c * ra)) for c in (0.5, 0.9, 2.0)]

    return _record(check_id, "identity", lambda la, ra, aa: _identity_eval(la, ra, aa, rtol), lhs, rhs, atol,
                   lambda rel: int(np.argmax(rel)), fixed, False, method, note, variants)


def _ce_holds(lhs: float, rhs: float) -> bool:
    return bool(lhs > rhs * (1.0 + CE_MARGIN) if rhs >= 0 else lhs > rhs)


def counterexample(check_id: str, lhs: float, rhs: float, method: str = "exact", note: str = "",
                   variants: Variants | None = None) -> Check:
    """A claimed ``lhs <= rhs`` that fails: reproduced when lhs > rhs (1 + CE_MARGIN).

    Mutants: ``reversed`` (the instance must not also refute ``lhs >= rhs``) and the ``variants``
    (typically the corrected claim, which the instance must not refute).  lhs and rhs are single numbers.
    """
    lhs = require_real("lhs", lhs, finite=False)
    rhs = require_real("rhs", rhs, finite=False)
    ratio = lhs / rhs if rhs != 0 else math.inf
    muts = [("reversed", _ce_holds(rhs, lhs))]
    for label, (lv, rv) in (variants or {}).items():
        muts.append((label, _ce_holds(require_real(f"lhs of variant {label!r}", lv, finite=False),
                                      require_real(f"rhs of variant {label!r}", rv, finite=False))))
    return Check(check_id, float(lhs), float(rhs), _ce_holds(lhs, rhs), float(ratio), "counterexample", False,
                 method, note, tuple(muts))


def search_record(check_id: str, best: float, note: str = "") -> Check:
    """A search result (the largest ratio found; a number, -inf when nothing was found), reported but not a claim:
    it never fails a run."""
    best = require_real("best", best, finite=False)
    return Check(check_id, best, 1.0, True, best, "search", False, "exact", note)
