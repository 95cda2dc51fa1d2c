"""The profile benchmark's arithmetic floor and table, on hand-counted numbers (the runs themselves are the
benchmark's job, not the suite's)."""

from __future__ import annotations

import pytest

from benchmarks import bench_profile as bp

TINY = {"hidden": 128, "layers": 2, "intermediate": 512, "heads": 4, "kv_heads": 2, "vocab": 1028}


def test_dense_macs_per_token_by_hand():
    # per layer: q 128x128 + k, v 128x64 each + o 128x128 + MLP 3 x 128x512 + attention 2 x 128 x ctx
    per_layer = 128 * 128 + 2 * 128 * 64 + 128 * 128 + 3 * 128 * 512 + 2 * 128 * 10
    assert bp.macs_per_token(TINY, ctx=10) == 2 * per_layer + 1028 * 128


def test_phase_floors_count_forward_and_backward():
    counts = {"prompt_tokens": 300.0, "generated_tokens": 100.0, "turns": 4.0}
    per = 2 * bp.macs_per_token(TINY, ctx=0.5 * 400 / 4)
    gen = {"phase": "validation", "counts": counts, "extra": {}}
    assert bp.phase_gflop(gen, TINY) == pytest.approx(per * 400 / 1e9)
    warm = {"phase": "warm_start", "counts": counts, "extra": {"epochs": 2}}
    assert bp.phase_gflop(warm, TINY) == pytest.approx(3 * per * 400 * 2 / 1e9)
    rl = {"phase": "rl_steps", "counts": counts, "extra": {"filter/tokens_kept_fraction": [0.5, 0.5]}}
    assert bp.phase_gflop(rl, TINY) == pytest.approx((per * 400 + 3 * per * 400 * 0.5) / 1e9)
    # A step the filter left empty (no kept fraction logged) trained nothing: generation only.
    skipped = {"phase": "rl_steps", "counts": counts, "extra": {"filter/tokens_kept_fraction": [None, 1.0]}}
    assert bp.phase_gflop(skipped, TINY) == pytest.approx((per * 400 + 3 * per * 400 * 0.5) / 1e9)
    mi = {"phase": "mi", "counts": {"cross_positions": 1000.0, "cross_prompt_tokens": 50.0}, "extra": {}}
    assert bp.phase_gflop(mi, TINY) == pytest.approx(2 * bp.macs_per_token(TINY, ctx=80) * 1050 / 1e9)
    probe = {"phase": "probe", "counts": {**counts, "cross_positions": 1000.0, "cross_prompt_tokens": 50.0},
             "extra": {}}
    assert bp.phase_gflop(probe, TINY) == pytest.approx((per * 400 + per * 1050) / 1e9)


def test_the_table_shows_speed_up_and_floor():
    def phase(name, wall, parts):
        return {"phase": name, "wall_s": wall, "parts": parts, "counts": {"prompt_tokens": 1e4, "turns": 10.0},
                "extra": {"steps": 3} if name == "rl_steps" else {"collect_s": 0.5, "sft_s": 4.0, "episodes": 64}}

    base = {"model": TINY, "phases": [phase("warm_start", 8.0, {"other": 8.0}), phase("rl_steps", 6.0,
                                                                                        {"generate": 6.0})]}
    now = {"model": TINY, "phases": [phase("warm_start", 4.0, {"other": 4.0}), phase("rl_steps", 3.0,
                                                                                       {"generate": 3.0})]}
    s = bp.summarise("x", base, now, gflops=50.0)
    rl = next(p for p in s["phases"] if p["phase"] == "rl_steps")
    assert rl["speedup"] == pytest.approx(2.0) and rl["now_s"] == pytest.approx(1.0)
    md = bp.markdown({"baseline": "abc", "warm_episodes": 64, "steps": 3, "gflops": 50.0, "configs": [s],
                      "threads": [{"threads": 1, "other_busy_process": False, "sft_steps_per_s": 9.0}]})
    assert "| x | RL step | 2.00 | 1.00 | 2.0x |" in md and "| 1 | no | 9.0 |" in md
