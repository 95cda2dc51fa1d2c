"""Tests that pin the details of ragen_core/math/mi.py a code mutation could change without failing the unit tests
(mutmut; see docs/theory_report/mutation.md): every error message in full, the boundaries of each argument
check, defaults, the truncation of the lists of bad rows, the dtype of the proxies, the EMA state, the chance
level of Recall@k, and the work counters and cache handling of the cross-scoring paths.

References are independent of the module: plain loops, exact enumeration of subsets, and counters derived from
the docstrings' rules.
"""

from __future__ import annotations

import itertools
import math
import types

import pytest
import torch

from ragen_core.math import mi
from ragen_core.math.mi import MIZScoreEMA, cross_score, cross_score_naive, flatten_proxies, mi_proxies, zscore

# --------------------------------------------------------------------------------------------------------------
# mi_proxies: validation messages and boundaries
# --------------------------------------------------------------------------------------------------------------


def _raises(fn, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        fn()


def test_shape_checks_name_the_shapes_and_accept_the_smallest_batch() -> None:
    _raises(lambda: mi_proxies(torch.zeros(3, 2, 4), torch.ones(3, 2)),
            r"^L must be \[P, G, P\] with P, G >= 1; got shape \(3, 2, 4\)$")
    _raises(lambda: mi_proxies(torch.zeros(0, 2, 0), torch.ones(0, 2)), r"^L must be .*got shape \(0, 2, 0\)$")
    _raises(lambda: mi_proxies(torch.zeros(2, 0, 2), torch.ones(2, 0)), r"^L must be .*got shape \(2, 0, 2\)$")
    _raises(lambda: mi_proxies(torch.zeros(3, 2, 3), torch.ones(2, 3)),
            r"^lengths must be \[P, G\] = \[3, 2\] to match L; got shape \(2, 3\)$")
    _raises(lambda: mi_proxies(torch.zeros(3, 2, 3), torch.full((3, 2), math.inf)),
            r"^lengths must be finite and > 0 \(every scored trace needs at least one token\)$")
    _raises(lambda: mi_proxies(torch.zeros(3, 2, 3), torch.tensor([[1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])),
            r"^lengths must be finite and > 0")
    # P = G = 1 is a valid batch: one trace, one prompt; lengths just above 0 are valid
    s = mi_proxies(torch.zeros(1, 1, 1), torch.full((1, 1), 0.5))
    assert s["n_prompts"] == 1 and s["group_size"] == 1 and s["mi_est"] == 0.0 and s["marginal_std"] == 0.0


def _bad_rows_message(rows: list[tuple[int, int]], head: str, tail: str) -> str:
    shown = ", ".join(f"({i}, {k})" for i, k in rows[:10]) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")
    return f"{head} in {len(rows)} row(s) (i, k) = {shown}{tail}"


@pytest.mark.parametrize("n_bad", [1, 10, 11])
def test_the_message_for_invalid_scores_is_exact_and_truncated_after_ten_rows(n_bad: int) -> None:
    p, g = 4, 3
    L = torch.zeros(p, g, p, dtype=torch.float64)
    rows = [(i, k) for i in range(p) for k in range(g)][:n_bad]
    for i, k in rows:
        L[i, k, (i + 1) % p] = math.nan
    want = _bad_rows_message(rows, "L has NaN, +inf or all -inf scores",
                             " (prompt i, trace k); every MI output would be NaN: re-score or drop those traces")
    with pytest.raises(ValueError) as err:
        mi_proxies(L, torch.ones(p, g))
    assert str(err.value) == want


@pytest.mark.parametrize("n_bad", [1, 10, 11])
def test_the_message_for_a_trace_impossible_under_its_own_prompt_is_exact(n_bad: int) -> None:
    p, g = 4, 3
    L = torch.zeros(p, g, p, dtype=torch.float64)
    rows = [(i, k) for i in range(p) for k in range(g)][:n_bad]
    for i, k in rows:
        L[i, k, i] = -math.inf
    want = _bad_rows_message(rows, "L[i, k, i] is -inf",
                             ": a trace impossible under its own prompt (scorer and sampler disagree); MI-Est would "
                             "be -inf: re-score or drop them")
    with pytest.raises(ValueError) as err:
        mi_proxies(L, torch.ones(p, g))
    assert str(err.value) == want


def test_eps_bounds_and_message() -> None:
    L = torch.zeros(2, 1, 2)
    _raises(lambda: mi_proxies(L, torch.ones(2, 1), eps=-0.1), r"^eps must be >= 0; got -0\.1$")
    _raises(lambda: mi_proxies(L, torch.ones(2, 1), eps=math.nan), r"^eps must be >= 0; got nan$")
    assert mi_proxies(L, torch.ones(2, 1), eps=0.0)["mi_zscore"] == 0.0


def test_prompt_ids_message_and_tensor_ids() -> None:
    _raises(lambda: mi_proxies(torch.zeros(3, 1, 3), torch.ones(3, 1), prompt_ids=[1, 2]),
            r"^prompt_ids must have P=3 entries \(one per prompt\); got 2$")
    L = torch.zeros(3, 1, 3, dtype=torch.float64)
    L[:, 0, 0] = 1.0  # every trace retrieves prompt 0
    assert mi_proxies(L, torch.ones(3, 1), prompt_ids=torch.tensor([5, 5, 6]))["retrieval_acc"] == pytest.approx(2 / 3)


def test_nested_lists_and_float32_scores_are_computed_in_float64() -> None:
    # L as nested lists and lengths as lists are accepted; float32 scores are widened before any arithmetic, so
    # the result equals the float64 loop over the same (float32-representable) numbers to 1e-12
    gen = torch.Generator().manual_seed(3)
    L32 = (-torch.rand(3, 2, 3, generator=gen) * 40).to(torch.float32)
    n = [[3, 7], [1, 12], [5, 2]]
    Lf = L32.double().tolist()
    lse = [[math.log(sum(math.exp(x) for x in Lf[i][k]) / 3) for k in range(2)] for i in range(3)]
    want_seq = sum(Lf[i][k][i] - lse[i][k] for i in range(3) for k in range(2)) / 6
    want_tok = sum((Lf[i][k][i] - lse[i][k]) / n[i][k] for i in range(3) for k in range(2)) / 6
    for L in (L32, L32.tolist()):
        s = mi_proxies(L, n)
        assert s["mi_seq_est"] == pytest.approx(want_seq, abs=1e-12)
        assert s["mi_est"] == pytest.approx(want_tok, abs=1e-12)


@pytest.mark.parametrize("p, g", [(1, 2), (2, 1)])
def test_marginal_std_of_two_terms(p: int, g: int) -> None:
    # two marginal terms: the population std is half their distance
    L = torch.tensor([[-1.0, -3.0], [-2.0, -6.0]], dtype=torch.float64).reshape(p, g, p) if p == 2 else \
        torch.tensor([[[-1.0], [-4.0]]], dtype=torch.float64)
    n = torch.ones(p, g)
    lse = [math.log(sum(math.exp(x) for x in row) / p) for row in L.reshape(p * g, p).tolist()]
    assert mi_proxies(L, n)["marginal_std"] == pytest.approx(abs(lse[0] - lse[1]) / 2, abs=1e-12)


def _brute_recall_chance(p: int, m: int, k: int) -> float:
    """P(one of the m equivalent prompts 0..m-1 is among k of p drawn without replacement), by enumeration."""
    k = min(k, p)
    subsets = list(itertools.combinations(range(p), k))
    return sum(any(j < m for j in s) for s in subsets) / len(subsets)


def test_recall_chance_matches_enumeration_for_every_k_including_k_at_least_p() -> None:
    for p in range(1, 7):
        for m in range(1, p + 1):
            for k in range(1, p + 3):
                assert mi._recall_chance(p, m, k) == pytest.approx(_brute_recall_chance(p, m, k), abs=1e-12)


# --------------------------------------------------------------------------------------------------------------
# zscore, flatten_proxies, MIZScoreEMA
# --------------------------------------------------------------------------------------------------------------


def test_zscore_values() -> None:
    assert zscore(1.0, 1.0, 1.0) == 0.5
    assert zscore(1.0, 0.0, 1e-300) == pytest.approx(1e300)  # a tiny positive denominator is still a division
    assert zscore(-0.0, 0.0, 0.0) == 0.0
    assert math.isnan(zscore(0.25, 0.0, 0.0))
    assert isinstance(zscore(1, 1, 1), float)


def test_flatten_proxies_keys_and_prefix() -> None:
    s = mi_proxies(torch.zeros(9, 1, 9), torch.ones(9, 1))
    flat = flatten_proxies(s, prefix="x.")
    nested = {"recall_at_k", "recall_at_k_chance"}
    want = {f"x.{k}" for k in s if k not in nested}
    want |= {f"x.recall_at_{k}" for k in (2, 4, 8)} | {f"x.recall_at_{k}_chance" for k in (2, 4, 8)}
    assert set(flat) == want
    assert flat["x.recall_at_8"] == s["recall_at_k"][8] and flat["x.recall_at_8_chance"] == s["recall_at_k_chance"][8]
    assert flat["x.n_prompts"] == 9.0 and type(flat["x.n_prompts"]) is float
    assert set(flatten_proxies(s)) == {"collapse/" + k[2:] for k in want}


def test_ema_argument_checks_and_boundaries() -> None:
    _raises(lambda: MIZScoreEMA(alpha=1.0), r"^alpha must be in \[0, 1\); got 1\.0$")
    _raises(lambda: MIZScoreEMA(alpha=-0.1), r"^alpha must be in \[0, 1\); got -0\.1$")
    _raises(lambda: MIZScoreEMA(alpha=math.nan), r"^alpha must be in \[0, 1\)")
    _raises(lambda: MIZScoreEMA(eps=-1), r"^eps must be >= 0; got -1$")
    _raises(lambda: MIZScoreEMA(eps=math.nan), r"^eps must be >= 0; got nan$")
    _raises(lambda: MIZScoreEMA().update({"marginal_std": 1.0}),
            r"^stats must contain 'mi_est' \(the output of mi_proxies\); got keys \['marginal_std'\]$")
    _raises(lambda: MIZScoreEMA().update({"mi_est": 0.1}),
            r"^stats must contain 'marginal_std' \(the output of mi_proxies\); got keys \['mi_est'\]$")
    # alpha = 0 is allowed: sigma_ema is the latest batch's sigma
    ema = MIZScoreEMA(alpha=0.0, eps=0.0)
    ema.update({"mi_est": 1.0, "marginal_std": 4.0})
    assert ema.update({"mi_est": 1.0, "marginal_std": 2.0}) == 0.5


def test_ema_defaults_are_alpha_0_9_and_eps_1e_3_and_the_state_round_trips() -> None:
    ema = MIZScoreEMA()
    assert (ema.alpha, ema.eps, ema.sigma, ema.steps) == (0.9, 1e-3, None, 0)
    assert ema.state_dict() == {"alpha": 0.9, "eps": 1e-3, "sigma": None, "steps": 0}
    ema.update({"mi_est": 0.3, "marginal_std": 1.0})
    z = ema.update({"mi_est": 0.3, "marginal_std": 2.0})
    assert z == pytest.approx(0.3 / (0.9 * 1.0 + 0.1 * 2.0 + 1e-3), abs=1e-15)
    state = ema.state_dict()
    assert state == {"alpha": 0.9, "eps": 1e-3, "sigma": pytest.approx(1.1, abs=1e-15), "steps": 2}
    other = MIZScoreEMA(alpha=0.5, eps=0.5)
    other.load_state_dict(state)
    assert other.state_dict() == state and type(other.steps) is int and type(other.sigma) is float
    assert other.update({"mi_est": 0.3, "marginal_std": 2.0}) == ema.update({"mi_est": 0.3, "marginal_std": 2.0})
    fresh = MIZScoreEMA()
    fresh.load_state_dict({"alpha": "0.5", "eps": "0", "sigma": None, "steps": "0"})
    assert (fresh.alpha, fresh.eps, fresh.sigma, fresh.steps) == (0.5, 0.0, None, 0)


# --------------------------------------------------------------------------------------------------------------
# Cross-scoring: inputs, budgets, work counters, cache handling
# --------------------------------------------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")
VOCAB = 37


@pytest.fixture(scope="module")
def lm() -> torch.nn.Module:
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   attention_dropout=0.5)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        return transformers.Qwen2ForCausalLM(cfg).eval()


def _batch() -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen) for n in (2, 5, 3)]
    lens = [[4, 1], [3, 6], [2, 5]]
    return prompts, [[torch.randint(0, VOCAB, (n,), generator=gen) for n in row] for row in lens]


