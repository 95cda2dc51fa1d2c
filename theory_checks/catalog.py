"""What each check is: evidence or a sanity identity, what it can detect, and which of its mutants are true.

Every row of the result table (a check name, ``[tight]`` folded in) has an :class:`Entry`.  Two categories:

- ``evidence``: two independent computations of the same quantity (or a bound between them); counted
  among the verified results, and every mutant of it must be caught (:mod:`theory_checks.mutants`);
- ``sanity``: a definition, a property that holds by construction of the code, or a corollary of other
  rows.  Reported apart, not counted, its mutants are listed for information only.

``sharp`` marks a bound whose supremum of lhs / rhs is 1 (an equality family, or a limit the run approaches):
its ``rhs x0.9`` mutant is expected to be caught.  ``equivalent`` lists mutants that are *true* statements
(so no instance can refute them), each with the reason; if one of them is caught, the reason is wrong and
the mutation run fails.  ``by_construction`` lists mutants whose rejection the row's own acceptance implies
(beyond the generic ones of :func:`theory_checks.mutants.forced_reason`: scalings of an identity, reversed
claims), e.g. a scaling of an identity proved symbolically: they are reported apart and not counted.

A row is sanity, not evidence, when it would pass for *any* implementation of the quantities involved (a
tautology of the algebra, e.g. logsumexp >= max), even when it compares numbers computed in two places.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Entry", "CATALOG", "entry"]


@dataclass(frozen=True)
class Entry:
    """Metadata of one row (see the module docstring)."""

    category: str = "evidence"
    detects: str = ""
    sharp: bool = False
    why: str = ""  # sanity rows: why the row is not evidence
    equivalent: dict[str, str] = field(default_factory=dict)
    by_construction: dict[str, str] = field(default_factory=dict)


def _ev(detects: str, sharp: bool = False, equivalent: dict[str, str] | None = None,
        by_construction: dict[str, str] | None = None) -> Entry:
    return Entry("evidence", detects, sharp, "", dict(equivalent or {}), dict(by_construction or {}))


def _sanity(why: str, detects: str = "") -> Entry:
    return Entry("sanity", detects, False, why)


_T8_LOOSE = ("true statement: twice the classical-X bound is below the paper's right side for every channel pair, so "
             "|dI| / rhs < 1/2 (proof in docs/theory_report/theory.md, T8; the cap row evaluates it on a grid)")

_SCALED_PROOF = "a scaling of an identity the proof establishes (false wherever the proved value is non-zero)"

CATALOG: dict[str, Entry] = {
    # ----------------------------------------------------------------- identities of section 5
    "RV = Var(mu|x) + E sigma^2": _ev("a wrong reward-variance formula (e.g. the noise term dropped)"),
    "RV >= sigma^2": _ev(
        "a noise variance larger than the enumerated Var(R|x); equality for pure-noise prompts", sharp=True),
    "E_pi s = 0": _sanity("holds by construction: score() subtracts the pi-mean of the features"),
    "H(Z) = H(Z|X) + I": _ev("an entropy or MI formula off (I by the KL form, H's by entropies)"),
    "I <= H(X)": _ev("an MI above the prompt entropy; equality for deterministic injective channels", sharp=True),
    "g independent of baseline": _sanity("a consequence of E_pi s = 0 computed by the same code path"),
    "grad KL: tabular = score form": _ev("a wrong regulariser gradient (tabular logit form vs score-function form)"),
    "grad H: tabular = score form": _ev("a wrong entropy gradient (tabular logit form vs score-function form)"),
    "MSE_G formula = enumeration": _ev("a wrong estimator-MSE formula: brute force over all (2Z)^G outcome tuples"),
    "GRPO MSE formula = enumeration": _ev("a wrong normalised (GRPO) MSE formula, by brute force"),
    # ----------------------------------------------------------------- T1
    "T1 paper: ||g|| <= sqrt(RV E||s||^2)": _ev("equality family: 2-action softmax and rank-one scores", sharp=True),
    "T1 sharper: ||g|| <= sqrt(RV_mu lambda_max F)": _ev("lambda_max replaced by a smaller eigenvalue", sharp=True),
    "T1 any baseline: ||E[(R-c)s]|| <= sqrt(RV E||s||^2)": _sanity(
        "computes the same numbers as T1 paper (g does not depend on c)"),
    # ----------------------------------------------------------------- T2
    "T2 paper: SNR <= sqrt(G RV)/sigma": _ev(
        "a constant too small by more than 1 - max ratio (ratio -> 1 at p = 1/2, sigma -> 0)", sharp=True),
    "T2 sharper: SNR <= sqrt(G RV_mu)/sigma": _ev("equality at p = 1/2; sqrt(G) dropped", sharp=True),
    "T2 baseline c != b: SNR_c <= sqrt(G RV_mu)/sigma": _ev(
        "an estimator MSE that does not grow with a wrong baseline; sqrt(G) dropped"),
    "T2 heteroscedastic: SNR <= sqrt(G RV_mu)/sigma_eff": _ev(
        "sigma_eff replaced by the plain average (refuted on random testbeds)", sharp=True),
    "T2 2-action SNR^2 closed form": _ev("a closed form off by a term (e.g. sigma^2 dropped): testbed vs formula"),
    "T1 2-action g = p(1-p) = E s^2 = RV_mu": _ev("a wrong 2-action score, gradient or variance"),
    "T2 paper with plain-average sigma, 2-action heteroscedastic: SNR <= sqrt(G RV)/sigma":
        _ev("for 2 actions the paper's bound holds with the plain average (also proved, S9); ratio -> 1 at p = 1/2",
            sharp=True),
    "T2 sharper with plain-average sigma^2 (false)": _ev(
        "a wrong counterexample: the corrected claim (sigma_eff) must hold there"),
    "T2 counterexample value SNR^2/G = 6/11": _ev("a value off the exact rational 6/11 (sympy S7)"),
    "T2 paper with plain-average sigma (false with >= 3 outcomes)": _ev(
        "a wrong counterexample: the corrected claim (sigma_eff) must hold there"),
    "T2 paper counterexample values SNR^2/G = 2, RV/sigma^2 = 5/3": _ev("values off the exact rationals (sympy S10)"),
    # ----------------------------------------------------------------- T3
    "T3 floor <= MSE_GRPO": _ev("equality at p = 1/2; the 1/K dropped", sharp=True),
    "T3 floor <= E||s||^2 / K (saturation)": _sanity("equivalent to RV >= sigma^2 (checked above)"),
    "T3 heteroscedastic: floor(sigma_eff) <= MSE_GRPO": _ev("a floor too large; the 1/K dropped", sharp=True),
    "T3 2-action GRPO MSE closed form": _ev("a closed form off by a term: testbed vs formula"),
    "T3 floor with plain-average sigma^2 (false)": _ev(
        "a wrong counterexample: the corrected floor (sigma_eff) must hold there"),
    # ----------------------------------------------------------------- T4
    "T4 contraction: I_alpha <= (1-alpha) I": _ev(
        "equality for templates on x-independent outcomes; (1-alpha)^2", sharp=True),
    "T4 convexity of alpha -> I_alpha": _ev("a non-convex I_alpha; equality (affine) for the tight family", sharp=True),
    "T4 strict contraction with q = p(z)": _ev("equality where the contraction must be strict"),
    # ----------------------------------------------------------------- T5
    "T5 rho lower bound (KL)": _ev("equality for the 2-action family", sharp=True),
    "T5 rho lower bound (entropy)": _ev("equality for the 2-action family", sharp=True),
    "T5 'smaller RV => larger rho' (false)": _ev(
        "a wrong counterexample: without the pure-noise prompt's noise the claim holds"),
    # ----------------------------------------------------------------- T6
    "T6 drift diffusive m = 0": _ev(
        "a wrong drift law (eta instead of eta^2): enumeration of all K^T update sequences"),
    "T6 drift ballistic m != 0": _ev(
        "a wrong drift law (T^2 instead of T(T-1), the ballistic term dropped): enumeration"),
    # ----------------------------------------------------------------- T7
    "T7 identity E||gbar_hat_S - gbar_S||^2 = sum sigma_i^2 / n^2": _ev(
        "1/n instead of 1/n^2; every subset S, proper ones included"),
    "T7 'filtering reduces MSE' (false)": _sanity(
        "algebra: with any constant sigma_i^2 = s, MSE_S = s/n > s/P = MSE_all for n < P, whatever s is"),
    "T7 equal sigma: MSE_S / MSE_all = P / n": _sanity(
        "algebra: (n s / n^2) / (P s / P^2) = P / n for any constant sigma_i^2 = s"),
    "T7 paper setting: population RV = 0.34, 0.11": _sanity("holds by construction (p solved from the RV)"),
    "T7 paper setting: sigma_i^2 formula = enumeration (4^8 tuples)": _ev(
        "a wrong per-group MSE at the paper's setting"),
    "T7 paper setting: sigma_i^2 = 2-action closed form": _ev("a wrong per-group MSE (third, closed-form computation)"),
    "T7 paper setting: keeping only the high-RV group lowers the MSE (false)": _ev(
        "a wrong per-group MSE that does not raise the MSE; control: the same claim on the batch SNR holds there"),
    "T7 paper setting: top-p (rho = 0.9, P = 8) lowers the MSE (false)": _ev(
        "a rule keeping fewer high-RV groups still raises the MSE, so what top-p keeps is asserted in the next row; "
        "control: the claim on the batch SNR (7.39 -> 7.73) holds"),
    "T7 paper setting: top-p (rho = 0.9, P = 8) keeps 7 groups, MSE x1.15": _ev(
        "a wrong top-p rule (keeping 6, 4 or 3 groups), in the plain loop or in "
        "ragen_core.math.filtering.select_groups"),
    "T7 paper setting: keeping the high-RV half lowers the MSE (false)": _ev(
        "a wrong per-group MSE; control: the claim on the batch SNR (7.39 -> 9.43) holds"),
    "T7 paper setting: MSE_all <= MSE_S for every proper subset S (P = 8)": _ev(
        "a proper subset with a lower MSE than the full batch"),
    "T7 sum_D g = 0 (construction)": _sanity("checks the construction of the dropped set"),
    "T7 batch SNR rises when dropping sum_D g = 0": _sanity("reduces to sqrt(a) < sqrt(a + b) with b > 0"),
    # ----------------------------------------------------------------- T8
    "T8 paper: |dI| <= 2(delta log(|X||Z|-1) + h2(delta))": _ev(
        "a constant below the adversarial ratio (x0.25), delta without its square root; loose by a factor >= 2",
        equivalent={"rhs x0.5": _T8_LOOSE, "rhs x0.9": _T8_LOOSE}),
    "T8 Z-free (AFW): |dI| <= 2 dbar log|X| + (1+dbar) h2(dbar/(1+dbar))": _ev(
        "a constant 10% too small (small-weight pairs reach ratio > 0.9); the h2 term dropped", sharp=True,
        equivalent={"factor 2 -> 1 on dbar log|X|": "true statement for classical X: the 'T8 classical X' row, "
                                                    "whose instances reach 0.99 of it"}),
    "T8 classical X: |dI| <= dbar log|X| + (1+dbar) h2(dbar/(1+dbar))": _ev(
        "a constant 10% too small (ratio > 0.99 on small-weight pairs); either term dropped", sharp=True),
    "T8 Z-free with dbar <= sqrt(E KL/2)": _sanity(
        "a corollary: the AFW row, Pinsker (row below) and the AFW rhs increasing in dbar; "
        "its best ratio found is 0.46"),
    "T8 Pinsker: E_x TV_x <= sqrt(E_x KL/2)": _ev(
        "a constant 10% too small (small perturbations reach ratio > 0.96); the square root dropped", sharp=True),
    "T8 paper: ratio cap from the classical-X bound <= 1/2": _ev(
        "a cap above 1/2 (grid over delta and sizes 2..8; limit 1/2 as delta -> 0)", sharp=True),
    # ----------------------------------------------------------------- T9
    "T9 dI = Delta_marg - Delta_in": _sanity(
        "the identity H(Z) = H(Z|X) + I (its own row) at two policies, subtracted"),
    "T9 counterexample I = 0.0783 (4 d.p.)": _ev("a value off the paper's 0.0783"),
    "T9 counterexample dI/dt = 0.030 (3 d.p.)": _ev("a value off the paper's 0.030"),
    "T9 dI/dt analytic = finite difference": _ev("a wrong analytic MI gradient (vs a central finite difference)"),
    "T9 'entropy bonus lowers I' (false): dI/dt > 0": _ev("a wrong sign of dI/dt"),
    "T9 entropy-ascent step raises I": _ev("a step that does not raise I"),
    # ----------------------------------------------------------------- MI proxies, exact
    "MI-Seq-Est: E = I_P when scorer = sampler": _sanity("the definition of I_P (same identity as H(Z) = H(Z|X) + I)"),
    "MI-Seq-Est: E <= I_P(sampler), sampler at T != 1": _ev(
        "a proxy above the sampler's MI; equality as T -> 1", sharp=True),
    "E_batch[I_P] <= I(X;Z)": _ev("a batch MI above the pool's MI on average"),
    "Retrieval-Acc under collapse: E = 1/P": _sanity(
        "holds for any winner function (the winners' probabilities sum to 1)"),
    "Fano (Bayes scorer)": _ev("equality for symmetric channels; the log(P-1) term dropped", sharp=True),
    # ----------------------------------------------------------------- Monte Carlo
    "MC validate: E||g_hat - g||^2 = MSE_G": _ev(
        "a simulator or MSE formula off by >= 5% (see detectable error); the noise term dropped"),
    "MC T2 sharper: SNR <= sqrt(G RV_mu)/sigma": _ev(
        "a constant 10% too small: refuted at p = 0.45 (ratio 0.98, draws of positive variance), not only at the "
        "degenerate p = 1/2 (constant draws)", sharp=True),
    "MC T3 floor <= MSE_GRPO": _ev("a floor 10% too large: refuted at p = 0.45 (ratio 0.96) and p = 1/2", sharp=True),
    "MC validate: E||g_hat - g||^2 = MSE_G, simulated noise": _ev("a simulator error >= 5% with the noise simulated"),
    "MC T2 sharper with plain-average sigma^2 (false)": _ev(
        "a wrong counterexample (the corrected claim must not be refuted)"),
    "RL core Dr.GRPO advantage = R - mean(R)": _ev("a wrong Dr.GRPO advantage in ragen_core.math.advantages"),
    "RL core reward_variance(ddof=0) = numpy var": _ev("a wrong variance (e.g. ddof) in ragen_core.math.filtering"),
    "MC T1 sample version (every draw)": _ev(
        "a violation on any single draw (Cauchy-Schwarz equality for G = 2, s_2 = -s_1)", sharp=True),
    "MC validate: E[sample-baseline g_hat] . u = (1 - 1/G) ||g||": _ev(
        "the (1 - 1/G) factor of the sample baseline, or a 5% error"),
    "MC T6 drift E||theta_T - theta_0||^2 (m = 0)": _ev("a drift law off by >= 5%"),
    "MC T6 drift E||theta_T - theta_0||^2 (m = KL direction)": _ev("a drift law off by >= 5% (T instead of T^2)"),
    "MC T7 identity, fixed S: E||gbar_hat_S - gbar_S||^2 = sum sigma^2 / n^2": _ev(
        "1/n instead of 1/n^2, or a 5% error"),
    "RL core filter_groups(top_k_abs) = numpy top-k by variance": _ev(
        "a selection differing from the plain top-k in any batch, including the tie-break (ties are common)"),
    "MC T7 identity with S chosen from the same rollouts (false)": _ev(
        "a wrong counterexample: with S fixed in advance the identity holds"),
    "ragen_core.math.mi mi_seq_est = numpy sequence proxy": _ev(
        "a wrong sequence proxy in ragen_core.math.mi (e.g. log-sum instead of log-mean)"),
    "ragen_core.math.mi retrieval_acc = numpy argmax": _ev("a wrong retrieval accuracy in ragen_core.math.mi"),
    "MC validate: E[MI-Seq-Est] = I_P, scorer = sampler": _ev(
        "a proxy biased by >= 5% (ragen_core.math.mi agrees with the numpy proxy on the checked batches)"),
    "MC validate: E[Retrieval-Acc] = Bayes accuracy": _ev("a retrieval accuracy off by >= 5% (e.g. at chance level)"),
    "MC MI-Seq-Est <= log P (every batch)": _sanity(
        "logsumexp_j L_j - log P >= L_i - log P for any scores L: holds for every input of the numpy proxy"),
    "ragen_core.math.mi per-token estimates = plain-loop reference": _ev(
        "a wrong per-token normalisation or 1/P in ragen_core.math.mi"),
    "ragen_core.math.mi H_hat(Z) = H_hat(Z|X) + MI-Est": _sanity("compares outputs built from the same terms"),
    "ragen_core.math.mi row shift: mi_est unchanged": _ev("a proxy that depends on a per-row constant"),
    "ragen_core.math.mi row shift: retrieval_acc unchanged": _ev(
        "an accuracy that depends on a per-row constant (e.g. prompt and trace indices swapped)"),
    "ragen_core.math.mi |z| = 1: mi_est = mi_seq_est": _sanity("two outputs of the same terms with lengths 1"),
    "ragen_core.math.mi mi_seq_est <= log P": _ev(
        "a batch above log P in ragen_core.math.mi (e.g. the mean of the log-probs in place of the log-mean-exp over "
        "prompts); equality for disjoint supports", sharp=True),
    "MC validate: E[MI-Seq-Est] at sampler T != 1": _ev(
        "an expectation off by >= 5% (e.g. I_P of the sampler instead)"),
    "MC collapse, scorer = sampler: MI-Seq-Est = 0 (every batch)": _sanity(
        "any L with identical columns gives L_i - log((1/P) P exp L_i) = 0: a property of the numpy formula"),
    "MC collapse, arbitrary scorer: E[Retrieval-Acc] = 1/P": _sanity("holds for any winner function"),
    "ragen_core.math.mi collapse: mi_seq_est = 0 (every batch)": _ev("a log P offset in ragen_core.math.mi"),
    "ragen_core.math.mi collapse: retrieval_acc = numpy argmax": _ev(
        "a wrong tie rule (integer scorer: ties are common; a tie is shared, so a lower- or higher-index "
        "tie-break is refuted) or accuracy in ragen_core.math.mi"),
    "ragen_core.math.mi mi_proxies checks": _sanity("skipped: ragen_core.math.mi not importable"),
    # ----------------------------------------------------------------- symbolic
    "S1 2-action: g = c Delta p(1-p), E s^2 = c^2 p(1-p), RV_mu = Delta^2 p(1-p)": _ev(
        "a wrong 2-action derivation (a square dropped)",
        by_construction={"g x2": _SCALED_PROOF, "g x0.9": _SCALED_PROOF}),
    "S2 T1 equality case (sigma = 0)": _ev("T1 not tight in the 2-action case",
                                           by_construction={"rhs x0.9": _SCALED_PROOF}),
    "S3 T2 2-action SNR^2 closed form": _ev("a wrong closed form (sigma^2 dropped)",
                                            by_construction={"closed form x2": _SCALED_PROOF}),
    "S4 T2 sharper bound, 2-action": _ev("a constant 10% too small, the inequality reversed, G dropped"),
    "S4 T2 paper bound, 2-action": _ev("the inequality reversed, G dropped"),
    "S5 T3 GRPO MSE closed form and floor": _ev("a floor 10% too large, the inequality reversed, 1/K dropped"),
    "S5 T3 equality iff p = 1/2": _ev("equality at another p"),
    "S6 T4 convexity and contraction, any finite X and Z": _ev("a wrong second-derivative lemma"),
    "S7 heteroscedastic counterexample (exact rationals)": _ev(
        "a wrong counterexample (the corrected claim must hold)"),
    "S8 T9 dI/dt > 0 (30 digits)": _ev(
        "a float64 dI/dt off the 30-digit value (e.g. the ascent of H(Z|X) instead of per-prompt entropy ascent)",
        by_construction={"value x0.9": "a scaling of a non-zero value the proof computes"}),
    "S9 T2 paper bound, plain-average sigma, 2-action heteroscedastic": _ev(
        "a constant 10% too small, the reversed inequality, the sharper form"),
    "S10 T2 paper bound, plain-average sigma, fails with 3 outcomes": _ev(
        "a wrong counterexample (the corrected claim must hold)"),
}


def entry(name: str) -> Entry | None:
    """The catalog entry of a row (``[tight]`` folded in), or None when the row is not catalogued."""
    return CATALOG.get(name.replace(" [tight]", ""))
