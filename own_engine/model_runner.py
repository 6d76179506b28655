"""ModelRunner: owns the model and its KV cache, turns a step's work into one batched forward.

Prepares ``input_ids``, ``positions``, ``slot_mapping``, block tables and context lengths (vLLM's
names) for a flattened varlen batch, runs the model once, and returns logits only for the rows
that need them (the LM head is ~20% of the default model's weights, so it is applied to the
sampled positions only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from own_engine.attention import build_metadata, paged_attention
from own_engine.model import LlamaModel

logger = logging.getLogger("own_engine")


@dataclass
class BatchItem:
    """Work for one sequence: compute ``token_ids`` at positions ``start..start+len-1`` (the cache
    already holds positions ``< start``) and return logits for the last ``num_logits`` of them."""

    token_ids: list[int]
    start: int
    block_table: list[int]
    num_logits: int


_SMOKE: dict[str, str | None] = {}  # device -> reason the Triton kernel is unusable there (None: fine)


def triton_unavailable_reason(device: torch.device) -> str | None:
    """None when the Triton kernel imports and passes its smoke test on ``device`` (checked once per
    device and process); else a one-line reason."""
    if device.type != "cuda":
        return f"the Triton kernel needs a CUDA device, got {device}"
    key = str(device)
    if key not in _SMOKE:
        try:
            from own_engine.triton_attention import smoke_test
        except ImportError as exc:
            _SMOKE[key] = f"Triton is not importable: {exc}"
        else:
            _SMOKE[key] = smoke_test(device)
    return _SMOKE[key]


def select_attention(device: torch.device, backend: str = "auto") -> tuple[Callable, str, str | None]:
    """``(attention_fn, name, note)`` for ``device``: on CUDA the Triton paged-attention kernel
    (name ``"triton"``) when it imports and passes its smoke test; on CPU the native C kernel
    (``"native"``, :mod:`own_engine.cpu_kernels`) when it builds and passes its self-check; else the
    PyTorch path (``"torch"``; it runs everywhere). ``note`` says why ``auto`` fell back (logged as
    a warning).

    ``backend="triton"`` / ``"native"`` raise :class:`~own_engine.config.ConfigError` when that
    kernel is unusable (or on the wrong device); ``"torch"`` always gives the PyTorch path (the
    ablation baseline).
    """
    from own_engine.config import ATTENTION_BACKENDS, ConfigError

    if backend not in ATTENTION_BACKENDS:
        raise ConfigError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {backend!r}")
    if backend == "torch":
        return paged_attention, "torch", None
    if device.type != "cuda":
        if backend == "triton":
            raise ConfigError(f"attention_backend='triton' needs a CUDA device, got {device}: use 'auto'")
        from own_engine.cpu_kernels import native_attention

        fn, reason = native_attention()
        if fn is not None:
            return fn, "native", None
        if backend == "native":
            raise ConfigError(f"attention_backend='native' is unusable: {reason}; use 'auto' or 'torch'")
        logger.warning("using the PyTorch attention path on %s: %s", device, reason)
        return paged_attention, "torch", reason
    if backend == "native":
        raise ConfigError("attention_backend='native' is the CPU kernel; on CUDA use 'auto', 'triton' or 'torch'")
    reason = triton_unavailable_reason(device)
    if reason is None:
        from own_engine.triton_attention import triton_paged_attention

        return triton_paged_attention, "triton", None
    if backend == "triton":
        raise ConfigError(f"attention_backend='triton' is unusable: {reason}; use 'auto' or 'torch'")
    logger.warning("using the PyTorch attention path on %s: %s", device, reason)
    return paged_attention, "torch", reason


class ModelRunner:
    """Runs ``model`` over batches with its own preallocated KV cache.

    KV cache: per layer K and V tensors [num_blocks, block_size, num_kv_heads, head_dim] (fp32).
    """

    def __init__(self, model: LlamaModel, num_blocks: int, block_size: int, device: torch.device) -> None:
        c = model.cfg
        self.model = model
        self.block_size = block_size
        self.device = device
        shape = (num_blocks, block_size, c.num_kv_heads, c.head_dim)
        self.kv_caches = [(torch.zeros(shape, device=device), torch.zeros(shape, device=device))
                          for _ in range(model.num_layers)]

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Copy KV blocks ``src → dst`` in every layer (copy-on-write, naive fork)."""
        if not copies:
            return
        src = torch.tensor([s for s, _ in copies], device=self.device)
        dst = torch.tensor([d for _, d in copies], device=self.device)
        for k, v in self.kv_caches:
            k.index_copy_(0, dst, k.index_select(0, src))
            v.index_copy_(0, dst, v.index_select(0, src))

    @torch.inference_mode()
    def run(self, items: list[BatchItem]) -> torch.Tensor:
        """One forward over all ``items``; logits [sum(num_logits), vocab] in item order.

        Raises ``ValueError`` for an empty batch or a block table too short for its tokens.
        """
        if not items:
            raise ValueError("empty batch")
        c = self.model.cfg
        q_lens = [len(it.token_ids) for it in items]
        ctx = [it.start + n for it, n in zip(items, q_lens)]
        meta = build_metadata(q_lens, ctx, [it.block_table for it in items], self.block_size,
                              c.num_heads, c.num_kv_heads, self.device,
                              torch_decode=self.model.attention_fn is paged_attention)
        flat: list[int] = []
        for it in items:
            flat.extend(it.token_ids)
        input_ids = torch.tensor(flat, dtype=torch.int64, device=self.device)
        hidden = self.model.forward(input_ids, meta.positions.to(self.device), meta, self.kv_caches)
        rows: list[int] = []
        end = 0
        for it, n in zip(items, q_lens):
            end += n
            rows.extend(range(end - it.num_logits, end))
        if not rows:
            return torch.empty(0, c.vocab_size, device=self.device)
        sel = hidden if len(rows) == hidden.shape[0] else hidden.index_select(0, torch.tensor(rows, device=self.device))
        return self.model.compute_logits(sel).float()
