"""ModelRunner: owns the model and its KV cache, turns a step's work into one batched forward.

Prepares ``input_ids``, ``positions``, ``slot_mapping``, block tables and context lengths (vLLM's
names) for a flattened varlen batch, runs the model once, and returns logits only for the rows
that need them (the LM head is ~20% of the default model's weights, so it is applied to the
sampled positions only).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from own_engine.attention import build_metadata, paged_attention
from own_engine.model import LlamaModel


@dataclass
class BatchItem:
    """Work for one sequence: compute ``token_ids`` at positions ``start..start+len-1`` (the cache
    already holds positions ``< start``) and return logits for the last ``num_logits`` of them."""

    token_ids: list[int]
    start: int
    block_table: list[int]
    num_logits: int


def select_attention(device: torch.device):
    """The Triton paged-attention kernel on CUDA when importable, else the PyTorch path."""
    if device.type == "cuda":
        try:
            from own_engine.triton_attention import triton_paged_attention

            return triton_paged_attention
        except ImportError:  # no Triton: the PyTorch path also runs on CUDA
            return paged_attention
    return paged_attention


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
                              c.num_heads, c.num_kv_heads, self.device)
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
