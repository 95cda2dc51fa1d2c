"""Every check, by its id: its label, whether it is evidence or a sanity identity, what it can detect, and
which of its mutants are true.

Every check has a stable short id (e.g. ``t2_sharper``) that keys everything about it: this catalog, the rows
of the result table and of the JSON, the mutation results (:mod:`theory_checks.mutants`) and what each proof
covers (:data:`theory_checks.symbolic.COVERS`).  The label (e.g. ``T2 sharper: SNR <= sqrt(G RV_mu)/sigma``)
is written here only, and only displayed: it can be edited without losing the row.  A record whose id has no
entry cannot be built (:class:`theory_checks.records.Check` raises), and tests/theory checks that every
entry here is produced by a check.

Every claim (every row but the searches) has an :class:`Entry`.  Two categories:

- ``evidence``: two independent computations of the same quantity (or a bound between them); counted
  among the verified results, and every mutant of it must be caught (:mod:`theory_checks.mutants`);
- ``sanity``: a definition, a property that holds by construction of the code, or a corollary of other
  rows.  Reported apart, not counted, its mutants are listed for information only.

``sharp`` marks a bound whose supremum of lhs / rhs is 1 (an equality family, or a limit the run approaches):
its ``rhs x0.9`` mutant is expected to be caught.  ``equivalent`` lists mutants that are *true* statements
(so no instance can refute them), each with the reason; if one of them is caught, the reason is wrong and
the mutation run fails.  ``by_construction`` lists mutants whose rejection the row's own acceptance implies
(beyond the generic ones of :func:`theory_checks.mutants.forced_reason`: scalings of an identity, reversed
claims), e.g. a scaling of an identity proved symbolically: they are reported apart and not counted.  Both
name mutants by their labels, which tests/theory checks against the mutants the check evaluates.

A row is sanity, not evidence, when it would pass for *any* implementation of the quantities involved (a
tautology of the algebra, e.g. logsumexp >= max), even when it compares numbers computed in two places.

Searches (:data:`SEARCHES`) report the best ratio an adversarial or random search found; they claim nothing,
so they have a label and no entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Entry", "CATALOG", "SEARCHES", "entry", "label"]


@dataclass(frozen=True)
class Entry:
    """Metadata of one check (see the module docstring)."""

    label: str
    category: str = "evidence"
    detects: str = ""
    sharp: bool = False
    why: str = ""  # sanity rows: why the row is not evidence
    equivalent: dict[str, str] = field(default_factory=dict)
    by_construction: dict[str, str] = field(default_factory=dict)


def _ev(label: str, detects: str, sharp: bool = False, equivalent: dict[str, str] | None = None,
        by_construction: dict[str, str] | None = None) -> Entry:
    return Entry(label, "evidence", detects, sharp, "", dict(equivalent or {}), dict(by_construction or {}))


def _sanity(label: str, why: str, detects: str = "") -> Entry:
    return Entry(label, "sanity", detects, False, why)


_T8_LOOSE = ("true statement: twice the classical-X bound is below the paper's right side for every channel pair, so "
             "|dI| / rhs < 1/2 (proof in docs/theory_report/theory.md, T8; the cap row evaluates it on a grid)")

_SCALED_PROOF = "a scaling of an identity the proof establishes (false wherever the proved value is non-zero)"

CATALOG: dict[str, Entry] = {
    # ----------------------------------------------------------------- identities of section 5
    "rv_decomposition": _ev("RV = Var(mu|x) + E sigma^2",
        "a wrong reward-variance formula (e.g. the noise term dropped)"),
    "rv_above_noise": _ev("RV >= sigma^2",
        "a noise variance larger than the enumerated Var(R|x); equality for pure-noise prompts", sharp=True),
    "score_mean_zero": _sanity("E_pi s = 0", "holds by construction: score() subtracts the pi-mean of the features"),
    "entropy_decomposition": _ev("H(Z) = H(Z|X) + I",
        "an entropy or MI formula off (I by the KL form, H's by entropies)"),
    "mi_below_prompt_entropy": _ev("I <= H(X)",
        "an MI above the prompt entropy; equality for deterministic injective channels", sharp=True),
    "gradient_baseline_free": _sanity("g independent of baseline",
        "a consequence of E_pi s = 0 computed by the same code path"),
    "grad_kl_forms": _ev("grad KL: tabular = score form",
        "a wrong regulariser gradient (tabular logit form vs score-function form)"),
    "grad_entropy_forms": _ev("grad H: tabular = score form",
        "a wrong entropy gradient (tabular logit form vs score-function form)"),
    "mse_enumeration": _ev("MSE_G formula = enumeration",
        "a wrong estimator-MSE formula: brute force over all (2Z)^G outcome tuples"),
    "grpo_mse_enumeration": _ev("GRPO MSE formula = enumeration",
        "a wrong normalised (GRPO) MSE formula, by brute force"),
    # ----------------------------------------------------------------- T1
    "t1_paper": _ev("T1 paper: ||g|| <= sqrt(RV E||s||^2)",
        "equality family: 2-action softmax and rank-one scores", sharp=True),
    "t1_sharper": _ev("T1 sharper: ||g|| <= sqrt(RV_mu lambda_max F)",
        "lambda_max replaced by a smaller eigenvalue", sharp=True),
    "t1_any_baseline": _sanity("T1 any baseline: ||E[(R-c)s]|| <= sqrt(RV E||s||^2)",
        "computes the same numbers as T1 paper (g does not depend on c)"),
    # ----------------------------------------------------------------- T2
    "t2_paper": _ev("T2 paper: SNR <= sqrt(G RV)/sigma",
        "a constant too small by more than 1 - max ratio (ratio -> 1 at p = 1/2, sigma -> 0)", sharp=True),
    "t2_sharper": _ev("T2 sharper: SNR <= sqrt(G RV_mu)/sigma", "equality at p = 1/2; sqrt(G) dropped", sharp=True),
    "t2_other_baseline": _ev("T2 baseline c != b: SNR_c <= sqrt(G RV_mu)/sigma",
        "an estimator MSE that does not grow with a wrong baseline; sqrt(G) dropped"),
    "t2_heteroscedastic": _ev("T2 heteroscedastic: SNR <= sqrt(G RV_mu)/sigma_eff",
        "sigma_eff replaced by the plain average (refuted on random testbeds)", sharp=True),
    "t2_two_action_closed_form": _ev("T2 2-action SNR^2 closed form",
        "a closed form off by a term (e.g. sigma^2 dropped): testbed vs formula"),
    "t1_two_action_values": _ev("T1 2-action g = p(1-p) = E s^2 = RV_mu",
        "a wrong 2-action score, gradient or variance"),
    "t2_paper_plain_sigma_two_action": _ev(
        "T2 paper with plain-average sigma, 2-action heteroscedastic: SNR <= sqrt(G RV)/sigma",
        "for 2 actions the paper's bound holds with the plain average (also proved, S9); ratio -> 1 at p = 1/2",
        sharp=True),
    "t2_sharper_plain_sigma_false": _ev("T2 sharper with plain-average sigma^2 (false)",
        "a wrong counterexample: the corrected claim (sigma_eff) must hold there"),
    "t2_counterexample_value": _ev("T2 counterexample value SNR^2/G = 6/11",
        "a value off the exact rational 6/11 (sympy S7)"),
    "t2_paper_plain_sigma_false": _ev("T2 paper with plain-average sigma (false with >= 3 outcomes)",
        "a wrong counterexample: the corrected claim (sigma_eff) must hold there"),
    "t2_paper_counterexample_values": _ev("T2 paper counterexample values SNR^2/G = 2, RV/sigma^2 = 5/3",
        "values off the exact rationals (sympy S10)"),
    # ----------------------------------------------------------------- T3
    "t3_floor": _ev("T3 floor <= MSE_GRPO", "equality at p = 1/2; the 1/K dropped", sharp=True),
    "t3_floor_saturation": _sanity("T3 floor <= E||s||^2 / K (saturation)",
        "equivalent to RV >= sigma^2 (checked above)"),
    "t3_heteroscedastic": _ev("T3 heteroscedastic: floor(sigma_eff) <= MSE_GRPO",
        "a floor too large; the 1/K dropped", sharp=True),
    "t3_two_action_closed_form": _ev("T3 2-action GRPO MSE closed form",
        "a closed form off by a term: testbed vs formula"),
    "t3_floor_plain_sigma_false": _ev("T3 floor with plain-average sigma^2 (false)",
        "a wrong counterexample: the corrected floor (sigma_eff) must hold there"),
    # ----------------------------------------------------------------- T4
    "t4_contraction": _ev("T4 contraction: I_alpha <= (1-alpha) I",
        "equality for templates on x-independent outcomes; (1-alpha)^2", sharp=True),
    "t4_convexity": _ev("T4 convexity of alpha -> I_alpha",
        "a non-convex I_alpha; equality (affine) for the tight family", sharp=True),
    "t4_strict_contraction": _ev("T4 strict contraction with q = p(z)",
        "equality where the contraction must be strict"),
    # ----------------------------------------------------------------- T5
    "t5_rho_kl": _ev("T5 rho lower bound (KL)", "equality for the 2-action family", sharp=True),
    "t5_rho_entropy": _ev("T5 rho lower bound (entropy)", "equality for the 2-action family", sharp=True),
    "t5_smaller_rv_false": _ev("T5 'smaller RV => larger rho' (false)",
        "a wrong counterexample: without the pure-noise prompt's noise the claim holds"),
    # ----------------------------------------------------------------- T6
    "t6_drift_diffusive": _ev("T6 drift diffusive m = 0",
        "a wrong drift law (eta instead of eta^2): enumeration of all K^T update sequences"),
    "t6_drift_ballistic": _ev("T6 drift ballistic m != 0",
        "a wrong drift law (T^2 instead of T(T-1), the ballistic term dropped): enumeration"),
    # ----------------------------------------------------------------- T7
    "t7_identity": _ev("T7 identity E||gbar_hat_S - gbar_S||^2 = sum sigma_i^2 / n^2",
        "1/n instead of 1/n^2; every subset S, proper ones included"),
    "t7_filtering_false": _sanity("T7 'filtering reduces MSE' (false)",
        "algebra: with any constant sigma_i^2 = s, MSE_S = s/n > s/P = MSE_all for n < P, whatever s is"),
    "t7_equal_sigma_ratio": _sanity("T7 equal sigma: MSE_S / MSE_all = P / n",
        "algebra: (n s / n^2) / (P s / P^2) = P / n for any constant sigma_i^2 = s"),
    "t7_paper_rv": _sanity("T7 paper setting: population RV = 0.34, 0.11",
        "holds by construction (p solved from the RV)"),
    "t7_paper_mse_enumeration": _ev("T7 paper setting: sigma_i^2 formula = enumeration (4^8 tuples)",
        "a wrong per-group MSE at the paper's setting"),
    "t7_paper_mse_closed_form": _ev("T7 paper setting: sigma_i^2 = 2-action closed form",
        "a wrong per-group MSE (third, closed-form computation)"),
    "t7_paper_high_group_false": _ev("T7 paper setting: keeping only the high-RV group lowers the MSE (false)",
        "a wrong per-group MSE that does not raise the MSE; control: the same claim on the batch SNR holds there"),
    "t7_paper_top_p_false": _ev("T7 paper setting: top-p (rho = 0.9, P = 8) lowers the MSE (false)",
        "a rule keeping fewer high-RV groups still raises the MSE, so what top-p keeps is asserted in the next row; "
        "control: the claim on the batch SNR (7.39 -> 7.73) holds"),
    "t7_paper_top_p_kept": _ev("T7 paper setting: top-p (rho = 0.9, P = 8) keeps 7 groups, MSE x1.15",
        "a wrong top-p rule (keeping 6, 4 or 3 groups), in the plain loop or in "
        "ragen_core.math.filtering.select_groups"),
    "t7_paper_high_half_false": _ev("T7 paper setting: keeping the high-RV half lowers the MSE (false)",
        "a wrong per-group MSE; control: the claim on the batch SNR (7.39 -> 9.43) holds"),
    "t7_paper_no_subset_lower": _ev("T7 paper setting: MSE_all <= MSE_S for every proper subset S (P = 8)",
        "a proper subset with a lower MSE than the full batch"),
    "t7_dropped_gradient_zero": _sanity("T7 sum_D g = 0 (construction)", "checks the construction of the dropped set"),
    "t7_batch_snr_rises": _sanity("T7 batch SNR rises when dropping sum_D g = 0",
        "reduces to sqrt(a) < sqrt(a + b) with b > 0"),
    # ----------------------------------------------------------------- T8
    "t8_paper": _ev("T8 paper: |dI| <= 2(delta log(|X||Z|-1) + h2(delta))",
        "a constant below the adversarial ratio (x0.25), delta without its square root; loose by a factor >= 2",
        equivalent={"rhs x0.5": _T8_LOOSE, "rhs x0.9": _T8_LOOSE}),
    "t8_afw": _ev("T8 Z-free (AFW): |dI| <= 2 dbar log|X| + (1+dbar) h2(dbar/(1+dbar))",
        "a constant 10% too small (small-weight pairs reach ratio > 0.9); the h2 term dropped", sharp=True,
        equivalent={"factor 2 -> 1 on dbar log|X|": "true statement for classical X: the 'T8 classical X' row, "
                                                    "whose instances reach 0.99 of it"}),
    "t8_classical": _ev("T8 classical X: |dI| <= dbar log|X| + (1+dbar) h2(dbar/(1+dbar))",
        "a constant 10% too small (ratio > 0.99 on small-weight pairs); either term dropped", sharp=True),
    "t8_afw_pinsker": _sanity("T8 Z-free with dbar <= sqrt(E KL/2)",
        "a corollary: the AFW row, Pinsker (row below) and the AFW rhs increasing in dbar; "
        "its best ratio found is 0.46"),
    "t8_pinsker": _ev("T8 Pinsker: E_x TV_x <= sqrt(E_x KL/2)",
        "a constant 10% too small (small perturbations reach ratio > 0.96); the square root dropped", sharp=True),
    "t8_paper_cap": _ev("T8 paper: ratio cap from the classical-X bound <= 1/2",
        "a cap above 1/2 (grid over delta and sizes 2..8; limit 1/2 as delta -> 0)", sharp=True),
    # ----------------------------------------------------------------- T9
    "t9_decomposition": _sanity("T9 dI = Delta_marg - Delta_in",
        "the identity H(Z) = H(Z|X) + I (its own row) at two policies, subtracted"),
    "t9_counterexample_mi": _ev("T9 counterexample I = 0.0783 (4 d.p.)", "a value off the paper's 0.0783"),
    "t9_counterexample_rate": _ev("T9 counterexample dI/dt = 0.030 (3 d.p.)", "a value off the paper's 0.030"),
    "t9_rate_finite_difference": _ev("T9 dI/dt analytic = finite difference",
        "a wrong analytic MI gradient (vs a central finite difference)"),
    "t9_entropy_bonus_false": _ev("T9 'entropy bonus lowers I' (false): dI/dt > 0", "a wrong sign of dI/dt"),
    "t9_ascent_step": _ev("T9 entropy-ascent step raises I", "a step that does not raise I"),
    # ----------------------------------------------------------------- MI proxies, exact
    "mi_seq_mean": _sanity("MI-Seq-Est: E = I_P when scorer = sampler",
        "the definition of I_P (same identity as H(Z) = H(Z|X) + I)"),
    "mi_seq_below_sampler_mi": _ev("MI-Seq-Est: E <= I_P(sampler), sampler at T != 1",
        "a proxy above the sampler's MI; equality as T -> 1", sharp=True),
    "batch_mi_below_mi": _ev("E_batch[I_P] <= I(X;Z)", "a batch MI above the pool's MI on average"),
    "retrieval_collapse": _sanity("Retrieval-Acc under collapse: E = 1/P",
        "holds for any winner function (the winners' probabilities sum to 1)"),
    "fano": _ev("Fano (Bayes scorer)", "equality for symmetric channels; the log(P-1) term dropped", sharp=True),
    # ----------------------------------------------------------------- Monte Carlo
    "mc_mse": _ev("MC validate: E||g_hat - g||^2 = MSE_G",
        "a simulator or MSE formula off by >= 5% (see detectable error); the noise term dropped"),
    "mc_t2_sharper": _ev("MC T2 sharper: SNR <= sqrt(G RV_mu)/sigma",
        "a constant 10% too small: refuted at p = 0.45 (ratio 0.98, draws of positive variance), not only at the "
        "degenerate p = 1/2 (constant draws)", sharp=True),
    "mc_t3_floor": _ev("MC T3 floor <= MSE_GRPO",
        "a floor 10% too large: refuted at p = 0.45 (ratio 0.96) and p = 1/2", sharp=True),
    "mc_mse_simulated_noise": _ev("MC validate: E||g_hat - g||^2 = MSE_G, simulated noise",
        "a simulator error >= 5% with the noise simulated"),
    "mc_t2_sharper_plain_sigma_false": _ev("MC T2 sharper with plain-average sigma^2 (false)",
        "a wrong counterexample (the corrected claim must not be refuted)"),
    "core_dr_grpo": _ev("RL core Dr.GRPO advantage = R - mean(R)",
        "a wrong Dr.GRPO advantage in ragen_core.math.advantages"),
    "core_reward_variance": _ev("RL core reward_variance(ddof=0) = numpy var",
        "a wrong variance (e.g. ddof) in ragen_core.math.filtering"),
    "mc_t1_sample": _ev("MC T1 sample version (every draw)",
        "a violation on any single draw (Cauchy-Schwarz equality for G = 2, s_2 = -s_1)", sharp=True),
    "mc_sample_baseline": _ev("MC validate: E[sample-baseline g_hat] . u = (1 - 1/G) ||g||",
        "the (1 - 1/G) factor of the sample baseline, or a 5% error"),
    "mc_t6_drift_diffusive": _ev("MC T6 drift E||theta_T - theta_0||^2 (m = 0)", "a drift law off by >= 5%"),
    "mc_t6_drift_kl": _ev("MC T6 drift E||theta_T - theta_0||^2 (m = KL direction)",
        "a drift law off by >= 5% (T instead of T^2)"),
    "mc_t7_identity": _ev("MC T7 identity, fixed S: E||gbar_hat_S - gbar_S||^2 = sum sigma^2 / n^2",
        "1/n instead of 1/n^2, or a 5% error"),
    "core_filter_groups": _ev("RL core filter_groups(top_k_abs) = numpy top-k by variance",
        "a selection differing from the plain top-k in any batch, including the tie-break (ties are common)"),
    "mc_t7_selected_false": _ev("MC T7 identity with S chosen from the same rollouts (false)",
        "a wrong counterexample: with S fixed in advance the identity holds"),
    "core_mi_seq": _ev("ragen_core.math.mi mi_seq_est = numpy sequence proxy",
        "a wrong sequence proxy in ragen_core.math.mi (e.g. log-sum instead of log-mean)"),
    "core_retrieval": _ev("ragen_core.math.mi retrieval_acc = numpy argmax",
        "a wrong retrieval accuracy in ragen_core.math.mi"),
    "mc_mi_seq": _ev("MC validate: E[MI-Seq-Est] = I_P, scorer = sampler",
        "a proxy biased by >= 5% (ragen_core.math.mi agrees with the numpy proxy on the checked batches)"),
    "mc_retrieval": _ev("MC validate: E[Retrieval-Acc] = Bayes accuracy",
        "a retrieval accuracy off by >= 5% (e.g. at chance level)"),
    "mc_mi_seq_below_log_p": _sanity("MC MI-Seq-Est <= log P (every batch)",
        "logsumexp_j L_j - log P >= L_i - log P for any scores L: holds for every input of the numpy proxy"),
    "core_token_estimates": _ev("ragen_core.math.mi per-token estimates = plain-loop reference",
        "a wrong per-token normalisation or 1/P in ragen_core.math.mi"),
    "core_entropy_decomposition": _sanity("ragen_core.math.mi H_hat(Z) = H_hat(Z|X) + MI-Est",
        "compares outputs built from the same terms"),
    "core_mi_row_shift": _ev("ragen_core.math.mi row shift: mi_est unchanged",
        "a proxy that depends on a per-row constant"),
    "core_retrieval_row_shift": _ev("ragen_core.math.mi row shift: retrieval_acc unchanged",
        "an accuracy that depends on a per-row constant (e.g. prompt and trace indices swapped)"),
    "core_single_token": _sanity("ragen_core.math.mi |z| = 1: mi_est = mi_seq_est",
        "two outputs of the same terms with lengths 1"),
    "core_mi_seq_below_log_p": _ev("ragen_core.math.mi mi_seq_est <= log P",
        "a batch above log P in ragen_core.math.mi (e.g. the mean of the log-probs in place of the log-mean-exp over "
        "prompts); equality for disjoint supports", sharp=True),
    "mc_mi_seq_temperature": _ev("MC validate: E[MI-Seq-Est] at sampler T != 1",
        "an expectation off by >= 5% (e.g. I_P of the sampler instead)"),
    "mc_collapse_mi_seq": _sanity("MC collapse, scorer = sampler: MI-Seq-Est = 0 (every batch)",
        "any L with identical columns gives L_i - log((1/P) P exp L_i) = 0: a property of the numpy formula"),
    "mc_collapse_retrieval": _sanity("MC collapse, arbitrary scorer: E[Retrieval-Acc] = 1/P",
        "holds for any winner function"),
    "core_collapse_mi_seq": _ev("ragen_core.math.mi collapse: mi_seq_est = 0 (every batch)",
        "a log P offset in ragen_core.math.mi"),
    "core_collapse_retrieval": _ev("ragen_core.math.mi collapse: retrieval_acc = numpy argmax",
        "a wrong tie rule (integer scorer: ties are common; a tie is shared, so a lower- or higher-index "
        "tie-break is refuted) or accuracy in ragen_core.math.mi"),
    "core_mi_skipped": _sanity("ragen_core.math.mi mi_proxies checks", "skipped: ragen_core.math.mi not importable"),
    # ----------------------------------------------------------------- symbolic
    "s1_two_action": _ev("S1 2-action: g = c Delta p(1-p), E s^2 = c^2 p(1-p), RV_mu = Delta^2 p(1-p)",
        "a wrong 2-action derivation (a square dropped)",
        by_construction={"g x2": _SCALED_PROOF, "g x0.9": _SCALED_PROOF}),
    "s2_t1_equality": _ev("S2 T1 equality case (sigma = 0)", "T1 not tight in the 2-action case",
                                           by_construction={"rhs x0.9": _SCALED_PROOF}),
    "s3_t2_closed_form": _ev("S3 T2 2-action SNR^2 closed form", "a wrong closed form (sigma^2 dropped)",
                                            by_construction={"closed form x2": _SCALED_PROOF}),
    "s4_t2_sharper": _ev("S4 T2 sharper bound, 2-action",
        "a constant 10% too small, the inequality reversed, G dropped"),
    "s4_t2_paper": _ev("S4 T2 paper bound, 2-action", "the inequality reversed, G dropped"),
    "s5_t3_floor": _ev("S5 T3 GRPO MSE closed form and floor",
        "a floor 10% too large, the inequality reversed, 1/K dropped"),
    "s5_t3_equality": _ev("S5 T3 equality iff p = 1/2", "equality at another p"),
    "s6_t4_contraction": _ev("S6 T4 convexity and contraction, any finite X and Z", "a wrong second-derivative lemma"),
    "s7_heteroscedastic_counterexample": _ev("S7 heteroscedastic counterexample (exact rationals)",
        "a wrong counterexample (the corrected claim must hold)"),
    "s8_t9_rate_positive": _ev("S8 T9 dI/dt > 0 (30 digits)",
        "a float64 dI/dt off the 30-digit value (e.g. the ascent of H(Z|X) instead of per-prompt entropy ascent)",
        by_construction={"value x0.9": "a scaling of a non-zero value the proof computes"}),
    "s9_t2_paper_plain_sigma": _ev("S9 T2 paper bound, plain-average sigma, 2-action heteroscedastic",
        "a constant 10% too small, the reversed inequality, the sharper form"),
    "s10_t2_paper_three_outcomes": _ev("S10 T2 paper bound, plain-average sigma, fails with 3 outcomes",
        "a wrong counterexample (the corrected claim must hold)"),
}


#: The searches, by id: their labels (a search claims nothing, so it has no :class:`Entry`).
SEARCHES: dict[str, str] = {
    "t2_paper_plain_sigma_search": "T2 paper with plain-average sigma: largest ratio on the random heteroscedastic "
                                   "testbeds",
    "t8_search_paper": "T8 adversarial search: largest |dI| / rhs, paper",
    "t8_search_afw_pinsker": "T8 adversarial search: largest |dI| / rhs, Z-free with dbar <= sqrt(E KL/2)",
    "t8_search_afw": "T8 adversarial search: largest |dI| / rhs, Z-free (AFW)",
    "t8_search_classical": "T8 adversarial search: largest |dI| / rhs, classical X",
}


def entry(check_id: str) -> Entry:
    """The catalog entry of a check; a KeyError naming the id when there is none (a search has none)."""
    try:
        return CATALOG[check_id]
    except KeyError:
        raise KeyError(f"check id {check_id!r} has no entry in theory_checks/catalog.py") from None


def label(check_id: str) -> str:
    """The display text of a check (a claim or a search); a KeyError naming the id when it is unknown."""
    if check_id in SEARCHES:
        return SEARCHES[check_id]
    return entry(check_id).label
