"""Mutation testing of the checks: every check must be able to fail, and the score counts only mutants
whose rejection says something about the data.

Each check constructor in :mod:`theory_checks.bounds`, :mod:`theory_checks.montecarlo` and
:mod:`theory_checks.symbolic` also evaluates deliberately wrong variants of its statement on the *same*
numbers with the *same* acceptance rule, and stores ``(label, holds)`` in ``Check.mutants``.  Results are
keyed by the check's id (``Check.id``, :mod:`theory_checks.catalog`), never by its display label:

- bounds: the right side x0.5, x0.9 and (on equality instances) x2, the inequality reversed;
- identities: one side x0.5, x0.9, x2 (when not both 0);
- counterexamples: the reversed claim, and the corrected claim (which the instance must not refute);
- Monte Carlo validations: the exact value x1.05 and x0.95 (a 5% simulator error);
- symbolic results: the mutated statement evaluated exactly at concrete parameter values (a sympy
  substitution); it is refuted only by an instance where it is false, never by a proof that fails;
- per check, wrong formulas evaluated on the same instance: a factor or term dropped, a wrong eigenvalue,
  sigma_eff replaced by the plain average, 1/n instead of 1/n^2, ...

Informative and by-construction mutants.  On some records the record's own acceptance implies that a
mutant is rejected, whatever the data: a scaling of an identity that holds with a non-zero value, a scaling
of a bound at an instance where it holds with equality (``tight``), the reversed claim of a counterexample
that is reproduced, and the reversed direction of a bound (rejected unless every instance is an exact
equality); the catalog lists further ones (e.g. scalings of a proved identity, :mod:`theory_checks.catalog`).
Such a rejection measures nothing beyond the check passing, so:

- a mutant is *informative* when some record that carries it does not imply its rejection;
- it is ``caught`` when one of those records rejects it; a mutant rejected only where that is implied is
  reported as ``by construction`` and not counted (nor is one that only exists on implying records).

Status per (row, mutant):

- ``caught``: an informative mutant rejected by an informative record;
- ``SURVIVED``: a wrong statement the run did not reject (a failure for a verified result);
- ``by construction``: rejected only where the check's own acceptance implies it (reported apart);
- ``equivalent``: the mutant is a true statement (reason in :mod:`theory_checks.catalog`), so nothing can
  refute it; if it is caught anyway the reason is wrong and the status is ``CONTRADICTED`` (a failure);
- ``not claimed``: ``rhs x0.9`` of a bound that does not claim a supremum ratio of 1.

Every evidence row must have at least one counted (informative) mutant: a row without one gets a
``NO INFORMATIVE MUTANT`` entry, which fails the run like a survivor (a row with no mutant at all is not
dropped silently).  Only rows in the ``evidence`` category count; the exit status of ``--mutants`` is 1
when any of their entries is SURVIVED, CONTRADICTED or NO INFORMATIVE MUTANT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .catalog import entry, label
from .records import Check

__all__ = ["MutantResult", "evaluate_mutants", "mutation_summary", "forced_reason", "FAILING", "NO_INFORMATIVE",
           "BY_CONSTRUCTION"]

BY_CONSTRUCTION = "by construction"
NO_INFORMATIVE = "NO INFORMATIVE MUTANT"
FAILING = ("SURVIVED", "CONTRADICTED", NO_INFORMATIVE)
#: the label of the row-level entry of an evidence row without a counted mutant
NO_MUTANT_LABEL = "(no informative mutant)"

_SCALING = re.compile(r"rhs x[0-9.]+")


@dataclass(frozen=True)
class MutantResult:
    """One (check, mutant) pair after aggregating the check's records (``label`` is the mutant's)."""

    check_id: str
    method: str
    kind: str
    category: str
    label: str
    caught: bool
    status: str
    reason: str = ""

    @property
    def row(self) -> str:
        """The check's label (display text)."""
        return label(self.check_id)

    @property
    def counted(self) -> bool:
        """An informative mutant of a verified result, expected to be caught."""
        return self.category == "evidence" and self.status in ("caught", "SURVIVED", "CONTRADICTED")

    @property
    def failed(self) -> bool:
        return self.category == "evidence" and self.status in FAILING


