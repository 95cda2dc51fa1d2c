"""The MI proxies of section 2 (MI-Seq-Est, Retrieval-Acc, Fano), exactly: expectations by enumeration on a
random batch channel."""

from __future__ import annotations

import itertools
import math

import numpy as np

from .inputs import require_distribution, require_int, require_real, require_rng
from .records import Check, bound, identity
from .testbed import channel_cond_entropy, channel_marginal_entropy, channel_mutual_information, h2, softmax

__all__ = ["expected_seq_proxy", "bayes_accuracy", "fano_lower", "check_mi_proxy_exact"]


def expected_seq_proxy(sampler: np.ndarray, scorer: np.ndarray) -> float:
    """E[MI-Seq-Est] for a batch of P prompts with channel rows ``sampler`` [P, Z] and ``scorer`` [P, Z]:

        (1/P) sum_i sum_z q_i(z) [ log p_i(z) - log( (1/P) sum_j p_j(z) ) ]    (the MI proxy's expectation).

    Every row a probability vector; the scorer's entries > 0 (its log-probabilities enter).
    """
    sampler = require_distribution("sampler", sampler, 2)
    scorer = require_distribution("scorer", scorer, 2, shape=sampler.shape)
    if np.any(scorer <= 0):
        where = [int(i) for i in np.argwhere(scorer <= 0)[0]]
        raise ValueError(f"scorer must be > 0 everywhere (log scorer enters the proxy), got 0 at index {where}")
    mix = scorer.mean(axis=0)
    return float(np.mean(np.sum(sampler * (np.log(scorer) - np.log(mix)[None, :]), axis=1)))


def bayes_accuracy(channel: np.ndarray) -> float:
    """Retrieval accuracy of the Bayes (MAP) scorer, uniform prompts: (1/P) sum_z max_i p_i(z); ``channel [P, Z]``
    with a probability vector in every row."""
    channel = require_distribution("channel", channel, 2)
    return float(np.sum(channel.max(axis=0)) / channel.shape[0])


def fano_lower(acc: float, P: int) -> float:
    """Fano: I_P >= log P - h2(1 - acc) - (1 - acc) log(P - 1); acc in [0, 1], P >= 1 prompts."""
    acc, P = require_real("acc", acc, 0.0, 1.0), require_int("P", P, 1)
    pe = 1.0 - acc
    return math.log(P) - float(h2(pe)) - (pe * math.log(P - 1) if P > 1 else 0.0)


def check_mi_proxy_exact(rng: np.random.Generator) -> list[Check]:
    """Section 2 properties by enumeration on a random batch channel (P prompts, Z outcomes).

    - scorer = sampler: E[MI-Seq-Est] = I_P, with I_P from entropies H(Z) - H(Z|X) (independent form);
    - sampler at temperature T != 1, scorer at T = 1: E[MI-Seq-Est] <= I_P(sampler);
    - E over batches (subsets of P of the X prompts) of I_P <= I(X;Z), X uniform;
    - exact collapse: E[Retrieval-Acc] = 1/P for an arbitrary scorer with first-index tie-break;
    - Fano with the Bayes scorer: log P - h2(1-Acc) - (1-Acc) log(P-1) <= I_P; the symmetric channel is tight.
    """
    rng = require_rng("rng", rng)
    out: list[Check] = []
    P = int(rng.integers(2, 9))
    Z = int(rng.integers(2, 10))
    logits = rng.normal(size=(P, Z)) * float(np.exp(rng.uniform(-1, 1.5)))
    p = softmax(logits, 1)
    u = np.full(P, 1.0 / P)
    I_P = channel_marginal_entropy(u, p) - channel_cond_entropy(u, p)
    out.append(identity("mi_seq_mean", expected_seq_proxy(p, p), I_P, atol=1e-13))
    T = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0))))
    q = softmax(logits / T, 1)
    out.append(bound("mi_seq_below_sampler_mi", expected_seq_proxy(q, p),
                     channel_mutual_information(u, q), atol=1e-13))
    # batches drawn from a larger pool
    Xpool = int(rng.integers(3, 8))
    pool = softmax(rng.normal(size=(Xpool, Z)) * 2, 1)
    Pb = int(rng.integers(2, Xpool))
    vals = [
        channel_mutual_information(np.full(Pb, 1.0 / Pb), pool[list(c)])
        for c in itertools.combinations(range(Xpool), Pb)
    ]
    out.append(bound("batch_mi_below_mi", float(np.mean(vals)),
                     channel_mutual_information(np.full(Xpool, 1.0 / Xpool), pool), atol=1e-13))
    # collapse: every prompt has the same p(z); scorer arbitrary integer table (ties) with argmax tie-break
    pz = rng.dirichlet(np.ones(Z))
    scorer = rng.integers(-2, 3, size=(Z, P)).astype(float)
    winner = np.argmax(scorer, axis=1)  # first index among ties
    acc = float(np.mean([np.sum(pz[winner == i]) for i in range(P)]))
    out.append(identity("retrieval_collapse", acc, 1.0 / P))
    acc_b = bayes_accuracy(p)
    out.append(bound("fano", fano_lower(acc_b, P), I_P, atol=1e-13,
                     variants={"drop (1-Acc) log(P-1)": (fano_lower(acc_b, P) + (1 - acc_b) * math.log(P - 1), I_P)}))
    a = float(rng.uniform(1.0 / P + 0.01, 0.99))
    sym = np.full((P, P), (1 - a) / (P - 1)) + np.eye(P) * (a - (1 - a) / (P - 1))
    I_sym = channel_mutual_information(np.full(P, 1.0 / P), sym)
    acc_s = bayes_accuracy(sym)
    out.append(bound("fano", fano_lower(acc_s, P), I_sym, atol=1e-13, tight=True,
                     variants={"drop (1-Acc) log(P-1)": (fano_lower(acc_s, P) + (1 - acc_s) * math.log(P - 1), I_sym)}))
    return out
