"""Paged attention over a block-table KV cache: metadata and the CPU (vectorised PyTorch) path.

Layout (vLLM's): per layer a K cache and a V cache of shape
``[num_blocks, block_size, num_kv_heads, head_dim]``. The K/V of the step's new tokens are written
at ``slot_mapping[t] = block_table[pos // block_size] * block_size + pos % block_size``; queries read
every earlier position of their sequence through the block table (causal: key position <= query
position).

A step is a flattened varlen batch of ``T`` tokens. Sequences with a short query (decodes, and
speculative verification of a few draft tokens) form one padded group computed with a single
batched SDPA call over gathered K/V; prefill chunks run one SDPA call each (a causal mask offset by
the cached context when part of the prompt is already in the cache). GQA: the ``G = num_heads //
num_kv_heads`` query heads of one KV head are folded into the query length, so no K/V repeat.
On CUDA, :mod:`own_engine.triton_attention` replaces :func:`paged_attention` when available; on CPU
:mod:`own_engine.cpu_kernels` (C kernels reading K/V through the block table) takes the decode group
and, at head_dim 64, the prefill chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

#: queries of at most this many tokens go to the padded (decode) group
DECODE_GROUP_MAX_Q = 16


@dataclass
class PrefillSlice:
    """One prefill chunk: tokens ``[start, start + q_len)`` of the flat batch, positions
    ``[ctx_len - q_len, ctx_len)``; ``block_table`` ([num_blocks] int64) is None when the chunk has
    no cached context (then K/V come straight from the projections)."""

    start: int
    q_len: int
    ctx_len: int
    block_table: torch.Tensor | None


@dataclass
class AttentionMetadata:
    """Per-step attention inputs shared by all layers.

    ``slot_mapping``: [T] int64 cache slots of the new tokens. Decode group (``dec_*``, or None):
    ``dec_token_idx`` [Bd, Qd] flat token index of each padded query (padding repeats a real one),
    ``dec_block_tables`` [Bd, nb] int64, ``dec_mask`` [Bd, 1, Qd*G, nb*block_size] bool (True =
    attend), ``dec_valid`` [Bd*Qd] bool or None when no padding. ``prefills``: prefill chunks.
    Also kept for the CUDA and native CPU kernels: ``positions`` [T], ``seq_idx`` [T], ``block_tables``
    [B, nb_max], and for the decode group ``dec_rows`` [n] (flat token index), ``dec_seq`` [n] (row of
    ``block_tables``), ``dec_lens`` [n] (keys to attend: position + 1), ``dec_max_len`` (max of those).
    """

    slot_mapping: torch.Tensor
    num_tokens: int
    dec_token_idx: torch.Tensor | None = None
    dec_block_tables: torch.Tensor | None = None
    dec_mask: torch.Tensor | None = None
    dec_valid: torch.Tensor | None = None
    prefills: list[PrefillSlice] = field(default_factory=list)
    positions: torch.Tensor | None = None
    seq_idx: torch.Tensor | None = None
    block_tables: torch.Tensor | None = None
    dec_rows: torch.Tensor | None = None
    dec_seq: torch.Tensor | None = None
    dec_lens: torch.Tensor | None = None
    dec_max_len: int = 0


def build_metadata(q_lens: list[int], ctx_lens: list[int], block_tables: list[list[int]], block_size: int,
                   num_heads: int, num_kv_heads: int, device: torch.device,
                   torch_decode: bool = True) -> AttentionMetadata:
    """Metadata for sequences with query lengths ``q_lens`` ending at context lengths ``ctx_lens``
    (tokens in the cache after this step's write), reading through ``block_tables``.
    ``torch_decode=False`` skips the padded decode-group tensors only :func:`paged_attention` reads.

    Raises ``ValueError`` when a block table is too short for its context.
    """
    B = len(q_lens)
    G = num_heads // num_kv_heads
    max_nb = max(len(bt) for bt in block_tables)
    bt_t = torch.zeros(B, max_nb, dtype=torch.int64)
    for i, bt in enumerate(block_tables):
        if len(bt) * block_size < ctx_lens[i]:
            raise ValueError(f"block table of sequence {i} covers {len(bt) * block_size} < {ctx_lens[i]} tokens")
        bt_t[i, :len(bt)] = torch.tensor(bt, dtype=torch.int64)
    q_lens_t = torch.tensor(q_lens, dtype=torch.int64)
    ctx_t = torch.tensor(ctx_lens, dtype=torch.int64)
    T = int(q_lens_t.sum())
    seq_idx = torch.repeat_interleave(torch.arange(B), q_lens_t)
    starts = torch.cumsum(q_lens_t, 0) - q_lens_t
    positions = torch.arange(T) - starts[seq_idx] + (ctx_t - q_lens_t)[seq_idx]
    slot_mapping = bt_t[seq_idx, positions // block_size] * block_size + positions % block_size
    meta = AttentionMetadata(slot_mapping=slot_mapping.to(device), num_tokens=T, positions=positions.to(device),
                             seq_idx=seq_idx.to(device), block_tables=bt_t.to(device))
    starts_l = starts.tolist()
    dec = [i for i in range(B) if q_lens[i] <= DECODE_GROUP_MAX_Q and ctx_lens[i] > q_lens[i]]
    dec_set = set(dec)
    for i in range(B):
        if i not in dec_set:
            has_ctx = ctx_lens[i] > q_lens[i]
            nb = -(-ctx_lens[i] // block_size)
            meta.prefills.append(PrefillSlice(starts_l[i], q_lens[i], ctx_lens[i],
                                              bt_t[i, :nb].to(device) if has_ctx else None))
    if dec:
        d = torch.tensor(dec, dtype=torch.int64)
        is_dec = torch.zeros(B, dtype=torch.bool)
        is_dec[d] = True
        rows = torch.nonzero(is_dec[seq_idx]).reshape(-1)
        lens = positions[rows] + 1
        meta.dec_rows, meta.dec_seq, meta.dec_lens = rows.to(device), seq_idx[rows].to(device), lens.to(device)
        meta.dec_max_len = int(lens.max())
    if dec and torch_decode:
        qd = int(q_lens_t[d].max())
        ctx_d = ctx_t[d]
        nb = int((ctx_d.max() + block_size - 1) // block_size)
        L = nb * block_size
        qi = torch.arange(qd)
        valid = qi[None, :] < q_lens_t[d][:, None]  # [Bd, Qd]
        tok = starts[d][:, None] + torch.minimum(qi[None, :], q_lens_t[d][:, None] - 1)
        qpos = ctx_d[:, None] - q_lens_t[d][:, None] + torch.minimum(qi[None, :], q_lens_t[d][:, None] - 1)
        mask = torch.arange(L)[None, None, :] <= qpos[:, :, None]  # [Bd, Qd, L]
        meta.dec_token_idx = tok.to(device)
        meta.dec_block_tables = bt_t[d, :nb].contiguous().to(device)
        meta.dec_mask = mask.repeat_interleave(G, dim=1).unsqueeze(1).to(device)
        meta.dec_valid = None if bool(valid.all()) else valid.reshape(-1).to(device)
    return meta


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store ``k``, ``v`` ([T, num_kv_heads, head_dim]) at ``slot_mapping`` ([T]) of the caches."""
    nkv, hd = k.shape[1], k.shape[2]
    k_cache.view(-1, nkv, hd).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, nkv, hd).index_copy_(0, slot_mapping, v)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor, meta: AttentionMetadata, scale: float, out: torch.Tensor) -> None:
    """The prefill chunks of ``meta`` into ``out`` [T, num_heads, head_dim]: one SDPA call each,
    causal, over the cached context gathered through the chunk's block table when it has one."""
    D = q.shape[2]
    nkv = k.shape[1]
    G = q.shape[1] // nkv
    for p in meta.prefills:
        qs = q[p.start:p.start + p.q_len].transpose(0, 1).unsqueeze(0)  # [1, H, q, D]
        if p.block_table is None:
            ks = k[p.start:p.start + p.q_len].transpose(0, 1).unsqueeze(0)
            vs = v[p.start:p.start + p.q_len].transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=G > 1)
        else:
            ks = k_cache.index_select(0, p.block_table).view(-1, nkv, D)[:p.ctx_len].transpose(0, 1).unsqueeze(0)
            vs = v_cache.index_select(0, p.block_table).view(-1, nkv, D)[:p.ctx_len].transpose(0, 1).unsqueeze(0)
            qpos = torch.arange(p.ctx_len - p.q_len, p.ctx_len, device=q.device)
            mask = torch.arange(p.ctx_len, device=q.device)[None, :] <= qpos[:, None]
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale, enable_gqa=G > 1)
        out[p.start:p.start + p.q_len] = o.squeeze(0).transpose(0, 1)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Causal attention of the step's queries over their sequences' cached K/V (the PyTorch path).

    ``q`` [T, num_heads, head_dim]; ``k``, ``v`` [T, num_kv_heads, head_dim] (already written to the
    caches by the caller); caches [num_blocks, block_size, num_kv_heads, head_dim].
    Returns [T, num_heads, head_dim]. Needs metadata built with ``torch_decode=True``.
    """
    T, H, D = q.shape
    nkv = k.shape[1]
    G = H // nkv
    out = torch.empty_like(q)
    prefill_attention(q, k, v, k_cache, v_cache, meta, scale, out)
    if meta.dec_token_idx is not None:
        Bd, Qd = meta.dec_token_idx.shape
        bt = meta.dec_block_tables
        nb = bt.shape[1]
        L = nb * k_cache.shape[1]
        qd = q.index_select(0, meta.dec_token_idx.reshape(-1)).view(Bd, Qd, nkv, G, D)
        qd = qd.permute(0, 2, 1, 3, 4).reshape(Bd, nkv, Qd * G, D)
        kd = k_cache.index_select(0, bt.reshape(-1)).view(Bd, L, nkv, D).transpose(1, 2)
        vd = v_cache.index_select(0, bt.reshape(-1)).view(Bd, L, nkv, D).transpose(1, 2)
        o = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.dec_mask, scale=scale)
        o = o.view(Bd, nkv, Qd, G, D).permute(0, 2, 1, 3, 4).reshape(Bd * Qd, H, D)
        idx = meta.dec_token_idx.reshape(-1)
        if meta.dec_valid is not None:
            o = o[meta.dec_valid]
            idx = idx[meta.dec_valid]
        out.index_copy_(0, idx, o)
    return out
