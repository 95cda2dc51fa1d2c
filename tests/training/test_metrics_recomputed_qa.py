"""The numbers a run logs, recomputed the way a researcher who does not trust the dashboard would: plain loops over
the raw episodes (the trajectories the step sampled) and over a cross-score matrix, against what `metrics.jsonl`
holds and what its schema (``ragen_core/training/metrics.py``, the table of docs/train.md) says it holds; and the
run summary read against the records it quotes.

Before: the summary averaged probe measurements with no within-prompt variation (a correlation that is 0 by
convention) into "+0.000, 95% interval [+0.000, +0.000]", a precise-looking zero that was never measured; its
"format-valid rate" and "mean return" rows did not say they were the training batch's; `filter/groups_total` was
documented as the groups rolled out for the step (with dynamic sampling the refill rounds roll out more); the
`loss/` means over micro-batches were documented as token means (they move with `algo.micro_batch_size`).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
import torch
from stand_in_envs import ParityEnv, register

from ragen_core.math.mi import flatten_proxies, mi_proxies
from ragen_core.policy import HFPolicy
from ragen_core.training.config import load_config
from ragen_core.training.metrics import Filter, Loss, Probe, Rollout, lookup
from ragen_core.training.report import write_summary
from ragen_core.training.trainer import Trainer

ENV_ID = register("test/ParityRecompute-v0", ParityEnv)


@pytest.fixture(scope="module")
def model_dir(make_tiny_model):
    return make_tiny_model("value 12 Say anything. go")


def _cfg(*overrides: str):
    base = [f"env.id={ENV_ID}", "rollout.groups=4", "rollout.group_size=4", "rollout.max_turns=2",
            "rollout.max_new_tokens=6", "run.steps=2", "run.progress=false", "run.device=cpu", "algo.name=grpo",
            "algo.lr=1e-3", "algo.mini_batch_size=64", "algo.micro_batch_size=64", "eval.episodes=2",
            "eval.every=0", "mi.every=0"]
    return load_config(None, base + list(overrides))


def _step(model_dir, tmp_path, *overrides: str):
    """One train_step; its metrics and the first rollout batch it sampled."""
    trainer = Trainer(_cfg(*overrides), tmp_path / "run", policy=HFPolicy.from_pretrained(model_dir))
    batches = []
    collect = trainer.collect

    def spy(policy=None):
        batches.append(collect(policy))
        return batches[-1]

    trainer.collect = spy
    return trainer.train_step(), batches, trainer


def _close(a, b, tol=1e-5) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None
    return b is not None and abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def _sample_variance(xs: list[float]) -> float:
    if len(set(xs)) == 1:
        return 0.0
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


# ------------------------------------------------------------------ rollout/ and filter/ from the raw episodes
@pytest.mark.parametrize("overrides", [
    ("filter.strategy=top_p", "filter.value=0.6"),
    ("filter.strategy=top_k", "filter.value=0.5"),
    ("filter.enabled=false",),
])
def test_rollout_and_filter_metrics_match_plain_loops_over_the_episodes(model_dir, tmp_path, overrides):
    m, batches, trainer = _step(model_dir, tmp_path, *overrides)
    trajs = batches[0].trajectories
    turns = [t for tr in trajs for t in tr.turns]
    returns = [sum(t.reward for t in tr.turns) for tr in trajs]
    mean = sum(returns) / len(returns)
    positive = {}
    for tr in trajs:
        for k, t in enumerate(tr.turns, 1):
            positive[k] = positive.get(k, 0.0) + max(t.reward, 0.0)
    total = sum(positive.values())
    expected = {
        Rollout.SUCCESS: sum(tr.success for tr in trajs) / len(trajs),
        Rollout.RETURN: mean,
        Rollout.RETURN_STD: math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns)),
        Rollout.FORMAT_VALID: sum(sum(t.format_valid for t in tr.turns) / len(tr.turns) for tr in trajs) / len(trajs),
        Rollout.RESPONSE_LENGTH: sum(len(t.response_ids) for t in turns) / len(trajs),
        Rollout.TOKENS_PER_TURN: sum(len(t.response_ids) for t in turns) / len(turns),
        Rollout.NUM_TURNS: len(turns) / len(trajs),
        Rollout.TRAJECTORIES: len(trajs),
        Rollout.RESPONSE_CAPPED: sum(t.finish_reason == "length" for t in turns) / len(turns),
        Rollout.INVALID_ACTION: sum(not t.action_valid for t in turns) / len(turns),
        Rollout.ENV_ERRORS: sum(t.env_error is not None for t in turns),
        Rollout.REWARD_TURN: sum(k * v for k, v in positive.items()) / total if total > 0 else None,
        **{f"rollout/reward_share_turn{k}": positive.get(k, 0.0) / total if total > 0 else None for k in (1, 2)},
    }
    # filter/: the sample variance of each group's returns (groups are consecutive runs of G episodes)
    G = trainer.cfg.rollout.group_size
    variances = [_sample_variance(returns[i:i + G]) for i in range(0, len(returns), G)]
    rv_mean = sum(variances) / len(variances)
    rv_std = math.sqrt(sum((v - rv_mean) ** 2 for v in variances) / len(variances))
    expected.update({
        Filter.RV_MEAN: rv_mean, Filter.RV_STD: rv_std,
        Filter.RV_HETEROGENEITY: rv_std / rv_mean if rv_mean > 0 else None,
        Filter.ZERO_FRACTION: sum(v <= 1e-10 for v in variances) / len(variances),
        Filter.GROUPS_TOTAL: len(variances), Filter.NAN_GROUPS: 0,
    })
    fc = trainer.cfg.filter
    spec = fc.spec
    ranked = sorted(variances, reverse=True)
    if not fc.enabled:
        kept = len(variances)
    elif sum(ranked) == 0:
        kept = 0
    elif spec.strategy == "top_k":
        kept = max(1, math.floor(spec.value * len(ranked) + 1e-9))
    else:  # top_p: the smallest prefix reaching value x total
        kept, acc = 0, 0.0
        while acc < spec.value * sum(ranked) * (1 - 1e-9):
            acc += ranked[kept]
            kept += 1
    expected.update({Filter.KEPT_GROUPS: kept, Filter.KEPT_FRACTION: kept / len(variances),
                     Filter.EMPTY: float(kept == 0)})
    for key, value in expected.items():
        assert _close(m.get(key), value), (key, m.get(key), value)
    # rows: one per episode in full context (the default here), one per turn otherwise
    rows = len(trajs) if trainer.cfg.rollout.context == "full" else len(turns)
    assert m[Rollout.ROWS] == rows
    if kept:
        assert m[Filter.ROWS_TOTAL] == rows and m[Filter.ROWS_KEPT] == rows * kept // len(variances)
        assert m["perf/tokens_trained"] <= sum(len(t.response_ids) for t in turns)

def test_groups_total_is_the_first_batch_as_documented_when_dynamic_sampling_refills(model_dir, tmp_path):
    m, batches, _ = _step(model_dir, tmp_path, "algo.name=dapo", "algo.dynamic_sampling=true",
                          "filter.strategy=top_k", "filter.value=0.25", "algo.max_refill_rounds=2")
    assert m[Filter.REFILL_ROUNDS] >= 1 and len(batches) == 1 + m[Filter.REFILL_ROUNDS]
    first = batches[0]
    assert m[Filter.GROUPS_TOTAL] == first.groups  # not every group rolled out for the step
    assert m[Rollout.TRAJECTORIES] == len(first.trajectories)
    # before: "groups rolled out for the step", which the refill rounds made false
    text = lookup(Filter.GROUPS_TOTAL).description + lookup(Filter.GROUPS_TOTAL).logged_by
    assert "first rollout batch" in text and "refill" in text
    assert "first rollout batch" in lookup(Rollout.RETURN).logged_by


def test_loss_means_do_not_move_with_the_micro_batch_size(model_dir, tmp_path):
    """The same batch and gradient at two micro-batch sizes give the same `loss/` values: each mini-batch's value
    weights its micro-batches as the backward does. Before, they were an unweighted mean over micro-batches
    (`loss/policy`: ~0 at one micro-batch, 0.016 at micro-batches of 3 rows; `loss/entropy` 6% apart)."""
    runs = [_step(model_dir, tmp_path / str(mb), f"algo.micro_batch_size={mb}", "filter.enabled=false")[0]
            for mb in (64, 3)]
    assert _close(runs[0][Loss.GRAD_NORM], runs[1][Loss.GRAD_NORM], 1e-4)  # the update is the same
    for key in (Loss.ENTROPY, Loss.POLICY, Loss.TOTAL, Loss.CLIP_FRACTION, Loss.APPROX_KL):
        assert _close(runs[0][key], runs[1][key], 1e-5), (key, runs[0][key], runs[1][key])
        assert "micro_batch_size` changes nothing" in lookup(key).logged_by


# ------------------------------------------------------------------ the MI proxies, by an independent plain loop
def _lse(xs: list[float]) -> float:
    top = max(xs)
    return top + math.log(sum(math.exp(x - top) for x in xs))


def _proxies_by_hand(L, n, ids, eps=1e-3) -> dict[str, float]:
    """docs/science.md section 2 by hand: matched, marginal (Eq. 1), the per-token marginal, MI-Seq, retrieval
    with a tie for the top k broken uniformly at random (enumerated), duplicates counting as the own prompt."""
    P, G = len(L), len(L[0])
    rows = {"matched": [], "marg": [], "marg_tw": [], "diag": [], "lse": []}
    hits: dict[int, list[float]] = {k: [] for k in (1, 2, 4, 8) if k == 1 or k < P}
    for i in range(P):
        for k in range(G):
            row, size = L[i][k], n[i][k]
            lse = _lse(row) - math.log(P)
            rows["diag"].append(row[i])
            rows["lse"].append(lse)
            rows["matched"].append(row[i] / size)
            rows["marg"].append(lse / size)
            rows["marg_tw"].append(_lse([x / size for x in row]) - math.log(P))
            for top in hits:
                kth = sorted(row, reverse=True)[top - 1]
                above = [j for j in range(P) if row[j] > kth]
                tied = [j for j in range(P) if row[j] == kth]
                picks = list(itertools.combinations(tied, top - len(above)))
                hits[top].append(1.0 if any(ids[j] == ids[i] for j in above) else
                                 sum(any(ids[j] == ids[i] for j in pick) for pick in picks) / len(picks))
    mean = statistics.fmean
    mi = mean(a - b for a, b in zip(rows["matched"], rows["marg"]))
    sigma = statistics.pstdev(rows["marg"])
    dup = [sum(ids[j] == ids[i] for j in range(P)) for i in range(P)]
    out = {"retrieval_acc": mean(hits[1]), "retrieval_chance": mean(d / P for d in dup), "mi_est": mi,
           "mi_est_tokenwise": mean(a - b for a, b in zip(rows["matched"], rows["marg_tw"])),
           "mi_seq_est": mean(a - b for a, b in zip(rows["diag"], rows["lse"])), "marginal_std": sigma,
           "mi_zscore": mi / (sigma + eps), "cond_entropy_est": -mean(rows["matched"]),
           "marginal_entropy_est": -mean(rows["marg"]), "marginal_entropy_est_tokenwise": -mean(rows["marg_tw"]),
           "cond_entropy_seq_est": -mean(rows["diag"]), "marginal_entropy_seq_est": -mean(rows["lse"]),
           "mi_upper_bound": math.log(P), "n_prompts": P, "group_size": G}
    for top in hits:
        if top > 1:
            out[f"recall_at_{top}"] = mean(hits[top])
            out[f"recall_at_{top}_chance"] = mean(1 - math.comb(P - d, top) / math.comb(P, top) for d in dup)
    return out


@pytest.mark.parametrize("seed", range(25))
def test_mi_proxies_match_the_documented_formulas_by_hand(seed):
    rng = random.Random(seed)
    P, G = rng.randint(2, 10), rng.randint(1, 4)
    ids = [rng.randint(0, 2) if rng.random() < 0.4 else 100 + i for i in range(P)]  # some duplicated prompts
    # integer scores tie often (shared hits); the others are continuous
    L = [[[float(rng.choice([-1, -2])) if rng.random() < 0.3 else rng.uniform(-30.0, -1.0) for _ in range(P)]
          for _ in range(G)] for _ in range(P)]
    n = [[rng.randint(1, 20) for _ in range(G)] for _ in range(P)]
    got = flatten_proxies(mi_proxies(torch.tensor(L, dtype=torch.float64), torch.tensor(n), prompt_ids=ids), "")
    want = _proxies_by_hand(L, n, ids)
    assert set(got) == set(want)
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value)), (key, got[key], value)


# ------------------------------------------------------------------ summary.md against the records it quotes
def _probe_record(step: int, cov: float, corr: float) -> dict:
    return {"step": step, Probe.RETRIEVAL_MARGIN: 0.1, Probe.RETRIEVAL_ACC: 0.3, Probe.RETRIEVAL_CHANCE: 0.25,
            Probe.N_PROMPTS: 4.0, Probe.GROUP_SIZE: 4.0, Probe.PMI_RETURN_COV: cov, Probe.PMI_RETURN_CORR: corr}


def _summary(tmp_path, history) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_summary(tmp_path, _cfg(), history).read_text()


def test_probe_measurements_without_variation_are_not_averaged_as_a_measured_zero(tmp_path):
    # every trace of a prompt earned the same: the correlation is 0 by convention (nothing to correlate)
    flat = [_probe_record(s, 0.0, 0.0) for s in range(4)]
    text = _summary(tmp_path / "flat", flat)
    assert "interval" not in text  # before: "+0.000, 95% interval [+0.000, +0.000]", a precise-looking zero
    assert "not measured" in text and "by convention only" in text

    corr = [0.30, 0.25, 0.35]
    mixed = [_probe_record(s, 0.01, c) for s, c in enumerate(corr)] + [_probe_record(3, 0.0, 0.0)]
    text = _summary(tmp_path / "mixed", mixed)
    half = 4.303 * statistics.stdev(corr) / math.sqrt(3)  # t(0.975, 2 df)
    mean = statistics.fmean(corr)
    assert f"mean over 3 probe measurements: {mean:+.3f}" in text
    assert f"[{mean - half:+.3f}, {mean + half:+.3f}]" in text and "1 measurement without" in text


def test_summary_rows_quote_the_first_and_last_values_and_say_which_batch(tmp_path):
    history = [{"step": 0, "val/success": 0.25},
               {"step": 1, Rollout.SUCCESS: 0.5, Rollout.FORMAT_VALID: 0.75, Rollout.RETURN: 1.5,
                Filter.KEPT_FRACTION: 0.5, Filter.RV_HETEROGENEITY: None},
               {"step": 2, Rollout.SUCCESS: 0.625, Rollout.FORMAT_VALID: 1.0, Rollout.RETURN: 2.0,
                Filter.KEPT_FRACTION: 0.25, Filter.RV_HETEROGENEITY: 1.25, "val/success": 0.5}]
    rows = {}
    for line in _summary(tmp_path, history).splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3:
            rows[cells[0]] = (cells[1], cells[2])
    assert rows["validation success"] == ("0.250", "0.500")
    assert rows["train format-valid rate"] == ("0.750", "1.000")  # before: "format-valid rate" (which batch?)
    assert rows["train mean return"] == ("1.500", "2.000")
    assert rows["RV heterogeneity"] == ("1.250", "1.250")  # the first non-null value, from step 2
    assert rows["kept fraction"] == ("0.500", "0.250")


def test_the_filter_off_logs_the_reward_variance_with_filter_ddof(model_dir, tmp_path):
    """With the filter off the trainer logged the sample variance (ddof=1) whatever filter.ddof said, so switching
    the filter off changed what filter/rv_mean measured; now both use filter.ddof (a plain loop recomputes it)."""
    for ddof in (0, 1):
        metrics, batches = _step(model_dir, tmp_path / f"d{ddof}", "filter.enabled=false", f"filter.ddof={ddof}")[:2]
        rewards = batches[0].rewards_pg.tolist()
        by_hand = []
        for group in rewards:
            mean = sum(group) / len(group)
            by_hand.append(sum((r - mean) ** 2 for r in group) / (len(group) - ddof))
        assert _close(metrics[Filter.RV_MEAN], sum(by_hand) / len(by_hand), 1e-6), ddof
