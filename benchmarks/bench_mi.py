"""Cross-scoring cost: KV reuse vs naive re-encoding (docs/science.md section 2), and the cost of filtering (section 4).

Run: ``python -m benchmarks.bench_mi`` (about a minute on 2 CPU cores) or ``python -m benchmarks.bench_mi --quick``.

Scenario (the issue's): P = 8 prompts x G = 8 traces, prompts of 256 tokens, traces of 64 tokens, a tiny Qwen2
model built from a config (random weights, fp32, CPU). Three ways to compute the same L[P, G, P]:

- ``kv_reuse``: :func:`ragen_core.math.mi.cross_score`: each prompt encoded once, its KV cache reused for all P*G
  traces.
- ``naive_batched``: :func:`ragen_core.math.mi.cross_score_naive` with the same token budget: prompt + trace
  re-encoded for every pair, batched (the fair baseline).
- ``naive_per_pair``: one forward call per pair (the official code's loop; skipped with ``--quick``).

Physical floor: P*P*G*|z| trace positions must be computed whatever the method (plus P*|x| prompt positions for
KV reuse); the naive path computes P*P*G*(|x| + |z|). The ratio of those counts is what KV reuse saves in
per-position work (MLP, projections, LM head); attention saves more, since the naive path attends over
|x| + |z| positions for every prompt position it recomputes.

Filtering: ``filter_groups`` (top-p, rho = 0.9) on a [1024, 8] reward batch; goal < 1 ms.

Timings are medians of ``--repeats`` runs measured side by side in one process (``kv_reuse`` and ``naive_batched``
interleaved, one of each per round, the order alternating; ``naive_per_pair`` once, after them; every path's L checked
against KV reuse's before its time is reported), on one CPU thread by default
(``--threads``: stable on shared machines, where oversubscribed threads make timings swing tenfold); results go to
``benchmarks/results/mi.json`` (``mi_quick.json`` with ``--quick``) with the machine described.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.machine import describe_machine, setup_torch
from benchmarks.readme_tables import write_result
from ragen_core.math.filtering import filter_groups, reward_variance
from ragen_core.math.mi import DEFAULT_BATCH_TOKENS, cross_score, cross_score_naive

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """Where the numbers come from."""
    import transformers

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def tiny_model(hidden: int, layers: int, vocab: int, max_len: int, device: str) -> torch.nn.Module:
    """A small Qwen2 causal LM from a config (random weights, seeded, fp32, eval mode)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    heads = max(1, hidden // 32)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=max(1, heads // 2), max_position_embeddings=max_len)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    return model.to(device).eval()


#: Largest disagreement of a path's L with KV reuse's, in nats per scored trace token (float32 rounding is ~1e-7).
AGREEMENT_PER_TOKEN = 1e-4


def _timed_call(fn) -> tuple[float, Any]:
    """(seconds, result) of one call, synchronised on CUDA."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _median_time(fn, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        dt, out = _timed_call(fn)
        times.append(dt)
    return statistics.median(times), out


def interleaved_medians(fns: dict[str, Any], repeats: int) -> dict[str, tuple[float, Any, list[float]]]:
    """Time every function once per round, ``repeats`` rounds, the order reversed every other round (side by side:
    a load change on the shared machine hits both paths alike). Returns {name: (median seconds, last result,
    seconds per round)}."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    outs: dict[str, Any] = {}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            dt, outs[name] = _timed_call(fns[name])
            times[name].append(dt)
    return {n: (statistics.median(times[n]), outs[n], times[n]) for n in names}


def check_agreement(name: str, got: torch.Tensor, reference: torch.Tensor, lengths: torch.Tensor) -> float:
    """The max abs difference of ``got`` and ``reference`` (L ``[P, G, P]``); a ValueError naming the path when a
    score differs by more than :data:`AGREEMENT_PER_TOKEN` nats per token of its trace (a path that is fast because
    it computes something else must not get a speed-up)."""
    if got.shape != reference.shape:
        raise ValueError(f"{name}: L has shape {tuple(got.shape)}, KV reuse's {tuple(reference.shape)}")
    diff = (got - reference).abs()
    bound = AGREEMENT_PER_TOKEN * lengths.to(diff.dtype).clamp(min=1)[:, :, None]
    if not bool(torch.isfinite(got).all()) or bool((diff > bound).any()):
        raise ValueError(f"{name}: L differs from KV reuse's by {float(diff.max()):.3g} nats (allowed "
                         f"{AGREEMENT_PER_TOKEN:g} per trace token): the paths do not compute the same scores")
    return float(diff.max())


def bench_cross_score(p: int, g: int, prompt_len: int, response_len: int, hidden: int, layers: int, vocab: int,
                      repeats: int, batch_tokens: int, per_pair: bool, device: str) -> dict[str, Any]:
    """Time the three cross-scoring paths on one random batch and check they agree."""
    model = tiny_model(hidden, layers, vocab, prompt_len + response_len + 8, device)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=gen) for _ in range(p)]
    responses = [[torch.randint(0, vocab, (response_len,), generator=gen) for _ in range(g)] for _ in range(p)]
    # warm-up (allocator, kernels) on a sliver of the work
    cross_score(model, prompts[:2], [grp[:1] for grp in responses[:2]], batch_tokens=batch_tokens)
    cross_score_naive(model, prompts[:2], [grp[:1] for grp in responses[:2]], batch_tokens=batch_tokens)

    rows: dict[str, Any] = {}
    stats_kv: dict = {}
    stats_nb: dict = {}
    timed = interleaved_medians({
        "kv_reuse": lambda: cross_score(model, prompts, responses, batch_tokens=batch_tokens, stats=stats_kv),
        "naive_batched": lambda: cross_score_naive(model, prompts, responses, batch_tokens=batch_tokens,
                                                   stats=stats_nb),
    }, repeats)
    t_kv, l_kv, times_kv = timed["kv_reuse"]
    t_nb, l_nb, times_nb = timed["naive_batched"]
    lengths = torch.full((p, g), response_len)
    rows["kv_reuse"] = {"seconds": t_kv, "seconds_per_round": times_kv, "forward_calls": stats_kv["forward_calls"],
                        "positions": stats_kv["padded_positions"]}
    rows["naive_batched"] = {"seconds": t_nb, "seconds_per_round": times_nb,
                             "forward_calls": stats_nb["forward_calls"], "positions": stats_nb["padded_positions"],
                             "max_abs_diff_vs_kv": check_agreement("naive_batched", l_nb, l_kv, lengths)}
    if per_pair:
        stats_pp: dict = {}
        t_pp, l_pp = _median_time(lambda: cross_score_naive(model, prompts, responses, stats=stats_pp), 1)
        rows["naive_per_pair"] = {"seconds": t_pp, "forward_calls": stats_pp["forward_calls"],
                                  "positions": stats_pp["padded_positions"],
                                  "max_abs_diff_vs_kv": check_agreement("naive_per_pair", l_pp, l_kv, lengths)}
    floor = p * p * g * response_len
    naive_positions = p * p * g * (prompt_len + response_len)
    return {
        "config": {"P": p, "G": g, "prompt_tokens": prompt_len, "response_tokens": response_len,
                   "hidden": hidden, "layers": layers, "vocab": vocab, "dtype": "float32",
                   "batch_tokens": batch_tokens, "repeats": repeats, "device": device},
        "methods": rows,
        "speedup_vs_naive_batched": t_nb / t_kv,
        "speedup_vs_naive_per_pair": rows["naive_per_pair"]["seconds"] / t_kv if per_pair else None,
        "physical_floor_positions": floor,
        "kv_reuse_positions_min": floor + p * prompt_len,
        "naive_positions": naive_positions,
        "position_ratio": naive_positions / (floor + p * prompt_len),
    }


