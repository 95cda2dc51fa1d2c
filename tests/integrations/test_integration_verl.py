"""The verl adapter: pure parts against plain-loop references (always), glue against verl 0.9 (when installed).

The references below never call the code under test: per-group loops over Python lists, the selection rules
restated from their definitions (ours, docs/science.md section 4, and verl PR #7894's, from its description and
tests), GRPO/RLOO by hand, and direct env stepping.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from verl_fakes import FakeTQ

from ragen_core.integrations.verl import adapter as vglue
from ragen_core.integrations.verl.core import (
    FilterSpec,
    filter_rows,
    group_advantages,
    group_variances,
    masked_group_advantages,
    select_rows,
    sequence_rewards,
)
from ragen_core.integrations.verl.env import EnvEpisode, episode_from_extra_info
from ragen_core.integrations.verl.mi import first_span, mi_inputs, mi_metrics

try:
    import verl  # noqa: F401

    HAVE_VERL = True
except ImportError:
    HAVE_VERL = False
needs_verl = pytest.mark.skipif(not HAVE_VERL, reason="verl is not installed (pip install ragen2[verl])")


# ------------------------------------------------------------------------------------------------ helpers
def verl_batch(rng: random.Random, p: int, g: int, t: int = 5, levels=(0.0, 0.5, 1.0), shuffle: bool = True):
    """A verl-shaped batch: outcome reward on the last valid token of right-padded rows, uids interleaved."""
    uids = [f"u{i}" for i in range(p) for _ in range(g)]
    if shuffle:
        rng.shuffle(uids)
    b = len(uids)
    rewards = torch.zeros(b, t)
    mask = torch.zeros(b, t)
    seq = []
    for row in range(b):
        n = rng.randint(1, t)
        r = rng.choice(levels)
        mask[row, :n] = 1
        rewards[row, n - 1] = r
        seq.append(r)
    return rewards, mask, np.array(uids, dtype=object), seq


def ref_groups(uids):
    order, rows = [], {}
    for i, u in enumerate(uids):
        if u not in rows:
            order.append(u)
            rows[u] = []
        rows[u].append(i)
    return order, rows


def ref_variance(values, ddof):
    if any(not math.isfinite(v) for v in values):
        return math.nan
    if len(values) <= ddof:
        return 0.0
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - ddof)


def ref_ours_top_p(variances, value, eps, include_zero):
    """Our top-p from its definition: smallest stable prefix with cumsum >= value * total - eps (min 1)."""
    cand = [i for i, v in enumerate(variances) if not math.isnan(v) and (include_zero or v > 1e-10)]
    cand.sort(key=lambda i: -variances[i])  # Python's sort is stable: ties keep first-seen order
    total = sum(variances[i] for i in cand)
    if not total > 0:
        return []
    kept, cum = [], 0.0
    for i in cand:
        kept.append(i)
        cum += variances[i]
        if cum >= value * total - eps:
            break
    return kept


def ref_pr7894(variances, strategy, top_p=0.9, top_k=1, include_zero=False, eps=0.01):
    """verl PR #7894's rule restated from its description and tests (variances already computed)."""
    total = sum(variances)
    groups = list(range(len(variances)))
    if total <= 0:
        return (groups[:top_k] if strategy == "top_k" else groups) if include_zero else []
    if strategy == "top_p" and include_zero and top_p == 1.0:
        return groups
    cand = sorted((i for i in groups if include_zero or variances[i] > 0), key=lambda i: -variances[i])
    if strategy == "top_k":
        return cand[:top_k]
    target, kept, cum = top_p * total - eps, [], 0.0
    if target > 0:
        for i in cand:
            kept.append(i)
            cum += variances[i]
            if cum >= target:
                break
    return kept


def kept_uids(res):
    return [res.group_uids[i] for i in sorted(res.groups.kept.tolist())]


