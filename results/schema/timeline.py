"""Timelines: one engine's measured phase over time, derived from the request records when a
report is written (not stored)."""

from __future__ import annotations

from pydantic import Field

from .base import Artefact


class Timeline(Artefact):
    """One engine's measured phase (one repeat) over time, in buckets of ``bucket_s`` seconds
    from its first send (``harness.metrics.timeline``). Per bucket ``i`` (``[i·b, (i+1)·b)``):
    ``in_flight``: time-averaged requests in flight (sent, not yet ended); ``output_tps``:
    output tokens whose chunk arrived in it, per second; ``ttft_p50_ms``: median TTFT of the
    requests whose first token arrived in it (None: none did); ``completed`` / ``failed``:
    requests that ended in it."""

    bucket_s: float
    repeat: int = 0
    in_flight: list[float] = Field(default_factory=list)
    output_tps: list[float] = Field(default_factory=list)
    ttft_p50_ms: list[float | None] = Field(default_factory=list)
    completed: list[int] = Field(default_factory=list)
    failed: list[int] = Field(default_factory=list)
