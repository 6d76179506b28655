"""The recorded sections of ``manifest.json``: the hardware (:class:`HardwareFacts`), the client
calibration (:class:`CalibrationFacts`), the workload statistics (:class:`WorkloadStats`), each
engine's entry (:class:`EngineFacts`, with its Ray trials, :class:`RayTrial`) and a capacity
search's settings (:class:`SearchFacts`).

Each is a :class:`Facts`: its known keys are typed fields (None when a run did not record
them, as ``dict.get`` read them before), and it is written back with exactly the keys it was
given, read from the file or set in code. So a stored section round-trips key for key, a run
that never recorded a key is not given one (``null``) on the way back, and a new run writes the
keys the dicts these models replace wrote. Keys this version does not know (an older or newer
harness's, an adapter's own configuration) are kept as extra fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from .base import Artefact


class Facts(Artefact):
    """A recorded section of ``manifest.json`` (module docstring): typed known keys, unknown ones
    kept (``extra="allow"``), serialised with only the keys it was given (``model_fields_set``:
    read from the file, passed to the constructor or assigned since), in the order they were
    given (keys assigned later follow)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())

    _order: list[str] = PrivateAttr(default_factory=list)  # the keys as they were given, in order

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ModelWrapValidatorHandler[Facts]) -> Facts:
        model = handler(data)
        if isinstance(data, dict):
            model._order = list(data)
        return model

    @model_serializer(mode="wrap")
    def _given_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data, given = handler(self), self.model_fields_set
        keys = [k for k in self._order if k in given] + [k for k in data if k in given and k not in self._order]
        return {k: data[k] for k in keys if k in data}

    @property
    def recorded(self) -> bool:
        """Any key was given (an empty section reads as "not recorded")."""
        return bool(self.model_fields_set)


class HardwareFacts(Facts):
    """``manifest.json``'s ``hardware``: the :class:`results.hardware.HardwareProfile` a run was
    measured on, as ``HardwareProfile.to_dict()`` stores it (``memory_bytes`` per device, bytes;
    ``compute_capability`` as ``[major, minor]``; ``bandwidth_bytes_per_s`` in bytes/s;
    ``price_per_hour`` USD per device-hour; ``total_memory_bytes`` = ``memory_bytes ×
    num_devices``). ``cpu_model``, ``cpu_count`` and ``gpus`` (dicts with ``name``,
    ``memory_bytes``, ``compute_capability``, or names) are the older form
    :func:`results.hardware.profile_from_manifest` still reads."""

    name: str | None = None
    kind: str | None = None
    memory_bytes: int | None = None
    num_devices: int | None = None
    compute_capability: list[int] | None = None
    supports_fp8: bool | None = None
    bandwidth_bytes_per_s: float | None = None
    source: str | None = None
    price_per_hour: float | None = None
    price_source: str | None = None
    total_memory_bytes: int | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    gpus: list[dict[str, Any] | str] | None = None


class CalibrationFacts(Facts):
    """``manifest.json``'s ``client_calibration``: what ``harness.loadgen.calibrate.calibrate``
    measured against a local null server (``overhead_ms_*``: the client's own TTFT, ms;
    ``max_rate_rps``: one-token requests/s it completed with ``burst_concurrency`` of
    ``burst_requests`` in flight; ``itl_error_ms_*``: |measured ITL − scripted gap| over
    ``stream_concurrency`` streams ``stream_gap_ms`` apart, ms), or only ``error`` (its message)
    when the calibration failed."""

    overhead_ms_median: float | None = None
    overhead_ms_p99: float | None = None
    max_rate_rps: float | None = None
    burst_requests: int | None = None
    burst_concurrency: int | None = None
    stream_concurrency: int | None = None
    stream_gap_ms: float | None = None
    itl_error_ms_median: float | None = None
    itl_error_ms_p99: float | None = None
    itl_error_ms_max: float | None = None
    error: str | None = None


