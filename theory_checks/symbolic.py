"""Symbolic proofs (sympy) of the closed forms, valid for every p in (0, 1), not sampled.

Everything is derived from first principles: the 2-action softmax pi(1) = e^theta / (1 + e^theta)
with mu = 1[a = 1], score s_a = d/dtheta log pi(a), noise of variance sigma^2.  To let sympy decide
signs, probabilities are written p = t / (1 + t) with t > 0 (a bijection (0, inf) -> (0, 1)), so
"for all p in (0, 1)" becomes "for all positive t", and every factor that must be positive is a
sum/product of positive symbols or an even power of a real expression.

Proved statements (each a :class:`~theory_checks.bounds.Check` with ``kind="symbolic"``):

- S1  s_1 = 1 - p, s_0 = -p, and g = p(1-p) = E s^2 = RV_mu.
- S2  T1 equality: ||g|| = sqrt(RV E s^2) when sigma = 0.
- S3  SNR^2 = G p(1-p) / ((1-2p)^2 + sigma^2) for the G-sample estimator with the true baseline.
- S4  T2 sharper: G RV_mu / sigma^2 - SNR^2 = G p(1-p)(1-2p)^2 / (sigma^2 ((1-2p)^2 + sigma^2)) >= 0,
      and T2 paper: G RV / sigma^2 - SNR^2 >= 0.
- S5  T3: MSE_GRPO = p(1-p)[(1-2p)^2 + sigma^2] / (K (p(1-p) + sigma^2)); MSE - floor =
      p(1-p)(1-2p)^2 / (K (p(1-p) + sigma^2)) >= 0 with equality iff p = 1/2.
- S6  T4 for binary X and Z: d^2 I_alpha / d alpha^2 = sum_{x,z} w_x (P'_xz Q_z - P_xz Q'_z)^2 / (P_xz Q_z^2) >= 0
      (P_xz = p_alpha(z|x), Q_z = p_alpha(z)), so alpha -> I_alpha is convex; I_alpha <= (1 - alpha) I
      then follows from convexity with I_1 = 0.
- S7  The heteroscedastic counterexample in exact rationals (p = 2/5): SNR^2 / G = 6/11 > 2/5 (T2), and the
      T3 floor with the plain average, 6/(35 K), exceeds the MSE 22/(175 K).
- S8  T9: dI/dt at logits (2, 0, -5), (2, -5, 0) evaluated symbolically to 30 digits equals the float64 value
      and is positive.
"""

from __future__ import annotations

import math
import time

import numpy as np
import sympy as sp

from .bounds import Check, mi_time_derivative

__all__ = ["run_symbolic", "two_action_symbols"]

t = sp.Symbol("t", positive=True)  # p = t / (1 + t)
sigma = sp.Symbol("sigma", positive=True)
G = sp.Symbol("G", positive=True, integer=True)
p_of_t = t / (1 + t)


def _proved(name: str, ok: bool, statement: str, started: float) -> Check:
    note = f"{statement} ({time.perf_counter() - started:.2f}s)"
    return Check(name, math.nan, math.nan, bool(ok), math.nan, "symbolic", False, "symbolic", note)


def _is_zero(expr: sp.Expr) -> bool:
    """expr == 0 identically: ``cancel`` decides it for rational functions; ``simplify`` for the rest (sqrt)."""
    c = sp.cancel(sp.together(expr))
    return c == 0 or sp.simplify(c) == 0


def _nonneg(expr: sp.Expr, strict: bool = False) -> bool:
    """Sufficient test for expr >= 0 (``strict``: > 0) for all values of its positive symbols.

    Factors the rational function, then decides each factor: sympy's assumptions; even powers of
    real bases; denominators must be strictly positive; a sum is decided as a polynomial in one of
    its positive symbols whose coefficients are (recursively) non-negative, one positive for
    ``strict``.  Returns False when it cannot decide (never a false True).
    """
    return _decide(sp.factor(sp.cancel(sp.together(expr))), strict)


