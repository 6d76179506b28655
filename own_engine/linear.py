"""Bias-free linear layers with CPU fast paths.

``y = x @ W.T`` for ``x`` [M, in] and ``W`` [out, in] (``F.linear``'s convention). On CPU, fp32
(``backend="auto"``):

- single-threaded, with the native kernels built with AVX-512: the native panel GEMM for every M
  (:meth:`own_engine.cpu_kernels.NativeLayerOps.panel_linear`): the weight packed once at load into
  48-column panels read as one sequential stream, 8 rows x 48 columns of accumulators in registers,
  the next panel prefetched while the current one is reused from L2;
- otherwise: oneDNN-prepacked weights (``torch.ops.mkldnn._reorder_linear_weight``, the layout
  PyTorch's inductor uses for fp32 linears) for M > 1; MKL's SGEMM behind ``F.linear`` re-packs the
  weight on every call.

Measured on the default model's 30 layers of projections plus the LM head, 1 thread, this 2-core
Xeon (AVX-512), interleaved in one run (``benchmarks/bench_own_engine.py --section linear``, median
of 5; ``benchmarks/results/issue14/bench_own_engine.txt`` and ``bench_linear_0439a1e.txt``): panel
/ oneDNN time 0.76-0.77 at M=2, 0.62-0.63 at 8, 0.64-0.65 at 16, 0.69-0.72 at 17, 0.69-0.70 at 32,
0.75-0.77 at 48, 1.17 [0.90..1.24] and 0.88 [0.74..0.90] at 96 (the two runs disagree: noise on a
shared VM) and 0.92-0.98 at 512 (a prefill chunk); at M=1, panel / MKL's GEMV 0.91-1.03.

A layer keeps the dense weight (embedding ties, the fallbacks) and one packed copy (panels or
oneDNN's): the weight memory doubles. ``linear_backend="dense"`` turns both fast paths off (the
ablation). Elsewhere (CUDA, no oneDNN, non-fp32 weights) it is ``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LINEAR_BACKENDS = ("auto", "dense")


def onednn_available(weight: torch.Tensor) -> bool:
    """True when the oneDNN prepacked path applies to ``weight``: fp32 on CPU with oneDNN built in."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class Linear:
    """``weight`` [out, in]; ``__call__(x [M, in]) -> [M, out]``.

    ``backend="auto"``: with ``panel_ops`` (a :class:`~own_engine.cpu_kernels.NativeLayerOps` the
    caller chose: AVX-512, one thread) and an fp32 CPU weight, pack it into panels; else, on CPU fp32
    with oneDNN, prepack it for oneDNN (see the module docstring). ``"dense"``: always ``F.linear``
    (the ablation baseline). Raises ``ValueError`` for another backend.
    """

    __slots__ = ("weight", "weight_t", "packed", "panels", "panel_ops")

    def __init__(self, weight: torch.Tensor, backend: str = "auto", panel_ops=None) -> None:
        if backend not in LINEAR_BACKENDS:
            raise ValueError(f"linear_backend must be one of {LINEAR_BACKENDS}, got {backend!r}")
        self.weight = weight
        self.weight_t = weight.t()  # mm(x, W^T) is what F.linear runs, minus two dispatches per call
        cpu_fp32 = weight.device.type == "cpu" and weight.dtype == torch.float32
        self.panel_ops = panel_ops if backend == "auto" and cpu_fp32 else None
        self.panels = None if self.panel_ops is None else self.panel_ops.pack_panels(weight)
        self.packed = None
        if backend == "auto" and self.panels is None and onednn_available(weight):
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
            except RuntimeError:  # a oneDNN build without this reorder: the dense path is always right
                self.packed = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.panels is not None and x.dim() == 2 and x.is_contiguous() and x.shape[0] > 0:
            return self.panel_ops.panel_linear(x, self.panels, self.weight.shape[0])
        if self.packed is None or x.shape[0] == 1:
            return torch.mm(x, self.weight_t) if x.dim() == 2 else F.linear(x, self.weight)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    @property
    def nbytes(self) -> int:
        """Bytes of the dense weight (what one pass over the layer reads)."""
        return self.weight.numel() * self.weight.element_size()
