"""The lean forward (`ragen_core.policy.fast_qwen2`) against transformers' own forward.

Every number the lean forward produces is compared with the reference computed by transformers
(`HFPolicy.fast = False`: `Qwen2ForCausalLM.forward`), or with the naive cross-scoring that re-encodes every
(prompt, trace) pair: log-probs, entropies, gradients, sampled tokens and their log-probs, cross-scores.
"""

from __future__ import annotations

import copy
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.math.mi import cross_score_naive
from ragen_core.policy import HFPolicy, fast_qwen2
from ragen_core.policy.fast_qwen2 import FastQwen2, split_rows, unsupported_reason
from ragen_core.policy.tiny import default_tiny_model_dir

TOL = dict(rtol=1e-5, atol=2e-5)


@pytest.fixture(scope="module")
def policy(make_tiny_policy):
    return make_tiny_policy("Say go. value 12", hidden=32, layers=2, heads=4, kv_heads=2)


def _rows(gen: torch.Generator, lengths: list[int], shared: int = 0, vocab: int = 200):
    """Right-padded random rows; the first `shared` rows repeat row 0's first 70% (a shared prompt)."""
    b, t = len(lengths), max(lengths)
    ids = torch.zeros(b, t, dtype=torch.long)
    mask = torch.zeros(b, t, dtype=torch.long)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(5, vocab, (n,), generator=gen)
        mask[r, :n] = 1
    for r in range(1, shared):
        cut = min(int(0.7 * lengths[0]), lengths[r])
        ids[r, :cut] = ids[0, :cut]
    return ids, mask


def _both(policy: HFPolicy, fn):
    policy.fast = False
    try:
        ref = fn()
    finally:
        policy.fast = True
    return ref, fn()


def test_the_tiny_model_takes_the_lean_forward_and_others_say_why_not(policy, make_tiny_model):
    assert unsupported_reason(policy.model) is None
    vision = HFPolicy.from_pretrained(make_tiny_model("go", hidden=32, layers=1, heads=2, kv_heads=1, vision=True))
    assert "not a plain Qwen2ForCausalLM" in unsupported_reason(vision.model)
    assert vision._fast_model() is None
    sliding = copy.deepcopy(policy.model)
    sliding.config.layer_types = ["sliding_attention"] * len(sliding.config.layer_types)
    assert unsupported_reason(sliding) == "sliding-window layers"
    with pytest.raises(ValueError, match="sliding-window"):
        FastQwen2(sliding)
    policy.fast = False
    assert policy._fast_model() is None
    policy.fast = True


@pytest.mark.parametrize("case", ["all positions", "response only", "shared prompts", "loss from position 1",
                                  "a row with nothing scored", "temperature"])
def test_logprobs_and_entropy_equal_transformers(policy, case):
    gen = torch.Generator().manual_seed(zlib.crc32(case.encode()) % 1000)  # hash(case) differs per process
    lengths = [23, 17, 30, 30, 9, 26]
    ids, mask = _rows(gen, lengths, shared=4 if case == "shared prompts" else 0)
    score = None
    if case != "all positions":
        score = torch.zeros_like(mask)
        for r, n in enumerate(lengths):
            start = 1 if case == "loss from position 1" else int(0.7 * n)
            score[r, start:n] = 1
        if case == "a row with nothing scored":
            score[2] = 0
    temp = 0.7 if case == "temperature" else 1.0
    (ref, got) = _both(policy, lambda: policy.forward_logprobs(ids, mask, with_entropy=True, score_mask=score,
                                                               temperature=temp))
    torch.testing.assert_close(got.logprobs, ref.logprobs, **TOL)
    torch.testing.assert_close(got.entropy, ref.entropy, **TOL)
    if score is not None:  # nothing outside the asked positions
        assert float(got.logprobs.detach()[score == 0].abs().max()) == 0.0
        assert float(got.entropy.detach()[score == 0].abs().max()) == 0.0


