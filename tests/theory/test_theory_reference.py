"""The reference rules of theory_checks (theory_checks/reference.py) against independent references: plain
loops over the definitions, mpmath at 50 digits for the log-sum-exp terms, hand-worked cases, and the RL core's
own top-p for the selection rule. These are the tests that mutation testing runs against the module."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest

from theory_checks import reference as R

mpmath.mp.dps = 50


# ------------------------------------------------------------------------------------------------ top-p
@pytest.mark.parametrize(("scores", "rho", "kept"), [
    ([4.0, 3.0, 2.0, 1.0], 0.9, [0, 1, 2]),   # cumsum 4, 7, 9 >= 9
    ([4.0, 3.0, 2.0, 1.0], 0.7, [0, 1]),      # 7 >= 7: a prefix exactly at the threshold stops there
    ([1.0, 3.0, 2.0, 4.0], 0.4, [3]),         # descending order, not index order
    ([1.0, 1.0, 1.0, 1.0], 0.5, [0, 1]),      # ties by lower index
    ([0.0, 2.0, 0.0], 1.0, [1]),              # zeros after the mass is reached are not kept
    ([0.0, 0.0, 0.0], 0.9, [0]),              # total 0: the first group reaches 0 >= 0
    ([2.0, 2.0, 1.0], 1.0, [0, 1, 2]),
])
def test_top_p_by_score_worked_cases(scores: list[float], rho: float, kept: list[int]) -> None:
    assert R.top_p_by_score(np.array(scores), rho) == kept


def test_top_p_by_score_is_the_smallest_prefix_by_enumeration() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        P = int(rng.integers(1, 9))
        scores = rng.choice([0.0, 0.25, 0.5, 1.0, 2.0], size=P)  # many ties
        rho = float(rng.choice([0.25, 0.5, 0.875, 1.0]))
        ranked = sorted(range(P), key=lambda i: (-scores[i], i))
        total = sum(scores)  # dyadic values: every sum here is exact
        k = next(k for k in range(1, P + 1) if sum(scores[i] for i in ranked[:k]) >= rho * total)
        assert R.top_p_by_score(scores, rho) == ranked[:k]


def test_top_p_by_score_keeps_as_many_groups_as_the_core() -> None:
    torch = pytest.importorskip("torch")
    from ragen_core.math.filtering import select_groups

    rng = np.random.default_rng(1)
    for _ in range(200):
        # dyadic scores and keep rates: the core's float sums are exact, so both must follow the exact rule
        scores = rng.choice([0.0, 0.125, 0.25, 0.5, 0.75], size=int(rng.integers(2, 10)))
        rho = float(rng.choice([0.5, 0.75, 0.875, 1.0]))
        if scores.sum() == 0:
            continue
        ours = R.top_p_by_score(scores, rho)
        core = select_groups(torch.as_tensor(scores, dtype=torch.float64), "top_p", rho).kept.tolist()
        assert ours == core


def test_top_p_by_score_decides_exact_boundaries_on_the_written_decimals() -> None:
    # 0.3 + 0.3 + 0.3 = 0.9 * 1.0 exactly as written; in float64 the three 0.3s sum to 0.8999999999999999, and a
    # float rule keeps 3 or 4 groups depending on how it sums the total
    scores = np.array([0.3, 0.3, 0.1, 0.0, 0.3])
    assert 0.3 + 0.3 + 0.3 < 0.9 * float(np.sum(scores))
    assert R.top_p_by_score(scores, 0.9) == [0, 1, 4]
    assert R.top_p_by_score(np.array([0.1] * 10), 0.3) == [0, 1, 2]  # 0.1 + 0.1 + 0.1 = 0.30000000000000004 in float


# ------------------------------------------------------------------------------------------------ top-k
def _loop_topk(Rb: np.ndarray, k: int, higher: bool) -> np.ndarray:
    n, P, G = Rb.shape
    mask = np.zeros((n, P), dtype=bool)
    for b in range(n):
        var = []
        for i in range(P):
            m = sum(Rb[b, i]) / G
            var.append(sum((r - m) ** 2 for r in Rb[b, i]) / (G - 1))
        if all(v == 0 for v in var):
            continue
        for i in sorted(range(P), key=lambda i: (-var[i], -i if higher else i))[:k]:
            mask[b, i] = True
    return mask


@pytest.mark.parametrize("ties", ["lower", "higher"])
def test_topk_by_variance_against_a_plain_loop(ties: str) -> None:
    rng = np.random.default_rng(2)
    Rb = rng.choice([0.0, 1.0, 3.0], size=(400, 5, 3))  # few values: tied variances and all-zero batches
    Rb[:20] = 1.0
    for k in (1, 2, 4):
        np.testing.assert_array_equal(R.topk_by_variance(Rb, k, ties=ties), _loop_topk(Rb, k, ties == "higher"))


def test_topk_by_variance_uses_the_sample_variance() -> None:
    # variances (ddof=1): group 0 -> 2.0, group 1 -> 1/3 * ... : [0, 2] -> 2.0, [0, 1, 2] would be 1.0
    Rb = np.array([[[0.0, 2.0], [1.0, 1.0], [0.0, 1.0]]])
    assert R.topk_by_variance(Rb, 1).tolist() == [[True, False, False]]
    assert R.topk_by_variance(Rb, 2).tolist() == [[True, False, True]]
    assert R.topk_by_variance(np.zeros((1, 3, 2)), 2).tolist() == [[False, False, False]]
    with pytest.raises(ValueError, match=r"^ties must be 'lower' or 'higher'; got 'middle'$"):
        R.topk_by_variance(Rb, 1, ties="middle")


# ------------------------------------------------------------------------------------------ MI proxy terms
def _mp_lse_mean(row: np.ndarray) -> mpmath.mpf:
    """log((1/P) sum_j exp row_j) at 50 digits."""
    return mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row) / len(row))


def _random_L(rng: np.random.Generator, P: int, G: int, offset: float) -> np.ndarray:
    return offset + rng.normal(0.0, 3.0, size=(P, G, P))


@pytest.mark.parametrize("offset", [0.0, -2000.0, 700.0])  # exp overflows / underflows without the shift
def test_seq_proxy_terms_against_mpmath(offset: float) -> None:
    rng = np.random.default_rng(3)
    for P, G in ((1, 2), (3, 2), (5, 4)):
        L = _random_L(rng, P, G, offset)
        got = R.seq_proxy_terms(L)
        assert got.shape == (P, G)
        for i, k in itertools.product(range(P), range(G)):
            want = mpmath.mpf(float(L[i, k, i])) - _mp_lse_mean(L[i, k])
            assert got[i, k] == pytest.approx(float(want), abs=1e-9)


@pytest.mark.parametrize("offset", [0.0, -2000.0, 700.0])
def test_token_proxy_terms_against_mpmath(offset: float) -> None:
    rng = np.random.default_rng(4)
    P, G = 4, 3
    L = _random_L(rng, P, G, offset)
    lengths = rng.integers(1, 9, size=(P, G))
    matched, marginal = R.token_proxy_terms(L, lengths)
    assert matched.shape == marginal.shape == (P, G)
    for i, k in itertools.product(range(P), range(G)):
        assert matched[i, k] == pytest.approx(L[i, k, i] / lengths[i, k], rel=1e-12)
        want = _mp_lse_mean(L[i, k]) / int(lengths[i, k])
        assert marginal[i, k] == pytest.approx(float(want), abs=1e-9)


# ------------------------------------------------------------------------------------------ retrieval
def _loop_hits(L: np.ndarray, ties: str) -> np.ndarray:
    P, G, _ = L.shape
    out = np.zeros((P, G))
    for i, k in itertools.product(range(P), range(G)):
        best = max(L[i, k])
        tied = [j for j in range(P) if L[i, k, j] == best]
        if ties == "shared":
            out[i, k] = (1.0 / len(tied)) if i in tied else 0.0
        else:
            out[i, k] = float((min(tied) if ties == "lower" else max(tied)) == i)
    return out


@pytest.mark.parametrize("ties", R.RETRIEVAL_TIES)
def test_retrieval_hits_against_a_plain_loop(ties: str) -> None:
    rng = np.random.default_rng(5)
    for P, G in ((1, 3), (2, 2), (4, 3), (6, 2)):
        for _ in range(40):
            L = rng.integers(-2, 1, size=(P, G, P)).astype(float)  # integer scores: ties everywhere
            np.testing.assert_allclose(R.retrieval_hits(L, ties), _loop_hits(L, ties), rtol=0, atol=1e-15)


def test_retrieval_hits_worked_case_and_bad_rule() -> None:
    # trace of prompt 0 scores [1, 1, 0]: tied with prompt 1 -> 1/2 shared, 1 under "lower", 0 under "higher"
    L = np.array([[[1.0, 1.0, 0.0]], [[0.0, 2.0, 0.0]], [[5.0, 0.0, 1.0]]])
    assert R.retrieval_hits(L).ravel().tolist() == [0.5, 1.0, 0.0]
    assert R.retrieval_hits(L, "lower").ravel().tolist() == [1.0, 1.0, 0.0]
    assert R.retrieval_hits(L, "higher").ravel().tolist() == [0.0, 1.0, 0.0]
    assert math.isclose(float(R.retrieval_hits(L).mean()), 0.5)
    with pytest.raises(ValueError, match=r"^ties must be one of \('shared', 'lower', 'higher'\); got 'mid'$"):
        R.retrieval_hits(L, "mid")
