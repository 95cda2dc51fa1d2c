"""Mutation testing of the checks: every check must be able to fail (issue 12).

Each check constructor in :mod:`theory_checks.bounds`, :mod:`theory_checks.montecarlo` and
:mod:`theory_checks.symbolic` also evaluates deliberately wrong variants of its statement on the *same*
numbers with the *same* acceptance rule, and stores ``(label, holds)`` in ``Check.mutants``:

- bounds: the right side x0.5, x0.9 and (on equality instances) x2, the inequality reversed;
- identities: one side x0.5, x0.9, x2 (when not both 0);
- counterexamples: the reversed claim, and the corrected claim (which the instance must not refute);
- Monte Carlo validations: the exact value x1.05 and x0.95 (a 5% simulator error);
- symbolic proofs: the mutated statement run through the same decision procedure (it must not be proved);
- per check, wrong formulas evaluated on the same instance: a factor or term dropped, a wrong eigenvalue,
  sigma_eff replaced by the plain average, 1/n instead of 1/n^2, ...

A mutant is *caught* when at least one record of its row rejects it.  Status per (row, mutant):

- ``caught``;
- ``SURVIVED``: a wrong statement the run did not reject (a failure for a verified result);
- ``equivalent``: the mutant is a true statement (reason in :mod:`theory_checks.catalog`), so nothing can
  refute it; if it is caught anyway the reason is wrong and the status is ``CONTRADICTED`` (a failure);
- ``not claimed``: ``rhs x0.9`` of a bound that does not claim a supremum ratio of 1.

Only rows in the ``evidence`` category count; the exit status of ``--mutants`` is 1 when any of their
mutants is SURVIVED or CONTRADICTED.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bounds import Check
from .catalog import entry

__all__ = ["MutantResult", "evaluate_mutants", "mutation_summary", "FAILING"]

FAILING = ("SURVIVED", "CONTRADICTED")


@dataclass(frozen=True)
class MutantResult:
    """One (row, mutant) pair after aggregating the row's records."""

    row: str
    method: str
    kind: str
    category: str
    label: str
    caught: bool
    status: str
    reason: str = ""

    @property
    def counted(self) -> bool:
        """A mutant of a verified result that is expected to be caught."""
        return self.category == "evidence" and self.status in ("caught", *FAILING)

    @property
    def failed(self) -> bool:
        return self.category == "evidence" and self.status in FAILING


def _row(name: str) -> str:
    return name.replace(" [tight]", "")


def evaluate_mutants(checks: list[Check]) -> list[MutantResult]:
    """Aggregate ``Check.mutants`` per (method, row, label), in order of first appearance."""
    caught: dict[tuple[str, str, str], bool] = {}
    kinds: dict[tuple[str, str], str] = {}
    for c in checks:
        key = (c.method, _row(c.name))
        kinds.setdefault(key, c.kind)
        for label, holds in c.mutants:
            k = (*key, label)
            caught[k] = caught.get(k, False) or not holds
    out: list[MutantResult] = []
    for (method, row, label), was_caught in caught.items():
        e = entry(row)
        category = e.category if e is not None else "evidence"
        kind = kinds[(method, row)]
        reason = ""
        if e is not None and label in e.equivalent:
            reason = e.equivalent[label]
            status = "CONTRADICTED" if was_caught else "equivalent"
        elif kind in ("bound",) and label == "rhs x0.9" and not (e is not None and e.sharp):
            status = "caught" if was_caught else "not claimed"
            reason = "" if was_caught else "the bound does not claim a supremum ratio of 1"
        else:
            status = "caught" if was_caught else "SURVIVED"
        out.append(MutantResult(row, method, kind, category, label, was_caught, status, reason))
    return out


def mutation_summary(results: list[MutantResult]) -> dict[str, int]:
    """Counts: caught / total over the counted mutants, plus equivalents, not-claimed and sanity mutants."""
    counted = [r for r in results if r.counted]
    return {
        "caught": sum(r.caught for r in counted),
        "total": len(counted),
        "failed": sum(r.failed for r in results),
        "equivalent": sum(r.status == "equivalent" and r.category == "evidence" for r in results),
        "not_claimed": sum(r.status == "not claimed" and r.category == "evidence" for r in results),
        "sanity": sum(r.category != "evidence" for r in results),
        "rows": len({(r.method, r.row) for r in counted}),
    }
