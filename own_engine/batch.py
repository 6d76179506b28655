"""What the engine hands the model runner for one step: a :class:`BatchItem` per sequence.

Its own module (no torch) because the model runner and its CUDA-graph replay
(:mod:`own_engine.cuda_graphs`, which builds synthetic decode batches) both use it, and the
runner imports the graphs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BatchItem:
    """Work for one sequence: compute ``token_ids`` at positions ``start..start+len-1`` (the cache
    already holds positions ``< start``) and return logits for the last ``num_logits`` of them."""

    token_ids: list[int]
    start: int
    block_table: list[int]
    num_logits: int