# ------------------------------------------------------------------------------------------------ pure: filtering
@pytest.mark.parametrize("seed", range(6))
def test_group_variances_match_a_loop_with_dead_rows_and_nan(seed):
    rng = random.Random(seed)
    rewards, mask, uids, seq = verl_batch(rng, p=5, g=4)
    mask[rng.randrange(len(seq))] = 0  # a dead row (no response token) leaves its group
    if seed % 2:
        row = rng.randrange(len(seq))
        rewards[row, int(mask[row].nonzero().max()) if mask[row].any() else 0] = math.nan
        mask[row, 0] = 1
    order, rows = ref_groups(uids.tolist())
    r = sequence_rewards(rewards, mask)
    live = mask.sum(dim=1) > 0
    g = torch.tensor([order.index(u) for u in uids.tolist()])
    for ddof in (0, 1):
        got = group_variances(r, g, len(order), ddof, live)
        for i, u in enumerate(order):
            vals = [float(np.nansum(np.where(mask[b].numpy() != 0, rewards[b].numpy(), 0.0)))
                    if not torch.isnan(rewards[b][mask[b] != 0]).any() else math.nan
                    for b in rows[u] if mask[b].sum() > 0]
            want = ref_variance(vals, ddof)
            if math.isnan(want):
                assert math.isnan(float(got[i]))
            else:
                assert float(got[i]) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_group_variances_are_bitwise_invariant_to_row_order_and_ties_go_to_the_first_group(seed):
    rng = random.Random(seed)
    values = [rng.choice([0.0, 1.0, 0.1, -0.1, 0.3]) for _ in range(6)]
    other = list(values)
    rng.shuffle(other)
    # two groups of the same rewards in another order, interleaved rows, then a zero group
    rewards = torch.tensor(values + other + [0.0] * 6, dtype=torch.float64)
    g = torch.tensor([0] * 6 + [1] * 6 + [2] * 6)
    perm = torch.randperm(18, generator=torch.Generator().manual_seed(seed))
    v = group_variances(rewards[perm], g[perm], 3)
    assert v[0].item() == v[1].item()  # exact, not approximately
    # [0,0,0,1,0] vs [0,0,0,0,1]: without ordered accumulation these scored 0.2 + 4e-17 vs 0.2 + 7e-17
    two = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    v2 = group_variances(two, torch.tensor([0] * 5 + [1] * 5), 2)
    assert v2[0].item() == v2[1].item()


@pytest.mark.parametrize("seed", range(10))
def test_filter_rows_matches_the_top_p_definition(seed):
    # G in {2, 4} with dyadic rewards: every variance is exact in floating point, so the reference's exact ties
    # (statistics.variance) are float ties too and the first-seen tie-break is what is compared.
    rng = random.Random(100 + seed)
    rewards, mask, uids, seq = verl_batch(rng, p=rng.randint(2, 7), g=rng.choice([2, 4]))
    order, rows = ref_groups(uids.tolist())
    var = [statistics.variance([seq[b] for b in rows[u]]) for u in order]
    for value, eps, include_zero in ((0.9, 0.0, True), (0.5, 0.01, False), (1.0, 0.0, True)):
        res = filter_rows(rewards, mask, uids, FilterSpec(value=value, eps=eps, include_zero=include_zero))
        want = ref_ours_top_p(var, value, eps, include_zero)
        assert res.groups.kept.tolist() == want
        want_rows = sorted(b for i in want for b in rows[order[i]])
        assert res.rows.tolist() == want_rows
        assert res.empty == (not want)


@pytest.mark.parametrize("seed", range(10))
def test_agrees_with_pr7894_where_the_semantics_agree(seed):
    # Agreement region: include_zero=False, positive total, no NaN, target > 0 (eps small).
    rng = random.Random(200 + seed)
    rewards, mask, uids, seq = verl_batch(rng, p=rng.randint(2, 8), g=4, levels=(0.0, 1.0, 2.0, 3.0))
    order, rows = ref_groups(uids.tolist())
    var = [statistics.variance([seq[b] for b in rows[u]]) for u in order]
    if sum(var) == 0:
        rewards[rows[order[0]][0], int(mask[rows[order[0]][0]].nonzero().max())] += 1.0
        seq[rows[order[0]][0]] += 1.0
        var = [statistics.variance([seq[b] for b in rows[u]]) for u in order]
    for top_p in (0.3, 0.8, 0.9):
        res = filter_rows(rewards, mask, uids, FilterSpec.pr7894_defaults(value=top_p, eps=0.0))
        assert sorted(res.groups.kept.tolist()) == sorted(ref_pr7894(var, "top_p", top_p=top_p, eps=0.0))
    for k in (1, 2, 3):
        res = filter_rows(rewards, mask, uids, FilterSpec.from_config(
            {"strategy": "top_k", "top_k": k, "include_zero": False}))
        assert sorted(res.groups.kept.tolist()) == sorted(ref_pr7894(var, "top_k", top_k=k))


