"""TTFT, time to first token (ms): first token-bearing chunk − send (vLLM ``bench serve``'s
``ttft``). A failed request counts as +inf (the error-adjusted distribution, DistServe's rule)."""

from __future__ import annotations

from results.schema.metric_registry import LATENCY_PERCENTILES, Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def ttft_ms(r: RequestRecord) -> float | None:
    """TTFT in ms (first token-bearing chunk − send), or None when either is missing."""
    if r.first_token_ns is None or r.send_ns is None:
        return None
    return (r.first_token_ns - r.send_ns) / NS_PER_MS


ORDER = 10
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(
    name="ttft", label="TTFT", value=ttft_ms, source="vLLM bench serve (first token − request sent)",
    slo_percentiles=LATENCY_PERCENTILES, failures="inf",
    report=("p50", "p90", "p99"), console=("p50", "p90", "p99"), csv=("p50", "p90", "p99"), intervals=("p50", "p99"),
    decimals=1, cdf=True,
)
