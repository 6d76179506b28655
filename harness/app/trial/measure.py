"""The one measurement step: one engine endpoint, one workload at one load point, one repeat.

``bench run`` (each engine's turn in each repeat), ``bench search`` (each repeat of each probe)
and a Ray trial (on its node) all measure through :func:`measure`, so each has everything a
measurement has:

1. the engine's own counters (Prometheus ``/metrics``) are scraped before and after, and their
   difference over the measured phase kept (``adapters.telemetry.prom.measured_phase``);
2. the workload is replayed by the shared client — one :class:`~harness.loadgen.runner.Runner`,
   or ``client_workers`` processes on one absolute schedule (:mod:`harness.loadgen.workers`) —
   while a thread samples the engine's process group's memory and CPU
   (:class:`adapters.runtime.resources.ResourceSampler`, with the run's energy counter) and another
   scrapes the engine's ``/metrics`` every second into its time series
   (:class:`adapters.telemetry.engine_series.SeriesSampler`);
3. every record goes to the ``sink`` the moment it ends (the run folder's writer, or a Ray
   trial's mailbox), stamped with its ``repeat`` and ``probe``, so a crash keeps it;
4. after the phase, off the timing path, each request's tokens are recounted once with the
   run's tokenizer and the recounts go to the sink beside the records (never rewriting them,
   :mod:`results.recounts`);
5. the metrics of the measured requests (the measured phase plus the warm-up/cool-down windows
   of a duration run, which count) under the condition the workload offered (its rates,
   planned turns and timing) and the SLOs: :func:`harness.metrics.summarise.repeat_metrics`.

Warm-up, the output checks and feature probes happen around it, not in it
(:mod:`harness.app.trial.steps`).
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from adapters.base import Endpoint
from adapters.telemetry.energy import open_meter
from adapters.telemetry.engine_series import SeriesSampler
from adapters.runtime.resources import ResourceSampler
from results.recounts import TokenRecount
from results.schema import ClientWorker, EnergySource, EngineFacts, Metrics, RequestRecord, ResourceUse
from results.schema.records import STOPPED_PHASE
from results.schema.series import EngineSeries
from workloads.base import Workload

from harness.loadgen.client import EndpointTarget
from harness.loadgen.runner import Runner, RunnerOptions
from harness.loadgen.workers import client_measurer
from harness.metrics import SLO
from harness.metrics.summarise import Condition, counted, repeat_metrics

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


class MeasurementSink(Protocol):
    """Where a measurement's artefacts go as they are made: the run folder's
    :class:`results.store.RunWriter`, or a Ray trial's mailbox to the driver."""

    def add_record(self, record: RequestRecord) -> None: ...

    def add_recounts(self, recounts: Sequence[TokenRecount]) -> None: ...

    def add_client_workers(self, count: int, workers: Sequence[ClientWorker]) -> None: ...

    def add_engine_facts(self, name: str, facts: EngineFacts) -> None: ...


@dataclass(frozen=True)
class MeasureOptions:
    """How to measure: ``slos`` judged (goodput); ``request_timeout_s`` per request (s);
    ``max_concurrency``: a cap on requests in flight over the workload's own (None = the
    workload's); ``client_workers``: client processes (1 = this one); ``ignore_eos``: send
    ``ignore_eos`` where the endpoint takes it; ``max_sessions``: sessions in flight, closed
    loop (a load ladder's point; None = the workload's own arrivals); ``stop_when``: told of each
    measured record as it ends, True stops the phase early (one client process only:
    ``RunnerOptions.stop_when``); ``energy``: the run's energy source, read around the phase
    (:mod:`adapters.telemetry.energy`; None: not asked, e.g. ``bench search``)."""

    slos: tuple[SLO, ...] = ()
    request_timeout_s: float = 600.0
    max_concurrency: int | None = None
    client_workers: int = 1
    ignore_eos: bool = True
    max_sessions: int | None = None
    stop_when: Callable[[RequestRecord], bool] | None = None  # True: the point's verdict is settled, stop it
    energy: EnergySource | None = None