def test_pr7894_examples_and_documented_differences():
    one = torch.zeros(6, 2)
    mask = torch.ones(6, 2)
    uids = np.array(["high", "medium", "high", "medium", "low", "low"], dtype=object)
    one[:, 1] = torch.tensor([-3.0, -2.0, 3.0, 2.0, -1.0, 1.0])
    res = filter_rows(one, mask, uids, FilterSpec.pr7894_defaults(value=0.8, eps=0.0))
    assert res.row_mask.tolist() == [True, True, True, True, False, False]
    assert res.metrics()["ragen_filter/selected_variance_ratio"] == pytest.approx(26.0 / 28.0)
    # ties go to the first uid seen
    tie = torch.tensor([[-1.0], [-1.0], [1.0], [1.0]])
    res = filter_rows(tie, torch.ones(4, 1), ["first", "second", "first", "second"], FilterSpec(value=0.5))
    assert res.row_mask.tolist() == [True, False, True, False]
    # all-zero batch: PR #7894 keeps everything with include_zero; ours keeps nothing (skip the step)
    flat = torch.tensor([[1.0], [1.0], [2.0], [2.0]])
    assert filter_rows(flat, torch.ones(4, 1), ["a", "a", "b", "b"], FilterSpec(include_zero=True)).empty
    assert ref_pr7894([0.0, 0.0], "top_p", include_zero=True) == [0, 1]
    # NaN reward: ours never keeps the group; PR #7894 would rank it by its finite rows
    nan = torch.tensor([[math.nan], [0.0], [0.0], [1.0]])
    res = filter_rows(nan, torch.ones(4, 1), ["x", "x", "y", "y"], FilterSpec(value=1.0))
    assert kept_uids(res) == ["y"] and res.groups.n_nan == 1
    # selection eps above the target: PR #7894 keeps nothing, ours keeps the top group (filtering module)
    tiny = torch.tensor([[0.0], [0.1]])
    assert ref_pr7894([0.005], "top_p", top_p=0.9, eps=0.01) == []
    assert filter_rows(tiny, torch.ones(2, 1), ["t", "t"], FilterSpec(eps=0.01)).rows.tolist() == [0, 1]


def test_filter_spec_reads_pr_names_and_rejects_bad_keys():
    spec = FilterSpec.from_config({"strategy": "top_k", "top_k": 3, "variance_ddof": 0, "selection_eps": 0.01})
    assert (spec.strategy, spec.value, spec.ddof, spec.eps) == ("top_k_abs", 3, 0, 0.01)
    assert FilterSpec.from_config({"top_p": 0.7}).value == 0.7
    assert FilterSpec.from_config(None) == FilterSpec()
    with pytest.raises(ValueError, match="unknown ragen_filter key 'topp'"):
        FilterSpec.from_config({"topp": 0.7})
    with pytest.raises(ValueError, match="both 'value'"):
        FilterSpec.from_config({"top_p": 0.7, "value": 0.5})
    with pytest.raises(ValueError, match="mode"):
        FilterSpec(mode="drop")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        FilterSpec(value=1.5)
    with pytest.raises(ValueError, match="include_zero"):
        FilterSpec.from_config({"include_zero": "yes"})


def test_disabled_filter_keeps_every_row_and_bad_shapes_are_named():
    rewards, mask, uids, _ = verl_batch(random.Random(3), p=3, g=2)
    assert filter_rows(rewards, mask, uids, FilterSpec(enable=False)).rows.tolist() == list(range(6))
    with pytest.raises(ValueError, match="token_level_rewards"):
        filter_rows(rewards[0], mask, uids)
    with pytest.raises(ValueError, match="uids hold 5 rows"):
        filter_rows(rewards, mask, uids[:5])


# ---------------------------------------------------------------------------------------- pure: removal, advantages
def test_select_rows_removes_rows_of_every_kind():
    rewards, mask, uids, _ = verl_batch(random.Random(4), p=4, g=3)
    tags = [f"t{i}" for i in range(12)]
    batch = {"token_level_rewards": rewards, "response_mask": mask, "uid": uids, "tags": tags}
    res = filter_rows(rewards, mask, uids, FilterSpec(value=0.5))
    out = select_rows(batch, res.rows)
    keep = res.rows.tolist()
    assert out["uid"].tolist() == [uids[i] for i in keep]
    assert out["tags"] == [f"t{i}" for i in keep]
    assert torch.equal(out["token_level_rewards"], torch.stack([rewards[i] for i in keep]))
    assert set(out["uid"].tolist()) == set(kept_uids(res))
    with pytest.raises(ValueError, match="same number of rows"):
        select_rows({"a": torch.zeros(3), "b": np.zeros(2)}, [0])


