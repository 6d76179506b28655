"""One engine's turns over the repeats of a run → its ``summary.json`` entry.

``bench run --repeats N`` measures every engine N times, interleaved (A B C, C B A, ...), each
repeat on a freshly started engine and the same workload and seed. :class:`EngineTurns`
collects one engine's trials as they are measured and turns them into one
:class:`~results.schema.EngineResult` through the one summary (:func:`harness.metrics.summarise.summarise`:
each repeat's metrics, pooled over the repeats, the headline numbers with their 95 % intervals).
An engine that fails in any repeat is failed, with metrics over everything it measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

from results.hardware import cost_per_million_tokens
from adapters.runtime.resources import combine_repeats, with_output_tokens
from results.schema import FeatureProbe, Cost, EngineResult, EngineStatus, Interval, RequestRecord, ResourceUse

from harness.app.trial.plan import EnginePlan
from harness.app.trial.steps import TrialOutcome
from harness.metrics.failures import failure_text
from harness.metrics.summarise import Condition, counted, summarise


@dataclass
class EngineTurns:
    """The repeats of ``plan``'s engine measured so far (one :class:`TrialOutcome` each)."""

    plan: EnginePlan
    trials: list[TrialOutcome] = field(default_factory=list)
    failure: EngineResult | None = None
    feature_probes: dict[str, FeatureProbe] = field(default_factory=dict)  # the first repeat's (feature_phase)

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def measured(self) -> bool:
        return bool(self.trials)

    def add(self, trial: TrialOutcome) -> None:
        """One measured repeat (its feature probes kept when it made any: the first repeat's)."""
        self.trials.append(trial)
        if trial.feature_probes:
            self.feature_probes = trial.feature_probes

    def _records(self) -> list[RequestRecord]:
        return [r for t in self.trials for r in t.measurement.records]

    def _resources(self) -> ResourceUse | None:
        """Resource use combined over the repeats, energy per token from each one's output tokens."""
        return combine_repeats([with_output_tokens(t.measurement.resources, t.measurement.metrics.total_output_tokens)
                                for t in self.trials if t.measurement.resources is not None])

    def fail(self, reason: str, partial: Sequence[RequestRecord], condition: Condition, log_tail: str = "",
             status: EngineStatus = EngineStatus.FAILED) -> EngineResult:
        """Mark the engine failed (``status``: or interrupted): metrics over its completed repeats
        and ``partial`` (the measured records of the repeat that failed), None when it measured nothing."""
        records = self._records() + list(partial)
        summary = summarise(records, condition, intervals=False) if any(counted(r) for r in records) else None
        self.failure = EngineResult(status=status, reason=reason,
                                    metrics=summary.pooled if summary else None,
                                    repeats=summary.repeats if summary and len(summary.repeats) > 1 else [],
                                    log_tail=log_tail[-4000:], feature_probes=self.feature_probes,
                                    capabilities=self.plan.capabilities, version=self.plan.probe.version,
                                    resources=self._resources())
        return self.failure

    def result(self, condition: Condition, planned_repeats: int, price: tuple[float, str] | None = None) -> EngineResult:
        """The engine's entry: the failure, else ok over its repeats (failed when no request
        of any repeat succeeded), with its resource use and, given ``price`` (USD per hour of the
        devices measured on, its source: ``adapters.telemetry.hardware.run_price``), its cost. Raises
        ValueError when nothing was measured."""
        if self.failure is not None:
            return self.failure
        if not self.trials:
            raise ValueError(f"{self.name}: no repeat measured")
        summary = summarise(self._records(), condition)
        metrics, last = summary.pooled, self.trials[-1]
        base = dict(display_name=last.display_name, capabilities=self.plan.capabilities, version=self.plan.probe.version,
                    wall_s=round(sum(t.measurement.wall_s for t in self.trials), 2),
                    startup_s=round(statistics.median(t.startup_s for t in self.trials), 2),
                    startup_parallel=any(t.parallel for t in self.trials),
                    engine_metrics=last.measurement.engine_metrics,  # the last repeat's counters
                    feature_probes=self.feature_probes,
                    repeats=summary.repeats if len(summary.repeats) > 1 else [],
                    resources=self._resources())
        if metrics.requests_completed == 0:
            why = failure_text(summary.repeats)
            if metrics.requests_incomplete and not metrics.requests_failed:  # all cut by a duration run's drain
                why = (f"all {metrics.requests_incomplete} requests were still running at the drain bound and were "
                       "cut (incomplete): raise --drain-timeout or shorten --output-len")
            return EngineResult(status=EngineStatus.FAILED, metrics=metrics, reason=f"no request succeeded: {why}", **base)
        reason = ""
        if len(self.trials) < planned_repeats:
            reason = f"measured {len(self.trials)} of {planned_repeats} repeats (the run was interrupted)"
        return EngineResult(status=EngineStatus.OK, metrics=metrics, reason=reason, intervals=summary.intervals,
                            cost=engine_cost(price, metrics.output_throughput, summary.intervals.get("output_throughput")),
                            **base)


def engine_cost(price: tuple[float, str] | None, output_tps: float | None,
                interval: Interval | tuple[float, float] | None) -> Cost | None:
    """USD per 1M output tokens at ``price`` (USD per device-hour, source) and the measured output
    throughput (tokens/s per device); ``low``/``high`` from the throughput interval's high/low end
    (an :class:`Interval`, or a capacity's ``(low, high)`` tokens/s). The one cost function of a
    run: the one-point path's and the ladder's capacity (``ladder_run``), so the resources table and
    the capacity table print one figure. None without a price or a throughput."""
    point = cost_per_million_tokens(price[0], output_tps) if price else None
    if price is None or point is None or output_tps is None:
        return None
    lo_tps, hi_tps = (interval.low, interval.high) if isinstance(interval, Interval) else (interval or (None, None))
    low = cost_per_million_tokens(price[0], hi_tps) if hi_tps is not None else None
    high = cost_per_million_tokens(price[0], lo_tps) if lo_tps is not None else None
    return Cost(usd_per_hour=price[0], price_source=price[1], output_tokens_per_s=output_tps,
                usd_per_1m_output_tokens=point, low=point if low is None else low, high=point if high is None else high)
