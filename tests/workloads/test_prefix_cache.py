"""The theoretical prefix-cache hit rate (workloads/prefix_cache.py) against examples computed by hand."""

import pytest

from workloads.prefix_cache import block_keys, hit_rate, hit_tokens


def test_full_blocks_only_and_keys_chain_the_prefix():
    assert len(block_keys([1, 2, 3, 4, 5], 2)) == 2  # the partial last block is not a key
    assert block_keys([1, 2, 3, 4], 2)[1] != block_keys([9, 9, 3, 4], 2)[1]  # same block, other prefix


def test_an_infinite_cache_by_hand():
    # B = 2. A = [1 2|3 4|5] (5 tokens, nothing cached); B = [1 2|3 4|6 7] shares 2 blocks (4 tokens);
    # C = [1 2|9 9] shares 1 block (2 tokens). Hits 0 + 4 + 2 = 6 of 5 + 6 + 4 = 15 tokens.
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 7], [1, 2, 9, 9]]
    assert hit_tokens(prompts, 2) == (6, 15)
    assert hit_rate(prompts, 2) == pytest.approx(0.4)


def test_an_lru_cache_of_n_blocks_by_hand():
    # B = 2, LRU of 3 blocks. P = [a|b] (keys pa, pab), Q = [c|d] (qc, qcd), then P again.
    # after P: {pa, pab}; after Q: {pa, pab, qc} -> +qcd evicts pa -> {pab, qc, qcd};
    # P again: pa is gone, so no hit (pab cannot hit without its first block): 0 of 12 tokens.
    P, Q = [1, 1, 2, 2], [3, 3, 4, 4]
    assert hit_tokens([P, Q, P], 2, capacity=3) == (0, 12)
    # with 4 blocks nothing is evicted: P's second pass hits both blocks, 4 of 12 tokens
    assert hit_tokens([P, Q, P], 2, capacity=4) == (4, 12)
    assert hit_tokens([P, Q, P], 2) == (4, 12)
    # P twice (4 tokens hit), then Q's second block evicts pa, the least recent: P's third pass misses
    assert hit_tokens([P, P, Q, P], 2, capacity=3) == (4, 16)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        hit_tokens([[1]], 0)
    with pytest.raises(ValueError):
        hit_tokens([[1]], 2, capacity=0)