def _decide(e: sp.Expr, strict: bool) -> bool:
    if (e.is_positive if strict else e.is_nonnegative) is True:
        return True
    if e.is_Mul:
        return all(_decide(a, strict) for a in e.args)
    if e.is_Pow and e.exp.is_integer:
        if e.exp.is_even and e.base.is_real and not strict:
            return True
        if e.exp > 0:
            return _decide(e.base, strict)
        return _decide(e.base, True)  # a denominator must be > 0
    if e.is_Add:
        for sym in sorted(e.free_symbols, key=str):
            if not sym.is_positive:
                continue
            coeffs = [sp.factor(c) for c in sp.Poly(sp.expand(e), sym).all_coeffs() if c != 0]
            if all(_decide(c, False) for c in coeffs) and (not strict or any(_decide(c, True) for c in coeffs)):
                return True
        return False
    return False


def two_action_symbols(p_sym: sp.Expr | None = None) -> dict[str, sp.Expr]:
    """2-action quantities derived from the softmax, expressed in p (default p = t / (1 + t)).

    Returns pi, score s, mu, baseline b, g, E s^2, RV_mu, and E[A^2 s^2] without and with noise.
    """
    theta = sp.Symbol("theta", real=True)
    pi1 = sp.exp(theta) / (1 + sp.exp(theta))
    pi0 = 1 / (1 + sp.exp(theta))
    s1 = sp.diff(sp.log(pi1), theta)
    s0 = sp.diff(sp.log(pi0), theta)
    p = p_of_t if p_sym is None else p_sym
    # e^theta = p / (1 - p)
    sub = {sp.exp(theta): p / (1 - p)}
    s1p = sp.simplify(s1.subs(sub))
    s0p = sp.simplify(s0.subs(sub))
    pi = (1 - p, p)
    s = (s0p, s1p)
    mu = (0, 1)
    b = sum(pi[a] * mu[a] for a in range(2))
    g = sum(pi[a] * (mu[a] - b) * s[a] for a in range(2))
    es2 = sum(pi[a] * s[a] ** 2 for a in range(2))
    rvmu = sum(pi[a] * (mu[a] - b) ** 2 for a in range(2))
    second = sum(pi[a] * ((mu[a] - b) ** 2 + sigma**2) * s[a] ** 2 for a in range(2))
    return {"p": p, "s0": s0p, "s1": s1p, "b": b, "g": g, "es2": es2, "rvmu": rvmu, "second": second}


