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
(RMSNorm in float32, RoPE, grouped-query attention by SDPA, SwiGLU, the tied output layer) is transformers' own
definition; the tests compare log-probs, entropies, gradients and sampled tokens with transformers' forward.

Only plain `Qwen2ForCausalLM` models with the default RoPE, full attention everywhere, SiLU, no attention dropout
and no gradient checkpointing take this path (:func:`unsupported_reason` says why another does not); anything
else, images included, goes through transformers' forward unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["FastQwen2", "SplitRows", "split_rows", "unsupported_reason"]


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
    if float(getattr(model.model.rotary_emb, "attention_scaling", 1.0)) != 1.0:
        return "scaled RoPE"
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

        Every prompt's first ``len - 1`` tokens are computed once (:meth:`prefix_kv`), and every distinct trace is
        scored once (equal traces get equal rows); then, prompt by prompt, the
        traces (each led by the prompt's last token) in batches of at most `batch_tokens` continuation tokens,
        attending to that prompt's keys and values (:meth:`_shared_prefix_attention`).
        """
        dev = self.model.lm_head.weight.device
        p, g = len(prompts), len(traces[0]) if traces else 0
        if any(len(x) == 0 for x in prompts):
            raise ValueError("every prompt needs at least one token")
        all_traces = [tuple(z) for group in traces for z in group]
        # Equal traces have equal scores: each distinct trace is scored once (a peaked policy repeats itself).
        index: dict[tuple[int, ...], int] = {}
        flat: list[list[int]] = []
        where = []
        for z in all_traces:
            if z not in index:
                index[z] = len(flat)
                flat.append(list(z))
            where.append(index[z])
        lens = [len(z) for z in flat]
        order = sorted((r for r in range(len(flat)) if lens[r] > 0), key=lambda r: (-lens[r], r))
        pad = 0
        plen = [len(x) - 1 for x in prompts]
        width = max(plen)
        prefix_ids = torch.full((p, width), pad, dtype=torch.long)
        for j, x in enumerate(prompts):
            if plen[j]:
                prefix_ids[j, : plen[j]] = torch.tensor(list(x[:-1]), dtype=torch.long)
        kv = self.prefix_kv(prefix_ids.to(dev))
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
                hidden = self._continuation_of_one_prefix(ids, prefix, plen[j])  # [n, tc, hidden]
                z = self.logits(hidden[rows_idx, cols_idx]).float()
                lp = z.gather(-1, targets[rows_idx, cols_idx][:, None]).squeeze(-1) - torch.logsumexp(z, -1)
                seq = torch.zeros(len(chunk), dtype=torch.float64, device=dev).index_add_(0, rows_idx, lp.double())
                out[torch.tensor(chunk), j] = seq.cpu()
        every = out[torch.tensor(where, dtype=torch.long)] if where else out
        return every.reshape(p, g, p), torch.tensor([len(z) for z in all_traces], dtype=torch.long).reshape(p, g)

    def _continuation_of_one_prefix(self, ids: torch.Tensor, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                                    prefix_len: int) -> torch.Tensor:
        """Last-layer hidden states ``[n, Tc, hidden]`` of right-padded continuations `ids` ``[n, Tc]`` that all
        follow one prefix of `prefix_len` tokens whose per-layer keys and values are `prefix` (``[Hkv, L, d]``)."""
        n, tc = ids.shape
        pos = (prefix_len + torch.arange(tc, device=ids.device))[None, :].expand(n, tc)
        h = self._inner.embed_tokens(ids)
        cos, sin = self._rope(pos, h.dtype)
        for (pk, pv), layer in zip(prefix, self._inner.layers):
            q, k, v = self._qkv(layer, h, cos, sin)
            attn = self._shared_prefix_attention(q, k, v, pk, pv)
            h = self._finish_layer(layer, h, attn)
        return h

    def _shared_prefix_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 pk: torch.Tensor | None, pv: torch.Tensor | None) -> torch.Tensor:
        """Causal attention of queries ``[n, H, T, d]`` over one shared prefix's keys/values ``[Hkv, L, d]``
        followed by each row's own keys/values ``[n, Hkv, T, d]`` (every prefix key visible to every query)."""
        n, _, t, _ = q.shape
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        if pk is None or pk.shape[1] == 0:
            return self._attend(q, k, v, causal)
        length = pk.shape[1]
        keys = torch.cat([pk[None].expand(n, -1, -1, -1), k], dim=2)
        values = torch.cat([pv[None].expand(n, -1, -1, -1), v], dim=2)
        mask = torch.cat([torch.ones(t, length, dtype=torch.bool, device=q.device), causal], dim=1)
        return self._attend(q, keys, values, mask)

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
      slot per decoded token; step ``s`` writes column ``Tp + s`` in place and attends to columns ``0..Tp + s``);
    * an additive attention mask ``[B, 1, 1, Tp + max_new_tokens]``: -inf on the padding after a shorter prefix,
      0 on every other slot. It never changes: a step reads only the columns every row has written;
    * the RoPE tables (cos and signed sin) of every position the decoding can reach (transformers' values);
    * the fused weights: queries, keys and values as one matrix product, the MLP's gate and up as another.

    When sequences stop, their cache rows become holes; the rows still decoding that sit past the first
    ``n`` slots (``n`` rows still decoding) are moved into the holes, so a step computes exactly the ``n`` rows
    still decoding, on the leading ``n`` slots of the same buffers (views, nothing re-allocated), and finishing
    rows cost a copy of the few rows that move, not of the whole cache. The slot order is then no longer the
    rows' order; a step maps its inputs and outputs between the two (one index op each way).

    The logits are the previous implementation's bit for bit (tests/policy/test_fast_decode.py compares every
    step's); what changed is where the numbers live and how many operator calls compute them.
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
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        for k, v in kv:
            kb = torch.zeros(b, fast.n_kv, self.capacity, fast.head_dim, dtype=ref.dtype, device=dev)
            vb = torch.zeros_like(kb)
            if tp:
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
        self._float32 = ref.dtype == torch.float32  # F.rms_norm is transformers' RMSNorm bit for bit in float32
        self._final = (inner.norm.weight, float(inner.norm.variance_epsilon))
        self.weights = [self._fused(layer) for layer in inner.layers]

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

    def _norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if self._float32:
            return F.rms_norm(x, (x.shape[-1],), weight, eps)
        dtype = x.dtype
        h = x.to(torch.float32)
        return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)

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
                col = self.width + self.steps  # the columns written so far
                for kb, vb in self.cache:
                    kb[:, :, :col].index_copy_(0, holes, kb[:, :, :col].index_select(0, movers))
                    vb[:, :, :col].index_copy_(0, holes, vb[:, :, :col].index_select(0, movers))
                for t in (self.bias, self.pos, self.rows):
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
        cos, sin = cs[:, :1], cs[:, 1:]
        h = F.embedding(self._tokens[:n], f._inner.embed_tokens.weight)  # [n, hidden]
        bias = self.bias[:n, :, :, : col + 1]
        nqk = (hq + hk) * d
        scale = d**-0.5
        for (kb, vb), (w1, e1, qkv_w, qkv_b, o_w, w2, e2, gu_w, down_w, inter) in zip(self.cache, self.weights):
            kb, vb = kb[:n], vb[:n]
            qkv = F.linear(self._norm(h, w1, e1), qkv_w, qkv_b)
            qk = qkv[:, :nqk].view(n, hq + hk, d)
            qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin  # RoPE on queries and keys at once
            kb[:, :, col] = qk[:, hq:]
            vb[:, :, col] = qkv[:, nqk:].view(n, hk, d)
            q = qk[:, :hq].view(n, hk, hq // hk, d)  # grouped: query heads per key head
            scores = torch.matmul(q, kb[:, :, : col + 1].transpose(2, 3)).mul_(scale).add_(bias)  # [n, hk, rep, T]
            attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), vb[:, :, : col + 1])
            h = h + F.linear(attn.view(n, hq * d), o_w)
            gu = F.linear(self._norm(h, w2, e2), gu_w)
            h = h + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], down_w)
        if self._where is not None:
            h = h.index_select(0, self._where)  # slot order -> the rows' order
        return F.linear(self._norm(h, *self._final), f.model.lm_head.weight)
