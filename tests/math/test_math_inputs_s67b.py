"""Infinite filter scores, tensor arguments given as lists, 16-bit inputs, seeds and counts of the math layer.

- An infinite score (or a variance that overflows float64) is treated like NaN by every strategy: never kept and
  counted in ``n_nan``; the batch statistics leave it out.
- Every public function of the math layer taking tensors takes ndarrays and nested lists too (like ``grpo``), and
  what torch cannot read is one ValueError naming the argument.
- 16-bit inputs of gae, kl_penalty, ppo_policy_loss and value_loss are computed in float32.
- ``mi_seq_null`` refuses a negative seed as numpy's seeding does; a ``top_k_abs`` count is at most 2**53.

References are plain loops over Python floats.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ragen_core.math.advantages import (
    aggregate_loss,
    expand_to_tokens,
    gae,
    masked_mean,
    masked_whiten,
    place_on_last_token,
    trajectory_token_weights,
)
from ragen_core.math.filtering import (
    MAX_COUNT,
    FilterSpec,
    FilterSpecError,
    compact,
    filter_groups,
    rv_statistics,
    select_groups,
)
from ragen_core.math.losses import kl_penalty, ppo_policy_loss, value_loss
from ragen_core.math.metrics import masked_token_entropy, rv_heterogeneity, token_entropy
from ragen_core.math.mi import mi_proxies, mi_seq_null

INF = math.inf


# ------------------------------------------------------------------------------------- plain-loop references
def _top_p_ref(scores: list[float], rate: float) -> list[int]:
    """Top-p over the finite scores, largest first, ties by lower index (eps = 0)."""
    cand = sorted((i for i, s in enumerate(scores) if math.isfinite(s)), key=lambda i: (-scores[i], i))
    total = sum(scores[i] for i in cand)
    if not total > 0:
        return []
    kept, acc = [], 0.0
    for i in cand:
        kept.append(i)
        acc += scores[i]
        if acc >= rate * total - 1e-9 * total:
            break
    return kept


def _gae_ref(r, v, m, gamma, lam):
    out_a = [[0.0] * len(row) for row in r]
    out_r = [[0.0] * len(row) for row in r]
    for b in range(len(r)):
        nv = na = 0.0
        for t in reversed(range(len(r[b]))):
            if m[b][t]:
                delta = r[b][t] + gamma * nv - v[b][t]
                na = delta + gamma * lam * na
                nv = v[b][t]
                out_a[b][t] = na
                out_r[b][t] = na + v[b][t]
    return out_a, out_r


# ------------------------------------------------------------------------------------------- 1. infinite scores
def test_top_p_never_keeps_an_infinite_score_s67b() -> None:
    """Before: [1, inf, 3] at 0.9 kept [1] (the threshold was NaN), [1, inf, inf, 3] kept [1] too; n_nan was 0."""
    for scores in ([1.0, INF, 3.0], [1.0, INF, INF, 3.0], [INF, 2.0, 0.5, INF, 1.0]):
        res = select_groups(torch.tensor(scores, dtype=torch.float64), "top_p", 0.9)
        assert res.kept.tolist() == _top_p_ref(scores, 0.9)
        assert res.n_nan == sum(1 for s in scores if s == INF) == res.n_excluded
        assert not any(res.mask[i] for i, s in enumerate(scores) if s == INF)
    assert select_groups(torch.tensor([1.0, INF, 3.0]), "top_p", 0.9).kept.tolist() == [2, 0]


@pytest.mark.parametrize(("strategy", "value"), [("top_p", 0.9), ("top_p", 0.3), ("top_k", 0.5), ("top_k", 1.0),
                                                 ("top_k_abs", 2), ("top_k_abs", 10), ("min_p", 0.5),
                                                 ("random", 0.9)])
@pytest.mark.parametrize("order", ["largest", "smallest"])
@pytest.mark.parametrize("include_zero", [True, False])
def test_every_strategy_treats_an_infinite_score_as_nan_s67b(strategy, value, order, include_zero) -> None:
    """An inf score is handled exactly as a NaN score (never kept, counted); before, inf groups were kept first."""
    scores = [1.0, INF, 0.0, 3.0, INF, 2.0]
    as_nan = [math.nan if s == INF else s for s in scores]

    def run(s):
        gen = torch.Generator().manual_seed(7) if strategy == "random" else None
        return select_groups(torch.tensor(s, dtype=torch.float64), strategy, value, order=order,
                             include_zero=include_zero, generator=gen)

    got, ref = run(scores), run(as_nan)
    assert got.kept.tolist() == ref.kept.tolist()
    assert got.mask.tolist() == ref.mask.tolist()
    assert (got.n_nan, got.n_excluded, got.empty) == (ref.n_nan, ref.n_excluded, ref.empty)
    assert got.n_nan == 2 and not got.mask[1] and not got.mask[4]
    finite = [s for s in scores if math.isfinite(s)]
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((s - mean) ** 2 for s in finite) / len(finite))
    assert got.rv_mean == pytest.approx(mean, rel=1e-12) and got.rv_std == pytest.approx(std, rel=1e-12)
    assert got.zero_fraction == pytest.approx(1 / 4)


def test_rv_statistics_leaves_out_infinite_variances_s67b() -> None:
    """Before: an inf variance made rv_mean inf and rv_std NaN, and n_nan did not count it."""
    v = [0.5, INF, 1.5, math.nan, 0.0]
    out = rv_statistics(torch.tensor(v))
    finite = [0.5, 1.5, 0.0]
    mean = sum(finite) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in finite) / 3)
    assert out["rv_mean"] == pytest.approx(mean) and out["rv_std"] == pytest.approx(std)
    assert out["rv_heterogeneity"] == pytest.approx(std / mean)
    assert out["n_nan"] == 2.0 and out["zero_fraction"] == pytest.approx(1 / 3)


def test_filter_groups_drops_a_group_whose_variance_overflows_s67b() -> None:
    """Finite rewards 1e200 and -1e200 have variance inf in float64: that group was kept alone by top-p (the
    threshold was NaN); it is now never kept and counted, like a group with a NaN reward."""
    rewards = torch.tensor([[1e200, -1e200], [0.0, 1.0], [0.0, 3.0], [2.0, 2.0]], dtype=torch.float64)
    res = filter_groups(rewards, "top_p", 0.9)
    variances = []
    for row in rewards.tolist():
        mean = sum(row) / 2
        variances.append(sum((x - mean) * (x - mean) for x in row) / 1)  # inf, not OverflowError
    assert variances[0] == INF
    assert res.kept.tolist() == _top_p_ref(variances, 0.9) == [2]
    assert res.n_nan == 1 and res.as_metrics()["filter/nan_groups"] == 1.0
    assert res.rv_mean == pytest.approx(sum(variances[1:]) / 3)


# ------------------------------------------------------------------------------------------ 2. rv_heterogeneity
@pytest.mark.parametrize("given", [[1.0, None], [[0.0, 1.0], [1.0, None]], ["a", 1.0]])
def test_rv_heterogeneity_names_an_unreadable_argument_s67b(given) -> None:
    """Before: torch's RuntimeError "Could not infer dtype of NoneType" (or a TypeError for a string)."""
    with pytest.raises(ValueError, match=r"^rewards_or_variances must be a real tensor \[P, G\] or \[P\]"):
        rv_heterogeneity(given)


