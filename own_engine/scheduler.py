"""Iteration-level scheduler: continuous batching with chunked prefill and preemption by recompute.

Policy (vLLM v1's unified scheduler; Orca, Yu et al. 2022 §3 for iteration-level scheduling;
Sarathi-Serve, Agrawal et al. 2024 for chunked prefill mixed with decodes):

1. Running sequences first, in admission order: each gets its uncomputed tokens (1 for a decode,
   a chunk for an unfinished prefill) plus ``num_lookahead`` slots for speculative tokens, within
   the per-step token budget ``max_num_batched_tokens``. When the block pool is exhausted the
   lowest-priority running sequence (the last admitted) is preempted: its blocks are freed and it
   goes back to the head of the waiting queue, to be recomputed later (vLLM's recompute mode).
2. Then waiting sequences in FCFS order (only in a step without preemption), up to
   ``max_num_seqs`` running, after a prefix-cache lookup; the head blocks the rest (no skipping).

``batching="static"`` (ablation) admits a new batch only when no sequence is running, so a batch
runs until all its members finish. Without chunked prefill a prompt is scheduled whole (a lone
prompt may exceed the budget, so nothing can starve).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from own_engine.block_manager import BlockManager
from own_engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSeq:
    """One sequence's work in a step: ``num_new_tokens`` of its ``token_ids`` starting at
    ``num_computed_tokens``, plus ``num_lookahead`` reserved slots for speculative tokens."""

    seq: Sequence
    num_new_tokens: int
    num_lookahead: int = 0
    samples: bool = field(init=False)  # this step reaches the end of the sequence: a token is sampled
    start: int = field(init=False)  # seq.num_computed_tokens when scheduled

    def __post_init__(self) -> None:
        self.start = self.seq.num_computed_tokens
        self.samples = self.start + self.num_new_tokens == len(self.seq)


@dataclass
class SchedulerOutput:
    """A step's plan: scheduled sequences, KV block copies to apply first, sequences preempted."""

    scheduled: list[ScheduledSeq] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    num_batched_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Waiting/running queues over a :class:`BlockManager`.

    ``num_speculative_tokens``: lookahead slots reserved for a decoding sequence (0 = no
    speculation). Counter: ``num_preemptions``.
    """

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, enable_chunked_prefill: bool = True, batching: str = "continuous",
                 num_speculative_tokens: int = 0) -> None:
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
        self.static = batching == "static"
        self.num_speculative_tokens = num_speculative_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    # ------------------------------------------------------------------ queues
    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark ``seq`` finished with ``reason`` and free its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.bm.free(seq)

    def abort(self, request_id: str) -> list[Sequence]:
        """Finish every sequence of ``request_id`` with reason ``"abort"``; unknown ids: no-op."""
        seqs = [s for s in list(self.running) + list(self.waiting) if s.request_id == request_id]
        for s in seqs:
            self.finish(s, "abort")
        return seqs

    def _preempt(self, seq: Sequence) -> None:
        self.bm.free(seq)
        seq.num_computed_tokens = 0
        seq.num_draft_computed = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _lookahead(self, seq: Sequence) -> int:
        if not self.num_speculative_tokens or seq.num_uncomputed_tokens != 1 or seq.num_output_tokens == 0:
            return 0
        remaining_out = seq.sampling_params.max_tokens - seq.num_output_tokens - 1
        return max(0, min(self.num_speculative_tokens, self.max_model_len - len(seq), remaining_out))

    # ------------------------------------------------------------------ the step
    def schedule(self) -> SchedulerOutput:
        """Plan one step (see the module docstring for the policy)."""
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        batch_was_empty = not self.running
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            num_new = seq.num_uncomputed_tokens
            lookahead = self._lookahead(seq)
            if num_new > budget:
                if not self.enable_chunked_prefill and out.scheduled:
                    i += 1
                    continue
                if self.enable_chunked_prefill:
                    num_new = budget
            lookahead = max(0, min(lookahead, budget - num_new))
            while not self.bm.allocate_slots(seq, num_new + lookahead):
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            else:
                out.scheduled.append(ScheduledSeq(seq, num_new, lookahead))
                budget -= num_new + lookahead
                i += 1
                continue
            break  # seq itself was preempted: it was the last one

        admit = not out.preempted and (not self.static or batch_was_empty)
        while admit and self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            computed, num_cached = self.bm.get_computed_blocks(seq)
            num_new = len(seq) - num_cached
            if num_new > budget:
                if self.enable_chunked_prefill:
                    num_new = max(budget, 0)
                elif out.scheduled:
                    if not self.static:
                        break
                    num_new = 0  # static: admitted now, prefilled by a later step of this batch
            if num_new <= 0 and not self.static:
                break
            if not self.bm.allocate_slots(seq, num_new, computed):
                break
            if not seq.prefix_cache_counted:
                seq.prefix_cache_counted = True
                seq.num_cached_tokens = num_cached
                self.bm.prefix_cache_queries += len(seq)
                self.bm.prefix_cache_hits += num_cached
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            if num_new > 0:
                out.scheduled.append(ScheduledSeq(seq, num_new, 0))
                budget -= num_new
        out.blocks_to_copy = self.bm.pop_copies()
        out.num_batched_tokens = self.max_num_batched_tokens - budget
        return out
