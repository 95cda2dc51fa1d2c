"""collapse_from_history (the run summary's collapse check) treats a probe value that is not a finite number
(NaN, an infinity) as a missing measurement, like None: before, a NaN margin raised "the curves must be finite"
from the detector and the run's summary.md could not be written."""

from __future__ import annotations

import math

import pytest

from ragen_core.math.collapse import PROBE_KEYS, collapse_from_history, detect_collapse


def _history(margins):
    return [{"step": 10 * i, PROBE_KEYS["margin"]: m, PROBE_KEYS["token_entropy"]: 0.2,
             PROBE_KEYS["cond_entropy"]: 0.1} for i, m in enumerate(margins)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, None, True])
def test_a_non_finite_probe_value_is_a_missing_measurement(bad):
    margins = [0.6, bad, 0.5, 0.05, 0.04]
    got = collapse_from_history(_history(margins))
    # the same verdict as the detector on the other four measurements, computed directly
    want = detect_collapse([0, 20, 30, 40], [0.6, 0.5, 0.05, 0.04], [0.2] * 4, [0.1] * 4)
    assert got == want


def test_too_few_finite_measurements_give_no_verdict():
    assert collapse_from_history(_history([0.6, math.nan, math.nan])) is None
