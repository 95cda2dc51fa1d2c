"""Monte Carlo checks that measure something: the near-tight T2/T3 configuration samples (p = 0.45, not only the
degenerate p = 1/2), and the tie-break of the RL core's retrieval accuracy and top-k selection is exercised by
scorers and rewards that actually tie."""

from __future__ import annotations

import numpy as np
import pytest

from theory_checks import montecarlo as M


def test_t2_t3_x09_mutants_are_caught_at_a_non_degenerate_configuration() -> None:
    checks = M.mc_t2_t3(np.random.default_rng(0), M.MCBudget(), 200_000, {})
    for check_id in ("mc_t2_sharper", "mc_t3_floor"):
        rec = [c for c in checks if c.id == check_id and "p=0.45" in c.note]
        assert len(rec) == 1, check_id
        c = rec[0]
        assert c.holds and dict(c.mutants)["rhs x0.9"] is False, (check_id, c.mutants)
        variance = float(c.note.split("draw variance ")[1])
        assert variance > 0  # the draws vary: a real sample, unlike p = 1/2
        degenerate = [d for d in checks if d.id == check_id and "p=0.5," in d.note]
        assert degenerate and "draw variance 0" in degenerate[0].note


def _collapse_row(checks):
    return next(c for c in checks if c.id == "core_collapse_retrieval")


def test_collapse_retrieval_row_uses_ties_and_rejects_both_index_tie_breaks() -> None:
    core = M.core_available()
    if core["ragen_core.math.mi"] != "available":
        pytest.skip(core["ragen_core.math.mi"])
    c = _collapse_row(M.mc_mi(np.random.default_rng(0), M.MCBudget(), G=256, batches=2, core=core))
    assert c.holds
    assert dict(c.mutants)["ties toward the lower index"] is False
    assert dict(c.mutants)["ties toward the higher index"] is False
    assert int(c.note.split("scorer: ")[1].split("%")[0]) > 20  # a large share of traces has a tied maximum


def test_a_higher_index_tie_break_in_the_core_fails_the_collapse_row(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import ragen_core.math.mi as mi_mod

    core = M.core_available()
    if core["ragen_core.math.mi"] != "available":
        pytest.skip(core["ragen_core.math.mi"])
    original = mi_mod.mi_proxies

    def ties_to_higher_index(L, lengths, *args, **kwargs):
        out = original(L, lengths, *args, **kwargs)
        out["retrieval_acc"] = float(M._retrieval_hits(torch.as_tensor(L).numpy(), ties="higher").mean())
        return out

    monkeypatch.setattr(mi_mod, "mi_proxies", ties_to_higher_index)
    c = _collapse_row(M.mc_mi(np.random.default_rng(0), M.MCBudget(), G=256, batches=2, core=core))
    assert not c.holds


def test_top_k_selection_row_is_decided_by_ties_and_rejects_the_higher_index_rule() -> None:
    core = M.core_available()
    if core["ragen_core.math.filtering"] != "available":
        pytest.skip(core["ragen_core.math.filtering"])
    checks = M.mc_t7(np.random.default_rng(0), M.MCBudget(), 8000, core)
    c = next(c for c in checks if c.id == "core_filter_groups")
    assert c.holds and dict(c.mutants)["ties toward the higher index"] is False
    decided = int(c.note.split(", ")[1].split(" of them")[0])
    assert decided > 100  # hundreds of the 2000 batches have tied variances at the cut
