"""Undefined filter / MI statistics are left out of TRL's logs rather than printed as None."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

pytest.importorskip("trl")

from ragen_core.integrations.trl import append_finite  # noqa: E402


def test_undefined_values_are_omitted_and_defined_ones_kept():
    store: defaultdict[str, list[float]] = defaultdict(list)
    append_finite(store, {"filter/rv_heterogeneity": math.nan, "filter/rv_mean": 0.0, "collapse/mi_est": 0.25,
                          "collapse/x": math.inf})
    append_finite(store, {"filter/rv_heterogeneity": 1.5, "filter/rv_mean": 0.2})
    assert dict(store) == {"filter/rv_mean": [0.0, 0.2], "collapse/mi_est": [0.25], "filter/rv_heterogeneity": [1.5]}
