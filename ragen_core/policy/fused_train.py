"""The lean forward's layers as two autograd functions with compiled element-wise pieces (`model.fused_training`).

Autograd records every operator of :meth:`ragen_core.policy.fast_qwen2.FastQwen2._qkv` and ``_finish_layer``
(about 30 per layer) and replays their backwards one by one, with the concatenations and splits the fused
projections need. On the tiny model's rows (4 rows of ~190 tokens, hidden 128) those small operators, each a pass
over its tensors, cost about as much as the matrix products. Here each layer is two nodes of the graph whose
element-wise work is one compiled pass per piece (``ragen_core/policy/csrc/decode_step.cpp``, the ``train_*``
operators); the matrix products stay ATen's (MKL), attention stays `scaled_dot_product_attention`:

- :class:`NormQKVRope`: ``x = RMSNorm(h) w``; ``[q | k | v] = x [W_q; W_k; W_v]^T + b``; RoPE on q and k.
- :class:`FinishLayer`: ``h2 = h + o W_o^T``; ``x2 = RMSNorm(h2) w2``; ``[g | u] = x2 [W_g; W_u]^T``;
  ``out = h2 + (silu(g) u) W_d^T``.

These are transformers' Qwen2 definitions (as the operator path computes them). The backwards are the derivatives
written out (N = rows x tokens, D hidden, r = 1 / sqrt(mean(h^2) + eps) per row, s = sigmoid(g)):

    RMSNorm  y = w h r:                 dw = sum_N dy h r,   dh = r (g - h r mean_D(g h r)),   g = dy w
    RoPE     y = x cos + roll(x, d/2) sin:   dx = dy cos + roll(dy sin, d/2)   (a half-turn roll is its own inverse)
    SwiGLU   a = g s u:                 du = da g s,   dg = da u s (1 + g (1 - s))

The values equal the operator path's within float32 rounding, not bit for bit (other summation orders, another
exponential), so a run trained this way draws other numbers from the same seed: that is why it is a config switch,
off by default, recorded in the run's config. tests/policy/test_fused_train.py compares log-probs and every
parameter's gradient with transformers' forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

__all__ = ["FinishLayer", "NormQKVRope", "fused_training_problem", "ops"]

_OPS: list[Any] = []


def ops() -> Any:
    """The compiled ``train_*`` operators (``torch.ops.<namespace>``); RuntimeError naming why where they cannot be
    built (no C++ compiler, a failed compile)."""
    if not _OPS:
        from ragen_core.policy.native import training_ops

        found, status = training_ops()
        if found is None:
            raise RuntimeError(f"model.fused_training needs the compiled library, which is not available: {status}")
        _OPS.append(found)
    return _OPS[0]


def fused_training_problem(model: torch.nn.Module, device: torch.device | str) -> str | None:
    """None when `model.fused_training` can run `model` on `device`, else why not (one line): float32 on the CPU,
    hidden and intermediate sizes multiples of 8, a head dim multiple of 16, the compiled library built."""
    dev = torch.device(device)
    if dev.type != "cpu":
        return f"it runs on the CPU only (the run's device is {dev})"
    params = list(model.parameters())
    if any(p.dtype != torch.float32 for p in params):
        return "it needs float32 weights (model.dtype = float32)"
    cfg = model.config
    d = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    if cfg.hidden_size % 8 or cfg.intermediate_size % 8 or d % 16:
        return (f"it needs a hidden and an intermediate size of multiples of 8 and a head dim of a multiple of 16 "
                f"(this model: {cfg.hidden_size}, {cfg.intermediate_size}, {d})")
    try:
        ops()
    except RuntimeError as exc:
        return str(exc)
    return None


def _rows(x: torch.Tensor, width: int) -> torch.Tensor:
    return x.reshape(-1, width).contiguous()


class NormQKVRope(torch.autograd.Function):
    """Queries ``[B, Hq, T, d]`` (None without `wq`), keys and values ``[B, Hkv, T, d]`` (contiguous) of a layer on
    the residual stream `h` ``[B, T, D]``: RMSNorm (weight `wn`, `eps`), the fused projection ``[W_q; W_k; W_v]``
    with its biases, RoPE (`cos`, signed `sin`: ``[B, T, 1, d]`` as :meth:`FastQwen2._rope` gives them) on queries
    and keys."""

    @staticmethod
    def forward(ctx, h, wn, wq, wk, wv, bq, bk, bv, cos, sin, eps: float, n_q: int, n_kv: int, d: int):
        b, t, dim = h.shape
        lib = ops()
        hf = _rows(h, dim)
        x, r = lib.train_rms_forward(hf, wn.contiguous(), eps)
        has_q = wq is not None
        w = torch.cat([wq, wk, wv]) if has_q else torch.cat([wk, wv])
        bias = torch.cat([bq, bk, bv]) if has_q else torch.cat([bk, bv])
        qkv = torch.addmm(bias, x, w.t())
        cos2, sin2 = _rows(cos, d), _rows(sin, d)
        hq = n_q if has_q else 0
        q, k, v = lib.train_rope_split(qkv, cos2, sin2, b, t, hq, n_kv, d)
        ctx.save_for_backward(hf, wn, r, x, w, cos2, sin2)
        ctx.dims = (b, t, dim, hq, n_kv, d)
        return (q if has_q else None), k, v

    @staticmethod
    @once_differentiable
    def backward(ctx, dq, dk, dv):
        hf, wn, r, x, w, cos2, sin2 = ctx.saved_tensors
        b, t, dim, hq, n_kv, d = ctx.dims
        lib = ops()
        fix = [None if g is None else (g if g.stride(-1) == 1 else g.contiguous()) for g in (dq, dk, dv)]
        dqkv = lib.train_rope_merge(fix[0] if hq else None, fix[1], fix[2], cos2, sin2, b, t, hq, n_kv, d)
        dw = dqkv.t().mm(x)
        db = dqkv.sum(0)
        dh, dwn = lib.train_rms_backward(dqkv.mm(w), hf, wn.contiguous(), r, None)
        sizes = ([hq * d] if hq else []) + [n_kv * d, n_kv * d]
        dws, dbs = list(dw.split(sizes)), list(db.split(sizes))
        if not hq:
            dws, dbs = [None, *dws], [None, *dbs]
        return (dh.view(b, t, dim), dwn, *dws, *dbs, None, None, None, None, None, None)


class FinishLayer(torch.autograd.Function):
    """The rest of a layer on the residual stream `h` ``[B, T, D]`` and the attention `attn` ``[B, Hq, T, d]``:
    ``h2 = h + attn W_o^T``, then ``h2 + (silu(g) u) W_d^T`` with ``[g | u] = RMSNorm(h2) w2 [W_g; W_u]^T``."""

    @staticmethod
    def forward(ctx, h, attn, wo, wn, wg, wu, wd, eps: float):
        b, t, dim = h.shape
        lib = ops()
        nh, d = attn.shape[1], attn.shape[3]
        o = attn.transpose(1, 2).reshape(b * t, nh * d)
        h2 = torch.addmm(_rows(h, dim), o, wo.t())
        x2, r = lib.train_rms_forward(h2, wn.contiguous(), eps)
        wgu = torch.cat([wg, wu])
        gu = x2.mm(wgu.t())
        a = lib.train_swiglu_forward(gu)
        out = torch.addmm(h2, a, wd.t())
        ctx.save_for_backward(o, h2, r, x2, gu, a, wo, wn, wgu, wd)
        ctx.dims = (b, t, dim, nh, d, wg.shape[0])
        return out.view(b, t, dim)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        o, h2, r, x2, gu, a, wo, wn, wgu, wd = ctx.saved_tensors
        b, t, dim, nh, d, inter = ctx.dims
        lib = ops()
        dout = _rows(dout, dim)
        dwd = dout.t().mm(a)
        dgu = lib.train_swiglu_backward(dout.mm(wd), gu)
        dwgu = dgu.t().mm(x2)
        dh2, dwn = lib.train_rms_backward(dgu.mm(wgu), h2, wn.contiguous(), r, dout)
        dwo = dh2.t().mm(o)
        dattn = dh2.mm(wo).view(b, t, nh, d).transpose(1, 2)
        dwg, dwu = dwgu.split(inter)
        return dh2.view(b, t, dim), dattn, dwo, dwn, dwg, dwu, dwd, None