@pytest.mark.parametrize("seed", range(4))
def test_group_advantages_match_hand_grpo_rloo_dr_grpo(seed):
    rng = random.Random(300 + seed)
    rewards, mask, uids, seq = verl_batch(rng, p=4, g=4, levels=(0.0, 0.3, 1.0))
    order, rows = ref_groups(uids.tolist())
    for est in ("grpo", "dr_grpo", "rloo"):
        got = group_advantages(rewards, mask, uids, est, eps=1e-6)
        for u in order:
            vals = [seq[b] for b in rows[u]]
            mean, std = sum(vals) / len(vals), statistics.stdev(vals)
            for b in rows[u]:
                if est == "grpo":
                    want = (seq[b] - mean) / (std + 1e-6)
                elif est == "dr_grpo":
                    want = seq[b] - mean
                else:
                    want = seq[b] - (sum(vals) - seq[b]) / (len(vals) - 1)
                row = got[b]
                assert torch.allclose(row[mask[b] != 0], torch.full_like(row[mask[b] != 0], want), atol=1e-5)
                assert torch.all(row[mask[b] == 0] == 0)
    with pytest.raises(ValueError, match="same number of rows"):
        group_advantages(rewards[:-1], mask[:-1], uids[:-1])


def test_masked_advantages_zero_dropped_rows_and_keep_kept_baselines():
    rewards, mask, uids, _ = verl_batch(random.Random(9), p=5, g=4, levels=(0.0, 1.0, 2.0))
    adv, res = masked_group_advantages(rewards, mask, uids, FilterSpec(value=0.6))
    assert torch.all(adv[~res.row_mask] == 0)
    compact = group_advantages(rewards[res.rows], mask[res.rows], uids[res.rows.numpy()])
    assert torch.allclose(adv[res.rows], compact)


# ------------------------------------------------------------------------------------------------ pure: MI, env
def test_first_span_and_mi_inputs():
    assert first_span(torch.tensor([5, 6, 7, 8, 9]), torch.tensor([0, 1, 1, 0, 1])).tolist() == [6, 7]
    assert first_span(torch.tensor([5, 6]), torch.tensor([0, 0])).tolist() == []
    prompts = torch.tensor([[0, 11, 12], [0, 21, 22], [0, 11, 12], [0, 21, 22]])
    pmask = torch.tensor([[0, 1, 1]] * 4)
    resp = torch.tensor([[1, 2, 3], [4, 5, 0], [6, 7, 8], [9, 0, 0]])
    rmask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 1], [1, 0, 0]])
    xs, zs, used, skipped = mi_inputs(prompts, pmask, resp, rmask, ["a", "b", "a", "b"])
    assert [x.tolist() for x in xs] == [[11, 12], [21, 22]] and used == ["a", "b"] and skipped == 0
    assert [[z.tolist() for z in g] for g in zs] == [[[1, 2], [6]], [[4, 5], [9]]]
    rmask[3] = 0
    assert mi_inputs(prompts, pmask, resp, rmask, ["a", "b", "a", "b"])[2:] == (["a"], 1)


def test_mi_metrics_equal_the_naive_cross_scoring():
    from transformers import LlamaConfig, LlamaForCausalLM

    from ragen_core.math.mi import cross_score_naive, flatten_proxies, mi_proxies

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(1, 40, (6, 4), generator=gen)
    prompts[2:4] = prompts[0:2]  # rows 0,2 are group a; 1,3 group b; 4,5 group c
    prompts[4:6] = prompts[4]
    pmask = torch.ones(6, 4, dtype=torch.long)
    resp = torch.randint(1, 40, (6, 5), generator=gen)
    rmask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1],
                          [1, 1, 0, 1, 1]])
    uids = ["a", "b", "a", "b", "c", "c"]
    got = mi_metrics(model, prompts, pmask, resp, rmask, uids, max_groups=None)
    xs = [prompts[0], prompts[1], prompts[4]]
    zs = [[resp[0, :3], resp[2, :4]], [resp[1, :2], resp[3, :1]], [resp[4, :5], resp[5, :2]]]
    L, n = cross_score_naive(model, xs, zs, return_lengths=True)
    want = flatten_proxies(mi_proxies(L, n, prompt_ids=[tuple(x.tolist()) for x in xs]))
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key  # fp32 token log-probs
    assert got["collapse/skipped"] == 0.0


