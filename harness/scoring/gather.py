"""Reading runs into the scorer's own measurements.

The only module of ``harness.scoring`` that looks inside a run's ``summary.json`` and
``manifest.json`` (``Run.summary`` / ``Run.manifest``); every other module works on the
dataclasses defined here:

- :class:`RunFacts`: what the scorer needs of one run as a whole (workload, stored SLOs,
  required features, the model's sizes, the hardware it was measured on, the client
  calibration, :class:`ClientCalibration`);
- :class:`EngineRuns`: one engine over all runs (statuses, declared :class:`Capabilities`,
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
from typing import Any, Sequence

from harness.metrics import SLO, slo_percentile_value
from results.features import FEATURES
from results.hardware import HardwareProfile, profile_from_manifest
from results.schema import EngineResult, EngineStatus, FeatureProbe, Metrics, RequestRecord
from results.store import Run

from .operational import OperationalRecord

Condition = tuple[str, float]
"""(workload name, offered rate in requests/s — sessions/s for agentic; math.inf = no rate limit)."""

SUMMARY_METRIC_PATHS: dict[str, str] = {
    "output_throughput": "output_throughput",
    "request_throughput": "request_throughput",
    "ttft_p50_ms": "ttft_ms.p50",
    "ttft_p99_ms": "ttft_ms.p99",
    "tpot_p50_ms": "tpot_ms.p50",
    "tpot_p99_ms": "tpot_ms.p99",
    "itl_p99_ms": "itl_ms.p99",
    "e2el_p99_ms": "e2el_ms.p99",
}
"""Scoring metric (as named in ``RankedEngine.metrics``) → its path in a summary's metrics."""


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
class Capabilities:
    """What an engine's adapter declared (``adapters.base.Capabilities``), as recorded.

    Declared, never verified: the scorer uses it only for the declared hard constraints
    (hardware kind; required features no probe covers, or of an engine without probe results,
    :mod:`.features`) and lists the features as "declared, unverified". The
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

    ``values``: the scoring metrics keyed as in :data:`SUMMARY_METRIC_PATHS` (``*_ms`` in ms,
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
            if slo.metric == "tpot" and not self.requests_failed:
                return 0.0  # only 1-token replies: TPOT is undefined and cannot be violated (meets_slos)
            return math.inf
        return float(value)


@dataclass
class EngineRuns:
    """One engine over all runs: a (status, reason) per run and its successful measurements."""

    name: str
    display_name: str
    statuses: list[tuple[str, str]] = field(default_factory=list)
    capabilities: Capabilities | None = None  # None = not recorded
    measurements: list[Measurement] = field(default_factory=list)
    imported_from: str | None = None  # another tool's measurement (``bench import``): its label, e.g. "vllm bench serve"
    operations: list[OperationalRecord] = field(default_factory=list)  # one per run where it was measured
    feature_probes: list[dict[str, FeatureProbe]] = field(default_factory=list)  # one per run that probed it

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
        # the typed artefacts, read here as their JSON form (the one shape this module parses)
        summary = run.summary.model_dump(mode="json")
        manifest = run.manifest.model_dump(mode="json")
        facts = _run_facts(run, summary, manifest)
        run_facts.append(facts)
        for name, entry in (summary.get("engines") or {}).items():
            entry = entry or {}
            if entry.get("status") == EngineStatus.NOT_MEASURED.value:
                entry["status"] = "skipped"  # listed with the skipped engines, as before
            engine = engines.setdefault(name, EngineRuns(name, str(entry.get("display_name") or name)))
            if entry.get("display_name"):
                engine.display_name = str(entry["display_name"])
            status = str(entry.get("status", "unknown"))
            engine.statuses.append((status, str(entry.get("reason") or "")))
            if isinstance(manifest.get("imported_from"), dict):
                provenance = manifest["imported_from"]
                engine.imported_from = str(provenance.get("label") or provenance.get("tool") or "another tool")
            if entry.get("capabilities"):
                engine.capabilities = _capabilities(entry["capabilities"])
            if run.summary.engines[name].feature_probes:
                engine.feature_probes.append(dict(run.summary.engines[name].feature_probes))
            metrics = entry.get("metrics") or {}
            if status == "ok" and metrics.get("requests_completed"):
                engine.measurements.extend(_measurements(facts, entry, run.records_for(name), run.summary.engines[name]))
                effective = (manifest.get("engines") or {}).get(name) or {}
                engine.operations.append(_operational(run.run_id, entry, effective))
    return Gathered(run_facts, engines)


def _run_facts(run: Run, summary: dict[str, Any], manifest: dict[str, Any]) -> RunFacts:
    workload_spec = manifest.get("workload") or {}
    model = manifest.get("model") or {}
    max_concurrency = workload_spec.get("max_concurrency")
    return RunFacts(
        run_id=run.run_id,
        workload=str(summary.get("workload") or workload_spec.get("name") or "unknown"),
        slos=summary.get("slos") or {},
        required_features=tuple(str(feature).lower() for feature in workload_spec.get("required_features") or []),
        model=ModelFacts(
            num_params=model.get("num_params"),
            num_layers=model.get("num_layers"),
            num_kv_heads=model.get("num_kv_heads"),
            head_dim=model.get("head_dim"),
            dtype=str(model.get("dtype") or ""),
        ),
        max_concurrency=int(max_concurrency) if max_concurrency else None,
        measured_on=profile_from_manifest(manifest.get("hardware")),
        client_calibration=_calibration(manifest.get("client_calibration"), manifest.get("client_workers")),
    )


def _calibration(stored: Any, workers: Any = None) -> ClientCalibration:
    """The manifest's ``client_calibration``: None/absent → not recorded; ``{"error": ...}`` →
    the failure; otherwise its numbers (a missing or non-finite one stays None), with the
    worker count of its ``client_workers`` (absent or not a positive integer: 1)."""
    if not isinstance(stored, dict) or not stored:
        return ClientCalibration()
    if stored.get("error"):
        return ClientCalibration(recorded=True, error=str(stored["error"]))
    return ClientCalibration(
        recorded=True,
        max_rate_rps=_first_number(stored, "max_rate_rps"),
        itl_error_ms_p99=_first_number(stored, "itl_error_ms_p99"),
        stream_gap_ms=_first_number(stored, "stream_gap_ms"),
        stream_concurrency=_first_number(stored, "stream_concurrency"),
        overhead_ms_p99=_first_number(stored, "overhead_ms_p99"),
        workers=_worker_count(workers),
    )


def _worker_count(stored: Any) -> int:
    count = stored.get("count") if isinstance(stored, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else 1


def _operational(run_id: str, entry: dict[str, Any], effective: dict[str, Any]) -> OperationalRecord:
    """The operational facts of one engine in one run: the summary entry's start-up, the
    manifest's effective configuration for the rest."""
    processes = effective.get("processes")
    parallel = entry.get("startup_parallel")
    return OperationalRecord(
        run_id=run_id,
        startup_s=_first_number(entry, "startup_s"),
        startup_parallel=parallel if isinstance(parallel, bool) else None,
        processes=int(processes) if isinstance(processes, int) and not isinstance(processes, bool) else None,
        install_s=_first_number(effective, "install_s"),
        install_bytes=int(size) if (size := _first_number(effective, "install_bytes")) is not None else None,
        external=bool(effective.get("base_url")),
    )


