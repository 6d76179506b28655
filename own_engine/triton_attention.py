"""CUDA paged attention in Triton (selected automatically on a GPU by
:func:`own_engine.model_runner.select_attention`, which falls back to the PyTorch path when this
module cannot be imported (no Triton) or :func:`smoke_test` fails on the device, e.g. no C compiler
for Triton's launcher).

Kernel: one program per (query token, query head), vLLM "paged attention v1" style. It walks the
sequence's block table, loads each K/V block ``[block_size, head_dim]`` of its KV head (GQA: query
head ``h`` reads KV head ``h // G``), masks key positions beyond the query's position (causal), and
accumulates with the online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022,
Alg. 1). Works for decodes, speculative verification and prefill chunks alike (a prefill is just
many queries); fp32 accumulation. Checked against the CPU path by
``tests/own_engine/test_engine.py::test_triton_kernel_matches_cpu_path`` (skipped without CUDA)
and, over many shapes, by ``benchmarks/cuda_check.py``.
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


def kernel_supports(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether :func:`triton_paged_attention` runs the kernel for these tensors (else it falls back
    to the PyTorch path): CUDA tensors, power-of-two block size and head dim, ``q``'s last dim
    contiguous, K and V caches contiguous with one shape."""
    return (q.is_cuda and k_cache.is_cuda and v_cache.is_cuda and _pow2(k_cache.shape[1]) and _pow2(q.shape[2])
            and q.stride(2) == 1 and k_cache.is_contiguous() and v_cache.is_contiguous()
            and k_cache.shape == v_cache.shape and q.dtype == k_cache.dtype == v_cache.dtype)


def launch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
           scale: float, num_kv_heads: int) -> torch.Tensor:
    """Run the kernel unconditionally (no fallback; CPU tensors work under ``TRITON_INTERPRET=1``)."""
    T, H, D = q.shape
    out = torch.empty((T, H, D), dtype=q.dtype, device=q.device)
    if T == 0:
        return out
    bt = meta.block_tables.to(q.device)
    seq_idx = meta.seq_idx.to(q.device)
    pos = meta.positions.to(q.device)
    _paged_attention_kernel[(T, H)](
        q, k_cache, v_cache, out, bt, seq_idx, pos, float(scale),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), bt.stride(0),
        out.stride(0), out.stride(1),
        G=H // num_kv_heads, BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=D,
    )
    return out


def triton_paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Same contract as :func:`own_engine.attention.paged_attention` (K/V already written).

    ``q`` [T, num_heads, head_dim] (last dim contiguous); caches [num_blocks, block_size,
    num_kv_heads, head_dim] contiguous on CUDA. Falls back to the PyTorch path when
    :func:`kernel_supports` says no (CPU tensors, a block_size/head_dim that is not a power of two).
    """
    if not kernel_supports(q, k_cache, v_cache):
        return paged_attention(q, k, v, k_cache, v_cache, meta, scale)
    return launch(q, k_cache, v_cache, meta, scale, k_cache.shape[2])


def smoke_test(device: torch.device) -> str | None:
    """Compile and run the kernel once on ``device`` on a small mixed batch (prefill, chunk with
    cached context, decodes; GQA) and compare with the PyTorch path on the same device.

    Returns None when it matches (max abs error <= 1e-3), else a one-line reason (a missing C
    compiler or Python headers for Triton's launcher, a compile error, a mismatch).
    """
    from own_engine.attention import build_metadata, write_kv

    try:
        g = torch.Generator().manual_seed(0)
        H, nkv, D, bs = 4, 2, 32, 16
        q_lens, ctx_lens = [20, 1, 3, 18], [20, 33, 17, 40]
        tables = [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
        T = sum(q_lens)
        q, k, v = (torch.randn(T, n, D, generator=g).to(device) for n in (H, nkv, nkv))
        kc, vc = (torch.randn(10, bs, nkv, D, generator=g).to(device) for _ in range(2))
        meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, device)
        write_kv(k, v, kc, vc, meta.slot_mapping)
        ref = paged_attention(q, k, v, kc, vc, meta, D ** -0.5)
        out = launch(q, kc, vc, meta, D ** -0.5, nkv)
        err = float((out - ref).abs().max())
    except Exception as exc:  # noqa: BLE001 - the reason is the result
        msg = " ".join(str(exc).split())
        return f"Triton kernel failed on {device}: {type(exc).__name__}: {msg[:300]}"
    if not err <= 1e-3:
        return f"Triton kernel disagrees with the PyTorch path on {device}: max abs error {err:.3g}"
    return None