def bench_filter(p: int, g: int, repeats: int) -> dict[str, Any]:
    """Median wall time of filter_groups (top_p 0.9, variance) and of reward_variance alone on [p, g] rewards."""
    gen = torch.Generator().manual_seed(0)
    success = torch.rand(p, 1, generator=gen)
    success = torch.where(torch.rand(p, 1, generator=gen) < 0.5, success.round(), success)  # bimodal variance
    rewards = (torch.rand(p, g, generator=gen) < success).to(torch.float32)
    for _ in range(10):
        filter_groups(rewards)
    out: dict[str, Any] = {"P": p, "G": g, "repeats": repeats}
    for name, fn in (("filter_groups_top_p_ms", lambda: filter_groups(rewards, "top_p", 0.9)),
                     ("filter_groups_top_k_ms", lambda: filter_groups(rewards, "top_k", 0.9)),
                     ("reward_variance_ms", lambda: reward_variance(rewards))):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1e3
    return out


def _table(result: dict[str, Any]) -> str:
    cs = result["cross_score"]
    c = cs["config"]
    lines = [
        f"cross-scoring P={c['P']} G={c['G']} |x|={c['prompt_tokens']} |z|={c['response_tokens']} "
        f"(Qwen2 hidden={c['hidden']} layers={c['layers']} vocab={c['vocab']}, fp32, {c['device']})",
        f"{'method':<16}{'seconds':>10}{'calls':>8}{'positions':>12}{'speed-up':>10}{'max|dL|':>11}",
    ]
    t_kv = cs["methods"]["kv_reuse"]["seconds"]
    for name, row in cs["methods"].items():
        diff = row.get("max_abs_diff_vs_kv")
        lines.append(f"{name:<16}{row['seconds']:>10.3f}{row['forward_calls']:>8d}{row['positions']:>12d}"
                     f"{row['seconds'] / t_kv:>9.2f}x{'' if diff is None else f'{diff:>11.2e}'}")
    lines.append(f"physical floor: {cs['physical_floor_positions']} trace positions (P*P*G*|z|); naive computes "
                 f"{cs['naive_positions']} positions: {cs['position_ratio']:.2f}x more (plus longer attention)")
    f = result["filter"]
    lines.append(f"filter_groups top_p on [{f['P']}, {f['G']}]: {f['filter_groups_top_p_ms']:.3f} ms "
                 f"(top_k {f['filter_groups_top_k_ms']:.3f} ms, reward_variance {f['reward_variance_ms']:.3f} ms)")
    return "\n".join(lines)


