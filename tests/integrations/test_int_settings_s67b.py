"""Integer settings of the adapters given as numpy integers: TRL's take_rows / padded_row_count and batch-level
advantages of 16-bit rewards, and verl's ``ragen_filter.seed``. References are plain loops over Python numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ragen_core.integrations.trl.rows import batch_level_advantages, padded_row_count, take_rows
from ragen_core.integrations.verl.core import MAX_FILTER_SEED, FilterSpec, random_generator
from ragen_core.math.filtering import FilterSpecError


def _batch(n: int = 4, tp: int = 3, tc: int = 5) -> dict:
    return {"prompt_ids": torch.arange(n * tp).reshape(n, tp), "prompt_mask": torch.ones(n, tp, dtype=torch.long),
            "completion_ids": torch.arange(n * tc).reshape(n, tc),
            "completion_mask": torch.ones(n, tc, dtype=torch.long),
            "advantages": torch.arange(n, dtype=torch.float32), "num_items_in_batch": torch.tensor(n * tc)}


# ------------------------------------------------------------------------------------------------- TRL rows
def test_padded_row_count_takes_numpy_integers_s67b() -> None:
    """Before: multiple=np.int64(2) raised "multiple must be a positive integer"."""
    for kept in range(0, 9):
        for multiple in (1, 2, 3, 4):
            ref = max(1, math.ceil(kept / multiple)) * multiple
            assert padded_row_count(np.int64(kept), np.int64(multiple)) == ref == padded_row_count(kept, multiple)
    for bad in (True, np.bool_(True), 2.0, 0, "2"):
        with pytest.raises(ValueError, match=r"^multiple must be a positive integer; got "):
            padded_row_count(3, bad)


def test_take_rows_takes_numpy_integers_s67b() -> None:
    """Before: take_rows(..., multiple=np.int64(2)) and min_rows=np.int64(4) raised."""
    rows = torch.tensor([2, 0, 3])
    got, pad = take_rows(_batch(), rows, multiple=np.int64(2), min_rows=np.int64(6))
    ref, ref_pad = take_rows(_batch(), rows, multiple=2, min_rows=6)
    assert pad == ref_pad == 3 and got.keys() == ref.keys()
    for key in got:
        assert torch.equal(got[key], ref[key]), key
    assert got["advantages"].tolist() == [2.0, 0.0, 3.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"^min_rows must be a non-negative multiple of 2; got np.int64\(3\)"):
        take_rows(_batch(), rows, multiple=np.int64(2), min_rows=np.int64(3))
    with pytest.raises(ValueError, match=r"^min_rows must be a non-negative multiple of 2; got True"):
        take_rows(_batch(), rows, multiple=2, min_rows=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batch_level_advantages_normalise_16_bit_rewards_in_float32_s67b(dtype) -> None:
    """Before: float16 rewards of +-40000 made the batch std inf (squares overflow), so every advantage was 0."""
    values = [40000.0, -40000.0, 40000.0, -40000.0, 1.0, 3.0]
    rpf = torch.tensor(values, dtype=dtype)[:, None]
    mask = torch.tensor([True, True, True, True, False, False])
    adv = batch_level_advantages(rpf, torch.ones(1), 2, mask, "sum_then_normalize", "batch")
    assert adv.dtype == torch.float32
    # plain loop: group-centred rewards, divided by the sample std of the kept rewards (+ 1e-4)
    r = [float(x) for x in rpf.float().reshape(-1).tolist()]
    centred = []
    for i in range(0, 6, 2):
        mean = (r[i] + r[i + 1]) / 2
        centred += [r[i] - mean, r[i + 1] - mean]
    kept = r[:4]
    km = sum(kept) / 4
    std = math.sqrt(sum((x - km) ** 2 for x in kept) / 3)
    ref = [c / (std + 1e-4) for c in centred]
    assert adv.tolist() == pytest.approx(ref, rel=1e-6)
    assert torch.equal(adv, batch_level_advantages(rpf.float(), torch.ones(1), 2, mask, "sum_then_normalize", "batch"))


def test_batch_level_advantages_keep_float32_and_float64_s67b() -> None:
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        rpf = torch.randn(6, 2, generator=g, dtype=dtype)
        adv = batch_level_advantages(rpf, torch.tensor([1.0, 0.5]), np.int64(3), torch.ones(6, dtype=torch.bool),
                                     "normalize_then_sum", "batch")
        assert adv.dtype == dtype


# ---------------------------------------------------------------------------------------- verl's filter seed
def test_verl_filter_seed_takes_numpy_integers_s67b() -> None:
    """Before: ragen_filter.seed=np.int64(3) raised "ragen_filter.seed must be an integer"."""
    spec = FilterSpec(strategy="random", seed=np.int64(3))
    assert spec.seed == 3 and type(spec.seed) is int
    assert spec == FilterSpec(strategy="random", seed=3)
    assert FilterSpec.from_config({"strategy": "random", "seed": np.int32(3)}).seed == 3
    a = torch.randperm(10, generator=random_generator(spec, 5))
    b = torch.randperm(10, generator=torch.Generator().manual_seed(3 * 1_000_003 + 5))
    assert torch.equal(a, b)


@pytest.mark.parametrize("seed", [-1, MAX_FILTER_SEED + 1, True, np.bool_(False), 2.0, "3", None])
def test_verl_filter_seed_out_of_range_is_one_line_s67b(seed) -> None:
    """Before: -1 was accepted (torch reads it as 2**64 - 1, so seed -1 drew what a large positive seed draws), and a
    seed above 2**64 / 1_000_003 passed the config and failed at the first step inside torch."""
    with pytest.raises(FilterSpecError, match=r"^ragen_filter\.seed must be an integer in \[0, \d+\]; got "):
        FilterSpec(strategy="random", seed=seed)


def test_verl_largest_filter_seed_seeds_every_step_s67b() -> None:
    spec = FilterSpec(strategy="random", seed=MAX_FILTER_SEED)
    assert MAX_FILTER_SEED * 1_000_003 + 1_000_002 < 2**64 <= (MAX_FILTER_SEED + 2) * 1_000_003
    assert random_generator(spec, 1_000_002).initial_seed() == MAX_FILTER_SEED * 1_000_003 + 1_000_002
