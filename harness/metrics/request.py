"""One request's latencies from its ``perf_counter_ns`` stamps (DESIGN.md "Metric definitions").

Each function is one metric: its unit is ms, its formula is in its docstring.
"""

from __future__ import annotations

from results.schema import RequestRecord

NS_PER_MS = 1_000_000

NS_PER_S = 1_000_000_000

def ttft_ms(r: RequestRecord) -> float | None:
    """TTFT in ms (first token-bearing chunk − send), or None when either is missing."""
    if r.first_token_ns is None or r.send_ns is None:
        return None
    return (r.first_token_ns - r.send_ns) / NS_PER_MS

def ttft_from_scheduled_ms(r: RequestRecord) -> float | None:
    """TTFT measured from the scheduled send time (ms): includes client-side queueing."""
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.scheduled_ns) / NS_PER_MS

def ttfat_ms(r: RequestRecord) -> float | None:
    """Time to first answer token in ms: first chunk carrying answer text (content or tool
    calls, not ``reasoning_content``) − send. Equals :func:`ttft_ms` for a reply without
    reasoning text; None when no answer text came (a reply cut off while reasoning)."""
    if r.first_answer_ns is None or r.send_ns is None:
        return None
    return (r.first_answer_ns - r.send_ns) / NS_PER_MS

def connect_ms(r: RequestRecord) -> float | None:
    """Connection set-up in ms (DNS + TCP + TLS of a new connection, before the request was
    written; excluded from TTFT and E2E). 0.0 for a reused pooled connection; None when not
    recorded (the request failed before connecting, or an older record)."""
    if r.connection_reused:
        return 0.0
    if r.connect_start_ns is None or r.connect_end_ns is None:
        return None
    return (r.connect_end_ns - r.connect_start_ns) / NS_PER_MS

def e2el_ms(r: RequestRecord) -> float | None:
    """E2E latency in ms: last token-bearing chunk − send."""
    if r.last_token_ns is None or r.send_ns is None:
        return None
    return (r.last_token_ns - r.send_ns) / NS_PER_MS

def e2el_from_scheduled_ms(r: RequestRecord) -> float | None:
    """E2E latency measured from the scheduled send time (ms): last token-bearing chunk −
    scheduled, so client-side queueing (``--max-concurrency``) is included, as in
    :func:`ttft_from_scheduled_ms`."""
    if r.last_token_ns is None:
        return None
    return (r.last_token_ns - r.scheduled_ns) / NS_PER_MS

def tpot_ms(r: RequestRecord) -> float | None:
    """TPOT in ms: (E2E − TTFT) / (output_tokens − 1); None when output_tokens < 2."""
    n = r.output_tokens
    t, e = ttft_ms(r), e2el_ms(r)
    if n is None or n < 2 or t is None or e is None:
        return None
    return (e - t) / (n - 1)

def itls_ms(r: RequestRecord) -> list[float]:
    """Gaps between consecutive token-bearing chunks of one request, in ms."""
    ts = r.chunk_times_ns
    return [(b - a) / NS_PER_MS for a, b in zip(ts, ts[1:])]
