"""Tests that kill the mutants of ragen_core/math/losses.py that the unit tests left alive (mutmut; see
docs/theory_report/mutation.md): the defaults, the validation boundaries and messages, the clamps, every
statistic, and the pass-through of the aggregation mode.  The reference is a per-token loop in plain floats."""

from __future__ import annotations

import math

import pytest
import torch

from ragen_core.math.losses import kl_penalty, ppo_policy_loss, value_loss


def _ppo_token(lp, old, a, lo=0.2, hi=0.28, c=3.0):
    """(loss, clipped?, dual active?) of one token, from the docstring's equations."""
    lr = max(-20.0, min(20.0, lp - old))
    r = math.exp(lr)
    l1 = -a * r
    l2 = -a * min(max(r, 1 - lo), 1 + hi)
    lt = max(l1, l2)
    dual = False
    if c is not None and a < 0:
        l3 = -c * a
        dual = l3 < lt
        lt = min(lt, l3)
    return lt, l2 > l1, dual


def _batch():
    lp = torch.tensor([[-1.0, -0.5, -2.0, -0.1], [-0.3, -3.0, 0.0, -1.2]], dtype=torch.float64)
    old = torch.tensor([[-1.5, -0.5, -0.2, -0.4], [-0.35, -1.0, -25.0, -1.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -2.0, -1.5, 0.5], [-0.7, 2.0, -1.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    return lp, old, adv, mask


def _reference(lp, old, adv, mask, **kw):
    losses, clipped, dual, kl = [], 0, 0, []
    for b in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if not mask[b, t]:
                continue
            lt, c, d = _ppo_token(float(lp[b, t]), float(old[b, t]), float(adv[b, t]), **kw)
            losses.append(lt)
            clipped += c
            dual += d
            kl.append(-max(-20.0, min(20.0, float(lp[b, t] - old[b, t]))))
    n = len(losses)
    return sum(losses) / n, clipped / n, dual / n, sum(kl) / n


def test_ppo_loss_defaults_and_every_statistic_match_the_token_loop() -> None:
    lp, old, adv, mask = _batch()
    loss, stats = ppo_policy_loss(lp, old, adv, mask)
    ref_loss, ref_clip, ref_dual, ref_kl = _reference(lp, old, adv, mask)
    assert loss.item() == pytest.approx(ref_loss, abs=1e-12)
    assert stats["clipfrac"] == pytest.approx(ref_clip, abs=1e-12) and 0 < ref_clip < 1
    assert stats["dual_clipfrac"] == pytest.approx(ref_dual, abs=1e-12) and 0 < ref_dual < 1
    assert stats["approx_kl"] == pytest.approx(ref_kl, abs=1e-12)


@pytest.mark.parametrize("kw", [dict(clip_eps_low=0.0, clip_eps_high=0.0, dual_clip_c=None),
                                dict(clip_eps_low=0.1, clip_eps_high=0.5, dual_clip_c=1.0 + 1e-9),
                                dict(clip_eps_low=0.3, clip_eps_high=0.1, dual_clip_c=10.0)])
def test_ppo_loss_boundary_parameters(kw: dict) -> None:
    lp, old, adv, mask = _batch()
    loss, stats = ppo_policy_loss(lp, old, adv, mask, **kw)
    ref = _reference(lp, old, adv, mask, lo=kw["clip_eps_low"], hi=kw["clip_eps_high"], c=kw["dual_clip_c"])
    assert loss.item() == pytest.approx(ref[0], abs=1e-12)
    assert (stats["clipfrac"], stats["dual_clipfrac"]) == pytest.approx(ref[1:3], abs=1e-12)


def test_ppo_loss_validation_messages() -> None:
    lp, old, adv, mask = _batch()
    with pytest.raises(ValueError, match=r"^clip_eps_low must be in \[0, 1\); got 1\.0$"):
        ppo_policy_loss(lp, old, adv, mask, clip_eps_low=1.0)
    with pytest.raises(ValueError, match=r"^clip_eps_low must be in \[0, 1\); got -0\.1$"):
        ppo_policy_loss(lp, old, adv, mask, clip_eps_low=-0.1)
    with pytest.raises(ValueError, match=r"^clip_eps_high must be >= 0; got -0\.01$"):
        ppo_policy_loss(lp, old, adv, mask, clip_eps_high=-0.01)
    with pytest.raises(ValueError, match=r"^dual_clip_c must be > 1 \(or None to disable\); got 1\.0$"):
        ppo_policy_loss(lp, old, adv, mask, dual_clip_c=1.0)
    with pytest.raises(ValueError, match=r"^loss_agg_mode must be one of \('token-mean', "):
        ppo_policy_loss(lp, old, adv, mask, loss_agg_mode="sum")
    with pytest.raises(ValueError, match=r"^shapes must match: \{'log_probs': \(2, 4\), 'old_log_probs': \(2, 3\)"):
        ppo_policy_loss(lp, old[:, :3], adv, mask)


def test_ppo_loss_passes_the_mode_and_norm_constant_through() -> None:
    lp, old, adv, mask = _batch()
    per_tok = [[_ppo_token(float(lp[b, t]), float(old[b, t]), float(adv[b, t]))[0] if mask[b, t] else 0.0
                for t in range(4)] for b in range(2)]
    seq = [sum(row) for row in per_tok]
    loss, _ = ppo_policy_loss(lp, old, adv, mask, loss_agg_mode="seq-mean-token-sum-norm", norm_constant=2.5)
    assert loss.item() == pytest.approx(sum(seq) / (2.5 * 2), abs=1e-12)
    loss, _ = ppo_policy_loss(lp, old, adv, mask, loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(sum(seq) / 2, abs=1e-12)


def test_ppo_stats_with_an_empty_mask_are_zero() -> None:
    lp, old, adv, _ = _batch()
    loss, stats = ppo_policy_loss(lp, old, adv, torch.zeros(2, 4))
    assert loss.item() == 0.0
    assert stats == {"clipfrac": 0.0, "dual_clipfrac": 0.0, "approx_kl": 0.0}


def test_kl_estimators_defaults_clamps_and_messages() -> None:
    lp = torch.tensor([0.0, 0.5, -0.5, 30.0, -30.0, 2.0], dtype=torch.float64)
    ref = torch.zeros(6, dtype=torch.float64)
    d = lp.tolist()
    k3 = [min(10.0, max(-10.0, math.exp(max(-20.0, min(20.0, -x))) - 1.0 - max(-20.0, min(20.0, -x)))) for x in d]
    assert kl_penalty(lp, ref).tolist() == pytest.approx(k3, abs=1e-12)  # k3 by default
    for alias in ("k3", "low-var-kl", "low_var_kl"):
        assert kl_penalty(lp, ref, alias).tolist() == pytest.approx(k3, abs=1e-12)
    assert k3[4] == 10.0 and kl_penalty(lp, ref)[4].item() == 10.0  # clamped at 10 (d = -30)
    assert kl_penalty(lp, ref, "k1").tolist() == d
    assert kl_penalty(lp, ref, "k2").tolist() == pytest.approx([x * x / 2 for x in d], abs=1e-12)
    with pytest.raises(ValueError,
                       match=r"^kind must be one of 'k1', 'k2', 'k3', 'low-var-kl', 'low_var_kl'; got 'k4'$"):
        kl_penalty(lp, ref, "k4")
    with pytest.raises(ValueError, match=r"^shapes must match"):
        kl_penalty(lp, ref[:3])


def test_k3_exponent_is_clamped_at_20() -> None:
    """Large positive d: the exponent -d is clamped to -20, and exp(-20) - 1 + 20 is then clamped to 10."""
    lp = torch.tensor([25.0, 21.0], dtype=torch.float64)
    got = kl_penalty(lp, torch.zeros(2, dtype=torch.float64))
    # k3 = exp(neg) - 1 - neg with neg = clamp(-d, -20, 20) = -20 for both: exp(-20) - 1 + 20, then <= 10
    assert got.tolist() == [10.0, 10.0]
    lp = torch.tensor([9.0], dtype=torch.float64)
    assert kl_penalty(lp, torch.zeros(1, dtype=torch.float64)).item() == pytest.approx(math.exp(-9.0) - 1 + 9.0)


def test_value_loss_default_clip_mode_fraction_and_messages() -> None:
    values = torch.tensor([[1.0, 0.0, 2.0], [0.3, -1.0, 0.0]], dtype=torch.float64)
    old = torch.tensor([[0.0, 0.2, 1.0], [0.3, 0.5, 0.0]], dtype=torch.float64)
    ret = torch.tensor([[0.2, 1.0, 0.0], [0.0, -2.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])

    def ref(c, mode="token-mean"):
        per, n_clip, n = [[0.0] * 3 for _ in range(2)], 0, 0
        for b in range(2):
            for t in range(3):
                v, o, r = float(values[b, t]), float(old[b, t]), float(ret[b, t])
                un = (v - r) ** 2
                cl = (o + max(-c, min(c, v - o)) - r) ** 2 if c is not None else un
                if mask[b, t]:
                    per[b][t] = 0.5 * max(un, cl)
                    n += 1
                    n_clip += cl > un
        if mode == "token-mean":
            return sum(map(sum, per)) / n, n_clip / n
        return sum(sum(row) for row in per) / 2, n_clip / n

    loss, stats = value_loss(values, old, ret, mask)  # clip_range 0.5 by default
    r_loss, r_frac = ref(0.5)
    assert loss.item() == pytest.approx(r_loss, abs=1e-12) and stats["vf_clipfrac"] == pytest.approx(r_frac)
    assert 0 < r_frac < 1
    loss, stats = value_loss(values, old, ret, mask, clip_range=None)
    assert loss.item() == pytest.approx(ref(None)[0], abs=1e-12) and stats["vf_clipfrac"] == 0.0
    loss, _ = value_loss(values, old, ret, mask, clip_range=0.25, loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(ref(0.25, "seq")[0], abs=1e-12)
    _, stats = value_loss(values, old, ret, torch.zeros(2, 3))
    assert stats["vf_clipfrac"] == 0.0
    with pytest.raises(ValueError, match=r"^clip_range must be > 0 \(or None to disable\); got 0$"):
        value_loss(values, old, ret, mask, clip_range=0)
    with pytest.raises(ValueError, match=r"^shapes must match"):
        value_loss(values, old, ret[:, :2], mask)


def test_statistics_of_a_single_valid_token_and_a_float_mask_without_dual_clip() -> None:
    # one valid token whose ratio is clipped: every share is over that one token (1/1, not 1/2); a float mask
    # works with the dual clip off (its indicator is boolean whatever the mask's dtype)
    lp = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    old = torch.tensor([[0.0, -1.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    loss, stats = ppo_policy_loss(lp, old, adv, mask, dual_clip_c=None)
    ref_loss, clipped, _ = _ppo_token(0.5, 0.0, 1.0, c=None)
    assert clipped and loss.item() == pytest.approx(ref_loss, abs=1e-12)
    assert stats == {"clipfrac": 1.0, "dual_clipfrac": 0.0, "approx_kl": pytest.approx(-0.5, abs=1e-12)}
    _, stats = value_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 0.0]]),
                          mask.float())
    assert stats == {"vf_clipfrac": 0.0}  # |2 - 0| > |0.5 - 0|: the unclipped term is the larger one
    _, stats = value_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 0.0]]),
                          mask.float())
    assert stats == {"vf_clipfrac": 1.0}  # v_clip = 0.5 is further from the return 3 than 2 is


# ------------------------------------------------------------------------------------------------ argument reading
# What torch.as_tensor cannot read (a None inside a list) is one ValueError naming the argument and the shape meant.
_UNREADABLE = [[0.0, None]]


def _ppo_args(**bad):
    args = dict(log_probs=torch.zeros(1, 2), old_log_probs=torch.zeros(1, 2), advantages=torch.ones(1, 2),
                mask=torch.ones(1, 2))
    return {**args, **bad}


def _value_args(**bad):
    args = dict(values=torch.zeros(1, 2), old_values=torch.zeros(1, 2), returns=torch.ones(1, 2),
                mask=torch.ones(1, 2))
    return {**args, **bad}


@pytest.mark.parametrize("fn, name", [
    *[(ppo_policy_loss, n) for n in ("log_probs", "old_log_probs", "advantages", "mask")],
    *[(value_loss, n) for n in ("values", "old_values", "returns", "mask")],
    *[(kl_penalty, n) for n in ("log_probs", "ref_log_probs")],
])
def test_an_unreadable_tensor_argument_is_named_with_its_shape(fn, name: str) -> None:
    if fn is kl_penalty:
        kwargs = {"log_probs": torch.zeros(1, 2), "ref_log_probs": torch.zeros(1, 2), name: _UNREADABLE}
    else:
        kwargs = (_ppo_args if fn is ppo_policy_loss else _value_args)(**{name: _UNREADABLE})
    with pytest.raises(ValueError, match=rf"^{name} must be a real tensor \[B, T\] or nested lists of numbers; "
                                         r"could not read it: "):
        fn(**kwargs)


# ------------------------------------------------------------------------------------------------ 16-bit inputs
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_k2_of_16_bit_log_probs_is_computed_in_float32(dtype: torch.dtype) -> None:
    # d = 400: d^2 / 2 = 80000 is past float16's largest value (65504) and rounds in bfloat16 (8 bits), exact in
    # float32
    lp = torch.tensor([[0.0, 400.0]], dtype=dtype)
    ref = torch.tensor([[0.0, 0.0]], dtype=dtype)
    k2 = kl_penalty(lp, ref, "k2")
    assert k2.dtype == torch.float32
    assert k2.tolist() == [[0.0, 0.5 * 400.0 * 400.0]]


@pytest.mark.parametrize("wide", ["log_probs", "old_log_probs", "advantages"])
def test_a_float64_argument_widens_the_16_bit_ones_to_float64(wide: str) -> None:
    """One float64 argument among float16 ones: everything is computed in float64 (their promoted dtype), so the
    dual-clip bound -c * A of one token is the float64 product (in float32, 0.5 * 3.3 rounds differently)."""
    args = {"log_probs": torch.tensor([[0.0]], dtype=torch.float16),
            "old_log_probs": torch.tensor([[-2.0]], dtype=torch.float16),  # r = e^2, far above 1 + eps_high
            "advantages": torch.tensor([[-0.5]], dtype=torch.float16)}
    args[wide] = args[wide].double()
    loss, stats = ppo_policy_loss(**args, mask=torch.ones(1, 1), dual_clip_c=3.3)
    assert stats["dual_clipfrac"] == 1.0  # the token's loss is the dual-clip bound
    assert loss.dtype == torch.float64
    assert loss.item() == 0.5 * 3.3  # -c * A, A = -0.5


def test_widened_returns_float32_float64_and_integer_tensors_as_they_are() -> None:
    """The helper's contract (losses._widened): only 16-bit floats are converted, to the promoted dtype raised to
    at least float32; float32 and float64 tensors are the very objects passed (their results stay bit-identical),
    integer tensors keep their dtype, and a call without any float returns its tensors."""
    from ragen_core.math.losses import _widened

    a32, b64, i64 = torch.zeros(2), torch.zeros(2, dtype=torch.float64), torch.tensor([1, 2])
    out = _widened(a=a32, b=b64, c=i64)
    assert out[0] is a32 and out[1] is b64 and out[2] is i64
    assert _widened(c=i64)[0] is i64
    h16, bf16 = torch.zeros(2, dtype=torch.float16), torch.zeros(2, dtype=torch.bfloat16)
    assert [t.dtype for t in _widened(a=h16, b=bf16)] == [torch.float32, torch.float32]
    assert [t.dtype for t in _widened(a=h16, b=i64)] == [torch.float32, torch.int64]
    assert [t.dtype for t in _widened(a=h16, b=b64, c=bf16)] == [torch.float64] * 3
    assert [t.dtype for t in _widened(a=b64, b=h16, c=bf16)] == [torch.float64] * 3


# ------------------------------------------------------------------------------------------------ dual clip at A = 0
def test_the_loss_gradient_in_the_advantage_at_zero_is_minus_the_ratio() -> None:
    """Near A = 0, with the ratio r inside the clip range and below c, the loss of a token is -A * r on both sides
    (for A < 0 the dual-clip bound -c * A is larger than -A * r), so d loss / dA = -r at A = 0. A token with A = 0
    must not enter the dual clip: min(clipped, -c * A) ties there, and the tie would pass half the gradient to
    -c * A (-(r + c) / 2)."""
    lp = 0.1
    adv = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    loss, _ = ppo_policy_loss(torch.tensor([[lp]], dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64),
                              adv, torch.ones(1, 1))
    loss.backward()
    assert adv.grad.item() == pytest.approx(-math.exp(lp), rel=1e-12)
