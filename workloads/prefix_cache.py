"""The theoretical prefix-cache hit rate of a sequence of prompts, as a block-granular prefix
cache (vLLM's automatic prefix caching, SGLang's radix cache at page size B) would get it.

A prompt of ``n`` tokens is ``floor(n / B)`` full blocks of ``B`` tokens; block ``k`` is keyed by
the whole prefix up to its end (a chained hash of its tokens and the previous block's key, as
vLLM hashes blocks), so equal keys mean equal prefixes. A prompt's cached prefix is its leading
blocks found in the cache, up to the first that is not (a prefix cache cannot skip a block);
after it, every block of the prompt is in the cache, the most recently used. Only full blocks
are cached (a partial last block is always computed), and a reply's own blocks are not counted
(an engine may cache them too: the bound is then a little low for multi-turn traces).

``hit rate = cached prompt tokens / all prompt tokens``, in the prompts' order: with an
**infinite** cache (``capacity=None``: the trace's optimal hit rate, TensorRT-LLM's trace
replay's "optimal prefix-cache hit rate") or an **LRU** cache of ``capacity`` blocks (the least
recently used block evicted first; an evicted block's descendants stay until their own turn,
but cannot hit without it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence


def block_keys(ids: Sequence[Hashable], block_tokens: int) -> list[int]:
    """Keys of the full blocks of ``ids`` (each the hash of the prefix up to its end)."""
    keys, h = [], 0
    for k in range(len(ids) // block_tokens):
        h = hash((h, tuple(ids[k * block_tokens:(k + 1) * block_tokens])))
        keys.append(h)
    return keys


def hit_tokens(prompts: Iterable[Sequence[Hashable]], block_tokens: int, capacity: int | None = None) -> tuple[int, int]:
    """``(cached prompt tokens, all prompt tokens)`` over ``prompts`` in order (module
    docstring). ``capacity``: blocks an LRU cache holds (None: infinite). Raises ``ValueError``
    for ``block_tokens < 1`` or ``capacity < 1``."""
    if block_tokens < 1 or (capacity is not None and capacity < 1):
        raise ValueError(f"block_tokens and capacity must be >= 1, got {block_tokens}, {capacity}")
    cache: OrderedDict[int, None] = OrderedDict()
    hit = total = 0
    for ids in prompts:
        total += len(ids)
        keys = block_keys(ids, block_tokens)
        n = 0
        while n < len(keys) and keys[n] in cache:
            n += 1
        hit += n * block_tokens
        for key in keys:
            cache[key] = None
            cache.move_to_end(key)
            if capacity is not None and len(cache) > capacity:
                cache.popitem(last=False)
    return hit, total


def hit_rate(prompts: Iterable[Sequence[Hashable]], block_tokens: int, capacity: int | None = None) -> float:
    """:func:`hit_tokens` as a share (0 for no tokens)."""
    hit, total = hit_tokens(prompts, block_tokens, capacity)
    return hit / total if total else 0.0
