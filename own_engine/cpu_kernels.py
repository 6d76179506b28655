"""The native CPU attention path: ``csrc/paged_attention.c`` compiled on first use, called via ctypes.

Why: on CPU the PyTorch path (:func:`own_engine.attention.paged_attention`) gathers every decode
sequence's context out of the block-table cache (``index_select``) before one padded SDPA call; the
copy costs as much as the attention itself (18 % + 12 % of a 32-sequence decode step at context 160
in ``benchmarks/profile_own_engine.py``), and each layer issues ~12 small ops. The C kernel reads K/V
once through the block table, for decodes and speculative verification (queries of at most
:data:`~own_engine.attention.DECODE_GROUP_MAX_Q` tokens). Prefill chunks at head_dim 64 (with
AVX-512) go to a flash-attention kernel over the same cache: 0.58x SDPA's time at 512 tokens, 0.82x
at 1,273 (``prefill_attention_paged``; ``benchmarks/bench_own_engine.py --section prefill``; other
head sizes keep SDPA). It is single-threaded (the harness runs engines with 1 thread).

Build: ``gcc -O3 -march=native -ffast-math -fopenmp-simd -fPIC -c``, then ``gcc -shared`` (linked
without ``-ffast-math``, which would set flush-to-zero process-wide) into
``$XDG_CACHE_HOME/llm-serve-bench/kernels/`` (default ``~/.cache/...``; ``OWN_ENGINE_KERNEL_DIR``
overrides), keyed by a hash of the source, the compiler version and command line, the flags and
the CPU flags, written atomically (concurrent servers may build at once). Without a C compiler, or
if the build or the start-up self-check fails, :func:`native_unavailable_reason` says why and the
engine uses the PyTorch path (``attention_backend="auto"``), or refuses (``"native"``).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from own_engine.attention import AttentionMetadata, prefill_attention

SOURCE = Path(__file__).with_name("csrc") / "paged_attention.c"
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd", "-fPIC"]  # compile (-c)
# link without -ffast-math: with it gcc < 13 links crtfastmath.o, whose constructor turns on
# flush-to-zero for the whole process that loads the library (GCC bug 55522), PyTorch's ops included
LDFLAGS = ["-shared"]
PANEL_N = 48  # output columns per packed weight panel (csrc PANEL_N)
UNUSED_BUILD_DAYS = 30  # kernel builds of other cache keys unused this long are removed at the next build

_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


def kernel_dir() -> Path:
    """Where compiled kernels are cached (see the module docstring)."""
    if os.environ.get("OWN_ENGINE_KERNEL_DIR"):
        return Path(os.environ["OWN_ENGINE_KERNEL_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llm-serve-bench" / "kernels"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _fallback_kernel_dir() -> Path:
    """A per-user directory under the system temp dir, for when :func:`kernel_dir` is not writable."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"llm-serve-bench-kernels-{uid}"


def _private_dir(d: Path) -> None:
    """Create ``d`` (mode 0700) or accept it only if this user owns it and nobody else can write
    to it: a shared temp dir must not let another user plant the library this process loads.
    Raises RuntimeError otherwise."""
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.lstat()
    if hasattr(os, "getuid") and (not d.is_dir() or d.is_symlink() or st.st_uid != os.getuid()
                                  or st.st_mode & 0o022):
        raise RuntimeError(f"refusing the kernel directory {d}: not a directory of this user's that only it can write")


