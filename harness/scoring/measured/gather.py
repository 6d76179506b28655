"""Reading runs into the scorer's own measurements.

The only module of ``harness.scoring`` that looks inside a run's ``summary.json`` and
``manifest.json`` (``Run.summary`` / ``Run.manifest``): it reads the typed artefacts
(``results.schema``) by attribute, and by key only the parts the schema itself keeps as free
JSON objects (the manifest's workload spec, hardware, client calibration and each engine's
effective configuration; an engine's declared capabilities and ``/metrics`` counters). Every
other module works on the dataclasses defined here:

- :class:`RunFacts`: what the scorer needs of one run as a whole (workload, stored SLOs,
  required features, the model's sizes, the hardware it was measured on, the client
  calibration, :class:`ClientCalibration`);
- :class:`EngineRuns`: one engine over all runs (statuses, :class:`DeclaredCapabilities`,
  the recorded :class:`.operational.OperationalRecord` of each run it was measured in, the
  feature probes' verdicts of each run that probed it);
- :class:`Measurement`: one repeat of one *condition* (workload, offered rate) of one engine
  that served at least one request in that run: one per run, or with ``bench run --repeats N``
  one per repeat of the run (``EngineResult.repeats[i]`` and the records whose
  ``RequestRecord.repeat`` is ``i``), so repeats inside one run folder combine exactly as
  repeats over several run folders of one condition do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.metrics import SLO, slo_percentile_value
from results.features import FEATURES
from results.hardware import HardwareProfile, profile_from_manifest
from results.schema.metric_registry import metric
from results.schema import EngineFacts, EngineResult, EngineStatus, FeatureProbe, FidelityResult, Manifest, Metrics, RequestRecord
from results.store import Run

from .operational import OperationalRecord

Condition = tuple[str, float]
"""(workload name, offered rate in requests/s — sessions/s for agentic; math.inf = no rate limit)."""

SCORING_METRICS: dict[str, Callable[[Metrics], float | None]] = {
    "output_throughput": lambda metrics: metrics.output_throughput,
    "request_throughput": lambda metrics: metrics.request_throughput,
    "ttft_p50_ms": lambda metrics: metrics.ttft_ms.p50,
    "ttft_p99_ms": lambda metrics: metrics.ttft_ms.p99,
    "tpot_p50_ms": lambda metrics: metrics.tpot_ms.p50,
    "tpot_p99_ms": lambda metrics: metrics.tpot_ms.p99,
    "itl_p99_ms": lambda metrics: metrics.itl_ms.p99,
    "e2el_p99_ms": lambda metrics: metrics.e2el_ms.p99,
}
"""Scoring metric (as named in ``RankedEngine.metrics``) → how to read it from a summary's
:class:`~results.schema.Metrics`."""


@dataclass(frozen=True)
class ModelFacts:
    """The manifest's model section as the memory fit needs it (None = not recorded)."""

    num_params: int | None = None
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    dtype: str = ""  # as recorded, e.g. "bfloat16"; "" when not recorded


@dataclass(frozen=True)
class ClientCalibration:
    """The manifest's ``client_calibration`` (``harness.loadgen.calibrate``): the client measured
    against a local null server before the engines ran. ``recorded`` False: the run has none
    (``--no-calibration``, or a run from before calibration); ``error``: the calibration ran and
    failed (its message). Numbers None when not recorded: ``max_rate_rps`` (one-token requests/s
    the client completes with ``burst_concurrency`` in flight), ``itl_error_ms_p99`` (p99 of
    |measured ITL − scripted gap| over ``stream_concurrency`` streams ``stream_gap_ms`` apart),
    ``overhead_ms_p99`` (the client's own TTFT against the null server); ``workers``: the client
    processes that measured the run (``bench run --client-workers N``, the manifest's
    ``client_workers.count``; 1 for a run without it): the client-rate rule allows ``workers`` x
    the calibrated single-process ``max_rate_rps``."""

    recorded: bool = False
    error: str | None = None
    max_rate_rps: float | None = None
    itl_error_ms_p99: float | None = None
    stream_gap_ms: float | None = None
    stream_concurrency: float | None = None
    overhead_ms_p99: float | None = None
    workers: int = 1


