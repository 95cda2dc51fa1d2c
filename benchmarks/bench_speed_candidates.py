"""The speed-ups left to try on the warm start's SFT step and the decoding step, each measured beside today's path
on the same work, with whether it changes rounding.

    python -m benchmarks.bench_speed_candidates [--episodes 160] [--repeats 4] [--quick]

The warm start is most of a study's cost (12 of its 30 core-minutes per seed at 05e2668, docs/performance.md) and
runs at about 2.2x its lean floor; decoding is most of an RL step. Bit-identical savings are used up there (the
foreach optimiser, the fused RMSNorm backward, MKL-packed weights, padding-free batches: docs/performance.md). This
benchmark measures what is left, so that the next attempt starts from numbers:

1. **The SFT step** (the warm start's own ``sft_train``: lean forward, loss, backward, gradient clipping, AdamW) on
   real demonstration batches of ``collapse_sokoban`` and ``collapse_frozenlake`` (`episodes` of each, one epoch,
   every candidate from the same initial weights and the same batch order), timed in `repeats` rounds that each
   run every candidate once (so each round's ratios share one machine state):

   - *today*;
   - *one pass*: the lean forward without the prefix/continuation split (every layer but the last over whole rows;
     the last layer's keys and values over whole rows and its queries, attention and MLP only from a row's first
     read position): the same function, different matrix shapes, so different rounding;
   - *attention by matmul*: the lean forward's attention as two matrix products and a softmax instead of
     ``scaled_dot_product_attention`` (CPU flash attention at head dim 32);
   - *compiled layers*: ``torch.compile(dynamic=True)`` of ``FastQwen2._qkv`` and ``FastQwen2._finish_layer``
     (their compile time reported apart);
   - *fused AdamW* (``fused=True``: one kernel per parameter instead of about eight);
   - *fused layers*: each lean-forward layer as two autograd nodes with compiled element-wise pieces
     (``ragen_core/policy/fused_train.py``);
   - *model.fused_training*: the config switch, fused layers and fused AdamW together.

   Each candidate's final weights are compared with today's (largest absolute difference; 0 is bit-identical).
2. **AdamW alone** on the tiny model's 26 parameters (random gradients, 200 steps): per tensor (today), foreach,
   one flat buffer (every parameter a view of it) and fused; ms per step and whether the parameters equal today's.
3. **Decoding attention** at a decoding step's shape (32 rows, 2 key/value heads of 2 queries each, head dim 32,
   200 cached keys, the first 150 a prompt shared by each group of 4 rows): today's two batched products (keys read
   transposed from their ``[T, d]`` cache), keys cached transposed (``[d, T]``), ``scaled_dot_product_attention``,
   the same products called as ``torch.bmm`` on 3-D views, each group's prompt keys and values read once for the
   group's rows (one product per group and head; the decoded keys per row; one softmax over both; the values'
   two parts summed), and a hand-written C kernel that reads each row's
   keys and values once for all its queries (compiled with the system's C compiler where there is one: what a
   fused kernel could reach); microseconds per layer and whether the output equals today's.
4. **A shared prompt head**: the longest token prefix common to every SFT row of each config (a head shared by all
   rows could be computed once per batch; causal attention cannot share a common tail).
5. **The core's matrix rate**: square float32 products of 512, 1024 and 2048 at one thread, beside which the rates
   of the model's own shapes (``bench_profile``) can be read: whether the lean floor's matrix part is at the core's
   peak.

One torch thread; writes ``benchmarks/results/speed_candidates.json`` (shown in docs/performance.md,
``results:speed_candidates``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CONFIGS = ("collapse_sokoban", "collapse_frozenlake")
SFT_CANDIDATES = ("today", "one pass", "attention by matmul", "compiled layers", "fused AdamW", "fused layers",
                  "model.fused_training")


# ---------------------------------------------------------------------------------------------- candidates
def one_pass_token_logprobs(self, input_ids, attention_mask, score_mask, *, temperature: float = 1.0,
                            with_entropy: bool = False, pad_id: int = 0, share_prefixes: bool = True):
    """``FastQwen2.token_logprobs`` (right-padded rows, log-probs at `score_mask`) without splitting rows into a
    prefix and a continuation: every layer but the last runs over whole rows ``[B, T]``; the last layer computes
    keys and values over whole rows and queries, attention and MLP at positions ``start .. last - 1`` of each row
    (``start`` the position before its first read token, gathered into ``[B, Tc]``), the output layer only where
    a log-prob is read. Entropy and temperatures other than 1 are not needed by SFT and not implemented."""
    import torch
    import torch.nn.functional as F

    if with_entropy or temperature != 1.0:
        raise NotImplementedError("the one-pass candidate computes SFT's log-probs only")
    am = attention_mask.to(torch.long)
    lengths = am.sum(1)
    b, t = input_ids.shape
    want = am.bool().clone()
    want[:, 0] = False
    if score_mask is not None:
        want &= score_mask.bool()
    out = torch.zeros(b, t, dtype=torch.float32)
    if not bool(want.any()):
        return out, None
    first = torch.where(want.any(1), want.float().argmax(1), lengths)
    start = (first - 1).clamp(min=0)
    last = t - 1 - want.flip(1).float().argmax(1)
    tc = int((last - start).clamp(min=1).max())
    inner = self._inner
    layers = list(inner.layers)
    h = inner.embed_tokens(input_ids)
    cos, sin = self._rope(torch.arange(t).expand(b, t), h.dtype)
    for layer in layers[:-1]:
        q, k, v = self._qkv(layer, h, cos, sin)
        h = self._finish_layer(layer, h, self._attend(q, k, v, None))
    layer, attn = layers[-1], layers[-1].self_attn
    x = self._norm(h, layer.input_layernorm)
    kv = F.linear(x, torch.cat([attn.k_proj.weight, attn.v_proj.weight]),
                  torch.cat([attn.k_proj.bias, attn.v_proj.bias])).view(b, t, 2 * self.n_kv, self.head_dim)
    k = self._apply_rope(kv[:, :, : self.n_kv], cos, sin).transpose(1, 2)
    v = kv[:, :, self.n_kv :].transpose(1, 2)
    idx = (start[:, None] + torch.arange(tc)[None, :]).clamp(max=t - 1)  # [B, Tc]: the positions computed
    xc = x.gather(1, idx[:, :, None].expand(b, tc, x.shape[-1]))
    q = F.linear(xc, attn.q_proj.weight, attn.q_proj.bias).view(b, tc, self.n_heads, self.head_dim)
    cq, sq = self._rope(idx, h.dtype)
    q = self._apply_rope(q, cq, sq).transpose(1, 2)
    mask = (torch.arange(t)[None, None, :] <= idx[:, :, None])[:, None]  # [B, 1, Tc, T]: causal at each position
    att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim**-0.5, enable_gqa=True)
    hc = self._finish_layer(layer, h.gather(1, idx[:, :, None].expand(b, tc, h.shape[-1])), att)
    target = idx + 1  # position k of row r predicts token start[r] + k + 1
    picked = (want.gather(1, target.clamp(max=t - 1)) & (target < t)
              & (torch.arange(tc)[None, :] < (last - start)[:, None]))
    rows, cols = picked.nonzero(as_tuple=True)
    z = self.logits(hc[rows, cols]).float().clamp(min=torch.finfo(torch.float32).min)
    tpos = target[rows, cols]
    lp = z.gather(-1, input_ids[rows, tpos][:, None]).squeeze(-1) - torch.logsumexp(z, -1)
    return out.index_put((rows, tpos), lp), None


def matmul_attend(self, q, k, v, mask):
    """``FastQwen2._attend`` (queries ``[B, H, Tq, d]`` over keys and values ``[B, Hkv, Tk, d]``, `mask` a boolean
    ``[B, 1, Tq, Tk]`` of the keys each query may see, or None: causal when Tq > 1) by two matrix products and a
    softmax, instead of ``scaled_dot_product_attention`` (CPU flash attention)."""
    import torch

    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim**-0.5
    if mask is None and q.shape[2] > 1:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril(k.shape[2] - q.shape[2])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), v)


def _sft_batch(config: str, episodes: int) -> tuple[Any, Any, dict[str, Any]]:
    """The trainer of `config` (one thread, no cache) and the demonstration batch its warm start would train on."""
    import torch

    from ragen_core.training import sft
    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    cfg = load_config(ROOT / "configs" / f"{config}.toml",
                      ["run.progress=false", "run.threads=1", 'warm_start.cache_dir=""',
                       f"warm_start.sft_episodes={episodes}", "warm_start.epochs=1"])
    trainer = Trainer(cfg, tempfile.mkdtemp(prefix="speed-candidates-"))
    captured: dict[str, Any] = {}
    real = sft.sft_train

    def capture(policy, batch, **kwargs):
        captured.update(batch=batch, kwargs=kwargs)
        return {"sft/loss_first": 0.0, "sft/loss_last": 0.0, "sft/mean_token_prob": 0.0}

    sft.sft_train = capture
    try:
        sft.warm_start(trainer.policy, cfg)
    finally:
        sft.sft_train = real
    kwargs = dict(captured["kwargs"], progress=False)
    kwargs["generator"] = torch.Generator().manual_seed(0)
    return trainer, captured["batch"], kwargs


def shared_head(batch: Any) -> dict[str, float]:
    """The longest token prefix common to every row's prompt (the tokens before its first trained token)."""
    ids = batch.input_ids.tolist()
    firsts = [row.index(1) if 1 in row else len(row) for row in (batch.loss_mask != 0).int().tolist()]
    prompts = [r[:f] for r, f in zip(ids, firsts)]
    common = len(prompts[0])
    for p in prompts[1:]:
        n = 0
        while n < min(common, len(p)) and p[n] == prompts[0][n]:
            n += 1
        common = n
    return {"rows": len(prompts), "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
            "common_head_tokens": common}


