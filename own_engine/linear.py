"""Bias-free linear layers with a CPU fast path: oneDNN-prepacked weights for multi-row inputs.

``y = x @ W.T`` for ``x`` [M, in] and ``W`` [out, in] (``F.linear``'s convention). Measured on the
default model's 30-layer weight set, 1 thread, this 2-core Xeon (AVX-512), 12 interleaved repeats
(``benchmarks/profile_own_engine.py`` has the whole-step view):

- M = 1 (batch-1 decode): MKL's GEMV behind ``F.linear`` on the dense weight is the fastest path
  (oneDNN prepacked is 0.76x of it);
- M = 6 (a speculative verify of 5 drafts): oneDNN prepacked is 1.30x faster, M = 32 (a decode
  batch) 1.11x, M = 256 (a prefill chunk) ~1.1x: MKL's SGEMM re-packs the weight on every call,
  which costs a full extra pass over the weight bytes when M is small.

So on CPU a layer keeps both: the dense weight for M == 1 and a oneDNN blocked copy
(``torch.ops.mkldnn._reorder_linear_weight``, the layout PyTorch's inductor uses for fp32 linears)
for M > 1; the weight memory doubles (the price of the fast path; ``linear_backend="dense"`` turns
it off). Elsewhere (CUDA, no oneDNN, non-fp32 weights) it is ``F.linear``.
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
