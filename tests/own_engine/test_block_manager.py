"""Invariants of the paged KV block manager (own_engine.block_manager)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from own_engine.block_manager import BlockManager
from own_engine.sampling_params import SamplingParams
from own_engine.sequence import Sequence

BS = 4


def make_seq(tokens, seq_id=0):
    return Sequence("r", list(tokens), SamplingParams(max_tokens=100), seq_id=seq_id)


def check_refcounts(bm: BlockManager, seqs) -> None:
    """Every block's ref count equals the number of live block tables holding it."""
    refs = Counter(b for s in seqs for b in s.block_table)
    for blk in bm.blocks:
        assert blk.ref_count == refs.get(blk.block_id, 0), blk
        assert blk.ref_count >= 0
    assert bm.num_free_blocks + bm.num_used_blocks == bm.num_blocks
    assert bm.num_used_blocks == len(refs)


def prefill(bm, seq, computed=None):
    computed = computed if computed is not None else []
    n_cached = len(computed) * bm.block_size
    assert bm.allocate_slots(seq, len(seq) - n_cached, computed)
    seq.num_computed_tokens = len(seq)
    bm.cache_full_blocks(seq)


def append_token(bm, seq, tok):
    """Decode: write the K/V slot of the last token, then append a new token."""
    seq.token_ids.append(tok)
    assert bm.allocate_slots(seq, 1)
    seq.num_computed_tokens += 1
    bm.cache_full_blocks(seq)


