"""Monte Carlo checks of the estimator-level results (PAPER.md sections 2, 3 and 5).

Harness rule (PAPER.md section 5, "harness note"): first validate the simulator, i.e. its sample mean
must agree with the exact value from :class:`SoftmaxTestbed` within a confidence interval; only then
compare with a bound, and flag a violation only when the whole interval clears the bound.

Confidence intervals.  Every simulated statistic Y is bounded, Y in [a, b] (noise is Rademacher,
eps = +-sigma, so rewards, scores and estimators are bounded; the range is computed from the testbed).
For n i.i.d. draws the half-width at level delta_i is

    t = min( (b - a) sqrt(log(4 / delta_i) / (2 n)),                                 Hoeffding, delta_i / 2
             sqrt(2 V_n log(8 / delta_i) / n) + 7 (b - a) log(8 / delta_i) / (3 (n - 1)) )
                                                          empirical Bernstein (Maurer & Pontil 2009), delta_i / 2

so P(|Ybar - E Y| > t) <= delta_i (union bound over the two).  Bonferroni over the whole run:
delta_i = DELTA / M_INTERVALS with DELTA = 1e-3, and the run asserts that it uses at most M_INTERVALS
intervals.  All draws come from one seeded ``np.random.Generator``: the same seed gives the same numbers.

Checks (each a :class:`~theory_checks.bounds.Check` with ``method="monte-carlo"``):

- T2 SNR: simulate g_hat = (1/G) sum_k (R_k - b) s_k; validate E||g_hat - g||^2 against ``estimator_mse``;
  bound SNR <= sqrt(G RV_mu) / sigma; reproduce the heteroscedastic counterexample.
- T3 GRPO floor: simulate the population-normalised estimator; validate its MSE; floor <= MSE.
- T1 sample version: ||(1/G) sum_k (R_k - Rbar) s_k|| <= sqrt(Var_hat) sqrt(mean_k ||s_k||^2) on every draw,
  with the RL core's Dr.GRPO advantages and ``reward_variance`` (ddof = 0) when importable; validates
  E[(1/G) sum_k (R_k - Rbar) s_k] = (1 - 1/G) g.
- T6 drift: theta_T - theta_0 = eta sum_t (m + xi_t), xi_t = g_hat_t - g; validate
  E||theta_T - theta_0||^2 = eta^2 (T MSE_G + T^2 ||m||^2).
- T7: the identity for a fixed subset, and the failure of independence when the subset is chosen from the
  same rollouts (top-k by sample reward variance, with ``ragen_core.filtering.filter_groups``).
- MI proxies (section 2) with ``ragen_core.mi.mi_proxies`` (skipped with a "not available" status when it
  cannot be imported), against an independent numpy implementation of the sequence-level proxy:
  E[MI-Seq-Est] = I_P (scorer = sampler), <= I_P(sampler) at temperature != 1, <= log P on every batch,
  Retrieval-Acc = 1/P in expectation under collapse, Fano for the Bayes scorer, the entropy identity and
  the row-shift invariance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bounds import Check, bayes_accuracy, bound, expected_seq_proxy, fano_lower, identity
from .testbed import SoftmaxTestbed, channel_mutual_information, softmax

DELTA = 1e-3
M_INTERVALS = 400

__all__ = [
    "DELTA",
    "M_INTERVALS",
    "Interval",
    "MCBudget",
    "seq_proxy_terms",
    "run_montecarlo",
    "core_available",
]


def core_available() -> dict[str, str]:
    """Which RL-core pieces import: {name: "available" | "not available (<error>)"}."""
    out = {}
    for mod in ("ragen_core.mi", "ragen_core.filtering", "ragen_core.advantages"):
        try:
            __import__(mod)
            out[mod] = "available"
        except Exception as exc:  # any import failure means "skip"
            out[mod] = f"not available ({type(exc).__name__}: {exc})"
    return out


@dataclass
class Interval:
    """Mean of n bounded i.i.d. draws with its half-width (see the module docstring)."""

    mean: float
    halfwidth: float
    n: int
    lo_range: float
    hi_range: float

    @property
    def lower(self) -> float:
        return self.mean - self.halfwidth

    @property
    def upper(self) -> float:
        return self.mean + self.halfwidth


@dataclass
class MCBudget:
    """Bonferroni bookkeeping: hands out intervals at level DELTA / M_INTERVALS and counts them."""

    delta: float = DELTA
    m: int = M_INTERVALS
    used: int = 0
    log: list[str] = field(default_factory=list)

    def interval(self, y: np.ndarray, lo: float, hi: float, what: str = "") -> Interval:
        """Confidence interval for E y from draws ``y`` known to lie in [lo, hi]."""
        y = np.asarray(y, dtype=np.float64).ravel()
        n = y.size
        if n < 2:
            raise ValueError("need at least 2 draws")
        tol = 1e-9 * max(1.0, abs(lo), abs(hi))
        if y.min() < lo - tol or y.max() > hi + tol:
            raise AssertionError(f"{what}: draws outside the declared range [{lo}, {hi}]: [{y.min()}, {y.max()}]")
        self.used += 1
        if self.used > self.m:
            raise AssertionError(f"more than M_INTERVALS={self.m} confidence intervals requested")
        di = self.delta / self.m
        R = hi - lo
        hoeff = R * math.sqrt(math.log(4 / di) / (2 * n))
        var = float(np.var(y, ddof=1))
        eb = math.sqrt(2 * var * math.log(8 / di) / n) + 7 * R * math.log(8 / di) / (3 * (n - 1))
        self.log.append(what)
        return Interval(float(y.mean()), min(hoeff, eb), n, lo, hi)


def _validate(name: str, iv: Interval, exact: float) -> Check:
    """Simulator validation: |mean - exact| <= half-width; ratio = |mean - exact| / half-width."""
    err = abs(iv.mean - exact)
    ok = err <= iv.halfwidth
    note = f"n={iv.n}, mean={iv.mean:.6g}, exact={exact:.6g}, halfwidth={iv.halfwidth:.3g}"
    return Check(name, iv.mean, exact, bool(ok), err / iv.halfwidth if iv.halfwidth > 0 else 0.0, "mc-validation", False, "monte-carlo", note)


def _mc_bound(name: str, est: float, lower: float, rhs: float, note: str = "", tight: bool = False) -> Check:
    """Upper bound est <= rhs: a violation only when the lower confidence limit clears it."""
    ok = lower <= rhs * (1 + 1e-12)
    ratio = est / rhs if rhs > 0 else (math.inf if est > 0 else 0.0)
    return Check(name, est, rhs, bool(ok), ratio, "bound", tight, "monte-carlo", note)


def _mc_counterexample(name: str, est: float, lower: float, claimed: float, note: str = "") -> Check:
    """A claimed est <= claimed is reproduced false only when the lower confidence limit exceeds it."""
    ok = lower > claimed
    return Check(name, est, claimed, bool(ok), est / claimed if claimed > 0 else math.inf, "counterexample", False, "monte-carlo", note)


# ------------------------------------------------------------------------------------------- sampling
def _sample(rng: np.random.Generator, probs: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Categorical draws by inverse CDF: indices with P(i) = probs[i]."""
    cdf = np.cumsum(probs)
    cdf[-1] = 1.0
    return np.minimum(np.searchsorted(cdf, rng.random(shape), side="right"), probs.size - 1)


