"""The run summary's collapse check needs a probe large enough to tell its drop from sampling noise.

Before: summary.md read the collapse detector's yes / no whatever the probe's size, and a probe of 4 prompts x 4
samples (16 traces) that did not collapse read "yes" in about a quarter of simulated runs (noise in the retrieval
margin, measured from its highest swing). Now the check says "unresolved" (and how large a probe would do) when the
fall the detector needs is not more than RESOLUTION_Z standard errors of a difference of two margins; the shipped
collapse configs' probe (32 x 4) stays resolved. The references are independent: a Monte Carlo simulation of a
cross-scored probe (argmax retrieval by numpy) and a brute-force search for the smallest probe.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ragen_core.math.collapse import detect_collapse, probe_resolution
from ragen_core.training.config import load_config
from ragen_core.training.metrics import Probe
from ragen_core.training.report import write_summary

ROOT = Path(__file__).resolve().parents[2]
#: probe every 5 steps over 40 steps, as configs/collapse_*.toml
STEPS = list(range(0, 45, 5))
FLAT = [1.0] * len(STEPS)


def _simulated_margins(rng: np.random.Generator, p: int, g: int, signal: float) -> list[float]:
    """Retrieval margins of a probe that did not collapse: fixed prompts (a fixed prompt-pair affinity ``u``, the
    own prompt raised by `signal`), fresh traces each measurement with unit Gaussian score noise; a trace is
    retrieved when its own prompt scores highest."""
    u = rng.normal(0.0, 0.5, size=(p, p)) + signal * np.eye(p)
    scores = u[None, :, None, :] + rng.normal(size=(len(STEPS), p, g, p))
    acc = (scores.argmax(axis=-1) == np.arange(p)[None, :, None]).mean(axis=(1, 2))
    return [float(m) for m in (acc - 1 / p) / (1 - 1 / p)]


def _rates(p: int, g: int, signal: float, runs: int = 400, seed: int = 0) -> tuple[float, float, float, float]:
    """(mean margin, share of runs the unchanged detector calls collapsed, share the rule resolves, share of
    "yes" that the rule resolves: noise the summary would still call collapse)."""
    rng = np.random.default_rng(seed)
    yes = resolved = yes_resolved = 0
    means = []
    for _ in range(runs):
        m = _simulated_margins(rng, p, g, signal)
        means.append(np.mean(m))
        v = detect_collapse(STEPS, m, FLAT, FLAT)
        r = v.margin_reference > 0.05 and probe_resolution(v.margin_reference, p, g).resolved
        yes += v.collapsed
        resolved += r
        yes_resolved += v.collapsed and r
    return float(np.mean(means)), yes / runs, resolved / runs, yes_resolved / runs


def test_the_standard_error_of_a_margin_difference_matches_a_simulation():
    """SE_diff of the docstring against the spread of simulated margin differences (binomial retrievals)."""
    rng = np.random.default_rng(1)
    for p, g, m_ref in ((4, 4, 0.6), (8, 2, 0.5), (32, 4, 0.4)):
        res = probe_resolution(m_ref, p, g)
        c = 1 / p
        a = c + (1 - c) * 0.75 * m_ref  # the pooled margin of a 50% fall
        acc = rng.binomial(p * g, a, size=(2, 200_000)) / (p * g)
        diff = (acc[0] - acc[1]) / (1 - c)
        assert res.se_difference == pytest.approx(float(diff.std()), rel=0.02), (p, g)


def test_the_probe_size_needed_is_the_smallest_that_resolves():
    """traces_needed against a brute-force search over N with the resolution rule evaluated by hand."""
    for p, g, m_ref in ((4, 4, 0.6), (8, 2, 0.3), (32, 4, 0.2), (16, 1, 0.9)):
        res = probe_resolution(m_ref, p, g)
        c = 1 / p
        a = c + (1 - c) * 0.75 * m_ref
        n = 1
        while not 0.5 * m_ref > res.z * math.sqrt(2 * a * (1 - a) / n) / (1 - c):
            n += 1
        assert res.traces_needed == n and res.group_size_needed == -(-n // p), (p, g, n)
        assert res.resolved == (p * g >= n)
    assert probe_resolution(0.0, 32, 4).traces_needed is None and not probe_resolution(0.0, 32, 4).resolved


def test_noise_of_a_small_probe_reads_yes_and_the_rule_marks_it_unresolved():
    mean, yes, resolved, yes_resolved = _rates(4, 4, 1.5)
    assert 0.4 < mean < 0.7  # a probe well above chance that did not collapse
    assert yes > 0.15  # the unchanged detector calls a collapse on noise
    assert resolved < 0.3 and yes_resolved < 0.2 * yes  # most of those "yes" are now "unresolved"
    mean, yes, _, yes_resolved = _rates(4, 4, 1.0)
    assert yes > 0.4 and yes_resolved < 0.02


@pytest.mark.parametrize("p, g, signal", [(8, 2, 2.0), (8, 4, 1.5), (32, 2, 1.5), (32, 4, 1.2)])
def test_probes_the_rule_resolves_rarely_read_noise_as_collapse(p, g, signal):
    _, _, _, yes_resolved = _rates(p, g, signal)
    assert yes_resolved <= 0.03, (p, g, yes_resolved)


@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("collapse_*.toml")), ids=lambda p: p.stem)
def test_the_shipped_collapse_configs_probe_is_resolved(config):
    mi = load_config(config).mi
    p, g = mi.probe_prompts, mi.probe_group_size
    # the lowest reference margin docs/collapse.md reports for these configs is 0.36
    assert probe_resolution(0.36, p, g).resolved
    mean, yes, resolved, _ = _rates(p, g, 2.0, runs=200)
    assert 0.3 < mean < 0.5 and yes == 0.0 and resolved == 1.0


def _history(margins: list[float], p: int | None, g: int | None) -> list[dict]:
    rows = []
    for s, m in zip(STEPS, margins):
        rec = {"step": s, Probe.RETRIEVAL_MARGIN: m, Probe.TOKEN_ENTROPY: 0.2, Probe.COND_ENTROPY_EST: 0.2}
        if p is not None:
            rec.update({Probe.N_PROMPTS: float(p), Probe.GROUP_SIZE: float(g), Probe.RETRIEVAL_CHANCE: 1 / p})
        rows.append(rec)
    return rows


def _collapse_line(tmp_path: Path, history: list[dict], *overrides: str) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = load_config(ROOT / "configs" / "collapse_sokoban.toml", list(overrides))
    text = write_summary(tmp_path, cfg, history).read_text()
    return next(line for line in text.splitlines() if line.startswith("**Collapse check**"))


def test_the_summary_of_a_small_probe_says_unresolved_not_yes(tmp_path):
    fall = [8 / 12, 6 / 12, 3 / 12, 3 / 12, 3 / 12]  # margins a 4 x 4 probe can read: (hits - 4) / 12
    line = _collapse_line(tmp_path / "small", _history(fall, 4, 4))
    assert "unresolved: the probe is too small to tell" in line and "16 traces (4 prompts x 4 samples)" in line
    res = probe_resolution(8 / 12, 4, 4)
    assert f"a probe of about {res.traces_needed} traces" in line
    assert f"mi.probe_group_size = {res.group_size_needed} at 4 prompts" in line
    assert not line.split("): ", 1)[1].startswith("yes")  # before: "yes: template collapse ..."
    # the probe's size not recorded (an older run): read from the run's config
    line = _collapse_line(tmp_path / "cfg", _history(fall, None, None), "mi.probe_prompts=4")
    assert "unresolved" in line and "4 prompts x 4 samples" in line
    # the shipped probe's size reads the same curve as a collapse, with its resolution
    line = _collapse_line(tmp_path / "big", _history(fall, 32, 4))
    assert line.split("): ", 1)[1].startswith("yes: template collapse") and "Probe resolution" in line


def test_the_summary_gives_validation_success_its_sample_size(tmp_path):
    history = [{"step": 0, "val/success": 0.25}, {"step": 40, "val/success": 0.5}]
    cfg = load_config(ROOT / "configs" / "collapse_sokoban.toml", ["eval.episodes=8"])
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = write_summary(tmp_path, cfg, history).read_text()
    z = 1.959964

    def wilson(k: int, n: int) -> str:
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return f"[{centre - half:.3f}, {centre + half:.3f}]"

    assert f"`eval.episodes` = 8 episodes: start 0.250 {wilson(2, 8)}, end 0.500 {wilson(4, 8)}" in text
