"""T9: what an entropy bonus does to the mutual information.

dI = dH(Z) - dH(Z|X) (identity); "an entropy bonus lowers I" is false (counterexample at the paper's logits,
I = 0.0783, dI/dt = +0.030 along per-prompt entropy ascent).
"""

from __future__ import annotations

import math

import numpy as np

from .inputs import require_array, require_distribution
from .records import Check, counterexample, identity
from .testbed import SoftmaxTestbed, _log0, channel_mutual_information, require_testbed, softmax

__all__ = ["mi_logit_gradient", "mi_time_derivative", "check_t9", "check_t9_counterexample", "entropy_rows"]


def _w_logits(w: object, logits: object) -> tuple[np.ndarray, np.ndarray]:
    """w: prompt weights [X] (a probability vector); logits: finite [X, Z]."""
    logits = require_array("logits", logits, 2)
    w = require_distribution("w", w, 1)
    if w.shape[0] != logits.shape[0]:
        raise ValueError(f"w must have one weight per row of logits ({logits.shape[0]}), got {w.shape[0]}")
    return w, logits


def mi_logit_gradient(w: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """dI/d logit(x, z) = w(x) pi(z|x) [log(pi(z|x) / p(z)) - KL(pi(.|x) || p)] for a tabular softmax channel
    (w: prompt weights ``[X]``, a probability vector; logits: finite ``[X, Z]``); 0 where pi(z|x) underflows to 0."""
    w, logits = _w_logits(w, logits)
    pi = softmax(logits, 1)
    m = w @ pi
    # 0 log(0 / m) = 0: an outcome whose probability underflows to 0 contributes nothing (never NaN); pi > 0 = m
    # only on a prompt of weight 0, whose row is multiplied by w(x) = 0
    lr = np.where((pi > 0) & (m > 0)[None, :], _log0(pi) - _log0(m)[None, :], 0.0)
    kl = np.sum(pi * lr, axis=1, keepdims=True)
    return w[:, None] * pi * (lr - kl)


def mi_time_derivative(w: np.ndarray, logits: np.ndarray) -> float:
    """dI/dt along per-prompt entropy ascent d logit_x/dt = grad_{logit_x} H(pi(.|x)) = -pi (log pi + H)
    (arguments as in :func:`mi_logit_gradient`)."""
    w, logits = _w_logits(w, logits)
    pi = softmax(logits, 1)
    logp = _log0(pi)  # 0 log 0 = 0 where a probability underflows
    Hx = -np.sum(pi * logp, axis=1, keepdims=True)
    velocity = -pi * (logp + Hx)
    return float(np.sum(mi_logit_gradient(w, logits) * velocity))


def _mi_of_logits(w: np.ndarray, logits: np.ndarray) -> float:
    return channel_mutual_information(w, softmax(logits, 1))


def check_t9(tb: SoftmaxTestbed, tb2: SoftmaxTestbed) -> list[Check]:
    """T9 decomposition between two policies: dI = dH(Z) - dH(Z|X) (I from the KL form, H's from entropies)."""
    tb, tb2 = require_testbed("tb", tb), require_testbed("tb2", tb2)
    dI = tb2.mutual_information() - tb.mutual_information()
    dmarg = tb2.marginal_entropy() - tb.marginal_entropy()
    din = tb2.cond_entropy() - tb.cond_entropy()
    scale = 1.0 + tb.marginal_entropy() + tb2.marginal_entropy()
    return [identity("t9_decomposition", dI, dmarg - din, atol=1e-13 * scale,
                     variants={"dI = Delta_marg + Delta_in": (dI, dmarg + din)})]


def check_t9_counterexample() -> list[Check]:
    """T9 counterexample: I = 0.0783 and dI/dt = +0.030 > 0 along entropy ascent.

    dI/dt is computed analytically (chain rule through mi_logit_gradient) and, independently, as a
    central finite difference of I along the ascent direction; a small explicit entropy-ascent step is
    also shown to raise I.
    """
    tb = SoftmaxTestbed.entropy_bonus_counterexample()
    w, logits = tb.prompt_probs, tb.logits()
    I0 = tb.mutual_information()
    dIdt = mi_time_derivative(w, logits)
    pi = tb.probs()
    vel = -pi * (np.log(pi) + entropy_rows(pi)[:, None])
    h = 1e-5
    fd = (_mi_of_logits(w, logits + h * vel) - _mi_of_logits(w, logits - h * vel)) / (2 * h)
    step = _mi_of_logits(w, logits + 0.05 * vel)
    # wrong formulas evaluated on the same logits: I in bits; the ascent of H(Z|X) = sum_x w(x) H(pi(.|x))
    # (velocity weighted by w(x): half the paper's dI/dt); the MI logit gradient without its -KL centring
    I_bits = I0 / math.log(2)
    dIdt_weighted = float(np.sum(mi_logit_gradient(w, logits) * (w[:, None] * vel)))
    pi_m = w @ pi
    grad_nocentre = w[:, None] * pi * (np.log(pi) - np.log(pi_m)[None, :])
    dIdt_nocentre = float(np.sum(grad_nocentre * vel))
    # control instance where the claim holds: symmetric prompts, entropy ascent makes them alike (dI/dt < 0)
    sym = np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    pi_s = softmax(sym, 1)
    vel_s = -pi_s * (np.log(pi_s) + entropy_rows(pi_s)[:, None])
    control = {"symmetric prompts, logits (2, 0, 0) and (0, 2, 0), where the claim holds": (
        mi_time_derivative(w, sym), 0.0)}
    control_step = {"symmetric prompts, logits (2, 0, 0) and (0, 2, 0), where the claim holds": (
        _mi_of_logits(w, sym + 0.05 * vel_s), _mi_of_logits(w, sym))}
    return [
        identity("t9_counterexample_mi", round(I0, 4), 0.0783, rtol=0.0, atol=1e-12,
                 variants={"I in bits (log2)": (round(I_bits, 4), 0.0783)}),
        identity("t9_counterexample_rate", round(dIdt, 3), 0.030, rtol=0.0, atol=1e-12,
                 variants={"ascent of H(Z|X) (velocity weighted by w(x))": (round(dIdt_weighted, 3), 0.030)}),
        identity("t9_rate_finite_difference", dIdt, fd, rtol=1e-6,
                 variants={"MI logit gradient without its -KL centring": (dIdt_nocentre, fd)}),
        counterexample("t9_entropy_bonus_false", dIdt, 0.0, variants=control),
        counterexample("t9_ascent_step", step, I0, variants=control_step),
    ]


def entropy_rows(p: np.ndarray) -> np.ndarray:
    """Row entropies H(p[x, :]) of ``p [X, Z]``, each row a probability vector."""
    p = require_distribution("p", p, 2)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)
