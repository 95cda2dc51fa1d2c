"""Tests that kill the mutants of ragen_core/math/advantages.py that survived the unit tests (mutmut; see
docs/theory_report/mutation.md): default arguments, error messages, dtype and device handling, the
``dim`` path of masked_mean, masked_whiten's eps and shift_mean, and edge cases of the last-token placement,
trajectory weights and loss aggregation.  References are plain loops, independent of the module."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.fx.experimental._config as fx_config

from ragen_core.math.advantages import (
    aggregate_loss,
    dr_grpo,
    expand_to_tokens,
    gae,
    grpo,
    masked_mean,
    masked_whiten,
    place_on_last_token,
    rloo,
    trajectory_token_weights,
    zero_outside,
)


def _gae_reference(r, v, m, gamma, lam):
    """Plain recursion over the valid tokens of each row (the docstring's equations)."""
    out_a = [[0.0] * len(r[0]) for _ in r]
    for b in range(len(r)):
        nv = na = 0.0
        for t in reversed(range(len(r[0]))):
            if not m[b][t]:
                continue
            delta = r[b][t] + gamma * nv - v[b][t]
            na = delta + gamma * lam * na
            nv = v[b][t]
            out_a[b][t] = na
    return out_a


@pytest.fixture
def meta_nonzero():
    """Let torch.nonzero run on the meta device (shape-only), so whole functions can run there: a tensor
    created without the input's device (on the CPU) then fails when it meets a meta tensor."""
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):
        yield


# ------------------------------------------------------------------------------------------------ gae
def test_gae_defaults_are_gamma_lambda_one() -> None:
    r = torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[0.2, -0.1, 0.3], [0.5, 0.4, 0.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = gae(r, v, m)
    ref = _gae_reference(r.tolist(), v.tolist(), m.tolist(), 1.0, 1.0)
    assert torch.allclose(adv, torch.tensor(ref, dtype=torch.float64), atol=1e-12)


def test_gae_error_messages_name_the_problem() -> None:
    m = torch.ones(2, 4)
    with pytest.raises(ValueError, match=r"^values must be \[B, T\]; got shape \(3,\)$"):
        gae(torch.zeros(3), torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match=r"^gamma must be in \[0, 1\]; got 1\.5$"):
        gae(torch.zeros(2, 4), torch.zeros(2, 4), m, gamma=1.5)
    with pytest.raises(ValueError, match=r"^lam must be in \[0, 1\]; got -0\.1$"):
        gae(torch.zeros(2, 4), torch.zeros(2, 4), m, lam=-0.1)
    with pytest.raises(ValueError, match=r"^rewards \[B\] must have B=2 entries; got 3$"):
        gae(torch.zeros(3), torch.zeros(2, 4), m)
    with pytest.raises(ValueError, match="shapes must match"):
        gae(torch.zeros(2, 5), torch.zeros(2, 4), m)


def test_gae_promotes_to_the_wider_dtype_of_rewards_and_values() -> None:
    r = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64)
    v = torch.tensor([[0.5, 0.25, 0.125]], dtype=torch.float32)
    adv, ret = gae(r, v, torch.ones(1, 3), gamma=0.9, lam=0.8)
    assert adv.dtype == ret.dtype == torch.float64
    ref = _gae_reference(r.tolist(), v.double().tolist(), [[1, 1, 1]], 0.9, 0.8)
    assert torch.allclose(adv, torch.tensor(ref, dtype=torch.float64), atol=1e-15, rtol=0)


def test_gae_recursion_runs_in_float32_for_16_bit_inputs() -> None:
    """bfloat16 in, float32 arithmetic throughout (16-bit returns overflow or lose the signal): the same operations
    in the same order on 0-d float32 tensors holding the same bfloat16 values."""
    g = torch.Generator().manual_seed(0)
    r = torch.randn(3, 6, generator=g).to(torch.bfloat16)
    v = torch.randn(3, 6, generator=g).to(torch.bfloat16)
    m = torch.tensor([[1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 1, 1]])
    gamma, lam = 0.9, 0.7
    adv, _ = gae(r, v, m, gamma=gamma, lam=lam)
    r32, v32 = r.float(), v.float()
    ref = torch.zeros_like(r32)
    for b in range(3):
        nv = torch.zeros((), dtype=torch.float32)
        na = torch.zeros((), dtype=torch.float32)
        for t in reversed(range(6)):
            if m[b, t]:
                delta = r32[b, t] + gamma * nv - v32[b, t]
                na = delta + gamma * lam * na
                nv = v32[b, t]
                ref[b, t] = na
    assert adv.dtype == torch.float32 and torch.equal(adv, ref)


