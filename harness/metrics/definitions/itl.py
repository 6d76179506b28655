"""ITL, inter-token latency (ms): every gap between consecutive token-bearing chunks, pooled over
requests (vLLM ``bench serve``'s ``itl``). A request's own value, which a per-request SLO judges,
is its largest gap (0 for a reply of one chunk)."""

from __future__ import annotations

from results.schema.metric_registry import LATENCY_PERCENTILES, Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def itls_ms(r: RequestRecord) -> list[float]:
    """Gaps between consecutive token-bearing chunks of one request, in ms."""
    ts = r.chunk_times_ns
    return [(b - a) / NS_PER_MS for a, b in zip(ts, ts[1:])]


def worst_itl_ms(r: RequestRecord) -> float:
    """The request's largest inter-token gap (ms); 0.0 without one."""
    gaps = itls_ms(r)
    return max(gaps) if gaps else 0.0


ORDER = 30
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(
    name="itl", label="ITL", value=worst_itl_ms, samples=itls_ms,
    source="vLLM bench serve (gaps between token-bearing chunks, pooled)", slo_percentiles=LATENCY_PERCENTILES,
    report=("p99",), csv=("p50", "p99"), decimals=2, cdf=True,
)
