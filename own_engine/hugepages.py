"""Zeroed CPU tensors on transparent huge pages (2 MiB), for the KV cache.

Why: a decode step reads every sequence's KV blocks in block-table order, scattered over the whole
cache (1 GiB at the harness's default budget, far beyond the caches); with 4 KiB pages each 12 KiB
block also costs TLB misses and page walks on top of its cache misses. On this 2-core Xeon the native
attention kernel took 0.93x [0.85..1.01] the time per key with the cache on huge pages (48 sequences
x 190 keys x 30 layers, 5 interleaved repeats; ``benchmarks/bench_own_engine.py --section attention``).

How: Linux ``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned interior of a fresh, untouched allocation,
before it is first written: under THP mode ``madvise`` (the usual default) only regions that ask get
huge pages. Anywhere else (not Linux, a CUDA tensor, ``madvise`` refused, THP ``never``) the result is
a plain ``torch.zeros``: the same values on 4 KiB pages. Whether the kernel then backs the region with
huge pages is its decision (fragmented memory gets small ones); nothing here depends on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

HUGE_PAGE = 2 << 20  # bytes
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux


def _madvise_huge(addr: int, length: int) -> bool:
    """``madvise(addr, length, MADV_HUGEPAGE) == 0``; False where it is unavailable or refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        return libc.madvise(addr, length, MADV_HUGEPAGE) == 0
    except (OSError, AttributeError):
        return False


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, bool]:
    """A zeroed contiguous tensor of ``shape``; on CPU its storage starts on a 2 MiB boundary and is
    advised for huge pages when it spans at least one. Returns ``(tensor, advised)``."""
    if device.type != "cpu":
        return torch.zeros(shape, device=device, dtype=dtype), False
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if numel * itemsize < HUGE_PAGE:
        return torch.zeros(shape, dtype=dtype), False
    pad = HUGE_PAGE // itemsize
    buf = torch.empty(numel + pad, dtype=dtype)  # untouched: no page is faulted in yet
    offset = (-buf.data_ptr() % HUGE_PAGE) // itemsize
    t = buf[offset:offset + numel]
    advised = _madvise_huge(t.data_ptr(), numel * itemsize // HUGE_PAGE * HUGE_PAGE)
    t.zero_()
    return t.view(shape), advised
