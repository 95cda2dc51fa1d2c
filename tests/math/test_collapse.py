"""The template-collapse check (ragen_core.math.collapse) on synthetic curves whose answer is known by construction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.collapse import collapse_from_history, detect_collapse

STEPS = [0, 5, 10, 15, 20, 25]
FLAT = [1.0, 1.02, 0.98, 1.05, 0.97, 1.01]


def test_clean_template_collapse():
    v = detect_collapse(STEPS, [0.6, 0.55, 0.4, 0.25, 0.2, 0.15], FLAT, FLAT)
    assert v.collapsed and v.drop_step == 15
    assert v.entropy_alarm_step is None and v.cond_entropy_alarm_step is None
    assert v.margin_start == 0.6 and v.margin_min == 0.15 and v.margin_end == 0.15
    assert v.entropy_ratio == pytest.approx(1.05)


def test_entropy_blow_up_before_the_drop_is_not_template_collapse():
    ent = [1.0, 1.1, 1.6, 2.5, 3.0, 3.5]  # leaves the band at step 10, the margin halves at step 15
    v = detect_collapse(STEPS, [0.6, 0.55, 0.4, 0.25, 0.2, 0.15], ent, FLAT)
    assert not v.collapsed and v.drop_step == 15 and v.entropy_alarm_step == 10
    assert "token entropy left" in v.reason


def test_conditional_entropy_collapse_at_the_drop_step_also_vetoes():
    cond = [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]  # compressed reasoning: H(Z|X) halves exactly when the margin does
    v = detect_collapse(STEPS, [0.6, 0.55, 0.4, 0.25, 0.2, 0.15], FLAT, cond)
    assert not v.collapsed and v.cond_entropy_alarm_step == 15


def test_an_entropy_alarm_after_the_drop_does_not_veto():
    ent = [1.0, 1.0, 1.0, 1.0, 1.5, 2.0]
    v = detect_collapse(STEPS, [0.6, 0.2, 0.1, 0.1, 0.1, 0.1], ent, FLAT)
    assert v.collapsed and v.drop_step == 5 and v.entropy_alarm_step == 20


def test_a_one_measurement_dip_is_not_a_drop():
    v = detect_collapse(STEPS, [0.6, 0.2, 0.5, 0.55, 0.6, 0.58], FLAT, FLAT)
    assert not v.collapsed and v.drop_step is None
    # the reason names the dip and its recovery, not a margin that "stayed above" the level it crossed
    assert v.reason == ("no MI drop: the margin fell to 0.200 at step 5 (at most 50% of its peak, 0.600 at step 0) "
                        "but was back to 0.500 at the next measurement")
    v = detect_collapse(STEPS, [0.6, 0.5, 0.4, 0.35, 0.45, 0.5], FLAT, FLAT)
    assert v.reason == "no MI drop: the margin stayed above 50% of its peak (0.600 at step 0 -> min after it 0.350)"


def test_a_drop_at_the_last_measurement_counts():
    v = detect_collapse(STEPS, [0.6, 0.6, 0.6, 0.6, 0.6, 0.3], FLAT, FLAT)
    assert v.collapsed and v.drop_step == 25


def test_exactly_half_counts_and_just_above_does_not():
    assert detect_collapse([0, 1], [0.5, 0.25], [1, 1], [1, 1]).collapsed
    assert not detect_collapse([0, 1], [0.5, 0.2501], [1, 1], [1, 1]).collapsed


def test_a_start_at_chance_has_nothing_to_lose():
    v = detect_collapse(STEPS, [0.02, 0.0, 0.01, 0.0, 0.0, 0.0], FLAT, FLAT)
    assert not v.collapsed and "no input dependence" in v.reason


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12), st.lists(st.floats(0.5, 1.5), min_size=12,
                                                                        max_size=12))
@settings(max_examples=200, deadline=None)
def test_verdict_matches_a_plain_restatement(margin, ent):
    n = len(margin)
    steps = list(range(0, 5 * n, 5))
    e = ent[:n]
    e[0] = 1.0
    v = detect_collapse(steps, margin, e, [1.0] * n, reference="start")
    # restatement: the first index whose margin and the next (if any) are <= half the start
    m0 = margin[0]
    drop = next((i for i in range(1, n) if margin[i] <= m0 / 2 and (i == n - 1 or margin[i + 1] <= m0 / 2)), None)
    alarm = next((i for i in range(n) if not 0.75 <= e[i] <= 1.25), None)
    expected = m0 > 0.05 and drop is not None and (alarm is None or alarm > drop)
    assert v.collapsed == expected


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12), st.lists(st.floats(0.5, 1.5), min_size=12,
                                                                        max_size=12))
@settings(max_examples=300, deadline=None)
def test_peak_verdict_matches_a_plain_restatement(margin, ent):
    n = len(margin)
    steps = list(range(0, 5 * n, 5))
    e = ent[:n]
    v = detect_collapse(steps, margin, e, [1.0] * n)
    drop = ref = None
    for i in range(1, n):  # the first i at or below half the best margin before it, confirmed by the next
        best = max(margin[:i])
        r = margin.index(best)
        if best > 0.05 and margin[i] <= best / 2 and (i == n - 1 or margin[i + 1] <= best / 2):
            drop, ref = i, r
            break
    if drop is None:
        assert not v.collapsed
        return
    alarm = next((j for j in range(ref, n) if not e[ref] * 0.75 <= e[j] <= e[ref] * 1.25), None)
    assert v.collapsed == (alarm is None or alarm > drop)
    assert v.drop_step == steps[drop] and v.reference_step == steps[ref]


def test_rise_then_fall_is_measured_from_the_peak():
    # RL first raises the MI (and, early on, the entropy), then loses the MI with the entropy flat: a collapse
    # from the peak at step 20, not from step 0 (where the entropy had not risen yet)
    steps = [0, 10, 20, 30, 40, 50, 60, 70]
    margin = [0.37, 0.60, 0.73, 0.66, 0.59, 0.54, 0.36, 0.31]
    ent = [0.085, 0.146, 0.166, 0.174, 0.177, 0.187, 0.189, 0.192]
    v = detect_collapse(steps, margin, ent, ent)
    assert v.collapsed and v.reference_step == 20 and v.drop_step == 60 and v.margin_reference == 0.73
    assert v.entropy_ratio == pytest.approx(0.189 / 0.166)
    start = detect_collapse(steps, margin, ent, ent, reference="start")
    assert not start.collapsed and start.drop_step is None  # never below half of 0.37


def test_an_entropy_alarm_before_the_peak_does_not_count():
    steps = [0, 10, 20, 30, 40]
    v = detect_collapse(steps, [0.3, 0.8, 0.5, 0.3, 0.2], [0.1, 0.3, 0.31, 0.32, 0.3], [0.1, 0.3, 0.3, 0.3, 0.3])
    assert v.collapsed and v.reference_step == 10 and v.entropy_alarm_step is None


@pytest.mark.parametrize("args, fragment", [
    (([0], [0.5], [1], [1]), ">= 2 aligned"),
    (([0, 1], [0.5, 0.1], [1], [1, 1]), ">= 2 aligned"),
    (([1, 0], [0.5, 0.1], [1, 1], [1, 1]), "increase"),
    (([0, 1], [0.5, float("nan")], [1, 1], [1, 1]), "finite"),
    (([0, 1], [0.5, 0.1], [0, 1], [1, 1]), "> 0"),
])
def test_bad_curves_raise(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        detect_collapse(*args)


def test_from_history_reads_the_probe_rows_only():
    hist = [{"step": 0, "val/success": 0.1}]
    for s, m in zip(STEPS, [0.6, 0.55, 0.4, 0.25, 0.2, 0.15]):
        hist.append({"step": s, "probe/retrieval_margin": m, "probe/token_entropy": 0.3,
                     "probe/cond_entropy_est": 0.2})
        hist.append({"step": s + 1, "rollout/success": 0.2})
    v = collapse_from_history(hist)
    assert v is not None and v.collapsed and v.drop_step == 15
    assert collapse_from_history(hist[:2]) is None


def test_bad_reference_raises():
    with pytest.raises(ValueError, match="reference"):
        detect_collapse([0, 1], [0.5, 0.1], [1, 1], [1, 1], reference="end")


# ---------------------------------------------------------------------------------------------- harmful collapse
def test_harmful_collapse_needs_all_three_conditions():
    from ragen_core.math.collapse import detect_harmful_collapse

    steps = [0, 10, 20, 30, 40]
    margin = [0.5, 0.6, 0.2, 0.1, 0.1]  # peak 0.6 at step 10, halved from step 20 on
    flat = [1.0, 1.0, 0.95, 0.9, 0.85]
    val_steps, falling = [0, 10, 20, 40], [0.3, 0.5, 0.4, 0.35]
    v = detect_harmful_collapse(steps, margin, flat, flat, val_steps, falling)
    assert v.harmful and v.peak_step == 10 and v.success_at_peak == 0.5 and v.success_end == 0.35
    # success rose after the peak: the collapse helped (the built-in testbed's case)
    assert not detect_harmful_collapse(steps, margin, flat, flat, val_steps, [0.3, 0.5, 0.6, 0.8]).harmful
    # entropy left the band after the drop (at the end): no longer invisible to entropy
    late = [1.0, 1.0, 0.95, 0.9, 0.7]
    v = detect_harmful_collapse(steps, margin, late, flat, val_steps, falling)
    assert v.mi_fell and v.success_not_higher and not v.entropy_flat_to_end and not v.harmful
    # no drop
    v = detect_harmful_collapse(steps, [0.5, 0.6, 0.5, 0.45, 0.4], flat, flat, val_steps, falling)
    assert not v.mi_fell and not v.harmful
    assert v.reason.count("no MI drop") == 1, v.reason  # the reason reads once, not doubled
    # the evaluation nearest the peak; ties go to the earlier one
    v = detect_harmful_collapse(steps, margin, flat, flat, [0, 5, 15, 40], [0.1, 0.2, 0.9, 0.3])
    assert v.success_at_peak == 0.2
