"""The profile's per-token costs against an independent count: torch's FlopCounterMode on the tiny model's real
forward (transformers' dense forward, and the lean forward of `ragen_core.policy.fast_qwen2`) at the shipped
shapes (hidden 128, 4 heads of dim 32, 2 KV heads, MLP 512, vocabulary 1028), and the driver's lean work counts
against hand counts and against the same computation counted by FlopCounterMode.

Attention runs on SDPA's math backend here, whose two batched products FlopCounterMode counts as the full
query x key square (no causal discount); the expected numbers say where that differs from the floor's causal count.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_profile as bp
from benchmarks import profile_driver as drv

transformers = pytest.importorskip("transformers")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ragen_core.policy.native import KERNEL  # noqa: E402

TINY = {"hidden": 128, "layers": 2, "intermediate": 512, "heads": 4, "kv_heads": 2, "vocab": 1028}


@pytest.fixture(scope="module")
def model():
    cfg = transformers.Qwen2Config(vocab_size=1028, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                   use_sliding_window=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return transformers.Qwen2ForCausalLM(cfg)


@pytest.fixture(scope="module")
def fast(model):
    from ragen_core.policy.fast_qwen2 import FastQwen2

    return FastQwen2(model)


def _counted(fn) -> dict[str, int]:
    """FLOPs of `fn()` by operator (mm, addmm: the projections and the output layer; bmm: attention)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return {str(op).split(".")[-1]: int(n) for op, n in fc.get_flop_counts()["Global"].items()}


# ---------------------------------------------------------------------------------------------- by hand
def test_part_costs_by_hand():
    # q 128x128, k and v 128x64 each; o 128x128; gate and up 128x512 each, down 512x128; 2 x 128 per key; 1028x128
    assert bp.part_macs(TINY) == {"qkv": 128 * 256, "kv": 128 * 128, "o": 128 * 128, "up": 2 * 128 * 512,
                                  "down": 512 * 128, "att": 2 * 128, "out": 1028 * 128}
    layer0 = 128 * 256 + 128 * 128 + 3 * 128 * 512  # a layer's projections and MLP
    assert bp.lean_prompt_macs(TINY, ctx=10) == layer0 + 2 * 128 * 10 + 2 * 128 * 64
    assert bp.lean_read_macs(TINY, ctx=10) == 2 * (layer0 + 2 * 128 * 10) + 1028 * 128
    assert bp.lean_read_macs(TINY, ctx=10) == bp.macs_per_token(TINY, ctx=10)  # a read position is a dense token
    # The audit's figures: 0.56 MFLOP per prompt token (middle of a ~140-token prompt) against ~1.32 dense.
    assert 2 * bp.lean_prompt_macs(TINY, ctx=70) / 1e6 == pytest.approx(0.56, abs=0.005)
    assert 2 * bp.macs_per_token(TINY, ctx=75) / 1e6 == pytest.approx(1.32, abs=0.005)


def test_lean_parts_of_counted_work_by_hand():
    work = {"kv_tokens": 10.0, "kv_ctx": 55.0, "read_tokens": 4.0, "read_ctx": 50.0}
    parts = bp.lean_part_macs(TINY, work)
    # 10 prompt tokens through layer 0 + 4 read positions through both layers = 18 token-layers
    assert parts["qkv"] == 18 * 128 * 256 and parts["up"] == 18 * 2 * 128 * 512 and parts["down"] == 18 * 512 * 128
    assert parts["kv"] == 10 * 128 * 128 and parts["out"] == 4 * 1028 * 128
    assert parts["att"] == 2 * 128 * (55 + 2 * 50)
    # Forward at 2 FLOPs per MAC, forward and backward at 6; each part at its own rate.
    rates = dict.fromkeys(bp.PARTS, 100.0) | {"out": 50.0}
    gflop, seconds = bp.lean_floor({"lean": {"forward": work, "train": work}}, TINY, rates)
    total = sum(parts.values())
    assert gflop == pytest.approx(8 * total / 1e9)
    assert seconds == pytest.approx(8 * (total - parts["out"]) / 1e9 / 100 + 8 * parts["out"] / 1e9 / 50)