def test_rv_heterogeneity_takes_lists_and_arrays_s67b() -> None:
    v = [1.0, 3.0, math.nan]
    mean, std = 2.0, 1.0
    assert rv_heterogeneity(v) == pytest.approx(std / mean)
    assert rv_heterogeneity(np.array(v)) == pytest.approx(std / mean)


# --------------------------------------------------------------------------------------- 3. lists and arrays
def test_gae_takes_lists_and_arrays_s67b() -> None:
    """Before: AttributeError 'list' object has no attribute 'dim'."""
    r = [[0.0, 0.5, 1.0], [1.0, 0.0, 0.0]]
    v = [[0.25, 0.5, 0.125], [0.0, 0.75, 0.5]]
    m = [[1, 1, 1], [1, 0, 1]]
    adv, ret = gae(r, v, m, gamma=0.9, lam=0.8)
    ra, rr = _gae_ref(r, v, m, 0.9, 0.8)
    assert adv.dtype == torch.float32
    assert torch.allclose(adv, torch.tensor(ra), atol=1e-6) and torch.allclose(ret, torch.tensor(rr), atol=1e-6)
    adv64, _ = gae(np.array(r), np.array(v), np.array(m), gamma=0.9, lam=0.8)
    assert adv64.dtype == torch.float64 and torch.allclose(adv64, torch.tensor(ra, dtype=torch.float64),
                                                           atol=1e-15, rtol=0)
    # [B] outcome rewards as a list: placed on the last valid token
    adv_b, _ = gae([1.0, 2.0], v, m, gamma=1.0, lam=1.0)
    ra_b, _ = _gae_ref([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]], v, m, 1.0, 1.0)
    assert torch.allclose(adv_b, torch.tensor(ra_b), atol=1e-6)