def test_env_episode_replays_direct_env_stepping():
    responses = ["<think>a</think><answer>Left</answer>", "nonsense", "<think>b</think><answer>Down || Up</answer>"]
    ep = episode_from_extra_info({"env_id": "ragen/Sokoban-v0", "seed": 10003, "max_turns": 3, "index": 7})
    msgs = ep.start()
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"].startswith("Turn 1:\nState:\n")
    env = gym.make("ragen/Sokoban-v0")
    obs, info = env.reset(seed=10003)
    assert msgs[0]["content"] == info["instructions"] and obs in msgs[1]["content"]
    total, nxt = 0.0, None
    for k, text in enumerate(responses):
        obs, r, term, trunc, info = env.step(text)
        total += r
        nxt = ep.step(text)
        if term or trunc:
            break
        if k < 2:
            assert nxt["content"].startswith(f"Reward: {r:g}\nTurn {k + 2}:\nState:\n{obs}")
    assert nxt is None and ep.done and ep.turn == k + 1
    assert ep.total_reward == pytest.approx(total) and ep.success == bool(info["success"])
    with pytest.raises(RuntimeError, match="over"):
        ep.step("x")
    with pytest.raises(ValueError, match="env_id"):
        EnvEpisode("ragen/Nope-v0", 0)
    with pytest.raises(ValueError, match="extra_info"):
        episode_from_extra_info({"seed": 1})


# ------------------------------------------------------------------------------------------------ version gate
def test_version_gate_names_the_supported_range(monkeypatch):
    monkeypatch.delenv("RAGEN2_ALLOW_UNTESTED_VERL", raising=False)
    assert vglue.check_verl_version("0.9.1") == "0.9.1"
    for bad in ("0.8.5", "0.10.0", "1.0.0rc1"):
        with pytest.raises(vglue.UnsupportedVerlVersionError, match=r"verl>=0\.9\.1,<0\.10\.0 \(tested: 0\.9\.1\)"):
            vglue.check_verl_version(bad)
    monkeypatch.setenv("RAGEN2_ALLOW_UNTESTED_VERL", "1")
    with pytest.warns(RuntimeWarning, match="trying anyway"):
        vglue.check_verl_version("0.10.0")


@pytest.mark.skipif(HAVE_VERL, reason="verl is installed")
def test_register_without_verl_fails_clearly():
    with pytest.raises(vglue.UnsupportedVerlVersionError, match="verl is not installed"):
        vglue.register()


# ------------------------------------------------------------------------------------------------ glue, real verl 0.9
@needs_verl
def test_registered_estimator_equals_verl_grpo_and_rloo_when_nothing_is_dropped():
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    vglue.register()
    fn = core_algos.get_adv_estimator_fn(vglue.ADV_ESTIMATOR_NAME)
    rewards, mask, uids, _ = verl_batch(random.Random(11), p=4, g=4, levels=(0.0, 0.4, 1.0))
    for est, verl_fn in (("grpo", core_algos.compute_grpo_outcome_advantage),
                         ("rloo", core_algos.compute_rloo_outcome_advantage)):
        cfg = OmegaConf.create({"ragen_filter": {"mode": "mask", "enable": False, "estimator": est}})
        ours, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uids, config=cfg)
        theirs, _ = verl_fn(token_level_rewards=rewards.clone(), response_mask=mask, index=uids)
        assert torch.allclose(ours, theirs.float(), atol=1e-5), est


@needs_verl
def test_mask_mode_estimator_and_remove_mode_guard():
    from omegaconf import OmegaConf
    from verl import DataProto

    rewards, mask, uids, _ = verl_batch(random.Random(12), p=5, g=4, levels=(0.0, 1.0, 2.0))
    cfg = OmegaConf.create({"ragen_filter": {"mode": "mask", "top_p": 0.6}})
    adv, _ = vglue.ragen_snr_advantage(rewards, mask, uids, config=cfg)
    res = filter_rows(rewards, mask, uids, FilterSpec(value=0.6))
    assert torch.all(adv[~res.row_mask] == 0) and bool((adv[res.row_mask] != 0).any())
    # physical removal through verl's own DataProto
    data = DataProto.from_single_dict({"token_level_rewards": rewards, "response_mask": mask, "uid": uids})
    kept = data.select_idxs(res.rows)
    assert len(kept) == res.rows.numel() and set(kept.non_tensor_batch["uid"].tolist()) == set(kept_uids(res))
    # no trainer mode told the estimator that it removed the dropped groups
    with pytest.raises(RuntimeError, match="ragen_snr_sync"):
        vglue.ragen_snr_advantage(rewards, mask, uids, config=OmegaConf.create({}))


