"""CUDA paged attention in Triton (selected automatically on a GPU; importing this module raises
``ImportError`` without Triton, and :func:`own_engine.model_runner.select_attention` then falls back
to the PyTorch path).

Kernel: one program per (query token, query head), vLLM "paged attention v1" style. It walks the
sequence's block table, loads each K/V block ``[block_size, head_dim]`` of its KV head (GQA: query
head ``h`` reads KV head ``h // G``), masks key positions beyond the query's position (causal), and
accumulates with the online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022,
Alg. 1). Works for decodes, speculative verification and prefill chunks alike (a prefill is just
many queries); fp32 accumulation. Checked against the CPU path by
``tests/test_own_engine.py::test_triton_kernel_matches_cpu_path`` (skipped without CUDA).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from own_engine.attention import AttentionMetadata, paged_attention


@triton.jit
def _paged_attention_kernel(
    Q, K, V, Out, BT, SEQ_IDX, POS, scale,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_ot, stride_oh,
    G: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // G
    seq = tl.load(SEQ_IDX + t).to(tl.int64)
    pos = tl.load(POS + t).to(tl.int64)
    d = tl.arange(0, HEAD_DIM)
    s_off = tl.arange(0, BLOCK_SIZE)
    q = tl.load(Q + t * stride_qt + h * stride_qh + d).to(tl.float32)
    m_i = tl.zeros([], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    num_blocks = (pos + BLOCK_SIZE) // BLOCK_SIZE  # cdiv(pos + 1, BLOCK_SIZE)
    for j in range(0, num_blocks):
        bid = tl.load(BT + seq * stride_bt + j).to(tl.int64)
        offs = bid * stride_kb + s_off[:, None] * stride_ks + kvh * stride_kh + d[None, :]
        k = tl.load(K + offs).to(tl.float32)
        sc = tl.sum(k * q[None, :], axis=1) * scale
        kpos = j * BLOCK_SIZE + s_off
        sc = tl.where(kpos <= pos, sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new)
        v = tl.load(V + offs).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(Out + t * stride_ot + h * stride_oh + d, (acc / l_i).to(Out.dtype.element_ty))


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def triton_paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Same contract as :func:`own_engine.attention.paged_attention` (K/V already written).

    ``q`` [T, num_heads, head_dim] (last dim contiguous); caches [num_blocks, block_size,
    num_kv_heads, head_dim] contiguous on CUDA. Falls back to the PyTorch path for CPU tensors or a
    block_size/head_dim that is not a power of two.
    """
    T, H, D = q.shape
    bs = k_cache.shape[1]
    if not q.is_cuda or not _pow2(bs) or not _pow2(D) or q.stride(2) != 1 or not k_cache.is_contiguous():
        return paged_attention(q, k, v, k_cache, v_cache, meta, scale)
    out = torch.empty((T, H, D), dtype=q.dtype, device=q.device)
    if T == 0:
        return out
    bt = meta.block_tables.to(q.device)
    seq_idx = meta.seq_idx.to(q.device)
    pos = meta.positions.to(q.device)
    _paged_attention_kernel[(T, H)](
        q, k_cache, v_cache, out, bt, seq_idx, pos, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), bt.stride(0),
        out.stride(0), out.stride(1),
        G=H // k.shape[1], BLOCK_SIZE=bs, HEAD_DIM=D,
    )
    return out
