"""E2E latency from scheduled (ms): last token-bearing chunk − the scheduled send time, so
client-side queueing (``--max-concurrency``) is included, as in TTFT from scheduled."""

from __future__ import annotations

from results.schema.metric_registry import Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def e2el_from_scheduled_ms(r: RequestRecord) -> float | None:
    """E2E latency measured from the scheduled send time (ms): last token-bearing chunk −
    scheduled, so client-side queueing (``--max-concurrency``) is included, as in
    :func:`harness.metrics.definitions.ttft_from_scheduled.ttft_from_scheduled_ms`."""
    if r.last_token_ns is None:
        return None
    return (r.last_token_ns - r.scheduled_ns) / NS_PER_MS


ORDER = 60
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(name="e2el_from_scheduled", label="E2E latency from scheduled", value=e2el_from_scheduled_ms,
                source="last token − scheduled send (coordinated omission included)")
