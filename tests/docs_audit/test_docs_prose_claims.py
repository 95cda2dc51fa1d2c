"""The numbers that the hand-written prose of README.md and docs/*.md quotes from a source of record (a results
JSON under benchmarks/results/, a committed study or experiment record, a config default, a code constant) are the
source's numbers.

The generated tables between `<!-- results:NAME:start -->` and `<!-- results:NAME:end -->` are rewritten from their
JSON by `python -m benchmarks.readme_tables`; the sentences around them are typed by hand and drifted when a
benchmark was re-run (the README quoted a speed-candidates run that the JSON no longer held, docs/performance.md a
dense floor of 131 core-minutes where the study-floor JSON beside it says 93). Each claim below is one phrase of one
page, rebuilt here from its source with the page's own rounding and searched for in that page's prose (results
blocks left out, whitespace and `**` ignored, so a line break or bold text does not matter). A re-run that changes
a source fails here naming the page and the phrase to update; a page reworded around a claim updates its phrase
here. Sums, means and intervals are recomputed from the per-run values of the source (a plain loop, a t interval),
not read from a summary the same code wrote.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
_BLOCK = re.compile(r"<!-- results:([\w-]+):start -->.*?<!-- results:\1:end -->", re.S)
#: Two-sided 95% Student t quantiles by degrees of freedom (the learning table's intervals use 3 seeds).
_T975 = {1: 12.706204736174705, 2: 4.302652729911275, 3: 3.182446305284263, 4: 2.7764451051977987}


def prose(page: str) -> str:
    """The page's hand-written text: results blocks removed, `**` dropped, whitespace runs as one space."""
    text = _BLOCK.sub(" ", (ROOT / page).read_text(encoding="utf-8"))
    return " ".join(text.replace("**", "").split())


def load(path: str) -> dict:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


def rng(lo: float, hi: float, fmt: str = ".2f") -> str:
    """`lo-hi` at the page's rounding, or one value when both round alike."""
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}-{b}"


# ------------------------------------------------------------------------------------------------------- claims


def cross_score() -> list[tuple[str, str]]:
    r = load("benchmarks/results/cross_score.json")["results"]
    ratio = [x["reference_s"] / x["new_s"] for x in r]
    return [("README.md", f"{r[0]['reference_s']:.2f} -> {r[0]['new_s']:.2f} s on the collapse probe's shapes "
                          f"({ratio[0]:.2f}x), {ratio[1]:.2f}x with collapsed traces, {ratio[2]:.2f}x for the "
                          "in-batch MI")]


def end_to_end() -> list[tuple[str, str]]:
    pairs = load("benchmarks/results/end_to_end.json")["pairs"]
    base = sum(p["baseline"]["wall_s"] for p in pairs)
    now = sum(p["now"]["wall_s"] for p in pairs)

    def phase(name: str) -> float:
        return sum(p["baseline"]["phases"][name] for p in pairs) / sum(p["now"]["phases"][name] for p in pairs)

    return [("README.md", f"{base / len(pairs):.0f} -> {now / len(pairs):.0f} s ({base / now:.2f}x; warm start "
                          f"{phase('warm start'):.1f}x, RL steps {phase('RL steps'):.1f}x, probes "
                          f"{phase('probes'):.1f}x)")]


def decode() -> list[tuple[str, str]]:
    r = load("benchmarks/results/decode.json")["results"]

    def ratios(rows: int, key: str) -> str:
        values = [x[key] for x in r if x["rows"] == rows]
        return rng(min(values), max(values))

    return [("README.md", f"the fused step is {ratios(1, 'compiled_over_fused')}x faster than the operator-call step "
                          f"at 1 row, {ratios(8, 'compiled_over_fused')}x at 8 rows, "
                          f"{ratios(32, 'compiled_over_fused')}x at 32 (the study's RL batches) and "
                          f"{ratios(128, 'compiled_over_fused')}x at 128"),
            ("README.md", f"against 6bd8167 it is {ratios(32, 'ratio_fused')}x faster at 32 rows and "
                          f"{ratios(128, 'ratio_fused')}x at 128")]