def test_gradients_equal_transformers(policy):
    gen = torch.Generator().manual_seed(3)
    lengths = [20, 20, 20, 14, 25]
    ids, mask = _rows(gen, lengths, shared=3)
    score = torch.zeros_like(mask)
    for r, n in enumerate(lengths):
        score[r, n // 2 : n] = 1
    weights = torch.randn(ids.shape, generator=gen)

    def grads():
        policy.model.zero_grad(set_to_none=True)
        out = policy.forward_logprobs(ids, mask, with_entropy=True, score_mask=score)
        ((out.logprobs * weights).sum() + 0.1 * out.entropy.sum()).backward()
        return [p.grad.clone() for p in policy.model.parameters()]

    ref, got = _both(policy, grads)
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_left_padded_batches_fall_back_to_transformers(policy):
    gen = torch.Generator().manual_seed(4)
    ids, mask = _rows(gen, [10, 6])
    left_ids, left_mask = torch.zeros_like(ids), torch.zeros_like(mask)
    left_ids[0], left_mask[0] = ids[0], mask[0]
    left_ids[1, 4:], left_mask[1, 4:] = ids[1, :6], 1
    ref, got = _both(policy, lambda: policy.forward_logprobs(left_ids, left_mask))
    torch.testing.assert_close(got.logprobs, ref.logprobs, **TOL)


@pytest.mark.parametrize("mode", ["sampled", "greedy", "top_p", "one token"])
def test_generation_equals_transformers(policy, mode):
    """Same generator seed, same prompts (some repeated, of different lengths): the same tokens, texts, finish
    reasons and sampling log-probs on both paths."""
    tok = policy.tokenizer
    base = [policy.encode_chat([{"role": "user", "content": f"value {v}. Say go."}]) for v in (1, 22, 333)]
    prompts = [base[0], base[1], base[0], base[2], base[0], base[1]]
    kw = dict(max_new_tokens=1 if mode == "one token" else 24, greedy=mode == "greedy",
              top_p=0.8 if mode == "top_p" else 1.0, stop=("go",))

    def run():
        return policy.generate(prompts, generator=torch.Generator().manual_seed(7), **kw)

    ref, got = _both(policy, run)
    assert [g.response_ids for g in got] == [g.response_ids for g in ref]
    assert [g.text for g in got] == [g.text for g in ref]
    assert [g.finish_reason for g in got] == [g.finish_reason for g in ref]
    for a, b in zip(ref, got):
        torch.testing.assert_close(torch.tensor(b.response_logprobs), torch.tensor(a.response_logprobs), **TOL)
    assert tok is policy.tokenizer


def test_generation_leaves_the_sampler_where_transformers_leaves_it(policy):
    """One uniform per sequence per step, finished sequences included: the generator's state afterwards is the
    same on both paths, so the next rollout draws the same numbers."""
    prompts = [policy.encode_chat([{"role": "user", "content": f"value {v}"}]) for v in (5, 50, 500, 5)]

    def run():
        gen = torch.Generator().manual_seed(11)
        policy.generate(prompts, max_new_tokens=16, generator=gen, stop=("go",))
        return gen.get_state()

    ref, got = _both(policy, run)
    assert torch.equal(ref, got)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=299), min_size=1, max_size=30))
def test_only_the_listed_tokens_can_complete_a_stop_string(make_tiny_policy, tokens):
    """The decode-skipping rule of the lean generation loop finds a stop string at the same step as decoding the
    tail after every token (the rule of transformers' loop)."""
    policy = _STOP_POLICY.setdefault("p", make_tiny_policy("Say go. value 12 </answer> é ü"))
    stop = ("</answer>", "é")
    may = policy._stop_completing_tokens(stop)
    vocab = len(policy.tokenizer)
    ids = [t % vocab for t in tokens]
    window = max(len(s.encode()) for s in stop) + 2

    def first_stop(check_all: bool) -> int | None:
        for i in range(len(ids)):
            if check_all or ids[i] in may:
                tail = policy.tokenizer.decode(ids[: i + 1][-window:], skip_special_tokens=True)
                if any(s in tail for s in stop):
                    return i
        return None

    assert first_stop(False) == first_stop(True)


_STOP_POLICY: dict[str, HFPolicy] = {}


