"""A run over time: requests in flight, output tokens/s and TTFT in fixed buckets of the measured phase.

Saturation (in flight climbing while output tokens/s stays flat), warm-up effects (TTFT falling
over the first seconds) and stalls (output tokens/s at 0 with requests in flight) show in these
series where an end-of-run percentile hides them. Computed from the request records of one
engine and one repeat; time 0 is the repeat's first send.

- ``in_flight``: the time average over the bucket of the number of requests between their send
  and their end: Σ overlap([send, end), bucket) / bucket width - exact, not sampled.
- ``output_tps``: output tokens whose chunk arrived in the bucket / bucket width. A request's
  tokens are spread over its token-bearing chunks (``chunk_token_counts`` when the server
  reported them per chunk, else evenly: ``output_tokens / chunks``), so multi-token chunks count
  as their tokens - the convention of the peak output throughput metric.
- ``ttft_p50_ms``: the median TTFT of the successful requests whose first token arrived in it.

Buckets are 1 s; a measured phase longer than :data:`MAX_BUCKETS` seconds uses the smallest
width from :data:`WIDTHS_S` that keeps at most that many.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from results.schema import RequestRecord, Timeline

from .request import NS_PER_S, ttft_ms

MAX_BUCKETS = 600
WIDTHS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def bucket_width(span_s: float) -> float:
    """The bucket width (s) for a measured phase of ``span_s`` seconds."""
    for width in WIDTHS_S:
        if span_s / width <= MAX_BUCKETS:
            return width
    return math.ceil(span_s / MAX_BUCKETS)


def _chunk_tokens(record: RequestRecord) -> list[float]:
    chunks = record.chunk_times_ns
    counts = getattr(record, "chunk_token_counts", None) or []
    if counts and len(counts) == len(chunks):
        return [float(c) for c in counts]
    tokens = record.output_tokens
    if not chunks or not tokens:
        return [0.0] * len(chunks)
    return [tokens / len(chunks)] * len(chunks)


def timeline(records: Sequence[RequestRecord], repeat: int = 0) -> Timeline | None:
    """The :class:`results.schema.Timeline` of ``records`` (one engine's measured records of one
    repeat); None when none was sent."""
    sent = [r for r in records if r.phase == "measured" and r.send_ns is not None]
    if not sent:
        return None
    t0 = min(r.send_ns for r in sent)  # type: ignore[type-var]
    t_end = max((r.end_ns or r.send_ns) for r in sent)  # type: ignore[type-var]
    width = bucket_width((t_end - t0) / NS_PER_S)
    width_ns = int(width * NS_PER_S)
    n = max(1, math.ceil((t_end - t0) / width_ns) or 1)
    in_flight = [0.0] * n
    tokens = [0.0] * n
    ttfts: list[list[float]] = [[] for _ in range(n)]
    completed, failed = [0] * n, [0] * n

    def index(t_ns: int) -> int:
        return min(n - 1, max(0, (t_ns - t0) // width_ns))

    for r in sent:
        start, end = r.send_ns - t0, (r.end_ns or r.send_ns) - t0  # type: ignore[operator]
        for i in range(start // width_ns, min(n - 1, end // width_ns) + 1):
            lo, hi = max(start, i * width_ns), min(end, (i + 1) * width_ns)
            if hi > lo:
                in_flight[i] += (hi - lo) / width_ns
        for t, count in zip(r.chunk_times_ns, _chunk_tokens(r)):
            tokens[index(t)] += count
        if r.success and r.first_token_ns is not None and (v := ttft_ms(r)) is not None:
            ttfts[index(r.first_token_ns)].append(v)
        if r.end_ns is not None:
            (completed if r.success else failed)[index(r.end_ns)] += 1
    return Timeline(
        bucket_s=width, repeat=repeat, in_flight=in_flight, output_tps=[t / width for t in tokens],
        ttft_p50_ms=[statistics.median(v) if v else None for v in ttfts], completed=completed, failed=failed,
    )


def timelines(records: Sequence[RequestRecord]) -> list[Timeline]:
    """One :func:`timeline` per repeat of one engine's records, in repeat order."""
    repeats = sorted({r.repeat for r in records if r.phase == "measured"})
    return [t for k in repeats if (t := timeline([r for r in records if r.repeat == k], k)) is not None]