@pytest.mark.parametrize("kv_len", range(0, 13))
def test_new_block_iff_len_multiple_of_block_size(kv_len):
    bm = BlockManager(num_blocks=8, block_size=BS)
    seq = make_seq(range(100, 100 + kv_len + 1))
    if kv_len:
        assert bm.allocate_slots(seq, kv_len)
        seq.num_computed_tokens = kv_len
    before = len(seq.block_table)
    free_before = bm.num_free_blocks
    assert bm.allocate_slots(seq, 1)  # slot for one appended token
    grew = len(seq.block_table) - before
    assert grew == (1 if kv_len % BS == 0 else 0)
    assert bm.num_free_blocks == free_before - grew
    assert len(seq.block_table) == -(-(kv_len + 1) // BS)


def test_free_plus_used_and_exact_refcounts_with_prefix_sharing():
    bm = BlockManager(num_blocks=10, block_size=BS)
    a = make_seq(range(10), 0)  # 2 full blocks + 2 tokens
    prefill(bm, a)
    assert bm.num_used_blocks == 3
    b = make_seq(list(range(8)) + [50, 51, 52], 1)
    hits, n_cached = bm.get_computed_blocks(b)
    assert hits == a.block_table[:2] and n_cached == 8
    prefill(bm, b, hits)
    assert [bm.blocks[x].ref_count for x in a.block_table] == [2, 2, 1]
    assert bm.num_used_blocks == 4  # 2 shared + 1 tail each
    check_refcounts(bm, [a, b])
    bm.free(a)
    check_refcounts(bm, [b])
    assert [bm.blocks[x].ref_count for x in b.block_table] == [1, 1, 1]
    bm.free(b)
    check_refcounts(bm, [])
    assert bm.num_free_blocks == 10
    # the freed full blocks stay cached: a third prompt hits them
    c = make_seq(list(range(8)) + [7], 2)
    hits, n_cached = bm.get_computed_blocks(c)
    assert n_cached == 8 and len(hits) == 2


def test_fully_cached_prompt_still_computes_last_token():
    bm = BlockManager(num_blocks=10, block_size=BS)
    a = make_seq(range(8), 0)  # exactly 2 full blocks
    prefill(bm, a)
    b = make_seq(range(8), 1)
    hits, n_cached = bm.get_computed_blocks(b)
    assert n_cached == 4 and hits == a.block_table[:1]  # at most len-1 tokens from the cache
    assert bm.allocate_slots(b, len(b) - n_cached, hits)
    assert b.num_computed_tokens == 4 and b.num_uncomputed_tokens == 4
    c = make_seq(range(9), 2)  # 2 full blocks + 1: both blocks hit, the last token is computed
    hits, n_cached = bm.get_computed_blocks(c)
    assert n_cached == 8
    assert bm.allocate_slots(c, 1, hits)
    assert c.num_uncomputed_tokens == 1


def test_hash_collision_is_a_miss():
    bm = BlockManager(num_blocks=10, block_size=BS)
    a = make_seq(range(9), 0)
    prefill(bm, a)
    b = make_seq(range(9), 1)
    bm._update_hashes(b, 2)
    # forge a collision: the cached block's stored tokens no longer match
    bm.blocks[a.block_table[1]].token_ids = (9, 9, 9, 9)
    hits, n = bm.get_computed_blocks(b)
    assert n == 4 and hits == a.block_table[:1]


def test_lru_eviction_keeps_recent_cached_blocks():
    bm = BlockManager(num_blocks=4, block_size=BS)
    a = make_seq(range(100, 105), 0)  # 1 full block + 1 token
    prefill(bm, a)
    a_full = a.block_table[0]
    bm.free(a)
    b = make_seq(range(200, 205), 1)
    prefill(bm, b)
    b_full = b.block_table[0]
    bm.free(b)
    # uncached tail blocks are reused before any cached block
    c = make_seq(range(300, 302), 2)
    prefill(bm, c)
    assert c.block_table[0] not in (a_full, b_full)
    assert a_full in bm.hash_to_block.values() and b_full in bm.hash_to_block.values()
    # needing 2 more blocks evicts the least recently freed cached block (a's) first
    d = make_seq(range(400, 406), 3)
    prefill(bm, d)
    assert a_full in d.block_table or b_full in d.block_table
    assert b_full in bm.hash_to_block.values()
    assert a_full not in bm.hash_to_block.values()
    check_refcounts(bm, [c, d])


def test_copy_on_write_only_for_shared_blocks():
    bm = BlockManager(num_blocks=10, block_size=BS)
    parent = make_seq(range(6), 0)  # 1 full + 2 in the partial block
    prefill(bm, parent)
    assert bm.pop_copies() == []
    child = parent.fork(1, seq_id=1)
    assert bm.fork(parent, child)
    assert child.block_table == parent.block_table
    assert [bm.blocks[b].ref_count for b in parent.block_table] == [2, 2]
    check_refcounts(bm, [parent, child])
    shared_tail = parent.block_table[1]
    # child writes into the shared partial block -> copied first
    append_token(bm, child, 77)
    copies = bm.pop_copies()
    assert copies == [(shared_tail, child.block_table[1])]
    assert child.block_table[1] != shared_tail and child.block_table[0] == parent.block_table[0]
    assert bm.blocks[shared_tail].ref_count == 1
    # parent now owns its tail alone: writing into it copies nothing
    append_token(bm, parent, 88)
    assert bm.pop_copies() == []
    assert parent.block_table[1] == shared_tail
    # writing into a fresh block or a non-shared partial block never copies
    for t in range(6):
        append_token(bm, child, t)
        append_token(bm, parent, t)
    assert bm.pop_copies() == []
    assert bm.num_cow_copies == 1
    check_refcounts(bm, [parent, child])
    bm.free(parent)
    bm.free(child)
    check_refcounts(bm, [])


def test_allocation_is_all_or_nothing():
    bm = BlockManager(num_blocks=3, block_size=BS)
    a = make_seq(range(8), 0)
    prefill(bm, a)
    b = make_seq(range(50, 58), 1)
    assert not bm.allocate_slots(b, 8)
    assert b.block_table == [] and bm.num_free_blocks == 1
    check_refcounts(bm, [a])


def test_naive_reserves_max_len_per_sequence():
    bm = BlockManager(num_blocks=10, block_size=BS, kv_allocation="naive", max_blocks_per_seq=4)
    a, b, c = (make_seq(range(3), i) for i in range(3))
    assert bm.allocate_slots(a, 3)
    assert bm.num_used_blocks == 4 and bm.num_free_blocks == 6
    assert bm.allocate_slots(b, 3)
    assert not bm.allocate_slots(c, 3)  # 10 // 4 = 2 reservations
    assert a.block_table == [0, 1, 2, 3] and b.block_table == [4, 5, 6, 7]
    assert bm.get_computed_blocks(b) == ([], 0)
    bm.free(a)
    assert bm.allocate_slots(c, 3) and c.block_table == [0, 1, 2, 3]
    bm.free(b)
    bm.free(c)
    assert bm.num_free_blocks == 10


# ---------------------------------------------------------------- property-based: no leaks
ops = st.lists(
    st.tuples(st.sampled_from(["add", "append", "fork", "finish", "abort", "preempt"]),
              st.integers(0, 1000), st.integers(1, 9)),
    min_size=1, max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, block_size=st.sampled_from([1, 2, 4]), num_blocks=st.integers(4, 24))
def test_random_mixes_never_leak(ops, block_size, num_blocks):
    bm = BlockManager(num_blocks=num_blocks, block_size=block_size)
    live: list[Sequence] = []
    vocab = [1, 2, 3]  # tiny vocab -> many shared prefixes and cache hits
    next_id = 0
    for op, pick, length in ops:
        if op == "add":
            seq = make_seq([vocab[(pick + i * (pick % 3)) % 3] for i in range(length)], next_id)
            next_id += 1
            hits, n_cached = bm.get_computed_blocks(seq)
            if bm.allocate_slots(seq, len(seq) - n_cached, hits):
                seq.num_computed_tokens = len(seq)
                bm.cache_full_blocks(seq)
                live.append(seq)
            else:
                assert seq.block_table == []
        elif not live:
            continue
        else:
            seq = live[pick % len(live)]
            if op == "append":
                seq.token_ids.append(vocab[pick % 3])
                if bm.allocate_slots(seq, 1):
                    seq.num_computed_tokens += 1
                    bm.cache_full_blocks(seq)
                else:
                    seq.token_ids.pop()
            elif op == "fork":
                child = seq.fork(1, seq_id=next_id)
                next_id += 1
                assert bm.fork(seq, child)
                live.append(child)
            elif op in ("finish", "abort"):
                bm.free(seq)
                live.remove(seq)
            elif op == "preempt":  # recompute later: blocks freed, progress reset
                bm.free(seq)
                seq.num_computed_tokens = 0
                hits, n_cached = bm.get_computed_blocks(seq)
                if bm.allocate_slots(seq, len(seq) - n_cached, hits):
                    seq.num_computed_tokens = len(seq)
                    bm.cache_full_blocks(seq)
                else:
                    live.remove(seq)
        bm.pop_copies()
        check_refcounts(bm, live)
        for s in live:  # every table covers exactly the computed tokens
            assert len(s.block_table) == -(-s.num_computed_tokens // block_size)
    for s in live:
        bm.free(s)
    check_refcounts(bm, [])
    assert bm.num_free_blocks == num_blocks
    assert all(b.ref_count == 0 for b in bm.blocks)
