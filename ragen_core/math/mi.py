"""Mutual-information proxies by in-batch cross-scoring (docs/science.md section 2).

A batch holds P distinct prompts x_1..x_P and G reasoning traces z_ik per prompt. Every trace is scored under
every prompt with the policy itself (teacher forcing, only the tokens of z are scored):

    L[i, k, j] = log p(z_ik | x_j)          (summed over the tokens of z; shape [P, G, P])

:func:`mi_proxies` turns L into the retrieval and MI estimators; :func:`cross_score` computes L with any
transformers causal LM, encoding each prompt once and reusing its KV cache for all P*G traces;
:func:`cross_score_naive` is the reference that re-encodes prompt + trace for every pair (what the official
code does).
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ragen_core.math._args import as_integer, as_number, as_tensor
from ragen_core.math.metrics import classify_regime

__all__ = [
    "RECALL_KS",
    "mi_proxies",
    "mi_seq_null",
    "flatten_proxies",
    "MIZScoreEMA",
    "cross_score",
    "learned_position_limit",
    "cross_score_naive",
    "classify_regime",
]

RECALL_KS = (2, 4, 8)
#: Default token budget of one forward call in :func:`cross_score` (batch rows x (prompt + padded response)).
DEFAULT_BATCH_TOKENS = 32768


# --------------------------------------------------------------------------------------------------------------
# Proxies from L
# --------------------------------------------------------------------------------------------------------------


def _recall_chance(p: int, m: int, k: int) -> float:
    """P(at least one of m equivalent prompts is among k drawn without replacement from p): 1 - C(p-m,k)/C(p,k)."""
    if k >= p:
        return 1.0
    return 1.0 - math.comb(p - m, k) / math.comb(p, k)


def mi_proxies(
    L: torch.Tensor,
    lengths: torch.Tensor,
    prompt_ids: torch.Tensor | Sequence[Any] | None = None,
    eps: float = 1e-3,
) -> dict[str, Any]:
    """MI proxies and retrieval accuracy from the cross-scoring tensor (docs/science.md section 2).

    With n = |z_ik| (``lengths``), ``lse_ik = log((1/P) sum_j exp L[i,k,j])``:

        matched[i,k]   = L[i,k,i] / n
        marginal[i,k]  = lse_ik / n                                     (paper, Eq. 1)
        marginal'[i,k] = logsumexp_j(L[i,k,j] / n) - log P              (official code's per-token variant)

    Keys of the result (floats unless said otherwise; means over all (i, k)):

    - ``retrieval_acc``: mean of 1[argmax_j L[i,k,j] is a prompt equivalent to x_i]; a tie for the top score
      counts the share of the tied prompts equivalent to x_i (the expected hit under a uniformly random
      tie-break, :func:`_tied_recall`), so a scorer that ties everything scores exactly the chance level,
      wherever duplicated prompts sit in the batch.
    - ``retrieval_chance``: its chance level, mean_i m_i / P with m_i the number of batch prompts equivalent to
      x_i (1/P with distinct prompts).
    - ``recall_at_k``: dict {k: Recall@k} for k in (2, 4, 8) with k < P (ties shared the same way);
      ``recall_at_k_chance``: dict
      {k: mean_i 1 - C(P - m_i, k) / C(P, k)} (k/P with distinct prompts).
    - ``mi_est``: mean(matched - marginal) (Eq. 1, per token); ``mi_est_tokenwise``: mean(matched - marginal');
      ``mi_seq_est``: mean(L[i,k,i] - lse_ik) (no 1/n).
    - ``cond_entropy_est`` = -mean(matched); ``marginal_entropy_est`` = -mean(marginal);
      ``marginal_entropy_est_tokenwise`` = -mean(marginal'); ``cond_entropy_seq_est`` = -mean(L[i,k,i]);
      ``marginal_entropy_seq_est`` = -mean(lse). For each variant H_hat(Z) = H_hat(Z|X) + MI exactly.
    - ``marginal_std``: population std of marginal (sigma_batch); ``mi_zscore`` = mi_est / (sigma_batch + eps)
      (:func:`zscore`: 0.0 when the denominator and mi_est are both 0, NaN when only the denominator is).
    - ``mi_upper_bound`` = log P (each sequence-level term is <= log P).
    - ``n_prompts`` (P), ``group_size`` (G).

    Identical prompts (equal ``prompt_ids``) count as correct retrievals and raise the chance level. The MI
    estimators are unchanged by duplicates: they estimate I(X;Z) for X uniform over the batch entries.

    Invalid scores raise instead of propagating: a NaN or +inf anywhere in L, or a row L[i, k, :] that is -inf
    for every prompt, would turn every output into NaN (one bad trace reaches every mean), so
    :func:`mi_proxies` raises ``ValueError`` naming the offending rows ``(i, k)`` (prompt i, trace k); drop or
    re-score those traces. A ``-inf`` under another prompt is a valid log-probability (a trace impossible
    under that prompt) and is accepted; a ``-inf`` under the trace's own prompt (and every prompt identical to
    it) is refused the same way, since a sampled trace cannot be impossible under the prompt it was sampled
    from and its matched term would make MI-Est -inf.

    Args:
        L: ``[P, G, P]`` summed log-probs, ``L[i,k,j] = log p(z_ik | x_j)`` (no NaN, no +inf, no row of -inf).
        lengths: ``[P, G]`` token counts |z_ik| (finite, > 0).
        prompt_ids: optional ``[P]`` ids (tensor or sequence of hashables); equal ids = identical prompts.
        eps: non-negative constant of the z-score denominator (paper: 1e-3).

    Returns:
        dict as above.
    """
    L = as_tensor("L", L, "[P, G, P]")
    if L.dim() != 3 or L.shape[0] != L.shape[2] or L.shape[0] < 1 or L.shape[1] < 1:
        raise ValueError(f"L must be [P, G, P] with P, G >= 1; got shape {tuple(L.shape)}")
    if not L.is_floating_point():  # integer scores are log-probs too; the proxies need -inf and fractions
        L = L.to(torch.float64)
    p, g, _ = L.shape
    n = as_tensor("lengths", lengths, "[P, G]").to(torch.float64)
    if tuple(n.shape) != (p, g):
        raise ValueError(f"lengths must be [P, G] = [{p}, {g}] to match L; got shape {tuple(n.shape)}")
    if bool((n <= 0).any()) or not bool(torch.isfinite(n).all()):
        raise ValueError("lengths must be finite and > 0 (every scored trace needs at least one token)")
    # a NaN or +inf score, or a trace impossible under every prompt (a row of -inf), makes every output NaN
    bad = (torch.isnan(L) | (L == math.inf)).any(dim=2) | (L == -math.inf).all(dim=2)
    if bool(bad.any()):
        rows = bad.nonzero().tolist()
        shown = ", ".join(f"({i}, {k})" for i, k in rows[:10]) + (
            f" and {len(rows) - 10} more" if len(rows) > 10 else ""
        )
        raise ValueError(f"L has NaN, +inf or all -inf scores in {len(rows)} row(s) (i, k) = {shown} "
                         "(prompt i, trace k); "
                         "every MI output would be NaN: re-score or drop those traces")
    eps = as_number("eps", eps, 0.0)  # a bool, a string or inf (every z-score 0) raise
    same = _equivalence(prompt_ids, p)
    # A trace impossible under its own prompt (or under a prompt identical to it) cannot have been sampled from
    # it: the scorer disagrees with the sampler (a masked vocabulary, an underflow). Its matched term would be
    # -inf and drag every MI mean to -inf, so it is refused like a NaN.
    own = torch.where(same[:, None, :].expand(p, g, p), L, torch.full_like(L, -math.inf)).amax(dim=2)
    impossible = own == -math.inf
    if bool(impossible.any()):
        rows = impossible.nonzero().tolist()
        shown = ", ".join(f"({i}, {k})" for i, k in rows[:10]) + (
            f" and {len(rows) - 10} more" if len(rows) > 10 else "")
        raise ValueError(f"L[i, k, i] is -inf in {len(rows)} row(s) (i, k) = {shown}: a trace impossible under "
                         "its own prompt (scorer and sampler disagree); MI-Est would be -inf: re-score or drop them")

    lf = L.to(torch.float64)
    log_p = math.log(p)
    diag = lf.diagonal(dim1=0, dim2=2).transpose(0, 1)  # [P, G]: L[i,k,i]
    lse = torch.logsumexp(lf, dim=2) - log_p  # [P, G]
    matched = diag / n
    marginal = lse / n
    marginal_tw = torch.logsumexp(lf / n[:, :, None], dim=2) - log_p

    # Retrieval with shared ties: the expected hit under a uniformly random tie-break (see _tied_recall).
    m_i = same.sum(dim=1).to(torch.float64)  # [P]
    recall: dict[int, float] = {}
    recall_chance: dict[int, float] = {}
    for k in RECALL_KS:
        if k < p:
            recall[k] = float(_tied_recall(lf, same, k).mean())
            recall_chance[k] = float(sum(_recall_chance(p, int(m), k) for m in m_i.tolist()) / p)

    sigma = float(marginal.std(correction=0)) if marginal.numel() > 1 else 0.0
    mi_est = float((matched - marginal).mean())
    return {
        "retrieval_acc": float(_tied_recall(lf, same, 1).mean()),
        "retrieval_chance": float((m_i / p).mean()),
        "recall_at_k": recall,
        "recall_at_k_chance": recall_chance,
        "mi_est": mi_est,
        "mi_est_tokenwise": float((matched - marginal_tw).mean()),
        "mi_seq_est": float((diag - lse).mean()),
        "mi_zscore": zscore(mi_est, sigma, eps),
        "marginal_std": sigma,
        "cond_entropy_est": float(-matched.mean()),
        "marginal_entropy_est": float(-marginal.mean()),
        "marginal_entropy_est_tokenwise": float(-marginal_tw.mean()),
        "cond_entropy_seq_est": float(-diag.mean()),
        "marginal_entropy_seq_est": float(-lse.mean()),
        "mi_upper_bound": log_p,
        "n_prompts": p,
        "group_size": g,
    }


#: Batches of at most this many prompts get every relabelling in :func:`mi_seq_null` (8! = 40320); larger ones a
#: seeded random sample.
EXACT_NULL_MAX_PROMPTS = 8


@functools.lru_cache(maxsize=EXACT_NULL_MAX_PROMPTS)
def _all_permutations(p: int) -> torch.Tensor:
    """Every permutation of ``range(p)`` as rows ``[p!, p]`` (identity first), built once per p (read-only)."""
    return torch.tensor(list(itertools.permutations(range(p))), dtype=torch.long)


def mi_seq_null(L: torch.Tensor, n_perm: int = 9999, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """How MI-Seq-Est reads for this batch when the traces do not depend on their prompts: a permutation test.

    If traces ignore their prompts (I(X;Z) = 0), which prompt a group of traces was sampled from is exchangeable:
    relabelling the groups by a permutation pi of the prompts gives the batch's MI-Seq-Est under the null without
    re-scoring anything. With ``A[i, j] = mean_k L[i, k, j]`` and ``lse_ik = log((1/P) sum_j exp L[i, k, j])``,

        MI-Seq(pi) = mean_i A[i, pi(i)] - mean_ik lse_ik          (pi = identity: the observed MI-Seq-Est)

    Every permutation is used when P <= :data:`EXACT_NULL_MAX_PROMPTS`, else `n_perm` seeded random ones (and the
    identity). The p-value is the share of permutations (the identity included) whose MI-Seq reaches the observed
    one, so it is never below ``1 / P!``: 2 prompts cannot give p < 0.5, 3 not below 1/6, 4 not below 1/24.

    Args:
        L: ``[P, G, P]`` summed log-probs (as :func:`mi_proxies` takes them; P >= 2).
        n_perm: random permutations for P above the exact limit (>= 1).
        seed: their generator's seed, an integer in ``[0, 2**64)`` as numpy's seeding takes it (the result is
            reproducible). A negative seed raises: torch would read -1 as 2**64 - 1, the same draws under two seeds.
        level: the quantile of the null reported as ``null_quantile`` (in (0, 1)).

    Returns:
        ``{"p_value", "null_quantile" (MI-Seq at `level` under the null, nats: the value of the relabelling at
        that rank, rounding up), "null_mean", "level", "permutations", "exact"}``; a relabelling that pairs a trace
        with a prompt it is impossible under (``L = -inf``) reads -inf, so the quantile and mean can be -inf.
    """
    L = as_tensor("L", L, "[P, G, P]")
    if L.dim() != 3 or L.shape[0] != L.shape[2] or L.shape[0] < 2 or L.shape[1] < 1:
        raise ValueError(f"L must be [P, G, P] with P >= 2, G >= 1; got shape {tuple(L.shape)}")
    # A bool, a string or a fraction raises (n_perm=2.7 ran 2 relabellings, seed=True ran seed 1).
    level = as_number("level", level, 0.0, 1.0, low_open=True, high_open=True)
    n_perm = as_integer("n_perm", n_perm, 1)
    seed = as_integer("seed", seed, 0)
    if seed >= 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64) (a torch.Generator seed); got {seed!r}")
    p = L.shape[0]
    lf = L.to(torch.float64)
    if not bool(torch.isfinite(lf.logsumexp(dim=2)).all()) or bool(torch.isnan(lf).any()):
        raise ValueError("L must have no NaN and a finite log-sum-exp in every row (as mi_proxies requires)")
    a = lf.mean(dim=1)  # [P, P]: A[i, j]
    lse_mean = float((torch.logsumexp(lf, dim=2) - math.log(p)).mean())
    exact = p <= EXACT_NULL_MAX_PROMPTS
    if exact:
        perms = _all_permutations(p)
    else:
        gen = torch.Generator().manual_seed(int(seed))
        perms = torch.stack([torch.arange(p)] + [torch.randperm(p, generator=gen) for _ in range(int(n_perm))])
    stats = a[torch.arange(p)[None, :], perms].mean(dim=1) - lse_mean  # [N]
    observed = float(a.diagonal().mean() - lse_mean)
    # a relabelling that ties the observed value counts as reaching it (float sums in another order)
    reach = stats >= observed - 1e-12 * max(1.0, abs(observed))
    # "higher": the quantile is a relabelling's own value (never an interpolation between -inf and a number,
    # which is NaN: a trace impossible under another prompt makes a relabelling read -inf)
    return {"p_value": float(reach.to(torch.float64).mean()),
            "null_quantile": float(torch.quantile(stats, float(level), interpolation="higher")),
            "null_mean": float(stats.mean()),
            "level": float(level), "permutations": int(stats.numel()), "exact": exact}


def _equivalence(prompt_ids: torch.Tensor | Sequence[Any] | None, p: int) -> torch.Tensor:
    """BoolTensor [P, P]: same[i, j] = prompts i and j are identical."""
    if prompt_ids is None:
        return torch.eye(p, dtype=torch.bool)
    ids = prompt_ids.tolist() if isinstance(prompt_ids, torch.Tensor) else list(prompt_ids)
    if len(ids) != p:
        raise ValueError(f"prompt_ids must have P={p} entries (one per prompt); got {len(ids)}")
    codes: dict[Any, int] = {}
    idx = torch.tensor([codes.setdefault(x, len(codes)) for x in ids])
    return idx[:, None] == idx[None, :]


def _tied_recall(lf: torch.Tensor, same: torch.Tensor, k: int) -> torch.Tensor:
    """Recall@k of every trace with ties shared: ``[P, G]`` float64 in [0, 1] (k = 1 is retrieval accuracy).

    For trace (i, k) let a = #prompts scoring strictly above the k-th highest score s_k, t = #prompts scoring
    exactly s_k (the tied block: the top k holds a of them above and r = k - a drawn from the block), and h_above,
    h_tied the prompts equivalent to x_i among them. The value is the probability that the top k holds an
    equivalent prompt when the tie is broken uniformly at random:

        1                                   if h_above > 0
        1 - C(t - h_tied, r) / C(t, r)      otherwise

    So a scorer that ties every prompt scores exactly the chance level ``1 - C(P - m_i, k) / C(P, k)`` wherever
    the m_i duplicates of x_i sit, and any deterministic tie-break rule is irrelevant.
    """
    p = lf.shape[0]
    kth = torch.topk(lf, k, dim=2).values[:, :, -1:]  # [P, G, 1]: the k-th highest score
    eq = same[:, None, :]  # [P, 1, P]: prompt j equivalent to x_i
    above = lf > kth
    tied = lf == kth
    h_above = (above & eq).sum(dim=2)
    n_above = above.sum(dim=2)
    t = tied.sum(dim=2)
    h_tied = (tied & eq).sum(dim=2)
    r = k - n_above
    comb = torch.tensor([[math.comb(n, c) for c in range(p + 1)] for n in range(p + 1)], dtype=torch.float64)
    miss = comb[t - h_tied, r] / comb[t, r]
    return torch.where(h_above > 0, torch.ones_like(miss), 1.0 - miss)


def zscore(mi_est: float, sigma: float, eps: float) -> float:
    """MI-ZScore ``mi_est / (sigma + eps)``, defined where the denominator is 0 (eps = 0 and every marginal
    term equal): 0.0 when ``mi_est`` is 0 too (no dependence and no scale), else NaN (a dependence with no scale
    to measure it in: undefined, logged as NaN rather than raising ZeroDivisionError or reporting +-inf)."""
    den = float(sigma) + float(eps)
    if den > 0:
        return float(mi_est) / den
    return 0.0 if float(mi_est) == 0.0 else math.nan


def flatten_proxies(stats: Mapping[str, Any], prefix: str = "collapse/") -> dict[str, float]:
    """Flatten :func:`mi_proxies` output into ``{prefix + name: float}`` (``recall_at_k`` -> ``recall_at_2`` ...)."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        if key == "recall_at_k":
            out.update({f"{prefix}recall_at_{k}": float(v) for k, v in value.items()})
        elif key == "recall_at_k_chance":
            out.update({f"{prefix}recall_at_{k}_chance": float(v) for k, v in value.items()})
        else:
            out[prefix + key] = float(value)
    return out


class MIZScoreEMA:
    """MI-ZScore with an exponential moving average of the batch scale (docs/science.md section 2).

        sigma_ema(t) = alpha * sigma_ema(t-1) + (1 - alpha) * sigma_batch(t),  sigma_ema(1) = sigma_batch(1)
        MI-ZScore-EMA(t) = MI-Est(t) / (sigma_ema(t) + eps)

    with sigma_batch the population std of the per-token marginal values (``mi_proxies(...)["marginal_std"]``).

    Args:
        alpha: smoothing in [0, 1) (paper: 0.9).
        eps: non-negative constant (paper: 1e-3).
    """

    def __init__(self, alpha: float = 0.9, eps: float = 1e-3) -> None:
        self.alpha = as_number("alpha", alpha, 0.0, 1.0, high_open=True)
        self.eps = as_number("eps", eps, 0.0)  # finite: eps=inf made every z-score 0
        self.sigma: float | None = None
        self.steps = 0

    def update(self, stats: Mapping[str, float]) -> float:
        """Fold in one batch (``stats`` from :func:`mi_proxies`) and return its MI-ZScore-EMA."""
        for key in ("mi_est", "marginal_std"):
            if key not in stats:
                raise ValueError(f"stats must contain {key!r} (the output of mi_proxies); got keys {sorted(stats)}")
        sigma_batch = float(stats["marginal_std"])
        if self.sigma is None:
            self.sigma = sigma_batch
        else:
            self.sigma = self.alpha * self.sigma + (1.0 - self.alpha) * sigma_batch
        self.steps += 1
        return zscore(float(stats["mi_est"]), self.sigma, self.eps)

    def state_dict(self) -> dict[str, Any]:
        """Checkpointable state."""
        return {"alpha": self.alpha, "eps": self.eps, "sigma": self.sigma, "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.alpha, self.eps = float(state["alpha"]), float(state["eps"])
        self.sigma = None if state["sigma"] is None else float(state["sigma"])
        self.steps = int(state["steps"])


# --------------------------------------------------------------------------------------------------------------
# Cross-scoring with a causal LM
# --------------------------------------------------------------------------------------------------------------


def _to_ids(seq: Any, tokenizer: Any, what: str) -> torch.Tensor:
    if isinstance(seq, str):
        if tokenizer is None:
            raise ValueError(f"{what} is text; pass tokenizer= to tokenise it, or pass token ids")
        seq = tokenizer(seq, add_special_tokens=False)["input_ids"]
    t = torch.as_tensor(seq, dtype=torch.long)
    if t.dim() != 1:
        raise ValueError(f"{what} must be a 1-D sequence of token ids; got shape {tuple(t.shape)}")
    return t


def _normalise_inputs(
    prompts: Any, responses: Any, prompt_mask: Any, response_mask: Any, tokenizer: Any
) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """Return unpadded prompt ids [P] and response ids [P][G] (1-D LongTensors) from lists or padded tensors."""
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() != 2:
            raise ValueError(f"prompts as a tensor must be padded ids [P, Tx]; got shape {tuple(prompts.shape)}")
        pm = torch.ones_like(prompts, dtype=torch.bool) if prompt_mask is None else torch.as_tensor(prompt_mask) != 0
        if pm.shape != prompts.shape:
            raise ValueError(f"prompt_mask must match prompts {tuple(prompts.shape)}; got {tuple(pm.shape)}")
        xs = [prompts[i][pm[i]].long() for i in range(prompts.shape[0])]
    else:
        if prompt_mask is not None:
            raise ValueError("prompt_mask is only accepted with a padded prompts tensor [P, Tx]")
        xs = [_to_ids(x, tokenizer, f"prompts[{i}]") for i, x in enumerate(prompts)]
    p = len(xs)
    if p < 1:
        raise ValueError("prompts must hold at least one prompt (P >= 1)")
    for i, x in enumerate(xs):
        if x.numel() == 0:
            raise ValueError(f"prompts[{i}] is empty; every prompt needs at least one token")

    if isinstance(responses, torch.Tensor):
        if responses.dim() != 3 or responses.shape[0] != p:
            raise ValueError(f"responses as a tensor must be padded ids [P, G, Tz] with P={p}; got shape "
                             f"{tuple(responses.shape)}")
        rm = (torch.ones_like(responses, dtype=torch.bool) if response_mask is None
              else torch.as_tensor(response_mask) != 0)
        if rm.shape != responses.shape:
            raise ValueError(f"response_mask must match responses {tuple(responses.shape)}; got {tuple(rm.shape)}")
        zs = [[responses[i, k][rm[i, k]].long() for k in range(responses.shape[1])] for i in range(p)]
    else:
        if response_mask is not None:
            raise ValueError("response_mask is only accepted with a padded responses tensor [P, G, Tz]")
        if len(responses) != p:
            raise ValueError(f"responses must hold one group per prompt (P={p} groups); got {len(responses)}")
        zs = [[_to_ids(z, tokenizer, f"responses[{i}][{k}]") for k, z in enumerate(group)]
              for i, group in enumerate(responses)]
    sizes = {len(group) for group in zs}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"every prompt group needs the same number G >= 1 of responses; got sizes {sorted(sizes)}")
    return xs, zs


def _check_ids(model: torch.nn.Module, xs: list[torch.Tensor], zs: list[list[torch.Tensor]]) -> None:
    """ValueError naming the first prompt or trace holding a token id outside ``[0, V)`` of `model`'s input
    embedding (an IndexError deep in the embedding otherwise, or a wrong row on some devices). Models without an
    input embedding of their own are not checked."""
    get = getattr(model, "get_input_embeddings", None)
    try:
        weight = getattr(get(), "weight", None) if callable(get) else None
    except (NotImplementedError, AttributeError):
        weight = None
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return
    vocab = int(weight.shape[0])
    every = torch.cat([x.reshape(-1) for x in xs] + [z.reshape(-1) for group in zs for z in group])
    if not every.numel() or (int(every.min()) >= 0 and int(every.max()) < vocab):
        return  # one pass over all ids; the culprit is looked for only when there is one
    named = [(f"prompts[{i}]", x) for i, x in enumerate(xs)]
    named += [(f"responses[{i}][{k}]", z) for i, group in enumerate(zs) for k, z in enumerate(group)]
    for name, ids in named:
        outside = ids[(ids < 0) | (ids >= vocab)]
        if outside.numel():
            raise ValueError(f"{name} holds token id {int(outside[0])}, outside the model's vocabulary [0, {vocab})")


#: Names of learned position tables (GPT-2 and GPT-Neo's ``wpe``, OPT and BioGPT's ``embed_positions``, BERT-style
#: ``position_embeddings``): the last part of the module's name.
POSITION_TABLE_NAMES = ("wpe", "embed_positions", "position_embeddings")


def learned_position_limit(model: Any) -> int | None:
    """How many positions `model` (a torch module) embeds when it looks them up in a learned table (an embedding
    named as in :data:`POSITION_TABLE_NAMES`, of the config's ``max_position_embeddings`` rows, OPT's 2 offset rows
    allowed): a position id at or past it indexes outside the table, an IndexError deep in torch on a CPU and a
    device-side assert on CUDA. None for models that compute their positions (RoPE, ALiBi: any position runs, see
    ragen_core.limits). Read off the modules."""
    cfg = getattr(model, "config", None)
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return None
    for name, mod in model.named_modules():
        rows = getattr(mod, "num_embeddings", None)
        if (type(mod).__name__ == "Embedding" and isinstance(rows, int)
                and name.rsplit(".", 1)[-1] in POSITION_TABLE_NAMES and limit <= rows <= limit + 2):
            return limit
    return None


def _check_positions(model: torch.nn.Module, xs: list[torch.Tensor], zs: list[list[torch.Tensor]]) -> None:
    """ValueError naming the longest prompt + trace pair when it needs more positions than `model`'s learned position
    table holds (GPT-2's ``wpe``: an IndexError deep in the embedding otherwise; a device-side assert on CUDA).
    Models that compute their positions (RoPE) are not limited (:func:`ragen_core.limits.learned_position_limit`)."""
    limit = learned_position_limit(model)
    if limit is None:
        return
    i = max(range(len(xs)), key=lambda j: xs[j].numel())
    longest = max((z.numel() for group in zs for z in group), default=0)
    if xs[i].numel() + longest > limit:
        raise ValueError(f"prompts[{i}] ({xs[i].numel()} tokens) with the longest trace ({longest} tokens) needs "
                         f"{xs[i].numel() + longest} positions, but {type(model).__name__} embeds only {limit} (a "
                         f"learned position table: config max_position_embeddings = {limit}); shorten them")


def _forward_kwargs(model: torch.nn.Module) -> tuple[str, bool]:
    """Name of the cache argument (``cache`` in transformers >= 5.x, else ``past_key_values``) and whether the
    model accepts ``logits_to_keep``."""
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    return cache_arg, "logits_to_keep" in params


def _output_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if cache is None:
        raise ValueError("model did not return a KV cache (use_cache=True); cross_score needs a causal LM with a cache")
    return cache


def _expand_cache(prompt_cache: Any, batch: int) -> Any:
    """A fresh cache holding the prompt's keys/values repeated ``batch`` times along the batch dimension.

    Plain full-attention layers get a stride-0 ``expand`` view (no copy; the model's first ``cat`` with the new
    keys materialises it once). Other layer types (sliding window, ...) use the public
    ``batch_repeat_interleave``. The prompt cache itself is never modified.
    """
    cache = copy.copy(prompt_cache)
    layers = getattr(prompt_cache, "layers", None)
    if layers is not None:
        cache.layers = [copy.copy(layer) for layer in layers]
        for layer in cache.layers:
            keys = getattr(layer, "keys", None)
            values = getattr(layer, "values", None)
            simple = type(layer).__name__ == "DynamicLayer"
            if simple and isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() == 4:
                layer.keys = keys.expand(batch, *keys.shape[1:])
                layer.values = values.expand(batch, *values.shape[1:])
            elif hasattr(layer, "batch_repeat_interleave"):
                layer.batch_repeat_interleave(batch)
            else:  # pragma: no cover - unknown layer types
                raise ValueError(f"cannot expand a KV cache layer of type {type(layer).__name__}")
        return cache
    if hasattr(prompt_cache, "key_cache"):  # pragma: no cover - transformers < 4.56
        cache.key_cache = [k.expand(batch, *k.shape[1:]) for k in prompt_cache.key_cache]
        cache.value_cache = [v.expand(batch, *v.shape[1:]) for v in prompt_cache.value_cache]
        return cache
    cache = copy.deepcopy(prompt_cache)  # pragma: no cover
    cache.batch_repeat_interleave(batch)  # pragma: no cover
    return cache  # pragma: no cover


def _check_budget(batch_tokens: int | None, allow_none: bool) -> None:
    if batch_tokens is None and allow_none:
        return
    if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) or batch_tokens < 1:
        raise ValueError(f"batch_tokens must be a positive integer (tokens per forward call); got {batch_tokens!r}")