def measure_sft(config: str, episodes: int, repeats: int) -> dict[str, Any]:
    """Every SFT candidate on `config`'s batch, timed in `repeats` rounds (a round runs every candidate once, in
    turn): ms per step (the fastest round), today's time over the candidate's per round (median and range), and
    the largest weight difference from today's after the epoch."""
    import torch

    from ragen_core.policy.fast_qwen2 import FastQwen2
    from ragen_core.training import sft

    trainer, batch, kwargs = _sft_batch(config, episodes)
    model = trainer.policy.model
    start = copy.deepcopy(model.state_dict())
    steps = (batch.input_ids.shape[0] + kwargs["batch_size"] - 1) // kwargs["batch_size"]
    originals = {"token_logprobs": FastQwen2.token_logprobs, "_qkv": FastQwen2._qkv,
                 "_finish_layer": FastQwen2._finish_layer, "_attend": FastQwen2._attend}

    def restore() -> None:
        for name in ("token_logprobs", "_qkv", "_finish_layer", "_attend"):
            setattr(FastQwen2, name, originals[name])
        trainer.policy.fused_training = False

    compiled: dict[str, Callable] = {}
    compile_s = None

    def install(candidate: str) -> None:
        restore()
        if candidate == "one pass":
            FastQwen2.token_logprobs = one_pass_token_logprobs
        elif candidate == "attention by matmul":
            FastQwen2._attend = matmul_attend
        elif candidate == "compiled layers":
            if not compiled:
                compiled["_qkv"] = torch.compile(originals["_qkv"], dynamic=True)
                compiled["_finish_layer"] = torch.compile(originals["_finish_layer"], dynamic=True)
            FastQwen2._qkv, FastQwen2._finish_layer = compiled["_qkv"], compiled["_finish_layer"]
        elif candidate in ("fused layers", "model.fused_training"):
            trainer.policy.fused_training = True

    def run(candidate: str) -> tuple[float, dict[str, torch.Tensor]]:
        install(candidate)
        try:
            model.load_state_dict(start)
            # AdamW's fused step: sft_train's own switch (what `model.fused_training` passes it)
            kw = dict(kwargs, generator=torch.Generator().manual_seed(0),
                      fused=candidate in ("fused AdamW", "model.fused_training"))
            t0 = time.perf_counter()
            sft.sft_train(trainer.policy, batch, **kw)
            return time.perf_counter() - t0, {k: v.detach().clone() for k, v in model.state_dict().items()}
        finally:
            restore()

    # The first compiled epoch compiles (and recompiles per new shape class); it is timed apart, not ranked.
    compile_s, _ = run("compiled layers")
    seconds: dict[str, list[float]] = {c: [] for c in SFT_CANDIDATES}
    weights: dict[str, dict[str, torch.Tensor]] = {}
    for _ in range(repeats):  # a round times every candidate once, so a round's ratios share its machine state
        for candidate in SFT_CANDIDATES:
            spent, weights[candidate] = run(candidate)
            seconds[candidate].append(spent)
    today = weights["today"]
    rows = []
    for candidate in SFT_CANDIDATES:
        diff = max(float((weights[candidate][k] - today[k]).abs().max()) for k in today)
        if candidate != "today" and diff == 0.0:  # every candidate rounds differently: equal weights mean it never ran
            raise RuntimeError(f"the SFT candidate {candidate!r} left today's weights bit for bit: it ran today's path")
        ratios = sorted(t / c for t, c in zip(seconds["today"], seconds[candidate]))
        rows.append({"candidate": candidate, "ms_per_step": 1e3 * min(seconds[candidate]) / steps,
                     "seconds": seconds[candidate], "vs_today": statistics.median(ratios),
                     "vs_today_range": [ratios[0], ratios[-1]], "max_weight_diff": diff})
    return {"config": config, "episodes": episodes, "steps": steps, "compile_first_epoch_s": compile_s,
            "candidates": rows, "head": shared_head(batch)}


