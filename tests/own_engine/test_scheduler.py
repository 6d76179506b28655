"""Scheduler policy: continuous batching, chunked prefill, budgets, preemption (no model needed)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from own_engine.block_manager import BlockManager
from own_engine.outputs import Fork, SampledTokens
from own_engine.sampling_params import SamplingParams
from own_engine.scheduler import Scheduler
from own_engine.sequence import Sequence, SequenceStatus


def make(sched, n_prompt, max_tokens, seq_id, base=0):
    seq = Sequence(f"r{seq_id}", [base + i for i in range(n_prompt)], SamplingParams(max_tokens=max_tokens),
                   seq_id=seq_id)
    sched.add(seq)
    return seq


def fake_step(sched):
    """Execute a plan like the engine does, with token id 7 as every sample."""
    out = sched.schedule()
    for s in out.scheduled:
        seq = s.seq
        samples = s.samples
        seq.num_computed_tokens += s.num_new_tokens
        if samples:
            seq.token_ids.append(7)
        sched.bm.cache_full_blocks(seq)
        if samples and seq.num_output_tokens >= seq.sampling_params.max_tokens:
            sched.finish(seq, "length")
    return out


def new_sched(num_blocks=64, bs=4, max_num_seqs=8, budget=16, chunked=True, batching="continuous", spec=0,
              prefix=True):
    bm = BlockManager(num_blocks, bs, enable_prefix_caching=prefix)
    return Scheduler(bm, max_num_seqs, budget, max_model_len=256, enable_chunked_prefill=chunked,
                     batching=batching, num_speculative_tokens=spec)


def test_chunked_prefill_mixes_with_decodes_running_first():
    sched = new_sched(budget=8)
    a = make(sched, 6, 10, 0)
    out = fake_step(sched)
    assert [(s.seq, s.num_new_tokens) for s in out.scheduled] == [(a, 6)]
    b = make(sched, 20, 10, 1, base=100)
    out = fake_step(sched)
    # a decodes first (1 token), then b gets the rest of the budget as a prefill chunk
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 1), (1, 7)]
    assert not out.scheduled[1].samples
    out = fake_step(sched)
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 1), (1, 7)]
    out = fake_step(sched)
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 1), (1, 6)]
    assert out.scheduled[1].samples and b.num_output_tokens == 1
    assert out.num_batched_tokens == 7


def test_no_chunking_schedules_whole_prompts():
    sched = new_sched(budget=8, chunked=False)
    make(sched, 6, 10, 0)
    fake_step(sched)
    make(sched, 20, 10, 1, base=100)
    out = fake_step(sched)
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 1)]  # b does not fit
    sched2 = new_sched(budget=8, chunked=False)
    make(sched2, 20, 10, 0)
    out = fake_step(sched2)
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 20)]  # a lone prompt may exceed


def test_max_num_seqs_and_fcfs():
    sched = new_sched(max_num_seqs=2, budget=100)
    seqs = [make(sched, 3, 2, i, base=10 * i) for i in range(4)]
    out = fake_step(sched)
    assert [s.seq for s in out.scheduled] == seqs[:2]
    out = fake_step(sched)  # both finish (max_tokens=2) in this step
    assert [s.seq for s in out.scheduled] == seqs[:2]
    assert seqs[0].is_finished and seqs[1].is_finished
    out = fake_step(sched)
    assert [s.seq for s in out.scheduled] == seqs[2:]


def test_static_batching_waits_for_the_whole_batch():
    sched = new_sched(max_num_seqs=4, budget=100, batching="static")
    a = make(sched, 3, 1, 0)
    b = make(sched, 3, 5, 1, base=50)
    fake_step(sched)
    assert a.is_finished and not b.is_finished
    c = make(sched, 3, 2, 2, base=80)
    for _ in range(4):
        out = fake_step(sched)
        assert c not in [s.seq for s in out.scheduled]
    assert b.is_finished
    out = fake_step(sched)
    assert [s.seq for s in out.scheduled] == [c]
    cont = new_sched(max_num_seqs=4, budget=100)
    make(cont, 3, 5, 0)
    fake_step(cont)
    d = make(cont, 3, 2, 1, base=50)
    out = fake_step(cont)
    assert d in [s.seq for s in out.scheduled]


def test_preemption_by_recompute_when_blocks_run_out():
    # 6 blocks of 4 slots; two sequences of 8 prompt tokens need 2 blocks each, then grow
    sched = new_sched(num_blocks=6, bs=4, budget=64, prefix=False)
    a = make(sched, 8, 8, 0)
    b = make(sched, 8, 8, 1, base=100)
    fake_step(sched)
    assert sched.bm.num_used_blocks == 4
    preempted = []
    while sched.has_unfinished():
        out = fake_step(sched)
        preempted += out.preempted
        assert sched.bm.num_free_blocks + sched.bm.num_used_blocks == 6
    assert preempted and preempted[0] is b  # the last admitted goes first
    assert sched.num_preemptions == len(preempted)
    assert a.output_token_ids == [7] * 8 and b.output_token_ids == [7] * 8
    assert sched.bm.num_free_blocks == 6


def test_lookahead_slots_for_speculation():
    sched = new_sched(budget=100, spec=3)
    a = make(sched, 5, 3, 0)
    out = fake_step(sched)
    assert out.scheduled[0].num_lookahead == 0  # prefill: no speculation
    out = fake_step(sched)
    # decode with 1 output so far, max_tokens 3: at most 3 - 1 - 1 = 1 speculative token
    assert out.scheduled[0].num_lookahead == 1
    assert len(a.block_table) == -(-(a.num_computed_tokens + 1) // 4)


def test_abort_frees_blocks_and_unknown_is_noop():
    sched = new_sched()
    a = make(sched, 9, 5, 0)
    make(sched, 9, 5, 1, base=40)
    fake_step(sched)
    assert sched.abort("nope") == []
    assert sched.abort("r0") == [a]
    assert a.finish_reason == "abort" and a.block_table == []
    sched.abort("r1")
    assert not sched.has_unfinished() and sched.bm.num_free_blocks == 64


def test_update_from_output_forks_appends_stops_and_forgets_finished_requests():
    sched = Scheduler(BlockManager(16, 4), 8, 64, max_model_len=256, eos_token_ids={99})
    parent = Sequence("r0", list(range(6)), SamplingParams(max_tokens=3, n=2), seq_id=0)
    parent.pending_forks = 1
    sched.add(parent)
    plan = sched.schedule()
    outs = sched.update_from_output(plan, SampledTokens(token_ids={0: [7]}, forks={0: [Fork(99, None, 5)]}))
    child = sched.requests["r0"][1]
    assert (child.seq_id, child.index, child.token_ids) == (5, 1, list(range(6)) + [99])
    # the child got the parent's computed blocks (shared), then stopped on EOS at once and freed them
    assert [(o.index, o.new_token_ids, o.finished, o.finish_reason) for o in outs] == [
        (0, [7], False, None), (1, [99], True, "stop")]
    assert child.block_table == [] and parent.num_computed_tokens == 6 and parent.pending_forks == 0
    assert sched.running == [parent] and "r0" in sched.requests
    # a verification step: 1 accepted draft + bonus; max_tokens=3 ends it ("length")
    plan = sched.schedule()
    outs = sched.update_from_output(plan, SampledTokens(token_ids={0: [8, 9]}, num_accepted={0: 1}))
    assert parent.num_computed_tokens == 8 and parent.output_token_ids == [7, 8, 9]
    assert [(o.new_token_ids, o.finish_reason) for o in outs] == [([8, 9], "length")]
    assert sched.requests == {} and not sched.has_unfinished() and sched.bm.num_free_blocks == 16


@settings(max_examples=60, deadline=None)
@given(
    reqs=st.lists(st.tuples(st.integers(1, 20), st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=12),
    aborts=st.lists(st.integers(0, 11), max_size=4),
    num_blocks=st.integers(14, 24),  # >= one sequence of 20 + 6 tokens (+2 lookahead) in blocks of 2
    budget=st.integers(1, 24),
    chunked=st.booleans(),
    batching=st.sampled_from(["continuous", "static"]),
    spec=st.sampled_from([0, 2]),
)
def test_random_workloads_finish_without_leaks(reqs, aborts, num_blocks, budget, chunked, batching, spec):
    sched = new_sched(num_blocks=num_blocks, bs=2, max_num_seqs=4, budget=budget, chunked=chunked,
                      batching=batching, spec=spec)
    seqs = [make(sched, n, m, i, base=b * 3) for i, (n, m, b) in enumerate(reqs)]
    steps = 0
    while sched.has_unfinished():
        steps += 1
        assert steps < 2000, "scheduler made no progress"
        fake_step(sched)
        if steps in (2, 5) and aborts:
            sched.abort(f"r{aborts.pop() % len(seqs)}")
        refs = Counter(b for s in sched.running for b in s.block_table)
        for blk in sched.bm.blocks:
            assert blk.ref_count == refs.get(blk.block_id, 0)
        assert len(sched.running) <= 4
        assert all(s.block_table == [] for s in sched.waiting)
    assert sched.bm.num_free_blocks == num_blocks
    for s in seqs:
        assert s.status is SequenceStatus.FINISHED
        if s.finish_reason == "length":
            assert s.num_output_tokens == s.sampling_params.max_tokens
