"""TTFAT, time to first answer token (ms): the first chunk carrying answer text (content or tool
calls, after any ``reasoning_content``) − send; equal to TTFT for a reply without reasoning."""

from __future__ import annotations

from results.schema.metric_registry import Metric
from results.schema.records import RequestRecord

from .units import NS_PER_MS


def ttfat_ms(r: RequestRecord) -> float | None:
    """Time to first answer token in ms: first chunk carrying answer text (content or tool
    calls, not ``reasoning_content``) − send. Equals TTFT for a reply without reasoning text;
    None when no answer text came (a reply cut off while reasoning)."""
    if r.first_answer_ns is None or r.send_ns is None:
        return None
    return (r.first_answer_ns - r.send_ns) / NS_PER_MS


ORDER = 70
"""Where it stands in every table (the definitions package registers by ``ORDER``)."""

METRIC = Metric(name="ttfat", label="TTFAT", value=ttfat_ms,
                source="first answer chunk (after reasoning) − request sent")
