"""theory_checks: verify the theory of the RAGEN-2 paper (T1-T9) and the MI-proxy properties.

The statements under test, as they actually hold, are written out in ``docs/theory_report/theory.md``.

Three independent ways of checking, each comparing two separately computed numbers:

- exact (:mod:`theory_checks.bounds`): enumeration in float64 over thousands of random
  :class:`~theory_checks.testbed.SoftmaxTestbed` instances, tightness families and counterexamples;
- Monte Carlo (:mod:`theory_checks.montecarlo`): estimator-level results simulated with the RL core's
  own estimators where they exist, accepted with Hoeffding / empirical-Bernstein intervals under a
  Bonferroni correction after validating the simulator against the exact value;
- symbolic (:mod:`theory_checks.symbolic`): sympy proofs of the 2-action closed forms (any feature scale
  and reward gap, all p in (0, 1)), of T4 for any finite X and Z, and of T2 with z-dependent noise.

Every check can fail: each one also evaluates deliberately wrong variants of its statement
(:mod:`theory_checks.mutants`); :mod:`theory_checks.catalog` says which rows are evidence and which are
definitions or sanity identities, what each row can detect, and which mutants are true statements.

Command line: ``python -m theory_checks [--quick] [--mutants] [--seed N] [--json PATH] [--report DIR]``
(:func:`theory_checks.__main__.main`, also behind ``ragen verify``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .records import Check
from .testbed import SoftmaxTestbed

if TYPE_CHECKING:
    from .report import RunResult

__all__ = ["Check", "SoftmaxTestbed", "run_all"]


def run_all(seed: int = 0, quick: bool = False) -> RunResult:
    """Run every check; see :func:`theory_checks.report.run_all` (imported lazily)."""
    from .report import run_all as _run_all

    return _run_all(seed=seed, quick=quick)