def _draw_group(rng: np.random.Generator, tb: SoftmaxTestbed, x: int, n: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """n groups of G rollouts of prompt x: rewards R [n, G] (Rademacher noise) and scores s [n, G, d]."""
    idx = _sample(rng, tb.probs()[x], (n, G))
    sig = np.sqrt(tb.noise_variance()[x])
    eps = np.where(rng.random((n, G)) < 0.5, -1.0, 1.0) * sig[idx]
    return tb.mu[x][idx] + eps, tb.score()[x][idx]


def _err_range(tb: SoftmaxTestbed, x: int) -> float:
    """max ||g_hat - g|| <= max_z (|mu - b| + sigma) ||s|| + ||g||  (any G)."""
    s = tb.score()[x]
    a = np.abs(tb.mu[x] - tb.baseline()[x]) + np.sqrt(tb.noise_variance()[x])
    return float(np.max(a * np.linalg.norm(s, axis=1)) + np.linalg.norm(tb.task_gradient()[x]))


def _estimator_errors(rng: np.random.Generator, tb: SoftmaxTestbed, x: int, n: int, G: int, chunk: int = 50_000) -> np.ndarray:
    """n draws of ||g_hat - g||^2 for the G-sample true-baseline estimator of prompt x."""
    out = np.empty(n)
    b, g = tb.baseline()[x], tb.task_gradient()[x]
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        R, s = _draw_group(rng, tb, x, m, G)
        ghat = np.mean((R - b)[:, :, None] * s, axis=1)
        out[start : start + m] = np.sum((ghat - g) ** 2, axis=1)
    return out


# ------------------------------------------------------------------------------------------- T2 / T3
def mc_t2_t3(rng: np.random.Generator, budget: MCBudget, n: int, plot: dict[str, Any]) -> list[Check]:
    """T2 and T3 on the 2-action family (for the plots) and on random single-prompt testbeds."""
    checks: list[Check] = []
    G = 8
    sigma = 0.5
    pts: list[dict[str, float]] = []
    cases: list[tuple[str, SoftmaxTestbed]] = [
        (f"2-action p={p}", SoftmaxTestbed.two_action(p, sigma)) for p in (0.05, 0.15, 0.3, 0.5, 0.7, 0.9)
    ]
    for _ in range(4):
        cases.append(("random", SoftmaxTestbed.random(rng, X=1, Z=int(rng.integers(2, 6)), d=int(rng.integers(1, 4)),
                                                      temperature=float(rng.uniform(0.3, 3)), sigma_scale=float(rng.uniform(0.2, 2)), mu_offset=0.0)))
    for label, tb in cases:
        B = _err_range(tb, 0)
        y = _estimator_errors(rng, tb, 0, n, G)
        iv = budget.interval(y, 0.0, B * B, f"T2 {label}")
        exact = float(tb.estimator_mse(G)[0])
        checks.append(_validate("MC validate: E||g_hat - g||^2 = MSE_G", iv, exact))
        gn = float(np.linalg.norm(tb.task_gradient()[0]))
        s2 = float(tb.sigma[0] ** 2)
        bnd = math.sqrt(G * float(tb.signal_variance()[0]) / s2)
        snr = gn / math.sqrt(iv.mean)
        snr_lower = gn / math.sqrt(iv.upper)
        checks.append(_mc_bound("MC T2 sharper: SNR <= sqrt(G RV_mu)/sigma", snr, snr_lower, bnd, f"{label}, G={G}"))
        checks.append(_mc_bound("MC T2 paper: SNR <= sqrt(G RV)/sigma", snr, snr_lower,
                                math.sqrt(G * float(tb.reward_variance()[0]) / s2), f"{label}, G={G}"))
        # T3: population-normalised GRPO estimator (independent draws)
        rv = float(tb.reward_variance()[0])
        y3 = _estimator_errors(rng, tb, 0, n, G) / rv
        iv3 = budget.interval(y3, 0.0, B * B / rv, f"T3 {label}")
        exact3 = float(tb.grpo_mse(G)[0])
        checks.append(_validate("MC validate: GRPO MSE (T3)", iv3, exact3))
        floor = s2 / rv * float(tb.score_sq_norm()[0]) / G
        # floor <= MSE: violated only if the whole interval lies below the floor
        ok = iv3.upper >= floor * (1 - 1e-12)
        checks.append(Check("MC T3 floor <= MSE_GRPO", floor, iv3.mean, bool(ok), floor / iv3.mean, "bound", False, "monte-carlo", f"{label}, K={G}"))
        if label.startswith("2-action"):
            pts.append({"p": float(tb.probs()[0, 1]), "rv_mu": float(tb.signal_variance()[0]), "rv": rv,
                        "snr": snr, "snr_lo": snr_lower, "snr_hi": gn / math.sqrt(max(iv.lower, 1e-300)),
                        "grpo_mse": iv3.mean, "grpo_lo": iv3.lower, "grpo_hi": iv3.upper})
    plot["snr_points"] = pts
    plot["snr_G"] = G
    plot["snr_sigma"] = sigma
    # heteroscedastic counterexample (G = 1: SNR^2 / G does not depend on G)
    tb = SoftmaxTestbed.heteroscedastic_counterexample()
    B = _err_range(tb, 0)
    iv = budget.interval(_estimator_errors(rng, tb, 0, n, 1), 0.0, B * B, "T2 heteroscedastic counterexample")
    checks.append(_validate("MC validate: E||g_hat - g||^2 = MSE_G", iv, float(tb.estimator_mse(1)[0])))
    g2 = float(np.sum(tb.task_gradient()[0] ** 2))
    claimed = float(tb.signal_variance()[0] / tb.mean_noise_variance()[0])
    checks.append(_mc_counterexample("MC T2 sharper with plain-average sigma^2 (false)", g2 / iv.mean, g2 / iv.upper, claimed,
                                     "p=0.4, noise variance 1 on action 0; SNR^2/G vs RV_mu/E sigma^2"))
    return checks


# ------------------------------------------------------------------------------------------- T1 sample version
def mc_t1_sample(rng: np.random.Generator, budget: MCBudget, n: int, core: dict[str, str]) -> list[Check]:
    """T1 sample version on every draw, with the RL core's Dr.GRPO advantages and reward_variance when present."""
    checks: list[Check] = []
    use_core = core["ragen_core.advantages"] == "available" and core["ragen_core.filtering"] == "available"
    for _ in range(6):
        tb = SoftmaxTestbed.random(rng, X=1, Z=int(rng.integers(2, 7)), d=int(rng.integers(1, 4)),
                                   temperature=float(np.exp(rng.uniform(-1, 2))), sigma_scale=float(rng.uniform(0, 2)))
        G = int(rng.choice([2, 4, 8, 16]))
        R, s = _draw_group(rng, tb, 0, n, G)
        adv_np = R - R.mean(axis=1, keepdims=True)
        var_np = np.var(R, axis=1)
        if use_core:
            import torch

            from ragen_core.advantages import dr_grpo
            from ragen_core.filtering import reward_variance

            Rt = torch.from_numpy(R)
            adv = dr_grpo(Rt).numpy()
            var = reward_variance(Rt, ddof=0).numpy()
            scale = 1e-12 * (1 + np.abs(R).max())
            checks.append(identity("RL core Dr.GRPO advantage = R - mean(R)", adv, adv_np, atol=scale, method="monte-carlo"))
            checks.append(identity("RL core reward_variance(ddof=0) = numpy var", var, var_np, atol=1e-12 * (1 + np.abs(R).max()) ** 2, method="monte-carlo"))
        else:
            adv, var = adv_np, var_np
        ghat = np.mean(adv[:, :, None] * s, axis=1)
        lhs = np.linalg.norm(ghat, axis=1)
        rhs = np.sqrt(var) * np.sqrt(np.mean(np.sum(s * s, axis=2), axis=1))
        atol = 1e-12 * (1 + np.abs(R).max()) * (1 + np.abs(s).max())
        note = f"n={n} draws, G={G}" + ("" if use_core else ", numpy advantages (RL core not available)")
        checks.append(bound("MC T1 sample version (every draw)", lhs, rhs, atol=atol, method="monte-carlo", note=note))
        # validation: E[(1/G) sum (R_k - Rbar) s_k] = (1 - 1/G) g, per coordinate
        g = tb.task_gradient()[0]
        span = float((np.abs(tb.mu[0] - tb.baseline()[0]).max() + np.sqrt(tb.noise_variance()[0]).max()) * 2 * np.abs(tb.score()[0]).max())
        for j in range(tb.d):
            if span == 0:
                continue
            iv = budget.interval(ghat[:, j], -span, span, "T1 sample mean")
            checks.append(_validate("MC validate: E[sample-baseline g_hat] = (1 - 1/G) g", iv, (1 - 1 / G) * g[j]))
    return checks


# ------------------------------------------------------------------------------------------- T6
def mc_t6(rng: np.random.Generator, budget: MCBudget, n: int, plot: dict[str, Any]) -> list[Check]:
    """Drift of theta under policy-gradient noise: E||theta_T - theta_0||^2 = eta^2 (T MSE_G + T^2 ||m||^2)."""
    checks: list[Check] = []
    tb = SoftmaxTestbed.random(rng, X=1, Z=4, d=3, temperature=1.0, sigma_scale=0.5, mu_offset=0.0)
    G, eta = 4, 0.1
    v = float(tb.estimator_mse(G)[0])
    B = _err_range(tb, 0)
    ref = softmax(tb.logits() + rng.normal(size=(1, tb.Z)), axis=1)
    kl_dir = -tb.kl_gradient(ref)[0]
    m_reg = kl_dir / np.linalg.norm(kl_dir) * math.sqrt(v)  # a persistent regulariser direction, ||m||^2 = v
    rows = []
    b, g = tb.baseline()[0], tb.task_gradient()[0]
    for label, m in (("m = 0", np.zeros(tb.d)), ("m = KL direction", m_reg)):
        for T in (1, 2, 4, 8, 16):
            disp = np.zeros((n, tb.d))
            for _ in range(T):
                R, s = _draw_group(rng, tb, 0, n, G)
                disp += eta * (m + np.mean((R - b)[:, :, None] * s, axis=1) - g)
            y = np.sum(disp * disp, axis=1)
            hi = (eta * T * (B + np.linalg.norm(m))) ** 2
            iv = budget.interval(y, 0.0, hi, f"T6 {label} T={T}")
            exact = eta**2 * (T * v + T**2 * float(m @ m))
            checks.append(_validate(f"MC T6 drift E||theta_T - theta_0||^2 ({label})", iv, exact))
            rows.append({"label": label, "T": T, "mean": iv.mean, "lo": iv.lower, "hi": iv.upper, "exact": exact})
    plot["drift"] = rows
    return checks


# ------------------------------------------------------------------------------------------- T7
def _topk_by_variance(R: np.ndarray, k: int) -> np.ndarray:
    """Mask [n, P] of the k groups with the largest sample variance (ddof = 1), ties by lower index."""
    V = np.var(R, axis=2, ddof=1)
    order = np.argsort(-V, axis=1, kind="stable")[:, :k]
    mask = np.zeros(V.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=1)
    return mask


def mc_t7(rng: np.random.Generator, budget: MCBudget, n: int, core: dict[str, str]) -> list[Check]:
    """T7: the identity for a fixed subset, and its failure when the subset is chosen from the same rollouts."""
    checks: list[Check] = []
    base = SoftmaxTestbed.two_action(0.5, 1.0)
    P, G, k = 6, 4, 3
    tb = SoftmaxTestbed(np.repeat(base.features, P, 0), base.theta, np.repeat(base.mu, P, 0), np.repeat(base.sigma, P))
    b, g = tb.baseline()[0], tb.task_gradient()[0]
    R = np.empty((n, P, G))
    S = np.empty((n, P, G, tb.d))
    for x in range(P):
        R[:, x], S[:, x] = _draw_group(rng, tb, x, n, G)
    err = np.mean((R - b)[..., None] * S, axis=2) - g  # [n, P, d]
    sig2 = float(tb.estimator_mse(G)[0])
    B = _err_range(tb, 0)
    fixed = np.sum(np.mean(err[:, :k], axis=1) ** 2, axis=1)
    iv = budget.interval(fixed, 0.0, B * B, "T7 fixed subset")
    checks.append(_validate("MC T7 identity, fixed S: E||gbar_hat_S - gbar_S||^2 = sum sigma^2 / n^2", iv, k * sig2 / k**2))
    mask = _topk_by_variance(R, k)
    if core["ragen_core.filtering"] == "available":
        import torch

        from ragen_core.filtering import filter_groups

        m_core = min(n, 2000)
        agree = 0
        for i in range(m_core):
            res = filter_groups(torch.from_numpy(R[i]), strategy="top_k_abs", value=k)
            agree += int(np.array_equal(res.mask.numpy(), mask[i]))
        checks.append(identity("RL core filter_groups(top_k_abs) = numpy top-k by variance", float(agree), float(m_core), method="monte-carlo",
                               note=f"{m_core} batches"))
    sel = np.sum(np.sum(err * mask[..., None], axis=1) ** 2, axis=1) / k**2
    iv2 = budget.interval(sel, 0.0, B * B, "T7 selected subset")
    claimed = sig2 / k
    checks.append(_mc_counterexample("MC T7 identity with S chosen from the same rollouts (false)", iv2.mean, iv2.lower, claimed,
                                     f"P={P} equal prompts, G={G}, top-{k} by sample variance; exact identity value {claimed:.4g}"))
    return checks


# ------------------------------------------------------------------------------------------- MI proxies
def seq_proxy_terms(L: np.ndarray) -> np.ndarray:
    """Per-trace sequence-level proxy terms, ``[P, G]`` (numpy, independent of ragen_core.mi):

        t[i, k] = L[i, k, i] - log( (1/P) sum_j exp L[i, k, j] )       (MI-Seq-Est = mean t)
    """
    P = L.shape[0]
    mx = L.max(axis=2, keepdims=True)
    lse = np.log(np.sum(np.exp(L - mx), axis=2)) + mx[..., 0] - math.log(P)
    return np.einsum("iki->ik", L) - lse


def _retrieval_hits(L: np.ndarray) -> np.ndarray:
    """hit[i, k] = 1[argmax_j L[i, k, j] == i] (first index among ties)."""
    return (np.argmax(L, axis=2) == np.arange(L.shape[0])[:, None]).astype(float)


def _cross_scores(rng: np.random.Generator, sampler: np.ndarray, scorer_log: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample z_ik ~ sampler[i] and return (L [P, G, P] with L[i,k,j] = scorer_log[j, z_ik], z [P, G])."""
    P = sampler.shape[0]
    z = np.stack([_sample(rng, sampler[i], (G,)) for i in range(P)])
    L = scorer_log[:, z].transpose(1, 2, 0)  # [P, G, P]
    return L, z


def mc_mi(rng: np.random.Generator, budget: MCBudget, G: int, batches: int, core: dict[str, str]) -> list[Check]:
    """Section 2 proxies against the exact I_P, with ragen_core.mi.mi_proxies when importable."""
    checks: list[Check] = []
    have_mi = core["ragen_core.mi"] == "available"
    if have_mi:
        import torch

        from ragen_core.mi import mi_proxies
    P, Z = 8, 12
    logits = rng.normal(size=(P, Z)) * 1.5
    p = softmax(logits, 1)
    logp = np.log(p)
    u = np.full(P, 1.0 / P)
    I_P = channel_mutual_information(u, p)
    lo_term = math.log(P) + float(np.min(logp - np.log(p.sum(axis=0))[None, :]))  # log P + min log r(i|z)

    def run(sampler: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], list[dict[str, Any]]]:
        terms, hits, outs = [], [], []
        for _ in range(batches):
            L, _ = _cross_scores(rng, sampler, logp, G)
            terms.append(seq_proxy_terms(L))
            hits.append(_retrieval_hits(L))
            if have_mi:
                lengths = torch.from_numpy(rng.integers(1, 40, size=(P, G)).astype(np.float64))
                Lt = torch.from_numpy(L)
                o = mi_proxies(Lt, lengths)
                shift = torch.from_numpy(rng.normal(size=(P, G, 1)) * 50.0)
                o_shift = mi_proxies(Lt + shift, lengths)
                o1 = mi_proxies(Lt, torch.ones(P, G, dtype=torch.float64))
                outs.append({"o": o, "shift": o_shift, "ones": o1})
        return terms, hits, outs

    # scorer = sampler: E[MI-Seq-Est] = I_P, Fano with the Bayes scorer
    terms, hits, outs = run(p)
    unit = np.concatenate([t.mean(axis=0) for t in terms])  # per k: mean over prompts (i.i.d. across k)
    iv = budget.interval(unit, lo_term, math.log(P), "MI seq proxy")
    checks.append(_validate("MC validate (numpy proxy): E[MI-Seq-Est] = I_P, scorer = sampler", iv, I_P))
    hit_unit = np.concatenate([h.mean(axis=0) for h in hits])
    iva = budget.interval(hit_unit, 0.0, 1.0, "MI retrieval")
    checks.append(_validate("MC validate: E[Retrieval-Acc] = Bayes accuracy", iva, bayes_accuracy(p)))
    fano = fano_lower(min(iva.lower, 1.0), P) if iva.lower > 1.0 / P else -math.inf
    checks.append(Check("MC Fano (Bayes scorer): log P - h2(1-Acc) - (1-Acc) log(P-1) <= I_P", fano_lower(iva.mean, P), I_P,
                        bool(fano <= I_P * (1 + 1e-12)), fano_lower(iva.mean, P) / I_P, "bound", False, "monte-carlo", f"P={P}, acc={iva.mean:.4f}"))
    all_terms = np.stack(terms)
    batch_means = all_terms.reshape(batches, -1).mean(axis=1)
    checks.append(bound("MC MI-Seq-Est <= log P (every batch)", batch_means, math.log(P), atol=1e-12, method="monte-carlo"))
    # many small batches (G = 4): the per-batch bound, where it is closest
    small = np.array([seq_proxy_terms(_cross_scores(rng, p, logp, 4)[0]).mean() for _ in range(200)])
    checks.append(bound("MC MI-Seq-Est <= log P (every batch)", small, math.log(P), atol=1e-12, method="monte-carlo"))
    if have_mi:
        ours = np.array([t.mean() for t in terms])
        theirs = np.array([o["o"]["mi_seq_est"] for o in outs])
        checks.append(identity("ragen_core.mi mi_seq_est = numpy sequence proxy", theirs, ours, atol=1e-12, method="monte-carlo"))
        acc_t = np.array([o["o"]["retrieval_acc"] for o in outs])
        checks.append(identity("ragen_core.mi retrieval_acc = numpy argmax", acc_t, np.array([h.mean() for h in hits]), atol=1e-12, method="monte-carlo"))
        ivm = budget.interval(theirs, lo_term, math.log(P), "mi_proxies seq")
        checks.append(_validate("MC validate (ragen_core.mi): E[mi_seq_est] = I_P, scorer = sampler", ivm, I_P))
        ident = np.array([o["o"]["marginal_entropy_est"] - o["o"]["cond_entropy_est"] for o in outs])
        checks.append(identity("ragen_core.mi H_hat(Z) = H_hat(Z|X) + MI-Est", ident, np.array([o["o"]["mi_est"] for o in outs]), atol=1e-12, method="monte-carlo"))
        checks.append(identity("ragen_core.mi row shift: mi_est unchanged", np.array([o["shift"]["mi_est"] for o in outs]),
                               np.array([o["o"]["mi_est"] for o in outs]), atol=1e-9, method="monte-carlo"))
        checks.append(identity("ragen_core.mi row shift: retrieval_acc unchanged", np.array([o["shift"]["retrieval_acc"] for o in outs]),
                               acc_t, atol=1e-12, method="monte-carlo"))
        checks.append(identity("ragen_core.mi |z| = 1: mi_est = mi_seq_est", np.array([o["ones"]["mi_est"] for o in outs]), theirs, atol=1e-12, method="monte-carlo"))
        checks.append(bound("ragen_core.mi mi_seq_est <= log P", theirs, math.log(P), atol=1e-12, method="monte-carlo"))
    else:
        checks.append(Check("ragen_core.mi mi_proxies checks", math.nan, math.nan, True, math.nan, "skipped", False, "monte-carlo",
                            core["ragen_core.mi"]))
    # sampler at temperature T != 1, scorer at T = 1: E[proxy] <= I_P(sampler)
    for T in (0.5, 2.0):
        q = softmax(logits / T, 1)
        terms_q, _, outs_q = run(q)
        unit_q = np.concatenate([t.mean(axis=0) for t in terms_q])
        ivq = budget.interval(unit_q, lo_term, math.log(P), f"MI T={T}")
        checks.append(_validate("MC validate (numpy proxy): E[MI-Seq-Est] at sampler T != 1", ivq, expected_seq_proxy(q, p)))
        Iq = channel_mutual_information(u, q)
        checks.append(_mc_bound("MC E[MI-Seq-Est] <= I_P(sampler), sampler T != 1", ivq.mean, ivq.lower, Iq, f"T={T}"))
        if have_mi:
            vals = np.array([o["o"]["mi_seq_est"] for o in outs_q])
            ivt = budget.interval(vals, lo_term, math.log(P), f"mi_proxies T={T}")
            checks.append(_mc_bound("MC (ragen_core.mi) E[mi_seq_est] <= I_P(sampler), T != 1", ivt.mean, ivt.lower, Iq, f"T={T}"))
    # exact collapse: identical p(z|x); scorer = sampler gives 0 on every draw; arbitrary scorer gives 1/P
    pz = softmax(rng.normal(size=Z), 0)
    coll = np.repeat(pz[None, :], P, 0)
    arbitrary = np.log(softmax(rng.normal(size=(P, Z)) * 2, 1))
    zero_terms, accs, accs_core, zero_core = [], [], [], []
    for _ in range(batches):
        L0, z = _cross_scores(rng, coll, np.log(coll), G)
        zero_terms.append(seq_proxy_terms(L0).mean())
        La = arbitrary[:, z].transpose(1, 2, 0)
        accs.append(_retrieval_hits(La).mean(axis=0))
        if have_mi:
            ones = torch.ones(P, G, dtype=torch.float64)
            zero_core.append(mi_proxies(torch.from_numpy(L0), ones)["mi_seq_est"])
            accs_core.append(mi_proxies(torch.from_numpy(La), ones)["retrieval_acc"])
    checks.append(identity("MC collapse, scorer = sampler: MI-Seq-Est = 0 (every batch)", np.array(zero_terms), 0.0, atol=1e-12, method="monte-carlo"))
    iv0 = budget.interval(np.concatenate(accs), 0.0, 1.0, "collapse acc")
    checks.append(_validate("MC collapse, arbitrary scorer: E[Retrieval-Acc] = 1/P", iv0, 1.0 / P))
    if have_mi:
        checks.append(identity("ragen_core.mi collapse: mi_seq_est = 0 (every batch)", np.array(zero_core), 0.0, atol=1e-12, method="monte-carlo"))
        checks.append(identity("ragen_core.mi collapse: retrieval_acc = numpy argmax", np.array(accs_core),
                               np.array([a.mean() for a in accs]), atol=1e-12, method="monte-carlo"))
    return checks


# ------------------------------------------------------------------------------------------- runner
def run_montecarlo(rng: np.random.Generator, quick: bool = False) -> tuple[list[Check], dict[str, Any]]:
    """All Monte Carlo checks; returns (checks, plot data).  ``quick`` uses fewer draws."""
    budget = MCBudget()
    core = core_available()
    plot: dict[str, Any] = {"core": core}
    n = 10_000 if quick else 200_000
    checks: list[Check] = []
    checks += mc_t2_t3(rng, budget, n, plot)
    checks += mc_t1_sample(rng, budget, n // 4, core)
    checks += mc_t6(rng, budget, n // 2, plot)
    checks += mc_t7(rng, budget, n // 2, core)
    checks += mc_mi(rng, budget, G=256 if quick else 1024, batches=8 if quick else 40, core=core)
    plot["intervals_used"] = budget.used
    plot["delta"] = budget.delta
    plot["m_intervals"] = budget.m
    return checks, plot