def _compile_into(cc: list[str], out: Path) -> Path:
    """Compile :data:`SOURCE` to ``out`` atomically (a temp file in its directory, then a rename);
    raises OSError when the directory is not writable, RuntimeError with the compiler's first line.
    Before a build it removes what earlier ones left: temp files older than 10 min and builds (other
    cache keys) not used for :data:`UNUSED_BUILD_DAYS` days (a reused build's mtime is refreshed)."""
    if out.is_file():
        try:
            os.utime(out)  # in use: pruning (below) keeps builds used within UNUSED_BUILD_DAYS
        except OSError:
            pass  # a read-only cache still serves its build
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for stale in out.parent.glob("*.so"):
        try:  # a build killed (SIGKILL) mid-compile; builds of other sources/compilers nobody used lately
            age = now - stale.stat().st_mtime
            if (stale.name.startswith("tmp") and age > 600) or (stale.name.startswith("paged_attention-")
                                                                  and age > UNUSED_BUILD_DAYS * 86400):
                stale.unlink()
        except OSError:
            pass
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    obj = tmp[:-3] + ".o"
    try:
        for cmd in ([*cc, *CFLAGS, "-c", "-o", obj, str(SOURCE)], [*cc, *LDFLAGS, "-o", tmp, obj, "-lm"]):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["no output"])[0]
                raise RuntimeError(f"{shlex.join(cc)} failed to build {SOURCE.name}: {first}")
        os.replace(tmp, out)
    finally:
        for f in (tmp, obj):
            if os.path.exists(f):
                os.unlink(f)
    return out


def _build(cc: list[str]) -> Path:
    """Compile (or reuse) the shared library, in :func:`kernel_dir` or, when that is not writable
    (a read-only home), in :func:`_fallback_kernel_dir`; raises RuntimeError with the compiler's
    first line, OSError when neither directory is writable."""
    version = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    # the whole CC command line is in the key: "gcc -mno-avx512f" must not share a build with "gcc"
    key = hashlib.sha256("\0".join([SOURCE.read_text(), version, shlex.join(cc), " ".join(CFLAGS), " ".join(LDFLAGS),
                                    platform.machine(), _cpu_flags()]).encode()).hexdigest()[:16]
    name = f"paged_attention-{key}.so"
    try:
        return _compile_into(cc, kernel_dir() / name)
    except OSError as exc:
        fallback = _fallback_kernel_dir() / name
        logging.getLogger("own_engine").warning("kernel cache %s is not writable (%s): building in %s",
                                                kernel_dir(), exc.strerror or exc, fallback.parent)
        _private_dir(fallback.parent)
        return _compile_into(cc, fallback)


def _open(path: Path | str) -> ctypes.CDLL:
    """Load the library at ``path`` and declare its functions; raises OSError (not a loadable
    library) or AttributeError (a library that lacks one of them)."""
    lib = ctypes.CDLL(str(path))
    lib.paged_decode_attention.restype = ctypes.c_int
    lib.paged_decode_attention.argtypes = [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _i64, _ptr, _ptr, _ptr, _i64,
                                           _i64, _i64, _i64, _i64, ctypes.c_float, _ptr, _i64, _i64, _ptr]
    lib.rope_kv_write.restype = None
    lib.rope_kv_write.argtypes = [_ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr]
    lib.add_rms_norm.restype = None
    lib.add_rms_norm.argtypes = [_ptr, _ptr, _ptr, ctypes.c_float, _i64, _i64, _ptr]
    lib.silu_mul.restype = None
    lib.silu_mul.argtypes = [_ptr, _i64, _i64, _ptr]
    lib.pack_panels.restype = None
    lib.pack_panels.argtypes = [_ptr, _i64, _i64, _ptr]
    lib.panel_linear.restype = ctypes.c_int
    lib.panel_linear.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr]
    lib.panel_linear_vectorized.restype = ctypes.c_int
    lib.panel_linear_vectorized.argtypes = []
    lib.prefill_attention_paged.restype = ctypes.c_int
    lib.prefill_attention_paged.argtypes = [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _i64, _i64,
                                            ctypes.c_float, _ptr, _i64, _i64, _ptr]
    lib.decode_forward.restype = ctypes.c_int
    lib.decode_forward.argtypes = [_i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _i64,
                                   _i64, ctypes.c_float, ctypes.c_float, _ptr, _ptr, _ptr, _ptr, _ptr, _i64, _ptr, _ptr,
                                   _ptr, _i64, _i64, _ptr, _ptr]
    return lib


