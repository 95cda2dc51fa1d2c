"""MI proxies from L (the paper, section 2): loop reference, identities, bounds and exact enumeration."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.mi import MIZScoreEMA, flatten_proxies, mi_proxies

# --------------------------------------------------------------------------------------------------------------
# Reference: plain Python over nested lists
# --------------------------------------------------------------------------------------------------------------


def lse(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def ref_proxies(L: list, n: list, eps: float = 1e-3) -> dict[str, float]:
    p, g = len(L), len(L[0])
    matched, marginal, marginal_tw, seq = [], [], [], []
    acc = 0
    for i in range(p):
        for k in range(g):
            row = L[i][k]
            nk = n[i][k]
            matched.append(row[i] / nk)
            marginal.append((lse(row) - math.log(p)) / nk)
            marginal_tw.append(lse([x / nk for x in row]) - math.log(p))
            seq.append(row[i] - (lse(row) - math.log(p)))
            best = max(range(p), key=lambda j: (row[j], -j))
            acc += best == i
    cnt = p * g
    mean_m = sum(marginal) / cnt
    sigma = math.sqrt(sum((x - mean_m) ** 2 for x in marginal) / cnt)
    mi = sum(a - b for a, b in zip(matched, marginal)) / cnt
    return {
        "retrieval_acc": acc / cnt,
        "mi_est": mi,
        "mi_est_tokenwise": sum(a - b for a, b in zip(matched, marginal_tw)) / cnt,
        "mi_seq_est": sum(seq) / cnt,
        "cond_entropy_est": -sum(matched) / cnt,
        "marginal_entropy_est": -mean_m,
        "marginal_std": sigma,
        "mi_zscore": mi / (sigma + eps),
    }


def random_L(seed: int, p: int, g: int, scale: float = 5.0):
    rnd = random.Random(seed)
    L = [[[-rnd.uniform(0, scale) * 10 for _ in range(p)] for _ in range(g)] for _ in range(p)]
    n = [[rnd.randint(1, 12) for _ in range(g)] for _ in range(p)]
    return L, n


@st.composite
def l_tensors(draw):
    p = draw(st.integers(1, 6))
    g = draw(st.integers(1, 4))
    # multiples of 1/4: sums with integer shifts stay exact, so ties are preserved exactly
    vals = draw(st.lists(st.integers(-800, 0), min_size=p * g * p, max_size=p * g * p))
    lens = draw(st.lists(st.integers(1, 50), min_size=p * g, max_size=p * g))
    L = torch.tensor(vals, dtype=torch.float64).reshape(p, g, p) / 4
    return L, torch.tensor(lens).reshape(p, g)


# --------------------------------------------------------------------------------------------------------------
# Values, identities, bounds, invariances
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed, p, g", [(0, 2, 1), (1, 3, 4), (2, 8, 2), (3, 5, 3)])
def test_matches_loop_reference(seed, p, g):
    L, n = random_L(seed, p, g)
    got = mi_proxies(torch.tensor(L, dtype=torch.float64), torch.tensor(n))
    ref = ref_proxies(L, n)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert got["mi_upper_bound"] == pytest.approx(math.log(p))
    assert got["retrieval_chance"] == pytest.approx(1 / p)


@given(l_tensors())
@settings(max_examples=100, deadline=None)
def test_entropy_identity_holds_for_every_variant(data):
    L, n = data
    s = mi_proxies(L, n)
    assert s["marginal_entropy_est"] == pytest.approx(s["cond_entropy_est"] + s["mi_est"], abs=1e-9)
    assert s["marginal_entropy_est_tokenwise"] == pytest.approx(s["cond_entropy_est"] + s["mi_est_tokenwise"],
                                                                abs=1e-9)
    assert s["marginal_entropy_seq_est"] == pytest.approx(s["cond_entropy_seq_est"] + s["mi_seq_est"], abs=1e-7)


@given(l_tensors())
@settings(max_examples=100, deadline=None)
def test_sequence_terms_bounded_by_log_p(data):
    L, n = data
    p = L.shape[0]
    s = mi_proxies(L, n)
    assert s["mi_seq_est"] <= math.log(p) + 1e-9
    # every single sequence term, checked through a one-trace batch
    for i in range(p):
        for k in range(L.shape[1]):
            term = L[i, k, i].item() - (lse(L[i, k].tolist()) - math.log(p))
            assert term <= math.log(p) + 1e-9
    assert 0.0 <= s["retrieval_acc"] <= 1.0


@given(l_tensors(), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_row_shift_invariance(data, seed):
    L, n = data
    gen = torch.Generator().manual_seed(seed)
    shift = torch.randint(-32, 33, (L.shape[0], L.shape[1], 1), generator=gen).to(torch.float64)
    a, b = mi_proxies(L, n), mi_proxies(L + shift, n)
    for key in ("mi_est", "mi_est_tokenwise", "mi_seq_est"):
        assert b[key] == pytest.approx(a[key], abs=1e-8), key
    assert b["retrieval_acc"] == a["retrieval_acc"]
    assert b["recall_at_k"] == a["recall_at_k"]


def test_row_shift_changes_the_zscore():
    L, n = random_L(5, 4, 3)
    L, n = torch.tensor(L, dtype=torch.float64), torch.tensor(n)
    shift = torch.arange(12, dtype=torch.float64).reshape(4, 3, 1) * 7
    assert mi_proxies(L + shift, n)["mi_zscore"] != pytest.approx(mi_proxies(L, n)["mi_zscore"])


@pytest.mark.parametrize("p, g", [(2, 3), (4, 2), (8, 4)])
def test_exact_collapse_gives_zero_and_chance(p, g):
    gen = torch.Generator().manual_seed(p)
    base = -torch.rand(p, g, 1, generator=gen, dtype=torch.float64) * 50
    L = base.expand(p, g, p).clone()  # p(z|x) identical for every x
    n = torch.randint(1, 20, (p, g), generator=gen)
    s = mi_proxies(L, n)
    for key in ("mi_est", "mi_est_tokenwise", "mi_seq_est", "mi_zscore"):
        assert s[key] == pytest.approx(0.0, abs=1e-12), key
    assert s["retrieval_acc"] == pytest.approx(1 / p)  # ties -> prompt 0: correct only for group 0
    for k, v in s["recall_at_k"].items():
        assert v == pytest.approx(k / p)
        assert s["recall_at_k_chance"][k] == pytest.approx(k / p)


def test_recall_keys_only_below_p():
    for p, keys in ((2, []), (3, [2]), (5, [2, 4]), (8, [2, 4]), (9, [2, 4, 8])):
        s = mi_proxies(torch.zeros(p, 1, p), torch.ones(p, 1))
        assert sorted(s["recall_at_k"]) == keys


def test_perfect_retrieval():
    p, g = 4, 2
    L = torch.full((p, g, p), -30.0, dtype=torch.float64)
    for i in range(p):
        L[i, :, i] = -1.0
    s = mi_proxies(L, torch.ones(p, g))
    assert s["retrieval_acc"] == 1.0 and all(v == 1.0 for v in s["recall_at_k"].values())
    assert s["mi_seq_est"] == pytest.approx(math.log(p), abs=1e-10)


# --------------------------------------------------------------------------------------------------------------
# Exact enumeration: unbiased when the scorer equals the sampler, a lower bound otherwise
# --------------------------------------------------------------------------------------------------------------


def ref_mutual_information(channel: list[list[float]]) -> float:
    """I(X;Z) for X uniform over the rows of channel[x][z] = p(z|x)."""
    p = len(channel)
    pz = [sum(channel[x][z] for x in range(p)) / p for z in range(len(channel[0]))]
    return sum(channel[x][z] * math.log(channel[x][z] / pz[z]) for x in range(p)
               for z in range(len(pz)) if channel[x][z] > 0) / p


def enumerate_expectation(sampler, scorer, g: int, key: str) -> float:
    """E[mi_proxies(...)[key]] over every joint draw of G traces per prompt (traces are single symbols)."""
    p, nz = len(sampler), len(sampler[0])
    total = 0.0
    for draw in itertools.product(range(nz), repeat=p * g):
        prob = 1.0
        for idx, z in enumerate(draw):
            prob *= sampler[idx // g][z]
        L = torch.tensor([[[math.log(scorer[j][draw[i * g + k]]) for j in range(p)] for k in range(g)]
                          for i in range(p)], dtype=torch.float64)
        total += prob * mi_proxies(L, torch.ones(p, g))[key]
    return total


def random_channel(rnd: random.Random, p: int, nz: int) -> list[list[float]]:
    rows = []
    for _ in range(p):
        w = [rnd.uniform(0.05, 1.0) for _ in range(nz)]
        rows.append([x / sum(w) for x in w])
    return rows


@pytest.mark.parametrize("p, g, nz, seed", [(2, 2, 3, 0), (3, 1, 3, 1), (2, 1, 4, 2), (3, 2, 2, 3)])
def test_mi_seq_est_is_unbiased_when_scorer_equals_sampler(p, g, nz, seed):
    channel = random_channel(random.Random(seed), p, nz)
    expected = enumerate_expectation(channel, channel, g, "mi_seq_est")
    assert expected == pytest.approx(ref_mutual_information(channel), abs=1e-12)


@given(st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_mi_seq_est_is_a_lower_bound_with_another_scorer(seed):
    rnd = random.Random(seed)
    sampler, scorer = random_channel(rnd, 2, 3), random_channel(rnd, 2, 3)
    assert enumerate_expectation(sampler, scorer, 1, "mi_seq_est") <= ref_mutual_information(sampler) + 1e-12


@given(st.integers(0, 10_000))
@settings(max_examples=15, deadline=None)
def test_retrieval_at_chance_under_collapse_for_any_scorer(seed):
    rnd = random.Random(seed)
    p, nz = 3, 3
    row = random_channel(rnd, 1, nz)[0]
    sampler = [row] * p  # exact collapse: p(z|x) = p(z)
    scorer = random_channel(rnd, p, nz)
    assert enumerate_expectation(sampler, scorer, 1, "retrieval_acc") == pytest.approx(1 / p, abs=1e-12)


# --------------------------------------------------------------------------------------------------------------
# Identical prompts
# --------------------------------------------------------------------------------------------------------------


def brute_recall_chance(same_count: int, p: int, k: int) -> float:
    # prompt 0..same_count-1 are the equivalent ones; enumerate every k-subset
    subsets = list(itertools.combinations(range(p), k))
    return sum(any(j < same_count for j in s) for s in subsets) / len(subsets)


def test_duplicate_prompts_count_as_correct_and_raise_chance():
    ids = [7, 7, 3, 9, 9, 9]
    p, g = len(ids), 2
    L = torch.full((p, g, p), -50.0, dtype=torch.float64)
    # every trace prefers the *other* copy of its prompt (or itself when unique)
    for i in range(p):
        twins = [j for j in range(p) if ids[j] == ids[i] and j != i]
        L[i, :, twins[0] if twins else i] = -1.0
    s_plain = mi_proxies(L, torch.ones(p, g))
    s_ids = mi_proxies(L, torch.ones(p, g), prompt_ids=ids)
    assert s_plain["retrieval_acc"] == pytest.approx(1 / 6)  # only the unique prompt retrieves itself
    assert s_ids["retrieval_acc"] == 1.0
    counts = [ids.count(x) for x in ids]
    assert s_ids["retrieval_chance"] == pytest.approx(sum(c / p for c in counts) / p)
    for k in (2, 4):
        expected = sum(brute_recall_chance(c, p, k) for c in counts) / p
        assert s_ids["recall_at_k_chance"][k] == pytest.approx(expected)
    assert s_ids["mi_est"] == s_plain["mi_est"]
    assert mi_proxies(L, torch.ones(p, g), prompt_ids=torch.tensor(ids))["retrieval_acc"] == 1.0


# --------------------------------------------------------------------------------------------------------------
# EMA z-score, flattening, validation
# --------------------------------------------------------------------------------------------------------------


def test_zscore_ema_recurrence():
    ema = MIZScoreEMA(alpha=0.9, eps=1e-3)
    batches = [{"mi_est": 0.2, "marginal_std": 0.5}, {"mi_est": 0.1, "marginal_std": 1.5},
               {"mi_est": 0.3, "marginal_std": 0.1}]
    sigma = None
    for stats in batches:
        sigma = stats["marginal_std"] if sigma is None else 0.9 * sigma + 0.1 * stats["marginal_std"]
        assert ema.update(stats) == pytest.approx(stats["mi_est"] / (sigma + 1e-3))
    state = ema.state_dict()
    other = MIZScoreEMA()
    other.load_state_dict(state)
    assert other.sigma == ema.sigma and other.steps == 3


def test_zscore_ema_on_real_proxies_first_step_equals_batch_zscore():
    L, n = random_L(11, 4, 3)
    s = mi_proxies(torch.tensor(L, dtype=torch.float64), torch.tensor(n))
    assert MIZScoreEMA().update(s) == pytest.approx(s["mi_zscore"])


def test_flatten_proxies():
    s = mi_proxies(torch.zeros(5, 2, 5), torch.ones(5, 2))
    flat = flatten_proxies(s)
    assert flat["collapse/recall_at_2"] == s["recall_at_k"][2]
    assert flat["collapse/recall_at_4_chance"] == s["recall_at_k_chance"][4]
    assert all(isinstance(v, float) for v in flat.values())


@pytest.mark.parametrize(
    "L, n, fragment",
    [
        (torch.zeros(3, 2, 4), torch.ones(3, 2), "L must be"),
        (torch.zeros(3, 2), torch.ones(3, 2), "L must be"),
        (torch.zeros(3, 2, 3), torch.ones(2, 3), "lengths"),
        (torch.zeros(3, 2, 3), torch.zeros(3, 2), "lengths must be finite and > 0"),
        (torch.zeros(3, 2, 3), torch.full((3, 2), math.nan), "lengths must be finite and > 0"),
    ],
)
def test_bad_arguments(L, n, fragment):
    with pytest.raises(ValueError, match=fragment):
        mi_proxies(L, n)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_invalid_scores_raise_naming_the_rows(bad):
    # one bad score used to turn every output into NaN silently; now the rows (i, k) are named
    L = torch.randn(4, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    L[1, 2, 0] = bad
    L[3, 0, 3] = bad
    with pytest.raises(ValueError, match=r"2 row\(s\) \(i, k\) = \(1, 2\), \(3, 0\)"):
        mi_proxies(L, torch.ones(4, 3))


def test_row_impossible_under_every_prompt_raises():
    L = torch.zeros(3, 2, 3, dtype=torch.float64)
    L[0, 1, :] = -math.inf
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        mi_proxies(L, torch.ones(3, 2))


def test_many_bad_rows_are_counted():
    L = torch.full((4, 5, 4), math.nan, dtype=torch.float64)
    with pytest.raises(ValueError, match="20 row.*and 10 more"):
        mi_proxies(L, torch.ones(4, 5))


def test_single_minus_inf_is_a_valid_log_probability():
    # a trace impossible under another prompt: accepted, and equal to the loop reference with that term
    L, n = random_L(7, 3, 2)
    L[0][1][2] = -math.inf
    out = mi_proxies(torch.tensor(L, dtype=torch.float64), torch.tensor(n, dtype=torch.float64))
    ref = ref_proxies(L, n)
    assert math.isfinite(out["mi_est"])
    assert out["mi_seq_est"] == pytest.approx(ref["mi_seq_est"], abs=1e-12)


def test_bad_ema_and_prompt_ids():
    with pytest.raises(ValueError, match="alpha"):
        MIZScoreEMA(alpha=1.0)
    with pytest.raises(ValueError, match="eps"):
        MIZScoreEMA(eps=-1)
    with pytest.raises(ValueError, match="marginal_std"):
        MIZScoreEMA().update({"mi_est": 0.1})
    with pytest.raises(ValueError, match="prompt_ids"):
        mi_proxies(torch.zeros(3, 1, 3), torch.ones(3, 1), prompt_ids=[1, 2])


# --------------------------------------------------------------------------------------------------------------
# Edge cases: ties, a zero z-score denominator, a trace impossible under its own prompt
# --------------------------------------------------------------------------------------------------------------


def brute_tied_recall(scores: list[float], equivalent: list[bool], k: int) -> float:
    """P(an equivalent prompt is in the top k) over every ordering that sorts `scores` descending, each equally
    likely (a uniformly random tie-break), by plain enumeration of the permutations."""
    orders = [o for o in itertools.permutations(range(len(scores)))
              if all(scores[o[r]] >= scores[o[r + 1]] for r in range(len(o) - 1))]
    return sum(any(equivalent[j] for j in o[:k]) for o in orders) / len(orders)


@given(st.lists(st.integers(0, 2), min_size=5, max_size=5), st.lists(st.integers(0, 2), min_size=5, max_size=5),
       st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_ties_are_shared_as_a_uniformly_random_tie_break(levels, ids, seed):
    # scores drawn from 3 levels so ties are frequent; prompt ids from 3 values so duplicates are frequent
    p, g = 5, 2
    rnd = random.Random(seed)
    L = torch.tensor([[[float(levels[(j + rnd.randrange(2) * k) % p]) for j in range(p)] for k in range(g)]
                      for _ in range(p)], dtype=torch.float64)
    out = mi_proxies(L, torch.ones(p, g), prompt_ids=ids)
    for key, k in (("retrieval_acc", 1), ("recall_2", 2), ("recall_4", 4)):
        expected = sum(brute_tied_recall(L[i, kk].tolist(), [ids[j] == ids[i] for j in range(p)], k)
                       for i in range(p) for kk in range(g)) / (p * g)
        got = out["retrieval_acc"] if k == 1 else out["recall_at_k"][k]
        assert got == pytest.approx(expected, abs=1e-12), key


@pytest.mark.parametrize("ids", [[0, 0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 0, 0], [1, 0, 2, 3, 0, 4, 5, 6]])
def test_full_ties_score_the_chance_level_wherever_duplicates_sit(ids):
    # every prompt scores every trace the same: no information, so accuracy must equal the reported chance
    # (a lower-index tie-break gave 0.25 with the pair first and 0.125 with it last against a chance of 0.156)
    p, g = len(ids), 3
    out = mi_proxies(torch.zeros(p, g, p, dtype=torch.float64), torch.ones(p, g), prompt_ids=ids)
    assert out["retrieval_acc"] == pytest.approx(out["retrieval_chance"], abs=1e-12)
    assert out["retrieval_chance"] == pytest.approx((2 * 2 / 8 + 6 * 1 / 8) / 8)
    for k in (2, 4):
        assert out["recall_at_k"][k] == pytest.approx(out["recall_at_k_chance"][k], abs=1e-12)


def test_zero_denominator_zscore_is_defined():
    # every marginal term equal (sigma_batch = 0) and eps = 0: no ZeroDivisionError
    p, g = 3, 2
    collapsed = torch.zeros(p, g, p, dtype=torch.float64)  # no dependence: mi_est = 0
    assert mi_proxies(collapsed, torch.ones(p, g), eps=0.0)["mi_zscore"] == 0.0
    # full dependence with equal marginals: each trace possible only under its own prompt (every marginal term
    # is exactly -log P, so sigma_batch is exactly 0)
    dep = torch.full((p, g, p), -math.inf, dtype=torch.float64)
    for i in range(p):
        dep[i, :, i] = 0.0
    s = mi_proxies(dep, torch.ones(p, g), eps=0.0)
    assert s["marginal_std"] == 0.0 and s["mi_est"] > 0
    assert math.isnan(s["mi_zscore"])
    ema = MIZScoreEMA(eps=0.0)
    assert math.isnan(ema.update(s))
    assert MIZScoreEMA(eps=0.0).update({"mi_est": 0.0, "marginal_std": 0.0}) == 0.0


def test_minus_inf_under_its_own_prompt_raises_naming_the_row():
    L, n = random_L(3, 4, 2)
    L[2][1][2] = -math.inf
    with pytest.raises(ValueError, match=r"own prompt.*\(2, 1\)|\(2, 1\).*own prompt"):
        mi_proxies(torch.tensor(L, dtype=torch.float64), torch.tensor(n, dtype=torch.float64))


def test_minus_inf_under_own_prompt_is_fine_when_an_identical_prompt_scores_it():
    # prompts 0 and 1 are identical: the trace is possible under its (duplicated) prompt
    L, n = random_L(4, 3, 2)
    L[0][0][0] = -math.inf
    out = mi_proxies(torch.tensor(L, dtype=torch.float64), torch.tensor(n, dtype=torch.float64),
                     prompt_ids=["a", "a", "b"])
    assert out["retrieval_acc"] >= 0.0
