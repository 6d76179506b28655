"""Task accuracy on a user's set (``--accuracy FILE``): each reply scored against its expected
answer (``exact``: the reply stripped equals the answer stripped; ``regex``: ``re.search`` of
the answer in the reply), a failed request counted wrong; the accuracy with its Wilson score
95 % interval (Wilson 1927) over the items."""

from __future__ import annotations

import re
from typing import Sequence

from results.schema import AccuracyItem, AccuracyResult

from .fidelity import wilson_interval


def is_correct(item: AccuracyItem, reply: str | None) -> bool:
    """Whether ``reply`` (None: the request failed) answers ``item``."""
    if reply is None:
        return False
    if item.match == "regex":
        return re.search(item.expected, reply) is not None
    return reply.strip() == item.expected.strip()


def score(items: Sequence[AccuracyItem], replies: Sequence[str | None]) -> AccuracyResult:
    """One engine's :class:`AccuracyResult` from its ``replies`` (in item order; None = failed).
    Raises ValueError when the counts differ."""
    if len(items) != len(replies):
        raise ValueError(f"{len(replies)} replies for {len(items)} accuracy items")
    per = [is_correct(i, r) for i, r in zip(items, replies)]
    correct = sum(per)
    interval = wilson_interval(correct, len(items))
    return AccuracyResult(correct=correct, total=len(items), failed=sum(r is None for r in replies),
                          accuracy=interval.point if interval else None, interval=interval, per_item=per)
