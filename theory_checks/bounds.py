"""Exact checks of the theory (T1-T9, docs/theory_report/theory.md), the identities, and the MI-proxy properties.

Every check compares two numbers computed independently from a :class:`SoftmaxTestbed` (or a channel)
by exact enumeration in float64 and returns :class:`Check` records (kinds, tolerances and mutants:
:mod:`theory_checks.records`).  This module re-exports the public names of the modules that hold them, one per
part of the theory:

- :mod:`theory_checks.records`: :class:`Check`, the acceptance rules ``bound``, ``strict``, ``identity``,
  ``counterexample`` and ``search_record``;
- :mod:`theory_checks.identities`: the identities of section 5 and the estimator-MSE formulas by enumeration;
- :mod:`theory_checks.snr`: T1 (gradient norm), T2 (SNR), T3 (GRPO noise floor);
- :mod:`theory_checks.contraction`: T4 (mixing with a template contracts I);
- :mod:`theory_checks.regularisers`: T5 (the regulariser's share rho);
- :mod:`theory_checks.drift`: T6 (parameter drift);
- :mod:`theory_checks.filtering`: T7 (filtering groups and the MSE of the kept batch), and ``top_p_by_score``
  (the paper's top-p rule of :mod:`theory_checks.reference`, on checked arguments);
- :mod:`theory_checks.continuity`: T8 (continuity of I in the policy);
- :mod:`theory_checks.entropy_bonus`: T9 (an entropy bonus and I);
- :mod:`theory_checks.mi_proxies`: the MI proxies of section 2, exactly;
- :mod:`theory_checks.exact`: :func:`run_exact`, every exact check in one run.

Which variant of each result is implemented is stated in the docstring of its module (and in
docs/theory_report/theory.md).  Every public function checks its arguments (:mod:`theory_checks.inputs`): a
probability vector that does not sum to 1, a NaN, a group size of 2.5 or an ``int`` where a random generator is
meant is one ``ValueError``/``TypeError`` naming the argument, never a silently wrong number.
"""

from __future__ import annotations

from . import (
    continuity,
    contraction,
    drift,
    entropy_bonus,
    exact,
    filtering,
    identities,
    mi_proxies,
    records,
    regularisers,
    snr,
)
from .continuity import *  # noqa: F403
from .contraction import *  # noqa: F403
from .drift import *  # noqa: F403
from .entropy_bonus import *  # noqa: F403
from .exact import *  # noqa: F403
from .filtering import *  # noqa: F403
from .identities import *  # noqa: F403
from .mi_proxies import *  # noqa: F403
from .records import *  # noqa: F403
from .regularisers import *  # noqa: F403
from .snr import *  # noqa: F403
from .testbed import SoftmaxTestbed

__all__ = ["SoftmaxTestbed"]
__all__ += records.__all__
__all__ += identities.__all__
__all__ += snr.__all__
__all__ += contraction.__all__
__all__ += regularisers.__all__
__all__ += drift.__all__
__all__ += filtering.__all__
__all__ += continuity.__all__
__all__ += entropy_bonus.__all__
__all__ += mi_proxies.__all__
__all__ += exact.__all__
