"""`mi_proxies` names what it expected when it cannot read its inputs, pinned where the mutation run found the
messages untested (`make mutation`, docs/theory_report/mutation.md)."""

from __future__ import annotations

import pytest
import torch

from ragen_core.math.mi import mi_proxies


def test_unreadable_scores_name_their_shape():
    with pytest.raises(ValueError, match=r"^L must be a real tensor \[P, G, P\] or nested lists of numbers; could not "
                                         r"read it"):
        mi_proxies([[[None, 0.0]], [[0.0, 0.0]]], torch.ones(2, 1))


def test_unreadable_lengths_name_their_shape():
    with pytest.raises(ValueError, match=r"^lengths must be a real tensor \[P, G\] or nested lists of numbers; could "
                                         r"not read it"):
        mi_proxies(torch.zeros(2, 1, 2), [[None], [1]])