@needs_verl
def test_trainer_removes_dropped_groups_before_balancing(monkeypatch):
    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta

    vglue.register()
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from ragen_core.integrations.verl import trainer as verl_trainer

    rng = random.Random(13)
    rewards, mask, uids, _ = verl_batch(rng, p=6, g=3, levels=(0.0, 1.0, 3.0))
    keys = [f"{u}_{i}_0" for i, u in enumerate(uids)]
    rows = {}
    for i, k in enumerate(keys):
        n = int(mask[i].sum())
        rows[k] = {"uid": uids[i], "rm_scores": rewards[i, :n], "response_mask": mask[i, :n]}
    fake = FakeTQ(rows)
    monkeypatch.setattr(verl_trainer, "tq", fake)
    monkeypatch.setattr(PPOTrainerSync, "_balance_batch", lambda self, batch, metrics, **kw: batch)
    monkeypatch.setattr(PPOTrainerSync, "_update_actor", lambda self, batch, metrics: "updated")
    trainer = object.__new__(verl_trainer.RagenSNRTrainer)
    trainer.config = OmegaConf.create({"algorithm": {"ragen_filter": {"top_p": 0.7}}})
    trainer.global_steps = 1
    metrics: dict = {}
    out = trainer._balance_batch(KVBatchMeta(keys=keys, tags=[{"i": i} for i in range(len(keys))],
                                             partition_id="train"), metrics)
    res = filter_rows(rewards, mask, uids, FilterSpec(value=0.7))
    assert out.keys == [keys[i] for i in res.rows.tolist()]
    assert out.tags == [{"i": i} for i in res.rows.tolist()]
    assert sorted(fake.cleared) == sorted(set(keys) - set(out.keys))
    handoff = core_algos.get_adv_estimator_fn(vglue.ADV_ESTIMATOR_NAME).handoff
    assert metrics["ragen_filter/rows_kept"] == res.rows.numel() and handoff.removed and handoff.step == 1
    assert trainer._update_actor(out, metrics) == "updated"
    # an all-zero batch keeps its rows and skips the updates
    for k in rows:
        rows[k]["rm_scores"] = torch.zeros_like(rows[k]["rm_scores"])
    fake.cleared = []
    trainer._balance_batch(KVBatchMeta(keys=keys, tags=[{}] * len(keys), partition_id="train"), metrics)
    assert metrics["ragen_filter/skipped_update"] == 1.0 and fake.cleared == []
    assert trainer._update_actor(out, metrics) is out


@needs_verl
def test_agent_loop_plays_the_env_through_a_stand_in_server():
    vglue.register()
    from ragen_core.integrations.verl.agent import RagenEnvAgentLoop

    texts = ["<think>a</think><answer>Left</answer>", "<think>b</think><answer>Down</answer>", "oops"]

    class Server:
        calls = 0

        async def generate(self, request_id, prompt_ids, sampling_params):
            Server.calls += 1
            return SimpleNamespace(token_ids=[1000 + Server.calls] * 3)

    async def build(messages):
        return [7] * len(messages)

    async def merge_assistant(ids, toks, mask):
        return SimpleNamespace(token_ids=ids + toks), mask + [1] * len(toks), None

    async def merge_context(prev, msgs, ids, mask):
        return SimpleNamespace(token_ids=ids + [5, 5]), mask + [0, 0], None

    loop = object.__new__(RagenEnvAgentLoop)
    loop.response_length = 100
    loop.server_manager = Server()
    loop.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: texts[ids[0] - 1001])
    loop.ct_build_initial_tokens, loop.ct_merge_assistant_token = build, merge_assistant
    loop.ct_merge_context_msg = merge_context
    extra = {"env_id": "ragen/Sokoban-v0", "seed": 10005, "max_turns": 3}
    out = asyncio.run(loop.run({"temperature": 1.0}, extra_info=extra))
    ref = episode_from_extra_info(extra)
    ref.start()
    for t in texts:
        if ref.step(t) is None:
            break
    assert out.reward_score == pytest.approx(ref.total_reward)
    assert out.prompt_ids == [7, 7]
    turns = int(out.extra_fields["ragen_turns"])
    assert out.response_mask == ([1, 1, 1, 0, 0] * turns)[:-2]
    assert len(out.response_ids) == len(out.response_mask)