def test_driver_counts_by_hand():
    # Row 0: tokens 0..5, log-probs read at 3, 4, 5 -> prefix tokens 0, 1 (keys 1 + 2), read positions 2, 3, 4.
    assert drv.scoring_work([[1, 2, 3, 4, 5, 6]], [[3, 4, 5]]) == {"kv_tokens": 2, "kv_ctx": 3, "read_tokens": 3,
                                                                   "read_ctx": 12}
    # A second turn: read at 2 and 5 -> positions 1 and 4 read, 2 and 3 only keys and values, nothing after 4.
    assert drv.scoring_work([[1, 2, 3, 4, 5, 6, 7, 8]], [[2, 5]]) == {"kv_tokens": 1 + 2, "kv_ctx": 1 + 3 + 4,
                                                                      "read_tokens": 2, "read_ctx": 2 + 5}
    # Equal prefixes once per call; different ones each.
    two = drv.scoring_work([[1, 2, 3, 9], [1, 2, 3, 8], [7, 2, 3, 8]], [[3], [3], [3]])
    assert two == {"kv_tokens": 4, "kv_ctx": 6, "read_tokens": 3, "read_ctx": 9}
    # Generation: a prompt of 3 shared by two rows (2 and 1 sampled tokens), another prompt of 3 (1 token).
    gen = drv.generation_work([[1, 2, 3], [1, 2, 3], [1, 2, 4]], [2, 1, 1])
    assert gen == {"kv_tokens": 2, "kv_ctx": 3, "read_tokens": 4, "read_ctx": (3 + 4) + 3 + 3}
    # Cross-scoring: every prompt's prefix once, every distinct trace (the repeat once, the empty one none) under
    # every prompt: trace (7, 8) after a 3-token prompt reads 2 positions attending to 3 and 4 keys.
    cross = drv.cross_work([[1, 2, 3], [4, 5]], [[[7, 8], [7, 8]], [[9], []]])
    assert cross == {"kv_tokens": 2 + 1, "kv_ctx": 3 + 1, "read_tokens": 6, "read_ctx": (7 + 3) + (5 + 2)}


def test_forward_logprobs_hook_counts_what_the_call_reads():
    """The driver's hook on forward_logprobs, on padded tensors, against the list form (left and right padding, a
    score mask with a gap, a row with nothing read), and as train work only under gradient."""
    rows = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8], [5, 6, 1, 2, 3, 4, 5], [3, 3]]
    wanted = [[3, 4, 5], [3], [2, 5, 6], []]
    t = max(map(len, rows))
    seen = []

    def fn(self, input_ids, attention_mask, **kw):
        seen.append(True)

    hook = drv._counted_forward_logprobs(fn)
    for side in ("right", "left"):
        ids = torch.zeros(len(rows), t, dtype=torch.long)
        am = torch.zeros_like(ids)
        sm = torch.zeros_like(ids, dtype=torch.bool)
        for b, (r, w) in enumerate(zip(rows, wanted)):
            off = 0 if side == "right" else t - len(r)
            ids[b, off: off + len(r)] = torch.tensor(r)
            am[b, off: off + len(r)] = 1
            for p in w:
                sm[b, off + p] = True
        drv._lean.clear()
        with torch.no_grad():
            hook(None, ids, am, score_mask=sm)
        assert drv._lean == {"forward": drv.scoring_work(rows, wanted)}
        drv._lean.clear()
        hook(None, ids, am, score_mask=sm)
        assert set(drv._lean) == {"train"}
    # No score mask: every real position after the first is read.
    drv._lean.clear()
    with torch.no_grad():
        hook(None, torch.tensor([[4, 5, 6, 0]]), torch.tensor([[1, 1, 1, 0]]))
    assert drv._lean["forward"] == drv.scoring_work([[4, 5, 6]], [[1, 2]])
    assert len(seen) == 5
    drv._lean.clear()


