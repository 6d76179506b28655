"""Bias-free linear layers with CPU fast paths chosen by the number of rows M.

``y = x @ W.T`` for ``x`` [M, in] and ``W`` [out, in] (``F.linear``'s convention). On CPU, fp32
(``backend="auto"``):

- M <= 16 (decodes of up to 16 sequences, a speculative verify): the native small-M kernel
  (:meth:`own_engine.cpu_kernels.NativeLayerOps.small_m_linear`, when the native kernels built),
  which reads every weight row once, so these steps cost one pass over the weight bytes;
- M > 16 (larger decode batches, prefill chunks): oneDNN-prepacked weights
  (``torch.ops.mkldnn._reorder_linear_weight``, the layout PyTorch's inductor uses for fp32
  linears); MKL's SGEMM behind ``F.linear`` re-packs the weight on every call.

Measured on the default model's 30 layers of projections, 1 thread, this 2-core Xeon (AVX-512),
interleaved (``benchmarks/bench_own_engine.py --section linear``): small-M / best other = 1.10x at
M=1 (vs MKL's GEMV), 1.48x at 2, 1.55x at 4, 1.61x at 6, 1.43x at 8, 1.17x at 16; at M=32 and 48
oneDNN is faster. oneDNN vs MKL: 1.30x at M=6, 1.11x at 32, ~1.1x at 256.

A layer keeps the dense weight (small-M kernel, MKL fallback) and the oneDNN copy: the weight
memory doubles (``linear_backend="dense"`` turns both fast paths off: the ablation). Elsewhere
(CUDA, no oneDNN, non-fp32 weights) it is ``F.linear``.
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

    ``backend="auto"``: on CPU fp32 with oneDNN, prepack the weight once (see the module docstring);
    ``"dense"``: always ``F.linear`` (the ablation baseline). Raises ``ValueError`` for another backend.
    """

    __slots__ = ("weight", "weight_t", "packed", "small_m", "small_m_max")

    def __init__(self, weight: torch.Tensor, backend: str = "auto", small_m=None, small_m_max: int = 0) -> None:
        if backend not in LINEAR_BACKENDS:
            raise ValueError(f"linear_backend must be one of {LINEAR_BACKENDS}, got {backend!r}")
        self.weight = weight
        self.weight_t = weight.t()  # mm(x, W^T) is what F.linear runs, minus two dispatches per call
        # the native small-M kernel (own_engine.cpu_kernels.NativeLayerOps.small_m_linear) for 1..small_m_max rows
        self.small_m = small_m if backend == "auto" and onednn_available(weight) else None
        self.small_m_max = small_m_max
        self.packed = None
        if backend == "auto" and onednn_available(weight):
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
            except RuntimeError:  # a oneDNN build without this reorder: the dense path is always right
                self.packed = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        M = x.shape[0]
        if self.small_m is not None and M <= self.small_m_max and x.dim() == 2 and x.is_contiguous():
            return self.small_m(x, self.weight)
        if self.packed is None or M == 1:
            return torch.mm(x, self.weight_t) if x.dim() == 2 else F.linear(x, self.weight)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    @property
    def nbytes(self) -> int:
        """Bytes of the dense weight (what one pass over the layer reads)."""
        return self.weight.numel() * self.weight.element_size()