def test_losses_and_entropy_take_lists_s67b() -> None:
    """Before: AttributeError on ``.shape`` / ``.dim`` of a list; each list result equals the tensor result."""
    lp, old, adv, m = [[-1.0, -0.5], [-2.0, -0.1]], [[-1.2, -0.4], [-1.0, -0.1]], [[1.0, -2.0], [0.5, 1.0]], [[1, 1],
                                                                                                          [1, 0]]
    t = [torch.tensor(x) for x in (lp, old, adv, m)]
    loss_l, stats_l = ppo_policy_loss(lp, old, adv, m)
    loss_t, stats_t = ppo_policy_loss(*t)
    assert torch.equal(loss_l, loss_t) and stats_l == stats_t
    # plain-loop reference of the clipped surrogate, token-mean over the 3 valid tokens
    total = 0.0
    for b in range(2):
        for k in range(2):
            if m[b][k]:
                r = math.exp(lp[b][k] - old[b][k])
                a = adv[b][k]
                clipped = max(-a * r, -a * min(max(r, 0.8), 1.28))
                total += min(clipped, -3.0 * a) if a < 0 else clipped
    assert float(loss_l) == pytest.approx(total / 3, rel=1e-6)
    assert torch.equal(kl_penalty(lp, old, "k2"), kl_penalty(t[0], t[1], "k2"))
    assert torch.equal(value_loss(lp, old, adv, m)[0], value_loss(t[0], t[1], t[2], t[3])[0])
    logits = [[[0.0, 0.0], [1.0, -1.0]], [[2.0, 0.0], [0.0, 0.0]]]
    ent = token_entropy(logits)
    ref = []
    for row in logits:
        for lg in row:
            z = sum(math.exp(x) for x in lg)
            ref.append(-sum(math.exp(x) / z * (x - math.log(z)) for x in lg))
    assert torch.allclose(ent.reshape(-1), torch.tensor(ref), atol=1e-6)
    assert float(masked_token_entropy(logits, m)) == pytest.approx(sum(ref[:3]) / 3, rel=1e-6)
    assert float(masked_mean(lp, m)) == pytest.approx((-1.0 - 0.5 - 2.0) / 3)
    assert float(aggregate_loss(lp, m, "seq-mean-token-sum")) == pytest.approx((-1.5 - 2.0) / 2)
    assert torch.equal(masked_whiten(lp, m), masked_whiten(t[0], t[3]))
    assert expand_to_tokens([1.0, 2.0], m).tolist() == [[1.0, 1.0], [2.0, 0.0]]
    assert place_on_last_token([1.0, 2.0], m).tolist() == [[0.0, 1.0], [2.0, 0.0]]
    assert torch.equal(trajectory_token_weights([0, 0], m), trajectory_token_weights(torch.tensor([0, 0]), t[3]))