def _markdown(result: dict[str, Any]) -> str:
    """The README table: the same numbers as :func:`_table`, as Markdown."""
    cs = result["cross_score"]
    c = cs["config"]
    t_kv = cs["methods"]["kv_reuse"]["seconds"]
    lines = ["| method | seconds | forward calls | positions | time vs KV reuse | max abs diff of L |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, row in cs["methods"].items():
        diff = row.get("max_abs_diff_vs_kv")
        lines.append(f"| {name} | {row['seconds']:.3f} | {row['forward_calls']} | {row['positions']:,} | "
                     f"{row['seconds'] / t_kv:.2f}x | {'-' if diff is None else f'{diff:.1e}'} |")
    f = result["filter"]
    lines += ["", f"Cross-scoring L[P, G, P] with P={c['P']}, G={c['G']}, |x|={c['prompt_tokens']}, "
                  f"|z|={c['response_tokens']} (Qwen2 hidden={c['hidden']}, layers={c['layers']}, vocab={c['vocab']}, "
                  f"fp32, {c['device']}, {result['machine'].get('torch_threads')} torch thread(s)); physical floor "
                  f"{cs['physical_floor_positions']:,} trace positions, naive computes {cs['position_ratio']:.2f}x "
                  f"more. filter_groups top-p on [{f['P']}, {f['G']}]: {f['filter_groups_top_p_ms']:.3f} ms "
                  f"(top-k {f['filter_groups_top_k_ms']:.3f} ms, reward_variance {f['reward_variance_ms']:.3f} ms)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_mi", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, no per-pair baseline (seconds)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--hidden", type=positive_int, default=128)
    parser.add_argument("--layers", type=positive_int, default=2)
    parser.add_argument("--vocab", type=positive_int, default=2048)
    parser.add_argument("--repeats", type=positive_int, default=None, help="timed repeats (default 2, quick 1)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--batch-tokens", type=positive_int, default=DEFAULT_BATCH_TOKENS)
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    setup_torch(parser, args)
    if args.quick:
        sizes = {"p": 4, "g": 4, "prompt_len": 64, "response_len": 16}
        repeats = args.repeats or 1
        filter_repeats = 50
    else:
        sizes = {"p": 8, "g": 8, "prompt_len": 256, "response_len": 64}
        repeats = args.repeats or 2
        filter_repeats = 300
    result = {
        "benchmark": "bench_mi",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": {**machine(), **describe_machine()},
        "cross_score": bench_cross_score(**sizes, hidden=args.hidden, layers=args.layers, vocab=args.vocab,
                                         repeats=repeats, batch_tokens=args.batch_tokens,
                                         per_pair=not args.quick, device=args.device),
        "filter": bench_filter(1024, 8, filter_repeats),
    }
    result["markdown"] = _markdown(result)
    write_result(result, args.out or RESULTS / ("mi_quick.json" if args.quick else "mi.json"), show=_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
