"""The study's statistics against references written here, independent of the code under test: textbook t values,
closed forms of t at df 1 and 2, a plain numerical integration of the t density (math.lgamma), seeded Monte Carlo
simulations of the paired t-test and of TOST, and the verdict rule read off hand-computed intervals."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest

from ragen_core.apps.reproduce.verdicts import ChangeRule, PairedRule, Verdict, compare, paired, verdict_text
from ragen_core.math.stats import (
    equivalence_power,
    mean_ci,
    min_detectable_effect,
    paired_power,
    pairs_needed,
    pairs_needed_equivalence,
    seed_plan,
    t_quantile,
)

# Textbook quantiles (independent of the code under test).
T_975_4, T_975_1, T_95_10, T_95_4, T_975_2 = 2.776445, 12.7062, 1.812461, 2.131847, 4.302653


def t_pdf(x: float, df: float) -> float:
    """Student's t density from its formula (math.lgamma)."""
    c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(c - (df + 1) / 2 * math.log1p(x * x / df))


def t_cdf_by_integration(t: float, df: float, m: int = 20_000) -> float:
    """``0.5 + int_0^t pdf``, composite Simpson with m panels (the density is smooth and bounded)."""
    h = t / m
    s = t_pdf(0.0, df) + t_pdf(t, df) + sum((4 if i % 2 else 2) * t_pdf(i * h, df) for i in range(1, m))
    return 0.5 + s * h / 3


# ------------------------------------------------------------------------------------------------ quantiles
def test_textbook_quantiles():
    assert t_quantile(0.975, 4) == pytest.approx(T_975_4, abs=1e-6)
    assert t_quantile(0.975, 1) == pytest.approx(T_975_1, abs=1e-4)
    assert t_quantile(0.95, 10) == pytest.approx(T_95_10, abs=1e-6)
    assert t_quantile(0.025, 4) == pytest.approx(-T_975_4, abs=1e-6)


@pytest.mark.parametrize("p", [1e-20, 1e-12, 1e-6, 0.3, 0.9, 1 - 1e-6, 1 - 1e-12])
def test_far_tails_match_the_closed_forms_of_df_1_and_2(p):
    # df 1 (Cauchy): tan(pi (p - 1/2)) = -1 / tan(pi p); df 2: (2p - 1) / sqrt(2 p (1 - p)). The tail probability
    # is min(p, 1 - p) as the float holds it. Before: p = 1e-20 raised "got 1.0", 1 - 1e-12 was off by 3e-5.
    q = min(p, 1.0 - p)
    cauchy = math.copysign(1.0 / math.tan(math.pi * q), p - 0.5)
    assert t_quantile(p, 1) == pytest.approx(cauchy, rel=1e-11)
    df2 = math.copysign((1 - 2 * q) / math.sqrt(2 * q * (1 - q)), p - 0.5)
    assert t_quantile(p, 2) == pytest.approx(df2, rel=1e-11)


@pytest.mark.parametrize("df,p", [(0.5, 0.9), (1.5, 0.975), (2.5, 0.6), (7.3, 0.995), (30, 0.95)])
def test_fractional_df_against_the_integrated_density(df, p):
    t = t_quantile(p, df)
    assert t_cdf_by_integration(t, df) == pytest.approx(p, abs=1e-9)


def test_df_limits_and_overflow():
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959963984540054, rel=1e-12)  # before: ZeroDivisionError
    z = 1.959963984540054  # Cornish-Fisher: t = z + (z^3 + z) / (4 df) + O(df^-2)
    assert t_quantile(0.975, 1e6) == pytest.approx(z + (z**3 + z) / 4e6, rel=1e-10)
    assert t_quantile(0.99, 0.05) == pytest.approx(1.0876e33, rel=1e-3)  # beyond t^2's float range
    with pytest.raises(ValueError, match="beyond the float range"):
        t_quantile(0.9999, 0.001)
    for bad in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match="p must be"):
            t_quantile(bad, 3)
    for bad in (0, -1, math.nan):
        with pytest.raises(ValueError, match="df must be"):
            t_quantile(0.9, bad)