@pytest.mark.parametrize(("call", "name"), [
    (lambda: gae([[1.0, None]], [[0.0, 0.0]], [[1, 1]]), "rewards"),
    (lambda: gae([[1.0, 0.0]], "v", [[1, 1]]), "values"),
    (lambda: ppo_policy_loss([[0.0]], [[None]], [[1.0]], [[1]]), "old_log_probs"),
    (lambda: ppo_policy_loss([[0.0]], [[0.0]], [[1.0]], [[None]]), "mask"),
    (lambda: kl_penalty([[None]], [[0.0]]), "log_probs"),
    (lambda: value_loss([[0.0]], [[0.0]], [[None]], [[1]]), "returns"),
    (lambda: token_entropy([[None, 1.0]]), "logits"),
    (lambda: aggregate_loss([[None]], [[1]]), "loss_mat"),
    (lambda: masked_mean([[1.0]], [[None]]), "mask"),
    (lambda: mi_seq_null([[[None, 0.0]], [[0.0, 0.0]]]), "L"),
    (lambda: mi_proxies([[[0.0]]], [[None]]), "lengths"),
    (lambda: compact({"attention_mask": torch.ones(2, 2)}, [None], 1), "kept"),
])
def test_unreadable_tensor_arguments_are_one_line_naming_them_s67b(call, name) -> None:
    """Before: AttributeError ('list' object has no attribute 'shape') or torch's RuntimeError."""
    with pytest.raises(ValueError, match=rf"^{name} must be a real tensor .* or nested lists of numbers") as info:
        call()
    assert "\n" not in str(info.value)


