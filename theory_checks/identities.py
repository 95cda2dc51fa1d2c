"""The identities of the theory (section 5), each between two independent computations on a
:class:`~theory_checks.testbed.SoftmaxTestbed`, and the estimator-MSE formulas against brute-force enumeration."""

from __future__ import annotations

import numpy as np

from .inputs import MAX_OUTCOMES, require_int, require_rng
from .magnitudes import norm, scales
from .records import Check, bound, identity
from .testbed import SoftmaxTestbed, _log0, enumerate_outcomes, require_testbed, softmax

__all__ = ["check_identities", "check_estimator_enumeration"]


def check_identities(tb: SoftmaxTestbed, rng: np.random.Generator) -> list[Check]:
    """The identities of the theory, each between two independent computations.

    - RV(x) = Var(mu|x) + E sigma^2  vs  Var(R|x) by enumerating (z, eps = +-sigma(x, z)).
    - RV >= sigma^2: the plain-average noise variance against the enumerated Var(R|x).
    - E_pi s = 0 (sanity: holds by construction of ``score``).
    - H(Z) = H(Z|X) + I with I = E_x KL(pi(.|x) || p(z)); and 0 <= I <= H(X).
    - g does not depend on the baseline (sanity: a consequence of E_pi s = 0, same code path).
    - Regulariser gradients: tabular logit formulas chained through phi equal the score-function
      forms grad KL = E_pi[s log(pi / pi_ref)], grad H = -E_pi[s log pi].
    """
    tb, rng = require_testbed("tb", tb), require_rng("rng", rng)
    out: list[Check] = []
    ms, ps = scales(tb)
    pi = tb.probs()
    # Var(R|x) by enumerating the reward distribution with Rademacher noise.
    sig = np.sqrt(tb.noise_variance())
    vals = np.concatenate([tb.mu - sig, tb.mu + sig], axis=1)
    wts = np.concatenate([pi / 2, pi / 2], axis=1)
    mean_r = np.sum(wts * vals, axis=1)
    var_r = np.sum(wts * (vals - mean_r[:, None]) ** 2, axis=1)
    out.append(identity("rv_decomposition", var_r, tb.reward_variance(), atol=1e-12 * ms**2,
                        variants={"drop E sigma^2": (var_r, tb.signal_variance())}))
    out.append(bound("rv_above_noise", tb.mean_noise_variance(), var_r, atol=1e-12 * ms**2))
    es = np.einsum("xz,xzd->xd", pi, tb.score())
    out.append(identity("score_mean_zero", norm(es), np.zeros(tb.X), atol=1e-13 * ps,
                        variants={"score without the mean subtraction": (
                            norm(np.einsum("xz,xzd->xd", pi, tb.features)), np.zeros(tb.X))}))
    H, Hc, mi = tb.marginal_entropy(), tb.cond_entropy(), tb.mutual_information()
    out.append(identity("entropy_decomposition", H, Hc + mi, atol=1e-13 * (1 + H), variants={"drop I": (H, Hc)}))
    Hx = float(-np.sum(tb.prompt_probs[tb.prompt_probs > 0] * np.log(tb.prompt_probs[tb.prompt_probs > 0])))
    out.append(bound("mi_below_prompt_entropy", mi, Hx, atol=1e-13))
    c = tb.baseline() + rng.normal(size=tb.X) * ms * 10
    gdiff = norm(tb.task_gradient(c) - tb.task_gradient())
    out.append(identity("gradient_baseline_free", gdiff, np.zeros(tb.X), atol=1e-12 * (ms * 11) * ps))
    ref = softmax(tb.logits() + rng.normal(size=(tb.X, tb.Z)), axis=1)
    s = tb.score()
    # 0 log 0 = 0: outcomes whose probability underflows to 0 (logit gaps above ~745) contribute nothing
    logp, logref = _log0(pi), _log0(ref)
    log_ratio = np.where(pi > 0, logp - logref, 0.0)
    kl_sf = np.einsum("xz,xz,xzd->xd", pi, log_ratio, s)
    h_sf = -np.einsum("xz,xz,xzd->xd", pi, logp, s)
    gscale = 1e-12 * ps * (1.0 + np.max(np.abs(logp)) + np.max(np.abs(logref)))
    # wrong tabular forms: the centring term (- KL, + H) dropped
    kl_nocentre = np.einsum("xz,xzd->xd", pi * log_ratio, tb.features)
    h_nocentre = np.einsum("xz,xzd->xd", -pi * logp, tb.features)
    out.append(identity("grad_kl_forms", tb.kl_gradient(ref), kl_sf, atol=gscale,
                        variants={"drop the -KL centring term": (kl_nocentre, kl_sf)}))
    out.append(identity("grad_entropy_forms", tb.entropy_gradient(), h_sf, atol=gscale,
                        variants={"drop the -H centring term": (h_nocentre, h_sf)}))
    return out


