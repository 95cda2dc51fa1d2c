"""The KV-cached decoding step of the lean forward: the step before its preallocated layout, today's Python step, the
compiled operator-for-operator step and the fused float32 step, side by side.

    python -m benchmarks.micro.bench_decode [--reps 15] [--rows 32 128] [--threads 1] [--json PATH]

The shipped tiny model (`default_tiny_model_dir()`: hidden 128, 2 layers, 4 heads, 2 key/value heads, vocabulary
1028), prompts of 135-155 tokens shared by groups of 4 rows (the study's group size), 64 new tokens. Two
schedules per row count: every row decodes all 64 steps, and rows stop at staggered steps (each row's last step
drawn from 8..64, as EOS and stop strings end rollouts). One repetition decodes the whole schedule with each
implementation, in an order that rotates between repetitions, feeding each the same pre-drawn tokens:
`BaselineDecodeState` (the step of commit 6bd8167, copied here verbatim), `DecodeState` with its operator calls made
from Python (``RAGEN2_NATIVE_DECODE=0``), with them made from C++ (``RAGEN2_DECODE_KERNEL=ops``,
`ragen_core.policy.native`) and the fused float32 step (the default where a C++ compiler is found: its own loops for
the norms, RoPE and attention); a step's time is the decoding's time over its number of steps (the prefill is not
timed). Reported: medians over the repetitions, the ratios, and the machine's 1-minute load average before and after
(the cores are shared). The logits of the first three are checked equal bit for bit at the end of every decoding,
the fused step's equal up to float rounding (rtol 1e-5, atol 2e-5), so a change that makes a step fast by breaking
it fails here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.machine import describe_machine, load_average
from benchmarks.readme_tables import strict_json, write_text_atomic
from ragen_core.policy import HFPolicy
from ragen_core.policy.fast_qwen2 import DecodeState, FastQwen2
from ragen_core.policy.native import KERNEL, SWITCH, native_decode_status, native_decode_step
from ragen_core.policy.tiny import default_tiny_model_dir

GROUP = 4
MAX_NEW = 64


class BaselineDecodeState:
    """The decoding step of commit 6bd8167, verbatim (the baseline): rebuilds the [n, 1, 1, T] mask every step and
    copies the whole cache whenever a row finishes."""

    def __init__(self, fast, kv, owner, prefix_len, max_new_tokens, first_tokens):
        self.fast = fast
        b = owner.numel()
        tp = kv[0][0].shape[2] if kv and kv[0][0] is not None else 0
        self.width = tp
        dev = owner.device
        ref = fast.model.lm_head.weight
        self.cache = []
        for k, v in kv:
            kb = torch.zeros(b, fast.n_kv, tp + max_new_tokens, fast.head_dim, dtype=ref.dtype, device=dev)
            vb = torch.zeros_like(kb)
            if tp:
                kb[:, :, :tp] = k.index_select(0, owner)
                vb[:, :, :tp] = v.index_select(0, owner)
            self.cache.append((kb, vb))
        self.valid = torch.zeros(b, tp + max_new_tokens, dtype=torch.bool, device=dev)
        if tp:
            self.valid[:, :tp] = torch.arange(tp, device=dev)[None, :] < prefix_len[:, None]
        self.prefix_len = prefix_len
        self.rows = torch.arange(b, device=dev)
        self.steps = 0
        self.next_tokens = first_tokens
        self.weights = [self._fused(layer) for layer in fast._inner.layers]

    @staticmethod
    @torch.no_grad()
    def _fused(layer):
        a, mlp = layer.self_attn, layer.mlp
        qkv_w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
        qkv_b = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
        return qkv_w, qkv_b, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.intermediate_size

    def _keep(self, rows):
        if rows.numel() == self.rows.numel():
            return
        where = torch.searchsorted(self.rows, rows)
        self.cache = [(k.index_select(0, where), v.index_select(0, where)) for k, v in self.cache]
        self.valid = self.valid.index_select(0, where)
        self.prefix_len = self.prefix_len.index_select(0, where)
        self.rows = rows

    @torch.no_grad()
    def step(self, rows, tokens):
        f = self.fast
        self._keep(rows)
        col = self.width + self.steps
        self.steps += 1
        n = rows.numel()
        pos = (self.prefix_len + self.steps - 1)[:, None]
        h = f._inner.embed_tokens(tokens[:, None])[:, 0]
        cos, sin = f._rope(pos, h.dtype)
        cos, sin = cos[:, 0], sin[:, 0]
        self.valid[:, col] = True
        hq, hk, d = f.n_heads, f.n_kv, f.head_dim
        bias = torch.zeros(n, 1, 1, col + 1, dtype=h.dtype, device=h.device).masked_fill_(
            ~self.valid[:, None, None, : col + 1], float("-inf"))
        for (kb, vb), layer, (qkv_w, qkv_b, gu_w, inter) in zip(self.cache, f._inner.layers, self.weights):
            x = f._norm(h, layer.input_layernorm)
            qkv = F.linear(x, qkv_w, qkv_b)
            q = qkv[:, : hq * d].view(n, hq, d)
            k = qkv[:, hq * d : (hq + hk) * d].view(n, hk, d)
            kb[:, :, col] = f._apply_rope(k, cos, sin)
            vb[:, :, col] = qkv[:, (hq + hk) * d :].view(n, hk, d)
            q = f._apply_rope(q, cos, sin).view(n, hk, hq // hk, d)
            scores = torch.matmul(q, kb[:, :, : col + 1].transpose(2, 3)) * d**-0.5 + bias
            attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), vb[:, :, : col + 1])
            h = h + F.linear(attn.reshape(n, hq * d), layer.self_attn.o_proj.weight)
            x = f._norm(h, layer.post_attention_layernorm)
            gu = F.linear(x, gu_w)
            h = h + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], layer.mlp.down_proj.weight)
        return f.logits(h)


def _prompts(rows: int, gen: torch.Generator) -> list[list[int]]:
    out = []
    for _ in range(max(1, rows // GROUP)):
        n = int(torch.randint(135, 156, (1,), generator=gen))
        out += [torch.randint(5, 1000, (n,), generator=gen).tolist()] * GROUP
    return out[:rows]


def _decode(state, tokens: torch.Tensor, last: torch.Tensor) -> tuple[float, int, torch.Tensor]:
    """Run the schedule: row r is fed tokens[step, r] and stops after step last[r]. Returns (seconds, steps, the
    last step's logits)."""
    live = torch.arange(tokens.shape[1])
    feed = state.next_tokens
    steps = 0
    t0 = time.perf_counter()
    while True:
        logits = state.step(live, feed)
        steps += 1
        keep = last[live] > steps
        if not bool(keep.any()):
            break
        live = live[keep]
        feed = tokens[steps, live]
    return time.perf_counter() - t0, steps, logits


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro.bench_decode", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=positive_int, nargs="+", default=[32, 128])
    parser.add_argument("--reps", type=positive_int, default=15, help="repetitions per schedule (medians over them)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (the tiny model's default is 1)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    check_output_path(parser, args.json, "--json")
    torch.set_num_threads(args.threads)
    policy = HFPolicy.from_pretrained(default_tiny_model_dir())
    fast = FastQwen2(policy.model)
    gen = torch.Generator().manual_seed(0)
    compiled = native_decode_step() is not None
    impls = ["baseline", "python", "compiled", "fused"] if compiled else ["baseline", "python"]
    load_before = load_average()
    results = []
    for rows in args.rows:
        prompts = _prompts(rows, gen)
        tokens = torch.randint(5, 1000, (MAX_NEW, rows), generator=gen)
        schedules = {"all rows decode 64 steps": torch.full((rows,), MAX_NEW),
                     "rows stop at steps 8-64": torch.randint(8, MAX_NEW + 1, (rows,), generator=gen)}
        for name, last in schedules.items():
            times: dict[str, list[float]] = {impl: [] for impl in impls}
            for rep in range(args.reps + 1):  # the first repetition warms up and is not counted
                order = impls[rep % len(impls):] + impls[: rep % len(impls)]
                out = {}
                for impl in order:
                    state = _make_state(impl, fast, prompts, policy.pad_token_id)
                    seconds, steps, out[impl] = _decode(state, tokens, last)
                    if rep:
                        times[impl].append(seconds / steps * 1e3)
                for impl in impls[1:]:
                    same = (torch.allclose(out[impl], out["baseline"], rtol=1e-5, atol=2e-5) if impl == "fused"
                            else torch.equal(out["baseline"], out[impl]))
                    if not same:
                        raise AssertionError(f"{rows} rows, {name}: the {impl} step's logits differ from the "
                                             "baseline's")
            med = {impl: statistics.median(times[impl]) for impl in impls}
            row = {"rows": rows, "schedule": name, "baseline_ms": med["baseline"], "python_ms": med["python"],
                   "ratio_python": med["baseline"] / med["python"]}
            if compiled:
                row.update(compiled_ms=med["compiled"], ratio_compiled=med["baseline"] / med["compiled"],
                           python_over_compiled=med["python"] / med["compiled"], fused_ms=med["fused"],
                           ratio_fused=med["baseline"] / med["fused"],
                           compiled_over_fused=med["compiled"] / med["fused"])
            results.append(row)
    load_after = load_average()
    if compiled:
        lines = ["| rows | schedule | 6bd8167 ms/step | Python step ms/step | compiled step ms/step | "
                 "fused step ms/step | 6bd8167 / fused | Python / compiled | compiled / fused |",
                 "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['rows']} | {r['schedule']} | {r['baseline_ms']:.2f} | {r['python_ms']:.2f} | "
                  f"{r['compiled_ms']:.2f} | {r['fused_ms']:.2f} | {r['ratio_fused']:.2f}x | "
                  f"{r['python_over_compiled']:.2f}x | {r['compiled_over_fused']:.2f}x |" for r in results]
    else:
        lines = ["| rows | schedule | 6bd8167 ms/step | Python step ms/step | 6bd8167 / Python |",
                 "|---:|---|---:|---:|---:|"]
        lines += [f"| {r['rows']} | {r['schedule']} | {r['baseline_ms']:.2f} | {r['python_ms']:.2f} | "
                  f"{r['ratio_python']:.2f}x |" for r in results]
    machine = describe_machine()
    machine["torch_threads"] = torch.get_num_threads()
    footer = (f"Medians of {args.reps} interleaved repetitions, {args.threads} torch thread(s); 1-minute load average "
              f"{load_before} before, {load_after} after, on {machine['cores']} cores ({machine['cpu']}; torch "
              f"{machine.get('torch')}; {machine['date']}). Decoding: {native_decode_status()}.")
    print("\n".join(lines))
    print(footer)
    if args.json:
        write_text_atomic(Path(args.json), strict_json(
            {"results": results, "load_before": load_before, "load_after": load_after, "machine": machine,
             "native": native_decode_status(), "markdown": "\n".join(lines), "footer": footer}, indent=2))
    return 0


def _make_state(impl: str, fast: FastQwen2, prompts: list[list[int]], pad_id: int):
    """A fresh decoding state of `impl` ("baseline", "python", "compiled" or "fused") from the same prefill."""
    if impl == "baseline":
        return BaselineDecodeState(*_state_args(fast, prompts, pad_id))
    wanted = {"python": ("0", "ops"), "compiled": ("1", "ops"), "fused": ("1", "fused")}[impl]
    before = {name: os.environ.get(name) for name in (SWITCH, KERNEL)}
    os.environ[SWITCH], os.environ[KERNEL] = wanted
    try:
        state = DecodeState(*_state_args(fast, prompts, pad_id))
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    if state.kernel != {"python": "python", "compiled": "ops", "fused": "fused"}[impl]:
        raise RuntimeError(f"the {impl} step was asked for and not built: {native_decode_status()}")
    return state


def _state_args(fast: FastQwen2, prompts: list[list[int]], pad_id: int) -> tuple:
    """The constructor arguments `FastQwen2.start_decoding` gives its state (so either class can be built from
    the same prefill)."""
    captured: dict[str, tuple] = {}

    class _Capture:
        def __init__(self, *args):
            captured["args"] = args

    import ragen_core.policy.fast_qwen2 as module

    real = module.DecodeState
    module.DecodeState = _Capture  # type: ignore[misc, assignment]
    try:
        fast.start_decoding(prompts, MAX_NEW, pad_id)
    finally:
        module.DecodeState = real  # type: ignore[misc]
    return captured["args"]


if __name__ == "__main__":
    raise SystemExit(main())