def speed_candidates() -> list[tuple[str, str]]:
    d = load("benchmarks/results/speed_candidates.json")

    def medians(name: str) -> list[float]:
        return [c["vs_today"] for s in d["sft"] for c in s["candidates"] if c["candidate"] == name]

    def median_range(name: str) -> str:
        v = medians(name)
        return rng(min(v), max(v))

    def ms(config: str, name: str) -> float:
        s = next(s for s in d["sft"] if s["config"] == config)
        return next(c["ms_per_step"] for c in s["candidates"] if c["candidate"] == name)

    fused, layers = medians("model.fused_training"), medians("fused layers")
    compile_s = [s["compile_first_epoch_s"] for s in d["sft"]]
    gflops = [m["gflops"] for m in d["matrix_rate"]]
    us = {a["kind"].split(" (")[0]: a["us_per_layer"] for a in d["decode_attention"]}
    c_kernel = next(v for k, v in us.items() if k.startswith("a hand-written C kernel"))
    floor = next(v for k, v in us.items() if k.startswith("reading the keys and values once"))
    return [
        ("README.md", f"`model.fused_training`: each layer as two autograd nodes with compiled element-wise pieces, "
                      f"and AdamW's fused step) {median_range('model.fused_training')}x per SFT step"),
        ("README.md", f"a fused AdamW alone {median_range('fused AdamW')}x"),
        ("README.md", f"the lean forward without its prefix split {median_range('one pass')}x"),
        ("README.md", f"attention by matmul instead of flash attention {median_range('attention by matmul')}x"),
        ("README.md", f"`torch.compile` of the layers {median_range('compiled layers')}x after "
                      f"{rng(min(compile_s), max(compile_s), '.0f')} s of compiling"),
        ("README.md", f"near the core's peak ({rng(min(gflops), max(gflops), '.0f')} GFLOP/s)"),
        ("docs/performance.md", f"ran the SFT step {fused[0]:.2f}x and {fused[1]:.2f}x faster (medians; "
                                f"{ms('collapse_sokoban', 'model.fused_training'):.1f} against "
                                f"{ms('collapse_sokoban', 'today'):.1f} and "
                                f"{ms('collapse_frozenlake', 'model.fused_training'):.1f} against "
                                f"{ms('collapse_frozenlake', 'today'):.1f} ms a step"),
        ("docs/performance.md", f"the fused layers alone {layers[0]:.2f}x and {layers[1]:.2f}x"),
        ("docs/performance.md", f"after {compile_s[0]:.0f} and {compile_s[1]:.0f} s of compiling"),
        ("docs/performance.md", f"takes {c_kernel:.0f} us, while reading those keys and values once from cache takes "
                                f"{floor:.0f}"),
        ("docs/performance.md", f"square products of 512-2048 ran at {rng(min(gflops), max(gflops), '.0f')} GFLOP/s"),
    ]


