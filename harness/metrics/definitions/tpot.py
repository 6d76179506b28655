"""TPOT, time per output token (ms): (E2E − TTFT) / (output_tokens − 1), for replies of at least
2 tokens; the summary is request-weighted (vLLM ``bench serve``'s ``tpot``). A reply of one token
has none, so it cannot break a TPOT SLO."""

from __future__ import annotations

from results.schema.metric_registry import LATENCY_PERCENTILES, Metric
from results.schema.records import RequestRecord

from .e2el import e2el_ms
from .ttft import ttft_ms


def tpot_ms(r: RequestRecord) -> float | None:
    """TPOT in ms: (E2E − TTFT) / (output_tokens − 1); None when output_tokens < 2."""
    n = r.output_tokens
    t, e = ttft_ms(r), e2el_ms(r)
    if n is None or n < 2 or t is None or e is None:
        return None
    return (e - t) / (n - 1)


ORDER = 20
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(
    name="tpot", label="TPOT", value=tpot_ms, source="vLLM bench serve ((E2E − TTFT) / (output tokens − 1))",
    slo_percentiles=LATENCY_PERCENTILES, missing_meets_slo=True,
    report=("p50", "p90", "p99"), console=("p50", "p90", "p99"), csv=("p50", "p90", "p99"), intervals=("p50", "p99"),
    decimals=2, cdf=True,
)
