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
- :mod:`theory_checks.filtering`: T7 (filtering groups and the MSE of the kept batch);
- :mod:`theory_checks.continuity`: T8 (continuity of I in the policy);
- :mod:`theory_checks.entropy_bonus`: T9 (an entropy bonus and I);
- :mod:`theory_checks.mi_proxies`: the MI proxies of section 2, exactly;
- :mod:`theory_checks.exact`: :func:`run_exact`, every exact check in one run.

Which variant is implemented (docs/theory_report/theory.md):

- T1  paper  ||g|| <= sqrt(RV E||s||^2);  sharper  ||g|| <= sqrt(RV_mu lambda_max(F));
      any baseline c: ||E[(R - c) s]|| <= sqrt(RV E||s||^2) (a sanity row: the same numbers as T1).
- T2  paper  SNR <= sqrt(G RV) / sigma;  sharper  SNR <= sqrt(G RV_mu) / sigma (homoscedastic);
      heteroscedastic  SNR <= sqrt(G RV_mu) / sigma_eff,  sigma_eff^2 = E[sigma^2 ||s||^2] / E||s||^2;
      with the plain average sigma^2 = E_pi sigma^2 the sharper bound FAILS (counterexample), and the paper's
      own bound holds for 2 actions (checked here, proved in S9) but FAILS with 3 outcomes (noise where the
      score is 0: SNR^2/G = 2 > RV/sigma^2 = 5/3; proved in S10).
- T3  MSE_GRPO >= (1/K) (sigma^2 / RV) E||s||^2 (sigma_eff under heteroscedastic noise; with the plain
      average it fails on the same instance, a counterexample we add), and the floor <= E||s||^2 / K.
- T4  I_alpha <= (1 - alpha) I; alpha -> I_alpha convex; equality when q lives where p(z|x) = p(z);
      strict when q = p(z) and I > 0.
- T5  rho >= ||g_reg|| / (||g_reg|| + sqrt(RV E||s||^2)) for KL-to-reference and entropy regularisers;
      "smaller RV => larger rho" is false (counterexample).
- T6  E||theta_T - theta_0||^2 = eta^2 (T v + T (T-1) ||m||^2), v = E||u||^2, m = E u (by enumeration).
- T7  E||gbar_hat_S - gbar_S||^2 = (1/n^2) sum_S sigma_i^2 (by enumeration, every subset S); "filtering
      reduces MSE" is false (equal sigma, and at the paper's setting: RV 0.34 / 0.11, sigma = 0.3, G = 8,
      top-p rho = 0.9, P = 8); the batch SNR strictly increases when dropping D with sum_D g = 0 (sanity).
- T8  paper |dI| <= 2 (delta log(|X||Z| - 1) + h2(delta)), delta = sqrt(sup_x KL / 2) <= 1 - 1/(|X||Z|)
      (loose by a factor >= 2: see :func:`t8_paper_cap`); |Z|-free (AFW) |dI| <= 2 dbar log|X| +
      (1 + dbar) h2(dbar / (1 + dbar)), dbar = E_x TV_x; for classical X the same with dbar log|X|; and the
      AFW bound at the Pinsker value sqrt(E_x KL / 2).  Random pairs, near-extremal constructions
      (small-weight and symmetric pairs) and an adversarial search.
- T9  dI = dH(Z) - dH(Z|X) (identity); "an entropy bonus lowers I" is false (counterexample at the
      paper's logits, I = 0.0783, dI/dt = +0.030 along per-prompt entropy ascent).
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
from .reference import top_p_by_score
from .regularisers import *  # noqa: F403
from .snr import *  # noqa: F403
from .testbed import SoftmaxTestbed

__all__ = ["SoftmaxTestbed", "top_p_by_score"]
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