def _load() -> tuple[ctypes.CDLL | None, str | None]:
    found = shutil.which("gcc") or shutil.which("cc")
    # CC is a command line, as make reads it ("ccache gcc"); a compiler found on PATH is one path
    try:
        cc = shlex.split(os.environ["CC"]) if os.environ.get("CC", "").strip() else [found] if found else None
    except ValueError as exc:
        return None, f"CC={os.environ['CC']!r} is not a command line ({exc}): the native CPU kernels are not built"
    if cc is None:
        return None, "no C compiler (gcc/cc) on PATH for the native CPU kernels (CC=... names one)"
    try:
        path = _build(cc)
        try:
            lib = _open(path)
        except (OSError, AttributeError) as exc:  # a truncated or foreign file under the cache key: rebuild once
            logging.getLogger("own_engine").warning("cached kernel %s is unusable (%s): rebuilding",
                                                    path, str(exc).splitlines()[0])
            path.unlink(missing_ok=True)
            path = _build(cc)
            # dlopen hands back a library it already loaded under the same path string (the bad
            # one, if it loaded at all): name the fresh file differently ("dir/./name", not pathlib)
            lib = _open(os.path.join(str(path.parent), ".", path.name))
    except (OSError, AttributeError, RuntimeError, subprocess.SubprocessError) as exc:
        return None, (f"the native CPU kernels are unusable: {str(exc).splitlines()[0]} (kernel cache "
                      f"{kernel_dir()}; OWN_ENGINE_KERNEL_DIR moves it, CC picks the compiler)")
    return lib, None


def _at_least(buf: torch.Tensor, n: int) -> torch.Tensor:
    """``buf`` when it holds at least ``n`` floats, else a new uninitialised fp32 buffer of ``n``
    (the kernels' scratch grows to the largest step seen and is reused after)."""
    return buf if buf.numel() >= n else torch.empty(n)