# ------------------------------------------------------------------------------------------------ intervals
def test_mean_ci_is_the_textbook_interval():
    xs = [0.3, -0.1, 0.25, 0.4, 0.05]  # n = 5: t_{0.975, 4}
    m = sum(xs) / 5
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / 4)
    mean, lo, hi = mean_ci(xs)
    assert (mean, lo, hi) == pytest.approx((m, m - T_975_4 * s / math.sqrt(5), m + T_975_4 * s / math.sqrt(5)),
                                           abs=1e-6)
    assert mean_ci([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)  # no spread: a point interval
    assert all(math.isnan(v) for v in mean_ci([1.0])[1:])


def test_mean_ci_of_values_near_the_float_limit_is_a_clear_error():
    for xs in ([1e200, 2e200], [1e308, 1e308]):  # before: OverflowError deep inside / (inf, nan, inf)
        with pytest.raises(ValueError, match="too large"):
            mean_ci(xs)


# ------------------------------------------------------------------------------------------------ power
def simulated_paired_power(effect: float, sd: float, n: int, t_crit: float, sims: int, seed: int) -> float:
    """Share of simulated studies whose two-sided paired t-test (|t| > t_crit) rejects."""
    d = np.random.default_rng(seed).normal(effect, sd, size=(sims, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > t_crit))


@pytest.mark.parametrize("effect,sd,n,t_crit", [(1.0, 1.0, 5, T_975_4), (0.5, 2.0, 3, T_975_2),
                                                (-3.0, 2.0, 5, T_975_4)])
def test_paired_power_matches_a_simulation_of_the_t_test(effect, sd, n, t_crit):
    sims = 40_000
    exact = paired_power(effect, sd, n)
    sim = simulated_paired_power(effect, sd, n, t_crit, sims, seed=n)
    assert abs(sim - exact) < 4 * math.sqrt(exact * (1 - exact) / sims)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 1e-3, 1e-4, 1e-6])
@pytest.mark.parametrize("n", [2, 3, 5, 30])
def test_power_at_no_effect_is_the_level(alpha, n):
    # Before: Simpson's fixed grid could not resolve the step of a small alpha at 2 pairs (1e-4 read 8.6e-4).
    assert paired_power(0.0, 1.0, n, alpha) == pytest.approx(alpha, rel=1e-6)


def test_power_stays_exact_for_very_many_pairs():
    assert paired_power(0.0, 1.0, 10**7) == pytest.approx(0.05, abs=1e-8)  # before: 0.0506


def test_more_pairs_never_less_power():
    for effect in (0.2, 1.0, 3.0):
        pw = [paired_power(effect, 1.0, n) for n in range(2, 40)]
        assert all(b >= a - 1e-12 for a, b in zip(pw, pw[1:]))  # (power 1 to the integral's rounding)
    for effect, bound in ((0.0, 0.7), (0.3, 1.7), (-0.1, 1.0)):  # bounds not far below the SD
        eq = [equivalence_power(effect, 1.0, n, bound) for n in range(2, 40)]
        assert all(b >= a - 1e-12 for a, b in zip(eq, eq[1:]))
    # With the SD far above the bound TOST's power first falls (a lucky small s at 2 pairs), then rises: the
    # seeds needed are still the first n that reaches the power.
    low = [equivalence_power(0.02, 1.0, n, 0.3) for n in range(2, 80)]
    assert low[1] < low[0] and low[-1] > low[0]
    assert pairs_needed_equivalence(1.0, 0.3, effect=0.02, power=0.05) == next(
        n for n in range(2, 400) if equivalence_power(0.02, 1.0, n, 0.3) >= 0.05)


@pytest.mark.parametrize("n", [2, 3, 5, 12])
def test_detectable_effect_and_pairs_needed_invert_the_power(n):
    mde = min_detectable_effect(1.5, n)
    assert paired_power(mde, 1.5, n) == pytest.approx(0.8, abs=1e-5)
    assert pairs_needed(mde, 1.5) == n
    assert pairs_needed(mde * 0.999, 1.5) == n + 1


def test_unreachable_power_is_an_error_not_a_hang():
    out: list = []

    def run():
        try:
            out.append(min_detectable_effect(1.0, 5, power=1 - 1e-13))
        except ValueError as e:
            out.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)  # before: doubled the effect forever
    assert out and isinstance(out[0], ValueError) and "power" in str(out[0])


def test_non_finite_effects_and_bad_arguments_are_clear_errors():
    for f in (lambda e: paired_power(e, 1.0, 5), lambda e: equivalence_power(e, 1.0, 5, 0.5),
              lambda e: pairs_needed(e, 1.0), lambda e: pairs_needed_equivalence(1.0, 0.5, effect=e)):
        for bad in (math.nan, math.inf):  # before: NaN power, 0.0 power, "cannot convert float NaN to integer"
            with pytest.raises(ValueError, match="effect must be a finite"):
                f(bad)
    for power in (1.0, 0.0, 0.01, math.nan):
        with pytest.raises(ValueError, match="power must be"):
            pairs_needed(1.0, 1.0, power=power)
    with pytest.raises(ValueError, match="power must be"):
        pairs_needed_equivalence(1.0, 1.0, power=1.0)
    with pytest.raises(ValueError, match="max_n"):
        pairs_needed(0.01, 1.0, max_n=1)
    for bound in (0.0, -1.0, math.nan, math.inf):  # before: "need |effect| < bound" for a bad bound
        with pytest.raises(ValueError, match="bound must be"):
            pairs_needed_equivalence(1.0, bound)
    for alpha in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            paired_power(1.0, 1.0, 5, alpha)
    for sd in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="sd must be"):
            min_detectable_effect(sd, 5)


