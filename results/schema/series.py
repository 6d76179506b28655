"""The engine's own time series over a measured phase (issue 43): what its Prometheus
``/metrics`` said, sampled every ``interval_s`` while the point was measured
(``adapters.telemetry.engine_series``), so a capacity's end can be read from it: KV cache full,
requests queued, preemptions."""

from __future__ import annotations

from pydantic import Field

from .base import Artefact


class SeriesSample(Artefact):
    """One scrape, ``t_s`` seconds after the phase began: ``kv_cache_usage`` (fraction of the KV
    cache's blocks in use, 0..1), ``running`` and ``waiting`` (requests in the engine's running
    and waiting queues), ``preemptions`` (since the phase began), ``prefix_hit_rate`` (cached /
    looked-up prompt tokens since the phase began, 0..1), ``spec_acceptance_rate`` (accepted /
    proposed draft tokens since the phase began, 0..1: vLLM's draft acceptance rate; None before
    any draft, or without speculative decoding); None where the engine does not report it."""

    t_s: float
    kv_cache_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None
    prefix_hit_rate: float | None = None
    spec_acceptance_rate: float | None = None


class EngineSeries(Artefact):
    """One measured phase's series: the ``parser`` that read the engine's names (the adapter's
    ``series_parser``), ``interval_s`` (s) and the ``samples``; ``reason`` when there is none
    (no metrics endpoint, no parser, the page did not answer)."""

    parser: str = ""
    interval_s: float = 1.0
    samples: list[SeriesSample] = Field(default_factory=list)
    reason: str = ""

    def peak(self, key: str) -> float | None:
        """The highest value of ``key`` over the samples (None when never reported)."""
        values = [v for s in self.samples if (v := getattr(s, key)) is not None]
        return max(values) if values else None

    def last(self, key: str) -> float | None:
        values = [v for s in self.samples if (v := getattr(s, key)) is not None]
        return values[-1] if values else None