def fused_training() -> list[tuple[str, str]]:
    """The A/B of `model.fused_training`: means and 90% intervals recomputed from the per-run outcomes."""
    d = load("benchmarks/results/fused_training.json")
    by = {(r["setting"], r["seed"]): r for r in d["runs"]}
    seeds = sorted({r["seed"] for r in d["runs"]})

    def diffs(key: str) -> list[float]:
        return [by[("on", s)][key] - by[("off", s)][key] for s in seeds]

    def interval(key: str, scale: float, spec: str) -> str:
        v = [scale * x for x in diffs(key)]
        m, se = statistics.mean(v), statistics.stdev(v) / math.sqrt(len(v))
        t90 = {7: 1.894578605}[len(v) - 1]  # one-sided 95% quantile of Student t, 7 degrees of freedom
        return f"{m:{spec}}, 90% interval [{m - t90 * se:{spec}}, {m + t90 * se:{spec}}]"

    def phase(name: str) -> float:
        off, on = (sum(r["phase_s"][name] for r in d["runs"] if r["setting"] == s) for s in ("off", "on"))
        return off / on

    wall = {s: sum(r["wall_s"] for r in d["runs"] if r["setting"] == s) for s in ("off", "on")}
    s0 = [100 * x for x in diffs("success_0")]
    return [
        ("docs/performance.md", f"right after the warm start ({interval('margin_0', 1, '+.3f')})"),
        ("docs/performance.md", f"Success right after the warm start is inconclusive: "
                                f"{interval('success_0', 100, '+.1f').replace(', 90%', ' points, 90%')}"),
        ("docs/performance.md", f"the differences run from {min(s0):+.1f} to {max(s0):+.1f} points, "
                                f"SD {statistics.stdev(s0):.1f}"),
        ("docs/performance.md", f"Seven of the {len(seeds)} seeds were higher" if sum(x > 0 for x in s0) == 7
         else "the count of seeds higher with the switch on has changed"),
        ("docs/performance.md", f"the warm start (demonstrations and SFT) {phase('warm start'):.2f}x faster"),
        ("docs/performance.md", f"the whole run {wall['off'] / wall['on']:.2f}x"),
        ("README.md", f"it ran the warm start {phase('warm start'):.2f}x and the whole run "
                      f"{wall['off'] / wall['on']:.2f}x faster"),
        ("README.md", f"(+{statistics.mean(s0):.1f} points, 90% interval"),
    ]


def study_floor() -> list[tuple[str, str]]:
    d = load("benchmarks/results/study_floor.json")
    n = d["n_seeds"]
    now, lean, dense = (d["phase_core_minutes"][k] for k in ("now", "lean", "floor"))
    base_all = sum(d["phase_core_minutes"]["base"].values())
    per = {k: v / n for k, v in now.items()}
    return [
        ("README.md", f"costs about {sum(per.values()):.0f} core-minutes per seed ({base_all / n:.0f} at 43a82f3"),
        ("docs/study.md", f"about {sum(per.values()):.0f} core-minutes per seed of computation (warm starts "
                          f"{per['warm_start']:.0f}, RL steps {per['rl_steps']:.0f}, probes {per['probe']:.0f}, "
                          f"validations {per['validation']:.1f}, in-batch MI {per['mi']:.1f})"),
        ("docs/study.md", "the lean floor (only the work whose result a finding reads) is "
                          f"{sum(lean.values()) / n:.0f}"),
        ("docs/performance.md", f"({sum(lean.values()):.0f} core-minutes for the same runs, {sum(dense.values()):.0f} "
                                f"at the dense floor: {sum(lean.values()) / 2:.0f} and {sum(dense.values()) / 2:.0f} "
                                "minutes of 2 cores perfectly packed"),
    ]


def study_comparison() -> list[tuple[str, str]]:
    d = load("benchmarks/results/study_comparison.json")
    verdicts = d["verdicts"]

    def kind(v: str) -> str:
        return v.split(" (")[0]

    moves = Counter()
    for v in verdicts:
        if v["old"] != v["new"]:
            a, b = kind(v["old"]), kind(v["new"])
            moves["kept" if a == b else "contradicted" if "contradicted" in (a, b) else "moved"] += 1
    same = sum(v["old"] == v["new"] for v in verdicts)
    old, new = d["core_minutes"].values()
    ratios = [r for runs in d["wall_ratio"].values() for r in runs]
    return [
        ("docs/performance.md", f"{same} of the {len(verdicts)} verdicts are the same, and of the "
                                f"{len(verdicts) - same} that differ on 5 seeds, {moves['moved']} move between"),
        ("docs/performance.md", f"and {moves['kept']} keep their verdict"),
        ("docs/performance.md", f"fell from {old:.0f} to {new:.0f} core-minutes ({old / new:.1f}x), per run "
                                f"{min(ratios):.1f}x-{max(ratios):.1f}x"),
        ("docs/performance.md", f"10x would be {old / 10:.0f} core-minutes"),
    ]


