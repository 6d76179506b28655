"""The engine's own time series while a point is measured (issue 43): a thread that scrapes the
engine's Prometheus ``/metrics`` every ``interval_s`` (1 s) from :meth:`SeriesSampler.start` to
:meth:`SeriesSampler.stop` and reads it with the adapter's named parser
(``read_series``, :func:`adapters.telemetry.prom.series_reader`): KV-cache usage, running and waiting requests, and the
preemption and prefix-cache counters as their increase since the first scrape (the phase's own).

A thread of the harness, never a task on the client's event loop; a scrape that fails is skipped
(the series says how many failed), and an engine without a metrics endpoint or a parser gets an
empty series with the reason, never made-up values.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Callable

from adapters import registry
from adapters.telemetry.prom import parse_prometheus
from results.schema.series import EngineSeries, SeriesSample

INTERVAL_S = 1.0


def fetch(url: str, timeout_s: float = 2.0) -> str:
    """The page at ``url``; raises OSError when it does not answer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode("utf-8", errors="replace")


class SeriesSampler:
    """Scrapes ``url`` with parser ``parser`` (an engine's name: the ``read_series`` its adapter class
    declares, :mod:`adapters.registry`) every
    ``interval_s`` in a thread; ``fetch`` and ``clock`` are for tests. :meth:`stop` returns the
    :class:`~results.schema.series.EngineSeries` (also kept in ``result``)."""

    def __init__(self, url: str | None, parser: str | None, *, interval_s: float = INTERVAL_S,
                 fetch: Callable[[str], str] = fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self.url, self.parser, self.interval_s = url, parser, interval_s
        self.fetch, self.clock = fetch, clock
        self.result: EngineSeries | None = None
        self._samples: list[SeriesSample] = []
        self._first: dict[str, float | None] | None = None
        self._t0 = 0.0
        self._failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def reason(self) -> str:
        if not self.url:
            return "the engine has no Prometheus metrics endpoint"
        if not self.parser or registry.declared(self.parser, "read_series") is None:
            return f"no series parser for this engine's metrics ({self.parser or 'none named on its adapter'})"
        return ""

    def start(self) -> None:
        if self.reason:
            return
        self._t0 = self.clock()
        self.scrape()
        self._thread = threading.Thread(target=self._loop, name="engine-series", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scrape()

    def scrape(self) -> None:
        """One sample (a failed scrape is counted, not stored)."""
        assert self.url and self.parser
        t = self.clock() - self._t0
        try:
            raw = registry.declared(self.parser, "read_series")(parse_prometheus(self.fetch(self.url)))
        except (OSError, ValueError):
            self._failed += 1
            return
        if self._first is None:
            self._first = raw
        first = self._first

        def since(key: str) -> float | None:  # a counter's increase since the first scrape (a reset keeps its value)
            now, then = raw.get(key), first.get(key)
            if now is None or then is None or now < then:
                return now
            return now - then

        hits, queries = since("prefix_hits_total"), since("prefix_queries_total")
        accepted, drafted = since("spec_accepted_total"), since("spec_draft_total")
        self._samples.append(SeriesSample(
            t_s=round(t, 3), kv_cache_usage=raw["kv_cache_usage"], running=raw["running"], waiting=raw["waiting"],
            preemptions=since("preemptions_total"),
            prefix_hit_rate=hits / queries if hits is not None and queries else None,
            spec_acceptance_rate=accepted / drafted if accepted is not None and drafted else None))

    def stop(self) -> EngineSeries:
        if self.result is not None:
            return self.result
        if self.reason:
            self.result = EngineSeries(parser=self.parser or "", interval_s=self.interval_s, reason=self.reason)
            return self.result
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.scrape()
        why = f"{self._failed} scrape(s) failed" if self._failed else ""
        self.result = EngineSeries(parser=self.parser or "", interval_s=self.interval_s, samples=self._samples,
                                   reason=why if not self._samples else "")
        return self.result

    def __enter__(self) -> "SeriesSampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