def measure_adamw(steps: int = 200) -> list[dict[str, Any]]:
    """AdamW on the shipped tiny model's parameter shapes: per tensor, foreach, one flat buffer, fused."""
    import torch
    from transformers import AutoModelForCausalLM

    from ragen_core.policy.tiny import default_tiny_model_dir

    model = AutoModelForCausalLM.from_pretrained(default_tiny_model_dir())
    shapes = [tuple(p.shape) for p in model.parameters()]
    init = [p.detach().clone() for p in model.parameters()]
    gen = torch.Generator().manual_seed(0)
    grads = [[torch.randn(s, generator=gen) * 1e-2 for s in shapes] for _ in range(steps)]

    def run(kind: str) -> tuple[float, list[torch.Tensor]]:
        if kind == "flat":
            flat = torch.nn.Parameter(torch.cat([w.reshape(-1) for w in init]))
            params, opt = [flat], torch.optim.AdamW([flat], lr=1e-3)
        else:
            params = [torch.nn.Parameter(w.clone()) for w in init]
            opt = torch.optim.AdamW(params, lr=1e-3, foreach=kind == "foreach", fused=kind == "fused" or None)
        spent = 0.0
        for k, g in enumerate(grads):
            if kind == "flat":
                params[0].grad = torch.cat([x.reshape(-1) for x in g])
            else:
                for p, x in zip(params, g):
                    p.grad = x.clone()
            for group in opt.param_groups:
                group["lr"] = 1e-3 * (1 - k / (2 * steps))
            t0 = time.perf_counter()
            opt.step()
            spent += time.perf_counter() - t0
        out = [p.detach() for p in params]
        if kind == "flat":
            out = list(torch.split(out[0], [w.numel() for w in init]))
        return 1e3 * spent / steps, [o.reshape(-1) for o in out]

    ms_today, today = run("per tensor")
    rows = [{"kind": "per tensor (today)", "ms_per_step": ms_today, "bit_identical": True}]
    for kind in ("foreach", "flat", "fused"):
        ms, got = run(kind)
        rows.append({"kind": kind, "ms_per_step": ms,
                     "bit_identical": all(torch.equal(a, b) for a, b in zip(today, got))})
    return rows