# -------------------------------------------------------------------------------------------------- 4. 16-bit
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gae_computes_16_bit_inputs_in_float32_s67b(dtype) -> None:
    """Before: float16 returns of 40000 + 40000 overflowed to inf, and the recursion rounded in 16 bits."""
    r = torch.tensor([[40000.0, 40000.0, 0.0], [0.5, 0.25, 1.0]], dtype=dtype)
    v = torch.tensor([[0.0, 0.0, 0.0], [0.125, 0.5, 0.75]], dtype=dtype)
    m = torch.tensor([[1, 1, 1], [1, 1, 1]])
    adv, ret = gae(r, v, m, gamma=0.9, lam=0.7)
    assert adv.dtype == ret.dtype == torch.float32
    ra, rr = _gae_ref(r.float().tolist(), v.float().tolist(), m.tolist(), 0.9, 0.7)
    assert torch.allclose(adv, torch.tensor(ra), rtol=1e-6, atol=1e-6)
    assert torch.allclose(ret, torch.tensor(rr), rtol=1e-6, atol=1e-6)
    assert bool(torch.isfinite(ret).all())
    # the same as float32 inputs holding the same values, bit for bit
    a32, r32 = gae(r.float(), v.float(), m, gamma=0.9, lam=0.7)
    assert torch.equal(adv, a32) and torch.equal(ret, r32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kl_penalty_computes_16_bit_inputs_in_float32_s67b(dtype) -> None:
    """Before: k2 of d = 400 was 0.5 * 160000 = inf in float16, and every estimate was rounded to 16 bits."""
    lp = torch.tensor([[-400.0, -1.5, -0.25]], dtype=dtype)
    ref_lp = torch.tensor([[0.0, -1.0, -0.5]], dtype=dtype)
    for kind in ("k1", "k2", "k3"):
        got = kl_penalty(lp, ref_lp, kind)
        assert got.dtype == torch.float32
        assert torch.equal(got, kl_penalty(lp.float(), ref_lp.float(), kind))
    d = [a - b for a, b in zip(lp.float().tolist()[0], ref_lp.float().tolist()[0])]
    assert kl_penalty(lp, ref_lp, "k2").tolist()[0] == pytest.approx([0.5 * x * x for x in d], rel=1e-6)


def test_ppo_and_value_loss_compute_16_bit_inputs_in_float32_s67b() -> None:
    """Before: a log-ratio of 12 gave ratio exp(12) = 162755 = inf in float16, so the loss of a negative advantage
    without the dual clip was inf; a value error of 300 squared to inf."""
    lp = torch.tensor([[0.0, -1.0]], dtype=torch.float16)
    old = torch.tensor([[-12.0, -1.0]], dtype=torch.float16)
    adv = torch.tensor([[-1.0, 0.5]], dtype=torch.float16)
    m = torch.ones(1, 2)
    loss, _ = ppo_policy_loss(lp, old, adv, m, dual_clip_c=None)
    ref = (1.0 * math.exp(12.0) + -0.5 * 1.0) / 2  # max(-A r, -A clip(r)) per token
    assert math.isfinite(float(loss)) and float(loss) == pytest.approx(ref, rel=1e-6)
    assert torch.equal(loss, ppo_policy_loss(lp.float(), old.float(), adv.float(), m, dual_clip_c=None)[0])
    values = torch.tensor([[300.0, 1.0]], dtype=torch.float16)
    zeros = torch.zeros(1, 2, dtype=torch.float16)
    vl, _ = value_loss(values, zeros, zeros, m, clip_range=None)
    assert float(vl) == pytest.approx((0.5 * 300.0**2 + 0.5) / 2)


def test_float32_and_float64_inputs_keep_their_dtype_s67b() -> None:
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        a, b = torch.randn(2, 4, generator=g, dtype=dtype), torch.randn(2, 4, generator=g, dtype=dtype)
        assert kl_penalty(a, b, "k3").dtype == dtype
        assert gae(a, b, torch.ones(2, 4))[0].dtype == dtype


# --------------------------------------------------------------------------------------- 5. mi_seq_null's seed
def test_mi_seq_null_refuses_a_seed_numpy_would_refuse_s67b() -> None:
    """Before: seed=-1 ran (torch reads it as 2**64 - 1, the same draws as that seed); numpy refuses it."""
    g = torch.Generator().manual_seed(0)
    L = torch.randn(9, 2, 9, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError):
        np.random.default_rng(-1)
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0"):
        mi_seq_null(L, n_perm=5, seed=-1)
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64\)"):
        mi_seq_null(L, n_perm=5, seed=2**64)
    assert mi_seq_null(L, n_perm=5, seed=np.int64(4)) == mi_seq_null(L, n_perm=5, seed=4)
    assert mi_seq_null(L, n_perm=5, seed=2**64 - 1)["permutations"] == 6


# ----------------------------------------------------------------------------------------- 7. top_k_abs counts
@pytest.mark.parametrize("value", [1e300, 2**53 + 1, np.int64(2**53 + 1), float(2**60)])
def test_top_k_abs_count_above_2_53_is_refused_s67b(value) -> None:
    """Before: 1e300 was accepted (and 2**53 + 1 silently stored as 2**53)."""
    with pytest.raises(FilterSpecError, match=r"^value must be a positive integer count for strategy='top_k_abs' "
                                              r"of at most 2\*\*53"):
        FilterSpec(strategy="top_k_abs", value=value)


def test_top_k_abs_large_count_keeps_every_candidate_s67b() -> None:
    assert MAX_COUNT == 2**53
    assert FilterSpec(strategy="top_k_abs", value=2**53).value == float(2**53)
    assert FilterSpec(strategy="top_k_abs", value=np.int64(3)).value == 3.0
    scores = torch.tensor([0.5, math.nan, 2.0, 1.0])
    res = select_groups(scores, "top_k_abs", 2**53)
    assert res.kept.tolist() == [2, 3, 0]  # every finite group, largest first
    for bad in (2.5, 0, True, "3"):
        with pytest.raises(FilterSpecError, match=r"^value must be a positive integer count for "
                                                  r"strategy='top_k_abs'"):
            FilterSpec(strategy="top_k_abs", value=bad)
