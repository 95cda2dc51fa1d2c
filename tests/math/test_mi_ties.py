"""Retrieval accuracy under tied scores (``ragen_core.math.mi.mi_proxies``): a tie for the top score is shared,
i.e. the value is the expected hit under a uniformly random tie-break, so neither a lower-index nor a
higher-index tie-break rule passes.

The reference here is independent of ragen_core.math.mi: it averages, over every priority order of the prompts
(all P! of them), the deterministic ranking "score descending, then priority", which is exactly a uniformly
random tie-break.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ragen_core.math.mi import mi_proxies


def _reference(L: np.ndarray, same: np.ndarray, k: int) -> float:
    """Mean over (i, k') of P(the top k under a random tie-break holds a prompt equivalent to x_i)."""
    P, G, _ = L.shape
    perms = list(itertools.permutations(range(P)))
    total = 0.0
    for i in range(P):
        for g in range(G):
            row = L[i, g]
            hits = 0
            for prio in perms:
                ranked = sorted(range(P), key=lambda j, prio=prio, row=row: (-row[j], prio[j]))
                hits += any(same[i, j] for j in ranked[:k])
            total += hits / len(perms)
    return total / (P * G)


def _acc(L: np.ndarray, prompt_ids=None) -> dict:
    return mi_proxies(torch.from_numpy(L), torch.ones(L.shape[:2], dtype=torch.float64), prompt_ids=prompt_ids)


def test_a_tie_is_shared_not_broken_by_index() -> None:
    # each trace ties its own prompt with one other: shared gives 1/2 per trace; ties to the lower index would
    # give (1 + 1 + 0) / 3 = 2/3, ties to the higher index (0 + 0 + 1) / 3 = 1/3
    L = np.array([[[1.0, 1.0, 0.0]], [[0.0, 2.0, 2.0]], [[3.0, 0.0, 3.0]]])
    assert _acc(L)["retrieval_acc"] == pytest.approx(0.5, abs=1e-15)


def test_a_full_tie_scores_the_chance_level_wherever_the_prompt_sits() -> None:
    P = 5
    L = np.zeros((P, 2, P))
    assert _acc(L)["retrieval_acc"] == pytest.approx(1.0 / P, abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_retrieval_and_recall_match_the_random_tie_break_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    P, G = 4, 3
    L = rng.integers(-1, 2, size=(P, G, P)).astype(np.float64)  # 3 values: ties in most rows
    ids = [0, 1, 0, 2] if seed % 2 else None  # duplicated prompts (0 and 2 identical) on odd seeds
    same = np.eye(P, dtype=bool) if ids is None else np.equal.outer(ids, ids)
    out = _acc(L, ids)
    assert out["retrieval_acc"] == pytest.approx(_reference(L, same, 1), abs=1e-12)
    assert out["recall_at_k"][2] == pytest.approx(_reference(L, same, 2), abs=1e-12)


def test_relabelling_the_prompts_does_not_change_the_accuracy() -> None:
    """Any rule that breaks ties by index depends on the order the prompts sit in the batch."""
    rng = np.random.default_rng(7)
    P, G = 5, 4
    L = rng.integers(0, 2, size=(P, G, P)).astype(np.float64)
    perm = rng.permutation(P)
    L_perm = L[perm][:, :, perm]
    assert _acc(L_perm)["retrieval_acc"] == pytest.approx(_acc(L)["retrieval_acc"], abs=1e-12)