@dataclass
class Measurement:
    """One measured phase: ``records`` (the measured phase and its windows, with recounts),
    ``metrics`` over them, ``wall_s`` (s, the phase's wall time), ``resources`` the engine's
    process group used meanwhile (None for an endpoint the harness did not start),
    ``engine_metrics`` (its counters over the phase; {} without ``/metrics``)."""

    engine: str
    repeat: int
    probe: int | None
    records: list[RequestRecord]
    metrics: Metrics
    wall_s: float
    resources: ResourceUse | None = None
    engine_metrics: dict[str, Any] = field(default_factory=dict)
    cut: list[RequestRecord] = field(default_factory=list)  # cut in flight when the phase stopped early (stop_when)
    engine_series: EngineSeries | None = None  # its /metrics every second (adapters.telemetry.engine_series)


def target_of(endpoint: Endpoint, ignore_eos: bool) -> EndpointTarget:
    """The client's view of ``endpoint`` (``ignore_eos`` only where the engine accepts it)."""
    return EndpointTarget(endpoint.base_url, endpoint.model_name, endpoint.api_key,
                          endpoint.supports_ignore_eos and ignore_eos)


def measure(engine: str, endpoint: Endpoint, workload: Workload, repeat: int, sink: MeasurementSink, *,
            tokenizer: PreTrainedTokenizerBase, options: MeasureOptions, probe: int | None = None,
            on_progress: Callable[[RequestRecord], None] | None = None) -> Measurement:
    """Measure ``workload`` (built at its load point) on ``endpoint`` once (module docstring).

    ``probe``: the index of the load point when there are several (``bench search``), stamped
    on every record. Raises what the client raises (a :class:`KeyboardInterrupt` after the
    finished requests reached ``sink``; ``WorkersError`` when a client process does not start).
    """
    def stamped(record: RequestRecord) -> None:
        record.probe = probe
        sink.add_record(record)

    runner = Runner(target_of(endpoint, options.ignore_eos), engine, workload.name, stamped, tokenizer,
                    RunnerOptions(options.max_concurrency, options.request_timeout_s, repeat=repeat,
                                  max_sessions=options.max_sessions,
                                  stop_when=options.stop_when if options.client_workers == 1 else None),
                    on_progress=on_progress)
    measurer = client_measurer(runner, options.client_workers, sink.add_client_workers)
    before = scrape(endpoint.metrics_url)  # the engine's counters then count the measured phase only
    t0 = time.monotonic()
    try:
        meter = open_meter(options.energy) if endpoint.pgid is not None else None  # the run's counter, this phase
        with ResourceSampler(endpoint.pgid, energy=options.energy, meter=meter) as sampler, \
                SeriesSampler(endpoint.metrics_url, endpoint.series_parser) as series:  # the engine's own, every 1 s  # a thread sampling the engine's process group
            asyncio.run(measurer.measure(workload))
    finally:  # derived work, after the phase: the finished requests are recounted even when interrupted
        sink.add_recounts(runner.recount())
    wall = time.monotonic() - t0
    counters = engine_counters(engine, before, scrape(endpoint.metrics_url))
    measured = [r for r in runner.records if counted(r)]
    metrics = repeat_metrics(measured, condition_of(workload, options.slos))
    return Measurement(engine=engine, repeat=repeat, probe=probe, records=measured, metrics=metrics, wall_s=wall,
                       resources=sampler.result, engine_metrics=counters, engine_series=series.result,
                       cut=[r for r in runner.records if r.phase == STOPPED_PHASE])


def condition_of(workload: Workload, slos: Sequence[SLO] = (), seed: int = 0) -> Condition:
    """The condition ``workload`` offers (its rates, planned turns and timing) judged by ``slos``."""
    return Condition(tuple(slos), workload.offered_rate, workload.requested_rate, workload.planned_turns(),
                     workload.timing, seed)


def scrape(url: str | None) -> str | None:
    """The text of a Prometheus ``/metrics`` page; None without a URL or when it does not answer."""
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode("utf-8", errors="replace")
    except OSError:
        return None


def engine_counters(name: str, before: str | None, after: str | None) -> dict[str, Any]:
    """The engine's own counters over the measured phase (``adapters.telemetry.prom.measured_phase``);
    {} without a page after it; never raises (informational: a run never fails over a scrape)."""
    if not after:
        return {}
    try:
        from adapters.telemetry.prom import measured_phase, parse_prometheus

        return measured_phase(name, parse_prometheus(before) if before else None, parse_prometheus(after))
    except Exception as exc:
        return {"error": f"could not parse /metrics: {exc}"}
