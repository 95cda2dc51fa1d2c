"""What a step records and what it may skip: the per-step filter log, provenance.json, the probe's template and
modal shares, and the old-log-prob pass the update makes redundant at one epoch of one mini-batch."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import tomllib
import torch
from stand_in_envs import ValueEnv, register

from ragen_core.policy import HFPolicy
from ragen_core.training.config import load_config
from ragen_core.training.probe import modal_share, reasoning_text, template_match_share
from ragen_core.training.trainer import Trainer, zero_advantage_share

ENV_ID = "test/CoinRecords-v0"


class CoinEnv(ValueEnv):
    """One-turn stand-in env: reward 1 on a coin flip (so some groups have reward variance, some none)."""

    def _execute(self, action):
        return float(self.np_random.random() < 0.5), True


register(ENV_ID, CoinEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say go. go")


def _cfg(*overrides: str):
    base = [f"env.id={ENV_ID}", "rollout.groups=4", "rollout.group_size=4", "rollout.max_turns=1",
            "rollout.max_new_tokens=6", "run.steps=2", "run.progress=false", "run.device=cpu", "algo.name=grpo",
            "algo.lr=1e-3", "algo.mini_batch_size=64", "algo.micro_batch_size=8", "eval.every=0", "mi.every=0",
            "warm_start.sft_episodes=0"]
    return load_config(None, base + list(overrides))


# ---------------------------------------------------------------------------------------------- the filter log
def test_zero_advantage_share_against_a_plain_loop():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        rows, width = 12, 7
        groups = torch.randint(0, 4, (rows,), generator=gen)
        mask = torch.rand(rows, width, generator=gen) < 0.6
        adv = torch.randn(rows, width, generator=gen) * (torch.rand(rows, 1, generator=gen) < 0.5)
        present, signal = set(), set()
        for r in range(rows):
            for t in range(width):
                if mask[r, t]:
                    present.add(int(groups[r]))
                    if float(adv[r, t]) != 0.0:
                        signal.add(int(groups[r]))
        got = zero_advantage_share(adv, mask, groups)
        if not present:
            assert math.isnan(got)
        else:
            assert got == pytest.approx(1 - len(signal) / len(present))


@pytest.mark.parametrize("filter_on", [True, False])
def test_every_step_logs_the_filter_log(model_dir, tmp_path, filter_on):
    cfg = _cfg(f"filter.enabled={'true' if filter_on else 'false'}")
    trainer = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    row = trainer.train_step()
    assert row["filter/groups_total"] == 4.0
    for key in ("filter/kept_groups", "filter/zero_fraction", "filter/skipped"):
        assert key in row, key
    if row["filter/skipped"] == 0.0:
        share = row["filter/kept_zero_adv_share"]
        assert 0.0 <= share <= 1.0
        if not filter_on:  # every group kept: the zero-advantage groups are the zero-variance ones (GRPO)
            assert share == pytest.approx(row["filter/zero_fraction"])


def test_a_run_writes_its_provenance(model_dir, tmp_path):
    cfg = _cfg("run.steps=1")
    run_dir = tmp_path / "run"
    Trainer(cfg, run_dir, policy=HFPolicy.from_pretrained(model_dir)).fit()
    prov = json.loads((run_dir / "provenance.json").read_text())
    config_text = (run_dir / "config.toml").read_text()
    # The config without its result-neutral keys, as sorted compact JSON (ragen_core.training.provenance)
    config = tomllib.loads(config_text)
    del config["warm_start"]["cache_dir"], config["run"]["progress"]
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert prov["config_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert prov["config_sha256_excludes"] == ["run.progress", "warm_start.cache_dir"]
    assert set(prov) >= {"commit", "dirty", "ragen2", "torch", "python", "started"}
    assert prov["commit"] is None or len(prov["commit"]) == 40


# ---------------------------------------------------------------------------------------------- the probe's shares
def test_reasoning_text_drops_only_a_filler_opening():
    fillers = ("so", "then", "now")
    assert reasoning_text("<think> so then  Push Right. </think><answer>Up</answer>", fillers, 2) == "Push Right."
    assert reasoning_text("<think>so Push Right.</think>", fillers, 2) == "so Push Right."  # 'Push' is no filler
    assert reasoning_text("<think>a\n b</think>", fillers, 0) == "a b"
    assert reasoning_text("no think block <answer>Up</answer>", fillers, 2) is None


def test_template_and_modal_shares_on_synthetic_traces():
    template = "Player (1, 2). Push Up."
    traces = [template, "Player (3, 3). Go Left.", template, None, "  ".join(template.split())]
    # 3 of 5 are the template (whitespace-normalised); the missing reasoning counts in the total
    assert template_match_share(traces, [template]) == pytest.approx(3 / 5)
    assert template_match_share(traces, ["other"]) == 0.0
    assert modal_share(traces) == pytest.approx(3 / 5)
    assert modal_share(["a", "b", "c", "d"]) == pytest.approx(1 / 4)
    assert modal_share([None, None]) == 0.0
    assert math.isnan(modal_share([])) and math.isnan(template_match_share([], [template]))


# ---------------------------------------------------------------------------------------------- the old-log-prob pass
def _first_update(model_dir, tmp_path, *overrides: str):
    torch.manual_seed(0)
    cfg = _cfg("filter.enabled=false", *overrides)
    policy = HFPolicy.from_pretrained(model_dir)
    trainer = Trainer(cfg, tmp_path, policy=policy)
    scored = []
    original = trainer._score

    def counting(pol, rows, images):
        scored.append(rows["input_ids"].shape[0])
        return original(pol, rows, images)

    trainer._score = counting
    row = trainer.train_step()
    weights = torch.cat([p.detach().flatten() for p in policy.model.parameters()])
    return row, scored, weights


def test_one_epoch_of_one_minibatch_takes_the_old_logprobs_from_its_own_forward(model_dir, tmp_path):
    row, scored, weights = _first_update(model_dir, tmp_path / "skip")
    assert scored == [] and row["perf/old_logprob_pass"] == 0.0
    assert row["loss/approx_kl"] == 0.0 and row["loss/clip_fraction"] == 0.0  # the ratio is exactly 1
    ref_row, ref_scored, ref_weights = _first_update(model_dir, tmp_path / "pass",
                                                     "algo.old_logprobs_from_update=false")
    assert ref_scored and ref_row["perf/old_logprob_pass"] == 1.0
    # The same update either way: the pass would have computed the values the update's forward computes.
    torch.testing.assert_close(weights, ref_weights, rtol=0, atol=1e-6)
    assert row["loss/policy"] == pytest.approx(ref_row["loss/policy"], abs=1e-6)


@pytest.mark.parametrize("why", ["algo.epochs=2", "algo.mini_batch_size=4"])
def test_the_pass_runs_when_a_later_forward_sees_updated_parameters(model_dir, tmp_path, why):
    row, scored, _ = _first_update(model_dir, tmp_path, why)
    assert scored and row["perf/old_logprob_pass"] == 1.0


def test_pmi_return_association_over_a_subset_of_groups_against_a_plain_loop():
    from ragen_core.training.probe import pmi_return_association

    gen = torch.Generator().manual_seed(1)
    P, G = 5, 3
    L = torch.randn(P, G, P, generator=gen, dtype=torch.float64) * 3
    r = torch.randn(P, G, generator=gen, dtype=torch.float64)
    sel = torch.tensor([True, False, True, True, False])
    pmi_c, r_c = [], []
    for i in range(P):
        if not sel[i]:
            continue
        pmis = [float(L[i, k, i]) - (math.log(sum(math.exp(float(L[i, k, j])) for j in range(P))) - math.log(P))
                for k in range(G)]
        rs = [float(r[i, k]) for k in range(G)]
        pmi_c += [x - sum(pmis) / G for x in pmis]
        r_c += [x - sum(rs) / G for x in rs]
    cov = sum(a * b for a, b in zip(pmi_c, r_c)) / len(pmi_c)
    corr = sum(a * b for a, b in zip(pmi_c, r_c)) / math.sqrt(sum(a * a for a in pmi_c) * sum(b * b for b in r_c))
    got_cov, got_corr = pmi_return_association(L, r, groups=sel)
    assert got_cov == pytest.approx(cov) and got_corr == pytest.approx(corr)
    assert all(math.isnan(x) for x in pmi_return_association(L, r, groups=torch.zeros(P, dtype=torch.bool)))


def test_mi_steps_log_the_pmi_return_covariance_of_kept_and_dropped_groups(model_dir, tmp_path):
    cfg = _cfg("filter.enabled=true", 'filter.strategy="top_k"', "filter.value=0.5", "mi.every=1")
    row = Trainer(cfg, tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir)).train_step()
    for key in ("collapse/pmi_return_cov_kept", "collapse/pmi_return_cov_dropped"):
        assert key in row and isinstance(row[key], float)