def _chunks(order: list[int], lengths: list[int], extra: int, budget: int) -> list[list[int]]:
    """Greedy chunks of ``order`` (sorted by decreasing length) with rows * (extra + max len) <= budget."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for idx in order:
        new_max = max(cur_max, lengths[idx])
        if cur and (len(cur) + 1) * (extra + new_max) > budget:
            chunks.append(cur)
            cur, new_max = [], lengths[idx]
        cur.append(idx)
        cur_max = new_max
    if cur:
        chunks.append(cur)
    return chunks


def _pad_right(seqs: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(s.numel() for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : s.numel()] = s
        mask[r, : s.numel()] = 1
    return ids.to(device), mask.to(device)


class _EvalMode:
    """Context manager: model.eval() + no_grad, restoring the training flag afterwards."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.was_training = model.training
        self.no_grad = torch.no_grad()

    def __enter__(self) -> None:
        self.model.eval()
        self.no_grad.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.no_grad.__exit__(*exc)
        self.model.train(self.was_training)


def _flat_traces(zs: list[list[torch.Tensor]]) -> tuple[list[torch.Tensor], list[int], list[int]]:
    """The P*G traces in one list (row ``i * G + k``), their lengths, and the batching order of the
    non-empty ones (longest first, ties by row) shared by both cross-scoring paths."""
    flat = [z for group in zs for z in group]
    lens = [int(z.numel()) for z in flat]
    order = sorted((i for i in range(len(flat)) if lens[i] > 0), key=lambda i: (-lens[i], i))
    return flat, lens, order


