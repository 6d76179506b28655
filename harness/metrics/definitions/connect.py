"""Connection set-up (ms): DNS + TCP + TLS of a request that opened a new connection, before its
body was written (an aiohttp trace hook); not part of TTFT or E2E latency. Over every measured
request that opened one (a failed request connected too); a reused pooled connection adds none."""

from __future__ import annotations

from results.schema.metric_registry import Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def connect_ms(r: RequestRecord) -> float | None:
    """Connection set-up in ms (DNS + TCP + TLS of a new connection, before the request was
    written; excluded from TTFT and E2E). 0.0 for a reused pooled connection; None when not
    recorded (the request failed before connecting, or an older record)."""
    if r.connection_reused:
        return 0.0
    if r.connect_start_ns is None or r.connect_end_ns is None:
        return None
    return (r.connect_end_ns - r.connect_start_ns) / NS_PER_MS


def opened_connection_ms(r: RequestRecord) -> list[float]:
    """The set-up time of the connection ``r`` opened, as a list (empty for a reused one or none recorded)."""
    v = None if r.connection_reused else connect_ms(r)
    return [] if v is None else [v]


ORDER = 80
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(name="connect", label="connection set-up", value=connect_ms, samples=opened_connection_ms,
                over="measured", source="aiohttp trace hooks (connection create start → end)")