def profile() -> list[tuple[str, str]]:
    d = load("benchmarks/results/profile.json")
    t = {(r["threads"], r["other_busy_process"]): r["sft_steps_per_s"] for r in d["threads"]}
    one, one_busy, two, two_busy = t[1, False], t[1, True], t[2, False], t[2, True]
    phases = [ph for c in d["configs"] for ph in c["phases"]]
    base_over_dense = [ph["base_s"] / ph["floor_s"] for ph in phases]
    speedup = [ph["base_s"] / ph["now_s"] for ph in phases if ph["phase"] != "probe"]
    shapes = [v for v in d["rates"].values() if isinstance(v, float)]
    old_vs_floor = f"within {rng(min(base_over_dense), max(base_over_dense), '.0f')}x of"
    return [
        ("docs/performance.md", f"about {d['gflops']:.0f} GFLOP/s ({min(shapes):.0f}-{max(shapes):.0f} at the "
                                "model's own shapes"),
        ("docs/performance.md", f"ran every phase {old_vs_floor} that dense floor"),
        ("docs/benchmarks.md", f"every phase {old_vs_floor} the dense floor"),
        ("docs/benchmarks.md", f"give {rng(min(speedup), max(speedup), '.1f')}x per phase"),
        ("docs/performance.md", f"({two_busy:.1f} against {one_busy:.1f} SFT steps/s in the profile)"),
        ("docs/benchmarks.md", f"({two_busy:.1f} against {one_busy:.1f} SFT steps/s, table below)"),
        ("docs/study.md", f"cost a one-thread warm start {100 * (1 - one_busy / one):.0f}% of its speed "
                          f"({one:.1f} -> {one_busy:.1f} SFT steps/s) and a two-thread one {two / two_busy:.1f}x "
                          f"({two:.1f} -> {two_busy:.1f})"),
    ]


def study_05e2668() -> list[tuple[str, str]]:
    h = load("docs/study-05e2668/reproduction/results.json")["header"]
    cost, n = h["cost"], len(h["seeds"])
    ph = {k: v / n for k, v in cost["phases_core_minutes"].items()}
    return [
        ("docs/performance.md", f"{cost['whole_core_minutes']:.1f} core-minutes, {cost['whole_core_minutes'] / n:.1f} "
                                f"per seed (per seed: warm starts {ph['warm_start_s']:.1f}, RL steps "
                                f"{ph['rl_steps_s']:.1f}, probes {ph['probe_s']:.1f}, validations "
                                f"{ph['validation_s']:.1f}, start-up and the rest {ph['other_s']:.2f})"),
        ("README.md", f"the 5-seed study at 05e2668 measured {cost['whole_core_minutes'] / n:.1f}"),
        ("docs/study.md", f"study run at 05e2668 measured {cost['whole_core_minutes'] / n:.1f} core-minutes per seed"),
    ]


def learning() -> list[tuple[str, str]]:
    """The gains the prose quotes: mean over seeds of (after - before) in points, with its 95% t interval."""
    runs = load("benchmarks/results/learning.json")["runs"]

    def gain(config: str, unit: str = " points") -> str:
        g = [100 * (r["after"] - r["before"]) for r in runs if r["config"] == config and r["variant"] == "top_p"]
        m = sum(g) / len(g)
        half = _T975[len(g) - 1] * statistics.stdev(g) / math.sqrt(len(g))
        return f"{m:+.1f}{unit} [{m - half:+.1f}, {m + half:+.1f}]"

    out = [("README.md", f"{gain('searchqa')} (SearchQA) and {gain('webshop')} (WebShop)"),
           ("README.md", f"({gain('sudoku')}:")]
    for config, name in (("math", "MetaMathQA"), ("searchqa", "SearchQA"), ("webshop", "WebShop"),
                         ("sudoku", "Sudoku")):
        out.append(("docs/train.md", f"{name} {gain(config)}"))
    out += [("docs/train.md", f"Code {gain('code', '')}"),
            ("docs/train.md", f"Sokoban with images {gain('sokoban_vision', '')}"),
            ("docs/train.md", "(`sokoban_vision_image`: `env.kwargs.obs_format=\"image\"`, the picture alone shows "
                              f"the level) {gain('sokoban_vision_image', '')}"),
            ("docs/train.md", f"{gain('game2048')} after")]
    return out