#: One decoding step's attention for every row and key/value head in one pass over its cached keys and values
#: (all the head's queries together), C99: what a fused kernel for this step could reach on one core.
_ATTENTION_C = r"""
#include <math.h>
void decode_attention(const float *q, const float *k, const float *v, const float *bias, float *out,
                      int n, int hk, int rep, int d, int cap, int t_len, float scale) {
    float s[rep * t_len];
    float acc[rep * d];
    for (int r = 0; r < n; r++) {
        for (int h = 0; h < hk; h++) {
            const float *K = k + (long)(r * hk + h) * cap * d, *V = v + (long)(r * hk + h) * cap * d;
            const float *Q = q + (long)(r * hk + h) * rep * d, *B = bias + (long)r * cap;
            for (int t = 0; t < t_len; t++)  /* scores: every query of the head against each key, read once */
                for (int j = 0; j < rep; j++) {
                    float a = 0.0f;
                    for (int x = 0; x < d; x++) a += Q[j * d + x] * K[t * d + x];
                    s[j * t_len + t] = a * scale + B[t];
                }
            float sum[rep];
            for (int j = 0; j < rep; j++) {  /* softmax numerators, a loop the compiler vectorises */
                float m = -INFINITY, z = 0.0f;
                float *row = s + j * t_len;
                for (int t = 0; t < t_len; t++) m = row[t] > m ? row[t] : m;
                for (int t = 0; t < t_len; t++) { row[t] = expf(row[t] - m); z += row[t]; }
                sum[j] = z;
            }
            for (int j = 0; j < rep * d; j++) acc[j] = 0.0f;
            for (int t = 0; t < t_len; t++)  /* values, read once */
                for (int j = 0; j < rep; j++) {
                    float w = s[j * t_len + t];
                    for (int x = 0; x < d; x++) acc[j * d + x] += w * V[t * d + x];
                }
            float *O = out + (long)(r * hk + h) * rep * d;
            for (int j = 0; j < rep; j++)
                for (int x = 0; x < d; x++) O[j * d + x] = acc[j * d + x] / sum[j];
        }
    }
}
"""