# ------------------------------------------------------------------------------------------------ equivalence
def simulated_tost(effect: float, sd: float, n: int, bound: float, t_one_sided: float, sims: int) -> float:
    """Share of simulated studies whose mean +- t_{1 - alpha} s / sqrt(n) lies inside (-bound, bound)."""
    d = np.random.default_rng(7).normal(effect, sd, size=(sims, n))
    half = t_one_sided * d.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean((d.mean(axis=1) - half > -bound) & (d.mean(axis=1) + half < bound)))


@pytest.mark.parametrize("alpha,t_one_sided", [(0.05, T_95_4), (0.025, T_975_4)])
def test_equivalence_power_is_tost_with_one_sided_alpha_each_side(alpha, t_one_sided):
    # alpha is each one-sided test's: the interval is the (1 - 2 alpha) one, t_{1 - alpha, n - 1}.
    sims = 40_000
    exact = equivalence_power(0.05, 0.2, 5, 0.3, alpha)
    sim = simulated_tost(0.05, 0.2, 5, 0.3, t_one_sided, sims)
    assert abs(sim - exact) < 4 * math.sqrt(exact * (1 - exact) / sims)
    assert PairedRule().equivalence_level == pytest.approx(0.9)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "reproduction.md").read_text()
    assert "the 90% interval lies within the equivalence bounds: two one-sided tests at alpha 0.05" in docs


def test_equivalence_at_the_bound_has_the_size_of_one_test():
    for alpha in (0.05, 0.01):
        assert equivalence_power(0.5, 1e-3, 40, 0.5, alpha) == pytest.approx(alpha, abs=1e-4)
        assert equivalence_power(0.5, 0.3, 5, 0.5, alpha) <= alpha


def test_equivalence_power_at_a_small_alpha_and_two_pairs():
    # Monte Carlo reference at alpha 1e-3, n = 2: t_{0.999, 1} = 318.3088
    sims = 200_000
    exact = equivalence_power(0.0, 0.001, 2, 1.0, 1e-3)
    sim = simulated_tost(0.0, 0.001, 2, 1.0, 318.30884, sims)
    assert abs(sim - exact) < 4 * math.sqrt(exact * (1 - exact) / sims) + 1e-4


def test_seed_plan_arguments():
    with pytest.raises(ValueError, match="effect must be non-zero"):  # before: "need |effect| < bound ... 0.0, 0.0"
        seed_plan(1.0, 0.0, (3, 10))
    for limits in ((0, 1), (10, 3), (2.5, 4), (3,)):  # before: a deep "n must be" error, or n below the floor
        with pytest.raises(ValueError, match="limits"):
            seed_plan(1.0, 0.5, limits)
    with pytest.raises(ValueError, match="effect must be a finite"):
        seed_plan(1.0, math.nan, (3, 10))
    plan = seed_plan(1.0, 0.5, (3, 10))
    assert plan.n == 10 and plan.capped and plan.mde == pytest.approx(min_detectable_effect(1.0, 10), rel=1e-5)


# ------------------------------------------------------------------------------------------------ verdicts
def intervals(ds: list[float]) -> tuple[float, float, float, float, float]:
    """Textbook paired intervals of 3 differences: mean, 95% low/high, 90% low/high."""
    m = sum(ds) / len(ds)
    se = math.sqrt(sum((d - m) ** 2 for d in ds) / (len(ds) - 1)) / math.sqrt(len(ds))
    return m, m - T_975_2 * se, m + T_975_2 * se, m - 2.919986 * se, m + 2.919986 * se


