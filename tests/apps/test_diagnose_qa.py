"""`ragen diagnose` on the inputs an outside review found it mishandled: flat groups of non-dyadic rewards, group
ids 1 and "1" in one file, rewards whose variance overflows, a bootstrap over very many groups, --max-groups below
0, a --device torch cannot use, and Ctrl-C. Expected values are computed by hand or by plain loops here."""

from __future__ import annotations

import json
import math
import random
import tracemalloc
import warnings

import numpy as np
import pytest
from test_diagnose import run_cli

from ragen_core.apps import diagnose


def _write(tmp_path, rows: list[tuple[object, float]], name: str = "r.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"group": g, "reward": r}) + "\n" for g, r in rows))
    return path


# ------------------------------------------------------------------------------------------- flat groups
@pytest.mark.parametrize("values", [[-0.1] * 8, [-0.1] * 4 + [0.0] * 4, [0.1, 0.3, 1 / 3, -0.7, 0.2, 2.2, 1e-3, 7.1]])
def test_flat_groups_have_no_variance_whatever_their_reward(tmp_path, values):
    """8 groups x 3 equal rewards each: no group has variance (the trainer skips such a batch), so the pre-check
    keeps nothing and the heterogeneity is undefined, not "0.0 -> low" or "1.0 -> high"."""
    path = _write(tmp_path, [(f"g{i}", v) for i, v in enumerate(values) for _ in range(3)])
    rc, out, err = run_cli([str(path), "--json"])
    assert rc == 0 and err == ""
    rv = json.loads(out)["rv"]
    assert rv["variances"] == {f"g{i}": 0.0 for i in range(8)}
    assert rv["rv_mean"] == 0.0 and rv["rv_std"] == 0.0 and rv["zero_fraction"] == 1.0
    assert rv["rv_heterogeneity"] is None and rv["rv_heterogeneity_ci95"] == [None, None]
    assert rv["top_p"]["kept_groups"] == 0 and rv["top_p"]["empty"] is True and rv["top_p"]["kept"] == []
    rc, text, _ = run_cli([str(path)])
    assert "nan  -> undefined (no reward variance" in text
    assert "zero-variance groups            8 of the 8" in text and "keeps  0 of 8 group(s)" in text


def test_group_variance_is_the_trainers_reward_variance():
    """The pre-check's group variance (torch-free, for the base install) against the trainer's definition,
    ragen_core.math.filtering.reward_variance, and a plain loop: exactly 0 on equal rewards of any value, the same
    number elsewhere."""
    torch = pytest.importorskip("torch")
    from ragen_core.math.filtering import reward_variance

    rng = random.Random(3)
    for _ in range(2000):
        g = rng.randint(2, 9)
        if rng.random() < 0.4:
            rewards = [rng.choice([-0.1, 0.1, 0.3, 1 / 3, 0.7, -2.9, 1e-7, 123.456])] * g
        else:
            rewards = [rng.choice([0.1, -0.1, 0.0, 1.0, rng.random()]) for _ in range(g)]
        for ddof in (0, 1):
            got = diagnose._group_variance(rewards, ddof)
            ref = float(reward_variance(torch.tensor([rewards], dtype=torch.float64), ddof=ddof)[0])
            mean = sum(rewards) / g
            loop = 0.0 if len(set(rewards)) == 1 else sum((x - mean) ** 2 for x in rewards) / (g - ddof)
            if len(set(rewards)) == 1:
                assert got == 0.0 and ref == 0.0, rewards
            else:
                assert got == pytest.approx(ref, rel=1e-12) and got == pytest.approx(loop, rel=1e-9), rewards


@pytest.mark.parametrize("rewards", [[math.inf, math.inf], [-math.inf, -math.inf, -math.inf], [math.inf, 0.5]])
def test_an_infinite_reward_gives_nan_in_both_copies(rewards):
    """Equal infinities are not a flat group: NaN in the pre-check's copy and in the trainer's (it read 0 in both)."""
    torch = pytest.importorskip("torch")
    from ragen_core.math.filtering import reward_variance

    assert math.isnan(diagnose._group_variance(rewards, 1))
    assert math.isnan(float(reward_variance(torch.tensor([rewards], dtype=torch.float64))[0]))


def test_eval_precheck_of_flat_non_dyadic_groups_keeps_nothing():
    """`ragen eval --group-size` (rv_profile) on the reviewer's Bandit case: every episode -0.1."""
    from ragen_core.apps.eval.summary import rv_profile

    lines = [{"env": "ragen/Bandit-v0", "seed": s, "sample": k, "group": f"ragen/Bandit-v0@{s}", "reward": -0.1,
              "prompt": "p", "response": "r", "model": None, "failed": None} for s in range(8) for k in range(3)]
    prof = rv_profile(lines)
    assert prof["groups"] == 8 and prof["groups_with_variance"] == 0
    assert prof["rv_mean"] == 0.0 and math.isnan(prof["rv_heterogeneity"])
    assert prof["top_p_kept_groups"] == 0 and prof["filter_acts"] is False


# ------------------------------------------------------------------------------------------- group ids
def test_group_ids_1_and_the_string_1_are_two_groups_everywhere(tmp_path):
    path = _write(tmp_path, [(1, 0.0), ("1", 1.0), (1, 1.0), ("1", 0.0), ("1", 1.0)])
    rc, out, _ = run_cli([str(path), "--json"])
    rv = json.loads(out)["rv"]
    # by hand: group 1 = [0, 1], variance 0.5; group "1" = [1, 0, 1], mean 2/3, variance (4/9 + 1/9 + 1/9) / 2 = 1/3
    assert rv["n_groups"] == 2 and len(rv["variances"]) == 2
    assert rv["variances"]["1"] == pytest.approx(0.5) and rv["variances"]['"1"'] == pytest.approx(1 / 3)
    assert rv["top_p"]["kept_groups"] == 2 and sorted(rv["top_p"]["kept"]) == ['"1"', "1"]
    rc, text, _ = run_cli([str(path)])
    assert "5 in 2 groups" in text and "keeps  2 of 2 group(s)" in text
    assert "of the 2 groups with a variance" in text


def test_group_names_are_unchanged_when_no_two_collide(tmp_path):
    path = _write(tmp_path, [(1, 0.0), (1, 1.0), ("g", 0.0), ("g", 0.0)])
    rv = json.loads(run_cli([str(path), "--json"])[1])["rv"]
    assert rv["variances"] == {"1": 0.5, "g": 0.0} and rv["top_p"]["kept"] == ["1"]


# ------------------------------------------------------------------------------------------- overflow
def test_an_overflowing_variance_is_reported_as_such(tmp_path):
    path = _write(tmp_path, [(f"g{i}", s * 1e308) for i in range(4) for s in (1, -1, 1, -1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning leaks
        rc, text, err = run_cli([str(path)])
    assert rc == 0 and err == ""
    assert "4 group(s) have a reward variance that overflows float64" in text
    assert "no reward variance" not in text and "overflows float64)" in text
    assert "zero-variance groups            0 of the 4" in text


# ------------------------------------------------------------------------------------------- bootstrap
def _reference_interval(v, level=0.95, resamples=2000, seed=0):
    """The interval as it was computed before it was chunked: one (resamples x n) draw."""
    v = np.asarray(v, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size < 2:
        return [math.nan, math.nan]
    rng = np.random.default_rng(seed)
    draws = v[rng.integers(0, v.size, size=(resamples, v.size))]
    means = draws.mean(axis=1)
    ok = means > 0
    if not ok.any():
        return [math.nan, math.nan]
    ratios = draws[ok].std(axis=1) / means[ok]
    tail = (1.0 - level) / 2.0
    return [float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1.0 - tail))]


@pytest.mark.parametrize("chunk", [None, 7, 1000])
def test_the_chunked_bootstrap_is_the_single_draw_bit_for_bit(monkeypatch, chunk):
    if chunk is not None:
        monkeypatch.setattr(diagnose, "BOOTSTRAP_CHUNK", chunk)
    rng = np.random.default_rng(11)
    cases = [np.array([0.0, 0.25, 0.0]), rng.random(5), np.where(rng.random(333) < 0.5, 0.0, rng.random(333)),
             rng.random(1000) ** 3, np.array([0.0, math.nan, 0.5, 0.5, 0.1]), np.zeros(40)]
    for i, v in enumerate(cases):
        for seed, resamples in ((0, 2000), (i + 1, 333)):
            got = diagnose.heterogeneity_interval(v, seed=seed, resamples=resamples)
            want = _reference_interval(v, seed=seed, resamples=resamples)
            assert np.array_equal(got, want, equal_nan=True), (i, got, want)


def test_the_bootstrap_of_200k_groups_stays_in_bounded_memory():
    """Before, the draw was one (resamples x n) array and its float copy: 16 bytes x 100 x 200k = 320 MB here
    (and 6.4 GB at the default 2000 resamples). Now a block of rows at a time."""
    v = np.where(np.random.default_rng(0).random(200_000) < 0.5, 0.0, 0.25)
    tracemalloc.start()
    try:
        lo, hi = diagnose.heterogeneity_interval(v, resamples=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * 2**20, peak / 2**20
    # std/mean of a half-0, half-0.25 mix is 1: the interval is tight around it
    assert 0.98 < lo <= 1.0 <= hi < 1.02


# ------------------------------------------------------------------------------------------- options
def test_negative_max_groups_is_refused_and_zero_documented_as_all(tmp_path, capsys):
    path = _write(tmp_path, [(g, float(k)) for g in range(3) for k in range(2)])
    rc, _, err = run_cli([str(path), "--model", str(tmp_path / "no-model"), "--max-groups", "-1"])
    assert rc == 2 and err.count("\n") == 1 and "--max-groups must be >= 0" in err
    with pytest.raises(ValueError, match="max_groups must be >= 0"):
        diagnose.mi_report({}, str(tmp_path / "no-model"), 1000, max_groups=-1)
    with pytest.raises(SystemExit):
        diagnose.main(["--help"])
    assert "(default, or 0: all of them)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("device", ["bogus", "cuda"])
def test_a_device_torch_cannot_use_is_one_line(tmp_path, device):
    torch = pytest.importorskip("torch")
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    path = _write(tmp_path, [(g, float(k)) for g in range(3) for k in range(2)])
    rc, _, err = run_cli([str(path), "--model", str(tmp_path), "--device", device])
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"error: --device {device}".replace(
        "bogus", "'bogus'")), err


def test_ctrl_c_is_one_line_and_status_130(tmp_path, monkeypatch, capsys):
    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(diagnose, "load_rollouts", interrupted)
    assert diagnose.main([str(_write(tmp_path, [(0, 1.0)]))]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "ragen diagnose: interrupted" and "Traceback" not in err


# ------------------------------------------------------------------------------------------- top-p
def test_top_p_counts_a_threshold_met_up_to_rounding_as_the_trainer_does():
    """28% of 25 equal groups is 7 groups; 0.28 * 25 evaluates to 7.000000000000001, which 7 groups had missed."""
    assert len(diagnose.top_p_kept(np.ones(25), 0.28)) == 7
    assert len(diagnose.top_p_kept(np.ones(25), 0.56)) == 14  # 0.56 * 25 = 14.000000000000002
    assert len(diagnose.top_p_kept(np.array([9.0, 1.0, 1.0, 1.0]), 0.9)) == 3  # 9 + 1 + 1 = 11 >= 10.8 > 10


def test_the_torch_free_copies_equal_the_trainers_constants():
    pytest.importorskip("torch")
    from ragen_core.math import filtering

    assert diagnose.ZERO_TOL == filtering.ZERO_TOL and diagnose.TOP_P_SLACK == filtering._FLOOR_SLACK
