"""TTFT from scheduled (ms): first token-bearing chunk − the scheduled send time, so client-side
queueing is included (it exposes coordinated omission, Tene's term; vLLM ``bench serve`` measures
from the send)."""

from __future__ import annotations

from results.schema.metric_registry import Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def ttft_from_scheduled_ms(r: RequestRecord) -> float | None:
    """TTFT measured from the scheduled send time (ms): includes client-side queueing."""
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.scheduled_ns) / NS_PER_MS


ORDER = 50
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(name="ttft_from_scheduled", label="TTFT from scheduled", value=ttft_from_scheduled_ms,
                source="first token − scheduled send (coordinated omission included)")