#: The C kernel's compiler flags (the link step takes none of them: see :func:`_c_attention`).
C_FLAGS = ("-O3", "-march=native", "-ffast-math")


def _c_attention() -> Callable | None:
    """The C kernel above, compiled with the system's C compiler (:data:`C_FLAGS`) and loaded with ctypes; None
    where there is no compiler or it fails.

    Compiled with ``-ffast-math`` (vectorised reductions and exponentials) but linked without it: linking a
    shared library with it (gcc 12) adds start-up code that turns on flush-to-zero for the whole process when the
    library loads, and every later float computation in the process (a test run after it, hypothesis's float
    strategies) then loses its subnormal numbers."""
    import ctypes
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="speed-candidates-c-"))
    (folder / "attention.c").write_text(_ATTENTION_C)
    lib = folder / "attention.so"
    try:
        obj = folder / "attention.o"
        subprocess.run([cc, *C_FLAGS, "-fPIC", "-c", "-o", str(obj), str(folder / "attention.c")], check=True,
                       capture_output=True, timeout=120)
        subprocess.run([cc, "-shared", "-o", str(lib), str(obj), "-lm"], check=True, capture_output=True, timeout=120)
        fn = ctypes.CDLL(str(lib)).decode_attention
    except (OSError, subprocess.SubprocessError):
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 6 + [ctypes.c_float]

    def attention(q, kb, vb, bias, t: int, scale: float):
        import torch

        n, hk, rep, d = q.shape
        out = torch.empty_like(q)
        fn(q.data_ptr(), kb.data_ptr(), vb.data_ptr(), bias.data_ptr(), out.data_ptr(), n, hk, rep, d,
           kb.shape[2], t, scale)
        return out

    return attention


