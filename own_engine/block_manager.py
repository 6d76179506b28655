"""KV block pool with per-sequence block tables, ref counts, prefix caching and copy-on-write.

Design follows vLLM (Kwon et al. 2023, "Efficient Memory Management for Large Language Model
Serving with PagedAttention", §4.2-4.4) and vLLM v1's prefix cache:

- A block holds ``block_size`` token slots (of every layer). ``seq.block_table[i]`` holds the
  sequence's positions ``[i*block_size, (i+1)*block_size)``.
- Prefix caching: every FULL block gets a chained hash ``hash((parent_hash, token_ids))``; a new
  prompt reuses the longest run of cached blocks whose hash AND token ids (collision check) AND
  parent hash match. At most ``len(prompt) - 1`` tokens are served from the cache, so the last
  prompt token is always computed (its logits are needed to sample).
- Freed blocks keep their hash and sit in an LRU free list (uncached blocks at the head, reused
  first; cached blocks at the tail); a cached block is evicted only when it is handed out again.
- Copy-on-write: before a sequence writes into a block whose ref count is > 1 (a forked
  sequence, ``n > 1``), the block is copied to a fresh one; the copy (src, dst) is queued for the
  model runner (:meth:`pop_copies`), which copies the KV before the forward that writes.
- ``kv_allocation="naive"`` (ablation, pre-vLLM servers, e.g. FasterTransformer/Orca): each sequence
  reserves one contiguous range of ``max_blocks_per_seq`` blocks (``max_model_len`` tokens) on
  admission; no sharing, no prefix caching.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from own_engine.sequence import Sequence


class Block:
    """One physical KV block: id, ref count and (when full and cached) its hash and token ids."""

    __slots__ = ("block_id", "ref_count", "block_hash", "token_ids", "parent_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: int | None = None
        self.token_ids: tuple[int, ...] | None = None
        self.parent_hash: int | None = None

    def __repr__(self) -> str:
        return f"Block({self.block_id}, ref={self.ref_count}, cached={self.block_hash is not None})"


def hash_block(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """Chained block hash: ``hash((parent_hash, token_ids))`` (vLLM's prefix-caching convention)."""
    return hash((parent_hash, token_ids))


class BlockManager:
    """Owns the KV block pool (``num_blocks`` blocks of ``block_size`` slots).

    ``kv_allocation``: ``"paged"`` or ``"naive"`` (then ``max_blocks_per_seq`` is required).
    Counters (read-only outside this class; :meth:`record_prefix_lookup` and the allocation
    methods advance them): ``prefix_cache_queries``/``prefix_cache_hits`` (tokens), ``num_cow_copies``.
    Raises ``ValueError`` for impossible settings.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 kv_allocation: str = "paged", max_blocks_per_seq: int | None = None) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be positive, got {num_blocks}, {block_size}")
        if kv_allocation not in ("paged", "naive"):
            raise ValueError(f"kv_allocation must be 'paged' or 'naive', got {kv_allocation!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.naive = kv_allocation == "naive"
        self.enable_prefix_caching = enable_prefix_caching and not self.naive
        self.blocks = [Block(i) for i in range(num_blocks)]
        # LRU free list: popitem(last=False) hands out the head.
        self.free_block_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self._pending_copies: list[tuple[int, int]] = []
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.num_cow_copies = 0
        if self.naive:
            if not max_blocks_per_seq or max_blocks_per_seq > num_blocks:
                raise ValueError(
                    f"naive KV allocation needs 1 <= max_blocks_per_seq <= num_blocks, got {max_blocks_per_seq}")
            self.blocks_per_seq = max_blocks_per_seq
            self.free_slots: deque[int] = deque(range(num_blocks // max_blocks_per_seq))
            self._num_used_naive = 0

    # ------------------------------------------------------------------ accounting
    @property
    def num_free_blocks(self) -> int:
        """Blocks not referenced by any sequence (cached-but-free blocks count as free)."""
        if self.naive:
            return self.num_blocks - self._num_used_naive
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ------------------------------------------------------------------ low level
    def _allocate_block(self) -> int:
        bid, _ = self.free_block_ids.popitem(last=False)
        blk = self.blocks[bid]
        if blk.block_hash is not None:  # evict from the prefix cache
            if self.hash_to_block.get(blk.block_hash) == bid:
                del self.hash_to_block[blk.block_hash]
            blk.block_hash = blk.token_ids = blk.parent_hash = None
        blk.ref_count = 1
        return bid

    def _acquire(self, bid: int) -> None:
        blk = self.blocks[bid]
        if blk.ref_count == 0:
            del self.free_block_ids[bid]
        blk.ref_count += 1

    def _release(self, bid: int) -> None:
        blk = self.blocks[bid]
        if blk.ref_count <= 0:
            raise RuntimeError(f"block {bid} released with ref_count {blk.ref_count} (double free)")
        blk.ref_count -= 1
        if blk.ref_count == 0:
            self.free_block_ids[bid] = None
            if blk.block_hash is None:  # nothing worth keeping: reuse it first
                self.free_block_ids.move_to_end(bid, last=False)

    # ------------------------------------------------------------------ prefix cache
    def _update_hashes(self, seq: Sequence, num_blocks: int) -> None:
        bs = self.block_size
        toks = seq.token_ids
        while len(seq.block_hashes) < num_blocks:
            i = len(seq.block_hashes)
            parent = seq.block_hashes[-1] if i else None
            seq.block_hashes.append(hash_block(parent, tuple(toks[i * bs:(i + 1) * bs])))

    def get_computed_blocks(self, seq: Sequence) -> tuple[list[int], int]:
        """Prefix-cache lookup for a sequence without blocks: ``(block_ids, num_cached_tokens)``.

        Matches at most ``len(seq) - 1`` tokens (whole blocks), so the last token is computed.
        Does not take references; pass the ids to :meth:`allocate_slots`.
        """
        if not self.enable_prefix_caching:
            return [], 0
        bs = self.block_size
        n = (len(seq) - 1) // bs
        self._update_hashes(seq, n)
        hits: list[int] = []
        toks = seq.token_ids
        for i in range(n):
            bid = self.hash_to_block.get(seq.block_hashes[i])
            if bid is None:
                break
            blk = self.blocks[bid]
            parent = seq.block_hashes[i - 1] if i else None
            if blk.parent_hash != parent or blk.token_ids != tuple(toks[i * bs:(i + 1) * bs]):
                break  # hash collision: treat as a miss
            hits.append(bid)
        return hits, len(hits) * bs

    def record_prefix_lookup(self, num_query_tokens: int, num_hit_tokens: int) -> None:
        """Count one sequence's first admission in ``prefix_cache_queries`` / ``prefix_cache_hits``
        (tokens: its length, and the tokens :meth:`get_computed_blocks` served from the cache)."""
        self.prefix_cache_queries += num_query_tokens
        self.prefix_cache_hits += num_hit_tokens

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Offer the sequence's newly full, computed blocks to the prefix cache.

        Call after ``seq.num_computed_tokens`` advanced. A block whose hash is already cached in
        another block (the same prefix computed twice concurrently) stays uncached.
        """
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        n_full = min(seq.num_computed_tokens // bs, len(seq.block_table))
        if n_full <= seq.num_registered_blocks:
            return
        self._update_hashes(seq, n_full)
        toks = seq.token_ids
        for i in range(seq.num_registered_blocks, n_full):
            blk = self.blocks[seq.block_table[i]]
            h = seq.block_hashes[i]
            if blk.block_hash is None and h not in self.hash_to_block:
                blk.block_hash = h
                blk.parent_hash = seq.block_hashes[i - 1] if i else None
                blk.token_ids = tuple(toks[i * bs:(i + 1) * bs])
                self.hash_to_block[h] = blk.block_id
        seq.num_registered_blocks = n_full

    # ------------------------------------------------------------------ allocation
    def allocate_slots(self, seq: Sequence, num_new_tokens: int, computed_blocks: list[int] | None = None) -> bool:
        """Make ``seq.block_table`` cover ``num_computed_tokens + num_new_tokens`` positions.

        ``computed_blocks`` (prefix-cache hits from :meth:`get_computed_blocks`, only for a sequence
        without blocks) are referenced first and ``seq.num_computed_tokens`` is set to their token
        count. A new block is allocated iff the covered length crosses a block boundary, i.e. for a
        one-token append iff ``num_computed_tokens % block_size == 0``. Shared blocks (ref count > 1)
        in the written range are copied first (CoW). All-or-nothing: returns False and changes
        nothing when the free pool is too small.
        """
        if self.naive:
            return self._allocate_naive(seq, num_new_tokens)
        bs = self.block_size
        computed_blocks = computed_blocks or []
        if computed_blocks and (seq.block_table or seq.num_computed_tokens):
            raise ValueError("computed_blocks can only be given for a sequence without blocks")
        start = len(computed_blocks) * bs if computed_blocks else seq.num_computed_tokens
        total = start + num_new_tokens
        table = seq.block_table
        n_have = len(table) + len(computed_blocks)
        need_new = max(0, self.blocks_needed(total) - n_have)
        cow = [i for i in range(start // bs, min(len(table), self.blocks_needed(total)))
               if num_new_tokens > 0 and self.blocks[table[i]].ref_count > 1]
        revive = sum(1 for b in computed_blocks if self.blocks[b].ref_count == 0)
        if need_new + len(cow) + revive > len(self.free_block_ids):
            return False
        for b in computed_blocks:
            self._acquire(b)
        if computed_blocks:
            table.extend(computed_blocks)
            seq.num_computed_tokens = start
            seq.num_registered_blocks = len(computed_blocks)
        for i in cow:
            old = table[i]
            new = self._allocate_block()
            self._pending_copies.append((old, new))
            self.num_cow_copies += 1
            self._release(old)
            table[i] = new
        for _ in range(need_new):
            table.append(self._allocate_block())
        return True

    def _allocate_naive(self, seq: Sequence, num_new_tokens: int) -> bool:
        if not seq.block_table:
            if not self.free_slots:
                return False
            slot = self.free_slots.popleft()
            seq.block_table = list(range(slot * self.blocks_per_seq, (slot + 1) * self.blocks_per_seq))
            for b in seq.block_table:
                self.blocks[b].ref_count = 1
            self._num_used_naive += self.blocks_per_seq
        if seq.num_computed_tokens + num_new_tokens > self.blocks_per_seq * self.block_size:
            raise ValueError(
                f"sequence needs {seq.num_computed_tokens + num_new_tokens} slots, more than its naive "
                f"reservation of {self.blocks_per_seq * self.block_size}")
        return True

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """Give ``child`` the parent's computed blocks (paged: shared, ref count +1; naive: copied
        into the child's own reservation). Returns False (nothing changed) when naive has no room."""
        n = self.blocks_needed(parent.num_computed_tokens)
        if self.naive:
            if not self._allocate_naive(child, 0):
                return False
            for src, dst in zip(parent.block_table[:n], child.block_table[:n]):
                self._pending_copies.append((src, dst))
            return True
        child.block_table = list(parent.block_table[:n])
        for b in child.block_table:
            self._acquire(b)
        child.num_registered_blocks = min(parent.num_registered_blocks, n)
        return True

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's references (tail blocks first, so they are evicted before its prefix)."""
        if self.naive:
            if seq.block_table:
                for b in seq.block_table:
                    self.blocks[b].ref_count = 0
                self.free_slots.append(seq.block_table[0] // self.blocks_per_seq)
                self._num_used_naive -= self.blocks_per_seq
        else:
            for b in reversed(seq.block_table):
                self._release(b)
        seq.block_table = []
        seq.num_registered_blocks = 0

    def pop_copies(self) -> list[tuple[int, int]]:
        """Pending KV block copies ``(src, dst)`` (CoW, naive fork); the runner applies them before
        the next forward."""
        out, self._pending_copies = self._pending_copies, []
        return out

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (blocks in use keep their data)."""
        for blk in self.blocks:
            blk.block_hash = blk.token_ids = blk.parent_hash = None
        self.hash_to_block.clear()
