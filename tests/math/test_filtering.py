"""SNR-aware filtering (the paper, section 4) against plain-Python references."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.filtering import compact, filter_groups, reward_variance, rv_statistics, select_groups

# --------------------------------------------------------------------------------------------------------------
# Independent references (plain Python, no torch)
# --------------------------------------------------------------------------------------------------------------


def ref_variance(row: list[float], ddof: int = 1) -> float:
    n = len(row)
    mean = sum(row) / n
    return sum((x - mean) ** 2 for x in row) / (n - ddof)


def ref_ranking(scores: list[float], order: str = "largest") -> list[int]:
    sign = -1 if order == "largest" else 1
    return sorted(range(len(scores)), key=lambda i: (sign * scores[i], i))


def ref_top_p(scores: list[float], rho: float, eps: float = 0.0, order: str = "largest",
              include_zero: bool = True) -> set[int]:
    cand = [i for i in ref_ranking(scores, order) if include_zero or scores[i] > 1e-10]
    total = 0.0
    for i in cand:
        total += scores[i]
    if total <= 0:
        return set()
    threshold = rho * total - eps
    acc = 0.0
    kept = []
    for i in cand:
        acc += scores[i]
        kept.append(i)
        if acc >= threshold:
            break
    return set(kept)


def kept_set(result) -> set[int]:
    return set(result.kept.tolist())


int_rewards = st.integers(min_value=-3, max_value=3)


@st.composite
def reward_matrix(draw, max_p: int = 8, g_choices=(2, 4, 8)):
    p = draw(st.integers(min_value=1, max_value=max_p))
    g = draw(st.sampled_from(g_choices))
    rows = draw(st.lists(st.lists(int_rewards, min_size=g, max_size=g), min_size=p, max_size=p))
    return torch.tensor(rows, dtype=torch.float64)


# --------------------------------------------------------------------------------------------------------------
# reward_variance and statistics
# --------------------------------------------------------------------------------------------------------------


@given(reward_matrix(), st.sampled_from([0, 1]))
@settings(max_examples=60, deadline=None)
def test_reward_variance_matches_loop(rewards, ddof):
    v = reward_variance(rewards, ddof=ddof)
    for i, row in enumerate(rewards.tolist()):
        assert v[i].item() == pytest.approx(ref_variance(row, ddof), abs=1e-12)


def test_reward_variance_nan_group():
    r = torch.tensor([[0.0, 1.0], [math.nan, 1.0], [2.0, 2.0]])
    v = reward_variance(r)
    assert v[0].item() == pytest.approx(0.5)
    assert math.isnan(v[1].item())
    assert v[2].item() == 0.0


def test_nan_group_is_never_kept_and_counted():
    r = torch.tensor([[0.0, 10.0], [math.nan, 100.0], [0.0, 1.0]])
    res = filter_groups(r, strategy="top_p", value=1.0)
    assert 1 not in kept_set(res)
    assert res.n_nan == 1
    assert kept_set(res) == {0, 2}
    res = filter_groups(r, strategy="top_k", value=1.0)
    assert kept_set(res) == {0, 2}


def test_rv_statistics_matches_statistics_module():
    v = [0.0, 0.25, 0.25, 1.0, 0.0, 2.5]
    s = rv_statistics(torch.tensor(v + [math.nan]))
    assert s["rv_mean"] == pytest.approx(statistics.fmean(v))
    assert s["rv_std"] == pytest.approx(statistics.pstdev(v))
    assert s["rv_heterogeneity"] == pytest.approx(statistics.pstdev(v) / statistics.fmean(v))
    assert s["zero_fraction"] == pytest.approx(2 / 6)
    assert s["n_nan"] == 1


def test_rv_statistics_nan_safe():
    assert math.isnan(rv_statistics(torch.zeros(4))["rv_heterogeneity"])
    assert math.isnan(rv_statistics(torch.tensor([math.nan, math.nan]))["rv_mean"])


def test_filter_result_batch_stats_use_variance_even_for_std_score():
    r = torch.tensor([[0.0, 2.0], [0.0, 0.0], [0.0, 4.0]])
    res = filter_groups(r, score="std")
    v = [ref_variance(row) for row in r.tolist()]
    assert res.rv_mean == pytest.approx(statistics.fmean(v))
    assert res.rv_heterogeneity == pytest.approx(statistics.pstdev(v) / statistics.fmean(v))
    assert res.scores.tolist() == pytest.approx([math.sqrt(x) for x in v])


# --------------------------------------------------------------------------------------------------------------
# top_p: exhaustive, prefix, minimality, monotonicity, invariances
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.75, 0.9, 1.0])
@pytest.mark.parametrize("order", ["largest", "smallest"])
def test_top_p_exhaustive_small_integer_scores(rho, order):
    for p in range(1, 5):
        for scores in itertools.product(range(4), repeat=p):
            res = select_groups(torch.tensor(scores, dtype=torch.float64), "top_p", rho, order=order)
            expected = ref_top_p(list(map(float, scores)), rho, order=order)
            assert kept_set(res) == expected, (scores, rho, order)
            assert res.empty == (not expected)


@pytest.mark.parametrize("include_zero", [True, False])
def test_top_p_exhaustive_with_eps_and_include_zero(include_zero):
    for scores in itertools.product([0.0, 0.005, 1.0, 3.0], repeat=3):
        for eps in (0.0, 0.01):
            res = select_groups(torch.tensor(scores, dtype=torch.float64), "top_p", 0.9, eps=eps,
                                include_zero=include_zero)
            assert kept_set(res) == ref_top_p(list(scores), 0.9, eps=eps, include_zero=include_zero)


@given(reward_matrix(), st.floats(min_value=0.05, max_value=1.0))
@settings(max_examples=150, deadline=None)
def test_top_p_prefix_and_minimality(rewards, rho):
    res = filter_groups(rewards, "top_p", rho)
    v = [ref_variance(row) for row in rewards.tolist()]
    ranking = ref_ranking(v)
    k = res.n_kept
    total = sum(v)
    if total == 0:
        assert res.empty and k == 0
        return
    # prefix: the kept groups are exactly the first k of the stable descending ranking
    assert kept_set(res) == set(ranking[:k])
    assert res.kept.tolist() == ranking[:k]  # kept in descending score order, ties by lower index
    # minimality: the prefix reaches the threshold and one group fewer does not
    assert sum(v[i] for i in ranking[:k]) >= rho * total - 1e-12
    assert sum(v[i] for i in ranking[: k - 1]) < rho * total


@given(reward_matrix(), st.floats(min_value=0.05, max_value=1.0), st.floats(min_value=0.05, max_value=1.0))
@settings(max_examples=100, deadline=None)
def test_top_p_monotone_in_value(rewards, a, b):
    lo, hi = min(a, b), max(a, b)
    small, large = filter_groups(rewards, "top_p", lo), filter_groups(rewards, "top_p", hi)
    assert small.n_kept <= large.n_kept
    assert kept_set(small) <= kept_set(large)


@given(reward_matrix(), st.sampled_from([0.25, 0.5, 2.0, 8.0]), st.integers(-5, 5),
       st.sampled_from(["top_p", "top_k", "min_p"]), st.sampled_from(["variance", "std"]))
@settings(max_examples=100, deadline=None)
def test_invariant_to_scaling_and_shifting_rewards(rewards, scale, shift, strategy, score):
    # powers of two and integer shifts keep every arithmetic step exact, so the comparison is exact too
    base = filter_groups(rewards, strategy, 0.7, score=score)
    moved = filter_groups(rewards * scale + shift, strategy, 0.7, score=score)
    assert moved.kept.tolist() == base.kept.tolist()


@given(reward_matrix(), st.randoms(use_true_random=False), st.sampled_from(["top_p", "top_k", "min_p"]))
@settings(max_examples=100, deadline=None)
def test_permutation_equivariant(rewards, rnd, strategy):
    p = rewards.shape[0]
    perm = list(range(p))
    rnd.shuffle(perm)
    base = filter_groups(rewards, strategy, 0.6)
    permuted = filter_groups(rewards[torch.tensor(perm)], strategy, 0.6)
    v = [ref_variance(row) for row in rewards.tolist()]
    # kept score multiset is invariant; with distinct scores the kept set maps exactly
    assert sorted(v[perm[i]] for i in permuted.kept.tolist()) == sorted(v[i] for i in base.kept.tolist())
    if len(set(v)) == p:
        assert {perm[i] for i in permuted.kept.tolist()} == kept_set(base)


def test_paper_example_variance_vs_std():
    v = torch.tensor([9.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert select_groups(v, "top_p", 0.9).n_kept == 3
    assert select_groups(v.sqrt(), "top_p", 0.9).n_kept == 4
    # the same through rewards: G = 2 rows [0, x] have variance x^2 / 2
    rewards = torch.stack([torch.zeros(4, dtype=torch.float64), (2 * v).sqrt()], dim=1)
    assert filter_groups(rewards, score="variance").n_kept == 3
    assert filter_groups(rewards, score="std").n_kept == 4


@pytest.mark.parametrize("strategy, value", [("top_p", 0.9), ("top_k", 0.9), ("top_k", 0.1), ("top_k_abs", 3),
                                             ("min_p", 0.5), ("random", 0.9)])
@pytest.mark.parametrize("order", ["largest", "smallest"])
@pytest.mark.parametrize("score", ["variance", "std"])
def test_all_zero_batch_keeps_nothing_under_every_strategy(strategy, value, order, score):
    # sum V = 0: every strategy agrees on "keep nothing, skip the step" (top_k used to keep group 0)
    r = torch.ones(5, 4)
    res = filter_groups(r, strategy, value, order=order, score=score, generator=torch.Generator().manual_seed(0))
    assert res.empty and res.n_kept == 0 and res.kept_fraction == 0.0
    assert not res.mask.any() and res.kept.numel() == 0
    assert math.isnan(res.rv_heterogeneity)


def test_all_zero_batch_with_nan_groups_keeps_nothing():
    r = torch.tensor([[1.0, 1.0], [math.nan, 2.0], [3.0, 3.0]])
    for strategy, value in (("top_p", 0.9), ("top_k", 1.0), ("top_k_abs", 2), ("min_p", 0.5)):
        res = filter_groups(r, strategy, value)
        assert res.empty and res.n_nan == 1, strategy


def test_zero_groups_stay_eligible_when_some_variance_is_positive():
    # include_zero=True keeps zero-variance groups eligible once the batch has signal
    v = torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64)
    assert kept_set(select_groups(v, "top_k", 1.0)) == {0, 1, 2}
    assert kept_set(select_groups(v, "top_k_abs", 2)) == {0, 1}
    assert not select_groups(v, "top_k", 0.1).empty


def test_include_zero_false_drops_zero_groups_before_ranking():
    v = torch.tensor([0.0, 2.0, 0.0, 1.0], dtype=torch.float64)
    assert kept_set(select_groups(v, "top_k", 1.0, include_zero=False)) == {1, 3}
    assert kept_set(select_groups(v, "top_k", 1.0, include_zero=True)) == {0, 1, 2, 3}
    assert kept_set(select_groups(v, "top_p", 1.0, order="smallest", include_zero=False)) == {1, 3}
    assert select_groups(v, "top_k", 1.0, include_zero=False).n_excluded == 2


# --------------------------------------------------------------------------------------------------------------
# Other strategies
# --------------------------------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 5), min_size=1, max_size=10), st.floats(min_value=0.01, max_value=1.0),
       st.sampled_from(["largest", "smallest"]))
@settings(max_examples=100, deadline=None)
def test_top_k_matches_reference(scores, rho, order):
    s = [float(x) for x in scores]
    k = max(1, math.floor(rho * len(s) + 1e-9)) if sum(s) > 0 else 0  # sum V = 0: keep nothing
    res = select_groups(torch.tensor(s, dtype=torch.float64), "top_k", rho, order=order)
    assert kept_set(res) == set(ref_ranking(s, order)[:k])
    assert res.empty == (k == 0)


def test_top_k_floor_is_robust_to_float_rounding():
    s = torch.arange(100, dtype=torch.float64)
    assert select_groups(s, "top_k", 0.29).n_kept == 29  # 0.29 * 100 == 28.999999999999996 in binary
    assert select_groups(s, "top_k", 0.001).n_kept == 1


def test_top_k_abs():
    s = torch.tensor([1.0, 5.0, 3.0, 3.0], dtype=torch.float64)
    assert select_groups(s, "top_k_abs", 2).kept.tolist() == [1, 2]
    assert select_groups(s, "top_k_abs", 10).n_kept == 4
    assert select_groups(s, "top_k_abs", 3, order="smallest").kept.tolist() == [2, 3, 0]
    assert kept_set(select_groups(s, "top_k_abs", 3, order="smallest")) == {0, 2, 3}


@given(st.lists(st.integers(0, 9), min_size=1, max_size=10), st.floats(min_value=0.01, max_value=1.0))
@settings(max_examples=100, deadline=None)
def test_min_p_matches_reference(scores, ratio):
    s = [float(x) for x in scores]
    res = select_groups(torch.tensor(s, dtype=torch.float64), "min_p", ratio)
    smax = max(s)
    expected = set() if smax <= 0 else {i for i, x in enumerate(s) if x >= ratio * smax}
    assert kept_set(res) == expected
    rev = select_groups(torch.tensor(s, dtype=torch.float64), "min_p", ratio, order="smallest")
    assert kept_set(rev) == set(ref_ranking(s, "smallest")[: len(expected)])


def test_min_p_on_std_equals_p_squared_on_variance():
    v = torch.tensor([4.0, 1.0, 0.25, 2.25, 0.0], dtype=torch.float64)
    for p in (0.3, 0.6, 0.8):
        assert kept_set(select_groups(v.sqrt(), "min_p", p)) == kept_set(select_groups(v, "min_p", p * p))


def test_random_strategy_count_reproducibility_and_uniformity():
    v = torch.tensor([9.0, 4.0, 1.0, 1.0, 0.0, 0.5, 2.0, 3.0], dtype=torch.float64)
    k = select_groups(v, "top_p", 0.9).n_kept
    a = select_groups(v, "random", 0.9, generator=torch.Generator().manual_seed(3))
    b = select_groups(v, "random", 0.9, generator=torch.Generator().manual_seed(3))
    assert a.kept.tolist() == b.kept.tolist()
    assert a.n_kept == k
    # kept listed in descending score order
    assert [v[i].item() for i in a.kept.tolist()] == sorted((v[i].item() for i in a.kept.tolist()), reverse=True)
    gen = torch.Generator().manual_seed(0)
    counts = [0] * 8
    draws = 2000
    for _ in range(draws):
        for i in select_groups(v, "random", 0.9, generator=gen).kept.tolist():
            counts[i] += 1
    expected = draws * k / 8
    assert all(abs(c - expected) < 0.1 * expected for c in counts), counts


def test_random_excludes_nan_and_zero_when_asked():
    v = torch.tensor([math.nan, 0.0, 1.0, 2.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        kept = kept_set(select_groups(v, "random", 1.0, include_zero=False, generator=gen))
        assert kept <= {2, 3}


def test_mask_and_kept_fraction_consistent():
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 3.0], [1.0, 2.0]])
    res = filter_groups(r, "top_p", 0.9)
    assert res.mask.tolist() == [i in kept_set(res) for i in range(4)]
    assert res.kept_fraction == pytest.approx(res.n_kept / 4)
    assert res.kept.dtype == torch.long and res.mask.dtype == torch.bool
    metrics = res.as_metrics()
    assert metrics["filter/kept_groups"] == res.n_kept


# --------------------------------------------------------------------------------------------------------------
# Argument validation
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"value": 0.0}, "value"),
        ({"value": 1.5}, "(0, 1]"),
        ({"value": -0.1, "strategy": "min_p"}, "value"),
        ({"strategy": "top_q"}, "strategy"),
        ({"order": "middle"}, "order"),
        ({"score": "mad"}, "score"),
        ({"strategy": "top_k_abs", "value": 2.5}, "integer"),
        ({"strategy": "top_k_abs", "value": 0}, "integer"),
        ({"strategy": "random"}, "generator"),
        ({"eps": -0.01}, "eps"),
        ({"ddof": -1}, "ddof"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, fragment):
    with pytest.raises(ValueError) as info:
        filter_groups(torch.rand(4, 4), **kwargs)
    assert fragment in str(info.value)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), (0, 4)])
def test_bad_reward_shapes(shape):
    with pytest.raises(ValueError, match="rewards"):
        filter_groups(torch.zeros(shape))


def test_single_rollout_groups_need_ddof_zero():
    with pytest.raises(ValueError, match="G > ddof"):
        filter_groups(torch.zeros(4, 1), ddof=1)
    assert filter_groups(torch.zeros(4, 1), ddof=0).empty


# --------------------------------------------------------------------------------------------------------------
# compact
# --------------------------------------------------------------------------------------------------------------


def _batch(p: int, g: int, lengths: list[int], t: int, left: bool = False) -> dict[str, torch.Tensor]:
    b = p * g
    mask = torch.zeros(b, t, dtype=torch.long)
    for r, n in enumerate(lengths):
        if left:
            mask[r, t - n:] = 1
        else:
            mask[r, :n] = 1
    ids = torch.arange(b * t).reshape(b, t) * mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "advantages": torch.randn(b, t, generator=torch.Generator().manual_seed(0)) * mask,
        "old_log_probs": -torch.rand(b, t, generator=torch.Generator().manual_seed(1)) * mask,
        "rewards": torch.arange(b, dtype=torch.float32),
    }


@pytest.mark.parametrize("left", [False, True])
def test_compact_removes_rows_and_repads(left):
    p, g, t = 4, 2, 9
    lengths = [3, 2, 9, 8, 4, 5, 1, 2]
    batch = _batch(p, g, lengths, t, left=left)
    kept = torch.tensor([2, 0])
    out = compact(batch, kept, group_size=g)
    rows = [4, 5, 0, 1]
    width = max(lengths[r] for r in rows)
    assert out["input_ids"].shape == (4, width)
    assert out["rewards"].tolist() == [float(r) for r in rows]
    for name in ("input_ids", "attention_mask", "advantages", "old_log_probs"):
        for new_r, old_r in enumerate(rows):
            old_row = batch[name][old_r].tolist()
            expected = old_row[t - width:] if left else old_row[:width]
            assert out[name][new_r].tolist() == expected
    # the token count is preserved exactly for the kept sequences
    assert int(out["attention_mask"].sum()) == sum(lengths[r] for r in rows)


def test_compact_empty_and_errors():
    batch = _batch(2, 2, [1, 2, 3, 1], 4)
    empty = compact(batch, torch.tensor([], dtype=torch.long), group_size=2)
    assert empty["input_ids"].shape[0] == 0
    with pytest.raises(ValueError, match="group_size"):
        compact(batch, torch.tensor([0]), group_size=3)
    with pytest.raises(ValueError, match="kept"):
        compact(batch, torch.tensor([5]), group_size=2)
    with pytest.raises(ValueError, match="mask_key"):
        compact(batch, torch.tensor([0]), group_size=2, mask_key="response_mask")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 0.1, -0.1, 0.3, 10.0]), min_size=3, max_size=8), st.randoms())
def test_reward_variance_is_bitwise_invariant_to_rollout_order(row, rnd):
    shuffled = list(row)
    rnd.shuffle(shuffled)
    v = reward_variance(torch.tensor([row, shuffled], dtype=torch.float64))
    assert v[0].item() == v[1].item()  # exact: equal multisets of rewards are equal scores, not "close"


def test_same_rewards_in_another_order_tie_break_by_lower_index():
    # [0, 0, 0, 1, 0] and [0, 0, 0, 0, 1] used to score 0.20000000000000004 vs 0.20000000000000007, so the later
    # group won a tie that the stable rule gives to the earlier one.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [0.0] * 5])
    res = filter_groups(rewards, strategy="top_k_abs", value=1)
    assert res.kept.tolist() == [0]