def test_gae_keeps_every_tensor_on_the_input_device(meta_nonzero: None) -> None:
    m = torch.ones(2, 3, device="meta")
    for rewards in (torch.zeros(2, 3, device="meta"), torch.zeros(2, device="meta")):
        adv, ret = gae(rewards, torch.zeros(2, 3, device="meta"), m)
        assert adv.device.type == ret.device.type == "meta"


# ------------------------------------------------------------------------------------------------ last token
def test_place_on_last_token_edge_rows_and_dtypes(meta_nonzero: None) -> None:
    m = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 1, 1]])
    out = place_on_last_token(torch.tensor([0.1, 0.7, 0.3], dtype=torch.float64), m)
    expected = torch.tensor([[0.1, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.3]], dtype=torch.float64)
    assert out.dtype == torch.float64 and torch.equal(out, expected)  # position 0 counts; an empty row gets 0
    out_int = place_on_last_token(torch.tensor([2, 5, 3]), m)
    assert out_int.dtype == torch.float32 and out_int.tolist() == [[2.0, 0, 0], [0, 0, 0], [0, 0, 3.0]]
    assert place_on_last_token(torch.zeros(3, device="meta"), m.to("meta")).device.type == "meta"


# ------------------------------------------------------------------------------------------------ group advantages
def test_group_estimators_accept_integer_rewards_and_eps_zero() -> None:
    r = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])
    a = grpo(r[:1], eps=0.0)  # eps = 0 is allowed (a non-negative constant)
    assert a.dtype == torch.float32
    std = math.sqrt(1 / 3)
    assert torch.allclose(a[0], torch.tensor([-0.5, 0.5, 0.5, -0.5]) / std)
    assert grpo(r).dtype == torch.float32
    assert dr_grpo(r).tolist() == [[-0.5, 0.5, 0.5, -0.5], [0.0, 0.0, 0.0, 0.0]]
    assert rloo(r).dtype == torch.float32


def test_group_estimator_messages() -> None:
    with pytest.raises(ValueError, match=r"^rewards needs G >= 2 rollouts per group to normalise by the std; got G=1$"):
        grpo(torch.zeros(3, 1))
    with pytest.raises(ValueError, match=r"^rewards needs G >= 2 rollouts per group for a leave-one-out baseline; "
                                         r"got G=1$"):
        rloo(torch.zeros(3, 1))
    with pytest.raises(ValueError, match=r"^advantages hold 2 sequences but mask has B=3 rows$"):
        expand_to_tokens(torch.zeros(2), torch.ones(3, 5))


# ------------------------------------------------------------------------------------------------ masked stats
def test_masked_mean_along_a_dimension() -> None:
    x = torch.tensor([[1.0, 2.0, 4.0], [3.0, 5.0, 7.0]], dtype=torch.float64)
    m = torch.tensor([[1, 0, 1], [1, 1, 1]])
    assert masked_mean(x, m, dim=1).tolist() == [2.5, 5.0]
    assert masked_mean(x, m, dim=0).tolist() == [2.0, 5.0, 5.5]
    assert masked_mean(x, m).item() == pytest.approx(20.0 / 5.0, abs=1e-15)


def _whiten_reference(x, m, eps, shift):
    vals = [x[i][j] for i in range(len(x)) for j in range(len(x[0])) if m[i][j]]
    mean = sum(vals) / len(vals)
    var = sum((u - mean) ** 2 for u in vals) / len(vals)
    return [[((x[i][j] - mean) / math.sqrt(var + eps) + (mean if not shift else 0.0)) if m[i][j] else 0.0
             for j in range(len(x[0]))] for i in range(len(x))]