class NativeLayerOps:
    """The decoder layer's elementwise work in three calls instead of ~20 small PyTorch ops
    (:meth:`own_engine.model.LlamaModel.forward` uses them when the native kernels are active),
    and the panel linear. fp32 CPU tensors, contiguous rows; shapes in each method.
    ``panel_vectorized``: the panel kernel was built with AVX-512 (else it is a plain loop, which
    :class:`own_engine.linear.Linear` does not use)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.panel_vectorized = bool(lib.panel_linear_vectorized())
        self._scratch = torch.empty(0)  # decode_forward's attention scratch, grown on demand

    def rope_kv_write(self, qkv: torch.Tensor, num_heads: int, num_kv_heads: int, head_dim: int,
                      cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Rotate the q and k heads of ``qkv`` [T, (H + 2 nkv) D] in place (interleaved pairs, by
        ``cos``/``sin`` [max_len, D/2] at ``positions`` [T]) and write its k and v heads to the
        caches [num_blocks, block_size, nkv, D] at ``slot_mapping`` [T]."""
        self.lib.rope_kv_write(qkv.data_ptr(), qkv.stride(0), qkv.shape[0], num_heads, num_kv_heads, head_dim,
                               cos.data_ptr(), sin.data_ptr(), positions.data_ptr(), k_cache.data_ptr(),
                               v_cache.data_ptr(), slot_mapping.data_ptr())

    def add_rms_norm(self, h: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float,
                     out: torch.Tensor) -> None:
        """``h += delta`` (if given), then ``out = RMSNorm(h) * weight``; ``h``, ``delta``, ``out``
        [T, hidden], ``weight`` [hidden]."""
        T, n = h.shape
        self.lib.add_rms_norm(h.data_ptr(), None if delta is None else delta.data_ptr(), weight.data_ptr(), eps, T, n,
                              out.data_ptr())

    def pack_panels(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` [N, K] → its panels [ceil(N / 48), K, 48] (``panels[p, k, j] = weight[48 p + j, k]``,
        zero rows past N): the layout :meth:`panel_linear` reads as one sequential stream."""
        N, K = weight.shape
        if weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(f"pack_panels needs a float32 CPU weight, got {weight.dtype} on {weight.device}")
        w = weight.contiguous()
        panels = torch.empty(-(-N // PANEL_N), K, PANEL_N)
        self.lib.pack_panels(w.data_ptr(), N, K, panels.data_ptr())
        return panels

    def panel_linear(self, x: torch.Tensor, panels: torch.Tensor, n: int) -> torch.Tensor:
        """``x`` [M, K] (contiguous) @ ``weight``^T → [M, n] from ``panels`` = ``pack_panels(weight)``
        of a ``weight`` [n, K]: the weight streamed once per call for any M (8-row register blocks,
        csrc/paged_attention.c). Raises ``ValueError`` for an empty, non-contiguous or non-fp32 ``x``
        or a K that differs."""
        M, K = x.shape
        if M < 1 or panels.shape[1] != K or panels.shape[0] * PANEL_N < n:
            raise ValueError(f"panel_linear needs x [M >= 1, {panels.shape[1]}] for these panels, got {list(x.shape)}")
        if x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError(f"panel_linear needs a contiguous float32 x, got {x.dtype} with strides {x.stride()}")
        out = torch.empty(M, n)
        self.lib.panel_linear(x.data_ptr(), M, K, panels.data_ptr(), n, out.data_ptr())
        return out

    def silu_mul(self, gate_up: torch.Tensor, out: torch.Tensor) -> None:
        """``out = silu(gate) * up`` for ``gate_up`` [T, 2 inter] = [gate | up], ``out`` [T, inter]."""
        T, inter = out.shape
        self.lib.silu_mul(gate_up.data_ptr(), T, inter, out.data_ptr())

    def decode_forward(self, layer_ptrs: torch.Tensor, h: torch.Tensor, out: torch.Tensor, dims: tuple[int, int, int, int, int],
                       eps: float, scale: float, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                       meta, block_size: int, final_norm: torch.Tensor) -> None:
        """Every decoder layer of a decode-only step in one native call (``decode_forward`` in
        csrc/paged_attention.c: the kernels of :meth:`own_engine.model.LlamaModel._forward_native`
        in the same order, so the result is bit-identical).

        ``layer_ptrs`` [L, 8] int64: per layer the addresses of the input-norm weight, qkv panels, o
        panels, post-norm weight, gate_up panels, down panels, K cache, V cache. ``h`` [T, hidden]:
        the embedded tokens (updated in place: the residual stream); ``out`` [T, hidden] gets the
        final-normed hidden states. ``dims`` = (hidden, intermediate, H, nkv, D); ``cos``/``sin``
        [max_len, D/2], ``positions`` [T] int64 as for :meth:`rope_kv_write`. ``meta``: an
        :class:`~own_engine.attention.AttentionMetadata` with no prefill chunk (its decode group covers
        every token). Raises ``ValueError`` when it has prefill chunks, ``RuntimeError`` when a kernel
        refuses (H not a multiple of nkv)."""
        hidden, inter, H, nkv, D = dims
        T = h.shape[0]
        if meta.prefills or meta.dec_rows is None or meta.dec_rows.shape[0] != T:
            raise ValueError("decode_forward takes decode-only steps (every token in the decode group)")
        need = H * (meta.dec_max_len + D + 2)
        self._scratch = _at_least(self._scratch, need)
        qkv, attn = torch.empty(T, (H + 2 * nkv) * D), torch.empty(T, H * D)
        delta, gu, act = torch.empty(T, hidden), torch.empty(T, 2 * inter), torch.empty(T, inter)
        bt = meta.block_tables
        rc = self.lib.decode_forward(
            layer_ptrs.shape[0], layer_ptrs.data_ptr(), h.data_ptr(), out.data_ptr(), qkv.data_ptr(), attn.data_ptr(),
            delta.data_ptr(), gu.data_ptr(), act.data_ptr(), T, hidden, inter, H, nkv, D, eps, scale, cos.data_ptr(),
            sin.data_ptr(), positions.data_ptr(), meta.slot_mapping.data_ptr(), bt.data_ptr(), bt.stride(0),
            meta.dec_rows.data_ptr(), meta.dec_seq.data_ptr(), meta.dec_lens.data_ptr(), T, block_size,
            final_norm.data_ptr(), self._scratch.data_ptr())
        if rc != 0:
            raise RuntimeError(f"native decode forward refused: {H} query heads, {nkv} KV heads")


class NativePagedAttention:
    """Same contract as :func:`own_engine.attention.paged_attention` (K/V already in the caches;
    the native model path writes them with :meth:`NativeLayerOps.rope_kv_write`). CPU fp32 only."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.layer_ops = NativeLayerOps(lib)
        self._scratch = torch.empty(0)
        self._kt = torch.empty(0)  # the prefill kernel's packed K^T, grown on demand
        #: prefill chunks go to the native flash kernel (AVX-512, head_dim 64); False = SDPA for them
        self.native_prefill = bool(lib.panel_linear_vectorized())

    def prefill(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                scale: float, out: torch.Tensor) -> bool:
        """Every prefill chunk of ``meta`` into ``out`` [T, H, D] with the native flash kernel
        (``prefill_attention_paged`` in csrc/paged_attention.c: causal, K/V read through the
        sequence's block table; they must already be in the caches). False, with nothing written,
        when the kernel does not take this shape (head_dim other than 64, no AVX-512)."""
        T, H, D = q.shape
        nkv, bs = k_cache.shape[2], k_cache.shape[1]
        if not self.native_prefill or D != 64 or not meta.prefills:
            return False
        bt, seq = meta.block_tables, meta.seq_idx
        for p in meta.prefills:
            need = -(-p.ctx_len // 16) * 16 * D + 16  # + 16 floats to align to 64 bytes
            self._kt = _at_least(self._kt, need)
            kt = self._kt.data_ptr()
            row = int(seq[p.start])
            rc = self.lib.prefill_attention_paged(
                q[p.start].data_ptr(), q.stride(0), q.stride(1), k_cache.data_ptr(), v_cache.data_ptr(),
                bt[row].data_ptr(), p.q_len, p.ctx_len, H, nkv, D, bs, scale, out[p.start].data_ptr(),
                out.stride(0), out.stride(1), kt + (-kt % 64))
            if rc != 0:
                raise RuntimeError(f"native prefill attention refused: {H} query heads, {nkv} KV heads, head_dim {D}")
        return True

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """``q`` [T, H, D] → [T, H, D]: prefill chunks through the native flash kernel (else SDPA),
        the decode group through the paged decode kernel."""
        T, H, D = q.shape
        out = torch.empty(T, H, D, dtype=q.dtype)
        if not self.prefill(q, k_cache, v_cache, meta, scale, out):
            prefill_attention(q, k, v, k_cache, v_cache, meta, scale, out)
        if meta.dec_rows is not None:
            n = meta.dec_rows.shape[0]
            need = H * (meta.dec_max_len + D + 2)  # scores [H, L], accumulators [H, D], max and sum [H]
            self._scratch = _at_least(self._scratch, need)
            bt = meta.block_tables
            rc = self.lib.paged_decode_attention(
                q.data_ptr(), q.stride(0), q.stride(1), k_cache.data_ptr(), v_cache.data_ptr(), bt.data_ptr(),
                bt.stride(0), meta.dec_rows.data_ptr(), meta.dec_seq.data_ptr(), meta.dec_lens.data_ptr(), n,
                H, k.shape[1], D, k_cache.shape[1], scale, out.data_ptr(), out.stride(0), out.stride(1),
                self._scratch.data_ptr())
            if rc != 0:
                raise RuntimeError(f"native attention: {H} query heads are not a multiple of {k.shape[1]} KV heads")
        return out


_STATE: dict[str, object] = {}  # the per-process kernel: {"fn": NativePagedAttention | None, "why": str | None}


def native_attention() -> tuple[NativePagedAttention | None, str | None]:
    """``(kernel, None)`` when the native kernel builds, loads and matches the PyTorch path on a
    small mixed batch (checked once per process); else ``(None, reason)``."""
    if "why" not in _STATE:
        lib, why = _load()
        fn = None if lib is None else NativePagedAttention(lib)
        if fn is not None:
            why = _self_check(fn)
            if why is not None:
                fn = None
        _STATE.update(fn=fn, why=why)
    return _STATE["fn"], _STATE["why"]  # type: ignore[return-value]


def _self_check(fn: NativePagedAttention) -> str | None:
    """Compare with the PyTorch path: prefill, chunk with cached context, decodes, a verify; GQA; at
    head_dim 16 and 64 (the native prefill kernel's); the layer ops and the panel GEMM."""
    from own_engine.attention import build_metadata, paged_attention, write_kv

    g = torch.Generator().manual_seed(0)
    H, nkv, bs, nblocks = 6, 2, 4, 40
    q_lens, ctx_lens = [9, 1, 5, 1, 20], [9, 13, 14, 1, 30]
    tables = [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10], [11], [12, 13, 14, 15, 16, 17, 18, 19]]
    T = sum(q_lens)
    for D in (16, 64):  # 64: the prefill chunks take the native flash kernel too
        q, k, v = (torch.randn(T, n, D, generator=g) for n in (H, nkv, nkv))
        kc, vc = (torch.randn(nblocks, bs, nkv, D, generator=g) for _ in range(2))
        meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, torch.device("cpu"))
        write_kv(k, v, kc, vc, meta.slot_mapping)
        err = float((fn(q, k, v, kc, vc, meta, D ** -0.5) - paged_attention(q, k, v, kc, vc, meta, D ** -0.5)).abs().max())
        if not err < 1e-4:
            return f"the native CPU attention kernel disagrees with the PyTorch path (head_dim {D}: max abs error {err:.2e})"
    errs = layer_ops_errors(fn.layer_ops)
    xs, ws = torch.randn(19, 40, generator=g), torch.randn(13, 40, generator=g)
    errs["panel_linear"] = float((fn.layer_ops.panel_linear(xs, fn.layer_ops.pack_panels(ws), 13) - xs @ ws.t()).abs().max())
    err = max(errs.values())
    if not err < 1e-4:
        return f"the native CPU layer ops disagree with PyTorch ({max(errs, key=errs.get)}: max abs error {err:.2e})"
    return None


def layer_ops_errors(ops: NativeLayerOps, T: int = 5, H: int = 6, nkv: int = 2, D: int = 16,
                     hidden: int = 48, inter: int = 40) -> dict[str, float]:
    """Max abs error of each :class:`NativeLayerOps` op against its PyTorch definition on random
    inputs (RoPE as the complex multiply of :mod:`own_engine.model`, ``F.rms_norm``, SiLU x up)."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(T, (H + 2 * nkv) * D, generator=g)
    ang = torch.rand(32, D // 2, generator=g) * 6.3
    cos, sin = ang.cos(), ang.sin()
    pos = torch.tensor([3, 0, 31, 7, 7][:T], dtype=torch.int64)
    slots = torch.tensor([4, 9, 0, 2, 11][:T], dtype=torch.int64)
    kc, vc = torch.zeros(12, 1, nkv, D), torch.zeros(12, 1, nkv, D)
    ref = torch.view_as_real(torch.view_as_complex(qkv[:, :(H + nkv) * D].reshape(T, H + nkv, D // 2, 2))
                             * torch.complex(cos, sin)[pos].unsqueeze(1)).reshape(T, -1)
    got = qkv.clone()
    ops.rope_kv_write(got, H, nkv, D, cos, sin, pos, kc, vc, slots)
    errs = {"rope": float((got[:, :(H + nkv) * D] - ref).abs().max()),
            "kv_write": float(max((kc.view(12, -1)[slots] - got[:, H * D:(H + nkv) * D]).abs().max(),
                                  (vc.view(12, -1)[slots] - qkv[:, (H + nkv) * D:]).abs().max()))}
    h, d, w = torch.randn(T, hidden, generator=g), torch.randn(T, hidden, generator=g), torch.randn(hidden, generator=g)
    out, h2 = torch.empty(T, hidden), h.clone()
    ops.add_rms_norm(h2, d, w, 1e-5, out)
    errs["add_rms_norm"] = float(max((h2 - (h + d)).abs().max(), (out - F.rms_norm(h + d, (hidden,), w, 1e-5)).abs().max()))
    gu, act = torch.randn(T, 2 * inter, generator=g), torch.empty(T, inter)
    ops.silu_mul(gu, act)
    errs["silu_mul"] = float((act - F.silu(gu[:, :inter]) * gu[:, inter:]).abs().max())
    return errs