def _scores(
    out_l: torch.Tensor, lens: list[int], p: int, g: int, return_lengths: bool
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``out_l`` ``[P*G, P]`` as ``L`` ``[P, G, P]``, with the trace lengths ``[P, G]`` when asked."""
    L = out_l.reshape(p, g, p)
    if return_lengths:
        return L, torch.tensor(lens, dtype=torch.long).reshape(p, g)
    return L


def _new_stats(stats: dict[str, float] | None) -> dict[str, float]:
    if stats is None:
        stats = {}
    for key in ("forward_calls", "prompt_tokens", "response_tokens", "padded_positions"):
        stats[key] = 0
    return stats


def cross_score(
    model: torch.nn.Module,
    prompts: Any,
    responses: Any,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    *,
    prompt_mask: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
    tokenizer: Any = None,
    return_lengths: bool = False,
    stats: dict[str, float] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Cross-score every trace under every prompt, reusing each prompt's KV cache (docs/science.md section 2).

        L[i, k, j] = log p(z_ik | x_j) = sum_t log p(z_ik,t | x_j, z_ik,<t)

    For each prompt x_j: one forward pass over x_j alone (its KV cache, and the logits of its last token,
    which score the first token of every trace); then all P*G traces, sorted by length and right-padded, in
    batches of at most ``batch_tokens`` (rows x (|x_j| + longest trace of the batch)) against that cache
    expanded along the batch dimension, with the attention mask ``[1]*|x_j| + response mask`` and position ids
    ``|x_j| + t``. Prompts of different lengths need no padding: each prompt's cache is processed on its own.
    The work is P prompt passes plus the physical floor of P*P*G*|z| trace positions (the naive path computes
    P*P*G*(|x| + |z|)).

    Args:
        model: any transformers causal LM (``model(input_ids, attention_mask, position_ids, cache/past_key_values,
            use_cache=True)`` returning ``logits`` and a ``DynamicCache``). Put in eval mode for the call (the
            training flag is restored) and run under ``torch.no_grad``.
        prompts: P prompts: a list of token-id sequences (lists or 1-D tensors), of strings (with
            ``tokenizer``), or a padded LongTensor ``[P, Tx]`` with ``prompt_mask`` (left or right padding).
        responses: P groups of G traces: nested lists ``[P][G]`` of token ids / strings, or a padded LongTensor
            ``[P, G, Tz]`` with ``response_mask`` (any padding side). Empty traces score 0.
        batch_tokens: token budget of one forward call (positive int; at least one trace per call).
        prompt_mask, response_mask: padding masks for tensor inputs (non-zero = real token).
        tokenizer: a transformers tokenizer for text inputs (``add_special_tokens=False``; prompt and trace
            are tokenised separately, as a trainer generates trace tokens after prompt tokens).
        return_lengths: also return ``lengths`` ``[P, G]`` (|z_ik|, int64).
        stats: optional dict filled with ``forward_calls``, ``prompt_tokens``, ``response_tokens`` (trace
            positions scored, summed over prompts) and ``padded_positions`` (positions computed, padding included).

    Returns:
        ``L`` float64 ``[P, G, P]`` (token log-probs in fp32 or the model's dtype, summed in fp64), and
        ``lengths`` when asked.
    """
    _check_budget(batch_tokens, allow_none=False)
    xs, zs = _normalise_inputs(prompts, responses, prompt_mask, response_mask, tokenizer)
    _check_ids(model, xs, zs)
    _check_positions(model, xs, zs)
    p, g = len(xs), len(zs[0])
    flat, lens, order = _flat_traces(zs)
    device = next(model.parameters()).device
    cache_arg, has_keep = _forward_kwargs(model)
    st = _new_stats(stats)
    out_l = torch.zeros(p * g, p, dtype=torch.float64)

    with _EvalMode(model):
        for j, x in enumerate(xs):
            kwargs: dict[str, Any] = {"use_cache": True}
            if has_keep:
                kwargs["logits_to_keep"] = 1
            out = model(input_ids=x[None].to(device), **kwargs)
            st["forward_calls"] += 1
            st["prompt_tokens"] += x.numel()
            st["padded_positions"] += x.numel()
            first_logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # [V]: scores each trace's 1st token
            prompt_cache = _output_cache(out)
            lx = x.numel()
            for chunk in _chunks(order, lens, lx, batch_tokens):
                ids, mask = _pad_right([flat[i] for i in chunk], device)
                b, lz = ids.shape
                attn = torch.cat([torch.ones(b, lx, dtype=mask.dtype, device=device), mask], dim=1)
                pos = torch.arange(lx, lx + lz, device=device)[None].expand(b, lz)
                res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True,
                            **{cache_arg: _expand_cache(prompt_cache, b)})
                st["forward_calls"] += 1
                st["response_tokens"] += int(mask.sum())
                st["padded_positions"] += b * lz
                tok = _token_logprobs(res.logits[:, :-1], ids[:, 1:])  # [b, lz-1]
                first = first_logp[ids[:, 0]]
                seq = first.double() + (tok.double() * mask[:, 1:]).sum(dim=1)
                out_l[torch.tensor(chunk), j] = seq.cpu()
    return _scores(out_l, lens, p, g, return_lengths)


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[targets] in fp32: logits ``[b, t, V]``, targets ``[b, t]`` -> ``[b, t]``."""
    lf = logits.float()
    return lf.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(lf, dim=-1)


def cross_score_naive(
    model: torch.nn.Module,
    prompts: Any,
    responses: Any,
    batch_tokens: int | None = None,
    *,
    prompt_mask: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
    tokenizer: Any = None,
    return_lengths: bool = False,
    stats: dict[str, float] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Reference cross-scoring: re-encode prompt + trace for every pair (the official code's cost).

        L[i, k, j] = sum_t log p(z_ik,t | x_j, z_ik,<t),   from one teacher-forced pass over concat(x_j, z_ik)

    With ``batch_tokens=None`` (the reference used in tests) every pair is its own unpadded forward call, no
    cache and no mask, so nothing about padding or caching can be wrong. With a budget, the concatenations
    for one prompt are right-padded and batched like :func:`cross_score` (the fair baseline for benchmarks).

    Arguments and return value as :func:`cross_score`.
    """
    _check_budget(batch_tokens, allow_none=True)
    xs, zs = _normalise_inputs(prompts, responses, prompt_mask, response_mask, tokenizer)
    _check_ids(model, xs, zs)
    _check_positions(model, xs, zs)
    p, g = len(xs), len(zs[0])
    flat, lens, order = _flat_traces(zs)
    device = next(model.parameters()).device
    st = _new_stats(stats)
    out_l = torch.zeros(p * g, p, dtype=torch.float64)
    with _EvalMode(model):
        for j, x in enumerate(xs):
            lx = x.numel()
            if batch_tokens is None:
                for r, z in enumerate(flat):
                    if z.numel() == 0:
                        continue
                    seq = torch.cat([x, z])[None].to(device)
                    logits = model(input_ids=seq, use_cache=False).logits
                    st["forward_calls"] += 1
                    st["prompt_tokens"] += lx
                    st["response_tokens"] += z.numel()
                    st["padded_positions"] += seq.shape[1]
                    tok = _token_logprobs(logits[:, lx - 1 : -1], seq[:, lx:])
                    out_l[r, j] = float(tok.double().sum())
                continue
            for chunk in _chunks(order, lens, lx, batch_tokens):
                ids, mask = _pad_right([torch.cat([x, flat[i]]) for i in chunk], device)
                b, t = ids.shape
                logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
                st["forward_calls"] += 1
                st["prompt_tokens"] += b * lx
                st["response_tokens"] += int(mask.sum()) - b * lx
                st["padded_positions"] += b * t
                tok = _token_logprobs(logits[:, lx - 1 : -1], ids[:, lx:])
                out_l[torch.tensor(chunk), j] = (tok.double() * mask[:, lx:]).sum(dim=1).cpu()
    return _scores(out_l, lens, p, g, return_lengths)
