"""T5: the share of the regulariser in the update, rho >= ||g_reg|| / (||g_reg|| + sqrt(RV E||s||^2)), for
KL-to-reference and entropy regularisers; "smaller RV => larger rho" is false (counterexample)."""

from __future__ import annotations

import numpy as np

from .inputs import require_bool, require_rng
from .magnitudes import norm
from .records import Check, bound, counterexample
from .testbed import SoftmaxTestbed, require_testbed, softmax

__all__ = ["check_t5", "check_t5_counterexample"]


def _rho(greg: np.ndarray, gtask: np.ndarray) -> np.ndarray:
    r, t = norm(greg), norm(gtask)
    den = r + t
    return np.where(den > 0, r / np.where(den > 0, den, 1.0), 0.0)


def check_t5(tb: SoftmaxTestbed, rng: np.random.Generator, tight: bool = False) -> list[Check]:
    """T5: rho(x) = ||g_reg|| / (||g_task|| + ||g_reg||) >= ||g_reg|| / (||g_reg|| + sqrt(RV E||s||^2)).

    g_reg = beta grad KL(pi || pi_ref) (random reference) and beta grad H (entropy bonus), beta random.
    Prompts whose regulariser gradient is 0 are left out (rho = 0 there).
    """
    tb, rng, tight = require_testbed("tb", tb), require_rng("rng", rng), require_bool("tight", tight)
    out: list[Check] = []
    g = tb.task_gradient()
    cap = np.sqrt(tb.reward_variance() * tb.score_sq_norm())
    ref = softmax(tb.logits() + rng.normal(size=(tb.X, tb.Z)) * rng.uniform(0.1, 3), axis=1)
    beta = float(np.exp(rng.uniform(np.log(1e-3), np.log(10.0))))
    for check_id, greg in (("t5_rho_kl", beta * tb.kl_gradient(ref)), ("t5_rho_entropy", beta * tb.entropy_gradient())):
        rn = norm(greg)
        keep = rn > 0
        if not keep.any():
            continue
        lower = rn[keep] / (rn[keep] + cap[keep])
        out.append(bound(check_id, lower, _rho(greg, g)[keep], atol=1e-12, tight=tight))
    return out


def check_t5_counterexample() -> list[Check]:
    """"Smaller RV => larger rho" is false: a pure-noise prompt (mu = 0, sigma = 1: RV = 1, g = 0,
    rho = 1) against a 2-action signal prompt (p = 1/2, mu = 1[a=1], sigma = 0: RV = 1/4, rho < 1),
    both with the same entropy regulariser."""
    tb = SoftmaxTestbed(
        features=np.array([[[0.0], [1.0]], [[0.0], [1.0]]]),
        theta=np.array([0.3]),
        mu=np.array([[0.0, 0.0], [0.0, 1.0]]),
        sigma=np.array([1.0, 0.0]),
    )
    def claim(t: SoftmaxTestbed) -> tuple[float, float]:
        # claim: RV_lo < RV_hi  =>  rho_lo >= rho_hi, i.e. rho_hi <= rho_lo
        rv = t.reward_variance()
        rho = _rho(0.1 * t.entropy_gradient(), t.task_gradient())
        return float(rho[int(np.argmax(rv))]), float(rho[int(np.argmin(rv))])

    quiet = SoftmaxTestbed(tb.features, tb.theta, tb.mu, np.zeros(2))
    return [counterexample("t5_smaller_rv_false", *claim(tb),
                           variants={"noise prompt without its noise (sigma = 0)": claim(quiet)})]
