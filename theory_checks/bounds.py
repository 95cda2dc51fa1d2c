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

from .continuity import (
    check_t8,
    check_t8_families,
    t8_adversarial_search,
    t8_checks,
    t8_paper_cap,
    t8_small_weight_pair,
    t8_symmetric_pair,
)
from .contraction import ALPHAS, check_t4, mixture_mi, t4_instances
from .drift import check_t6
from .entropy_bonus import check_t9, check_t9_counterexample, entropy_rows, mi_logit_gradient, mi_time_derivative
from .exact import run_exact
from .filtering import (
    T7_PAPER_SETTING,
    check_t7_counterexample,
    check_t7_identity,
    check_t7_paper_setting,
    check_t7_snr,
    check_t7_subsets,
    t7_paper_prompt,
)
from .identities import check_estimator_enumeration, check_identities
from .mi_proxies import bayes_accuracy, check_mi_proxy_exact, expected_seq_proxy, fano_lower
from .records import CE_MARGIN, RTOL, TIGHT_TOL, Check, bound, counterexample, identity, search_record, strict
from .reference import top_p_by_score
from .regularisers import check_t5, check_t5_counterexample
from .snr import (
    check_t1,
    check_t2,
    check_t2_heteroscedastic_counterexample,
    check_t2_paper_heteroscedastic_counterexample,
    check_t2_paper_two_action_heteroscedastic,
    check_t2_two_action,
    check_t3,
    check_t3_heteroscedastic_counterexample,
    check_t3_two_action,
    t2_paper_plain_ratio,
)
from .testbed import SoftmaxTestbed

__all__ = [
    "Check",
    "SoftmaxTestbed",
    "RTOL",
    "TIGHT_TOL",
    "CE_MARGIN",
    "T7_PAPER_SETTING",
    "ALPHAS",
    "bound",
    "strict",
    "identity",
    "counterexample",
    "search_record",
    "check_identities",
    "check_estimator_enumeration",
    "check_t1",
    "check_t2",
    "check_t2_two_action",
    "check_t2_heteroscedastic_counterexample",
    "check_t2_paper_two_action_heteroscedastic",
    "check_t2_paper_heteroscedastic_counterexample",
    "t2_paper_plain_ratio",
    "check_t3",
    "check_t3_two_action",
    "check_t3_heteroscedastic_counterexample",
    "check_t4",
    "mixture_mi",
    "t4_instances",
    "check_t5",
    "check_t5_counterexample",
    "check_t6",
    "check_t7_identity",
    "check_t7_subsets",
    "check_t7_counterexample",
    "check_t7_paper_setting",
    "check_t7_snr",
    "t7_paper_prompt",
    "check_t8",
    "check_t8_families",
    "t8_checks",
    "t8_small_weight_pair",
    "t8_symmetric_pair",
    "t8_adversarial_search",
    "t8_paper_cap",
    "check_t9",
    "check_t9_counterexample",
    "mi_logit_gradient",
    "mi_time_derivative",
    "entropy_rows",
    "check_mi_proxy_exact",
    "expected_seq_proxy",
    "bayes_accuracy",
    "fano_lower",
    "top_p_by_score",
    "run_exact",
]