def _greedy_chunks(lengths: list[int], extra: int, budget: int) -> list[list[int]]:
    """The docstring's batching: traces by decreasing length (ties by row), a new batch whenever one more row
    would exceed rows * (extra + longest) > budget."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    order = [i for i in order if lengths[i] > 0]
    out: list[list[int]] = []
    for i in order:
        if out and (len(out[-1]) + 1) * (extra + max(lengths[j] for j in out[-1] + [i])) <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


@pytest.mark.parametrize("budget", [1, 9, 14, 10_000])
def test_work_counters_follow_the_batching_rule(lm: torch.nn.Module, budget: int) -> None:
    prompts, responses = _batch()
    lens = [len(z) for grp in responses for z in grp]
    stats: dict = {"stale": 1}
    L = cross_score(lm, prompts, responses, batch_tokens=budget, stats=stats)
    calls = padded = 0
    for x in prompts:
        chunks = _greedy_chunks(lens, len(x), budget)
        calls += 1 + len(chunks)
        padded += len(x) + sum(len(c) * max(lens[i] for i in c) for c in chunks)
    assert stats == {"stale": 1, "forward_calls": calls, "prompt_tokens": sum(len(x) for x in prompts),
                     "response_tokens": len(prompts) * sum(lens), "padded_positions": padded}
    assert torch.allclose(L, cross_score_naive(lm, prompts, responses), atol=1e-4, rtol=0)


@pytest.mark.parametrize("budget", [None, 12])
def test_naive_work_counters(lm: torch.nn.Module, budget: int | None) -> None:
    prompts, responses = _batch()
    lens = [len(z) for grp in responses for z in grp]
    stats: dict = {}
    cross_score_naive(lm, prompts, responses, batch_tokens=budget, stats=stats)
    p, n = len(prompts), len(lens)
    if budget is None:
        want = {"forward_calls": p * n, "prompt_tokens": n * sum(len(x) for x in prompts),
                "response_tokens": p * sum(lens), "padded_positions": n * sum(len(x) for x in prompts) + p * sum(lens)}
    else:
        calls = padded = 0
        for x in prompts:
            chunks = _greedy_chunks(lens, len(x), budget)
            calls += len(chunks)
            padded += sum(len(c) * (len(x) + max(lens[i] for i in c)) for c in chunks)
        want = {"forward_calls": calls, "prompt_tokens": n * sum(len(x) for x in prompts),
                "response_tokens": p * sum(lens), "padded_positions": padded}
    assert stats == want


def test_scores_are_float64_and_lengths_int64(lm: torch.nn.Module) -> None:
    prompts, responses = _batch()
    for fn in (cross_score, cross_score_naive):
        L, n = fn(lm, prompts, responses, return_lengths=True)
        assert L.dtype == torch.float64 and L.shape == (3, 2, 3)
        assert n.dtype == torch.int64 and n.tolist() == [[4, 1], [3, 6], [2, 5]]
        assert isinstance(fn(lm, prompts, responses), torch.Tensor)


def test_scoring_runs_in_eval_mode(lm: torch.nn.Module) -> None:
    # the model has attention dropout 0.5: scored in training mode the result would be random
    prompts, responses = _batch()
    ref = cross_score(lm, prompts, responses)
    lm.train()
    try:
        torch.manual_seed(0)
        a = cross_score(lm, prompts, responses)
        b = cross_score_naive(lm, prompts, responses)
        assert lm.training
    finally:
        lm.eval()
    assert torch.equal(a, ref)
    assert torch.allclose(b, ref, atol=1e-4, rtol=0)


def test_the_expanded_cache_is_a_view_and_the_prompt_cache_is_untouched(lm: torch.nn.Module) -> None:
    out = lm(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    cache = mi._output_cache(out)
    keys = [layer.keys.clone() for layer in cache.layers]
    big = mi._expand_cache(cache, 4)
    for layer, before, orig in zip(big.layers, keys, cache.layers):
        assert layer.keys.shape[0] == 4 and layer.keys.stride(0) == 0 and layer.values.stride(0) == 0
        assert orig.keys.shape[0] == 1 and torch.equal(orig.keys, before)
        assert layer.keys.data_ptr() == orig.keys.data_ptr()


def test_a_model_without_a_cache_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^model did not return a KV cache \(use_cache=True\); cross_score needs a "
                                         r"causal LM with a cache$"):
        mi._output_cache(types.SimpleNamespace(logits=None))
    assert mi._output_cache(types.SimpleNamespace(cache=None, past_key_values="pkv")) == "pkv"
    assert mi._output_cache(types.SimpleNamespace(cache="c", past_key_values="pkv")) == "c"


def test_forward_keyword_names() -> None:
    class New(torch.nn.Module):
        def forward(self, input_ids, cache=None, logits_to_keep=0):  # noqa: ANN001
            return input_ids

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None):  # noqa: ANN001
            return input_ids

    assert mi._forward_kwargs(New()) == ("cache", True)
    assert mi._forward_kwargs(Old()) == ("past_key_values", False)


def test_budget_messages_and_types(lm: torch.nn.Module) -> None:
    prompts, responses = _batch()
    msg = r"^batch_tokens must be a positive integer \(tokens per forward call\); got {}$"
    for bad, shown in ((0, "0"), (True, "True"), (2.5, "2.5"), (None, "None")):
        _raises(lambda bad=bad: cross_score(lm, prompts, responses, batch_tokens=bad), msg.format(shown))
    _raises(lambda: cross_score_naive(lm, prompts, responses, batch_tokens=0), msg.format("0"))
    mi._check_budget(1, allow_none=False)
    mi._check_budget(None, allow_none=True)


class _Tok:
    """A tokenizer stand-in: one id per character; records the keywords it was called with."""

    def __init__(self) -> None:
        self.kwargs: list[dict] = []

    def __call__(self, text: str, **kwargs) -> dict:  # noqa: ANN003
        self.kwargs.append(kwargs)
        return {"input_ids": [ord(c) % VOCAB for c in text]}


def test_text_inputs_are_tokenised_without_special_tokens(lm: torch.nn.Module) -> None:
    tok = _Tok()
    L = cross_score(lm, ["ab", "cde"], [["xy"], ["z"]], tokenizer=tok)
    ids = lambda s: torch.tensor([ord(c) % VOCAB for c in s])  # noqa: E731
    ref = cross_score_naive(lm, [ids("ab"), ids("cde")], [[ids("xy")], [ids("z")]])
    assert torch.allclose(L, ref, atol=1e-4, rtol=0)
    assert tok.kwargs and all(kw == {"add_special_tokens": False} for kw in tok.kwargs)


def test_input_messages(lm: torch.nn.Module) -> None:
    prompts, responses = _batch()
    cases = [
        (dict(prompts=["ab"], responses=[["x"]]),
         r"^prompts\[0\] is text; pass tokenizer= to tokenise it, or pass token ids$"),
        (dict(prompts=[[[1, 2]]], responses=[[[3]]]),
         r"^prompts\[0\] must be a 1-D sequence of token ids; got shape \(1, 2\)$"),
        (dict(prompts=[[1, 2]], responses=[[[[3]]]]),
         r"^responses\[0\]\[0\] must be a 1-D sequence of token ids; got shape \(1, 1\)$"),
        (dict(prompts=torch.zeros(2, 3, 1, dtype=torch.long), responses=responses[:2]),
         r"^prompts as a tensor must be padded ids \[P, Tx\]; got shape \(2, 3, 1\)$"),
        (dict(prompts=torch.ones(2, 3, dtype=torch.long), responses=responses[:2], prompt_mask=torch.ones(2, 2)),
         r"^prompt_mask must match prompts \(2, 3\); got \(2, 2\)$"),
        (dict(prompts=prompts, responses=responses, prompt_mask=torch.ones(3, 3)),
         r"^prompt_mask is only accepted with a padded prompts tensor \[P, Tx\]$"),
        (dict(prompts=[], responses=[]), r"^prompts must hold at least one prompt \(P >= 1\)$"),
        (dict(prompts=[prompts[0], torch.zeros(0, dtype=torch.long)], responses=responses[:2]),
         r"^prompts\[1\] is empty; every prompt needs at least one token$"),
        (dict(prompts=prompts, responses=torch.ones(2, 2, 3, dtype=torch.long)),
         r"^responses as a tensor must be padded ids \[P, G, Tz\] with P=3; got shape \(2, 2, 3\)$"),
        (dict(prompts=prompts, responses=torch.ones(3, 2, dtype=torch.long)),
         r"^responses as a tensor must be padded ids \[P, G, Tz\] with P=3; got shape \(3, 2\)$"),
        (dict(prompts=prompts, responses=torch.ones(3, 2, 4, dtype=torch.long), response_mask=torch.ones(3, 2, 3)),
         r"^response_mask must match responses \(3, 2, 4\); got \(3, 2, 3\)$"),
        (dict(prompts=prompts, responses=responses, response_mask=torch.ones(3, 2, 3)),
         r"^response_mask is only accepted with a padded responses tensor \[P, G, Tz\]$"),
        (dict(prompts=prompts, responses=responses[:2]),
         r"^responses must hold one group per prompt \(P=3 groups\); got 2$"),
        (dict(prompts=prompts, responses=[responses[0], responses[1][:1], responses[2]]),
         r"^every prompt group needs the same number G >= 1 of responses; got sizes \[1, 2\]$"),
        (dict(prompts=prompts, responses=[[], [], []]),
         r"^every prompt group needs the same number G >= 1 of responses; got sizes \[0\]$"),
    ]
    for kwargs, pattern in cases:
        for fn in (cross_score, cross_score_naive):
            _raises(lambda fn=fn, kwargs=kwargs: fn(lm, **kwargs), pattern)


def test_padded_tensors_without_masks_use_every_position(lm: torch.nn.Module) -> None:
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6]])
    responses = torch.tensor([[[7, 8], [9, 10]], [[11, 12], [13, 14]]])
    L = cross_score(lm, prompts, responses)
    ref = cross_score_naive(lm, [prompts[0], prompts[1]], [[z for z in grp] for grp in responses])
    assert torch.allclose(L, ref, atol=1e-4, rtol=0)
    # a mask of any non-zero value marks a real token
    L2 = cross_score(lm, prompts, responses, prompt_mask=torch.full((2, 3), 2), response_mask=torch.full((2, 2, 2), 7))
    assert torch.allclose(L2, ref, atol=1e-4, rtol=0)
