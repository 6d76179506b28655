"""ModelRunner: owns the model and its KV cache, turns a step's work into one batched forward.

Prepares ``input_ids``, ``positions``, ``slot_mapping``, block tables and context lengths (vLLM's
names) for a flattened varlen batch, runs the model once, and returns logits only for the rows
that need them (the LM head is ~20% of the default model's weights, so it is applied to the
sampled positions only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from own_engine import hugepages
from own_engine.attention import build_metadata, paged_attention
from own_engine.batch import BatchItem
from own_engine.model import LlamaModel

logger = logging.getLogger("own_engine")


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
            raise ConfigError(f"attention_backend='native': {reason}; use 'auto' or 'torch'")
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

    KV cache: per layer K and V tensors [num_blocks (+1), block_size, num_kv_heads, head_dim] in the
    model's weight dtype; on CPU on huge pages where Linux grants the advice (:attr:`kv_huge_pages`,
    :mod:`own_engine.hugepages`). ``scratch_block=True`` allocates one block more than ``num_blocks``
    (index ``num_blocks``, :attr:`scratch_block`) that no BlockManager of ``num_blocks`` blocks ever
    hands out: padded rows of CUDA-graph decode batches write there (:mod:`own_engine.cuda_graphs`).
    ``graphs``: the captured decode graphs (:meth:`enable_cuda_graphs`), or None (always eager).
    """

    def __init__(self, model: LlamaModel, num_blocks: int, block_size: int, device: torch.device,
                 scratch_block: bool = False) -> None:
        c = model.cfg
        self.model = model
        self.block_size = block_size
        self.device = device
        self.num_blocks = num_blocks
        self.scratch_block: int | None = num_blocks if scratch_block else None
        dtype = model.embed.dtype
        shape = (num_blocks + (1 if scratch_block else 0), block_size, c.num_kv_heads, c.head_dim)
        # on CPU, 2 MiB pages: block-table reads scatter over the whole cache (own_engine/hugepages.py)
        pairs = [(hugepages.zeros(shape, dtype, device), hugepages.zeros(shape, dtype, device))
                 for _ in range(model.num_layers)]
        self.kv_caches = [(k, v) for (k, _), (v, _) in pairs]
        self.kv_huge_pages = all(a and b for (_, a), (_, b) in pairs)
        self.graphs = None  # own_engine.cuda_graphs.DecodeCudaGraphs once enable_cuda_graphs succeeded
        self._triton_ok: dict[Callable, bool] = {}

    def _triton_takes(self, attention_fn: Callable) -> bool:
        """Whether ``attention_fn`` is the Triton path and its kernel runs on this runner's caches
        (else :func:`~own_engine.triton_attention.triton_paged_attention` falls back to the PyTorch
        path, which needs the padded decode-group metadata)."""
        if getattr(attention_fn, "__module__", None) != "own_engine.triton_attention":
            return False
        if attention_fn not in self._triton_ok:
            from own_engine.triton_attention import kernel_supports

            k, v = self.kv_caches[0]
            q = torch.empty(1, self.model.cfg.num_heads, self.model.cfg.head_dim, dtype=k.dtype, device=k.device)
            self._triton_ok[attention_fn] = kernel_supports(q, k, v)
        return self._triton_ok[attention_fn]

    def enable_cuda_graphs(self, sizes: tuple[int, ...], max_blocks_per_seq: int) -> str | None:
        """Capture decode graphs for the batch sizes ``sizes`` (CUDA, Triton attention, a runner
        built with ``scratch_block=True``); block tables up to ``max_blocks_per_seq`` blocks.
        Call before any request runs (the capture check writes synthetic K/V into free blocks).

        Returns None when graphs are active, else a one-line reason they are not (then every step
        runs eagerly, as without graphs).
        """
        if self.device.type != "cuda":
            return f"CUDA graphs need a CUDA device, got {self.device}"
        if self.scratch_block is None:
            return "CUDA graphs need a runner built with scratch_block=True"
        if not self._triton_takes(self.model.attention_fn):
            return ("CUDA graphs need the Triton attention kernel (the PyTorch path sizes its masks on the CPU); "
                    "this engine runs attention on the PyTorch path")
        if not sizes:
            return "no CUDA graph batch size fits max_num_seqs"
        from own_engine.cuda_graphs import DecodeCudaGraphs

        try:
            graphs = DecodeCudaGraphs(self.model, self.kv_caches, self.block_size, self.scratch_block,
                                      max_blocks_per_seq, sizes, self.device)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory for the static buffers
            reason = f"CUDA graph buffers failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            logger.warning("CUDA graphs disabled, running eagerly: %s", reason)
            return reason
        self.graphs = graphs
        return graphs.capture(self._run_eager, self.num_blocks)

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
        """One forward over all ``items``; logits [sum(num_logits), vocab] fp32 in item order.

        Pure-decode steps replay a captured CUDA graph when :attr:`graphs` is active and the model
        still runs the attention function the graphs were captured with; every other step runs
        eagerly. Raises ``ValueError`` for an empty batch or a block table too short for its tokens.
        """
        g = self.graphs
        if g is not None and g.enabled and self.model.attention_fn is g.attention_fn:
            out = g.run(items)
            if out is not None:
                return out
        return self._run_eager(items)

    @torch.inference_mode()
    def _run_eager(self, items: list[BatchItem]) -> torch.Tensor:
        """:meth:`run` without CUDA graphs (builds the step's metadata on the CPU)."""
        if not items:
            raise ValueError("empty batch")
        c = self.model.cfg
        q_lens = [len(it.token_ids) for it in items]
        ctx = [it.start + n for it, n in zip(items, q_lens)]
        fn = self.model.attention_fn
        meta = build_metadata(q_lens, ctx, [it.block_table for it in items], self.block_size,
                              c.num_heads, c.num_kv_heads, self.device,
                              torch_decode=fn is paged_attention or (
                                  getattr(fn, "__module__", None) == "own_engine.triton_attention"
                                  and not self._triton_takes(fn)))
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
