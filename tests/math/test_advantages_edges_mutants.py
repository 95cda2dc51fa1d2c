"""`place_on_last_token` with a mask of no columns and `masked_whiten`'s shape check, pinned where the mutation run
found them untested (`make mutation`, docs/theory_report/mutation.md): the empty result keeps the rewards' float
dtype (float32 for integer rewards, as with columns) and the mask's device, and a mask that does not match x is
named as such before anything else is checked."""

from __future__ import annotations

import pytest
import torch

from ragen_core.math.advantages import masked_whiten, place_on_last_token


@pytest.mark.parametrize("dtype,want", [(torch.float64, torch.float64), (torch.float16, torch.float16),
                                        (torch.int64, torch.float32), (torch.bool, torch.float32)])
def test_no_columns_give_the_dtype_that_columns_would(dtype, want):
    rewards = torch.tensor([1, 0, 1]).to(dtype)
    empty = place_on_last_token(rewards, torch.ones(3, 0))
    assert empty.shape == (3, 0) and empty.dtype == want
    assert place_on_last_token(rewards, torch.ones(3, 2)).dtype == want  # the same dtype as with columns


def test_no_columns_stay_on_the_mask_device():
    """The meta device stands in for an accelerator: the empty result is made where the mask lives."""
    out = place_on_last_token(torch.zeros(3, device="meta"), torch.zeros(3, 0, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 0)


def test_masked_whiten_names_a_mask_that_does_not_match_before_the_dtype():
    with pytest.raises(ValueError, match=r"^shapes must match: \{'x': \(2, 3\), 'mask': \(1, 3\)\}$"):
        masked_whiten(torch.zeros(2, 3, dtype=torch.bool), torch.ones(1, 3))