@pytest.mark.parametrize("budget", [4096, 40])
def test_cross_score_equals_the_naive_reference(policy, budget):
    gen = torch.Generator().manual_seed(5)
    P, G = 5, 3
    prompts = [torch.randint(5, 200, (int(n),), generator=gen).tolist() for n in (1, 12, 30, 7, 19)]
    traces = [[torch.randint(5, 200, (int(torch.randint(0, 9, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(G)] for _ in range(P)]
    traces[1][2] = []  # an empty trace scores 0
    traces[3][0] = list(traces[0][1])  # a repeated trace (scored once, reported at both places)
    traces[4][2] = list(traces[0][1])
    L_ref, len_ref = cross_score_naive(policy.model, prompts, traces, return_lengths=True)
    L, lengths = policy.cross_score(prompts, traces, batch_tokens=budget)
    assert torch.equal(lengths, len_ref)
    torch.testing.assert_close(L, L_ref, rtol=1e-5, atol=5e-5)
    assert float(L[1, 2].abs().max()) == 0.0


def test_split_rows_shares_equal_prefixes():
    ids = torch.tensor([[1, 2, 3, 9, 0], [1, 2, 3, 8, 7], [1, 2, 4, 8, 7], [5, 6, 0, 0, 0]])
    s = split_rows(ids, [4, 5, 5, 2], [3, 3, 3, 0], pad_id=0)
    assert s.prefix_ids.tolist() == [[1, 2, 3], [1, 2, 4], [0, 0, 0]]
    assert s.prefix_len.tolist() == [3, 3, 0] and s.owner.tolist() == [0, 0, 1, 2]
    assert s.cont_ids.tolist() == [[9, 0], [8, 7], [8, 7], [5, 6]]  # padded to the longest
    assert s.cont_len.tolist() == [1, 2, 2, 2] and s.start.tolist() == [3, 3, 3, 0]
    unshared = split_rows(ids, [4, 5, 5, 2], [3, 3, 3, 0], pad_id=0, share=False)
    assert unshared.owner.tolist() == [0, 1, 2, 3]


# --------------------------------------------------------------------------------------------- cross-scoring at
# the probe's shapes: the shipped tiny model (hidden 128, 2 layers, 4 heads, 2 key/value heads, head dim 32,
# vocabulary 1028), prompts of 110-165 tokens and traces of up to 64 (configs/collapse_sokoban.toml's probe), scored
# against the previous implementation (`reference_cross_score`, kept verbatim with its benchmark) and transformers'
# re-encoding of every (prompt, trace) pair (`cross_score_naive`).
@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The shipped tiny model (`default_tiny_model_dir`), built into a fresh folder."""
    pol = HFPolicy.from_pretrained(default_tiny_model_dir(tmp_path_factory.mktemp("tiny-cache")))
    cfg = pol.model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (128, 2, 4, 2)
    assert cfg.vocab_size == 1028
    return pol


def _probe_case(seed: int, prompt_lens: list[int], g: int, distinct: int | None = None):
    """Prompts of `prompt_lens` random tokens and `g` traces of 1-64 random tokens per prompt (drawn from
    `distinct` ones when given); one trace is empty and two repeat another one (scored once, reported at each)."""
    gen = torch.Generator().manual_seed(seed)

    def seq(n: int) -> list[int]:
        return torch.randint(0, 1028, (n,), generator=gen).tolist()

    prompts = [seq(n) for n in prompt_lens]
    p = len(prompts)
    pool = [seq(int(torch.randint(1, 65, (1,), generator=gen))) for _ in range(distinct or p * g)]
    pick = torch.randint(0, len(pool), (p * g,), generator=gen).tolist() if distinct else list(range(p * g))
    traces = [[list(pool[pick[i * g + k]]) for k in range(g)] for i in range(p)]
    traces[0][-1] = seq(64)  # the longest a probe trace gets
    if p * g >= 4:
        traces[-1][-1] = []  # scores 0
        traces[p // 2][0] = list(traces[0][1])
        traces[-1][0] = list(traces[0][1])
    return prompts, traces


def _assert_scores_close(L: torch.Tensor, lengths: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Within 1e-5 nats per scored token (a trace's log-prob is the sum of its tokens' log-probs)."""
    tol = 1e-5 * lengths.clamp(min=1).double()[..., None]
    err = (L - ref).abs()
    assert bool((err <= tol).all()), f"{what}: max |diff| per token {float((err / tol).max()) * 1e-5:.2e}"


CROSS_CASES = {
    "probe prompts": ([131, 110, 165, 142, 118], 3, None),
    "one prompt": ([150], 6, None),
    "one-token prompts": ([1, 127, 1, 160], 3, None),
    "only one-token prompts": ([1, 1, 1], 3, None),
    "collapsed traces": ([112, 164, 139, 150, 121, 133], 4, 3),
}


@pytest.mark.parametrize("budget", [8192, 150, 1])
@pytest.mark.parametrize("case", list(CROSS_CASES))
def test_cross_score_at_the_probe_shapes_equals_the_previous_path_and_transformers(shipped, case, budget):
    """`FastQwen2.cross_score` against the implementation it replaced and against transformers' forward on every
    pair: prompts of different lengths (and of one token: no prefix), empty and repeated traces, one prompt, few
    distinct traces (several prompts per pass), and budgets from one chunk down to one trace per chunk."""
    from benchmarks.bench_cross_score import reference_cross_score

    prompt_lens, g, distinct = CROSS_CASES[case]
    prompts, traces = _probe_case(len(case) + budget, prompt_lens, g, distinct)
    fast = FastQwen2(shipped.model)
    L, lengths = fast.cross_score(prompts, traces, batch_tokens=budget)
    old, old_lengths = reference_cross_score(fast, prompts, traces, budget)
    assert L.dtype == torch.float64 and L.shape == (len(prompts), g, len(prompts))
    assert torch.equal(lengths, old_lengths)
    assert torch.equal(lengths, torch.tensor([[len(z) for z in row] for row in traces]))
    _assert_scores_close(L, lengths, old, "against the previous implementation")
    naive, naive_lengths = cross_score_naive(shipped.model, prompts, traces, return_lengths=True)
    assert torch.equal(lengths, naive_lengths)
    _assert_scores_close(L, lengths, naive, "against transformers")
    empty = lengths == 0
    assert bool((L[empty] == 0).all())
    assert bool((L[~empty] < 0).all())
    for i, row in enumerate(traces):  # equal traces, equal scores
        for k, z in enumerate(row):
            if z == traces[0][1]:
                assert torch.equal(L[i, k], L[0, 1])


@pytest.mark.parametrize("path", ["no flash kernel", "key heads repeated"])
def test_cross_score_attention_fallbacks_give_the_same_scores(shipped, monkeypatch, path):
    """The attention without the CPU flash kernel (matrix products: another device, an older torch) and with the
    key heads repeated (a kernel that cannot read grouped heads) give the scores of the kernel's path."""
    prompts, traces = _probe_case(7, [140, 1, 115], 4)
    fast = FastQwen2(shipped.model)
    want, lengths = fast.cross_score(prompts, traces, batch_tokens=300)
    if path == "no flash kernel":
        monkeypatch.setattr(fast_qwen2, "_FLASH_CPU", None)
    else:
        monkeypatch.setattr(fast_qwen2, "_FLASH_GQA", [False])
    got, _ = fast.cross_score(prompts, traces, batch_tokens=300)
    _assert_scores_close(got, lengths, want, path)


def test_cross_score_passes_pack_prompts_and_traces(shipped, monkeypatch):
    """How the work is cut: traces longest first in chunks of at most the budget's tokens (a trace longer than
    the budget alone), and as many prompts per pass as fit in the budget; every (prompt, distinct trace) pair is
    scored exactly once."""
    prompts, traces = _probe_case(11, [120, 150, 133, 1], 3)
    fast = FastQwen2(shipped.model)
    calls = []
    real = FastQwen2._cross_score_block

    def spy(self, lay, js, *args):
        calls.append((lay.n_tok, lay.n_traces, lay.width, list(js)))
        return real(self, lay, js, *args)

    monkeypatch.setattr(FastQwen2, "_cross_score_block", spy)
    distinct = {tuple(z) for row in traces for z in row if z}
    for budget in (100, 1000):
        calls.clear()
        fast.cross_score(prompts, traces, batch_tokens=budget)
        chunks = {(n, t, w): [] for n, t, w, _ in calls}
        for n, t, w, js in calls:
            chunks[(n, t, w)] += js
            assert n <= budget or t == 1
            assert len(js) * n <= max(budget, n)
        widths = [w for _, _, w in chunks]
        assert widths == sorted(widths, reverse=True)  # longest first
        for (n, _, _), w_next in zip(chunks, widths[1:]):
            assert n + w_next > budget  # a chunk takes traces while they fit
        assert all(sorted(js) == list(range(len(prompts))) for js in chunks.values())
        assert sum(t for _, t, _ in chunks) == len(distinct)
        assert sum(n for n, _, _ in chunks) == sum(len(z) for z in distinct)
    assert max(len(js) for *_, js in calls) > 1  # short chunks: several prompts per pass
