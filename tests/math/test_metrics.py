"""Token entropy, RV heterogeneity and regime classification."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.metrics import (
    REGIMES,
    classify_regime,
    masked_token_entropy,
    regime_from_proxies,
    rv_heterogeneity,
    token_entropy,
)
from ragen_core.math.mi import mi_proxies


def ref_entropy(row: list[float]) -> float:
    finite = [x for x in row if x != -math.inf]
    m = max(finite)
    z = sum(math.exp(x - m) for x in finite)
    return -sum((math.exp(x - m) / z) * (x - m - math.log(z)) for x in finite)


@given(st.lists(st.lists(st.floats(-30, 30), min_size=1, max_size=8), min_size=1, max_size=4)
       .filter(lambda rows: len({len(r) for r in rows}) == 1))
@settings(max_examples=80, deadline=None)
def test_token_entropy_matches_loop(rows):
    h = token_entropy(torch.tensor(rows, dtype=torch.float64))
    assert h.tolist() == pytest.approx([ref_entropy(r) for r in rows], abs=1e-9)


def test_token_entropy_special_cases():
    v = 7
    assert token_entropy(torch.zeros(v)).item() == pytest.approx(math.log(v), abs=1e-6)
    assert token_entropy(torch.tensor([100.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)
    banned = torch.tensor([0.0, 0.0, -math.inf, -math.inf])
    assert token_entropy(banned).item() == pytest.approx(math.log(2), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_token_entropy_low_precision_is_finite_and_accurate(dtype):
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 50, generator=gen) * 2e3).to(dtype)
    h = token_entropy(logits)
    assert h.dtype == torch.float32 and bool(torch.isfinite(h).all())
    rows = logits.double().reshape(-1, 50).tolist()
    assert h.reshape(-1).tolist() == pytest.approx([ref_entropy(r) for r in rows], abs=1e-4)


def test_masked_token_entropy():
    logits = torch.stack([torch.zeros(2, 4), torch.tensor([[50.0, 0, 0, 0], [0, 0, 0, 0]])])
    mask = torch.tensor([[1, 0], [1, 1]])
    expected = (math.log(4) + 0.0 + math.log(4)) / 3
    assert masked_token_entropy(logits, mask).item() == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="logits"):
        masked_token_entropy(torch.zeros(2, 4), mask)


def ref_variance(row):
    m = sum(row) / len(row)
    return sum((x - m) ** 2 for x in row) / (len(row) - 1)


def test_rv_heterogeneity_matches_statistics_module():
    rewards = [[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]]
    v = [ref_variance(r) for r in rewards]
    expected = statistics.pstdev(v) / statistics.fmean(v)
    assert rv_heterogeneity(torch.tensor(rewards, dtype=torch.float64)) == pytest.approx(expected)
    assert rv_heterogeneity(torch.tensor(v, dtype=torch.float64)) == pytest.approx(expected)


def test_rv_heterogeneity_nan_safe():
    assert math.isnan(rv_heterogeneity(torch.zeros(4, 3)))
    v = torch.tensor([math.nan, 1.0, 3.0], dtype=torch.float64)
    assert rv_heterogeneity(v) == pytest.approx(statistics.pstdev([1, 3]) / 2)
    with pytest.raises(ValueError, match="rewards_or_variances"):
        rv_heterogeneity(torch.zeros(2, 2, 2))


def test_uniform_vs_bimodal_heterogeneity():
    uniform = torch.tensor([0.24, 0.25, 0.26, 0.25], dtype=torch.float64)
    bimodal = torch.tensor([0.0, 0.0, 0.0, 0.25, 0.0, 0.25], dtype=torch.float64)
    assert rv_heterogeneity(uniform) < 0.1 < 1.0 < rv_heterogeneity(bimodal)


@pytest.mark.parametrize(
    "h, i, regime",
    [
        (1.0, 0.5, "diverse_reasoning"),
        (1.0, 0.01, "template_collapse"),
        (0.01, 0.5, "compressed_reasoning"),
        (0.01, 0.01, "low_entropy_collapse"),
        (0.1, 0.1, "diverse_reasoning"),  # thresholds are inclusive ("high" means >=)
        (0.5, -0.2, "template_collapse"),  # a negative MI estimate is "low"
    ],
)
def test_classify_regime_quadrants(h, i, regime):
    assert classify_regime(h, i) == regime
    assert regime in REGIMES


def test_classify_regime_custom_thresholds_and_errors():
    assert classify_regime(0.5, 0.5, entropy_threshold=1.0, mi_threshold=1.0) == "low_entropy_collapse"
    with pytest.raises(ValueError, match="cond_entropy"):
        classify_regime(math.nan, 0.5)
    with pytest.raises(ValueError, match="mi"):
        classify_regime(0.5, math.inf)
    with pytest.raises(ValueError, match="entropy_threshold"):
        classify_regime(0.5, 0.5, entropy_threshold=-1)


def test_regime_from_proxies():
    p, g = 4, 2
    # template collapse: every trace scored alike under every prompt, moderate per-token entropy
    collapsed = torch.full((p, g, p), -20.0, dtype=torch.float64)
    lengths = torch.full((p, g), 10)
    assert regime_from_proxies(mi_proxies(collapsed, lengths)) == "template_collapse"
    # diverse: traces identify their prompts, entropy still high
    diverse = collapsed.clone()
    for i in range(p):
        diverse[i, :, i] = -10.0
    assert regime_from_proxies(mi_proxies(diverse, lengths)) == "diverse_reasoning"
    # compressed: near-deterministic traces (tiny conditional entropy) that identify their prompts
    compressed = torch.full((p, g, p), -40.0, dtype=torch.float64)
    for i in range(p):
        compressed[i, :, i] = -0.01
    assert regime_from_proxies(mi_proxies(compressed, lengths)) == "compressed_reasoning"
    with pytest.raises(ValueError, match="mi_seq_est"):
        regime_from_proxies({"cond_entropy_est": 1.0})


def test_noise_note_by_hand():
    from ragen_core.math.metrics import noise_note

    log_v = math.log(1028)  # the tiny model's vocabulary: 6.935 nats
    assert noise_note(6.9, 1028) is not None and "99%" in noise_note(6.9, 1028)  # an untrained model
    assert noise_note(0.5 * log_v, 1028) is not None  # the share itself counts
    assert noise_note(0.5 * log_v - 1e-6, 1028) is None
    assert noise_note(1.2, 151_646) is None  # a trained LLM's reasoning (log V = 11.9)
    assert noise_note(3.0, 1028, share=0.4) is not None  # 43%
    with pytest.raises(ValueError, match="vocab_size"):
        noise_note(1.0, 1)
    with pytest.raises(ValueError, match="finite"):
        noise_note(float("nan"), 1028)