def experiments() -> list[tuple[str, str]]:
    """docs/collapse.md's and the README's counts of the pre-registered experiments' runs, seeds and cost."""
    mech = load("docs/collapse/mechanism/results.json")
    search = load("docs/collapse/search/results.json")
    confirm = load("docs/collapse/confirm/results.json")
    regs = load("docs/collapse/regularisers/results.json")["header"]
    pilots = [load(f"docs/collapse/{n}/results.json")["header"]
              for n in ("regularisers_pilot", "regularisers_lr_pilot")]
    mh, sh, ch = mech["header"], search["header"], confirm["header"]
    arms = {r["arm"] for r in mech["records"]}
    candidates = {r["arm"] for r in search["records"]}
    commit = {r["commit"][:7] for r in mech["records"]}
    assert len(commit) == 1
    (commit,) = commit
    seeds = mh["seeds"]
    return [
        ("docs/collapse.md", f"{mh['n_runs']} runs ({len(arms)} arms x fresh seeds {seeds[0]}-{seeds[-1]}), "
                             f"{mh['core_minutes']:.0f} core-minutes, code of {commit}"),
        ("docs/collapse.md", f"{len(candidates)} candidates x tuning seeds {sh['seeds'][0]} and {sh['seeds'][1]}, "
                             f"{sh['n_runs']} runs, {sh['core_minutes']:.0f} core-minutes"),
        ("docs/collapse.md", f"{ch['n_runs']} runs; the record has {ch['core_minutes']:.1f} core-minutes"),
        ("README.md", f"({mh['n_runs']} runs, {len(seeds)} fresh seeds)"),
        ("README.md", f"({len(candidates)} candidates, {sh['n_runs']} runs on tuning seeds)"),
        ("README.md", f"these {mh['n_runs'] + sh['n_runs'] + ch['n_runs']} runs"),
        ("README.md", f"{regs['n_runs']} runs on fresh seeds {regs['seeds'][0]}-{regs['seeds'][-1]} after a "
                      f"{sum(p['n_runs'] for p in pilots)}-run pilot on tuning seeds"),
    ]