def _capabilities(declared: dict[str, Any]) -> Capabilities:
    return Capabilities(
        hardware=tuple(str(kind).lower() for kind in declared.get("hardware") or []),
        features=tuple(declared.get("features") or []),
        quantization=tuple(declared.get("quantization") or []),
    )


def _measurements(run: RunFacts, entry: dict[str, Any], records: list[RequestRecord],
                  typed: EngineResult) -> list[Measurement]:
    """One engine's measurements in one run: one per repeat when the run has ≥ 2 (each repeat's
    metrics with its own records; a repeat where every request failed stays in, as a repeat
    that misses every SLO), else the run's metrics."""
    engine_metrics = entry.get("engine_metrics") or {}
    if len(typed.repeats) < 2:
        return [_measurement(run, entry.get("metrics") or {}, engine_metrics, records, typed.metrics)]
    return [
        _measurement(run, metrics.model_dump(mode="json"), engine_metrics,
                     [record for record in records if record.repeat == index], metrics, repeat=index)
        for index, metrics in enumerate(typed.repeats)
    ]


def _measurement(
    run: RunFacts, metrics: dict[str, Any], engine_metrics: dict[str, Any], records: list[RequestRecord],
    typed_metrics: Metrics | None, repeat: int = 0,
) -> Measurement:
    rate = metrics.get("offered_rate")
    goodput = metrics.get("goodput") or {}
    return Measurement(
        run=run,
        offered_rate=float(rate) if rate else math.inf,
        records=records,
        values={key: _number_at(metrics, path) for key, path in SUMMARY_METRIC_PATHS.items()},
        requests_completed=metrics.get("requests_completed") or 0,
        requests_failed=metrics.get("requests_failed") or 0,
        duration_s=metrics.get("duration_s") or 0.0,
        recorded_offered_rate=rate,
        achieved_rate=metrics.get("achieved_rate"),
        rate_valid=metrics.get("rate_valid"),
        stored_goodput_slos=goodput.get("slos"),
        stored_request_goodput=goodput.get("request_goodput"),
        prefix_cache_hit_rate=_first_number(engine_metrics, "prefix_cache_hit_rate"),
        spec_acceptance_rate=_first_number(engine_metrics, "spec_acceptance_rate", "spec_decode_acceptance_rate"),
        _summary_metrics=typed_metrics,
        repeat=repeat,
        itl_p50_ms=_number_at(metrics, "itl_ms.p50"),
    )


def _number_at(tree: dict[str, Any], path: str) -> float | None:
    """The number at the dotted ``path`` of nested dicts; None when absent or not a number."""
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def _first_number(counters: dict[str, Any], *names: str) -> float | None:
    """The first of ``names`` that holds a finite number."""
    for name in names:
        value = counters.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None
