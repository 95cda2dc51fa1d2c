"""Symbolic proofs (sympy): closed forms and inequalities for all parameter values, not sampled.

Scope.  Most proofs are about the 2-action softmax policy pi(1) = p = sigmoid(c theta) with feature
phi = (0, c) (any scale c > 0) and mean reward mu = (m0, m0 + Delta) (any gap Delta > 0; the offset m0
cancels in every advantage, and Delta < 0 is the mirror image); they do not cover policies with more
actions.  Two proofs are general: S6 (T4's convexity and contraction, any finite X and Z, any prompt
weights, channel and template) and the rational counterexamples (S7, S10, which only need one instance).
Each proof records exactly what it covers (see :data:`COVERS`).

To let sympy decide signs, probabilities are written p = t / (1 + t) with t > 0 (a bijection
(0, inf) -> (0, 1)), so "for all p in (0, 1)" becomes "for all positive t", and every factor that must be
positive is a sum/product of positive symbols or an even power of a real expression.  Where that sufficient
test cannot decide (S9), the numerator is split into one-variable quadratics whose sign conditions are
solved exactly over t > 0 (``solveset``).

Proved statements (each a :class:`~theory_checks.records.Check` with ``kind="symbolic"``):

- S1  s_1 = c (1 - p), s_0 = -c p, and g = c Delta p(1-p), E s^2 = c^2 p(1-p), RV_mu = Delta^2 p(1-p).
- S2  T1 equality: ||g|| = sqrt(RV E s^2) when sigma = 0.
- S3  SNR^2 = G p(1-p) Delta^2 / ((1-2p)^2 Delta^2 + sigma^2) for the G-sample estimator with the true baseline.
- S4  T2 sharper: G RV_mu / sigma^2 - SNR^2 = G p(1-p)(1-2p)^2 Delta^4 / (sigma^2 ((1-2p)^2 Delta^2 + sigma^2)) >= 0,
      and T2 paper: G RV / sigma^2 - SNR^2 >= 0.
- S5  T3: MSE_GRPO = c^2 p(1-p)[(1-2p)^2 Delta^2 + sigma^2] / (K (Delta^2 p(1-p) + sigma^2)) >= floor, equality
      iff p = 1/2.
- S6  T4 for any finite X, Z: the lemma d^2/d alpha^2 [P log(P/Q)] = (P'Q - PQ')^2 / (P Q^2) for P, Q affine in
      alpha; every p_alpha(z|x) and p_alpha(z) is affine in alpha (symbolic sizes); hence alpha -> I_alpha is
      convex, and with I_1 = 0 (the channel no longer depends on x), I_alpha <= (1 - alpha) I.
- S7  The heteroscedastic counterexample in exact rationals (p = 2/5): SNR^2 / G = 6/11 > 2/5 (T2), and the
      T3 floor with the plain average, 6/(35 K), exceeds the MSE 22/(175 K).
- S8  T9: dI/dt at logits (2, 0, -5), (2, -5, 0) evaluated symbolically to 30 digits equals the float64 value
      and is positive.
- S9  T2 as stated with z-dependent noise and the plain average sigma^2 = E_pi sigma^2 (issue 12, point 5):
      for 2 actions with noise variances sigma_0^2, sigma_1^2 > 0, SNR^2 <= G RV / sigma^2 for all p.
- S10 ... and its failure with 3 outcomes (exact rationals): SNR^2 / G = 2 for every noise level v on the
      zero-score outcome, while RV / sigma^2 = 1 + 2 / v: the claim fails for every v > 2.

Every proof also carries deliberately wrong variants of its statement (a constant x0.9 or x2, the inequality
reversed, a term dropped; ``Check.mutants``).  A mutant is refuted only by a concrete instance: the mutated
statement is evaluated exactly (sympy substitution of rationals, :func:`refuted_nonneg` /
:func:`refuted_identity`) on a grid of parameter values, and it is caught when one of them makes it false.
A proof that merely fails to go through refutes nothing (``_nonneg`` is only a sufficient test), so a failed
proof is never counted as a caught mutant.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

import numpy as np
import sympy as sp

from .entropy_bonus import entropy_rows, mi_logit_gradient, mi_time_derivative
from .records import Check
from .testbed import softmax

__all__ = ["run_symbolic", "two_action_symbols", "COVERS", "prove_nonneg_quadratic", "refuted_nonneg",
           "refuted_identity", "GRID"]

t = sp.Symbol("t", positive=True)  # p = t / (1 + t)
sigma = sp.Symbol("sigma", positive=True)
G = sp.Symbol("G", positive=True, integer=True)
Delta = sp.Symbol("Delta", positive=True)  # reward gap mu(1) - mu(0)
c_feat = sp.Symbol("c", positive=True)  # feature scale phi = (0, c)
p_of_t = t / (1 + t)

_COVERS_S4 = "2-action softmax, homoscedastic noise, any c, Delta, G, sigma > 0, all p (not more actions)"
_COVERS_S5 = "2-action softmax, homoscedastic noise, any c, Delta, K, sigma > 0, all p (not more actions)"

#: What each proof covers, exactly, by check id (the report prints it next to the proof).
COVERS = {
    "s1_two_action": "2-action softmax, any feature scale c > 0, any reward gap Delta > 0 (offset irrelevant), all p "
                     "in (0, 1)",
    "s2_t1_equality": "2-action softmax, sigma = 0, any c, Delta, all p",
    "s3_t2_closed_form": "2-action softmax, homoscedastic noise sigma > 0, any c, Delta, G, all p",
    "s4_t2_sharper": _COVERS_S4,
    "s4_t2_paper": _COVERS_S4,
    "s5_t3_floor": _COVERS_S5,
    "s5_t3_equality": _COVERS_S5,
    "s6_t4_contraction": "any finite X and Z, any prompt weights w > 0, channel p(z|x) and template q(z) (P, Q > 0 on "
                         "the support)",
    "s7_heteroscedastic_counterexample": "one instance (p = 2/5, noise variance 1 on action 0 only), exact rationals",
    "s8_t9_rate_positive": "one instance (the T9 logits), 30 significant digits",
    "s9_t2_paper_plain_sigma": "2-action softmax with noise variances sigma_0^2, sigma_1^2 > 0, mu = 1[a = 1] "
                               "(any gap and feature scale by rescaling), any G, all p",
    "s10_t2_paper_three_outcomes": "one family (3 outcomes, uniform policy, noise variance v on the zero-score "
                                   "outcome), exact in v",
}


K_sym = sp.Symbol("K", positive=True, integer=True)
u_sym, v_sym = sp.symbols("u v", positive=True)

#: Parameter values at which mutated statements are evaluated (p = t / (1 + t): 1/10, 1/4, 2/5, 1/2, 3/5, 4/5).
GRID: dict[sp.Symbol, tuple[sp.Expr, ...]] = {
    t: (sp.Rational(1, 9), sp.Rational(1, 3), sp.Rational(2, 3), sp.Integer(1), sp.Rational(3, 2), sp.Integer(4)),
    sigma: (sp.Rational(1, 10), sp.Integer(1), sp.Integer(2)),
    G: (sp.Integer(1), sp.Integer(4)),
    Delta: (sp.Integer(1), sp.Integer(3)),
    c_feat: (sp.Integer(1), sp.Integer(2)),
    K_sym: (sp.Integer(1), sp.Integer(8)),
    u_sym: (sp.Rational(1, 100), sp.Integer(1), sp.Integer(4)),
    v_sym: (sp.Rational(1, 100), sp.Integer(1), sp.Integer(4)),
}


def _instances(expr: sp.Expr) -> list[sp.Expr]:
    """expr at every point of :data:`GRID` over its free symbols (non-finite values, e.g. at a pole, dropped).

    ``ValueError`` when a symbol has no grid values, a value is not real, or no point gives a finite value: a claim
    with no instance to test it on would count as "not refuted" without having been tried."""
    if not isinstance(expr, sp.Basic):
        raise TypeError(f"expr must be a sympy expression, got {expr!r} ({type(expr).__name__})")
    syms = sorted(expr.free_symbols, key=str)
    missing = [x for x in syms if x not in GRID]
    if missing:
        raise ValueError(f"no grid values for {missing}")
    out = []
    for vals in itertools.product(*(GRID[x] for x in syms)):
        val = sp.nsimplify(expr.xreplace(dict(zip(syms, vals))))
        if val.is_finite is not False and val not in (sp.nan, sp.zoo):
            if val.is_extended_real is False:
                raise ValueError(f"{expr} is not real at {dict(zip(syms, vals))} (= {val}): a claim expr >= 0 or "
                                 "expr == 0 needs a real expression")
            out.append(val)
    if not out:
        raise ValueError(f"{expr} has no finite value at any point of GRID over {syms}: nothing to test it on")
    return out


def _sign(val: sp.Expr) -> int:
    """Exact sign of a rational; otherwise of a 40-digit evaluation (0 when below 1e-30)."""
    if val.is_Rational:
        return int(sp.sign(val))
    x = sp.N(val, 40)
    return 0 if abs(x) < 1e-30 else (1 if x > 0 else -1)


def refuted_nonneg(expr: sp.Expr) -> bool:
    """The claim ``expr >= 0`` (for all parameter values) is false at a concrete instance of :data:`GRID`."""
    return any(_sign(v) < 0 for v in _instances(expr))


def refuted_identity(expr: sp.Expr) -> bool:
    """The claim ``expr == 0`` (identically) is false at a concrete instance of :data:`GRID`."""
    return any(_sign(v) != 0 for v in _instances(expr))


def _proved(check_id: str, ok: bool, statement: str, started: float, mutants: dict[str, bool] | None = None) -> Check:
    note = f"{statement} ({time.perf_counter() - started:.2f}s)"
    muts = tuple((label, bool(v)) for label, v in (mutants or {}).items())
    return Check(check_id, math.nan, math.nan, bool(ok), math.nan, "symbolic", False, "symbolic", note, muts)


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


def prove_nonneg_quadratic(expr: sp.Expr, u: sp.Symbol, v: sp.Symbol, var: sp.Symbol = t) -> bool:
    """Sufficient test for expr >= 0 for all positive ``var``, u, v, when the numerator of expr is a quadratic
    in (u, v) with coefficients polynomial in ``var`` (and the denominator has a fixed sign).

    numerator N = c00 + c10 u + c01 v + c20 u^2 + c11 u v + c02 v^2; requires c00, c20, c02, c11 >= 0 and, for
    each one-variable bracket c00/2 + b w + d w^2 (w = u or v), that b >= 0 wherever b^2 - 2 c00 d > 0, decided
    exactly over var > 0 by ``solveset`` (a quadratic with a non-negative constant term and leading
    coefficient is >= 0 on w >= 0 iff its linear coefficient is >= 0 or its discriminant is <= 0).
    Returns False (not proved) whenever it cannot decide, a numerator that is not a polynomial in (u, v) included.
    """
    for name, sym in (("u", u), ("v", v), ("var", var)):
        if not isinstance(sym, sp.Symbol):
            raise TypeError(f"{name} must be a sympy Symbol, got {sym!r} ({type(sym).__name__})")
    if u == v:
        raise ValueError(f"u and v must be two different symbols, got {u} twice")
    num, den = sp.fraction(sp.factor(sp.together(expr)))
    if _nonneg(den, strict=True):
        sign = 1
    elif _nonneg(-den, strict=True):
        sign = -1
    else:
        return False
    try:
        poly = sp.Poly(sp.expand(sign * num), u, v)
    except sp.PolynomialError:  # e.g. sqrt(u): not a polynomial in (u, v), outside what this test decides
        return False
    if poly.total_degree() > 2:
        return False

    def coeff(i: int, j: int) -> sp.Expr:
        return sp.factor(poly.coeff_monomial(u**i * v**j))

    c00, c10, c01, c20, c02, c11 = coeff(0, 0), coeff(1, 0), coeff(0, 1), coeff(2, 0), coeff(0, 2), coeff(1, 1)
    if not all(_nonneg(e) for e in (c00, c20, c02, c11)):
        return False
    domain = sp.Interval.open(0, sp.oo)

    def bracket(a0: sp.Expr, b: sp.Expr, d: sp.Expr) -> bool:
        negative = sp.solveset(sp.Lt(b, 0), var, domain)
        positive_disc = sp.solveset(sp.Gt(sp.expand(b**2 - 4 * a0 * d), 0), var, domain)
        return bool(sp.Intersection(negative, positive_disc).is_empty)

    return bracket(c00 / 2, c10, c20) and bracket(c00 / 2, c01, c02)


def two_action_symbols(
    p_sym: sp.Expr | None = None, gap: sp.Expr | int = 1, scale: sp.Expr | int = 1
) -> dict[str, sp.Expr]:
    """2-action quantities derived from the softmax, expressed in p (default p = t / (1 + t)).

    Feature phi = (0, scale), mean reward mu = (0, gap).  Returns pi, score s, mu, baseline b, g, E s^2,
    RV_mu, and E[A^2 s^2] (``second``, with homoscedastic noise sigma^2).
    """
    gap, scale = sp.sympify(gap), sp.sympify(scale)
    theta = sp.Symbol("theta", real=True)
    pi1 = sp.exp(scale * theta) / (1 + sp.exp(scale * theta))
    pi0 = 1 / (1 + sp.exp(scale * theta))
    s1 = sp.diff(sp.log(pi1), theta)
    s0 = sp.diff(sp.log(pi0), theta)
    p = p_of_t if p_sym is None else p_sym
    # e^(c theta) = p / (1 - p)
    sub = {sp.exp(scale * theta): p / (1 - p)}
    s1p = sp.simplify(s1.subs(sub))
    s0p = sp.simplify(s0.subs(sub))
    pi = (1 - p, p)
    s = (s0p, s1p)
    mu = (0, gap)
    b = sum(pi[a] * mu[a] for a in range(2))
    g = sum(pi[a] * (mu[a] - b) * s[a] for a in range(2))
    es2 = sum(pi[a] * s[a] ** 2 for a in range(2))
    rvmu = sum(pi[a] * (mu[a] - b) ** 2 for a in range(2))
    second = sum(pi[a] * ((mu[a] - b) ** 2 + sigma**2) * s[a] ** 2 for a in range(2))
    return {"p": p, "s0": s0p, "s1": s1p, "b": b, "g": g, "es2": es2, "rvmu": rvmu, "second": second}


def run_symbolic() -> list[Check]:
    """All symbolic proofs S1-S10 (see the module docstring), each with its mutated statements."""
    out: list[Check] = []
    q = two_action_symbols(gap=Delta, scale=c_feat)
    p = q["p"]
    D, c = Delta, c_feat

    t0 = time.perf_counter()

    def s1_ok(k: sp.Expr) -> bool:
        return (_is_zero(q["s1"] - c * (1 - p)) and _is_zero(q["s0"] + c * p)
                and _is_zero(q["g"] - k * c * D * p * (1 - p))
                and _is_zero(q["es2"] - c**2 * p * (1 - p)) and _is_zero(q["rvmu"] - D**2 * p * (1 - p)))

    out.append(_proved("s1_two_action",
                       s1_ok(sp.Integer(1)),
                       "s1 = c(1-p), s0 = -cp, g = c Delta p(1-p), E s^2 = c^2 p(1-p), RV_mu = Delta^2 p(1-p)", t0,
                       {"g x2": not refuted_identity(q["g"] - 2 * c * D * p * (1 - p)),
                        "g x0.9": not refuted_identity(q["g"] - sp.Rational(9, 10) * c * D * p * (1 - p)),
                        "RV_mu = Delta p(1-p) (gap not squared)": not refuted_identity(q["rvmu"] - D * p * (1 - p)),
                        "E s^2 = c p(1-p) (scale not squared)": not refuted_identity(q["es2"] - c * p * (1 - p))}))

    t0 = time.perf_counter()
    ok = _is_zero(sp.sqrt(q["rvmu"] * q["es2"]) - q["g"])
    out.append(_proved("s2_t1_equality", ok, "||g|| = sqrt(RV E s^2) for all p, c, Delta", t0,
                       {"rhs x0.9": not refuted_identity(sp.Rational(9, 10) * sp.sqrt(q["rvmu"] * q["es2"]) - q["g"]),
                        "drop sqrt(E s^2)": not refuted_identity(sp.sqrt(q["rvmu"]) - q["g"])}))

    t0 = time.perf_counter()
    mse_G = (q["second"] - q["g"] ** 2) / G
    snr2 = q["g"] ** 2 / mse_G
    closed = G * p * (1 - p) * D**2 / ((1 - 2 * p) ** 2 * D**2 + sigma**2)
    out.append(_proved("s3_t2_closed_form", _is_zero(snr2 - closed),
                       "SNR^2 = G p(1-p) Delta^2/((1-2p)^2 Delta^2 + sigma^2)", t0,
                       {"drop sigma^2": not refuted_identity(snr2 - G * p * (1 - p) * D**2 / ((1 - 2 * p) ** 2 * D**2)),
                        "closed form x2": not refuted_identity(snr2 - 2 * closed)}))

    t0 = time.perf_counter()
    sharp_rhs = G * q["rvmu"] / sigma**2
    gap = sharp_rhs - snr2
    gap_form = G * p * (1 - p) * (1 - 2 * p) ** 2 * D**4 / (sigma**2 * ((1 - 2 * p) ** 2 * D**2 + sigma**2))
    ok = _is_zero(gap - gap_form) and _nonneg(gap)
    paper_rhs = G * (q["rvmu"] + sigma**2) / sigma**2
    out.append(_proved("s4_t2_sharper", ok,
                       "G RV_mu/sigma^2 - SNR^2 = G p(1-p)(1-2p)^2 Delta^4/(sigma^2((1-2p)^2 Delta^2+sigma^2)) >= 0",
                       t0, {"rhs x0.9": not refuted_nonneg(sp.Rational(9, 10) * sharp_rhs - snr2),
                            "reversed": not refuted_nonneg(snr2 - sharp_rhs),
                            "drop G": not refuted_nonneg(sharp_rhs / G - snr2)}))
    out.append(_proved("s4_t2_paper", _nonneg(paper_rhs - snr2), "G RV/sigma^2 - SNR^2 >= 0", t0,
                       {"rhs x0.9": not refuted_nonneg(sp.Rational(9, 10) * paper_rhs - snr2),
                        "reversed": not refuted_nonneg(snr2 - paper_rhs),
                        "drop G": not refuted_nonneg(paper_rhs / G - snr2)}))

    t0 = time.perf_counter()
    K = K_sym
    rv = q["rvmu"] + sigma**2
    mse_grpo = (q["second"] - q["g"] ** 2) / (K * rv)
    closed3 = c**2 * p * (1 - p) * ((1 - 2 * p) ** 2 * D**2 + sigma**2) / (K * (D**2 * p * (1 - p) + sigma**2))
    floor = sigma**2 / rv * q["es2"] / K
    gap3 = mse_grpo - floor
    ok = (_is_zero(mse_grpo - closed3)
          and _is_zero(gap3 - c**2 * D**2 * p * (1 - p) * (1 - 2 * p) ** 2 / (K * (D**2 * p * (1 - p) + sigma**2)))
          and _nonneg(gap3))
    out.append(_proved("s5_t3_floor", ok,
                       "MSE = c^2 p(1-p)[(1-2p)^2 Delta^2+sigma^2]/(K(Delta^2 p(1-p)+sigma^2)) >= floor", t0,
                       {"floor x1.1": not refuted_nonneg(mse_grpo - sp.Rational(11, 10) * floor),
                        "reversed": not refuted_nonneg(floor - mse_grpo),
                        "drop 1/K in the floor": not refuted_nonneg(mse_grpo - floor * K)}))

    def equality_points(expr: sp.Expr) -> set[sp.Expr]:
        return set(sp.solve(sp.numer(sp.factor(sp.together(expr))), t))

    # equality exactly at p = 1/2: p = 1/2 <=> t = 1, the only positive root of the gap's numerator
    ok_eq = _is_zero(gap3.subs(t, 1)) and equality_points(gap3) == {1}
    out.append(_proved("s5_t3_equality", ok_eq, "MSE - floor = 0 at p = 1/2 and nowhere else in (0,1)", t0,
                       {"equality at p = 1/3": not refuted_identity(gap3.subs(t, sp.Rational(1, 2)))}))

    t0 = time.perf_counter()
    out.append(_proved("s6_t4_contraction", _t4_general(),
                       "d^2 I_alpha/d alpha^2 = sum_x,z w_x (P'Q - PQ')^2/(P Q^2) >= 0 and I_1 = 0, "
                       "so I_alpha <= (1-alpha) I", t0,
                       {"lemma without the square": not _t4_lemma_refuted(lambda a, b: a - b, square=False),
                        "lemma with (P'Q + PQ')": not _t4_lemma_refuted(lambda a, b: a + b, square=True)}))

    t0 = time.perf_counter()
    snr2g, claimed, floor_h, mse_h, snr2g_eff = _t2_heteroscedastic_rationals()
    ok = (snr2g == sp.Rational(6, 11) and claimed == sp.Rational(2, 5) and bool(snr2g > claimed)
          and bool(floor_h > mse_h))
    out.append(_proved("s7_heteroscedastic_counterexample", ok,
                       f"SNR^2/G = {snr2g} > {claimed}; "
                       f"T3 plain floor {sp.nsimplify(floor_h)} > MSE {sp.nsimplify(mse_h)} (x 1/K)", t0,
                       {"corrected claim (sigma_eff)": bool(snr2g > snr2g_eff), "reversed": bool(claimed > snr2g)}))

    t0 = time.perf_counter()
    val, num = _t9_derivative()
    ok = abs(float(val) - num) <= 1e-12 * max(1.0, abs(num)) and bool(val > 0)
    # a wrong float64 formula: the ascent of H(Z|X) = sum_x w(x) H(pi(.|x)) (velocity weighted by w(x) = 1/2)
    logits = np.array([[2.0, 0.0, -5.0], [2.0, -5.0, 0.0]])
    pi = softmax(logits, 1)
    w = np.full(2, 0.5)
    velocity = -pi * (np.log(pi) + entropy_rows(pi)[:, None])
    weighted = float(np.sum(mi_logit_gradient(w, logits) * (w[:, None] * velocity)))
    out.append(_proved("s8_t9_rate_positive", ok, f"dI/dt = {sp.N(val, 12)} (float64 {num:.12f})", t0,
                       {"reversed (dI/dt < 0)": bool(val < 0), "value x0.9": abs(float(val) * 0.9 - num) <= 1e-12,
                        "ascent of H(Z|X) (velocity weighted by w(x))": abs(float(val) - weighted) <= 1e-12}))

    t0 = time.perf_counter()
    ok, muts = _t2_paper_two_action_heteroscedastic()
    out.append(_proved("s9_t2_paper_plain_sigma", ok,
                       "G RV/E_pi sigma^2 - SNR^2 >= 0 for all p, sigma_0^2, sigma_1^2 > 0", t0, muts))

    t0 = time.perf_counter()
    ok, statement, muts = _t2_paper_three_outcome_counterexample()
    out.append(_proved("s10_t2_paper_three_outcomes", ok, statement, t0, muts))
    return out


def _t4_lemma(combine: Callable[[sp.Expr, sp.Expr], sp.Expr], square: bool = True) -> bool:
    """The lemma d^2/d alpha^2 [P log(P/Q)] = combine(P'Q, PQ')^2 / (P Q^2) for free affine P, Q (True when it
    holds identically for the given ``combine``; the true form is combine = subtraction, squared)."""
    P0, P1, Q0, Q1, al = sp.symbols("P0 P1 Q0 Q1 alpha_", real=True)
    Pl, Ql = P0 + al * P1, Q0 + al * Q1
    phi = Pl * sp.log(Pl / Ql)
    top = combine(P1 * Ql, Pl * Q1)
    return _is_zero(sp.diff(phi, al, 2) - (top**2 if square else top) / (Pl * Ql**2))


def _t4_lemma_refuted(combine: Callable[[sp.Expr, sp.Expr], sp.Expr], square: bool = True) -> bool:
    """A mutated lemma is false at a concrete instance: P = 1/2 + alpha/3, Q = 1/4 + alpha/5 at alpha = 1/2
    (P, Q > 0), evaluated to 40 digits."""
    P0, P1, Q0, Q1, al = sp.symbols("P0 P1 Q0 Q1 alpha_", real=True)
    Pl, Ql = P0 + al * P1, Q0 + al * Q1
    top = combine(P1 * Ql, Pl * Q1)
    expr = sp.diff(Pl * sp.log(Pl / Ql), al, 2) - (top**2 if square else top) / (Pl * Ql**2)
    pt = {P0: sp.Rational(1, 2), P1: sp.Rational(1, 3), Q0: sp.Rational(1, 4), Q1: sp.Rational(1, 5),
          al: sp.Rational(1, 2)}
    return _sign(expr.xreplace(pt)) != 0


def _t4_general() -> bool:
    """alpha -> I_alpha is convex and I_alpha <= (1 - alpha) I for any finite X, Z (symbolic sizes).

    I_alpha = sum_x sum_z w_x phi(P_xz, Q_z), phi(P, Q) = P log(P / Q), P_xz = (1 - alpha) p(z|x) + alpha q(z),
    Q_z = sum_y w_y P_yz.  Proved: (i) the lemma for free affine P, Q; (ii) P_xz (a generic term) and Q_z (a
    sum over a symbolic number of prompts) have zero second derivative, so I'' is the w-weighted sum of the
    lemma's terms, each a square over P Q^2 > 0 on the support (w > 0); (iii) at alpha = 1, with sum_y w_y = 1,
    Q_z = q_z = P_xz, so every term of I_1 is 0.  A convex function with f(1) = 0 has f(alpha) <= (1 - alpha) f(0).
    """
    if not _t4_lemma(lambda a, b: a - b):
        return False
    al = sp.Symbol("alpha", positive=True)
    x, y, z = sp.symbols("x y z", integer=True, nonnegative=True)
    nX = sp.Symbol("n_X", integer=True, positive=True)
    pch, qt, w = sp.IndexedBase("p"), sp.IndexedBase("q"), sp.IndexedBase("w")
    P = (1 - al) * pch[x, z] + al * qt[z]
    Q = sp.Sum(w[y] * ((1 - al) * pch[y, z] + al * qt[z]), (y, 0, nX - 1))
    affine = sp.diff(P, al, 2) == 0 and sp.simplify(sp.diff(Q, al, 2).doit()) == 0
    Q1 = sp.factor_terms(Q.subs(al, 1).doit()).subs(sp.Sum(w[y], (y, 0, nX - 1)), 1)
    P1 = P.subs(al, 1)
    vanishes = sp.simplify(P1 * sp.log(P1 / Q1)) == 0
    return bool(affine and vanishes)


def _t2_heteroscedastic_rationals() -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """p = 2/5, mu = 1[a = 1], noise variance 1 on action 0 only: SNR^2/G, RV_mu/E sigma^2, the T3 plain floor
    and the GRPO MSE (times K), and RV_mu / sigma_eff^2."""
    qr = two_action_symbols(sp.Rational(2, 5))
    pi, s = ((1 - qr["p"]), qr["p"]), (qr["s0"], qr["s1"])
    # noise variance 1 on action 0 only: E[sigma^2 s^2] = (1-p) * 1 * s0^2
    second_het = sum(pi[a] * (((0, 1)[a] - qr["b"]) ** 2) * s[a] ** 2 for a in range(2)) + pi[0] * s[0] ** 2
    snr2g = sp.nsimplify(qr["g"] ** 2 / (second_het - qr["g"] ** 2))
    claimed = qr["rvmu"] / pi[0]
    rv_h = qr["rvmu"] + pi[0]
    floor_h = pi[0] * qr["es2"] / rv_h  # times 1/K on both sides
    mse_h = (second_het - qr["g"] ** 2) / rv_h
    sigma_eff2 = pi[0] * s[0] ** 2 / qr["es2"]
    return snr2g, claimed, floor_h, mse_h, qr["rvmu"] / sigma_eff2


def _t2_paper_two_action_heteroscedastic() -> tuple[bool, dict[str, bool]]:
    """S9: 2 actions, noise variance u on action 0 and v on action 1, plain average sigma^2 = (1-p) u + p v.

    SNR^2 = G g^2 / (E[(mu - b)^2 s^2] + E[sigma^2 s^2] - g^2) with g = p(1-p), E[(mu-b)^2 s^2] - g^2 =
    p(1-p)(1-2p)^2 and E[sigma^2 s^2] = p(1-p)(p u + (1-p) v) (derived from the softmax below); the claim
    G RV / sigma^2 - SNR^2 >= 0 is decided by :func:`prove_nonneg_quadratic` (its numerator is quadratic in
    u, v).  A reward gap Delta and feature scale c reduce to this case (c cancels; Delta rescales u, v).
    """
    u, v = u_sym, v_sym
    q = two_action_symbols()
    p = q["p"]
    pi, s = (1 - p, p), (q["s0"], q["s1"])
    noise = (u, v)
    second = sum(pi[a] * (((0, 1)[a] - q["b"]) ** 2 + noise[a]) * s[a] ** 2 for a in range(2))
    snr2 = G * q["g"] ** 2 / (second - q["g"] ** 2)
    sbar = sum(pi[a] * noise[a] for a in range(2))
    rhs = G * (q["rvmu"] + sbar) / sbar
    ok = prove_nonneg_quadratic((rhs - snr2) / G, u, v)
    muts = {
        "rhs x0.9": not refuted_nonneg(sp.cancel((sp.Rational(9, 10) * rhs - snr2) / G)),
        "reversed": not refuted_nonneg(sp.cancel((snr2 - rhs) / G)),
        "sharper form RV -> RV_mu": not refuted_nonneg(sp.cancel((G * q["rvmu"] / sbar - snr2) / G)),
    }
    return ok, muts


def _t2_paper_three_outcome_counterexample() -> tuple[bool, str, dict[str, bool]]:
    """S10: X = 1, phi = (-1, 0, 1), theta = 0, mu = s, noise variance v on the middle outcome only.

    Derived from the softmax: pi uniform, s = phi, b = 0, g = E[mu s] = 2/3, E||(mu - b)s - g||^2 = 2/9 and
    E[sigma^2 s^2] = 0, so SNR^2 / G = 2 for every v; RV / E_pi sigma^2 = (2/3 + v/3) / (v/3) = 1 + 2/v.
    """
    v = sp.Symbol("v", positive=True)
    theta = sp.Symbol("theta", real=True)
    phi = (-1, 0, 1)
    logits = [f * theta for f in phi]
    pi = [sp.exp(lg) / sum(sp.exp(m) for m in logits) for lg in logits]
    score = [sp.diff(sp.log(pk), theta) for pk in pi]
    at = {theta: 0}
    pi0 = [sp.simplify(pk.subs(at)) for pk in pi]
    s0 = [sp.simplify(sk.subs(at)) for sk in score]
    mu = s0
    noise = (0, v, 0)
    b = sum(pk * m for pk, m in zip(pi0, mu))
    g = sum(pk * (m - b) * sk for pk, m, sk in zip(pi0, mu, s0))
    second = sum(pk * ((m - b) ** 2 + nk) * sk**2 for pk, m, nk, sk in zip(pi0, mu, noise, s0))
    snr2g = sp.simplify(g**2 / (second - g**2))
    rv = sum(pk * (m - b) ** 2 for pk, m in zip(pi0, mu)) + sum(pk * nk for pk, nk in zip(pi0, noise))
    sbar = sum(pk * nk for pk, nk in zip(pi0, noise))
    claimed = sp.simplify(rv / sbar)
    fails = sp.solveset(sp.Gt(snr2g - claimed, 0), v, sp.Interval.open(0, sp.oo))
    ok = (snr2g == 2 and _is_zero(claimed - (1 + 2 / v)) and fails == sp.Interval.open(2, sp.oo)
          and snr2g > claimed.subs(v, 3))
    statement = f"SNR^2/G = {snr2g} for every v, RV/sigma^2 = {claimed}: the claim fails exactly for v in {fails}"
    seff2 = sp.simplify(
        sum(pk * nk * sk**2 for pk, nk, sk in zip(pi0, noise, s0)) / sum(pk * sk**2 for pk, sk in zip(pi0, s0))
    )
    muts = {
        "corrected claim (sigma_eff)": bool(seff2 != 0 and snr2g > sp.simplify(rv / seff2).subs(v, 3)),
        "reversed": bool(claimed.subs(v, 3) > snr2g),
    }
    return bool(ok), statement, muts


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
