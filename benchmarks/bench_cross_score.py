"""The probe's cross-scoring (`FastQwen2.cross_score`) before and after its packed layout, side by side.

    python -m benchmarks.bench_cross_score [--quick] [--reps 5] [--threads 1] [--json PATH]

Writes ``benchmarks/results/cross_score.json`` (``--quick``: 2 repetitions of the first case, to
``cross_score_quick.json``), shown in docs/performance.md (``results:cross_score``).

The shipped tiny model (`default_tiny_model_dir()`: hidden 128, 2 layers, 4 heads, 2 key/value heads, vocabulary
1028) on token sequences of the collapse probe's lengths (configs/collapse_sokoban.toml: `mi.probe_prompts` 32 x
`mi.probe_group_size` 4; its prompts have 110-165 tokens (141 on average in benchmarks/results/profile.json) and its
reasoning traces 46 on average, at most `rollout.max_new_tokens` 64): prompts of 110-165 random tokens, traces of
28-64. Three cases: the probe with 128 distinct traces (an untrained or diverse policy), the probe with 16 distinct
traces among its 128 (a collapsed policy repeats itself; each distinct trace is scored once) and the in-batch
diagnostic of a training step (`rollout.groups` 8 x `group_size` 4).

One repetition scores a case with each implementation, `reference_cross_score` (the method as of commit 9438e89,
copied below verbatim as functions over a `FastQwen2`) and the current `FastQwen2.cross_score`, in alternating
order; the first repetition warms up and is not counted. Reported: medians over the repetitions of the wall-clock
seconds and of this process's CPU seconds (which leave out the time it waited for a core that another process
held), the ratios reference / new, the largest difference of the two results (log-probs summed over a trace,
nats), and the machine's 1-minute load average before and after (the cores may be shared: the ratios, measured
interleaved in one process, are the numbers to read; the seconds scale with the load).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import RESULTS, strict_json, write_text_atomic
from ragen_core.policy import HFPolicy
from ragen_core.policy.fast_qwen2 import FastQwen2, distinct_traces
from ragen_core.policy.tiny import default_tiny_model_dir

#: (name, prompts P, traces per prompt G, distinct traces or None for all distinct)
CASES = [("probe: 32 prompts x 4 traces, all distinct", 32, 4, None),
         ("probe: 32 prompts x 4 traces, 16 distinct", 32, 4, 16),
         ("in-batch MI: 8 prompts x 4 traces", 8, 4, None)]
PROMPT_LEN = (110, 165)
TRACE_LEN = (28, 64)


# ---------------------------------------------------------------------------------------------- the reference
# FastQwen2.cross_score and its two helpers as of commit 9438e89, verbatim but for `self` -> `fast`: each prompt in
# turn, the whole model on every chunk of right-padded traces, the prompt's keys copied to every row and attended
# with a boolean mask by SDPA.
@torch.no_grad()
def reference_cross_score(fast: FastQwen2, prompts: Sequence[Sequence[int]],
                          traces: Sequence[Sequence[Sequence[int]]],
                          batch_tokens: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """``L[i, k, j] = log p(z_ik | x_j)`` ``[P, G, P]`` float64 and the lengths ``|z_ik|`` ``[P, G]``: the
    contract of :func:`ragen_core.math.mi.cross_score` (empty traces score 0).

    Every prompt's first ``len - 1`` tokens are computed once (:meth:`FastQwen2.prefix_kv`), and every distinct
    trace is scored once (equal traces get equal rows); then, prompt by prompt, the
    traces (each led by the prompt's last token) in batches of at most `batch_tokens` continuation tokens,
    attending to that prompt's keys and values (:func:`_shared_prefix_attention`).
    """
    dev = fast.model.lm_head.weight.device
    p, g = len(prompts), len(traces[0]) if traces else 0
    if any(len(x) == 0 for x in prompts):
        raise ValueError("every prompt needs at least one token")
    flat, where = distinct_traces(traces)
    lens = [len(z) for z in flat]
    order = sorted((r for r in range(len(flat)) if lens[r] > 0), key=lambda r: (-lens[r], r))
    pad = 0
    plen = [len(x) - 1 for x in prompts]
    width = max(plen)
    prefix_ids = torch.full((p, width), pad, dtype=torch.long)
    for j, x in enumerate(prompts):
        if plen[j]:
            prefix_ids[j, : plen[j]] = torch.tensor(list(x[:-1]), dtype=torch.long)
    kv = fast.prefix_kv(prefix_ids.to(dev))
    out = torch.zeros(len(flat), p, dtype=torch.float64)
    chunks: list[list[int]] = []
    for r in order:  # longest first: a chunk's width is its first trace's length + 1
        if chunks and (len(chunks[-1]) + 1) * (lens[chunks[-1][0]] + 1) <= batch_tokens:
            chunks[-1].append(r)
        else:
            chunks.append([r])
    for chunk in chunks:
        tc = lens[chunk[0]] + 1
        body = torch.full((len(chunk), tc), pad, dtype=torch.long)
        for n, r in enumerate(chunk):
            body[n, 1 : lens[r] + 1] = torch.tensor(flat[r], dtype=torch.long)
        body = body.to(dev)
        targets = body[:, 1:]
        real = (torch.arange(tc - 1, device=dev)[None, :] < torch.tensor([lens[r] for r in chunk],
                                                                         device=dev)[:, None])
        rows_idx, cols_idx = real.nonzero(as_tuple=True)
        for j in range(p):
            ids = body.clone()
            ids[:, 0] = int(prompts[j][-1])
            prefix = [(k[j, :, : plen[j]], v[j, :, : plen[j]]) if k is not None else (None, None) for k, v in kv]
            hidden = _continuation_of_one_prefix(fast, ids, prefix, plen[j])  # [n, tc, hidden]
            z = fast.logits(hidden[rows_idx, cols_idx]).float()
            lp = z.gather(-1, targets[rows_idx, cols_idx][:, None]).squeeze(-1) - torch.logsumexp(z, -1)
            seq = torch.zeros(len(chunk), dtype=torch.float64, device=dev).index_add_(0, rows_idx, lp.double())
            out[torch.tensor(chunk), j] = seq.cpu()
    every = out[torch.tensor(where, dtype=torch.long)] if where else out
    return every.reshape(p, g, p), torch.tensor([len(flat[r]) for r in where], dtype=torch.long).reshape(p, g)

def _continuation_of_one_prefix(fast: FastQwen2, ids: torch.Tensor, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                                prefix_len: int) -> torch.Tensor:
    """Last-layer hidden states ``[n, Tc, hidden]`` of right-padded continuations `ids` ``[n, Tc]`` that all
    follow one prefix of `prefix_len` tokens whose per-layer keys and values are `prefix` (``[Hkv, L, d]``)."""
    n, tc = ids.shape
    pos = (prefix_len + torch.arange(tc, device=ids.device))[None, :].expand(n, tc)
    h = fast._inner.embed_tokens(ids)
    cos, sin = fast._rope(pos, h.dtype)
    for (pk, pv), layer in zip(prefix, fast._inner.layers):
        q, k, v = fast._qkv(layer, h, cos, sin)
        attn = _shared_prefix_attention(fast, q, k, v, pk, pv)
        h = fast._finish_layer(layer, h, attn)
    return h

def _shared_prefix_attention(fast: FastQwen2, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             pk: torch.Tensor | None, pv: torch.Tensor | None) -> torch.Tensor:
    """Causal attention of queries ``[n, H, T, d]`` over one shared prefix's keys/values ``[Hkv, L, d]``
    followed by each row's own keys/values ``[n, Hkv, T, d]`` (every prefix key visible to every query)."""
    n, _, t, _ = q.shape
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    if pk is None or pk.shape[1] == 0:
        return fast._attend(q, k, v, causal)
    length = pk.shape[1]
    keys = torch.cat([pk[None].expand(n, -1, -1, -1), k], dim=2)
    values = torch.cat([pv[None].expand(n, -1, -1, -1), v], dim=2)
    mask = torch.cat([torch.ones(t, length, dtype=torch.bool, device=q.device), causal], dim=1)
    return fast._attend(q, keys, values, mask)


# ---------------------------------------------------------------------------------------------- the benchmark
def make_case(p: int, g: int, distinct: int | None, gen: torch.Generator,
              vocab: int = 1028) -> tuple[list[list[int]], list[list[list[int]]]]:
    """`p` prompts of PROMPT_LEN tokens and `g` traces of TRACE_LEN tokens per prompt (random ids); with
    `distinct`, the p * g traces are drawn from that many distinct ones (each used at least once)."""
    def seq(lo: int, hi: int) -> list[int]:
        return torch.randint(5, vocab, (int(torch.randint(lo, hi + 1, (1,), generator=gen)),), generator=gen).tolist()

    prompts = [seq(*PROMPT_LEN) for _ in range(p)]
    if distinct is None:
        return prompts, [[seq(*TRACE_LEN) for _ in range(g)] for _ in range(p)]
    pool = [seq(*TRACE_LEN) for _ in range(distinct)]
    pick = torch.cat([torch.arange(distinct), torch.randint(0, distinct, (p * g - distinct,), generator=gen)])
    pick = pick[torch.randperm(p * g, generator=gen)].tolist()
    return prompts, [[pool[pick[i * g + k]] for k in range(g)] for i in range(p)]


def run_case(fast: FastQwen2, prompts: Sequence[Sequence[int]], traces: Sequence[Sequence[Sequence[int]]],
             reps: int, batch_tokens: int) -> dict[str, float]:
    """Interleaved repetitions of both implementations on one case: medians of the wall-clock and the process CPU
    seconds (CPU time leaves out the time this process waited for a core another process held), their ratios,
    and the largest difference of the two results."""
    wall: dict[str, list[float]] = {"reference": [], "new": []}
    cpu: dict[str, list[float]] = {"reference": [], "new": []}
    diff = 0.0
    for rep in range(reps + 1):  # the first repetition warms up and is not counted
        order = ("reference", "new") if rep % 2 else ("new", "reference")
        out = {}
        for impl in order:
            t0, c0 = time.perf_counter(), time.process_time()
            if impl == "reference":
                out[impl] = reference_cross_score(fast, prompts, traces, batch_tokens)
            else:
                out[impl] = fast.cross_score(prompts, traces, batch_tokens)
            if rep:
                wall[impl].append(time.perf_counter() - t0)
                cpu[impl].append(time.process_time() - c0)
        if not torch.equal(out["reference"][1], out["new"][1]):
            raise AssertionError("the lengths differ")
        diff = max(diff, float((out["reference"][0] - out["new"][0]).abs().max()))
    ref, new = statistics.median(wall["reference"]), statistics.median(wall["new"])
    ref_cpu, new_cpu = statistics.median(cpu["reference"]), statistics.median(cpu["new"])
    return {"reference_s": ref, "new_s": new, "ratio": ref / new, "reference_cpu_s": ref_cpu, "new_cpu_s": new_cpu,
            "cpu_ratio": ref_cpu / new_cpu, "max_abs_diff": diff, "reference_all_s": wall["reference"],
            "new_all_s": wall["new"], "reference_all_cpu_s": cpu["reference"], "new_all_cpu_s": cpu["new"]}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, non_negative_int, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cross_score",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=positive_int, default=5, help="repetitions per case (medians over them)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (the probe's run.threads is 1)")
    parser.add_argument("--batch-tokens", type=positive_int, default=8192, help="the budget (mi.batch_tokens' default)")
    parser.add_argument("--cases", type=non_negative_int, nargs="+", default=None,
                        help="indices into CASES (default: all)")
    parser.add_argument("--json", default=None, help="where to write the results (default "
                        "benchmarks/results/cross_score.json; --quick: cross_score_quick.json)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 repetitions of the first case")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.cases = 2, [0]
    bad = [c for c in args.cases or () if c >= len(CASES)]
    if bad:  # an index past CASES used to be skipped silently: a run that measured nothing, then wrote it
        parser.error(f"--cases: no case {bad[0]}; the indices are 0-{len(CASES) - 1}")
    check_output_path(parser, args.json, "--json")
    if args.json is None:
        args.json = str(RESULTS / ("cross_score_quick.json" if args.quick else "cross_score.json"))
    torch.set_num_threads(args.threads)
    policy = HFPolicy.from_pretrained(default_tiny_model_dir())
    policy.model.eval()
    fast = FastQwen2(policy.model)
    gen = torch.Generator().manual_seed(0)
    load_before = load_average()
    results = []
    for c, (name, p, g, distinct) in enumerate(CASES):
        prompts, traces = make_case(p, g, distinct, gen)
        if args.cases is not None and c not in args.cases:
            continue
        r = run_case(fast, prompts, traces, args.reps, args.batch_tokens)
        r.update(case=name, prompts=p, traces_per_prompt=g,
                 distinct_traces=len({tuple(z) for grp in traces for z in grp}),
                 scored_tokens=sum(len(z) for z in {tuple(z) for grp in traces for z in grp}) * p,
                 prompt_tokens=sum(len(x) for x in prompts))
        results.append(r)
        print(f"{name}: reference {r['reference_s']:.3f} s, new {r['new_s']:.3f} s, {r['ratio']:.2f}x; CPU "
              f"{r['reference_cpu_s']:.3f} s vs {r['new_cpu_s']:.3f} s, {r['cpu_ratio']:.2f}x "
              f"(max |diff| {r['max_abs_diff']:.1e})", flush=True)
    load_after = load_average()
    lines = ["| case | distinct traces | scored positions | reference s | new s | reference / new | CPU s reference "
             "| CPU s new | CPU reference / new | max abs diff |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['distinct_traces']} | {r['scored_tokens']} | {r['reference_s']:.3f} | "
              f"{r['new_s']:.3f} | {r['ratio']:.2f}x | {r['reference_cpu_s']:.3f} | {r['new_cpu_s']:.3f} | "
              f"{r['cpu_ratio']:.2f}x | {r['max_abs_diff']:.1e} |" for r in results]
    machine = describe_machine()
    machine["torch_threads"] = torch.get_num_threads()
    footer = (f"Medians of {args.reps} interleaved repetitions (wall clock, and CPU time of this process), "
              f"{args.threads} torch thread(s), batch_tokens "
              f"{args.batch_tokens}; 1-minute load average {load_before} before, {load_after} after, on "
              f"{machine['cores']} cores ({machine['cpu']}; torch {machine.get('torch')}; {machine['date']}).")
    print("\n".join(lines))
    print(footer)
    write_text_atomic(Path(args.json), strict_json(
        {"benchmark": "cross_score", "results": results, "load_before": load_before, "load_after": load_after,
         "machine": machine, "markdown": "\n".join(lines) + "\n\n" + footer, "footer": footer}, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