# ---------------------------------------------------------------------------------------------- FlopCounterMode
def test_dense_cost_is_transformers_forward(model):
    t = 20
    ids = torch.randint(0, 1028, (1, t), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        counted = _counted(lambda: model(ids))
    # The math backend's attention products count every query against every key: ctx = t for each token.
    assert sum(counted.values()) == 2 * t * bp.macs_per_token(TINY, ctx=t)


def test_lean_prompt_cost_is_the_lean_forwards_prefix(fast):
    u, m = 2, 30
    ids = torch.randint(0, 1028, (u, m), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        counted = _counted(lambda: fast.prefix_kv(ids))
    assert sum(counted.values()) == 2 * u * m * bp.lean_prompt_macs(TINY, ctx=m)
    # Only the last layer's keys and values: one fused [m, 128] x [128, 128] product there, nothing else.
    c = bp.part_macs(TINY)
    assert counted["addmm"] == 2 * u * m * (c["qkv"] + c["kv"])


def test_scored_rows_backward_is_twice_the_forward_also_at_prompt_positions(fast):
    """Two rows sharing a prompt of P tokens, R response tokens each, log-probs read on the responses: the lean
    forward computes the prompt's first P - 1 tokens once at the lean prompt cost, R + 1 continuation positions per
    row through every layer (the last one, whose output nobody reads, too: the floor leaves it out), logits at the R
    read positions; forward and backward is exactly 3x the forward."""
    p, r = 25, 10
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 1028, (p,), generator=gen)
    rows = torch.stack([torch.cat([prompt, torch.randint(0, 1028, (r,), generator=gen)]) for _ in range(2)])
    am = torch.ones_like(rows)
    sm = torch.zeros_like(rows, dtype=torch.bool)
    sm[:, p:] = True
    with torch.no_grad():
        fwd = sum(_counted(lambda: fast.token_logprobs(rows, am, sm)).values())
    both = sum(_counted(lambda: fast.token_logprobs(rows, am, sm)[0].sum().backward()).values())
    assert both == 3 * fwd
    c = bp.part_macs(TINY)
    m, cont = p - 1, r + 1  # continuation queries see the whole prefix and their own causal part (counted square)
    code = m * bp.lean_prompt_macs(TINY, ctx=m) + 2 * (cont * (bp.lean_read_macs(TINY, ctx=m + cont) - c["out"])
                                                      + r * c["out"])
    assert fwd == 2 * code
    # The floor's count of the same call: the prefix once, R read positions per row, causal contexts.
    work = drv.scoring_work(rows.tolist(), [list(range(p, p + r))] * 2)
    assert work == {"kv_tokens": m, "kv_ctx": m * (m + 1) / 2, "read_tokens": 2 * r,
                    "read_ctx": 2 * sum(range(p, p + r))}


def test_generation_work_is_the_decoding_of_the_lean_forward(fast, monkeypatch):
    """start_decoding + steps on prompts of one length (two rows share a prompt), every row decoding: the
    projections and logits FlopCounterMode counts equal the driver's generation work; the attention products equal
    it too, except the prefill, which the math backend counts as the full square. Counted on the operator-for-operator
    step, whose products are ATen calls FlopCounterMode sees (the fused step's attention is its own loop: the same
    multiply-adds, uncounted)."""
    monkeypatch.setenv(KERNEL, "ops")
    gen = torch.Generator().manual_seed(4)
    length, steps = 12, 5
    a, b = (torch.randint(0, 1028, (length,), generator=gen).tolist() for _ in range(2))
    prompts = [a, a, b]

    def decode():
        state = fast.start_decoding(prompts, steps, pad_id=0)
        rows = torch.arange(len(prompts))
        state.step(rows, state.next_tokens)
        for _ in range(steps - 1):
            state.step(rows, torch.ones(len(prompts), dtype=torch.long))

    with torch.no_grad():
        counted = _counted(decode)
    work = drv.generation_work(prompts, [steps] * len(prompts))
    parts = bp.lean_part_macs(TINY, work)
    assert counted["mm"] + counted["addmm"] == 2 * sum(v for k, v in parts.items() if k != "att")
    m, att = length - 1, bp.part_macs(TINY)["att"]
    prefill = 2 * att * 2 * m * m  # two distinct prefixes, layer 0 only, square
    decoding = 2 * att * 2 * work["read_ctx"]  # both layers, exact keys
    assert counted["bmm"] == prefill + decoding
    assert work["kv_tokens"] == 2 * m and work["read_tokens"] == 3 * steps


# ---------------------------------------------------------------------------------------------- the table
def test_summary_prices_the_lean_floor_per_step():
    lean = {"forward": {"kv_tokens": 300.0, "kv_ctx": 9000.0, "read_tokens": 60.0, "read_ctx": 6000.0}}
    phase = {"phase": "rl_steps", "wall_s": 3.0, "parts": {"generate": 3.0},
             "counts": {"prompt_tokens": 300.0, "generated_tokens": 60.0, "turns": 4.0},
             "extra": {"steps": 3}, "lean": lean}
    rates = dict.fromkeys(bp.PARTS, 50.0)
    s = bp.summarise("x", {"phases": []}, {"model": TINY, "phases": [phase]}, gflops=50.0, rates=rates)
    row = s["phases"][0]
    gflop, seconds = bp.lean_floor(phase, TINY, rates)
    assert row["lean_floor_s"] == pytest.approx(seconds / 3) and row["lean_gflop"] == pytest.approx(gflop / 3)
    assert row["now_over_lean"] == pytest.approx(1.0 / (seconds / 3))
    md = bp.markdown({"baseline": "abc", "warm_episodes": 64, "steps": 3, "gflops": 50.0, "rates": rates,
                      "configs": [s], "threads": []})
    assert f"| {row['lean_floor_s']:.2f} | {row['now_over_lean']:.1f}x |" in md
    # A profile without lean counts (recorded before them) keeps its dense columns and shows no lean floor.
    del phase["lean"]
    old = bp.summarise("x", {"phases": []}, {"model": TINY, "phases": [phase]}, gflops=50.0, rates=rates)
    assert "lean_floor_s" not in old["phases"][0]
    assert "| - | - |" in bp.markdown({"baseline": "abc", "warm_episodes": 64, "steps": 3, "gflops": 50.0,
                                       "configs": [old], "threads": []})


def test_decoding_steps_are_counted_at_their_row_counts():
    """The generation's work split by shape: the prefill once, then each decoding step under the bucket of the rows
    still decoding; the kinds add up to the unsplit count."""
    prompts, sampled = [[1, 2, 3], [1, 2, 3], [1, 2, 4], [5, 6]], [3, 1, 1, 2]
    split = drv.decode_work(prompts, sampled)
    # step 0: 4 rows (bucket 4), step 1: rows 0 and 3 (bucket 2), step 2: row 0 (bucket 1)
    assert split["decode@4"] == {"kv_tokens": 0, "kv_ctx": 0, "read_tokens": 4, "read_ctx": 3 + 3 + 3 + 2}
    assert split["decode@2"] == {"kv_tokens": 0, "kv_ctx": 0, "read_tokens": 2, "read_ctx": 4 + 3}
    assert split["decode@1"] == {"kv_tokens": 0, "kv_ctx": 0, "read_tokens": 1, "read_ctx": 5}
    assert split["forward"] == {"kv_tokens": 2 + 1, "kv_ctx": 3 + 1, "read_tokens": 0, "read_ctx": 0}
    whole = drv.generation_work(prompts, sampled)
    for key in drv.WORK_KEYS:
        assert sum(w[key] for w in split.values()) == whole[key], key
    assert [drv.decode_bucket(n) for n in (1, 2, 3, 32, 33, 128)] == [1, 2, 4, 32, 64, 128]


def test_a_decoding_step_is_priced_at_its_own_row_count():
    """decode@B work: forward FLOPs, its projections and output layer at the rates measured for B rows, its
    attention at the (prefill-shaped, faster) attention rate; without decode rates, the large-row rates."""
    work = {"kv_tokens": 0.0, "kv_ctx": 0.0, "read_tokens": 32.0, "read_ctx": 32 * 150.0}
    parts = bp.lean_part_macs(TINY, work)
    rates = dict.fromkeys(bp.PARTS, 100.0)
    slow = dict.fromkeys(bp.PARTS, 25.0)
    gflop, seconds = bp.lean_floor({"lean": {"decode@32": work}}, TINY, rates | {"decode": {32: slow}})
    att = 2 * parts["att"] / 1e9
    assert gflop == pytest.approx(2 * sum(parts.values()) / 1e9)
    assert seconds == pytest.approx((2 * sum(parts.values()) / 1e9 - att) / 25.0 + att / 100.0)
    _, plain = bp.lean_floor({"lean": {"decode@32": work}}, TINY, rates)
    assert plain == pytest.approx(2 * sum(parts.values()) / 1e9 / 100.0)