def measure_decode_attention(reps: int = 2000) -> list[dict[str, Any]]:
    """One layer's decoding attention at 32 rows x 2 key/value heads x 2 queries each, d = 32, 200 cached keys."""
    import torch
    import torch.nn.functional as F

    n, hk, rep, d, cap, t = 32, 2, 2, 32, 260, 200
    group, tp = 4, 150  # rows in groups of 4 sharing a prompt of 150 keys (then 50 decoded keys of their own)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(n, hk, rep, d, generator=gen)
    kb = torch.randn(n, hk, cap, d, generator=gen)
    vb = torch.randn(n, hk, cap, d, generator=gen)
    kp = torch.randn(n // group, hk, tp, d, generator=gen)  # each group's prompt keys and values, stored once
    vp = torch.randn(n // group, hk, tp, d, generator=gen)
    kb[:, :, :tp] = kp.repeat_interleave(group, 0)  # today's cache holds a copy per row
    vb[:, :, :tp] = vp.repeat_interleave(group, 0)
    kt = kb.transpose(2, 3).contiguous()  # the same keys cached as [d, T]
    bias = torch.zeros(n, 1, 1, cap)
    bias[:, :, :, :3] = float("-inf")  # a row's padding before a shorter prompt
    scale = d**-0.5

    def today():
        s = torch.matmul(q, kb[:, :, :t].transpose(2, 3)).mul_(scale).add_(bias[:, :, :, :t])
        return torch.matmul(torch.softmax(s, -1), vb[:, :, :t])

    def keys_transposed():
        s = torch.matmul(q, kt[:, :, :, :t]).mul_(scale).add_(bias[:, :, :, :t])
        return torch.matmul(torch.softmax(s, -1), vb[:, :, :t])

    def sdpa():
        return F.scaled_dot_product_attention(q.reshape(n, hk * rep, 1, d), kb[:, :, :t], vb[:, :, :t],
                                              attn_mask=bias[:, :, :, :t], scale=scale,
                                              enable_gqa=True).view(n, hk, rep, d)

    k3, v3 = kb.view(n * hk, cap, d), vb.view(n * hk, cap, d)

    def three_d():  # the same products on [rows x heads, ., .] views: torch.bmm directly, no 4-D matmul
        s = torch.bmm(q.view(n * hk, rep, d), k3[:, :t].transpose(1, 2)).view(n, hk, rep, t)
        s = s.mul_(scale).add_(bias[:, :, :, :t])
        return torch.bmm(torch.softmax(s, -1).view(n * hk, rep, t), v3[:, :t]).view(n, hk, rep, d)

    g = n // group

    def grouped():  # a group's queries against its prompt's keys in one product; decoded keys per row; one softmax
        qg = q.view(g, group, hk, rep, d).transpose(1, 2).reshape(g, hk, group * rep, d)
        sp = torch.matmul(qg, kp.transpose(2, 3)).view(g, hk, group, rep, tp).transpose(1, 2).reshape(n, hk, rep, tp)
        sd = torch.matmul(q, kb[:, :, tp:t].transpose(2, 3))
        p = torch.softmax(torch.cat([sp, sd], -1).mul_(scale).add_(bias[:, :, :, :t]), -1)
        pp = p[..., :tp].reshape(g, group, hk, rep, tp).transpose(1, 2).reshape(g, hk, group * rep, tp)
        op = torch.matmul(pp, vp).view(g, hk, group, rep, d).transpose(1, 2).reshape(n, hk, rep, d)
        return op + torch.matmul(p[..., tp:], vb[:, :, tp:t])

    candidates = [("today", today), ("keys cached transposed", keys_transposed),
                  ("scaled_dot_product_attention", sdpa), ("the same products on 3-D views (torch.bmm)", three_d),
                  (f"a group's prompt keys read once (groups of {group}, {tp} shared keys)", grouped)]
    kernel = _c_attention()
    if kernel is not None:
        flat_bias = bias[:, 0, 0, :].contiguous()
        candidates.append(("a hand-written C kernel (one pass, -O3 -march=native -ffast-math)",
                           lambda: kernel(q, kb, vb, flat_bias, t, scale)))
    # The floor of any kernel: reading this layer's cached keys and values once, at the rate a sum reads as many
    # bytes already in cache.
    cached = torch.randn(2 * n * hk * t * d, generator=gen)
    candidates.append(("reading the keys and values once (a sum over as many bytes: a floor, not attention)",
                       lambda: cached.sum()))
    ref = today()
    rows = []
    for name, fn in candidates:
        for _ in range(50):
            fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        floor = out.dim() == 0
        rows.append({"kind": name, "us_per_layer": 1e6 * (time.perf_counter() - t0) / reps,
                     "bit_identical": None if floor else bool(torch.equal(out, ref)),
                     "max_diff": None if floor else float((out - ref).abs().max())})
    return rows


def measure_matrix_rate() -> list[dict[str, float]]:
    """GFLOP/s of square float32 matrix products at one thread (the best of a few repeats)."""
    import torch

    rows = []
    for n in (512, 1024, 2048):
        gen = torch.Generator().manual_seed(n)
        a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
        reps = max(2, int(4e9 / (2 * n**3)))
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            best = min(best, (time.perf_counter() - t0) / reps)
        rows.append({"n": n, "gflops": 2 * n**3 / best / 1e9})
    return rows


# ---------------------------------------------------------------------------------------------- report
def markdown(sft_rows: list[dict[str, Any]], adamw: list[dict[str, Any]], attention: list[dict[str, Any]],
             matrix: list[dict[str, float]]) -> str:
    rounds = len(sft_rows[0]["candidates"][0]["seconds"]) if sft_rows else 0
    lines = [f"The warm start's SFT step on real demonstration batches (one epoch from the same weights, {rounds} "
             "rounds each timing every candidate once, one torch thread; ms per step of the fastest round, today's "
             "time over the candidate's: median of the rounds [lowest, highest]):", "",
             "| config | rows, steps | candidate | ms / step | today / candidate | largest weight difference from "
             "today after the epoch |", "|---|---|---|---:|---|---:|"]
    for r in sft_rows:
        for c in r["candidates"]:
            lo, hi = c["vs_today_range"]
            lines.append(f"| {r['config']} | {r['head']['rows']}, {r['steps']} | {c['candidate']} | "
                         f"{c['ms_per_step']:.1f} | {c['vs_today']:.2f}x [{lo:.2f}, {hi:.2f}] | "
                         f"{c['max_weight_diff']:.1e} |")
    lines += ["", "Compiled layers: the first epoch, which compiles, took "
              + ", ".join(f"{r['compile_first_epoch_s']:.1f} s ({r['config']})" for r in sft_rows) + ". "
              "The longest token prefix every row's prompt shares: "
              + ", ".join(f"{r['head']['common_head_tokens']} of {r['head']['prompt_tokens_mean']:.0f} tokens "
                          f"({r['config']})" for r in sft_rows) + ".", "",
              "| AdamW on the tiny model's 26 parameters | ms / step | parameters equal today's bit for bit |",
              "|---|---:|---|"]
    lines += [f"| {r['kind']} | {r['ms_per_step']:.2f} | {'yes' if r['bit_identical'] else 'no'} |" for r in adamw]
    lines += ["", "| decoding attention, one layer (32 rows, 200 keys) | us | equal to today's bit for bit |",
              "|---|---:|---|"]
    for r in attention:
        same = ("n/a" if r["bit_identical"] is None else
                "yes" if r["bit_identical"] else f"no (largest difference {r['max_diff']:.1e})")
        lines.append(f"| {r['kind']} | {r['us_per_layer']:.0f} | {same} |")
    lines += ["", "Square float32 matrix products at one thread: "
              + ", ".join(f"{r['n']}: {r['gflops']:.0f} GFLOP/s" for r in matrix) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_speed_candidates",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=positive_int, default=160, help="demonstration episodes per config")
    parser.add_argument("--repeats", type=positive_int, default=4, help="rounds: timed epochs per candidate")
    parser.add_argument("--quick", action="store_true", help="16 episodes, one repeat (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.repeats = 16, 1
    import torch

    from benchmarks.machine import describe_machine
    from benchmarks.readme_tables import write_result

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    sft_rows = [measure_sft(c, args.episodes, args.repeats) for c in CONFIGS]
    adamw = measure_adamw()
    attention = measure_decode_attention(200 if args.quick else 2000)
    matrix = measure_matrix_rate()
    result = {"benchmark": "speed_candidates", "episodes": args.episodes, "repeats": args.repeats, "sft": sft_rows,
              "adamw": adamw, "decode_attention": attention, "matrix_rate": matrix, "machine": describe_machine(),
              "markdown": markdown(sft_rows, adamw, attention, matrix), "wall_s": time.perf_counter() - t0}
    name = "speed_candidates_quick.json" if args.quick else "speed_candidates.json"
    write_result(result, RESULTS / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
