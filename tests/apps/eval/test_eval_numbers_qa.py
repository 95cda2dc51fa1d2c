"""The numbers `ragen eval` reports, recomputed apart from its code: the success interval when a seed has several
samples (exact references and a coverage simulation), a resumed evaluation against an uninterrupted one (sampled,
interrupted inside a batch), and the sampling line of an evaluation whose envs sample differently."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ragen_core.apps.eval import main
from ragen_core.apps.eval.summary import env_summary, wilson_interval

Z95 = 1.959963984540054


def _wilson(p: float, n: float) -> tuple[float, float]:
    """Wilson's interval written out again (the reference, not the module's code)."""
    d = 1 + Z95**2 / n
    c = (p + Z95**2 / (2 * n)) / d
    h = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def _lines(outcomes: dict[int, list[bool]]) -> list[dict]:
    """Minimal finished episodes.jsonl lines: seed -> the successes of its samples."""
    return [{"env": "ragen/X-v0", "seed": s, "sample": j, "failed": None, "success": ok, "reward": float(ok),
             "num_turns": 1, "latency_s": 0.0, "tokens": {"prompt": 1, "completion": 1},
             "turns": [{"action_valid": True, "format_valid": True}]}
            for s, outs in outcomes.items() for j, ok in enumerate(outs)]


# ---------------------------------------------------------------------------------------------- the interval
def test_one_sample_per_seed_keeps_wilson_on_the_episodes():
    rng = np.random.default_rng(3)
    for n in (1, 5, 40):
        outs = {s: [bool(rng.random() < 0.3)] for s in range(n)}
        s = env_summary(_lines(outs))
        k = sum(o[0] for o in outs.values())
        assert s["success_ci95"] == list(wilson_interval(k, n)) and s["success_ci95_n"] == n


@pytest.mark.parametrize("group", [2, 4, 8])
def test_greedy_copies_count_each_seed_once(group):
    """Greedy decoding plays a seed's G samples identically: the evidence is N seeds, not N x G episodes."""
    rng = np.random.default_rng(group)
    outs = {s: [bool(rng.random() < 0.2)] * group for s in range(32)}
    k_seeds = sum(o[0] for o in outs.values())
    s = env_summary(_lines(outs))
    assert s["episodes"] == 32 * group and s["success"] == pytest.approx(k_seeds / 32)
    assert s["success_ci95"] == pytest.approx(_wilson(k_seeds / 32, 32))
    assert s["success_ci95_n"] == pytest.approx(32)
    # Nothing succeeded: as many trials as seeds (0 of 32: the upper bound z^2 / (32 + z^2)).
    none = env_summary(_lines({s: [False] * group for s in range(32)}))
    assert none["success_ci95"] == pytest.approx([0.0, Z95**2 / (32 + Z95**2)])


def test_effective_n_is_the_design_effect_of_a_plain_loop():
    from ragen_core.apps.eval.summary import seed_clustered_interval

    groups = [(0, 4), (1, 4), (4, 4), (2, 4), (3, 4), (0, 2), (2, 3)]
    n = sum(m for _, m in groups)
    p = sum(y for y, _ in groups) / n
    between = 0.0
    for y, m in groups:
        between += (y - p * m) ** 2
    var_p = len(groups) / (len(groups) - 1) * between / n**2
    n_eff = min(n, max(len(groups), p * (1 - p) / var_p))
    lo, hi, got = seed_clustered_interval(groups)
    assert got == pytest.approx(n_eff) and (lo, hi) == pytest.approx(_wilson(p, n_eff))