@pytest.mark.parametrize("ds,bound,direction,expected", [
    ([0.30, 0.31, 0.29], None, 1, Verdict.HELD),
    ([0.30, 0.31, 0.29], None, -1, Verdict.CONTRADICTED),
    ([-0.30, -0.31, -0.29], None, -1, Verdict.HELD),
    ([-0.30, -0.31, -0.29], 0.15, 1, Verdict.CONTRADICTED),
    ([0.01, -0.02, 0.015], 0.15, 1, Verdict.EQUIVALENT),
    ([0.01, -0.02, 0.015], 0.03, 1, Verdict.INCONCLUSIVE),
    ([0.2, -0.3, 0.4], None, 1, Verdict.INCONCLUSIVE),
])
def test_verdict_rule_against_hand_computed_intervals(ds, bound, direction, expected):
    c = compare(ds, PairedRule(direction=direction), bound)
    m, lo95, hi95, lo90, hi90 = intervals(ds)
    assert c.ci95 == pytest.approx([lo95, hi95], abs=1e-5) and c.ci90 == pytest.approx([lo90, hi90], abs=1e-5)
    assert c.verdict is expected
    if expected is Verdict.INCONCLUSIVE:
        assert c.mde == pytest.approx(min_detectable_effect(c.sd, 3), rel=1e-5)
        assert verdict_text(c.as_dict()) == f"inconclusive (detectable effect {c.mde:.3f})"


def test_an_interval_edge_on_the_bound_is_not_inside():
    ds = [0.01, -0.02, 0.015]
    edge = max(abs(x) for x in compare(ds).ci90)
    assert compare(ds, bound=edge).verdict is Verdict.INCONCLUSIVE
    assert compare(ds, bound=edge * (1 + 1e-9)).verdict is Verdict.EQUIVALENT


def test_the_verdict_does_not_depend_on_the_units():
    # Before: a spread below 1e-12 was read as no spread whatever the scale, so tiny units made "held".
    base = [1.0, 2.0, 3.0]
    for scale in (1e-13, 1e-6, 1.0, 1e6):
        c = compare([scale * d for d in base])
        assert c.verdict is Verdict.INCONCLUSIVE and c.sd == pytest.approx(scale, rel=1e-9)
    assert compare([0.1 + 0.2, 0.3, 0.3]).sd == 0.0  # rounding between equal differences is still no spread


def test_missing_differences_are_left_out_with_their_seed():
    # Before: one NaN made the mean, both intervals and the SD NaN and the verdict "inconclusive (n/a ...)".
    c = compare([0.30, math.nan, 0.31, math.inf, 0.29], seeds=[20, 21, 22, 23, 24])
    assert c.n == 3 and c.seeds == [20, 22, 24] and c.verdict is Verdict.HELD
    p = paired({1: 1.0, 2: math.nan, 3: 2.0, 4: 1.5}, {1: 0.0, 2: 0.0, 3: 0.0, 4: None})
    assert p.seeds == [1, 3] and p.n == 2 and math.isfinite(p.mean)
    with pytest.raises(ValueError, match="seeds"):
        compare([0.1, 0.2], seeds=[1])


def test_bad_bounds_and_rules_are_clear_errors():
    for bound in (0.0, -0.1, math.nan, math.inf):  # before: never (or always) "equivalent", silently
        with pytest.raises(ValueError, match="bound must be"):
            compare([0.1, 0.12, 0.11], bound=bound)
        with pytest.raises(ValueError, match="bound"):
            ChangeRule(bound=bound)
        with pytest.raises(ValueError, match="bounds"):
            PairedRule(bounds={"margin_end": bound})
    with pytest.raises(ValueError, match="direction"):  # before: every "held" read "contradicted"
        PairedRule(direction=0)
    for a in (0.5, 0.7, 0.0):  # before: 0.7 inverted the 90% interval and still read "equivalent"
        with pytest.raises(ValueError, match="equivalence_alpha"):
            PairedRule(equivalence_alpha=a)
    for level in (1.5, 0.0, 1.0):
        with pytest.raises(ValueError, match="level"):
            PairedRule(level=level)
    with pytest.raises(ValueError, match="power"):
        PairedRule(power=1.0)


def test_small_samples():
    assert compare([]).verdict is Verdict.NOT_TESTED
    one = compare([0.4], bound=0.5)
    assert one.verdict is Verdict.INCONCLUSIVE and one.ci95 == [None, None]
    assert verdict_text(one.as_dict()) == "inconclusive (1 seed: no interval)"
    assert compare([0.0, 0.0], bound=0.1).verdict is Verdict.EQUIVALENT  # all equal at 0: a point interval at 0
    same = compare([0.2, 0.2, 0.2])
    assert same.verdict is Verdict.HELD and same.sd == 0.0 and same.mde is None
    two = compare([0.1, 0.3])  # n = 2: t_{0.975, 1}
    assert two.ci95 == pytest.approx([0.2 - T_975_1 * 0.1, 0.2 + T_975_1 * 0.1], abs=1e-4)
