"""The one reader of ``KEY=VALUE`` lists on the command line (``--slo``, ``--weights``,
``--ray-resources``, ``--engine-arg``) and of comma-separated names (``--engine``).

It lives here, in the lowest shared package, so ``adapters`` and ``harness`` read the same
syntax without ``adapters`` importing ``harness``. Only the shape is read here; what a key
may be and what its value means (milliseconds, a weight, a Ray resource) stays with each
caller, which also words the error for an item without ``=`` (``no_value``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator


def split_list(text: str | None) -> list[str]:
    """``"own, vllm,"`` → ``["own", "vllm"]``: comma-separated items, stripped, empty ones dropped."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def parse_pairs(items: str | Iterable[str] | None,
                no_value: Callable[[str], Exception]) -> Iterator[tuple[str, str]]:
    """``(key, value)`` for each ``KEY=VALUE`` item, in order, split at the first ``=``.

    ``items``: one comma-separated text (``"ttft_p99=500, tpot_p99=50"``; empty items are
    skipped) or the values of a repeatable option (``["vllm:max_num_seqs=64"]``; each is one
    item, which may hold commas). Each item is stripped; its key and value are returned as
    written around the ``=`` (callers strip or match them as their syntax needs). An item
    without ``=`` raises ``no_value(item)`` when it is reached, so a caller checking items as
    they come reports the first bad one.
    """
    if items is None:
        return
    for raw in items.split(",") if isinstance(items, str) else items:
        item = raw.strip()
        if not item and isinstance(items, str):
            continue
        if "=" not in item:
            raise no_value(item if isinstance(items, str) else raw)
        key, _, value = item.partition("=")
        yield key, value
