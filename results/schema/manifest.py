"""``manifest.json``: :class:`Manifest`, everything needed to reproduce and judge a run, and
its parts (model, validity, client workers, import provenance; the recorded sections, hardware,
calibration, workload statistics, engines and search settings, are in :mod:`.facts`)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from .base import SCHEMA_VERSION, Artefact
from .energy import EnergySource
from .facts import CalibrationFacts, EngineFacts, HardwareFacts, SearchFacts, WorkloadStats


class ModelSummary(Artefact):
    """The served model's architecture facts, read once from ``config.json``
    (``results.model_geometry.read_model_summary``), and its content ``digest``."""

    model_config = ConfigDict(protected_namespaces=())

    name: str | None = None
    path: str | None = None
    architecture: str | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    dtype: str | None = None
    num_params: int | None = None
    digest: str | None = None  # SHA-256 over the folder's files (results.model_digest): the weights, whatever the path

    @model_serializer(mode="wrap")
    def _omit_no_digest(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A manifest written before the digest was kept reads back as it was written (no key)."""
        out = handler(self)
        return {k: v for k, v in out.items() if not (k == "digest" and v is None)}


class Validity(Artefact):
    """Per engine: was the offered load achieved, and how were tokens counted
    (``requested_rate``: the rate asked for; None when not recorded)."""

    offered_rate: float | None = None
    achieved_rate: float | None = None
    rate_valid: bool | None = None
    requested_rate: float | None = None
    output_tokens_estimated: int = 0
    output_token_drift: float | None = None
    input_token_drift: float | None = None


class ImportProvenance(Artefact):
    """Where an imported run's numbers come from (``bench import``; ``manifest.json``'s
    ``imported_from``).

    ``tool``: "vllm", "sglang", "aiperf" or "guidellm"; ``label``: the tool's command as users
    know it ("vllm bench serve"); ``file``: the file read; ``version``: the tool's version when
    the file records it; ``entry``: which result of a file holding several (1-based) and
    ``entries`` how many it held; ``per_request``: the file carried per-request data.

    ``metrics``: one entry per metric of :class:`Metrics` (``ttft_ms``, ``output_throughput``,
    ...) saying how its value was obtained: ``"recomputed"`` (``harness.metrics`` over records
    rebuilt from the tool's per-request numbers, our definitions), ``"recomputed: ..."`` (the
    same, with what the tool's raw numbers still carry of its own definition), ``"copied: ..."``
    (the tool's summary value, under the tool's definition, which the text states) or
    ``"unavailable: ..."`` (the file holds nothing it could come from; left empty).
    ``tool_summary``: the tool's own headline numbers under its own definitions, keyed like our
    metrics (``ttft_ms.p99`` in ms, ``output_throughput`` in tokens/s, ``duration_s`` in s), for
    a side-by-side view. ``caveats``: further differences, one line each, citing the tool's
    source. ``config``: the tool's run settings as recorded in the file (backend, model, rate).
    """

    tool: str
    label: str
    file: str
    version: str | None = None
    entry: int = 1
    entries: int = 1
    per_request: bool = False
    metrics: dict[str, str] = Field(default_factory=dict)
    tool_summary: dict[str, float] = Field(default_factory=dict)
    caveats: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)

    def differing(self) -> dict[str, str]:
        """The metrics whose value is not plainly ours: copied, unavailable, or recomputed from
        raw numbers that still carry the tool's definition (metric → the text)."""
        return {k: v for k, v in self.metrics.items() if v != "recomputed"}


class ClientWorker(Artefact):
    """One client process of a measured phase (``bench run --client-workers N``,
    ``harness.loadgen.workers``). ``clock_offset_ns``: the worker's ``perf_counter_ns`` minus
    the driver's at the same instant, estimated from the driver ping with the shortest round
    trip (worker stamp − midpoint of the round trip); ``clock_offset_error_ns``: half that round
    trip, the estimate's bound. On one host CLOCK_MONOTONIC is shared, so the offset applied to
    the schedule is 0 (``clock_offset_applied`` False) and the estimate is only recorded.
    ``lost``: requests recorded as failed (``worker_lost``) because the worker exited before
    their record came back; ``exitcode``: the process's exit status (negative: killed by that
    signal; None: not recorded)."""

    index: int
    engine: str
    repeat: int = 0
    host: str
    pid: int | None = None
    sessions: int = 0
    records: int = 0
    lost: int = 0
    clock_offset_ns: int | None = None
    clock_offset_error_ns: int | None = None
    clock_offset_applied: bool = False
    exitcode: int | None = None


