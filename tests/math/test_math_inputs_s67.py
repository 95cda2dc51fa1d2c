"""Scalar settings and input dtypes of the math layer's public functions (and the TRL adapter's group_rewards).

A bool, a string or a non-finite value for a numeric setting is one ValueError naming it; numpy integers and
floats work as Python's; 16-bit rewards are summed in float32. References are plain loops over Python floats.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ragen_core.integrations.trl.rows import group_rewards
from ragen_core.math.advantages import aggregate_loss, gae, grpo, masked_whiten, rloo
from ragen_core.math.filtering import (
    FilterSpec,
    FilterSpecError,
    compact,
    filter_groups,
    reward_variance,
    select_groups,
)
from ragen_core.math.losses import ppo_policy_loss, value_loss
from ragen_core.math.metrics import classify_regime, noise_note
from ragen_core.math.mi import MIZScoreEMA, mi_proxies, mi_seq_null

# ----------------------------------------------------------------------------------------------- FilterSpec


@pytest.mark.parametrize(("field", "value", "pattern"), [
    ("value", True, r"^value must be a number in \(0, 1\] for strategy='top_p', not a bool; got True$"),
    ("value", "0.9", r"^value must be a number in \(0, 1\] for strategy='top_p'; got '0\.9'$"),
    ("value", None, r"^value must be a number in \(0, 1\]"),
    ("eps", math.inf, r"^eps must be a finite number >= 0; got inf$"),
    ("eps", True, r"^eps must be a non-negative number, not a bool; got True$"),
    ("eps", "0.01", r"^eps must be a non-negative number; got '0\.01'$"),
    ("ddof", np.float64(1.0), r"^ddof must be a non-negative integer"),
    ("ddof", True, r"^ddof must be a non-negative integer"),
])
def test_filter_spec_refuses_bools_strings_and_infinities(field, value, pattern) -> None:
    with pytest.raises(FilterSpecError, match=pattern) as info:
        FilterSpec(**{field: value})
    assert info.value.field == field


@pytest.mark.parametrize("value", [True, "3", math.inf, np.bool_(True)])
def test_top_k_abs_count_refuses_bools_strings_and_infinity(value) -> None:
    with pytest.raises(FilterSpecError, match=r"^value must be a positive integer count"):
        FilterSpec(strategy="top_k_abs", value=value)


def test_filter_spec_takes_numpy_numbers_as_python_numbers() -> None:
    spec = FilterSpec(strategy="top_k_abs", value=np.int64(2), ddof=np.int64(0), eps=np.float64(0.01),
                      order=np.str_("largest"))
    assert spec == FilterSpec(strategy="top_k_abs", value=2, ddof=0, eps=0.01, order="largest")
    assert type(spec.ddof) is int and type(spec.value) is float and type(spec.order) is str
    # a numpy ddof reaches reward_variance and rv_heterogeneity too: the sample variance of [0, 1] is 1/2
    assert reward_variance(torch.tensor([[0.0, 1.0]]), ddof=np.int64(1)).tolist() == [0.5]
    # and a numpy group size reaches check_group_size and compact, as an int would
    FilterSpec().check_group_size(np.int64(2))
    batch = {"attention_mask": torch.tensor([[1, 0], [1, 0], [1, 1], [1, 1]])}
    assert compact(batch, torch.tensor([1]), np.int64(2))["attention_mask"].tolist() == [[1, 1], [1, 1]]


@pytest.mark.parametrize("group_size", ["4", True, 0, 2.0])
def test_check_group_size_names_a_bad_group_size(group_size) -> None:
    with pytest.raises(ValueError, match=r"^group_size must be an integer >= 1"):
        FilterSpec(ddof=0).check_group_size(group_size)


def test_none_in_reward_lists_names_the_argument() -> None:
    with pytest.raises(ValueError, match=r"^rewards must be a real tensor \[P, G\] or nested lists of numbers"):
        reward_variance([[None, 1.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match=r"^scores must be a real tensor \[P\]"):
        select_groups([1.0, None])


@pytest.mark.parametrize("scores", [torch.tensor([True, False]), torch.tensor([1j, 1.0])])
def test_select_groups_refuses_bool_and_complex_scores(scores) -> None:
    with pytest.raises(ValueError, match=r"^scores must be real numbers"):
        select_groups(scores)


# ----------------------------------------------------------------------------------------------- group_rewards


def _group_rewards_loop(rows, weights, g):
    """R[i][k] = sum_f w_f r_f over the non-NaN r_f (Python floats); NaN when all are NaN or the sum is infinite."""
    out = []
    for r in range(0, len(rows), g):
        group = []
        for row in rows[r:r + g]:
            terms = [w * v for v, w in zip(row, weights) if not math.isnan(v)]
            total = sum(terms) if terms else math.nan
            group.append(math.nan if math.isinf(total) else total)
        out.append(group)
    return out


def _same(a, b) -> bool:
    def eq(u, v):
        return (math.isnan(u) and math.isnan(v)) or u == v

    return len(a) == len(b) and all(len(x) == len(y) and all(map(eq, x, y)) for x, y in zip(a, b))


def test_group_rewards_reads_none_as_an_unscored_completion() -> None:
    rows = [[None, None], [1.0, 0.0], [None, 2.0], [0.0, 1.0]]
    got = group_rewards(rows, [1.0, 0.5], 2)
    ref = _group_rewards_loop([[math.nan if v is None else v for v in row] for row in rows], [1.0, 0.5], 2)
    assert _same(got.tolist(), ref)
    res = filter_groups(got, "top_k", 1.0)
    assert res.n_nan == 1 and res.kept.tolist() == [1] and res.as_metrics()["filter/nan_groups"] == 1.0
    with pytest.raises(ValueError, match=r"^rewards_per_func must be an \[N, F\] tensor or nested lists of numbers"):
        group_rewards([["a", 1.0]], [1.0, 1.0], 1)


def test_group_rewards_takes_a_numpy_group_size() -> None:
    r = torch.arange(8.0).reshape(4, 2)
    assert torch.equal(group_rewards(r, [1.0, 2.0], np.int64(2)), group_rewards(r, [1.0, 2.0], 2))
    for bad in (True, "2", 2.0):
        with pytest.raises(ValueError, match=r"^group_size must be a positive integer dividing N=4"):
            group_rewards(r, [1.0, 2.0], bad)
    with pytest.raises(ValueError, match=r"^weights must be finite numbers"):
        group_rewards(r, [None, 1.0], 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_group_rewards_sums_16_bit_rewards_in_float32(dtype) -> None:
    rows = [[40000.0, 40000.0], [1.0, 0.0], [0.0, 0.0], [0.5, 0.25]]
    r = torch.tensor(rows, dtype=dtype)
    got = group_rewards(r, [1.0, 1.0], 2)
    assert got.dtype == torch.float32
    ref = _group_rewards_loop(r.double().tolist(), [1.0, 1.0], 2)  # the 16-bit values, summed exactly
    assert _same(got.tolist(), ref)  # 80000 was inf in float16, so the group read as NaN and was dropped
    assert filter_groups(got).n_nan == 0


def test_group_rewards_float32_is_unchanged() -> None:
    gen = torch.Generator().manual_seed(0)
    r = torch.randn(12, 2, generator=gen)
    r[3, 0] = math.nan
    r[5] = math.nan
    w = torch.tensor([1.0, 0.3])
    got = group_rewards(r, w, 3)
    assert got.dtype == torch.float32
    # Two terms: each product and the sum are rounded once to float32, whatever the order.
    ref = []
    for i in range(0, 12, 3):
        group = []
        for row in r[i:i + 3].tolist():
            terms = [np.float32(np.float32(v) * np.float32(wf)) for v, wf in zip(row, w.tolist()) if not math.isnan(v)]
            group.append(float(np.float32(sum(terms, np.float32(0.0)))) if terms else math.nan)
        ref.append(group)
    assert _same(got.tolist(), ref)


# ----------------------------------------------------------------------------------------------- advantages


def _grpo_loop(rows, eps=1e-6, norm=True):
    out = []
    for row in rows:
        g = len(row)
        mean = sum(row) / g
        std = math.sqrt(sum((x - mean) ** 2 for x in row) / (g - 1)) if g > 1 else 0.0
        flat = all(x == row[0] for x in row)
        out.append([0.0 if (norm and flat) else (x - mean) / (std + eps) if norm else x - mean for x in row])
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_group_advantages_of_16_bit_rewards_are_computed_in_float32(dtype) -> None:
    rows = [[30000.0, 40000.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
    r = torch.tensor(rows, dtype=dtype)
    exact = r.double().tolist()
    a = rloo(r)
    assert a.dtype == torch.float32 and bool(torch.isfinite(a).all())  # was all -inf in float16
    ref = [[x - (sum(row) - x) / (len(row) - 1) for x in row] for row in exact]
    assert torch.allclose(a.double(), torch.tensor(ref, dtype=torch.float64), rtol=1e-6, atol=1e-3)
    g = grpo(r)
    assert g.dtype == torch.float32
    assert torch.allclose(g.double(), torch.tensor(_grpo_loop(exact), dtype=torch.float64), rtol=1e-5, atol=1e-5)


def test_grpo_takes_nested_lists_and_numpy_arrays() -> None:
    rows = [[0.0, 1.0, 1.0], [2.0, 2.0, 5.0]]
    ref = torch.tensor(_grpo_loop(rows), dtype=torch.float64)
    assert torch.allclose(grpo(rows).double(), ref, atol=1e-6)
    assert torch.allclose(grpo(np.array(rows)), ref, atol=1e-12)


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"eps": math.inf}, r"^eps must be a finite number >= 0; got inf$"),
    ({"eps": True}, r"^eps must be a number >= 0, not a bool; got True$"),
    ({"eps": "1e-6"}, r"^eps must be a number >= 0; got '1e-6'$"),
    ({"eps": None}, r"^eps must be a number >= 0; got None$"),
    ({"norm_by_std": "no"}, r"^norm_by_std must be True or False; got 'no'$"),
    ({"norm_by_std": 0}, r"^norm_by_std must be True or False; got 0$"),
])
def test_grpo_settings(kwargs, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        grpo(torch.tensor([[0.0, 1.0]]), **kwargs)


def test_grpo_refuses_complex_rewards() -> None:
    with pytest.raises(ValueError, match=r"^rewards must be real"):
        grpo(torch.tensor([[1j, 0.0]]))


@pytest.mark.parametrize("name", ["gamma", "lam"])
@pytest.mark.parametrize(("value", "pattern"), [
    (True, r"must be a number in \[0, 1\], not a bool; got True$"),
    ("1", r"must be a number in \[0, 1\]; got '1'$"),
])
def test_gae_gamma_and_lambda_refuse_bools_and_strings(name, value, pattern) -> None:
    with pytest.raises(ValueError, match="^" + name + " " + pattern):
        gae(torch.ones(2), torch.zeros(2, 3), torch.ones(2, 3), **{name: value})


def test_gae_takes_numpy_and_0d_tensor_gamma() -> None:
    # one reward 1 at the end of 3 tokens, V = 0: A_t = gamma^(2 - t)
    for gamma in (np.float32(0.5), torch.tensor(0.5)):
        adv, _ = gae(torch.ones(1), torch.zeros(1, 3), torch.ones(1, 3), gamma=gamma)
        assert adv.tolist() == [[0.25, 0.5, 1.0]]


@pytest.mark.parametrize("value", [True, math.inf, "3", math.nan, 0.0])
def test_aggregate_loss_norm_constant(value) -> None:
    with pytest.raises(ValueError, match=r"^norm_constant must be"):
        aggregate_loss(torch.ones(2, 3), torch.ones(2, 3), "seq-mean-token-sum-norm", norm_constant=value)


def test_masked_whiten_settings() -> None:
    with pytest.raises(ValueError, match=r"^eps must be a number >= 0, not a bool; got True$"):
        masked_whiten(torch.zeros(2, 3), torch.ones(2, 3), eps=True)
    with pytest.raises(ValueError, match=r"^shift_mean must be True or False; got 'no'$"):
        masked_whiten(torch.zeros(2, 3), torch.ones(2, 3), shift_mean="no")


# ----------------------------------------------------------------------------------------------- losses


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"clip_eps_high": math.inf}, r"^clip_eps_high must be a finite number >= 0; got inf$"),
    ({"clip_eps_high": True}, r"^clip_eps_high must be a number >= 0, not a bool; got True$"),
    ({"clip_eps_low": "0.2"}, r"^clip_eps_low must be a number in \[0, 1\); got '0\.2'$"),
    ({"dual_clip_c": math.inf}, r"^dual_clip_c must be a finite number > 1 \(or None to disable\); got inf$"),
    ({"dual_clip_c": "3"}, r"^dual_clip_c must be a number > 1 \(or None to disable\); got '3'$"),
])
def test_ppo_policy_loss_settings(kwargs, pattern) -> None:
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=pattern):
        ppo_policy_loss(z, z, z + 1, torch.ones(2, 3), **kwargs)


def test_ppo_policy_loss_takes_numpy_and_0d_tensor_settings() -> None:
    z = torch.zeros(1, 2)
    lp = torch.tensor([[1.0, -1.0]])  # ratios e and 1/e, advantage -1: the dual clip -c*A = 3 bounds e
    loss, _ = ppo_policy_loss(lp, z, z - 1, torch.ones(1, 2), clip_eps_low=torch.tensor(0.2),
                              clip_eps_high=np.float32(0.28), dual_clip_c=np.float64(3.0))
    ref = [min(max(r * 1.0, min(max(r, 0.8), 1.28) * 1.0), 3.0) for r in (math.e, math.exp(-1.0))]
    assert loss.item() == pytest.approx(sum(ref) / 2, rel=1e-6)


@pytest.mark.parametrize("value", [True, math.inf, "0.5"])
def test_value_loss_clip_range(value) -> None:
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^clip_range must be a (finite )?number > 0 \(or None to disable\)"):
        value_loss(z, z, z + 1, torch.ones(2, 3), clip_range=value)


# ----------------------------------------------------------------------------------------------- metrics, mi


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda: classify_regime("0.5", 0.5), r"^cond_entropy must be a number; got '0\.5'$"),
    (lambda: classify_regime(0.5, True), r"^mi must be a number, not a bool; got True$"),
    (lambda: noise_note(1.0, 2.5), r"^vocab_size must be an integer >= 2"),
    (lambda: noise_note(1.0, "100"), r"^vocab_size must be an integer >= 2"),
    (lambda: noise_note(1.0, True), r"^vocab_size must be an integer >= 2"),
    (lambda: noise_note(1.0, 100, share=math.nan), r"^share must be > 0; got nan$"),
    (lambda: noise_note(1.0, 100, share=math.inf), r"^share must be a finite number > 0; got inf$"),
])
def test_metrics_settings(call, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()


def test_classify_regime_and_noise_note_take_numpy_numbers() -> None:
    assert classify_regime(np.float32(0.5), torch.tensor(0.05)) == "template_collapse"
    assert noise_note(1.0, np.int64(100)) is None  # 1.0 < 0.5 * log(100) = 2.30


L3 = torch.tensor([[[-1.0, -3.0, -2.0]], [[-2.0, -1.0, -3.0]], [[-3.0, -2.0, -1.0]]])


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"n_perm": 2.7}, r"^n_perm must be an integer >= 1"),
    ({"n_perm": True}, r"^n_perm must be an integer >= 1"),
    ({"n_perm": "5"}, r"^n_perm must be an integer >= 1"),
    ({"seed": True}, r"^seed must be an integer"),
    ({"seed": 1.5}, r"^seed must be an integer"),
    ({"level": "0.9"}, r"^level must be a number in \(0, 1\); got '0\.9'$"),
])
def test_mi_seq_null_settings(kwargs, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        mi_seq_null(L3, **kwargs)


def test_mi_seq_null_takes_numpy_integers() -> None:
    assert mi_seq_null(L3, n_perm=np.int64(5), seed=np.int64(3)) == mi_seq_null(L3, n_perm=5, seed=3)


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda: mi_proxies(L3, torch.ones(3, 1), eps=math.inf), r"^eps must be a finite number >= 0; got inf$"),
    (lambda: mi_proxies(L3, torch.ones(3, 1), eps=True), r"^eps must be a number >= 0, not a bool; got True$"),
    (lambda: MIZScoreEMA(eps=math.inf), r"^eps must be a finite number >= 0; got inf$"),
    (lambda: MIZScoreEMA(alpha="0.5"), r"^alpha must be a number in \[0, 1\); got '0\.5'$"),
    (lambda: MIZScoreEMA(alpha=True), r"^alpha must be a number in \[0, 1\), not a bool; got True$"),
])
def test_mi_settings(call, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()
