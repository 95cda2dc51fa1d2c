"""A lean forward of transformers' `Qwen2ForCausalLM` (the tiny model's architecture) that computes less.

The tiny model has 0.62 M parameters, so a training run's time is its arithmetic: about 1.24 MFLOP per token
forward, 3x that with the backward. This module computes the function of the transformers model (it reads the
model's own parameters, so gradients, the optimiser and checkpoints are unchanged) while skipping work whose
result nobody reads:

1. **Logits only where they are read.** The output layer (vocabulary x hidden, a fifth of the model) runs only at
   the positions whose next-token log-prob is asked for (a response's tokens), not at every prompt token.
2. **The last layer only where it is read.** A position whose output nobody reads contributes to later positions
   only through its keys and values. So each sequence is split into a *prefix* (the positions before the first one
   whose output is read) and a *continuation*; the prefix runs every layer except the last one's attention and MLP
   (it needs only the last layer's keys and values). For the 2-layer tiny model a prompt token costs 0.26 MMAC
   instead of 0.62.
3. **Shared prefixes computed once.** Sequences whose prefixes are the same tokens (the G rollouts of a group start
   from one prompt) share one prefix row; each continuation attends to its prefix's keys and values. The gradient
   of a shared prefix is the sum over its continuations, as it is for separate copies.
4. **Decoding from shared prefixes.** Generation prefills each distinct prompt once and decodes every sequence
   against its prompt's cached keys and values, computing logits only for the rows still generating.

Attention per layer for a continuation token at absolute position ``p`` of a sequence whose prefix has
``L`` tokens: keys = [prefix keys 0..L-1 ; continuation keys up to p], causal, with RoPE at absolute positions
(``positions = cumsum(attention_mask) - 1``, as :class:`ragen_core.policy.hf.HFPolicy` uses). Every other piece
(RMSNorm in float32, RoPE, grouped-query attention by SDPA, SwiGLU, the output layer, tied or not) is transformers' own
definition; the tests compare log-probs, entropies, gradients and sampled tokens with transformers' forward.

Only plain `Qwen2ForCausalLM` models with the default RoPE, full attention everywhere, SiLU, no attention dropout,
no gradient checkpointing, every layer run (``config.num_hidden_layers``) and no module changed (no hooks, no
forward set on an instance, no class but torch's and transformers' own: a LoRA or quantised layer) take this path
(:func:`unsupported_reason` says why another does not); anything else, images included, goes through transformers'
forward unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ragen_core.policy.fused_train import FinishLayer, NormQKVRope, fused_training_problem

__all__ = ["FastQwen2", "SplitRows", "distinct_traces", "fused_training_blocker", "split_rows",
           "unsupported_reason"]


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """None when `model` can use :class:`FastQwen2`, else why not (one line)."""
    if type(model).__name__ != "Qwen2ForCausalLM":  # subclasses (the vision model) change the forward
        return f"{type(model).__name__} is not a plain Qwen2ForCausalLM"
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"rope_type {rope.get('rope_type')!r} is not the default RoPE"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
        return "sliding-window layers"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r} is not silu"
    if float(getattr(cfg, "attention_dropout", 0.0) or 0.0) != 0.0:
        return "attention dropout"
    if getattr(model, "is_activation_checkpointing", None) is True or (
            not hasattr(type(model), "is_activation_checkpointing")
            and getattr(model, "is_gradient_checkpointing", False)):
        return "gradient checkpointing"
    rotary = model.model.rotary_emb
    if float(getattr(rotary, "attention_scaling", 1.0)) != 1.0:
        return "scaled RoPE"
    if getattr(rotary, "rope_type", "default") != "default":  # the config's type may have changed since the load
        return f"rope_type {rotary.rope_type!r} is not the default RoPE"
    if len(model.model.layers) != int(cfg.num_hidden_layers):  # transformers runs the config's first layers only
        return f"config.num_hidden_layers = {cfg.num_hidden_layers} of {len(model.model.layers)} layers"
    return _altered_module(model)


#: The module classes the lean forward may stand in for: it reads their parameters instead of calling them, so any
#: other class in their place (a LoRA or quantised layer, a user's subclass) would be skipped.
_TORCH_CLASSES = (torch.nn.Linear, torch.nn.Embedding, torch.nn.ModuleList, torch.nn.SiLU)
_TRANSFORMERS_MODULES = ("transformers.models.qwen2.modeling_qwen2", "transformers.activations")


def _altered_module(model: torch.nn.Module) -> str | None:
    """Why a module of `model` computes something the lean forward would skip (one line), else None: a forward or
    backward hook, a forward set on the instance (accelerate's offloading hooks set one), or a class that is
    neither one of torch's layers it stands in for nor transformers' own (`_TORCH_CLASSES`,
    `_TRANSFORMERS_MODULES`)."""
    for name, mod in model.named_modules():
        where = name or type(model).__name__
        if mod._forward_hooks or mod._forward_pre_hooks or mod._backward_hooks or mod._backward_pre_hooks:
            return f"{where} has hooks"
        if "forward" in vars(mod):
            return f"{where} has a forward of its own"
        cls = type(mod)
        if cls not in _TORCH_CLASSES and cls.__module__ not in _TRANSFORMERS_MODULES:
            return f"{where} is a {cls.__module__}.{cls.__name__}"
        if cls.__module__ == "transformers.activations" and cls.__name__ != "SiLUActivation":
            return f"{where} is a {cls.__name__}, not SiLU"
    return None


# ---------------------------------------------------------------------------------------------- row splitting
@dataclass
class SplitRows:
    """Right-padded rows cut into shared prefixes and continuations (see :func:`split_rows`).

    Attributes:
        prefix_ids ``[U, Tp]`` and prefix_len ``[U]``: the distinct prefixes, right-padded (U may be 0 rows, Tp 0).
        cont_ids ``[B, Tc]``, cont_len ``[B]``: each row's continuation, right-padded.
        owner ``[B]``: the prefix row of each row (its prefix has ``prefix_len[owner]`` tokens, possibly 0).
        start ``[B]``: where the continuation starts in the original row (= its prefix's length).
    """

    prefix_ids: torch.Tensor
    prefix_len: torch.Tensor
    cont_ids: torch.Tensor
    cont_len: torch.Tensor
    owner: torch.Tensor
    start: torch.Tensor


def split_rows(input_ids: torch.Tensor, lengths: Sequence[int], starts: Sequence[int], pad_id: int,
               share: bool = True) -> SplitRows:
    """Cut row b of `input_ids` ``[B, T]`` (real tokens ``0..lengths[b]-1``) at ``starts[b]``: prefix = tokens
    before it, continuation = the rest. With `share`, rows whose prefixes are the same token sequence get one prefix
    row (in order of first appearance); an empty prefix is prefix row of length 0."""
    ids = input_ids.tolist()
    b = len(ids)
    keys: dict[tuple[int, ...], int] = {}
    prefixes: list[list[int]] = []
    owner = []
    for r in range(b):
        p = tuple(ids[r][: starts[r]])
        if not share:
            keys = {}
        if p not in keys:
            keys[p] = len(prefixes)
            prefixes.append(list(p))
        owner.append(keys[p] if share else len(prefixes) - 1)
    tp = max((len(p) for p in prefixes), default=0)
    prefix_ids = torch.full((len(prefixes), tp), pad_id, dtype=torch.long)
    for u, p in enumerate(prefixes):
        if p:
            prefix_ids[u, : len(p)] = torch.tensor(p, dtype=torch.long)
    cont_len = [lengths[r] - starts[r] for r in range(b)]
    tc = max(cont_len, default=0)
    cont_ids = torch.full((b, tc), pad_id, dtype=torch.long)
    for r in range(b):
        if cont_len[r]:
            cont_ids[r, : cont_len[r]] = input_ids[r, starts[r] : lengths[r]]
    return SplitRows(prefix_ids=prefix_ids, prefix_len=torch.tensor([len(p) for p in prefixes], dtype=torch.long),
                     cont_ids=cont_ids, cont_len=torch.tensor(cont_len, dtype=torch.long),
                     owner=torch.tensor(owner, dtype=torch.long), start=torch.tensor(list(starts), dtype=torch.long))


@dataclass
class _Packed:
    """The packed rows of one chunk of traces (:meth:`FastQwen2.cross_score`): trace ``r`` of ``n`` tokens is the
    rows ``first[r] .. first[r] + n - 1``; row ``first[r] + t`` holds the trace's t-th input (the prompt's last
    token for t = 0, else the trace's token t - 1) and is scored on ``targets`` (the trace's token t)."""

    n_tok: int  #: rows (the chunk's tokens)
    n_traces: int
    width: int  #: the longest trace's length (the padded own-key attention's width)
    seg: torch.Tensor  #: ``[n_tok]`` each row's trace
    first: torch.Tensor  #: ``[n_traces]`` each trace's first row
    t: torch.Tensor  #: ``[n_tok]`` each row's place in its trace
    targets: torch.Tensor  #: ``[n_tok]`` the token each row predicts


def distinct_traces(traces: Sequence[Sequence[Sequence[int]]]) -> tuple[list[list[int]], list[int]]:
    """``(flat, where)``: the distinct traces of the groups `traces` (``[P][G]`` token lists), in order of first
    appearance, and for every trace (group by group) its row in `flat`. Equal traces have equal scores, so each
    distinct one is scored once (a peaked policy repeats itself)."""
    index: dict[tuple[int, ...], int] = {}
    flat: list[list[int]] = []
    where = []
    for z in (tuple(z) for group in traces for z in group):
        if z not in index:
            index[z] = len(flat)
            flat.append(list(z))
        where.append(index[z])
    return flat, where


#: Rows (scored positions) per pass of :meth:`FastQwen2.cross_score` at most (unless `batch_tokens` is smaller).
_CROSS_ROWS = 2048
#: Rows whose logits (vocabulary-wide) are computed and normalised at once in :meth:`FastQwen2.cross_score`.
_LOGIT_ROWS = 512

#: The CPU kernel of scaled-dot-product attention that also returns each query's log-sum-exp of scores (what the
#: merging of two key sets' attentions needs); None where this torch has none (then matrix products compute it).
try:
    _FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
except (AttributeError, RuntimeError):  # pragma: no cover - an older torch: matrix products instead
    _FLASH_CPU = None


_FLASH_GQA: list[bool] = []  # whether _FLASH_CPU reads fewer key heads than query heads (found on first use)


def _flash_reads_grouped_heads(q: torch.Tensor) -> bool:
    """Whether :func:`_attention_lse` may pass keys and values with fewer heads than the queries to the kernel (the
    flash kernel of recent torch reads key head ``h // rep`` for query head ``h``, as transformers' ``repeat_kv``
    lays them out; checked once on a small example against repeated heads)."""
    if _FLASH_CPU is None or q.device.type != "cpu":
        return False
    if not _FLASH_GQA:
        gen = torch.Generator().manual_seed(0)
        q1, k1, v1 = (torch.randn(1, h, 5, 8, generator=gen) for h in (4, 2, 2))
        try:
            got = _FLASH_CPU(q1, k1, v1, 0.0, True, scale=0.3)
            want = _FLASH_CPU(q1, k1.repeat_interleave(2, 1), v1.repeat_interleave(2, 1), 0.0, True, scale=0.3)
            _FLASH_GQA.append(all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(got, want)))
        except RuntimeError:
            _FLASH_GQA.append(False)
    return _FLASH_GQA[0]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm without autograd's needs (``F.rms_norm`` is it bit for bit in float32; other dtypes
    normalise in float32 as transformers does), for decoding and cross-scoring."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    h = x.to(torch.float32)
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _turn_(pairs: torch.Tensor, turn: torch.Tensor) -> None:
    """RoPE in place on `pairs` ``[..., d/2, 2]`` (each RoPE pair side by side, see :meth:`FastQwen2.cross_score`):
    the pair as a complex number times `turn` (``cos + i sin`` of its angle, complex64)."""
    if pairs.dtype in (torch.float32, torch.float64):
        torch.view_as_complex(pairs).mul_(turn)
    else:  # no complex type of this precision: turn in float32
        pairs.copy_(torch.view_as_real(torch.view_as_complex(pairs.float()) * turn))


def _attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of queries ``[B, H, Tq, d]`` over keys and values ``[B, Hkv, Tk, d]`` (`causal`: query t
    sees keys 0..t; grouped-query: query head h reads key head ``h // (H / Hkv)``) and each query's log-sum-exp of
    its scaled scores: ``(out [B, H, Tq, d], lse [B, H, Tq])``."""
    if k.shape[1] != q.shape[1] and not _flash_reads_grouped_heads(q):  # grouped-query: each key head serves
        rep = q.shape[1] // k.shape[1]  # `rep` query heads in a row
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    if _FLASH_CPU is not None and q.device.type == "cpu":
        return _FLASH_CPU(q, k, v, 0.0, causal, scale=scale)
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.matmul(torch.exp(s - lse[..., None]).to(v.dtype), v), lse


def fused_training_blocker(policy: Any, device: torch.device | str, fast_forward: bool) -> str | None:
    """None when `model.fused_training` can run `policy` on `device` with `model.fast_forward` = `fast_forward`,
    else why not (one line): the lean forward off or not taken by this model, or
    :func:`ragen_core.policy.fused_train.fused_training_problem`. The trainer refuses such a config with it;
    `ragen eval` warns with it and scores through the operator path."""
    model = getattr(policy, "model", None)
    if not fast_forward:
        return "it trains the lean forward's layers, and model.fast_forward is false"
    if not hasattr(policy, "_fast_model") or model is None:
        return f"the policy backend {type(policy).__name__} has no lean forward"
    return unsupported_reason(model) or fused_training_problem(model, device)


# ---------------------------------------------------------------------------------------------- the model
class FastQwen2:
    """The lean forward of one `Qwen2ForCausalLM` (module docstring); holds no weights of its own."""

    def __init__(self, model: torch.nn.Module):
        why = unsupported_reason(model)
        if why is not None:
            raise ValueError(f"FastQwen2 cannot run this model: {why}")
        self.model = model
        cfg = model.config
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        #: Run `_qkv` and `_finish_layer` (training, prefill, scoring; not the decoding step) through the compiled
        #: training pieces of :mod:`ragen_core.policy.fused_train` (`model.fused_training`: float rounding).
        self.fused_training = False

    # ------------------------------------------------------------------ pieces (transformers' definitions)
    @property
    def _inner(self) -> torch.nn.Module:
        return self.model.model

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin ``[B, T, 1, d]`` for positions ``[B, T]`` (float32 angles, cast like transformers).
        The sign folds transformers' ``rotate_half`` (``cat(-x2, x1)``) into ``roll(x, d/2) * sin_signed``."""
        inv = self._inner.rotary_emb.inv_freq
        freqs = positions[..., None].float() * inv.to(device=positions.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        half = emb.shape[-1] // 2
        sign = torch.ones(emb.shape[-1], device=emb.device)
        sign[:half] = -1.0
        return emb.cos().to(dtype)[:, :, None], (emb.sin() * sign).to(dtype)[:, :, None]

    @staticmethod
    def _norm(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return norm.weight * h.to(dtype)

    @staticmethod
    def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
        """RoPE on ``[..., heads, d]``: ``x cos + rotate_half(x) sin`` with ``rotate_half(x) = roll(x, d/2) *
        sign``."""
        return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin_signed

    @staticmethod
    def _fused_qkv(a: torch.nn.Module, with_q: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The query (when asked), key and value projections as one weight and bias (one matrix product)."""
        mods = (a.q_proj, a.k_proj, a.v_proj) if with_q else (a.k_proj, a.v_proj)
        return torch.cat([m.weight for m in mods]), torch.cat([m.bias for m in mods])

    def _qkv(self, layer: torch.nn.Module, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             with_q: bool = True) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """Queries ``[B, H, T, d]`` (None unless `with_q`), keys and values ``[B, Hkv, T, d]`` of `layer` on the
        residual stream `h` ``[B, T, hidden]``."""
        if self.fused_training:
            a, n = layer.self_attn, layer.input_layernorm
            return NormQKVRope.apply(h, n.weight, a.q_proj.weight if with_q else None, a.k_proj.weight,
                                     a.v_proj.weight, a.q_proj.bias if with_q else None, a.k_proj.bias,
                                     a.v_proj.bias, cos, sin, n.variance_epsilon, self.n_heads, self.n_kv,
                                     self.head_dim)
        x = self._norm(h, layer.input_layernorm)
        b, t = x.shape[:2]
        w, bias = self._fused_qkv(layer.self_attn, with_q)
        heads = (self.n_heads if with_q else 0) + 2 * self.n_kv
        out = F.linear(x, w, bias).view(b, t, heads, self.head_dim)
        rotated = heads - self.n_kv  # queries and keys take RoPE, values do not
        qk = self._apply_rope(out[:, :, :rotated], cos, sin)
        v = out[:, :, rotated:].transpose(1, 2)
        if not with_q:
            return None, qk.transpose(1, 2), v
        return qk[:, :, : self.n_heads].transpose(1, 2), qk[:, :, self.n_heads :].transpose(1, 2), v

    def _finish_layer(self, layer: torch.nn.Module, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Residual + output projection of the attention ``[B, H, T, d]``, then the MLP block (gate and up
        projections as one matrix product)."""
        if self.fused_training:
            m, n = layer.mlp, layer.post_attention_layernorm
            return FinishLayer.apply(h, attn, layer.self_attn.o_proj.weight, n.weight, m.gate_proj.weight,
                                     m.up_proj.weight, m.down_proj.weight, n.variance_epsilon)
        b, _, t, _ = attn.shape
        h = h + F.linear(attn.transpose(1, 2).reshape(b, t, -1), layer.self_attn.o_proj.weight)
        mlp = layer.mlp
        x = self._norm(h, layer.post_attention_layernorm)
        gate, up = F.linear(x, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, mlp.down_proj.weight)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        scale = self.head_dim**-0.5
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1, scale=scale, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Output-layer logits of final hidden states (the final norm applied here) ``[..., hidden] -> [..., V]``."""
        return F.linear(self._norm(hidden, self._inner.norm), self.model.lm_head.weight)

    # ------------------------------------------------------------------ prefixes: keys and values per layer
    def prefix_kv(self, prefix_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, keys and values ``[U, Hkv, Tp, d]`` of right-padded prefixes ``[U, Tp]`` (causal, so the
        padding after a prefix never reaches its real tokens). The last layer's attention and MLP are skipped:
        nothing reads them."""
        u, tp = prefix_ids.shape
        layers = list(self._inner.layers)
        if tp == 0:
            return [(None, None)] * len(layers)  # type: ignore[list-item]
        pos = torch.arange(tp, device=prefix_ids.device).expand(u, tp)
        h = self._inner.embed_tokens(prefix_ids)
        cos, sin = self._rope(pos, h.dtype)
        out = []
        for i, layer in enumerate(layers):
            last = i == len(layers) - 1
            q, k, v = self._qkv(layer, h, cos, sin, with_q=not last)
            out.append((k, v))
            if not last:
                h = self._finish_layer(layer, h, self._attend(q, k, v, None))
        return out

    # ------------------------------------------------------------------ continuations against prefixes
    def continuation_hidden(self, split: SplitRows, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Last-layer hidden states ``[B, Tc, hidden]`` (before the final norm) of every continuation of `split`,
        each attending to its prefix's keys and values `kv` (from :meth:`prefix_kv`) and causally to itself."""
        ids = split.cont_ids
        b, tc = ids.shape
        dev = ids.device
        plen = split.prefix_len.to(dev)[split.owner.to(dev)] if split.prefix_len.numel() else \
            torch.zeros(b, dtype=torch.long, device=dev)
        pos = plen[:, None] + torch.arange(tc, device=dev)[None, :]
        h = self._inner.embed_tokens(ids)
        cos, sin = self._rope(pos, h.dtype)
        tp = split.prefix_ids.shape[1]
        causal = torch.ones(tc, tc, dtype=torch.bool, device=dev).tril()
        if tp:
            seen = torch.arange(tp, device=dev)[None, :] < plen[:, None]  # [B, Tp]
            mask = torch.cat([seen[:, None, None, :].expand(b, 1, tc, tp),
                              causal[None, None].expand(b, 1, tc, tc)], dim=-1)
        else:
            mask = None
        owner = split.owner.to(dev)
        for (pk, pv), layer in zip(kv, self._inner.layers):
            q, k, v = self._qkv(layer, h, cos, sin)
            if tp:
                k = torch.cat([pk.index_select(0, owner), k], dim=2)
                v = torch.cat([pv.index_select(0, owner), v], dim=2)
            h = self._finish_layer(layer, h, self._attend(q, k, v, mask))
        return h

    # ------------------------------------------------------------------ teacher-forced log-probs
    def token_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, score_mask: torch.Tensor | None,
                       *, temperature: float = 1.0, with_entropy: bool = False, pad_id: int = 0,
                       share_prefixes: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``logprobs[b, t] = log softmax(z[b, t-1] / temperature)[input_ids[b, t]]`` and the entropy of that
        distribution, ``[B, T]`` float32, at the positions of `score_mask` (default: every real position t >= 1)
        and 0 elsewhere, with grad. Rows must be right-padded (real tokens first); the result equals
        :meth:`ragen_core.policy.hf.HFPolicy.forward_logprobs` there."""
        am = attention_mask.to(torch.long)
        lengths = am.sum(dim=1).tolist()
        b, t = input_ids.shape
        want = am.bool().clone()
        want[:, 0] = False
        if score_mask is not None:
            want &= score_mask.to(am.device).bool()
        # Position t is scored from the hidden state at t - 1: a row's continuation starts there.
        first = torch.where(want.any(dim=1), want.float().argmax(dim=1), torch.tensor(t, device=am.device))
        starts = [min(int(f) - 1, n) if int(f) < t else n for f, n in zip(first.tolist(), lengths)]
        starts = [max(s, 0) for s in starts]
        split = split_rows(input_ids.cpu(), lengths, starts, pad_id, share=share_prefixes)
        dev = input_ids.device
        split = SplitRows(*(x.to(dev) for x in (split.prefix_ids, split.prefix_len, split.cont_ids, split.cont_len,
                                                 split.owner, split.start)))
        logprobs = torch.zeros(b, t, dtype=torch.float32, device=dev)
        entropy = torch.zeros(b, t, dtype=torch.float32, device=dev) if with_entropy else None
        if split.cont_ids.shape[1] == 0 or not bool(want.any()):
            return logprobs, entropy
        hidden = self.continuation_hidden(split, self.prefix_kv(split.prefix_ids))
        # Continuation position k of row r predicts original position start[r] + k + 1.
        tc = split.cont_ids.shape[1]
        target_pos = split.start[:, None] + torch.arange(tc, device=dev)[None, :] + 1  # [B, Tc]
        inside = target_pos < t
        picked = torch.zeros(b, tc, dtype=torch.bool, device=dev)
        picked[inside] = want.gather(1, target_pos.clamp(max=t - 1))[inside]
        rows, cols = picked.nonzero(as_tuple=True)
        z = self.logits(hidden[rows, cols]).float()
        if temperature != 1.0:
            z = z / temperature
        z = z.clamp(min=torch.finfo(torch.float32).min)
        lse = torch.logsumexp(z, -1)
        tpos = target_pos[rows, cols]
        tokens = input_ids[rows, tpos]
        lp = z.gather(-1, tokens[:, None]).squeeze(-1) - lse
        logprobs = logprobs.index_put((rows, tpos), lp)
        if entropy is not None:
            ent = lse - (torch.softmax(z, -1) * z).sum(-1)
            entropy = entropy.index_put((rows, tpos), ent)
        return logprobs, entropy

    # ------------------------------------------------------------------ cross-scoring
    @torch.no_grad()
    def cross_score(self, prompts: Sequence[Sequence[int]], traces: Sequence[Sequence[Sequence[int]]],
                    batch_tokens: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
        """``L[i, k, j] = log p(z_ik | x_j)`` ``[P, G, P]`` float64 and the lengths ``|z_ik|`` ``[P, G]``: the
        contract of :func:`ragen_core.math.mi.cross_score` (empty traces score 0).

        Every prompt's first ``len - 1`` tokens are computed once (:meth:`prefix_kv`) and every distinct trace is
        scored once (equal traces get equal rows). The traces, longest first, are cut into chunks of at most
        `batch_tokens` tokens, and a chunk is scored under one or more prompts per pass
        (:meth:`_cross_score_block`): the positions of a pass are packed, without padding, as rows of one matrix
        (a trace of n tokens is n rows: the prompt's last token, then its first n - 1 tokens; its last token
        predicts nothing and is not computed); the first layer's inputs of the trace tokens do not depend on the
        prompt and are computed once per chunk; attention to the prompt's keys is one kernel call over all the
        chunk's queries (:meth:`_cross_attention`).
        """
        p, g = len(prompts), len(traces[0]) if traces else 0
        if any(len(x) == 0 for x in prompts):
            raise ValueError("every prompt needs at least one token")
        flat, where = distinct_traces(traces)
        lens = [len(z) for z in flat]
        order = sorted((r for r in range(len(flat)) if lens[r] > 0), key=lambda r: (-lens[r], r))
        out = torch.zeros(len(flat), p, dtype=torch.float64)
        if order:
            self._cross_score_into(out, prompts, flat, order, batch_tokens)
        every = out[torch.tensor(where, dtype=torch.long)] if where else out
        return every.reshape(p, g, p), torch.tensor([len(flat[r]) for r in where], dtype=torch.long).reshape(p, g)

    def _cross_score_into(self, out: torch.Tensor, prompts: Sequence[Sequence[int]], flat: list[list[int]],
                          order: list[int], batch_tokens: int) -> None:
        """Fill ``out[r, j] = log p(flat[r] | prompts[j])`` (float64, CPU) for the traces `order` (non-empty,
        longest first)."""
        dev = self.model.lm_head.weight.device
        p = len(prompts)
        plen = [len(x) - 1 for x in prompts]
        prefix_ids = torch.full((p, max(plen)), 0, dtype=torch.long)
        for j, x in enumerate(prompts):
            if plen[j]:
                prefix_ids[j, : plen[j]] = torch.tensor(list(x[:-1]), dtype=torch.long)
        kv = self.prefix_kv(prefix_ids.to(dev))
        hq, hk, d = self.n_heads, self.n_kv, self.head_dim
        # RoPE as one complex product: within every query and key head, dimension i (< d/2) and its RoPE partner
        # i + d/2 are made neighbours (the pair (x_i, x_{i+d/2}) is the complex number x_i + i x_{i+d/2}, turned by
        # the position's angle). Queries and keys are permuted alike, so their products are unchanged.
        pair = torch.arange(d, device=dev).view(2, d // 2).T.reshape(-1)
        qk_rows = (torch.arange(hq + hk, device=dev)[:, None] * d + pair).reshape(-1)
        qkv_order = torch.cat([qk_rows, torch.arange((hq + hk) * d, (hq + 2 * hk) * d, device=dev)])
        kv = [(k.index_select(-1, pair), v) if k is not None else (k, v) for k, v in kv]
        # Per prompt and layer, its prefix's keys (permuted alike) and values ([Hkv, L, d] views), None for none.
        prefix = [[(k[j, :, : plen[j]], v[j, :, : plen[j]]) if plen[j] else None for k, v in kv] for j in range(p)]
        weights = [self._cross_weights(layer, qkv_order) for layer in self._inner.layers]
        # The first layer's residual input and query/key/value projections (before RoPE) of each prompt's last
        # token, the first position of every trace under that prompt.
        last = F.embedding(torch.tensor([int(x[-1]) for x in prompts], device=dev), self._inner.embed_tokens.weight)
        qkv_last = F.linear(_rms_norm(last, *weights[0][:2]), *weights[0][2:4])
        cos, sin = self._rope(torch.arange(max(plen) + len(flat[order[0]]), device=dev)[None], torch.float32)
        turn = torch.complex(cos[0, :, 0, : d // 2], sin[0, :, 0, d // 2 :])  # [positions, d/2]: cos + i sin
        budget = min(batch_tokens, _CROSS_ROWS)
        chunks: list[list[int]] = []
        size = 0
        for r in order:  # longest first
            if chunks and size + len(flat[r]) <= budget:
                chunks[-1].append(r)
                size += len(flat[r])
            else:
                chunks.append([r])
                size = len(flat[r])
        for chunk in chunks:
            lens = [len(flat[r]) for r in chunk]
            n_tok = sum(lens)
            ids, targets = [], []
            for r in chunk:  # inputs: a placeholder for the prompt's last token, then the trace but its last token
                ids += [0] + flat[r][:-1]
                targets += flat[r]
            len_t = torch.tensor(lens, device=dev)
            seg = torch.repeat_interleave(torch.arange(len(chunk), device=dev), len_t)  # each row's trace
            first = torch.cumsum(len_t, 0) - len_t  # each trace's first row
            t = torch.arange(n_tok, device=dev) - first[seg]  # each row's place in its trace
            h0 = F.embedding(torch.tensor(ids, device=dev), self._inner.embed_tokens.weight)
            qkv0 = F.linear(_rms_norm(h0, *weights[0][:2]), *weights[0][2:4])
            layout = _Packed(n_tok=n_tok, n_traces=len(chunk), width=lens[0], seg=seg, first=first, t=t,
                             targets=torch.tensor(targets, device=dev))
            per_pass = max(1, min(p, budget // n_tok))
            rows = torch.tensor(chunk, dtype=torch.long)
            for j0 in range(0, p, per_pass):
                js = list(range(j0, min(p, j0 + per_pass)))
                seq = self._cross_score_block(layout, js, plen, h0, qkv0, last, qkv_last, turn, weights,
                                              [prefix[j] for j in js])
                out[rows[:, None], torch.tensor(js, dtype=torch.long)[None, :]] = seq.view(len(js), -1).T.cpu()

    def _cross_score_block(self, lay: _Packed, js: list[int], plen: list[int], h0: torch.Tensor,
                           qkv0: torch.Tensor, last: torch.Tensor, qkv_last: torch.Tensor,
                           turn: torch.Tensor, weights: list[tuple],
                           prefix: list[list[tuple[torch.Tensor, torch.Tensor] | None]]) -> torch.Tensor:
        """``[len(js) * n_traces]`` float64: the log-prob of each trace of the chunk `lay` under each prompt of
        `js` (prompt-major). `h0`, `qkv0`: the chunk's first-layer input and projections (the prompt-independent
        rows); `last`, `qkv_last`: the same of every prompt's last token; `turn`: RoPE's complex turn per
        position; `prefix[b][layer]`: prompt ``js[b]``'s keys and values."""
        dev = h0.device
        m, n = len(js), lay.n_tok
        hq, hk, d = self.n_heads, self.n_kv, self.head_dim
        nqk = (hq + hk) * d
        jt = torch.tensor(js, device=dev)
        h = h0.repeat(m, 1)  # [m * n, hidden]: prompt b's rows are b * n .. (b + 1) * n - 1
        h.view(m, n, -1)[:, lay.first] = last[jt][:, None]
        qkv = qkv0.repeat(m, 1)
        qkv.view(m, n, -1)[:, lay.first] = qkv_last[jt][:, None]
        pos = (torch.tensor([plen[j] for j in js], device=dev)[:, None] + lay.t[None, :]).reshape(-1)
        turn = turn[pos][:, None]  # [m * n, 1, d/2]: each row's RoPE turn
        # The own-key attention's padded layout: row (b, trace, t) at slot ((b * n_traces + trace) * width + t).
        slots = ((torch.arange(m, device=dev) * (lay.n_traces * lay.width))[:, None]
                 + (lay.seg * lay.width + lay.t)[None, :]).reshape(-1)
        padded = qkv.new_zeros(m * lay.n_traces * lay.width, qkv.shape[1])  # its padding stays zero
        for i, (w1, e1, qkv_w, qkv_b, o_w, w2, e2, gu_w, down_w, inter) in enumerate(weights):
            if i:
                qkv = F.linear(_rms_norm(h, w1, e1), qkv_w, qkv_b)
            _turn_(qkv[:, :nqk].view(m * n, hq + hk, d // 2, 2), turn)  # RoPE on queries and keys
            attn = self._cross_attention(qkv, [pre[i] for pre in prefix], lay, slots, padded)
            h = torch.addmm(h, attn.reshape(m * n, hq * d), o_w.t())
            gu = F.linear(_rms_norm(h, w2, e2), gu_w)
            gate = F.silu(gu[:, :inter], inplace=True).mul_(gu[:, inter:])
            h = torch.addmm(h, gate, down_w.t())
        targets = lay.targets.repeat(m)
        lp = torch.empty(m * n, dtype=torch.float32, device=dev)
        for r in range(0, m * n, _LOGIT_ROWS):  # slices: the logits of a slice stay in cache
            z = self.logits(h[r : r + _LOGIT_ROWS]).float()
            lp[r : r + _LOGIT_ROWS] = -F.cross_entropy(z, targets[r : r + _LOGIT_ROWS], reduction="none")
        traces = (torch.arange(m, device=dev)[:, None] * lay.n_traces + lay.seg[None, :]).reshape(-1)
        return torch.zeros(m * lay.n_traces, dtype=torch.float64, device=dev).index_add_(0, traces, lp.double())

    def _cross_attention(self, qkv: torch.Tensor, prefix: list[tuple[torch.Tensor, torch.Tensor] | None],
                         lay: _Packed, slots: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
        """Attention ``[m * n, H, d]`` of the packed rows of `m` prompts (`qkv` ``[m * n, (H + 2 Hkv) d]``: queries,
        keys, values, RoPE applied): each row sees its prompt's prefix keys and values (``prefix[b]``: ``[Hkv, L,
        d]``, None for none) and its own trace's keys up to itself.

        The two key sets are attended separately, each with the log-sum-exp of its scores (:func:`_attention_lse`):
        the prefix as one call over all ``n`` rows of a prompt (its keys are shared: nothing is copied per trace),
        the trace's own keys causally in the padded layout `padded` ``[m * n_traces * width, (H + 2 Hkv) d]``
        (rows at `slots`); the two are merged by their shares of the joint softmax: the prefix's is
        ``exp(lse_prefix) / (exp(lse_prefix) + exp(lse_own)) = sigmoid(lse_prefix - lse_own)``."""
        hq, hk, d = self.n_heads, self.n_kv, self.head_dim
        rows, n = qkv.shape[0], lay.n_tok
        b_rows, width = rows // n * lay.n_traces, lay.width
        scale = d**-0.5
        padded.index_copy_(0, slots, qkv)
        heads = padded.view(b_rows, width, hq + 2 * hk, d).transpose(1, 2)  # [B, heads, width, d]
        own, own_lse = _attention_lse(heads[:, :hq], heads[:, hq : hq + hk], heads[:, hq + hk :], causal=True,
                                      scale=scale)
        own = own.transpose(1, 2).reshape(b_rows * width, hq, d).index_select(0, slots)
        if all(kv is None for kv in prefix):
            return own
        own_lse = own_lse.transpose(1, 2).reshape(b_rows * width, hq).index_select(0, slots)
        pre = torch.empty_like(own)
        pre_lse = torch.empty_like(own_lse)
        for b, kv in enumerate(prefix):
            sl = slice(b * n, (b + 1) * n)
            if kv is None:  # no prefix: its share is 0
                pre[sl], pre_lse[sl] = 0.0, float("-inf")
                continue
            q = qkv[sl, : hq * d].view(1, n, hq, d).transpose(1, 2)
            o, lse = _attention_lse(q, kv[0][None], kv[1][None], causal=False, scale=scale)
            pre[sl] = o[0].transpose(0, 1)
            pre_lse[sl] = lse[0].T
        share = torch.sigmoid(pre_lse - own_lse).to(own.dtype)[..., None]  # 0 where there is no prefix
        return torch.lerp(own, pre, share)

    @staticmethod
    def _cross_weights(layer: torch.nn.Module, rows: torch.Tensor) -> tuple:
        """A layer's parameters as :meth:`_cross_score_block` reads them: the query/key/value projections as one
        matrix (its output rows in the order `rows`), the MLP's gate and up projections as another."""
        a, mlp = layer.self_attn, layer.mlp
        return (layer.input_layernorm.weight, float(layer.input_layernorm.variance_epsilon),
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])[rows],
                torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])[rows], a.o_proj.weight,
                layer.post_attention_layernorm.weight, float(layer.post_attention_layernorm.variance_epsilon),
                torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.down_proj.weight, mlp.intermediate_size)

    # ------------------------------------------------------------------ decoding
    def start_decoding(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int) -> DecodeState:
        """The decoding state of `prompts` (each non-empty): every distinct prompt's first ``len - 1`` tokens are
        computed once; each sequence's last prompt token is its first decoded input (:meth:`DecodeState.step`)."""
        dev = self.model.lm_head.weight.device
        b = len(prompts)
        lengths = [len(p) for p in prompts]
        ids = torch.full((b, max(lengths)), pad_id, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, : len(p)] = torch.tensor(list(p), dtype=torch.long)
        split = split_rows(ids, lengths, [n - 1 for n in lengths], pad_id, share=True)
        owner = split.owner.to(dev)
        kv = self.prefix_kv(split.prefix_ids.to(dev))
        prefix_len = split.prefix_len.to(dev)[owner]
        first = torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=dev)
        return DecodeState(self, kv, owner, prefix_len, max_new_tokens, first)


class DecodeState:
    """KV-cached decoding of B sequences against their prompts' cached keys (:meth:`FastQwen2.start_decoding`).

    Each :meth:`step` feeds one token to each sequence still decoding (the last prompt token first) and returns
    their next-token logits. Everything a step reads is laid out once, for the whole decoding, by the constructor:

    * per layer a key and a value cache ``[B, Hkv, Tp + max_new_tokens, d]`` (each row's prefix keys, then one
      slot per decoded token; step ``s`` writes column ``Tp + s`` in place and attends to columns ``0..Tp + s``).
      The fused step keeps each distinct prefix's keys once instead (:attr:`prefix`, ``[P, Hkv, Tp, d]``, and
      :attr:`owner`), and the rows' caches hold their ``max_new_tokens`` decoded columns only;
    * an additive attention mask ``[B, 1, 1, Tp + max_new_tokens]``: -inf on the padding after a shorter prefix,
      0 on every other slot. It never changes: a step reads only the columns every row has written;
    * the RoPE tables (cos and signed sin) of every position the decoding can reach (transformers' values);
    * the fused weights: queries, keys and values as one matrix product, the MLP's gate and up as another.

    When sequences stop, their cache rows become holes; the rows still decoding that sit past the first
    ``n`` slots (``n`` rows still decoding) are moved into the holes, so a step computes exactly the ``n`` rows
    still decoding, on the leading ``n`` slots of the same buffers (views, nothing re-allocated), and finishing
    rows cost a copy of the few rows that move, not of the whole cache. The slot order is then no longer the
    rows' order; a step maps its inputs and outputs between the two (one index op each way).

    The Python step's and the operator step's logits are the previous implementation's bit for bit
    (tests/policy/test_fast_decode.py compares every step's). On the CPU a step runs compiled where the library
    can be built (:mod:`ragen_core.policy.native`, :attr:`kernel`): for float32 models the fused step (its own
    loops for the norms, RoPE and attention: the same logits up to float rounding), else the operator step (the
    Python step's calls from C++, the same logits bit for bit); without the library, the Python below.
    """

    def __init__(self, fast: FastQwen2, kv: list[tuple[torch.Tensor, torch.Tensor]], owner: torch.Tensor,
                 prefix_len: torch.Tensor, max_new_tokens: int, first_tokens: torch.Tensor):
        self.fast = fast
        b = owner.numel()
        tp = kv[0][0].shape[2] if kv and kv[0][0] is not None else 0
        self.width = tp
        self.capacity = tp + max_new_tokens
        dev = owner.device
        ref = fast.model.lm_head.weight
        #: Which step runs: "fused" (the compiled float32 step with its own loops), "ops" (the compiled
        #: operator-for-operator step) or "python".
        self.kernel = self._choose_kernel() if dev.type == "cpu" else "python"
        #: The fused step's layout: each distinct prompt's keys and values once (``[P, Hkv, Tp, d]`` per layer) and
        #: each slot's prompt (``owner``, ``[B]``); :attr:`cache` then holds the decoded columns only. The other
        #: steps: :attr:`prefix` is None and every row's cache holds its prompt's columns, then its decoded ones.
        self.prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.owner = owner.clone()
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        shared = self.kernel == "fused"
        if shared:
            p = int(owner.max()) + 1 if b else 0
            empty = torch.zeros(p, fast.n_kv, 0, fast.head_dim, dtype=ref.dtype, device=dev)
            self.prefix = [(k.contiguous(), v.contiguous()) if tp else (empty, empty) for k, v in kv]
        for k, v in kv:
            kb = torch.zeros(b, fast.n_kv, max_new_tokens if shared else self.capacity, fast.head_dim,
                             dtype=ref.dtype, device=dev)
            vb = torch.zeros_like(kb)
            if tp and not shared:
                kb[:, :, :tp] = k.index_select(0, owner)
                vb[:, :, :tp] = v.index_select(0, owner)
            self.cache.append((kb, vb))
        #: ``[B, 1, 1, Tp + max_new]`` additive mask: -inf where a row's queries may not look (its prefix padding).
        self.bias = torch.zeros(b, 1, 1, self.capacity, dtype=ref.dtype, device=dev)
        if tp:
            pad = torch.arange(tp, device=dev)[None, :] >= prefix_len[:, None]
            self.bias[:, 0, 0, :tp].masked_fill_(pad, float("-inf"))
        #: ``[B]``: each slot's next position (its prompt length minus 1 first: the last prompt token is fed first).
        self.pos = prefix_len.clone()
        reach = int(prefix_len.max()) + max_new_tokens if b else 0
        cos, sin = fast._rope(torch.arange(reach, device=dev)[None, :], ref.dtype)
        #: ``[positions, 2, d]``: cos and signed sin (:meth:`FastQwen2._rope`) of every position the decoding reaches.
        self.rope = torch.cat([cos[0], sin[0]], dim=1)
        #: The original indices of the rows the first :attr:`n` slots hold, in slot order.
        self.rows = torch.arange(b, device=dev)
        #: Slots in use (the rows still decoding).
        self.n = b
        #: ``slot[j]``: the slot of the j-th row still decoding (increasing original index); None: slot j is row j.
        self._where: torch.Tensor | None = None
        self._tokens = torch.zeros(b, dtype=torch.long, device=dev)
        self.steps = 0
        self.next_tokens = first_tokens
        inner = fast._inner
        self._final = (inner.norm.weight, float(inner.norm.variance_epsilon))
        self.weights = [self._fused(layer) for layer in inner.layers]
        #: The compiled step of :attr:`kernel` (:mod:`ragen_core.policy.native`) with its arguments laid out once;
        #: None: the Python step below.
        self._native = self._native_args() if self.kernel != "python" else None

    @staticmethod
    @torch.no_grad()
    def _fused(layer: torch.nn.Module) -> tuple:
        a, mlp = layer.self_attn, layer.mlp
        qkv_w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
        qkv_b = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
        return (layer.input_layernorm.weight, float(layer.input_layernorm.variance_epsilon), qkv_w, qkv_b,
                a.o_proj.weight, layer.post_attention_layernorm.weight,
                float(layer.post_attention_layernorm.variance_epsilon),
                torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.down_proj.weight, mlp.intermediate_size)

    def _choose_kernel(self) -> str:
        """The step this CPU decoding takes: "fused" for float32 models of the shapes `decode_step_fused` takes
        (where :func:`ragen_core.policy.native.decode_kernel` names it), else "ops"; "python" where no compiled
        step is available or the layers' MLPs differ in width."""
        from ragen_core.policy.native import decode_kernel, native_decode_step

        f = self.fast
        ref = f.model.lm_head.weight
        fusable = (ref.dtype == torch.float32 and f.head_dim % 8 == 0 and f.n_heads % f.n_kv == 0
                   and f.n_heads // f.n_kv * f.head_dim <= 512 and ref.shape[1] % 8 == 0)
        kernel = "fused" if fusable and decode_kernel() == "fused" else "ops"
        if len({layer.mlp.intermediate_size for layer in f._inner.layers}) != 1:
            return "python"  # the compiled steps take one MLP width for every layer
        return kernel if native_decode_step(kernel) is not None else "python"

    def _native_args(self) -> tuple:
        from ragen_core.policy.native import native_decode_step

        weights = [t for w in self.weights for t in (w[0], w[2], w[3], w[4], w[5], w[7], w[8])]
        eps = [e for w in self.weights for e in (w[1], w[6])]
        caches = [kb for kb, _ in self.cache], [vb for _, vb in self.cache]
        if self.prefix is not None:  # the fused step: the prompts' caches first
            caches = ([k for k, _ in self.prefix], [v for _, v in self.prefix], *caches)
        return native_decode_step(self.kernel), caches, weights, eps, self.weights[0][9]

    def _place(self, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        """Put the rows still decoding (`rows`, increasing original indices, a subset of the last step's) on the
        leading slots and their `tokens` into the token buffer: fill the holes the finished rows left with the
        rows past the new end (their cache rows, mask rows and positions move; nothing else does)."""
        n = rows.numel()
        if n < self.n:
            slot_of = torch.full((int(self.rows.max()) + 1,), -1, dtype=torch.long, device=rows.device)
            slot_of[self.rows[: self.n]] = torch.arange(self.n, device=rows.device)
            where = slot_of[rows]
            alive = torch.zeros(self.n, dtype=torch.bool, device=rows.device)
            alive[where] = True
            holes = (~alive[:n]).nonzero().squeeze(1)
            movers = alive[n:].nonzero().squeeze(1) + n
            if holes.numel():
                # the columns written so far (the fused step's rows hold their decoded columns only)
                col = self.steps if self.prefix is not None else self.width + self.steps
                for kb, vb in self.cache:
                    kb[:, :, :col].index_copy_(0, holes, kb[:, :, :col].index_select(0, movers))
                    vb[:, :, :col].index_copy_(0, holes, vb[:, :, :col].index_select(0, movers))
                for t in (self.bias, self.pos, self.rows, self.owner):
                    t.index_copy_(0, holes, t.index_select(0, movers))
                slot_of[self.rows[holes]] = holes
                where = slot_of[rows]
            self.n = n
            self._where = None if bool((where == torch.arange(n, device=where.device)).all()) else where
        if self._where is None:
            self._tokens[:n].copy_(tokens)
        else:
            self._tokens[:n].index_copy_(0, self._where, tokens)

    @torch.no_grad()
    def step(self, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Feed `tokens` ``[n]`` to the sequences `rows` ``[n]`` (original indices, increasing, each still
        decoding: a subset of the previous step's rows); returns their next-token logits ``[n, V]``."""
        f = self.fast
        col = self.width + self.steps
        if col >= self.capacity:
            raise RuntimeError(f"DecodeState holds {self.capacity - self.width} new tokens; all are decoded")
        self._place(rows, tokens)
        self.steps += 1
        n = self.n
        hq, hk, d = f.n_heads, f.n_kv, f.head_dim
        pos = self.pos[:n]
        cs = self.rope.index_select(0, pos)  # [n, 2, d]
        pos += 1
        if self._native is not None:
            op, caches, weights, eps, inter = self._native
            shared = (self.owner[:n], self.bias[:n, :, :, : col + 1], self.width) if self.prefix is not None else \
                (self.bias[:n, :, :, : col + 1],)
            return op(self._tokens[:n], f._inner.embed_tokens.weight, cs, *caches, *shared, col, weights, eps, hq,
                      hk, d, inter, d**-0.5, self._final[0], self._final[1], f.model.lm_head.weight, self._where)
        cos, sin = cs[:, :1], cs[:, 1:]
        h = F.embedding(self._tokens[:n], f._inner.embed_tokens.weight)  # [n, hidden]
        bias = self.bias[:n, :, :, : col + 1]
        nqk = (hq + hk) * d
        scale = d**-0.5
        for (kb, vb), (w1, e1, qkv_w, qkv_b, o_w, w2, e2, gu_w, down_w, inter) in zip(self.cache, self.weights):
            kb, vb = kb[:n], vb[:n]
            qkv = F.linear(_rms_norm(h, w1, e1), qkv_w, qkv_b)
            qk = qkv[:, :nqk].view(n, hq + hk, d)
            qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin  # RoPE on queries and keys at once
            kb[:, :, col] = qk[:, hq:]
            vb[:, :, col] = qkv[:, nqk:].view(n, hk, d)
            q = qk[:, :hq].view(n, hk, hq // hk, d)  # grouped: query heads per key head
            scores = torch.matmul(q, kb[:, :, : col + 1].transpose(2, 3)).mul_(scale).add_(bias)  # [n, hk, rep, T]
            attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), vb[:, :, : col + 1])
            h = h + F.linear(attn.view(n, hq * d), o_w)
            gu = F.linear(_rms_norm(h, w2, e2), gu_w)
            h = h + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], down_w)
        if self._where is not None:
            h = h.index_select(0, self._where)  # slot order -> the rows' order
        return F.linear(_rms_norm(h, *self._final), f.model.lm_head.weight)
