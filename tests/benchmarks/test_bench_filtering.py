"""Correctness of the filtering benchmark's logic (benchmarks/bench_filtering.py); no timing assertions."""

from __future__ import annotations

import statistics

import pytest
import torch

from benchmarks import bench_filtering as bf


def _rows(p: int, g: int, lengths: list[int], prompt: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded group-major rows: row b has lengths[b] real tokens, the last ones generated."""
    gen = torch.Generator().manual_seed(seed)
    r, t = p * g, max(lengths)
    ids = torch.zeros(r, t, dtype=torch.long)
    att = torch.zeros(r, t, dtype=torch.long)
    loss = torch.zeros(r, t, dtype=torch.long)
    old = torch.zeros(r, t)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(5, 200, (n,), generator=gen)
        att[b, :n] = 1
        loss[b, prompt:n] = 1
        old[b, prompt:n] = -torch.rand(n - prompt, generator=gen) - 1.0
    return {"input_ids": ids, "attention_mask": att, "loss_mask": loss, "old_logprobs": old,
            "row_traj": torch.arange(r), "row_group": torch.arange(p).repeat_interleave(g)}


# Group 0 has variance, groups 1 and 2 none: top-p 0.9 keeps group 0 only.
REWARDS = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
LENGTHS = [6, 8, 12, 9, 10, 7]


def test_masked_keeps_every_row_and_zeroes_dropped_losses():
    rows = _rows(3, 2, LENGTHS)
    out, res = bf.apply_variant(rows, REWARDS, bf.VARIANTS["top_p0.9_masked"])
    assert res.kept.tolist() == [0]
    assert out["input_ids"].shape == rows["input_ids"].shape
    assert torch.equal(out["attention_mask"], rows["attention_mask"])
    assert int(out["loss_mask"][2:].sum()) == 0 and int(out["advantages"][2:].abs().sum()) == 0
    assert torch.equal(out["loss_mask"][:2], rows["loss_mask"][:2])


def test_removed_has_fewer_rows_tokens_and_columns():
    rows = _rows(3, 2, LENGTHS)
    out, res = bf.apply_variant(rows, REWARDS, bf.VARIANTS["top_p0.9_removed"])
    assert out["input_ids"].shape == (2, 8)  # rows 0 and 1, re-padded to the longest kept row (8)
    assert torch.equal(out["input_ids"], rows["input_ids"][:2, :8])
    assert int(out["attention_mask"].sum()) == 6 + 8 < int(rows["attention_mask"].sum())
    none, _ = bf.apply_variant(rows, REWARDS, bf.VARIANTS["none"])
    assert none["input_ids"].shape == rows["input_ids"].shape


def test_variant_info_counts_by_hand():
    rows = _rows(3, 2, LENGTHS)
    total = sum(LENGTHS)
    masked = bf.variant_info(rows, REWARDS, bf.VARIANTS["top_p0.9_masked"])
    removed = bf.variant_info(rows, REWARDS, bf.VARIANTS["top_p0.9_removed"])
    none = bf.variant_info(rows, REWARDS, bf.VARIANTS["none"])
    assert none["rows"] == 6 and none["tokens_kept_fraction"] == 1.0
    assert masked["rows"] == 6 and masked["padded_positions_fraction"] == 1.0
    assert removed["rows"] == 2 and removed["padded_positions"] == 2 * 8
    # The masked variant reports the fraction an ideal implementation would keep: the same as removal.
    assert masked["tokens_kept_fraction"] == removed["tokens_kept_fraction"] == pytest.approx(14 / total)
    assert masked["loss_tokens"] == removed["loss_tokens"] == (6 - 3) + (8 - 3)


def test_top_k_and_top_p_keep_counts():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.5], [0.0, 0.25], [1.0, 1.0]])
    rows = _rows(4, 2, [5] * 8)
    out, res = bf.apply_variant(rows, rewards, bf.VARIANTS["top_k0.9_removed"])
    assert res.n_kept == 3 and out["input_ids"].shape[0] == 6  # floor(0.9 * 4) = 3 groups
    out, res = bf.apply_variant(rows, rewards, bf.VARIANTS["top_p0.25_removed"])
    assert res.kept.tolist() == [0] and out["input_ids"].shape[0] == 2


def test_masked_and_removed_compute_the_same_update():
    """Masking and removing must differ only in cost: same loss, same gradient (independent code paths)."""
    from ragen_core.policy import load_policy

    policy = load_policy("tiny")
    policy.model.train()
    rows = _rows(3, 2, LENGTHS, seed=1)
    grads = {}
    losses = {}
    for name in ("top_p0.9_masked", "top_p0.9_removed"):
        step_rows, _ = bf.apply_variant(rows, REWARDS, bf.VARIANTS[name])
        losses[name] = bf.loss_backward(policy, step_rows)
        grads[name] = [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]
    assert losses["top_p0.9_masked"] == pytest.approx(losses["top_p0.9_removed"], rel=1e-5, abs=1e-6)
    assert len(grads["top_p0.9_masked"]) == len(grads["top_p0.9_removed"]) > 0
    for a, b in zip(grads["top_p0.9_masked"], grads["top_p0.9_removed"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # An all-dropped batch trains on nothing: the step is skipped.
    empty = {k: v[:0] for k, v in rows.items()}
    assert bf.loss_backward(policy, empty) is None


def test_micro_batches_compute_the_whole_batch_update():
    """Micro-batching changes the cost only: per variant, the same loss and gradient as one pass."""
    from ragen_core.policy import load_policy

    policy = load_policy("tiny")
    policy.model.train()
    rows = _rows(3, 2, LENGTHS, seed=2)
    for name in ("none", "top_p0.9_masked", "top_p0.9_removed"):
        step_rows, _ = bf.apply_variant(rows, REWARDS, bf.VARIANTS[name])
        whole = bf.loss_backward(policy, step_rows)
        g_whole = [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]
        for micro in (1, 4):
            loss = bf.loss_backward(policy, step_rows, micro_batch=micro)
            assert loss == pytest.approx(whole, rel=1e-5, abs=1e-6), (name, micro)
            g = [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]
            assert len(g) == len(g_whole) > 0
            for a, b in zip(g, g_whole):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_efficiency_formula():
    assert bf.efficiency(10.0, 6.0, 0.5) == pytest.approx((10 - 6) / (10 - 5))
    assert bf.efficiency(10.0, 10.0, 0.5) == 0.0  # masking: no saving
    assert bf.efficiency(10.0, 5.0, 0.5) == pytest.approx(1.0)
    assert bf.efficiency(10.0, 9.0, 1.0) is None  # nothing dropped: no ideal saving


def test_summarize_uses_medians_and_paired_rounds():
    times = {"none": [10.0, 12.0, 11.0], "cut": [6.0, 5.0, 7.0]}
    infos = {"none": {"tokens_kept_fraction": 1.0}, "cut": {"tokens_kept_fraction": 0.4}}
    rows = {r["variant"]: r for r in bf.summarize(times, infos)}
    t_none, t_cut = statistics.median(times["none"]), statistics.median(times["cut"])
    assert rows["cut"]["time_median_s"] == t_cut
    assert rows["cut"]["ideal_s"] == pytest.approx(t_none * 0.4)
    assert rows["cut"]["efficiency"] == pytest.approx((t_none - t_cut) / (t_none - t_none * 0.4))
    per_round = sorted((b - t) / (b * 0.6) for b, t in zip(times["none"], times["cut"]))
    assert rows["cut"]["efficiency_per_round_median"] == pytest.approx(per_round[1])
    assert rows["none"]["efficiency"] is None
    q1, med, q3 = bf.quartiles([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (q1, med, q3) == (2.0, 3.0, 4.0)


def test_round_robin_interleaving():
    names = ["a", "b", "c"]
    orders = bf.round_orders(names, 3)
    assert all(sorted(o) == names for o in orders)
    for pos in range(3):  # every variant takes every position once over len(names) rounds
        assert sorted(o[pos] for o in orders) == names
    calls = []
    times = bf.time_interleaved(calls.append, names, warmup=1, repeats=2, warmup_names=["a"])
    assert calls == ["a", "a", "b", "c", "b", "c", "a"]
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2, "c": 2}


def test_sub_batch_matches_a_plain_loop():
    p, g = 3, 4
    rows = _rows(p, g, [4 + (b * 7) % 9 for b in range(p * g)])
    rewards = torch.arange(p * g, dtype=torch.float32).reshape(p, g)
    sub, r = bf.sub_batch(rows, rewards, 2, 3)
    want = [i * g + k for i in range(2) for k in range(3)]
    t = max(int(rows["attention_mask"][b].sum()) for b in want)
    assert torch.equal(sub["input_ids"], rows["input_ids"][want, :t])
    assert sub["row_group"].tolist() == [0, 0, 0, 1, 1, 1] and sub["row_traj"].tolist() == list(range(6))
    assert torch.equal(r, rewards[:2, :3])
    with pytest.raises(ValueError):
        bf.sub_batch(rows, rewards, 4, 2)


def test_choose_rewards_falls_back_only_without_variance():
    flat = torch.full((4, 3), -0.3)
    r, src = bf.choose_rewards(flat, "auto")
    assert src == "synthetic" and int((bf.reward_variance(r) > 0).sum()) >= 2
    varied = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    r, src = bf.choose_rewards(varied, "auto")
    assert src == "real" and torch.equal(r, varied)
    assert bf.choose_rewards(flat, "real")[1] == "real"
    with pytest.raises(ValueError):
        bf.choose_rewards(flat, "bogus")
    assert torch.equal(bf.synthetic_rewards(8, 16, seed=3), bf.synthetic_rewards(8, 16, seed=3))


def test_parse_sizes():
    assert bf.parse_sizes("8x16,4x8") == [(8, 16), (4, 8)]
    for bad in ("8by16", "0x4", "x"):
        with pytest.raises(ValueError):
            bf.parse_sizes(bad)
