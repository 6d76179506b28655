"""CUDA graphs for pure-decode steps of the reference engine (issue 14: the eager CUDA path is
launch-bound, ~450 kernel launches and their Python dispatch per SmolLM2-135M step).

What is captured: one graph per batch size ``B`` of :func:`capture_sizes` running
``LlamaModel.forward`` + the LM head + ``.float()`` over static device buffers (vLLM's names):
``input_ids`` [B], ``positions`` [B], ``slot_mapping`` [B], ``seq_idx`` [B] (= ``arange(B)``, constant)
and ``block_tables`` [B, max_blocks_per_seq], all int64, slices of one set of ``max(sizes)``-row
buffers, and the output logits [B, vocab] fp32 (the graph's own). The Triton paged-attention kernel
(:mod:`own_engine.triton_attention`) is what makes this possible: its grid is ``(T, H)`` and it reads
each query's length from ``positions`` on the device, so its launch depends only on tensor addresses
and ``T`` — a replay with new buffer *contents* is a correct new step. The PyTorch attention path
builds masks sized by the context on the CPU and is never captured.

Which steps replay a graph (:func:`eligible`): every item has one token, ``start > 0`` (its context
is in the cache) and ``num_logits == 1``, the batch fits the largest captured size, and every block
table fits ``max_blocks_per_seq`` and covers its position; anything else (prefill, chunks,
speculative verification, forks' first step) runs eagerly. A batch of ``n`` runs in the smallest
captured ``B >= n`` (:func:`bucket_for`); the ``B - n`` padded rows (:func:`fill_decode_inputs`)
have token 0 at position 0, write their K/V into a scratch slot (the first slot of the scratch
block: the extra KV block :class:`~own_engine.model_runner.ModelRunner` allocates beyond the
``num_blocks`` the BlockManager hands out) and read only that block, so they touch no sequence's
cache (all padded rows compute the same K/V, so their duplicate writes to one slot agree).

Per replay the CPU only fills pinned staging tensors and issues four ``copy_`` calls (no
:func:`~own_engine.attention.build_metadata`), then ``graph.replay()``; the returned logits are a
clone (graphs share one memory pool, so the next replay may overwrite a graph's output).

When: all sizes are captured at engine start, largest first, into one shared memory pool (lazy
capture mid-serving is not safe here: the capture check below writes synthetic K/V into pool blocks,
which at start hold nothing anyone reads). Capture time is logged. Safety by construction: after
capturing size ``B`` the graph is replayed on a synthetic decode batch of ``B - 1`` rows (padded; 1
for ``B = 1``) on disjoint real blocks and its logits compared with the eager forward of the same
batch: max abs difference <= :data:`TOLERANCE` (1e-3 fp32, 5e-2 half) x max(1, max |eager logit|).
A mismatch or any exception during capture disables graphs for the engine (one warning line; eager
from then on); so does an exception during a later replay.

Nothing here touches CUDA at import time; on a CPU-only machine the module imports and its pure
functions work (the engine never builds :class:`DecodeCudaGraphs` there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import torch

from own_engine.attention import AttentionMetadata
from own_engine.batch import BatchItem

logger = logging.getLogger("own_engine")

#: graph-vs-eager logits tolerance of the capture check, by weight dtype (scaled by max(1, max |logit|))
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


def capture_sizes(sizes: Sequence[int], cap: int) -> tuple[int, ...]:
    """The batch sizes to capture: ``sizes`` (sorted, deduplicated) up to ``cap`` (the engine's
    effective ``max_num_seqs``, at most its KV block count), plus ``cap`` itself when ``sizes``
    extends beyond it, so every decode batch the scheduler can form has a bucket. E.g. sizes
    (1, 2, 4, ..., 256), cap 22 → (1, 2, 4, 8, 16, 22). Raises ``ValueError`` for ``cap < 1``."""
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    want = sorted({int(s) for s in sizes})
    out = [s for s in want if s <= cap]
    if want and want[-1] > cap and cap not in out:
        out.append(cap)
    return tuple(out)


def bucket_for(n: int, sizes: Sequence[int]) -> int | None:
    """The smallest captured size ``>= n`` (``sizes`` ascending), or None when ``n`` exceeds them all."""
    for s in sizes:
        if s >= n:
            return s
    return None


def is_pure_decode(items: Sequence) -> bool:
    """True when every item (:class:`~own_engine.batch.BatchItem`) decodes one token over
    cached context and wants its logits: ``len(token_ids) == 1``, ``start > 0``, ``num_logits == 1``."""
    return bool(items) and all(len(it.token_ids) == 1 and it.start > 0 and it.num_logits == 1 for it in items)


def eligible(items: Sequence, max_batch: int, max_blocks_per_seq: int, block_size: int) -> bool:
    """Whether a step replays a decode graph: :func:`is_pure_decode`, at most ``max_batch`` items,
    every block table at most ``max_blocks_per_seq`` long and covering its position (a short table
    goes to the eager path, which raises the ``ValueError``)."""
    if not is_pure_decode(items) or len(items) > max_batch:
        return False
    return all(len(it.block_table) <= max_blocks_per_seq and len(it.block_table) * block_size > it.start
               for it in items)


def fill_decode_inputs(items: Sequence, B: int, block_size: int, scratch_block: int, input_ids: torch.Tensor,
                       positions: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor) -> None:
    """Write the first ``B`` rows of the (CPU, int64) static-input tensors for the decode ``items``
    (``n = len(items) <= B``; each of :func:`eligible` shape).

    Row ``i < n``: ``input_ids`` = its token, ``positions`` = ``start``, ``slot_mapping`` =
    ``table[start // block_size] * block_size + start % block_size``, ``block_tables`` row = its table
    then ``scratch_block`` to the end (never read: the kernel reads ``start // block_size + 1``
    entries). Padded rows ``n <= i < B``: token 0, position 0, slot ``scratch_block * block_size``,
    block-table row all ``scratch_block``. Shapes: ``input_ids``, ``positions``, ``slot_mapping``
    [>= B]; ``block_tables`` [>= B, max_blocks_per_seq]. Raises ``ValueError`` when ``n > B``.
    """
    n = len(items)
    if n > B:
        raise ValueError(f"{n} items do not fit a graph of batch size {B}")
    ids, pos, slots, bt = (t.numpy() for t in (input_ids, positions, slot_mapping, block_tables))
    ids[:B] = 0
    pos[:B] = 0
    slots[:B] = scratch_block * block_size
    bt[:B] = scratch_block
    for i, it in enumerate(items):
        s, table = it.start, it.block_table
        ids[i] = it.token_ids[0]
        pos[i] = s
        slots[i] = table[s // block_size] * block_size + s % block_size
        bt[i, :len(table)] = table


def synthetic_decode_batch(n: int, num_blocks: int, block_size: int, max_blocks_per_seq: int, vocab: int) -> list:
    """``n`` decode items on disjoint real blocks (ragged positions ``>= 1``, distinct write slots)
    for the capture check; needs ``n <= num_blocks``. Raises ``ValueError`` otherwise."""
    if n > num_blocks:
        raise ValueError(f"a synthetic batch of {n} needs {n} KV blocks, the pool has {num_blocks}")
    m = max(1, min(4, max_blocks_per_seq, num_blocks // n))
    span = m * block_size
    items = []
    for i in range(n):
        start = 1 + (i * 37) % (span - 1) if span > 1 else 0
        items.append(BatchItem([(i * 7919 + 3) % vocab], start, [i * m + j for j in range(m)], 1))
    return items


class DecodeCudaGraphs:
    """Captured decode graphs of one :class:`~own_engine.model_runner.ModelRunner` (CUDA only).

    ``sizes``: ascending captured batch sizes; ``enabled``: False until :meth:`capture` succeeds and
    after any failure (``note`` says why); ``attention_fn``: the attention function the graphs hold
    (a runner whose model's ``attention_fn`` was swapped runs eagerly); ``num_replays``: decode steps
    served from graphs; ``capture_s``: seconds the capture and its check took.
    """

    def __init__(self, model, kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int,
                 scratch_block: int, max_blocks_per_seq: int, sizes: Sequence[int], device: torch.device) -> None:
        if not sizes:
            raise ValueError("no batch sizes to capture")
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.max_blocks_per_seq = max_blocks_per_seq
        self.sizes = tuple(sorted(sizes))
        self.device = device
        self.attention_fn = model.attention_fn
        self.enabled = False
        self.note: str | None = "not captured yet"
        self.num_replays = 0
        self.capture_s = 0.0
        mb, nb = self.sizes[-1], max_blocks_per_seq
        i64 = dict(dtype=torch.int64, device=device)
        self.input_ids = torch.zeros(mb, **i64)
        self.positions = torch.zeros(mb, **i64)
        self.slot_mapping = torch.full((mb,), scratch_block * block_size, **i64)
        self.seq_idx = torch.arange(mb, **i64)
        self.block_tables = torch.full((mb, nb), scratch_block, **i64)
        pin = device.type == "cuda"
        self._host = [torch.zeros(t.shape, dtype=torch.int64, pin_memory=pin)
                      for t in (self.input_ids, self.positions, self.slot_mapping, self.block_tables)]
        self._copied: torch.cuda.Event | None = None  # the last staging copy (host buffers reusable after it)
        self._meta = {B: AttentionMetadata(slot_mapping=self.slot_mapping[:B], num_tokens=B,
                                           positions=self.positions[:B], seq_idx=self.seq_idx[:B],
                                           block_tables=self.block_tables[:B]) for B in self.sizes}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._out: dict[int, torch.Tensor] = {}

    # ------------------------------------------------------------------ replay
    def _stage(self, items: Sequence, B: int) -> None:
        """Fill the pinned host buffers for ``items`` in bucket ``B`` and copy rows ``[:B]`` to the device."""
        if self._copied is not None:
            self._copied.synchronize()  # the previous step's copy has read the host buffers
        h_ids, h_pos, h_slot, h_bt = self._host
        fill_decode_inputs(items, B, self.block_size, self.scratch_block, h_ids, h_pos, h_slot, h_bt)
        for dst, src in zip((self.input_ids, self.positions, self.slot_mapping, self.block_tables), self._host):
            dst[:B].copy_(src[:B], non_blocking=True)
        if self.device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record()

    def _forward(self, B: int) -> torch.Tensor:
        """The captured computation: logits [B, vocab] fp32 from the static buffers."""
        hidden = self.model.forward(self.input_ids[:B], self.positions[:B], self._meta[B], self.kv_caches)
        return self.model.compute_logits(hidden).float()

    def _replay(self, items: Sequence, B: int) -> torch.Tensor:
        self._stage(items, B)
        self._graphs[B].replay()
        self.num_replays += 1
        return self._out[B][:len(items)].clone()

    def run(self, items: Sequence) -> torch.Tensor | None:
        """Logits [len(items), vocab] fp32 from a graph replay, or None when the step is not
        :func:`eligible` (or graphs are off): the caller then runs it eagerly. An exception during a
        replay disables graphs (one warning) and returns None."""
        if not self.enabled or not eligible(items, self.sizes[-1], self.max_blocks_per_seq, self.block_size):
            return None
        B = bucket_for(len(items), self.sizes)
        try:
            return self._replay(items, B)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - eager is always right
            self.disable(f"CUDA graph replay failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
            return None

    def disable(self, reason: str) -> None:
        """Turn graphs off for good (eager from now on), logging ``reason`` once."""
        self.enabled = False
        self.note = reason
        self._graphs.clear()
        self._out.clear()
        logger.warning("CUDA graphs disabled, running eagerly: %s", reason)

    # ------------------------------------------------------------------ capture
    @torch.inference_mode()
    def capture(self, eager_run: Callable[[list], torch.Tensor], num_blocks: int) -> str | None:
        """Capture every size (largest first, one shared pool), each followed by its check against
        ``eager_run`` (the runner's eager path) on a synthetic batch over blocks ``< num_blocks``.

        Returns None and sets ``enabled`` when all pass; else disables graphs and returns the
        one-line reason (a capture exception or the first mismatch).
        """
        t0 = time.perf_counter()
        dev = self.device
        tol = TOLERANCE.get(self.model.embed.dtype, 5e-2)
        pool = None
        vocab = self.model.cfg.vocab_size
        try:
            for B in reversed(self.sizes):
                n = B - 1 if B > 1 else 1
                items = synthetic_decode_batch(n, num_blocks, self.block_size, self.max_blocks_per_seq, vocab)
                self._stage(items, B)
                side = torch.cuda.Stream(device=dev)
                side.wait_stream(torch.cuda.current_stream(dev))
                with torch.cuda.stream(side):  # warm-up: Triton compiles, cuBLAS picks its kernels
                    for _ in range(2):
                        self._forward(B)
                torch.cuda.current_stream(dev).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = self._forward(B)
                if pool is None:
                    pool = graph.pool()
                self._graphs[B], self._out[B] = graph, out
                ref = eager_run(items)
                got = self._replay(items, B)
                torch.cuda.synchronize(dev)
                err = float((got - ref).abs().max())
                limit = tol * max(1.0, float(ref.abs().max()))
                if not err <= limit:  # NaN fails too
                    reason = (f"graph of batch size {B} disagrees with the eager forward: max abs logits "
                              f"difference {err:.3g} > {limit:.3g}")
                    self.disable(reason)
                    return reason
        except Exception as exc:  # noqa: BLE001 - any capture problem means eager
            reason = f"CUDA graph capture failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            self.disable(reason)
            return reason
        self.num_replays = 0
        self.capture_s = time.perf_counter() - t0
        self.enabled = True
        self.note = None
        logger.info("captured CUDA graphs for decode batch sizes %s in %.2f s", list(self.sizes), self.capture_s)
        return None