def forced_reason(c: Check, mutant: str) -> str:
    """Why record ``c`` holding implies that mutant ``mutant`` is rejected ("" when it does not)."""
    e = entry(c.id)
    if mutant in e.by_construction:
        return e.by_construction[mutant]
    if mutant == "reversed" or mutant.startswith("reversed "):
        if c.kind == "counterexample":
            return "the reversed claim of a reproduced counterexample"
        return "the reversed inequality: rejected unless every instance is an exact equality"
    if _SCALING.fullmatch(mutant):
        if c.kind == "identity":
            return "a scaling of an identity that holds with a non-zero value"
        if c.kind == "bound" and c.tight:
            return "a scaling of a bound at an instance where it holds with equality"
    return ""


def evaluate_mutants(checks: list[Check]) -> list[MutantResult]:
    """Aggregate ``Check.mutants`` per (method, check id, mutant label), in order of first appearance; then one
    ``NO INFORMATIVE MUTANT`` entry per evidence row without a counted mutant (searches and skipped
    checks have none by design).  Every check with a mutant must have a catalog entry (KeyError otherwise)."""
    caught: dict[tuple[str, str, str], bool] = {}
    caught_inf: dict[tuple[str, str, str], bool] = {}
    forced_all: dict[tuple[str, str, str], str] = {}  # "" once a record does not imply the rejection
    kinds: dict[tuple[str, str], str] = {}
    for c in checks:
        key = (c.method, c.id)
        kinds.setdefault(key, c.kind)
        for mutant, holds in c.mutants:
            k = (*key, mutant)
            why = forced_reason(c, mutant)
            caught[k] = caught.get(k, False) or not holds
            caught_inf[k] = caught_inf.get(k, False) or (not holds and not why)
            forced_all[k] = why if forced_all.get(k, why) and why else ""
    out: list[MutantResult] = []
    for (method, check_id, mutant), was_caught in caught.items():
        e = entry(check_id)
        kind = kinds[(method, check_id)]
        k = (method, check_id, mutant)
        reason = ""
        if mutant in e.equivalent:
            reason = e.equivalent[mutant]
            status = "CONTRADICTED" if was_caught else "equivalent"
        elif forced_all[k]:
            status, reason = BY_CONSTRUCTION, forced_all[k] + ("" if was_caught else " (not rejected here)")
        elif caught_inf[k]:
            status = "caught"
        elif was_caught:
            status, reason = BY_CONSTRUCTION, "rejected only at instances where the check's own acceptance implies it"
        elif kind == "bound" and mutant == "rhs x0.9" and not e.sharp:
            status, reason = "not claimed", "the bound does not claim a supremum ratio of 1"
        else:
            status = "SURVIVED"
        out.append(MutantResult(check_id, method, kind, e.category, mutant, was_caught, status, reason))
    counted_rows = {(m.method, m.check_id) for m in out if m.counted}
    for (method, check_id), kind in kinds.items():
        if kind in ("search", "skipped") or (method, check_id) in counted_rows:
            continue
        category = entry(check_id).category
        if category != "evidence":
            continue
        out.append(MutantResult(check_id, method, kind, category, NO_MUTANT_LABEL, False, NO_INFORMATIVE,
                                "every mutant of this row is by construction, equivalent or not claimed"))
    return out


def mutation_summary(results: list[MutantResult]) -> dict[str, int]:
    """Counts: caught / total over the counted (informative) mutants of the evidence rows, plus the mutants
    reported apart (by construction, equivalent, not claimed, of sanity rows) and the evidence rows without
    an informative mutant."""
    counted = [r for r in results if r.counted]
    ev = [r for r in results if r.category == "evidence"]
    return {
        "caught": sum(r.caught and r.status == "caught" for r in counted),
        "total": len(counted),
        "failed": sum(r.failed for r in results),
        "by_construction": sum(r.status == BY_CONSTRUCTION for r in ev),
        "equivalent": sum(r.status == "equivalent" for r in ev),
        "not_claimed": sum(r.status == "not claimed" for r in ev),
        "no_informative": sum(r.status == NO_INFORMATIVE for r in ev),
        "sanity": sum(r.category != "evidence" for r in results),
        "rows": len({(r.method, r.check_id) for r in counted}),
    }
