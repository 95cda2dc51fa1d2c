"""theory_checks: verify the theory of PAPER.md section 5 (T1-T9) and the MI-proxy properties of section 2.

Three independent ways of checking, each comparing two separately computed numbers:

- exact (:mod:`theory_checks.bounds`): enumeration in float64 over thousands of random
  :class:`~theory_checks.testbed.SoftmaxTestbed` instances, tightness families and counterexamples;
- Monte Carlo (:mod:`theory_checks.montecarlo`): estimator-level results simulated with the RL core's
  own estimators where they exist, accepted with Hoeffding / empirical-Bernstein intervals under a
  Bonferroni correction after validating the simulator against the exact value;
- symbolic (:mod:`theory_checks.symbolic`): sympy proofs of the 2-action closed forms and of T4's
  convexity for binary X and Z, for all p in (0, 1).

Command line: ``python -m theory_checks [--quick] [--seed N] [--json PATH] [--report DIR]``
(:func:`theory_checks.__main__.main`, also behind ``ragen verify``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bounds import Check
from .testbed import SoftmaxTestbed

if TYPE_CHECKING:
    from .report import RunResult

__all__ = ["Check", "SoftmaxTestbed", "run_all"]


def run_all(seed: int = 0, quick: bool = False) -> RunResult:
    """Run every check; see :func:`theory_checks.report.run_all` (imported lazily)."""
    from .report import run_all as _run_all

    return _run_all(seed=seed, quick=quick)