@dataclass(frozen=True)
class RunFacts:
    """One run as a whole."""

    run_id: str
    workload: str
    slos: dict[str, Any]  # the SLOs stored in the summary: key (e.g. "ttft_p99") → threshold in ms
    required_features: tuple[str, ...]  # the workload spec's required_features, lower case
    model: ModelFacts
    max_concurrency: int | None  # the workload spec's cap on requests in flight
    measured_on: HardwareProfile | None  # the hardware the manifest recorded
    client_calibration: ClientCalibration = field(default_factory=ClientCalibration)


@dataclass(frozen=True)
class DeclaredCapabilities:
    """What an engine's adapter declared (``adapters.base.Capabilities``), as the summary recorded
    it (``EngineResult.capabilities``).

    Declared, never verified: the scorer uses it only for the declared hard constraints
    (hardware kind; required features no probe covers, or of an engine without probe results,
    :mod:`harness.scoring.checks.features`) and lists the features as "declared, unverified". The
    adapter's self-declared ``complexity`` is deliberately not read (complexity is scored from
    recorded facts, :mod:`.operational`).
    """

    hardware: tuple[str, ...] = ()  # lower case: "nvidia" | "amd" | "cpu"
    features: tuple[str, ...] = ()
    quantization: tuple[str, ...] = ()

    def serving_features(self) -> list[str]:
        """The declared features that are serving features (:data:`results.features.FEATURES`), in
        that order."""
        return [feature for feature in FEATURES if feature in self.features]

    def offered(self) -> set[str]:
        """Declared features and quantization formats, lower case."""
        return {str(name).lower() for name in self.features} | {str(name).lower() for name in self.quantization}


@dataclass
class Measurement:
    """One engine in one run, or in one repeat of a run: one repeat of the condition (workload,
    offered rate). ``repeat``: the index within its run (``RequestRecord.repeat``; 0 for a
    single-repeat run).

    ``values``: the scoring metrics keyed as in :data:`SCORING_METRICS` (``*_ms`` in ms,
    throughputs in tokens/s or requests/s; None = not recorded). Times in s, rates in
    requests/s.
    """

    run: RunFacts
    offered_rate: float  # math.inf when no open-loop target
    records: list[RequestRecord]  # the measured phase
    values: dict[str, float | None]
    requests_completed: float
    requests_failed: float
    duration_s: float
    recorded_offered_rate: float | None  # as the summary has it (None when closed loop)
    achieved_rate: float | None
    rate_valid: bool | None
    stored_goodput_slos: dict[str, float] | None  # the SLOs the stored goodput was computed for
    stored_request_goodput: float | None
    prefix_cache_hit_rate: float | None
    spec_acceptance_rate: float | None
    _summary_metrics: Metrics | None = field(repr=False, default=None)
    repeat: int = 0
    itl_p50_ms: float | None = None  # the measured ITL median (None: no inter-token gap measured)

    @property
    def condition(self) -> Condition:
        return (self.run.workload, self.offered_rate)

    def slo_value(self, slo: SLO) -> float:
        """The SLO's run-level value in ms (``harness.metrics.slo_percentile_value``);
        math.inf when unmeasurable because requests failed."""
        try:
            if self._summary_metrics is None:
                return math.inf
            value = slo_percentile_value(self._summary_metrics, slo)
        except (KeyError, TypeError, AttributeError):
            return math.inf
        if value is None:
            if metric(slo.metric).missing_meets_slo and not self.requests_failed:
                return 0.0  # e.g. only 1-token replies: TPOT is undefined and cannot be violated (meets_slos)
            return math.inf
        return float(value)