@pytest.mark.parametrize("shift", [True, False])
def test_masked_whiten_default_eps_and_shift(shift: bool) -> None:
    x = torch.tensor([[1.0, 2.0, 9.0], [3.0, 0.5, -1.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 0], [1, 1, 1]])
    got = masked_whiten(x, m, shift_mean=shift)
    assert torch.allclose(got, torch.tensor(_whiten_reference(x.tolist(), m.tolist(), 1e-8, shift),
                                            dtype=torch.float64), atol=1e-12, rtol=0)


def test_masked_whiten_eps_is_added_to_a_tiny_variance() -> None:
    x = torch.tensor([[1.0, 1.0 + 2e-3, 1.0 - 2e-3, 1.0]], dtype=torch.float64)  # variance 2e-6
    m = torch.ones(1, 4)
    got = masked_whiten(x, m, eps=1e-7)
    ref = torch.tensor(_whiten_reference(x.tolist(), m.tolist(), 1e-7, True), dtype=torch.float64)
    assert torch.allclose(got, ref, atol=1e-12, rtol=0)


# ------------------------------------------------------------------------------------------------ trajectory weights
def test_trajectory_weights_shape_check_and_empty_trajectories() -> None:
    with pytest.raises(ValueError, match="row_traj must be"):
        trajectory_token_weights(torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 3))
    # trajectory 7 has no valid token: K = 2 trajectories carry tokens, N = 5
    row_traj = torch.tensor([3, 3, 7, 5])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0]])
    w = trajectory_token_weights(row_traj, mask)
    n_tok, k = 5.0, 2.0
    expected = torch.tensor([[n_tok / (k * 3)] * 2 + [0.0], [n_tok / (k * 3), 0, 0], [0, 0, 0],
                             [n_tok / (k * 2)] * 2 + [0.0]])
    assert torch.allclose(w, expected, atol=1e-6)


def test_trajectory_weights_are_float32_whatever_the_default_dtype() -> None:
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        w = trajectory_token_weights(torch.tensor([0, 1]), torch.ones(2, 3))
    finally:
        torch.set_default_dtype(before)
    assert w.dtype == torch.float32 and torch.allclose(w, torch.ones(2, 3))


# ------------------------------------------------------------------------------------------------ aggregation
def test_aggregate_loss_default_mode_errors_and_edge_cases() -> None:
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate_loss(loss, mask).item() == pytest.approx(7.0 / 3.0)  # token-mean by default
    assert aggregate_loss(loss, torch.zeros(2, 3)).item() == 0.0  # no valid token: 0, not the sum
    assert aggregate_loss(loss, mask, "seq-mean-token-sum-norm", norm_constant=0.5).item() == pytest.approx(
        (3.0 + 4.0) / (0.5 * 2))
    with pytest.raises(ValueError, match=r"^mode must be one of 'token-mean', 'seq-mean-token-mean', "):
        aggregate_loss(loss, mask, "sum")
    with pytest.raises(ValueError, match="shapes must match"):
        aggregate_loss(loss, torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"^loss_mat must be \[B, T\]; got shape \(3,\)$"):
        aggregate_loss(torch.zeros(3), torch.ones(3))


def test_the_mean_of_a_constant_is_the_constant_in_bfloat16() -> None:
    """The count is taken in the loss's dtype, like the sum: 257 ones sum to 256 in bfloat16, and so does the
    count, so the mean of ones is exactly 1 (an integer count of 257 would give 0.996)."""
    ones = torch.ones(1, 257, dtype=torch.bfloat16)
    mask = torch.ones(1, 257)
    assert masked_mean(ones, mask).item() == 1.0
    assert masked_mean(ones, mask, dim=1).tolist() == [1.0]
    for mode in ("token-mean", "seq-mean-token-mean"):
        assert aggregate_loss(ones, mask, mode).item() == 1.0, mode


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_grpo_constant_groups_of_non_dyadic_rewards_get_exactly_zero(dtype: torch.dtype, eps: float) -> None:
    # Regression: at eps = 0 a group of equal rewards such as 0.1 (not exactly representable) got A = +-0.82 to
    # +-0.93 for every rollout: the rounded mean leaves centred ~1e-17 and the std ~1e-17, whose ratio is O(1).
    # Reference: the docstring's rule, by a loop (a group whose rewards are all equal gets 0), and the loop formula
    # (R - mean) / (std + eps) for the groups with spread, in float64. Each group alone (the rounding of a one-row
    # mean), then all together: a batch mixes both kinds of group, so the zero-variance test is made per group.
    for g in (3, 6, 7):
        rows = [[v] * g for v in (0.1, 0.3, 0.7, 1 / 3)] + [[0.1, 0.2, 0.7] + [0.3] * (g - 3)]
        for r in [torch.tensor([row], dtype=dtype) for row in rows] + [torch.tensor(rows, dtype=dtype)]:
            _check_grpo_rows(r, grpo(r, eps=eps), eps)


