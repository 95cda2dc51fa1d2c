"""benchmarks/warm_start_rounding.py's summary, on hand-made traces whose answers are worked out by hand."""

import math

import pytest

from benchmarks.warm_start_rounding import markdown, summarise


def _trace(setting, perturb, loss, success, episodes_off, episodes_on=None):
    return {"setting": setting, "perturb": perturb, "loss": loss, "grad_norm": [1.0] * len(loss),
            "success_decode_on": success, "success_decode_off": success,
            "episodes_decode_on": episodes_on if episodes_on is not None else episodes_off,
            "episodes_decode_off": episodes_off}


def test_summary_by_hand():
    off_loss = [5.0, 4.0, 3.0, 2.0, 1.0]
    on_loss = [5.0, 4.000001, 3.00002, 2.002, 1.5]  # differs by 1e-6, 2e-5, 2e-3, 0.5
    traces = [
        _trace("off", 0, off_loss, 0.30, [1, 0, 1, 0]),
        _trace("on", 0, on_loss, 0.20, [1, 0, 0, 0], episodes_on=[1, 1, 0, 0]),  # one episode differs
        _trace("off", 1, off_loss, 0.40, [1, 0, 1, 0]),
        _trace("on", 1, on_loss, 0.30, [1, 0, 0, 0]),
    ]
    s = summarise(traces)
    assert s["steps"] == 5
    # the first step whose |off - on| exceeds each threshold: 2e-5 > 1e-5 at step 2, 2e-3 > 1e-3 at 3, 0.5 at 4
    assert s["first_step_loss_differs_by"] == {"1e-05": 2, "0.001": 3, "0.01": 4}
    assert s["max_loss_diff_first_100"] == pytest.approx(0.5)
    assert s["decode_disagreements"] == {"off": 0, "on": 1}
    assert s["success"] == {"off": [0.30, 0.40], "on": [0.20, 0.30]}
    assert s["mean"]["off"] == pytest.approx(0.35) and s["mean"]["on"] == pytest.approx(0.25)
    sd = math.sqrt(((0.05) ** 2 * 2) / 1)  # two values 0.1 apart: SD (n - 1) = 0.0707
    assert s["sd"]["off"] == pytest.approx(sd) and s["sd"]["on"] == pytest.approx(sd)
    se = math.sqrt(sd**2 / 2 + sd**2 / 2)
    assert s["welch"]["diff"] == pytest.approx(-0.10) and s["welch"]["t"] == pytest.approx(-0.10 / se)
    text = markdown({"config": "collapse_sokoban", "seed": 300, "perturbations": 1, "summary": s})
    assert "| off | 30.0, 40.0 | 35.0 | 7.1 |" in text and "on - off: -10.0 points" in text


def test_identical_trajectories_never_diverge():
    loss = [3.0, 2.0, 1.0]
    s = summarise([_trace("off", 0, loss, 0.5, [1]), _trace("on", 0, list(loss), 0.5, [1])])
    assert s["first_step_loss_differs_by"] == {"1e-05": None, "0.001": None, "0.01": None}
    assert s["welch"] is None and s["sd"] == {"off": None, "on": None}