def code_constants() -> list[tuple[str, str]]:
    """Config defaults, size limits and counts that the prose quotes from the code."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401 - registers the ragen/ ids
    from ragen_core import limits
    from ragen_core.apps.eval.plan import EVAL_SEED
    from ragen_core.apps.reproduce.spec import MAX_SEEDS
    from ragen_core.training.config import TrainConfig
    from ragen_core.training.trainer import LIVE_KEYS
    from ragen_envs import contract

    c = TrainConfig()
    assert c.algo.gamma == c.algo.lam
    ids = [i for i in gym.registry if i.startswith("ragen/")]
    live = ", ".join(f"`{k}`" for k in LIVE_KEYS[:-1]) + f" or `{LIVE_KEYS[-1]}`"

    def turns(env_id: str, **kw) -> int:
        return gym.make(env_id, **kw).unwrapped.max_turns

    def actions(env_id: str, **kw) -> int:
        return gym.make(env_id, **kw).unwrapped.max_actions

    return [
        ("README.md", f"| `ragen_envs` | {len(ids)} Gymnasium ids"),
        ("docs/train.md", f"defaults are the paper's ({c.rollout.groups} groups x {c.rollout.group_size}, lr "
                          f"{c.algo.lr:.0e}".replace("e-0", "e-") + f", gamma = lambda = {c.algo.gamma:g}, "
                          f"{c.rollout.max_turns} turns, {contract.MAX_ACTIONS_PER_TURN} actions per turn, top-p rho = "
                          f"{c.filter.spec.value:g})"),
        ("docs/train.md", f"(clip-higher {c.algo.clip_low:g}/{c.algo.clip_high:g}, dual clip {c.algo.dual_clip:g}) "
                          f"with entropy bonus {c.algo.entropy_coef:g}"),
        ("docs/train.md", f"at most {limits.MAX_BATCH:,} episodes in one batch"),
        ("docs/train.md", f"`rollout.max_turns` at most {limits.MAX_TURNS:,}"),
        ("docs/train.md", f"`warm_start.filler_words` at most {limits.MAX_FILLER_WORDS:,}"),
        ("docs/train.md", f"({limits.TINY_POSITIONS} for the tiny models"),
        ("docs/train.md", f"a change to {live} takes effect at the next step"),
        ("docs/protocol.md", f"(format penalty {contract.FORMAT_PENALTY:g}, {contract.MAX_ACTIONS_PER_TURN} actions "
                             f"per turn, `\"{contract.ACTION_FORMAT}\"`"),
        ("docs/eval.md", f"The default first seed, {EVAL_SEED}"),
        ("docs/study.md", f"`--seeds` is at most {MAX_SEEDS}"),
        ("docs/science.md", f"stops after {c.filter.max_empty_steps} consecutive empty steps"),
        ("docs/envs.md", f"{turns('ragen/Sokoban-v0')} turns for Sokoban and FrozenLake (a budget of "
                         f"{actions('ragen/Sokoban-v0')} actions), {turns('ragen/PocketCube-v0')} for PocketCube "
                         f"({actions('ragen/PocketCube-v0')}), {turns('ragen/Sudoku-v0')} for a 4x4 Sudoku "
                         f"({actions('ragen/Sudoku-v0')}) and {turns('ragen/Sudoku-v0', size=9)} for a 9x9 one; "
                         f"{turns('ragen/2048-v0'):,} turns where there is no budget"),
        ("docs/envs.md", f"at most `max_actions_per_turn` (default {contract.MAX_ACTIONS_PER_TURN})"),
    ]


SOURCES: dict[str, Callable[[], list[tuple[str, str]]]] = {
    "cross_score.json": cross_score, "decode.json": decode, "end_to_end.json": end_to_end,
    "speed_candidates.json": speed_candidates, "fused_training.json": fused_training,
    "study_floor.json": study_floor, "study_comparison.json": study_comparison, "profile.json": profile,
    "study-05e2668 record": study_05e2668, "learning.json": learning, "collapse experiment records": experiments,
    "code constants": code_constants,
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_the_prose_quotes_its_source(source):
    """Every phrase built from `source` is in its page's hand-written prose."""
    missing = [f"{page}: not found: {phrase!r}" for page, phrase in SOURCES[source]() if phrase not in prose(page)]
    assert not missing, (f"the prose no longer quotes {source} (update the page, or this phrase if it was "
                         "reworded):\n" + "\n".join(missing))


def test_the_frozenlake_sokoban_turn_limits_agree():
    """envs.md quotes one limit for Sokoban and FrozenLake: the two envs must share it."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401

    a, b = (gym.make(i).unwrapped for i in ("ragen/Sokoban-v0", "ragen/FrozenLake-v0"))
    assert (a.max_turns, a.max_actions) == (b.max_turns, b.max_actions)


def test_prose_leaves_out_results_blocks_and_joins_lines(tmp_path, monkeypatch):
    """The reader of the pages: a phrase inside a results block is not prose; a line break or bold is ignored."""
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    page = tmp_path / "p.md"
    page.write_text("before **1.5x\nfaster** here\n<!-- results:x:start -->\ninside 9.9\n<!-- results:x:end -->\n")
    text = prose("p.md")
    assert "1.5x faster here" in text and "9.9" not in text


def test_the_claims_are_not_vacuous():
    """Each source yields phrases on pages that exist (a page renamed does not silently drop its claims)."""
    for source, build in SOURCES.items():
        claims = build()
        assert claims, source
        for page, phrase in claims:
            assert (ROOT / page).is_file(), (source, page)
            assert phrase.strip(), source


def test_a_changed_source_fails(monkeypatch):
    """A re-run that moves a number makes its claim fail (here: the cross-scoring reference time)."""
    real = load

    def fake(path: str) -> dict:
        d = real(path)
        if path.endswith("cross_score.json"):
            d["results"][0]["reference_s"] += 1.0
        return d

    monkeypatch.setitem(globals(), "load", fake)
    ((page, phrase),) = cross_score()
    assert phrase not in prose(page)
