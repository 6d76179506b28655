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

Default limits, and why (the tail under saturation). ``max_num_seqs`` defaults to what the KV pool
holds at 256 tokens per sequence, at most 256
(:meth:`~own_engine.config.EngineConfig.resolve_max_num_seqs`): with the former fixed 32, 16 of 48
simultaneous chat requests queued behind whole generations while KV was free, and that queueing
was the TTFT p99 (3.2x vLLM-CPU's). Admission is then bounded by free blocks, and a pool that runs
out preempts the last admitted sequence (recompute) rather than starving the head of the queue.
``max_num_batched_tokens`` defaults to 512: every step carries all running decodes plus at most
one budget of prefill, so a running sequence's inter-token latency is bounded by one 512-token
step (about 1 s for the default model on one CPU core), while the TTFT of the last of N
simultaneous requests is the total prompt work / prefill rate, inflated by the decodes riding in
each step (N / 512 of a step's rows: under 10 % at N = 48). vLLM-CPU's server default is 2048
(fewer, 4x longer stalls for the same TTFT p99 within a few percent). ``--parity strict`` sets
both to the compared engines' values.

``batching="static"`` (ablation) admits a new batch only when no sequence is running, so a batch
runs until all its members finish. Without chunked prefill a prompt is scheduled whole (a lone
prompt may exceed the budget, so nothing can starve).

After the model ran, :meth:`Scheduler.update_from_output` applies the step's
:class:`~own_engine.outputs.SampledTokens` (vLLM's ``update_from_output``, nano-vllm's
``postprocess``): advance ``num_computed_tokens``, fork ``n > 1`` children off their parent's
first sample, append tokens, check EOS / ``stop_token_ids`` / ``max_tokens`` / ``max_model_len``,
finish sequences and free their blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from own_engine.block_manager import BlockManager
from own_engine.outputs import Fork, RequestOutput, SampledTokens, TokenLogprobs
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
    """Waiting/running queues over a :class:`BlockManager`; owns every sequence from :meth:`add`
    to its finish.

    ``num_speculative_tokens``: lookahead slots reserved for a decoding sequence (0 = no
    speculation). ``eos_token_ids``: ids that finish a sequence with ``"stop"`` unless its
    params say ``ignore_eos``. ``requests``: request id → its sequences (parent first, then the
    ``n > 1`` children in fork order), while any of them is unfinished. Counter: ``num_preemptions``.
    """

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, enable_chunked_prefill: bool = True, batching: str = "continuous",
                 num_speculative_tokens: int = 0, eos_token_ids: frozenset[int] | set[int] = frozenset()) -> None:
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
        self.static = batching == "static"
        self.num_speculative_tokens = num_speculative_tokens
        self.eos_token_ids = frozenset(eos_token_ids)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.requests: dict[str, list[Sequence]] = {}
        self.num_preemptions = 0

    # ------------------------------------------------------------------ queues
    def add(self, seq: Sequence) -> None:
        """Register a new sequence under its request id and queue it (FCFS)."""
        self.requests.setdefault(seq.request_id, []).append(seq)
        self._enqueue(seq)

    def _enqueue(self, seq: Sequence) -> None:
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
        seqs = self.requests.get(seq.request_id)
        if seqs is not None and all(s.is_finished for s in seqs):
            del self.requests[seq.request_id]

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
                self.bm.record_prefix_lookup(len(seq), num_cached)
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            if num_new > 0:
                out.scheduled.append(ScheduledSeq(seq, num_new, 0))
                budget -= num_new
        out.blocks_to_copy = self.bm.pop_copies()
        out.num_batched_tokens = self.max_num_batched_tokens - budget
        return out

    # ------------------------------------------------------------------ after the model ran
    def update_from_output(self, plan: SchedulerOutput, sampled: SampledTokens) -> list[RequestOutput]:
        """Apply one step's sampling result to the sequences ``plan`` scheduled.

        Per scheduled sequence, in plan order: ``num_computed_tokens`` advances by the tokens the
        forward computed (plus accepted drafts); a sequence that sampled nothing (a prefill chunk)
        only offers its full blocks to the prefix cache; one that sampled forks its ``n > 1``
        children (sharing its blocks), then it and each child append their tokens (with their
        logprobs, when asked for) and are checked for a stop. Returns a :class:`RequestOutput` per
        sequence that got tokens (parent before its children).
        """
        outputs: list[RequestOutput] = []
        for s in plan.scheduled:
            seq = s.seq
            toks = sampled.token_ids.get(seq.seq_id)
            seq.num_computed_tokens = s.start + s.num_new_tokens + sampled.num_accepted.get(seq.seq_id, 0)
            if toks is None:
                self.bm.cache_full_blocks(seq)
                continue
            # the draft model's K/V is only valid up to what the target has verified
            seq.num_draft_computed = min(seq.num_draft_computed, seq.num_computed_tokens)
            appends = [(seq, toks, sampled.logprobs.get(seq.seq_id))]
            appends += [(self._fork(seq, f), [f.token_id], None if f.logprobs is None else [f.logprobs])
                        for f in sampled.forks.get(seq.seq_id, ())]
            seq.pending_forks = 0
            outputs.extend(self._append(target, new, lps) for target, new, lps in appends)
        return outputs

    def _fork(self, parent: Sequence, fork: Fork) -> Sequence:
        """A running child sharing ``parent``'s computed blocks, or (naive KV without a free
        reservation) a waiting child that recomputes its prompt later."""
        seqs = self.requests[parent.request_id]
        child = parent.fork(index=len(seqs), generator=fork.generator, seq_id=fork.seq_id)
        if self.bm.fork(parent, child):
            child.status = SequenceStatus.RUNNING
            self.running.append(child)
        else:
            child.num_computed_tokens = child.num_draft_computed = child.num_registered_blocks = 0
            self._enqueue(child)
        seqs.append(child)
        return child

    def _append(self, seq: Sequence, toks: list[int], logprobs: list[TokenLogprobs] | None = None) -> RequestOutput:
        """Append sampled tokens up to the first stop: EOS (unless ``ignore_eos``) or a
        ``stop_token_ids`` entry → ``"stop"`` (the token is kept); ``max_tokens`` or
        ``max_model_len`` reached → ``"length"``. A stopped sequence is finished (blocks freed).
        ``logprobs`` (one per ``toks`` entry, or None) are cut to the tokens appended."""
        p = seq.sampling_params
        stop_ids = set(p.stop_token_ids or ())
        emitted: list[int] = []
        reason = None
        for tok in toks:
            seq.token_ids.append(tok)
            emitted.append(tok)
            if (not p.ignore_eos and tok in self.eos_token_ids) or tok in stop_ids:
                reason = "stop"
            elif seq.num_output_tokens >= p.max_tokens or len(seq) >= self.max_model_len:
                reason = "length"
            if reason:
                break
        self.bm.cache_full_blocks(seq)
        if reason:
            self.finish(seq, reason)
        return RequestOutput(seq.request_id, emitted, reason is not None, reason, seq.num_prompt_tokens,
                             seq.num_cached_tokens, seq.num_output_tokens, seq.index,
                             None if logprobs is None else logprobs[:len(emitted)])
