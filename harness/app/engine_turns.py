"""One engine's turns over the repeats of a run → its ``summary.json`` entry.

``bench run --repeats N`` measures every engine N times, interleaved (A B C, C B A, ...), each
repeat on a freshly started engine and the same workload and seed. :class:`EngineTurns`
collects one engine's repeats as they are measured and turns them into one
:class:`~results.schema.EngineResult`: metrics pooled over the repeats, each repeat's own
metrics, and the headline numbers with their confidence intervals (``harness.metrics.repeats``).
An engine that fails in any repeat is failed, with metrics over everything it measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from results.hardware import cost_per_million_tokens
from adapters.resources import combine_repeats, with_output_tokens
from results.schema import FeatureProbe, Cost, EngineResult, EngineStatus, Interval, Metrics, RequestRecord, ResourceUse

from harness.app.plan import EnginePlan
from harness.metrics import SLO, compute_metrics
from harness.metrics.failures import failure_text
from harness.metrics.repeats import headline_intervals, pooled_metrics


@dataclass
class EngineTurns:
    """The repeats of ``plan``'s engine measured so far (``metrics``/``records`` per repeat)."""

    plan: EnginePlan
    metrics: list[Metrics] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    walls_s: list[float] = field(default_factory=list)
    startups_s: list[float] = field(default_factory=list)
    parallel: bool = False
    display_name: str | None = None
    engine_metrics: dict[str, Any] = field(default_factory=dict)
    failure: EngineResult | None = None
    feature_probes: dict[str, FeatureProbe] = field(default_factory=dict)  # the first repeat's (feature_phase)
    resources: list[ResourceUse] = field(default_factory=list)  # per repeat, sampled in its measured phase

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def add(self, metrics: Metrics, measured: Sequence[RequestRecord], *, wall_s: float, startup_s: float,
            parallel: bool, display_name: str, engine_metrics: dict[str, Any],
            resources: ResourceUse | None = None) -> None:
        """One measured repeat (``measured``: its measured-phase records; ``resources``: what its
        process group used meanwhile, energy per token from this repeat's output tokens)."""
        if resources is not None:
            self.resources.append(with_output_tokens(resources, metrics.total_output_tokens))
        self.metrics.append(metrics)
        self.records.extend(measured)
        self.walls_s.append(wall_s)
        self.startups_s.append(startup_s)
        self.parallel = self.parallel or parallel
        self.display_name = display_name
        self.engine_metrics = engine_metrics  # the last repeat's counters

    def fail(self, reason: str, partial: Sequence[RequestRecord], slos: Sequence[SLO], offered: float | None,
             requested: float | None, log_tail: str = "") -> EngineResult:
        """Mark the engine failed: metrics over its completed repeats and ``partial`` (the
        measured records of the repeat that failed), None when it measured nothing."""
        repeats = list(self.metrics)
        records = list(self.records) + list(partial)
        if partial:
            repeats.append(compute_metrics(partial, slos, offered, requested))
        metrics = pooled_metrics(repeats, records, slos, offered, requested) if repeats else None
        self.failure = EngineResult(status=EngineStatus.FAILED, reason=reason, metrics=metrics,
                                    repeats=repeats if len(repeats) > 1 else [], log_tail=log_tail[-4000:],
                                    feature_probes=self.feature_probes,
                                    capabilities=self.plan.capabilities, version=self.plan.probe.version,
                                    resources=combine_repeats(self.resources))
        return self.failure

    def result(self, slos: Sequence[SLO], offered: float | None, requested: float | None,
               planned_repeats: int, seed: int = 0, price: tuple[float, str] | None = None) -> EngineResult:
        """The engine's entry: the failure, else ok over its repeats (failed when no request
        of any repeat succeeded), with its resource use and, given ``price`` (USD per hour of the
        devices measured on, its source: ``adapters.hardware.run_price``), its cost. Raises
        ValueError when nothing was measured."""
        if self.failure is not None:
            return self.failure
        if not self.metrics:
            raise ValueError(f"{self.name}: no repeat measured")
        metrics = pooled_metrics(self.metrics, self.records, slos, offered, requested)
        base = dict(display_name=self.display_name, capabilities=self.plan.capabilities, version=self.plan.probe.version,
                    wall_s=round(sum(self.walls_s), 2), startup_s=round(statistics.median(self.startups_s), 2),
                    startup_parallel=self.parallel, engine_metrics=self.engine_metrics,
                    feature_probes=self.feature_probes,
                    repeats=list(self.metrics) if len(self.metrics) > 1 else [],
                    resources=combine_repeats(self.resources))
        if metrics.requests_completed == 0:
            why = failure_text(self.metrics)
            if metrics.requests_incomplete and not metrics.requests_failed:  # all cut by a duration run's drain
                why = (f"all {metrics.requests_incomplete} requests were still running at the drain bound and were "
                       "cut (incomplete): raise --drain-timeout or shorten --output-len")
            return EngineResult(status=EngineStatus.FAILED, metrics=metrics, reason=f"no request succeeded: {why}", **base)
        reason = ""
        if len(self.metrics) < planned_repeats:
            reason = f"measured {len(self.metrics)} of {planned_repeats} repeats (the run was interrupted)"
        intervals = headline_intervals(self.metrics, self.records, slos, seed=seed)
        return EngineResult(status=EngineStatus.OK, metrics=metrics, reason=reason, intervals=intervals,
                            cost=engine_cost(price, metrics.output_throughput, intervals.get("output_throughput")),
                            **base)


def engine_cost(price: tuple[float, str] | None, output_tps: float | None, interval: Interval | None) -> Cost | None:
    """USD per 1M output tokens at ``price`` (USD/h, source) and the measured output throughput
    (tokens/s); ``low``/``high`` from the throughput interval's high/low end. None without a
    price or a throughput."""
    point = cost_per_million_tokens(price[0], output_tps) if price else None
    if price is None or point is None or output_tps is None:
        return None
    low = cost_per_million_tokens(price[0], interval.high) if interval else None
    high = cost_per_million_tokens(price[0], interval.low) if interval else None
    return Cost(usd_per_hour=price[0], price_source=price[1], output_tokens_per_s=output_tps,
                usd_per_1m_output_tokens=point, low=point if low is None else low, high=point if high is None else high)
