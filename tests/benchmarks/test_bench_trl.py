"""The TRL cross-check benchmark: both engines run the same task from the same weights (a few steps)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("trl")

from benchmarks import bench_trl  # noqa: E402

TINY = ["run.steps=2", "eval.every=2", "eval.episodes=16", "warm_start.sft_episodes=300",
        "rollout.groups=4", "rollout.group_size=4", "algo.micro_batch_size=8"]


@pytest.mark.slow
def test_both_engines_train_the_same_task_from_the_same_weights(tmp_path):
    pair = bench_trl.run_pair("bandit", 0, False, tmp_path, extra=TINY)
    ragen, trl = pair["ragen"], pair["trl"]
    for rec in (ragen, trl):
        assert [s for s, _ in rec["curve"]] == [0, 2]
        assert len(rec["step_s"]) == 2 and all(t > 0 for t in rec["step_s"])
        assert len(rec["tokens"]) == 2 and len(rec["kept_groups"]) == 2
        assert all(0 <= k <= 4 for k in rec["kept_groups"])
    # Same warm-started weights, same greedy validation episodes: the step-0 numbers must be equal.
    assert ragen["curve"][0][1] == trl["curve"][0][1]
    # Resumable: a finished engine is read back, not re-run.
    again = bench_trl.run_pair("bandit", 0, False, tmp_path, extra=TINY)
    assert again["trl"]["wall_s"] == trl["wall_s"]
    summary = bench_trl.summarize([pair])
    assert set(summary["bandit"]) >= {"ragen", "trl", "time_ratio_trl_over_ragen"}
    assert "| bandit (2) | trl |" in bench_trl.markdown(summary, {"bandit": 2})
    if sum(ragen["tokens"]) and sum(trl["tokens"]):
        assert math.isfinite(summary["bandit"]["time_ratio_trl_over_ragen"])


def test_steps_to_a_level():
    curve = [[0, 0.4], [5, 0.89], [10, 0.9], [15, 0.95]]
    assert bench_trl.steps_to(curve, 0.9) == 10 and bench_trl.steps_to(curve, 0.96) is None


def test_trl_arguments_mirror_the_config(tmp_path):
    cfg = bench_trl.make_config("sokoban", 1, False, tmp_path)
    args = bench_trl.trl_arguments(cfg, tmp_path)
    rows = cfg.rollout.groups * cfg.rollout.group_size
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == rows
    assert args.num_generations == cfg.rollout.group_size and args.max_steps == cfg.run.steps
    assert args.learning_rate == cfg.algo.lr and args.lr_scheduler_type == cfg.algo.lr_schedule
    assert args.entropy_coef == cfg.algo.entropy_coef and args.beta == 0.0
    assert (args.epsilon, args.epsilon_high) == (cfg.algo.clip_low, cfg.algo.clip_high)
    assert args.gradient_checkpointing == cfg.model.gradient_checkpointing
    assert args.rv_filter == "top_p" and args.filter_spec() == cfg.filter.spec
    assert cfg.rollout.max_turns == 1  # the cross-check plays single-turn episodes
    bad = bench_trl.make_config("sokoban", 1, False, tmp_path, extra=["algo.kl_coef=0.1"])
    with pytest.raises(ValueError, match="no KL"):
        bench_trl.trl_arguments(bad, tmp_path)
