"""E2E latency (ms): last token-bearing chunk − send (vLLM ``bench serve``'s ``e2el``). A failed
request counts as +inf (the error-adjusted distribution, DistServe's rule)."""

from __future__ import annotations

from results.schema.metric_registry import LATENCY_PERCENTILES, Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def e2el_ms(r: RequestRecord) -> float | None:
    """E2E latency in ms: last token-bearing chunk − send."""
    if r.last_token_ns is None or r.send_ns is None:
        return None
    return (r.last_token_ns - r.send_ns) / NS_PER_MS


ORDER = 40
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(
    name="e2el", label="E2E latency", short="E2E", value=e2el_ms,
    source="vLLM bench serve (last token − request sent)", slo_percentiles=LATENCY_PERCENTILES, failures="inf",
    report=("p99",), console=("p99",), csv=("p50", "p99"), intervals=("p50", "p99"), decimals=1, cdf=True,
)
