"""Tests that kill the mutants of ragen_core/math/filtering.py that the unit tests left alive (mutmut; see
docs/theory_report/mutation.md): input conversion and validation (with their messages), float64 accumulation,
the keys and NaN values of the batch statistics, the top-p count's contract on an all-zero prefix, the
defaults and pass-through of filter_groups, and compact's edge cases."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from ragen_core.math.filtering import _top_p_count, compact, filter_groups, reward_variance, rv_statistics


# ------------------------------------------------------------------------------------------------ inputs
def test_rewards_may_be_nested_lists_bools_or_integers() -> None:
    assert reward_variance([[0.0, 1.0], [1.0, 1.0]]).tolist() == [0.5, 0.0]
    assert reward_variance(torch.tensor([[True, False], [True, True]])).tolist() == [0.5, 0.0]
    assert reward_variance(torch.tensor([[0, 2], [1, 1]], dtype=torch.int32)).tolist() == [2.0, 0.0]


def test_rewards_validation_messages() -> None:
    with pytest.raises(ValueError, match=r"^rewards must be a 2-D tensor \[P, G\]"):
        reward_variance(torch.zeros(3))
    with pytest.raises(ValueError, match=r"^rewards must be real numbers; got dtype torch\.complex64$"):
        reward_variance(torch.zeros(2, 3, dtype=torch.complex64))
    for bad in (True, 1.0, -1):
        with pytest.raises(ValueError, match=r"^ddof must be a non-negative integer"):
            reward_variance(torch.zeros(2, 3), ddof=bad)
    with pytest.raises(ValueError, match=r"\(use G >= 2 or a smaller ddof\)$"):
        reward_variance(torch.zeros(2, 1), ddof=1)


def test_variance_is_accumulated_in_float64() -> None:
    r = torch.tensor([[0.1, 0.2, 0.7, 0.3]], dtype=torch.float32)
    v = reward_variance(r)
    assert v.dtype == torch.float64
    assert v.item() == statistics.variance([float(x) for x in r[0]])  # exact float64 of the float32 values


# ------------------------------------------------------------------------------------------------ statistics
def test_rv_statistics_keys_float64_and_all_nan() -> None:
    v32 = torch.tensor([0.1, 0.2, 0.7], dtype=torch.float32)
    vals = [float(x) for x in v32]
    out = rv_statistics(v32)
    assert out["n_groups"] == 3.0 and out["n_nan"] == 0.0
    assert out["rv_mean"] == pytest.approx(statistics.fmean(vals), rel=1e-15)  # float32 inputs, float64 mean
    assert out["rv_std"] == pytest.approx(statistics.pstdev(vals), rel=1e-15)
    nan = rv_statistics(torch.tensor([math.nan, math.nan]))
    assert nan["n_groups"] == 2.0 and nan["n_nan"] == 2.0
    for key in ("rv_mean", "rv_std", "rv_heterogeneity", "zero_fraction"):
        assert isinstance(nan[key], float) and math.isnan(nan[key]), key


def test_top_p_count_keeps_nothing_without_mass() -> None:
    """The helper's contract ("0 if total <= 0"); select_groups never calls it on such a prefix (it skips an
    all-zero batch first), so only a direct test can pin it."""
    assert _top_p_count(torch.zeros(0, dtype=torch.float64), 0.9, 0.0) == 0
    assert _top_p_count(torch.zeros(3, dtype=torch.float64), 0.9, 0.0) == 0
    assert _top_p_count(torch.tensor([2.0, 1.0, 1.0], dtype=torch.float64), 0.5, 0.0) == 1


# ------------------------------------------------------------------------------------------------ filter_groups
def test_filter_groups_keeps_zero_groups_by_default_and_passes_include_zero() -> None:
    rewards = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.5]])
    assert filter_groups(rewards, strategy="top_k", value=1.0).kept.tolist() == [0, 2, 1]
    assert filter_groups(rewards, strategy="top_k", value=1.0, include_zero=True).kept.tolist() == [0, 2, 1]
    assert filter_groups(rewards, strategy="top_k", value=1.0, include_zero=False).kept.tolist() == [0, 2]
    with pytest.raises(ValueError, match=r"^score must be one of 'variance', 'std'; got 'mad'$"):
        filter_groups(rewards, score="mad")


# ------------------------------------------------------------------------------------------------ compact
def _batch(b: int = 4, t: int = 3) -> dict[str, torch.Tensor]:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])[:b, :t]
    return {"attention_mask": mask, "x": torch.arange(b * t).reshape(b, t)}


def test_compact_group_size_validation() -> None:
    out = compact(_batch(), torch.tensor([1, 3]), group_size=1)  # G = 1 is valid
    assert out["x"].tolist() == [[3], [9]]
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match=r"^group_size must be a positive integer \(G\); got "):
            compact(_batch(), torch.tensor([0]), group_size=bad)


def test_compact_validation_messages() -> None:
    with pytest.raises(ValueError, match=r"^batch\['attention_mask'\] must be a 2-D padding mask \[B, T\]; "
                                         r"got shape \(4,\)$"):
        compact({"attention_mask": torch.ones(4)}, torch.tensor([0]), group_size=2)
    with pytest.raises(ValueError, match=r"^kept must hold group indices in \[0, 1\]; got \[2\]$"):
        compact(_batch(), torch.tensor([2]), group_size=2)
    for bad in (torch.zeros(5, 3), torch.tensor(1.0), [0, 1, 2, 3]):
        batch = _batch()
        batch["y"] = bad
        with pytest.raises(ValueError, match=r"^batch\['y'\] must be a tensor with first dimension B=4$"):
            compact(batch, torch.tensor([0]), group_size=2)


def test_compact_accepts_whole_number_indices_of_any_dtype_and_cuts_every_padding_column() -> None:
    out = compact(_batch(), torch.tensor([1.0, 0.0]), group_size=2)  # converted to indices
    assert out["x"].tolist() == [[6, 7], [9, 10], [0, 1], [3, 4]]
    empty = compact(_batch(), torch.tensor([1]), group_size=2)  # the kept rows are all padding
    assert tuple(empty["x"].shape) == (2, 0) and tuple(empty["attention_mask"].shape) == (2, 0)
    none = compact(_batch(), torch.tensor([], dtype=torch.long), group_size=2)
    assert tuple(none["x"].shape) == (0, 0)