@dataclass
class EngineRuns:
    """One engine over all runs: a (status, reason) per run and its successful measurements."""

    name: str
    display_name: str
    statuses: list[tuple[str, str]] = field(default_factory=list)
    capabilities: DeclaredCapabilities | None = None  # None = not recorded
    measurements: list[Measurement] = field(default_factory=list)
    imported_from: str | None = None  # another tool's measurement (``bench import``): its label, e.g. "vllm bench serve"
    operations: list[OperationalRecord] = field(default_factory=list)  # one per run where it was measured
    feature_probes: list[dict[str, FeatureProbe]] = field(default_factory=list)  # one per run that probed it
    fidelity: list[FidelityResult] = field(default_factory=list)  # one per run that checked its outputs
    unchecked_allowed: list[bool] = field(default_factory=list)  # per entry of ``fidelity``: its run's --allow-unchecked

    def conditions(self) -> list[Condition]:
        """The measured conditions, by offered rate (then workload name)."""
        return sorted({measurement.condition for measurement in self.measurements},
                      key=lambda condition: (condition[1], condition[0]))

    def at(self, condition: Condition) -> list[Measurement]:
        """The repeats of ``condition``."""
        return [measurement for measurement in self.measurements if measurement.condition == condition]


@dataclass
class Gathered:
    """All runs given to the scorer: one :class:`RunFacts` per run, engines by name."""

    runs: list[RunFacts]
    engines: dict[str, EngineRuns]


def gather(runs: Sequence[Run]) -> Gathered:
    """Read ``runs`` into :class:`Gathered` (engines in the order they first appear)."""
    run_facts: list[RunFacts] = []
    engines: dict[str, EngineRuns] = {}
    for run in runs:
        facts = _run_facts(run)
        run_facts.append(facts)
        for name, result in run.summary.engines.items():
            _add_result(engines, run, facts, name, result)
    return Gathered(run_facts, engines)


def _add_result(engines: dict[str, EngineRuns], run: Run, facts: RunFacts, name: str, result: EngineResult) -> None:
    """One engine's entry of one run's summary, added to its :class:`EngineRuns` (created on
    first sight)."""
    engine = engines.setdefault(name, EngineRuns(name, str(result.display_name or name)))
    if result.display_name:
        engine.display_name = str(result.display_name)
    # not_measured is listed with the skipped engines, as before
    status = "skipped" if result.status is EngineStatus.NOT_MEASURED else result.status.value
    engine.statuses.append((status, str(result.reason or "")))
    if run.manifest.imported_from is not None:
        provenance = run.manifest.imported_from
        engine.imported_from = str(provenance.label or provenance.tool or "another tool")
    if result.capabilities:
        engine.capabilities = _capabilities(result.capabilities)
    if result.feature_probes:
        engine.feature_probes.append(dict(result.feature_probes))
    if run.fidelity is not None and name in run.fidelity.engines:
        engine.fidelity.append(run.fidelity.engines[name])
        engine.unchecked_allowed.append(run.fidelity.allow_unchecked)
    if status == "ok" and result.metrics is not None and result.metrics.requests_completed:
        engine.measurements.extend(_measurements(facts, result, run.records_for(name)))
        engine.operations.append(_operational(run.run_id, result, run.manifest.engines.get(name) or EngineFacts()))


def _run_facts(run: Run) -> RunFacts:
    manifest = run.manifest
    workload_spec = manifest.workload or {}
    model = manifest.model
    max_concurrency = workload_spec.get("max_concurrency")
    return RunFacts(
        run_id=run.run_id,
        workload=str(run.summary.workload or workload_spec.get("name") or "unknown"),
        slos=dict(run.summary.slos),
        required_features=tuple(str(feature).lower() for feature in workload_spec.get("required_features") or []),
        model=ModelFacts() if model is None else ModelFacts(
            num_params=model.num_params,
            num_layers=model.num_layers,
            num_kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            dtype=str(model.dtype or ""),
        ),
        max_concurrency=int(max_concurrency) if max_concurrency else None,
        measured_on=profile_from_manifest(manifest.hardware),
        client_calibration=_calibration(manifest),
    )


def _calibration(manifest: Manifest) -> ClientCalibration:
    """The manifest's ``client_calibration``: None/empty → not recorded; one with an ``error``
    → the failure; otherwise its numbers (a missing or non-finite one stays None), with the
    worker count of its ``client_workers`` (absent or below 1: 1)."""
    stored = manifest.client_calibration
    if stored is None or not stored.recorded:
        return ClientCalibration()
    if stored.error:
        return ClientCalibration(recorded=True, error=stored.error)
    workers = manifest.client_workers
    return ClientCalibration(
        recorded=True,
        max_rate_rps=_finite(stored.max_rate_rps),
        itl_error_ms_p99=_finite(stored.itl_error_ms_p99),
        stream_gap_ms=_finite(stored.stream_gap_ms),
        stream_concurrency=_finite(stored.stream_concurrency),
        overhead_ms_p99=_finite(stored.overhead_ms_p99),
        workers=workers.count if workers is not None and workers.count >= 1 else 1,
    )


