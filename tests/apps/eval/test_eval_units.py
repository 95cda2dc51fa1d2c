"""`ragen eval`'s parts, each against an independent reference: the Wilson interval (published values and the
score-test inversion by bisection), the per-env numbers (a hand count), the reward-variance reading (a plain loop),
the evaluation seeds (every shipped config's seed streams), the default settings, the env ids and the append-only
episodes file."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from ragen_core.apps.eval.plan import (
    EVAL_SEED,
    EVAL_SEED_STOP,
    Key,
    Sampling,
    default_config,
    make_plan,
    registered_ids,
    resolve_env_ids,
    seed_overlaps,
    seed_streams,
)
from ragen_core.apps.eval.records import EpisodeLog, TurnRecord, episode_record, failed_record, json_safe
from ragen_core.apps.eval.summary import env_summary, rv_profile, wilson_interval
from ragen_core.training.config import load_config

ROOT = Path(__file__).resolve().parents[3]
Z95 = 1.959963984540054


# ---------------------------------------------------------------------------------------------- Wilson
@pytest.mark.parametrize("k, n, lo, hi", [
    # Published: Newcombe (1998), Stat. Med. 17:857, example 81/263; the textbook cases 0/10, 1/10, 5/10.
    (81, 263, 0.2553, 0.3662), (0, 10, 0.0, 0.2775), (1, 10, 0.0179, 0.4042), (5, 10, 0.2366, 0.7634),
    (10, 10, 0.7225, 1.0)])
def test_wilson_interval_matches_published_values(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def _score_bound(k: int, n: int, upper: bool) -> float:
    """The Wilson bound by its definition, not its formula: the p where the score statistic
    (k/n - p)^2 / (p (1 - p) / n) reaches z^2, found by bisection on the side of k/n asked for."""
    phat = k / n
    if (not upper and k == 0) or (upper and k == n):
        return float(phat)
    lo, hi = (phat, 1.0) if upper else (0.0, phat)
    for _ in range(200):
        mid = (lo + hi) / 2
        inside = (phat - mid) ** 2 <= Z95 ** 2 * mid * (1 - mid) / n
        if upper:
            lo, hi = (mid, hi) if inside else (lo, mid)
        else:
            lo, hi = (lo, mid) if inside else (mid, hi)
    return (lo + hi) / 2


def test_wilson_interval_is_the_inverted_score_test():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 400))
        k = int(rng.integers(0, n + 1))
        lo, hi = wilson_interval(k, n)
        assert lo == pytest.approx(_score_bound(k, n, False), abs=1e-9)
        assert hi == pytest.approx(_score_bound(k, n, True), abs=1e-9)
        assert 0 <= lo <= k / n <= hi <= 1
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


# ---------------------------------------------------------------------------------------------- per-env numbers
def _turn(reward: float, valid: bool = True, fmt: bool = True, tokens: int | None = 4) -> TurnRecord:
    return TurnRecord(response="r", reward=reward, info={}, finish_reason="stop", format_valid=fmt,
                      action_valid=valid, prompt_tokens=10, completion_tokens=tokens)


def _line(seed: int, sample: int, rewards: list[float], success: bool, **kw) -> dict:
    return episode_record(Key("ragen/X-v0", seed, sample), turns=[_turn(r, **kw) for r in rewards], messages=[],
                          success=success, prompt="p", model=None, latency_s=1.0)


def test_env_summary_counts_by_hand():
    lines = [_line(1, 0, [1.0], True), _line(2, 0, [-0.1, 0.0], False, valid=False),
             _line(3, 0, [0.5, 0.5, 0.0], True, fmt=False),
             failed_record(Key("ragen/X-v0", 4, 0), "context_length", "too long", turns=[_turn(0.3)], messages=[],
                           prompt="p", latency_s=2.0)]
    s = env_summary(lines)
    assert (s["episodes"], s["successes"], s["failed_episodes"]) == (3, 2, 1)
    assert s["success"] == pytest.approx(2 / 3) and s["success_ci95"] == list(wilson_interval(2, 3))
    assert s["mean_reward"] == pytest.approx((1.0 - 0.1 + 1.0) / 3)
    assert s["mean_turns"] == pytest.approx(6 / 3)
    assert s["invalid_action_rate"] == pytest.approx(2 / 6) and s["format_failure_rate"] == pytest.approx(3 / 6)
    assert s["tokens_per_episode"] == pytest.approx(4 * 6 / 3) and s["failures"] == {"context_length": 1}
    assert math.isnan(lines[3]["reward"]) and lines[3]["success"] is None
    # A server that does not report usage: no token figure rather than a wrong one.
    assert env_summary([_line(1, 0, [1.0], True, tokens=None)])["tokens_per_episode"] is None


def test_rv_profile_counts_groups_with_variance_like_a_plain_loop():
    rng = np.random.default_rng(1)
    lines, groups = [], {}
    for seed in range(40):
        p = rng.choice([0.0, 1.0, 0.5])
        for k in range(4):
            r = float(rng.random() < p)
            lines.append(_line(seed, k, [r], bool(r)))
            groups.setdefault(seed, []).append(r)
    prof = rv_profile(lines)
    with_var = sum(np.var(g, ddof=1) > 0 for g in groups.values())
    assert prof["groups"] == 40 and prof["groups_with_variance"] == with_var
    assert prof["rv_mean"] == pytest.approx(np.mean([np.var(g, ddof=1) for g in groups.values()]))
    assert prof["filter_acts"] == (0 < prof["top_p_kept_groups"] < 40)
    flat = [_line(s, k, [1.0], True) for s in range(5) for k in range(3)]
    assert rv_profile(flat)["filter_acts"] is False and "no group has reward variance" in rv_profile(flat)["reading"]


# ---------------------------------------------------------------------------------------------- seeds
def _shipped_configs() -> list[Path]:
    return sorted((ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", _shipped_configs(), ids=lambda p: p.stem)
def test_the_evaluation_seeds_are_held_out_from_every_shipped_config(path):
    cfg = load_config(path)
    streams = seed_streams(cfg)
    assert seed_overlaps(range(EVAL_SEED, EVAL_SEED_STOP), cfg) == [], streams
    # Checked against the streams as the trainer draws them, seed by seed (not through the range arithmetic).
    drawn = {cfg.env.val_seed + i for i in range(cfg.eval.episodes)} | \
        {cfg.warm_start.seed + i for i in range(cfg.warm_start.sft_episodes)}
    assert not drawn & set(range(EVAL_SEED, EVAL_SEED_STOP)) and cfg.env.train_seed >= EVAL_SEED_STOP


def test_seed_overlaps_names_the_streams_a_range_shares_seeds_with():
    cfg = load_config(ROOT / "configs" / "mechanism_sokoban.toml")
    assert seed_overlaps(range(123, 125), cfg) == ["validation"]
    assert seed_overlaps(range(5100, 5101), cfg) == ["probe"]
    assert seed_overlaps(range(9990, 10010), cfg) == ["train"]
    assert seed_overlaps(range(700, 800), cfg) == ["warm-start", "template"]
    assert seed_overlaps(range(765, 766), cfg) == ["template"]  # the template demonstrator's reference levels
    assert seed_streams(cfg)["train"].stop == sys.maxsize


# ---------------------------------------------------------------------------------------------- settings
def test_a_model_that_is_not_a_run_gets_the_papers_rollout_and_the_envs_own_kwargs():
    for env_id in ("ragen/Sokoban-v0", "ragen/2048-v0", "ragen/Bandit-v0", "ragen/Sokoban-Vision-v0"):
        plan = make_plan(env_id, default_config(env_id), "env defaults", Sampling())
        s = plan.settings
        assert (s.context, s.max_new_tokens, s.system_prompt, s.temperature, s.top_p, s.greedy) == \
            ("full", 128, True, 1.0, 1.0, False)
        assert plan.env_kwargs == {}
    assert make_plan("ragen/Sokoban-v0", default_config("ragen/Sokoban-v0"), "", Sampling()).settings.max_turns == 5
    game = load_config(ROOT / "configs" / "game2048_tiny.toml").rollout.max_turns
    assert make_plan("ragen/2048-v0", default_config("ragen/2048-v0"), "", Sampling()).settings.max_turns == game > 5
    assert default_config("ragen/Bandit-v0").env.per_rollout_option == "payoff_seed"
    greedy = make_plan("ragen/Bandit-v0", default_config("ragen/Bandit-v0"), "", Sampling(0.0, 0.9, 32))
    assert greedy.settings.greedy and greedy.temperature == 0.0 and greedy.settings.max_new_tokens == 32
    assert greedy.settings.top_p == 0.9
    with pytest.raises(ValueError, match="--top-p"):
        make_plan("ragen/Bandit-v0", default_config("ragen/Bandit-v0"), "", Sampling(top_p=1.5))


def test_a_config_brings_its_env_and_rollout():
    cfg = load_config(ROOT / "configs" / "sokoban_tiny.toml")
    plan = make_plan(cfg.env.id, cfg, "config", Sampling(temperature=0.7))
    assert plan.env_kwargs == cfg.env.kwargs and plan.settings.context == cfg.rollout.context
    assert (plan.settings.max_turns, plan.settings.system_prompt) == (cfg.rollout.max_turns, False)
    assert plan.settings.temperature == 0.7 and plan.temperature == 0.7


def test_env_ids_resolve_with_or_without_the_prefix_and_suite_is_every_id():
    assert resolve_env_ids("Sokoban-v0, ragen/bandit-v0,Sokoban-v0") == ["ragen/Sokoban-v0", "ragen/Bandit-v0"]
    assert resolve_env_ids("suite") == registered_ids() and len(registered_ids()) == 14
    with pytest.raises(ValueError, match="unknown env id"):
        resolve_env_ids("ragen/Sokoban-v9")


# ---------------------------------------------------------------------------------------------- the file
def test_the_episodes_file_is_append_only_and_survives_a_cut_last_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    log = EpisodeLog.open(path)
    log.write(_line(1, 0, [1.0], True))
    log.write(_line(1, 1, [0.0], False))
    with pytest.raises(RuntimeError, match="already"):
        log.write(_line(1, 1, [0.0], False))
    with open(path, "a") as f:
        f.write('{"env": "ragen/X-v0", "seed": 2, "sam')  # a crash in the middle of a line
    again = EpisodeLog.open(path)
    assert again.done == {Key("ragen/X-v0", 1, 0), Key("ragen/X-v0", 1, 1)}
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 2
    again.write(_line(2, 0, [1.0], True))
    assert [json.loads(x)["seed"] for x in path.read_text().splitlines()] == [1, 1, 2]


def test_json_safe_turns_env_info_into_plain_json():
    info = {"a": np.int64(3), "b": np.float32(0.5), "c": (1, 2), "d": np.zeros((2, 2)), "e": np.zeros((100, 100)),
            "f": {"g": np.bool_(True)}, "h": object()}
    out = json.loads(json.dumps(json_safe(info)))
    assert out["a"] == 3 and out["b"] == 0.5 and out["c"] == [1, 2] and out["d"] == [[0.0, 0.0], [0.0, 0.0]]
    assert out["e"] == "<array float64 [100, 100]>" and out["f"] == {"g": True} and out["h"].startswith("<object")