def _coverage(draw, group: int, seeds: int, truth: float, reps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hit = 0
    for _ in range(reps):
        ps = draw(rng, seeds)
        outs = {s: list(rng.random(group) < ps[s]) for s in range(seeds)}
        lo, hi = env_summary(_lines(outs))["success_ci95"]
        hit += lo <= truth <= hi
    return hit / reps


@pytest.mark.parametrize("name, draw, truth", [
    ("greedy copies", lambda rng, n: (rng.random(n) < 0.15).astype(float), 0.15),
    ("levels of unequal difficulty", lambda rng, n: rng.beta(0.5, 1.5, n), 0.25),
    ("independent samples", lambda rng, n: np.full(n, 0.3), 0.3),
])
def test_the_interval_covers_the_success_rate_95_percent_of_the_time(name, draw, truth):
    """The success rate is the model's on a random level: seeds are drawn, then G samples of each. Wilson on the
    N x G episodes covered 59-73% of the time when a seed's samples are alike; the interval must cover about 95%."""
    cover = _coverage(draw, 4, 32, truth, reps=800, seed=11)
    assert cover >= 0.92, f"{name}: coverage {cover:.3f}"


# ---------------------------------------------------------------------------------------------- resume
def test_batches_are_cut_from_the_evaluation_range_whatever_is_missing():
    from ragen_core.apps.eval.local import batches

    seeds = range(100, 110)
    assert batches(seeds, set(seeds), 4) == [range(100, 104), range(104, 108), range(108, 110)]
    assert batches(seeds, {102, 109}, 4) == [range(100, 104), range(108, 110)]
    assert batches(seeds, set(), 4) == []


def _episodes(folder: Path) -> dict[tuple, dict]:
    out = {}
    for text in (folder / "episodes.jsonl").read_text().splitlines():
        line = json.loads(text)
        out[(line["env"], line["seed"], line["sample"])] = {k: line[k] for k in ("response", "reward", "success")}
    return out


def _numbers(folder: Path) -> dict:
    envs = json.loads((folder / "summary.json").read_text())["envs"]
    return {e: {k: v for k, v in s.items() if k != "latency_s_per_episode"} for e, s in envs.items()}


def test_a_sampled_evaluation_interrupted_inside_a_batch_resumes_to_the_same_episodes(tmp_path, capsys):
    args = ["tiny", "--envs", "Bandit-v0", "--episodes", "6", "--group-size", "2", "--workers", "8",
            "--max-tokens", "12", "--mi-groups", "0", "--no-progress"]  # batches of 4 seeds: 6000-6003, 6004-6005
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    whole = tmp_path / "whole"
    part = tmp_path / "part"
    part.mkdir()
    (part / "eval.json").write_text((whole / "eval.json").read_text())
    kept = (whole / "episodes.jsonl").read_text().splitlines(keepends=True)[:3]  # cut inside the first batch
    (part / "episodes.jsonl").write_text("".join(kept))
    assert main(["--resume", str(part), "--no-progress"]) == 0
    capsys.readouterr()
    a, b = _episodes(whole), _episodes(part)
    assert len(a) == 12 and a == b
    assert _numbers(whole) == _numbers(part)


# ---------------------------------------------------------------------------------------------- sampling line
def test_envs_that_sample_differently_are_each_named_in_the_sampling_line(tmp_path, capsys):
    cfg = tmp_path / "hot.toml"
    cfg.write_text((Path(__file__).resolve().parents[3] / "configs" / "bandit_tiny.toml").read_text()
                   .replace("temperature = 1.0", "temperature = 0.7"))
    assert main(["tiny", "--config", str(cfg), "--envs", "Bandit-v0,Countdown-v0", "--episodes", "1",
                 "--max-tokens", "4", "--mi-groups", "0", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    capsys.readouterr()
    sampling = json.loads((tmp_path / "o" / "summary.json").read_text())["sampling"]
    assert "ragen/Bandit-v0 temperature 0.7" in sampling and "ragen/Countdown-v0 temperature 1" in sampling


# ---------------------------------------------------------------------------------------------- line order
def test_the_summary_does_not_depend_on_the_order_episodes_finished_in(tmp_path):
    """A server's workers and a resumed evaluation append episodes out of seed order; the summary must be the same
    numbers, bit for bit (float sums, the pre-check's bootstrap), as for the file in key order."""
    from ragen_core.apps.eval.plan import Key, Sampling, default_config, make_plan
    from ragen_core.apps.eval.records import TurnRecord, episode_record
    from ragen_core.apps.eval.run import write_summary
    from ragen_core.apps.eval.spec import EvalSpec

    env = "ragen/Bandit-v0"
    plan = make_plan(env, default_config(env), "env defaults", Sampling()).to_json()
    rng = np.random.default_rng(5)
    lines = []
    for seed in range(40):
        for j in range(3):
            r = float(rng.choice([0.1, 0.7, 0.2, 1.3, -0.1]))
            turn = TurnRecord(response="x", reward=r, info={}, finish_reason="stop", format_valid=True,
                              action_valid=True, prompt_tokens=3, completion_tokens=2)
            lines.append(episode_record(Key(env, seed, j), turns=[turn], messages=[], success=r > 0.5, prompt="p",
                                        model=None, latency_s=0.1 * (seed % 7)))
    summaries = []
    for name, order in (("sorted", lines), ("finished", [lines[i] for i in rng.permutation(len(lines))])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in order))
        spec = EvalSpec(backend="server", model=None, base_url="http://127.0.0.1:1/v1", model_name="m",
                        api_key_env=None, envs=[env], episodes=40, seed=0, group_size=3, workers=1, timeout=1.0,
                        max_retries=0, device="cpu", mi_groups=0, plans={env: plan})
        write_summary(spec, folder, None, played=0, wall_s=0.0)
        summaries.append(json.loads((folder / "summary.json").read_text())["envs"])
    assert summaries[0] == summaries[1]