def _operational(run_id: str, result: EngineResult, facts: EngineFacts) -> OperationalRecord:
    """The operational facts of one engine in one run: the summary entry's start-up, the
    manifest's engine entry (its effective configuration, install facts) for the rest."""
    return OperationalRecord(
        run_id=run_id,
        startup_s=_finite(result.startup_s),
        startup_parallel=result.startup_parallel,
        processes=facts.processes,
        install_s=_finite(facts.install_s),
        install_bytes=int(size) if (size := _finite(facts.install_bytes)) is not None else None,
        external=bool(facts.base_url),
    )


def _capabilities(declared: dict[str, Any]) -> DeclaredCapabilities:
    return DeclaredCapabilities(
        hardware=tuple(str(kind).lower() for kind in declared.get("hardware") or []),
        features=tuple(declared.get("features") or []),
        quantization=tuple(declared.get("quantization") or []),
    )


def _measurements(run: RunFacts, result: EngineResult, records: list[RequestRecord]) -> list[Measurement]:
    """One engine's measurements in one run: one per repeat when the run has ≥ 2 (each repeat's
    metrics with its own records; a repeat where every request failed stays in, as a repeat
    that misses every SLO), else the run's metrics. A ladder run's engine is one measurement:
    its point's pooled metrics (those ``summary.json`` holds, the judge's figures) with the
    point's records (its load in flight labels the condition), so the weighted lens prints the
    figures the verdict and Details print."""
    if result.ladder_point is not None:  # a ladder run: its point as the judge read it, pooled (one figure)
        assert result.metrics is not None
        point = [r for r in records if r.probe == result.ladder_point]  # its records: the load it was measured at
        return [_measurement(run, result.metrics, result.engine_metrics, point)]
    if len(result.repeats) < 2:
        assert result.metrics is not None  # the caller measured it
        return [_measurement(run, result.metrics, result.engine_metrics, records)]
    return [
        _measurement(run, metrics, result.engine_metrics, [record for record in records if record.repeat == index],
                     repeat=index)
        for index, metrics in enumerate(result.repeats)
    ]


def _measurement(run: RunFacts, metrics: Metrics, engine_metrics: dict[str, Any], records: list[RequestRecord],
                 repeat: int = 0) -> Measurement:
    rate = metrics.offered_rate
    goodput = metrics.goodput
    return Measurement(
        run=run,
        offered_rate=float(rate) if rate else math.inf,
        records=records,
        values={key: _number(read(metrics)) for key, read in SCORING_METRICS.items()},
        requests_completed=metrics.requests_completed or 0,
        requests_failed=metrics.requests_failed or 0,
        duration_s=metrics.duration_s or 0.0,
        recorded_offered_rate=rate,
        achieved_rate=metrics.achieved_rate,
        rate_valid=metrics.rate_valid,
        stored_goodput_slos=None if goodput is None else dict(goodput.slos),
        stored_request_goodput=None if goodput is None else goodput.request_goodput,
        prefix_cache_hit_rate=_first_number(engine_metrics, "prefix_cache_hit_rate"),
        spec_acceptance_rate=_first_number(engine_metrics, "spec_acceptance_rate", "spec_decode_acceptance_rate"),
        _summary_metrics=metrics,
        repeat=repeat,
        itl_p50_ms=_number(metrics.itl_ms.p50),
    )


def _number(value: float | None) -> float | None:
    """``value`` as a float; None when it is None."""
    return None if value is None else float(value)


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _first_number(counters: dict[str, Any], *names: str) -> float | None:
    """The first of ``names`` that holds a finite number."""
    for name in names:
        if (value := _finite(counters.get(name))) is not None:
            return value
    return None