def _check_grpo_rows(r: torch.Tensor, a: torch.Tensor, eps: float) -> None:
    g = r.shape[1]
    for i, xs in enumerate(r.double().tolist()):
        if all(x == xs[0] for x in xs):
            assert a[i].tolist() == [0.0] * g, (xs, r.dtype)
        else:
            mean = sum(xs) / g
            sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (g - 1))
            want = [(x - mean) / (sd + eps) for x in xs]
            assert a[i].double().tolist() == pytest.approx(want, rel=1e-5), (xs, r.dtype)


def test_grpo_at_eps_zero_is_finite_when_the_std_underflows() -> None:
    # rewards that differ by 1e-200: the squared deviations underflow, so std = 0 although the rewards differ; the
    # zero denominator is guarded (A = 0), never 0 / 0 = NaN or x / 0 = inf
    r = torch.tensor([[0.0, 1e-200, 0.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    assert float(r[:1].std()) == 0.0
    a = grpo(r, eps=0.0)
    assert a[0].tolist() == [0.0, 0.0, 0.0]
    assert a[1].tolist() == [-1.0, 0.0, 1.0]


# ------------------------------------------------------------------------------------------------ argument reading
# What torch.as_tensor cannot read (a None inside a list) is one ValueError naming the argument and the shape meant.
_UNREADABLE = [[0.0, None]]
_M = torch.ones(1, 2)


@pytest.mark.parametrize("call, name, shape", [
    (lambda: gae(_UNREADABLE, torch.zeros(1, 2), _M), "rewards", "[B, T] or [B]"),
    (lambda: gae(torch.zeros(1, 2), _UNREADABLE, _M), "values", "[B, T]"),
    (lambda: gae(torch.zeros(1, 2), torch.zeros(1, 2), _UNREADABLE), "mask", "[B, T]"),
    (lambda: place_on_last_token(_UNREADABLE, _M), "seq_rewards", "[B]"),
    (lambda: place_on_last_token(torch.zeros(1), _UNREADABLE), "mask", "[B, T]"),
    (lambda: expand_to_tokens(_UNREADABLE, _M), "advantages", "[P, G] or [B]"),
    (lambda: expand_to_tokens(torch.zeros(1), _UNREADABLE), "mask", "[B, T]"),
    (lambda: masked_mean(_UNREADABLE, _M), "x", "matching mask"),
    (lambda: masked_mean(torch.zeros(1, 2), _UNREADABLE), "mask", "matching x"),
    (lambda: masked_whiten(_UNREADABLE, _M), "x", "[B, T]"),
    (lambda: masked_whiten(torch.zeros(1, 2), _UNREADABLE), "mask", "[B, T]"),
    (lambda: trajectory_token_weights(_UNREADABLE, _M), "row_traj", "[R]"),
    (lambda: trajectory_token_weights(torch.zeros(1, dtype=torch.long), _UNREADABLE), "loss_mask", "[R, T]"),
    (lambda: aggregate_loss(_UNREADABLE, _M), "loss_mat", "[B, T]"),
    (lambda: aggregate_loss(torch.zeros(1, 2), _UNREADABLE), "mask", "[B, T]"),
])
def test_an_unreadable_tensor_argument_is_named_with_its_shape(call, name: str, shape: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be a real tensor {re.escape(shape)} or nested lists of "
                                         r"numbers; could not read it: "):
        call()


def test_switches_and_eps_are_checked_by_name() -> None:
    r = torch.tensor([[0.0, 1.0]])
    for bad, shown in ((1, "1"), (torch.tensor(True), "tensor(True)"), ("yes", "'yes'")):
        with pytest.raises(ValueError, match=rf"^norm_by_std must be True or False; got {re.escape(shown)}$"):
            grpo(r, norm_by_std=bad)
        with pytest.raises(ValueError, match=rf"^shift_mean must be True or False; got {re.escape(shown)}$"):
            masked_whiten(r, _M, shift_mean=bad)
    with pytest.raises(ValueError, match=r"^eps must be a number >= 0; got '1e-6'$"):
        grpo(r, eps="1e-6")
    with pytest.raises(ValueError, match=r"^eps must be a number >= 0; got '1e-8'$"):
        masked_whiten(r, _M, eps="1e-8")
    with pytest.raises(ValueError, match=r"^eps must be >= 0; got -1\.0$"):
        masked_whiten(r, _M, eps=-1.0)


# ------------------------------------------------------------------------------------------------ group rewards
def test_group_estimators_read_nested_lists_and_refuse_what_is_not_a_real_matrix() -> None:
    assert dr_grpo([[0, 1, 2]]).tolist() == [[-1.0, 0.0, 1.0]]
    assert rloo([[0.0, 3.0]]).tolist() == [[-3.0, 3.0]]
    assert grpo([[0.0, 2.0]])[0].tolist() == pytest.approx([-1 / (math.sqrt(2) + 1e-6), 1 / (math.sqrt(2) + 1e-6)])
    with pytest.raises(ValueError, match=r"^rewards must be a \[P, G\] tensor or nested lists of numbers; got list "
                                         r"that is neither$"):
        grpo(_UNREADABLE)
    with pytest.raises(ValueError, match=r"^rewards must be real numbers; got dtype torch\.complex64$"):
        rloo(torch.tensor([[1 + 1j, 0j]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_group_rewards_are_summed_in_float32(dtype: torch.dtype) -> None:
    # leave-one-out means by hand: 40000 + 0 = 40000 -> 20000 ... ; the group sum 70000 overflows float16
    a = rloo(torch.tensor([[30000.0, 40000.0, 0.0]], dtype=dtype))
    assert a.dtype == torch.float32
    r = [float(x) for x in torch.tensor([30000.0, 40000.0, 0.0], dtype=dtype).tolist()]
    assert a.tolist() == [[r[0] - (r[1] + r[2]) / 2, r[1] - (r[0] + r[2]) / 2, r[2] - (r[0] + r[1]) / 2]]


def _not_finite_rows(rows: list[int], n: int) -> torch.Tensor:
    r = torch.zeros(n, 4)
    for i in rows:
        r[i, 3 - i % 4] = math.nan if i % 2 else math.inf  # a column index that is not the group's
    return r


@pytest.mark.parametrize("estimator", [grpo, dr_grpo, rloo])
def test_a_group_with_nan_or_inf_is_named_in_one_line(estimator) -> None:
    tail = r" hold NaN or inf \(drop those groups first, e\.g\. with ragen_core\.math\.filtering\)$"
    with pytest.raises(ValueError, match=r"^rewards must be finite; group\(s\) \[2\]" + tail):
        estimator(_not_finite_rows([2], 3))
    with pytest.raises(ValueError, match=r"^rewards must be finite; group\(s\) \[0, 1, 2, 3, 4, 5, 6, 7\]" + tail):
        estimator(_not_finite_rows(list(range(8)), 10))  # exactly 8 groups: all listed, no ellipsis
    with pytest.raises(ValueError, match=r"^rewards must be finite; group\(s\) \[1, 2, 3, 4, 5, 6, 7, 8\] \.\.\."
                                         + tail):
        estimator(_not_finite_rows(list(range(1, 10)), 10))  # 9 groups: the first 8 and an ellipsis


# ------------------------------------------------------------------------------------------------ dtypes
def test_gae_of_integer_rewards_and_values_is_float32() -> None:
    r, v, m = [[1, 0, 2], [0, 3, 1]], [[0, 1, 1], [2, 0, 1]], [[1, 1, 1], [1, 0, 1]]
    adv, ret = gae(torch.tensor(r), torch.tensor(v), torch.tensor(m), gamma=0.5, lam=0.5)
    assert adv.dtype == ret.dtype == torch.float32
    ref = _gae_reference(r, v, m, 0.5, 0.5)
    assert torch.allclose(adv, torch.tensor(ref), atol=1e-6, rtol=0)
    assert ref[0][0] != round(ref[0][0])  # fractions: an integer recursion would truncate them


def _gae_float32_steps(r32, v32, m, gamma, lam):
    """The recursion on 0-d float32 tensors, one operation at a time (as the docstring's equations)."""
    ref = torch.zeros_like(r32)
    for b in range(r32.shape[0]):
        nv = torch.zeros((), dtype=torch.float32)
        na = torch.zeros((), dtype=torch.float32)
        for t in reversed(range(r32.shape[1])):
            if m[b, t]:
                delta = r32[b, t] + gamma * nv - v32[b, t]
                na = delta + gamma * lam * na
                nv = v32[b, t]
                ref[b, t] = na
    return ref


def test_gae_of_float32_inputs_is_float32_arithmetic_whatever_the_default_dtype() -> None:
    """With float64 as torch's default dtype, float32 inputs still recurse in float32 (the carried value and
    advantage start as float32 zeros): bit for bit the float32 steps, not float64 ones rounded at the end."""
    g = torch.Generator().manual_seed(1)
    r = torch.randn(4, 12, generator=g, dtype=torch.float32)
    v = torch.randn(4, 12, generator=g, dtype=torch.float32)
    m = torch.ones(4, 12, dtype=torch.long)
    m[1, 3] = m[2, 0] = 0
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        adv, ret = gae(r, v, m, gamma=0.9, lam=0.7)
        ref = _gae_float32_steps(r, v, m, 0.9, 0.7)
    finally:
        torch.set_default_dtype(before)
    assert adv.dtype == torch.float32 and torch.equal(adv, ref)


def test_zero_outside_keeps_an_integer_dtype() -> None:
    out = zero_outside(torch.tensor([1, 2, 3]), torch.tensor([True, False, True]))
    assert out.dtype == torch.int64 and out.tolist() == [1, 0, 3]


def test_integer_losses_are_averaged_in_float32_whatever_the_default_dtype() -> None:
    x = torch.tensor([[1, 2, 4], [3, 5, 7]])
    m = torch.tensor([[1, 0, 1], [1, 1, 1]])
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        mean, mean_dim = masked_mean(x, m), masked_mean(x, m, dim=1)
        agg = {mode: aggregate_loss(x, m, mode) for mode in ("token-mean", "seq-mean-token-mean")}
    finally:
        torch.set_default_dtype(before)
    assert mean.dtype == mean_dim.dtype == torch.float32
    assert mean.item() == pytest.approx(20 / 5) and mean_dim.tolist() == pytest.approx([2.5, 5.0])
    assert {k: (a.dtype, a.item()) for k, a in agg.items()} == {
        "token-mean": (torch.float32, pytest.approx(4.0)), "seq-mean-token-mean": (torch.float32, pytest.approx(3.75))}


def test_the_mean_of_ones_is_one_past_float32_integers() -> None:
    """Float32 counts are taken like the float32 sums, so the mean of ones is exactly 1 however many there are.
    Past 2**24 a float32 sum of ones is rounded by the way the reduction groups the additions (2**25 + 11 ones sum
    to 2**25 + 8 with one thread and with two), so an integer count (2**25 + 12 in float32) would give a mean
    below 1 for one of these sizes at least."""
    big = 2**25 + 13
    ones = torch.ones(1, big)
    mask = torch.ones(1, big, dtype=torch.bool)
    for n in (2**25 + 11, big):
        x, m = ones[:, :n], mask[:, :n]
        assert masked_mean(x, m).item() == 1.0, n
        assert masked_mean(x, m, dim=1).tolist() == [1.0], n
        for mode in ("token-mean", "seq-mean-token-mean"):
            assert aggregate_loss(x, m, mode).item() == 1.0, (n, mode)