def run_symbolic() -> list[Check]:
    """All symbolic proofs S1-S8 (see the module docstring)."""
    out: list[Check] = []
    q = two_action_symbols()
    p = q["p"]

    t0 = time.perf_counter()
    ok = (
        _is_zero(q["s1"] - (1 - p))
        and _is_zero(q["s0"] + p)
        and _is_zero(q["g"] - p * (1 - p))
        and _is_zero(q["es2"] - p * (1 - p))
        and _is_zero(q["rvmu"] - p * (1 - p))
    )
    out.append(_proved("S1 2-action: g = p(1-p) = E s^2 = RV_mu", ok, "s1 = 1-p, s0 = -p, g = E s^2 = RV_mu = p(1-p) for all p in (0,1)", t0))

    t0 = time.perf_counter()
    ok = _is_zero(sp.sqrt(q["rvmu"] * q["es2"]) - q["g"])
    out.append(_proved("S2 T1 equality case (sigma = 0)", ok, "||g|| = sqrt(RV E s^2) for all p in (0,1)", t0))

    t0 = time.perf_counter()
    mse_G = (q["second"] - q["g"] ** 2) / G
    snr2 = q["g"] ** 2 / mse_G
    closed = G * p * (1 - p) / ((1 - 2 * p) ** 2 + sigma**2)
    ok = _is_zero(snr2 - closed)
    out.append(_proved("S3 T2 2-action SNR^2 closed form", ok, "SNR^2 = G p(1-p)/((1-2p)^2 + sigma^2)", t0))

    t0 = time.perf_counter()
    gap = G * q["rvmu"] / sigma**2 - snr2
    gap_form = G * p * (1 - p) * (1 - 2 * p) ** 2 / (sigma**2 * ((1 - 2 * p) ** 2 + sigma**2))
    ok = _is_zero(gap - gap_form) and _nonneg(gap)
    ok_paper = _nonneg(G * (q["rvmu"] + sigma**2) / sigma**2 - snr2)
    out.append(_proved("S4 T2 sharper bound, 2-action", ok, "G RV_mu/sigma^2 - SNR^2 = G p(1-p)(1-2p)^2/(sigma^2((1-2p)^2+sigma^2)) >= 0", t0))
    out.append(_proved("S4 T2 paper bound, 2-action", ok_paper, "G RV/sigma^2 - SNR^2 >= 0", t0))

    t0 = time.perf_counter()
    K = sp.Symbol("K", positive=True, integer=True)
    rv = q["rvmu"] + sigma**2
    mse_grpo = (q["second"] - q["g"] ** 2) / (K * rv)
    closed3 = p * (1 - p) * ((1 - 2 * p) ** 2 + sigma**2) / (K * (p * (1 - p) + sigma**2))
    floor = sigma**2 / rv * q["es2"] / K
    gap3 = mse_grpo - floor
    ok = _is_zero(mse_grpo - closed3) and _is_zero(gap3 - p * (1 - p) * (1 - 2 * p) ** 2 / (K * (p * (1 - p) + sigma**2))) and _nonneg(gap3)
    # equality exactly at p = 1/2: p = 1/2 <=> t = 1, the only positive root of the gap's numerator
    roots = sp.solve(sp.numer(sp.factor(sp.together(gap3))), t)
    ok_eq = _is_zero(gap3.subs(t, 1)) and set(roots) == {1}
    out.append(_proved("S5 T3 GRPO MSE closed form and floor", ok, "MSE = p(1-p)[(1-2p)^2+sigma^2]/(K(p(1-p)+sigma^2)) >= floor", t0))
    out.append(_proved("S5 T3 equality iff p = 1/2", ok_eq, "MSE - floor = 0 at p = 1/2 and nowhere else in (0,1)", t0))

    t0 = time.perf_counter()
    out.append(_proved("S6 T4 convexity, binary X and Z", _t4_convexity(), "d^2 I_alpha/d alpha^2 = sum w (P'Q - PQ')^2/(P Q^2) >= 0", t0))

    t0 = time.perf_counter()
    qr = two_action_symbols(sp.Rational(2, 5))
    # noise variance 1 on action 0 only: E[sigma^2 s^2] = (1-p) * 1 * s0^2
    second_het = sum(((1 - qr["p"]), qr["p"])[a] * (((0, 1)[a] - qr["b"]) ** 2) * (qr["s0"], qr["s1"])[a] ** 2 for a in range(2))
    second_het += (1 - qr["p"]) * qr["s0"] ** 2
    snr2g = sp.nsimplify(qr["g"] ** 2 / (second_het - qr["g"] ** 2))
    claimed = qr["rvmu"] / (1 - qr["p"])
    rv_h = qr["rvmu"] + (1 - qr["p"])
    floor_h = (1 - qr["p"]) * qr["es2"] / rv_h  # times 1/K on both sides
    mse_h = (second_het - qr["g"] ** 2) / rv_h
    ok = snr2g == sp.Rational(6, 11) and claimed == sp.Rational(2, 5) and bool(snr2g > claimed) and bool(floor_h > mse_h)
    out.append(_proved("S7 heteroscedastic counterexample (exact rationals)", ok, f"SNR^2/G = {snr2g} > {claimed}; T3 plain floor {sp.nsimplify(floor_h)} > MSE {sp.nsimplify(mse_h)} (x 1/K)", t0))

    t0 = time.perf_counter()
    val, num = _t9_derivative()
    ok = abs(float(val) - num) <= 1e-12 * max(1.0, abs(num)) and bool(val > 0)
    out.append(_proved("S8 T9 dI/dt > 0 (30 digits)", ok, f"dI/dt = {sp.N(val, 12)} (float64 {num:.12f})", t0))
    return out