class ClientWorkers(Artefact):
    """``manifest.json``'s ``client_workers``: how many client processes measured each engine
    (``count``, the validity gate's client-rate rule allows ``count`` × the calibrated
    single-process maximum) and each one of every measured phase (``workers``)."""

    count: int = 1
    workers: list[ClientWorker] = Field(default_factory=list)


class MeasuredCondition(Artefact):
    """What a run's measured requests were offered: the inputs every summary of them needs
    (``harness.metrics.summarise.Condition``), kept so a killed run is summarised later with the
    same ones. ``offered_rate`` / ``requested_rate`` in requests/s (sessions/s for agentic; None
    = no open-loop target); ``planned_turns``: requests each session sends when every turn
    succeeds, by session id; ``timing``: a duration run's clock in s (``duration_s``,
    ``drain_timeout_s``, ``warmup_window_s``, ``cooldown_window_s``, ``start_offset_s``; None for
    a count-based run)."""

    offered_rate: float | None = None
    requested_rate: float | None = None
    planned_turns: dict[str, int] | None = None
    timing: dict[str, float] | None = None


class Manifest(Artefact):
    """``manifest.json``: everything needed to reproduce and judge a run. Every field is
    optional so partial and old runs load; ``engines`` holds each engine's facts and effective
    configuration as its adapter reported it (command line, env, options; :class:`EngineFacts`).

    Every key this harness writes, or once wrote, is a field; any other key is refused
    (``extra="forbid"``: a typo in a writer, or a key written by no version, fails loudly instead
    of riding along unread; :class:`results.store.ResultsError` on reading a folder). ``search``
    and ``export_error`` are written only when set (a plain run's manifest has neither key)."""

    model_config = ConfigDict(protected_namespaces=(), extra="forbid")

    schema_version: str = SCHEMA_VERSION
    run_id: str | None = None
    command: list[str] | None = None
    harness_version: str | None = None
    git_sha: str | None = None
    created_at: str | None = None
    python: str | None = None
    platform: str | None = None
    hardware: HardwareFacts | None = None  # results.hardware.HardwareProfile.to_facts()
    model: ModelSummary | None = None
    # the workload spec, seed and scale included: its keys depend on the workload kind and are
    # shaped by ``workloads.spec``, which ``results`` does not import, so it stays a dict
    workload: dict[str, Any] | None = None
    workload_stats: WorkloadStats | None = None
    condition: MeasuredCondition | None = None  # the summary's inputs (None: a run from before it was kept)
    seed: int | None = None
    slos: dict[str, float] = Field(default_factory=dict)
    threads: dict[str, int] = Field(default_factory=dict)
    engines: dict[str, EngineFacts] = Field(default_factory=dict)
    validity: dict[str, Validity] = Field(default_factory=dict)
    client_calibration: CalibrationFacts | None = None  # None: --no-calibration (or an older run)
    client_workers: ClientWorkers | None = None  # ``--client-workers N`` > 1 (None = one in-process client)
    metric_definitions: str | None = None
    imported_from: ImportProvenance | None = None  # set by ``bench import`` (None = measured by bench run)
    search: SearchFacts | None = None  # ``bench search`` runs only
    energy: EnergySource | None = None  # the energy source chosen before the engines started (None: an older run)
    export_error: str | None = None  # set when requests.parquet / summary.csv could not be written

    @field_validator("model", mode="before")
    @classmethod
    def _empty_model(cls, v: Any) -> Any:
        return None if v == {} else v

    @model_serializer(mode="wrap")
    def _omit_unset_optional(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if not (k in _WRITTEN_WHEN_SET and v is None)}


_WRITTEN_WHEN_SET = ("search", "export_error", "energy")
"""Manifest keys left out while None: newer than the others, and only some runs have them."""
