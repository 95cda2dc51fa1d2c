"""filtering.select_rows (the row-level step of compact) against a plain-loop reference, and compact as its
group-level caller."""

from __future__ import annotations

import random

import pytest
import torch

from ragen_core.math.filtering import compact, select_rows


def reference(batch: dict, rows: list[int], mask_key: str = "attention_mask") -> dict:
    """Plain loops: copy the rows one by one, then cut to the first..last column any kept row uses."""
    mask = batch[mask_key].tolist()
    t = len(mask[0])
    used = [c for c in range(t) if any(mask[r][c] != 0 for r in rows)]
    lo, hi = (used[0], used[-1] + 1) if used else (0, 0)
    out = {}
    for name, tensor in batch.items():
        picked = [tensor[r] for r in rows]
        stacked = torch.stack(picked) if picked else tensor[:0]
        if tensor.dim() >= 2 and tensor.shape[1] == t:
            stacked = stacked[:, lo:hi]
        out[name] = stacked
    return out


def random_batch(rng: random.Random, b: int, t: int, left: bool) -> dict:
    mask = torch.zeros(b, t, dtype=torch.long)
    for i in range(b):
        n = rng.randint(0, t)
        if left:
            mask[i, t - n:] = 1
        else:
            mask[i, :n] = 1
    return {"input_ids": torch.randint(0, 50, (b, t)), "attention_mask": mask,
            "advantages": torch.randn(b, t), "rewards": torch.randn(b), "images": torch.randn(b, 3, 2)}


@pytest.mark.parametrize("left", [False, True])
def test_select_rows_matches_the_plain_loop(left):
    rng = random.Random(7 if left else 8)
    for _ in range(200):
        b, t = rng.randint(1, 7), rng.randint(1, 9)
        batch = random_batch(rng, b, t, left)
        rows = [rng.randrange(b) for _ in range(rng.randint(0, b + 2))]  # any order, repeats allowed
        got = select_rows(batch, torch.tensor(rows, dtype=torch.long))
        want = reference(batch, rows)
        assert got.keys() == want.keys()
        for name in want:
            assert torch.equal(got[name], want[name]), (name, rows)


def test_compact_is_select_rows_of_whole_groups():
    rng = random.Random(3)
    for _ in range(100):
        g, p, t = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 8)
        batch = random_batch(rng, g * p, t, left=rng.random() < 0.5)
        kept = rng.sample(range(p), rng.randint(0, p))
        rows = [k * g + j for k in kept for j in range(g)]
        got = compact(batch, torch.tensor(kept, dtype=torch.long), g)
        want = reference(batch, rows)
        assert all(torch.equal(got[n], want[n]) for n in want)


def test_select_rows_rejects_bad_input():
    batch = {"input_ids": torch.zeros(3, 4, dtype=torch.long), "attention_mask": torch.ones(3, 4, dtype=torch.long)}
    with pytest.raises(ValueError, match=r"rows must hold row indices in \[0, 2\]"):
        select_rows(batch, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"rows must hold row indices"):
        select_rows(batch, torch.tensor([-1]))
    with pytest.raises(ValueError, match="mask_key 'mask' is not a key"):
        select_rows(batch, torch.tensor([0]), mask_key="mask")
    with pytest.raises(ValueError, match="2-D padding mask"):
        select_rows({"attention_mask": torch.ones(3)}, torch.tensor([0]))
    with pytest.raises(ValueError, match="first dimension B=3"):
        select_rows({**batch, "rewards": torch.zeros(2)}, torch.tensor([0]))


def test_rows_and_groups_as_plain_lists_including_empty():
    # An all-filtered step keeps no group: `[]` is a float tensor to torch.as_tensor, so the functions must
    # convert indices to long themselves; a list of ints works the same as a LongTensor.
    rng = random.Random(11)
    batch = random_batch(rng, 6, 5, left=False)
    for rows in ([], [4, 1, 1]):
        got = select_rows(batch, rows)
        want = reference(batch, rows)
        assert all(torch.equal(got[n], want[n]) for n in want), rows
    assert select_rows(batch, [])["input_ids"].shape == (0, 0)
    empty = compact(batch, [], 2)
    assert empty["input_ids"].shape == (0, 0) and empty["rewards"].shape == (0,)
    assert all(torch.equal(compact(batch, [2, 0], 2)[n], reference(batch, [4, 5, 0, 1])[n]) for n in batch)


def test_compact_uses_the_given_mask_key():
    rng = random.Random(12)
    batch = random_batch(rng, 4, 6, left=True)
    renamed = {("pad" if n == "attention_mask" else n): v for n, v in batch.items()}
    got = compact(renamed, torch.tensor([1]), 2, mask_key="pad")
    want = reference(renamed, [2, 3], mask_key="pad")
    assert all(torch.equal(got[n], want[n]) for n in want)


def test_bad_mask_messages_name_what_was_given():
    with pytest.raises(ValueError, match=r"2-D padding mask \[B, T\]; got torch.Size\(\[3\]\)"):
        select_rows({"attention_mask": torch.ones(3)}, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"2-D padding mask \[B, T\]; got \[\[1, 0\]\]"):
        select_rows({"attention_mask": [[1, 0]]}, torch.tensor([0]))


def test_non_integer_indices_are_refused_not_truncated():
    batch = {"input_ids": torch.zeros(4, 3, dtype=torch.long), "attention_mask": torch.ones(4, 3, dtype=torch.long)}
    for bad in (torch.tensor([0.5]), [1.0, 1.5], torch.tensor([True, False])):
        with pytest.raises(ValueError, match="rows must hold whole-number indices"):
            select_rows(batch, bad)
        with pytest.raises(ValueError, match="kept must hold whole-number indices"):
            compact(batch, bad, 2)
    ids = batch["input_ids"]
    for good in (torch.tensor([3, 0], dtype=torch.int32), [3.0, 0.0]):  # whole numbers of any dtype are indices
        assert torch.equal(select_rows(batch, good)["input_ids"], ids[[3, 0]])