def check_estimator_enumeration(tb: SoftmaxTestbed, G: int, baseline: np.ndarray | None = None) -> list[Check]:
    """MSE_G formulas of :meth:`SoftmaxTestbed.estimator_mse` against brute-force enumeration.

    Enumerates all (2Z)^G tuples of (outcome, eps = +-sigma) per prompt and averages
    ||(1/G) sum_k A_k s_k - g||^2 (and the GRPO-normalised version of T3).  Needs (2Z)^G small: at most
    :data:`~theory_checks.inputs.MAX_OUTCOMES` (``ValueError`` otherwise).  ``baseline``: None (the true b(x)), a
    number or ``[X]``.
    """
    tb, G = require_testbed("tb", tb), require_int("G", G, 1)
    if (2 * tb.Z) ** G > MAX_OUTCOMES:
        raise ValueError(f"enumerating (2Z)^G = {2 * tb.Z}^{G} outcome tuples is more than the {MAX_OUTCOMES} "
                         f"allowed (Z = {tb.Z}, G = {G}): use a smaller G")
    baseline = None if baseline is None else tb._baseline_arg(baseline)
    out: list[Check] = []
    pi, s, mu, sig = tb.probs(), tb.score(), tb.mu, np.sqrt(tb.noise_variance())
    b = tb.baseline() if baseline is None else baseline
    g = tb.task_gradient()
    rv = tb.reward_variance()
    mse_enum = np.zeros(tb.X)
    mse_grpo = np.zeros(tb.X)
    for x in range(tb.X):
        # atoms: (z, sign) -> reward, score, prob
        r = np.concatenate([mu[x] - sig[x], mu[x] + sig[x]])
        sc = np.concatenate([s[x], s[x]])
        pr = np.concatenate([pi[x] / 2, pi[x] / 2])
        idx, w = enumerate_outcomes(pr, G)
        ghat = np.mean((r[idx] - b[x])[:, :, None] * sc[idx], axis=1)
        err = ghat - g[x]
        mse_enum[x] = np.sum(w * np.sum(err * err, axis=1))
        if rv[x] > 0:
            errn = ghat / np.sqrt(rv[x]) - g[x] / np.sqrt(rv[x])
            mse_grpo[x] = np.sum(w * np.sum(errn * errn, axis=1))
    ms, ps = scales(tb)
    atol = 1e-12 * (ms * ps) ** 2
    formula = tb.estimator_mse(G, baseline=baseline)
    noiseless = SoftmaxTestbed(tb.features, tb.theta, tb.mu, np.zeros_like(tb.sigma), tb.prompt_probs)
    out.append(identity("mse_enumeration", mse_enum, formula, atol=atol,
                        variants={"drop the noise term E[sigma^2 ||s||^2]": (
                                      mse_enum, noiseless.estimator_mse(G, baseline=baseline)),
                                  "1/G^2 instead of 1/G": (mse_enum, formula / G)}))
    keep = rv > 1e-12 * ms**2
    if keep.any() and baseline is None:
        grpo = tb.grpo_mse(G)[keep]
        out.append(identity("grpo_mse_enumeration", mse_grpo[keep], grpo, atol=atol,
                            variants={"normalised by sqrt(RV_mu) instead of sqrt(RV)": (
                                mse_grpo[keep], formula[keep] / np.maximum(tb.signal_variance()[keep], 1e-300))}))
    return out