def _t4_convexity() -> bool:
    """Binary X, Z: alpha -> I_alpha is convex for all a, b, c, w, alpha in (0, 1).

    I_alpha = sum_{x,z} w_x phi(P_xz, Q_z) with phi(P, Q) = P log(P / Q), P_xz = p_alpha(z|x) and
    Q_z = sum_x w_x P_xz, both affine in alpha.  Proved: (i) the lemma
    d^2/d alpha^2 phi(P0 + alpha P1, Q0 + alpha Q1) = (P1 Q - P Q1)^2 / (P Q^2) for free symbols;
    (ii) every P_xz and Q_z is affine in alpha (second derivative 0), so I'' is the sum of the lemma's
    terms weighted by w_x; (iii) w_x, P_xz, Q_z > 0 on (0, 1)^5, so every term is >= 0.
    """
    P0, P1, Q0, Q1, al = sp.symbols("P0 P1 Q0 Q1 alpha_", real=True)
    Pl, Ql = P0 + al * P1, Q0 + al * Q1
    phi = Pl * sp.log(Pl / Ql)
    if not _is_zero(sp.diff(phi, al, 2) - (P1 * Ql - Pl * Q1) ** 2 / (Pl * Ql**2)):
        return False
    a, b, c, w, alpha = sp.symbols("a b c w alpha", positive=True)
    P = [[(1 - alpha) * (1 - a) + alpha * (1 - c), (1 - alpha) * a + alpha * c],
         [(1 - alpha) * (1 - b) + alpha * (1 - c), (1 - alpha) * b + alpha * c]]
    wx = [w, 1 - w]
    Q = [wx[0] * P[0][z] + wx[1] * P[1][z] for z in range(2)]
    affine = all(sp.diff(e, alpha, 2) == 0 for e in (*P[0], *P[1], *Q))
    vs = sp.symbols("v_a v_b v_c v_w v_alpha", positive=True)
    sub = {u: v / (1 + v) for u, v in zip((a, b, c, w, alpha), vs)}
    positive = all(_nonneg(e.subs(sub), strict=True) for e in (*wx, *P[0], *P[1], *Q))
    return bool(affine and positive)


def _t9_derivative() -> tuple[sp.Expr, float]:
    """dI/dt along per-prompt entropy ascent at the T9 logits, symbolically and in float64."""
    logits = [[2, 0, -5], [2, -5, 0]]
    ls = sp.symbols("l0:6", real=True)
    L = [[ls[3 * x + z] for z in range(3)] for x in range(2)]
    pi = [[sp.exp(L[x][z]) / sum(sp.exp(L[x][k]) for k in range(3)) for z in range(3)] for x in range(2)]
    Q = [sp.Rational(1, 2) * (pi[0][z] + pi[1][z]) for z in range(3)]
    mi = sum(sp.Rational(1, 2) * pi[x][z] * sp.log(pi[x][z] / Q[z]) for x in range(2) for z in range(3))
    H = [-sum(pi[x][z] * sp.log(pi[x][z]) for z in range(3)) for x in range(2)]
    vel = {L[x][z]: sp.diff(H[x], L[x][z]) for x in range(2) for z in range(3)}
    dIdt = sum(sp.diff(mi, v) * vel[v] for v in ls)
    at = {ls[3 * x + z]: logits[x][z] for x in range(2) for z in range(3)}
    val = sp.N(dIdt.subs(at), 30)
    num = mi_time_derivative(np.full(2, 0.5), np.array(logits, dtype=float))
    return val, num