class Spread(Facts):
    """A distribution of the workload statistics (``workloads.stats.distribution``): mean, p50,
    p90, max (turns per session: no p90, an integer max)."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    max: int | float | None = None


class WorkloadStats(Facts):
    """``manifest.json``'s ``workload_stats``: the offered workload's statistics
    (``workloads.stats.workload_stats``, keys described there) plus the workload's finite
    ``offered_rate`` / ``requested_rate``. An infinite rate is stored as the string ``"inf"``
    (``workloads.registry``), hence ``float | str``. ``note``: what the statistics rest on."""

    requests: int | None = None
    sessions: int | None = None
    turns: int | None = None
    turns_per_session: Spread | None = None
    branching_sessions: int | None = None
    input_tokens: Spread | None = None
    output_tokens: Spread | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    prefix_reuse_ratio: float | None = None
    offered_rate: float | str | None = None
    offered_request_rate: float | str | None = None
    offered_duration_s: float | None = None
    requested_rate: float | str | None = None
    note: str | None = None


class RayTrial(Facts):
    """Where one trial of an engine ran under ``--executor ray`` (``harness.app.executors``):
    its repeat (0-based), host name, IP, Ray node id and the worker's pid."""

    repeat: int | None = None
    hostname: str | None = None
    ip: str | None = None
    node_id: str | None = None
    pid: int | None = None


class EngineFacts(Facts):
    """One engine's entry in ``manifest.json``'s ``engines``, flat as it is stored.

    What the harness records of the engine's session: ``display_name``, ``startup_s`` (s to
    healthy), ``startup_parallel`` (started alongside others), the install facts
    (``adapters.runtime.resources.install_facts``: ``install_bytes`` of ``install_dir``, or
    ``install_note`` saying why not; ``install_s`` when known) and, under ``--executor ray``,
    ``ray_trials``. Then the adapter's effective configuration (``adapters.base.Endpoint
    .effective_config``): the keys every launched server reports (``engine``, ``version``, the
    ``command`` line and its ``argv``, ``env`` set on top of the inherited one, ``threads``,
    ``engine_args``, ``port``, ``processes`` in its group once healthy), an external endpoint's
    (``base_url``, ``model``, ``api_key``, ``served_models``); a run imported by ``bench import``
    has ``imported_from`` (the tool) and ``file``. Anything else an adapter adds to its
    configuration (``hardware``, ``batching``, ``max_batch_size``, ...), or an imported tool's
    run settings, is kept as an extra field: :meth:`adapter_config` lists those.
    """

    display_name: str | None = None
    startup_s: float | None = None
    startup_parallel: bool | None = None
    engine: str | None = None
    version: str | None = None
    command: str | None = None
    argv: list[str] | None = None
    env: dict[str, Any] | None = None
    threads: int | None = None
    engine_args: dict[str, Any] | None = None
    port: int | None = None
    processes: int | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    served_models: list[str] | None = None
    install_bytes: int | None = None
    install_dir: str | None = None
    install_note: str | None = None
    install_s: float | None = None
    ray_trials: list[RayTrial] | None = None
    imported_from: str | None = None
    file: str | None = None

    def adapter_config(self) -> dict[str, Any]:
        """The entry's keys no field names: the rest of the adapter's effective configuration
        (or an imported tool's run settings)."""
        return dict(self.model_extra or {})

    def merged(self, newer: EngineFacts) -> EngineFacts:
        """This entry with ``newer``'s keys laid over it (a key ``newer`` was given replaces this
        one's; the others stay)."""
        return EngineFacts.model_validate({**self.model_dump(), **newer.model_dump()})


class SearchFacts(Facts):
    """``manifest.json``'s ``search`` (``bench search`` runs only): what the capacity search was
    asked for. ``search_var``: ``rate`` or ``concurrency``, in ``unit``; ``low`` / ``high`` the
    bounds (``high`` None = unbounded doubling); ``tolerance``: the relative width at which
    the bisection stops; ``budget_s`` for the whole search and ``budget_per_engine_s`` each (s);
    ``max_probes`` per engine; ``repeats`` per probe; ``seeds``: how probes draw their seeds;
    ``slos_default``: the SLOs were the hardware kind's defaults (no ``--slo``)."""

    search_var: str | None = None
    unit: str | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float | None = None
    budget_s: float | None = None
    budget_per_engine_s: float | None = None
    max_probes: int | None = None
    repeats: int | None = None
    seeds: str | None = None
    slos_default: bool | None = None

