"""One engine's entry in ``summary.json``: :class:`EngineResult` with its status, skip cause,
feature probes, resource use and cost."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field, field_serializer, field_validator

from .base import Artefact
from .energy import PhaseEnergy
from .metrics import Interval, Metrics
from .parity import EffectiveSettings


class EngineStatus(str, Enum):
    """How an engine's turn in a run ended."""

    OK = "ok"  # measured, at least one request succeeded
    FAILED = "failed"  # failed to install/start/stay up, or no request succeeded
    INTERRUPTED = "interrupted"  # the run was interrupted (Ctrl-C, SIGTERM) during its turn; what it measured is kept
    SKIPPED = "skipped"  # the probe said it cannot run here (reason: why, and the fix)
    NOT_MEASURED = "not_measured"  # runnable, but the run ended (Ctrl-C) before its turn


class SkipCause(str, Enum):
    """Why a probe said no, as data (reports and the scorer branch on this, never on prose)."""

    HARDWARE = "hardware"  # needs hardware this machine does not have
    NOT_INSTALLED = "not_installed"
    UNAVAILABLE = "unavailable"  # anything else (bad configuration, missing endpoint)


FEATURE_PROBES: tuple[str, ...] = ("structured_output", "tool_calling", "n_best", "stop", "logprobs", "max_context")
"""The serving features a feature probe exercises (``harness.loadgen.features``), in report
order. ``structured_output`` is also a declared adapter feature (``adapters.base.FEATURES``);
the others exist only as probes: ``tool_calling`` (``tools`` → a ``tool_calls`` reply),
``n_best`` (``n`` > 1 choices), ``stop`` (stop strings), ``logprobs``, ``max_context`` (a prompt
near the model's maximum length)."""


class FeatureStatus(str, Enum):
    """A feature probe's verdict."""

    VERIFIED = "verified"  # the reply did what the feature promises (checked, not just accepted)
    FAILED = "failed"  # an error (5xx, timeout, a 4xx that is not "unsupported") or a wrong reply
    UNSUPPORTED = "unsupported"  # the server rejected the field with a 4xx saying it is not supported


class FeatureProbe(Artefact):
    """One feature probe of one engine (``EngineResult.feature_probes``), run once per run after
    the engine's first measured phase and outside it (``harness.app.trial.feature_phase``).

    ``feature``: one of :data:`FEATURE_PROBES`; ``detail``: one line - what was verified, what
    was wrong, or the server's message; ``elapsed_ms``: the probe's wall time in ms (all of its
    requests)."""

    feature: str
    status: FeatureStatus
    detail: str = ""
    elapsed_ms: float | None = None


class ResourceUse(Artefact):
    """What an engine's process group used during its measured phase (``adapters.runtime.resources``).

    Sampled every ``interval_s`` (s) over every process of the server's process group:
    ``peak_rss_bytes`` / ``mean_rss_bytes``: resident set size summed over the group (bytes;
    RSS counts a page shared by several processes once per process, so it over-counts a forked
    server); ``peak_pss_bytes`` / ``mean_pss_bytes``: proportional set size summed over the group
    (each shared page split between its sharers: the group's real footprint; None where
    ``/proc/<pid>/smaps_rollup`` could not be read); ``mean_cpu_percent`` / ``peak_cpu_percent``:
    CPU time of the group per wall time between samples, in % of one core (200 = two cores
    busy); ``cpu_cores``: the cores the machine offers this process (``mean_cpu_percent /
    cpu_cores`` is the machine share); ``samples``: how many; ``sampler_ms_mean``: the
    sampler's own time per sample (ms, in a thread of the harness, never on the event loop).

    NVIDIA only (NVML, ``nvidia-ml-py``), None elsewhere: ``peak_gpu_memory_bytes`` /
    ``mean_gpu_memory_bytes`` (the group's processes, or the devices' used memory where NVML
    shows no process of the group), ``mean_gpu_util_percent`` / ``peak_gpu_util_percent``
    (device utilisation, %), ``gpu_energy_j`` (J, the devices' total-energy counter over the
    phase) and ``energy_per_output_token_j`` (J per output token of the phase); ``gpu_note``
    says why they are missing ("no NVIDIA driver / NVML: …"). ``note``: why nothing was measured
    ("not measured (external endpoint)"), or a caveat. With ``--repeats N`` the engine's entry holds
    the peak over repeats and the mean of the repeats' means, each repeat in ``repeats``.
    ``energy``: the phase's energy by the run's source (NVML or RAPL; its reason when none,
    :class:`~results.schema.energy.PhaseEnergy`; None: a run from before it was read), which
    ``energy_per_output_token_j`` then divides.
    """

    interval_s: float = 0.5
    samples: int = 0
    duration_s: float | None = None
    peak_rss_bytes: int | None = None
    mean_rss_bytes: int | None = None
    peak_pss_bytes: int | None = None
    mean_pss_bytes: int | None = None
    mean_cpu_percent: float | None = None
    peak_cpu_percent: float | None = None
    cpu_cores: int | None = None
    processes_max: int | None = None
    sampler_ms_mean: float | None = None
    peak_gpu_memory_bytes: int | None = None
    mean_gpu_memory_bytes: int | None = None
    mean_gpu_util_percent: float | None = None
    peak_gpu_util_percent: float | None = None
    gpu_energy_j: float | None = None
    energy_per_output_token_j: float | None = None
    gpu_note: str = ""
    note: str = ""
    energy: PhaseEnergy | None = None
    repeats: list["ResourceUse"] = Field(default_factory=list)


class Cost(Artefact):
    """What one engine's measured output costs on the hardware it ran on.

    ``usd_per_1m_output_tokens = usd_per_hour / (output tok/s × 3600) × 1e6``
    (``adapters.telemetry.hardware.cost_per_million_tokens``) from the measured output throughput;
    ``low`` / ``high``: the same from the high / low end of that throughput's interval (equal to
    the point when the run formed none); ``usd_per_hour``: the price of the devices measured on
    (USD per device-hour × devices), ``price_source``: where the price came from.
    """

    usd_per_hour: float
    price_source: str = ""
    output_tokens_per_s: float
    usd_per_1m_output_tokens: float
    low: float | None = None
    high: float | None = None


class EngineResult(Artefact):
    """One engine's entry in ``summary.json``.

    With ``--repeats N`` (N ≥ 2): ``metrics`` is pooled over the repeats (distributions over
    every request of every repeat; rates over the summed measured time), ``repeats`` holds
    each repeat's own metrics in repeat order, and ``intervals`` the headline numbers with
    their confidence intervals (also for one repeat, over requests, where that is possible).
    """

    model_config = ConfigDict(use_enum_values=False)

    status: EngineStatus
    reason: str = ""
    skip_cause: SkipCause | None = None
    display_name: str | None = None
    version: str | None = None
    capabilities: dict[str, Any] = Field(default_factory=dict)  # declared by the adapter, never scored as fact
    # verified by a request, by feature ({} = not probed: --no-feature-probes, or an older run)
    feature_probes: dict[str, FeatureProbe] = Field(default_factory=dict)
    metrics: Metrics | None = None
    repeats: list[Metrics] = Field(default_factory=list)
    intervals: dict[str, Interval] = Field(default_factory=dict)
    engine_metrics: dict[str, Any] = Field(default_factory=dict)  # the engine's own /metrics counters
    wall_s: float | None = None
    startup_s: float | None = None
    ladder_point: int | None = None  # a ladder run: the point (LadderPoint.index) ``metrics`` were read at, over its steady state
    startup_parallel: bool | None = None
    effective: EffectiveSettings | None = None  # what the engine reported it runs with (None = not read: an older run)
    log_tail: str = ""
    resources: ResourceUse | None = None  # sampled during the measured phase (None = not sampled: an older run)
    cost: Cost | None = None  # None = no price for the hardware, or no output throughput

    @field_validator("metrics", mode="before")
    @classmethod
    def _empty_metrics(cls, v: Any) -> Any:
        return None if v == {} else v

    @property
    def shown_status(self) -> str:
        """The status for a table: ``"degraded"`` for an ok engine some of whose measured
        requests failed (under the scorer's reliability bound it is still ranked, its failures
        counted by the error-adjusted latencies; above it, eliminated), else the status value."""
        if self.status is EngineStatus.OK and self.metrics is not None and self.metrics.requests_failed:
            return "degraded"
        return self.status.value

    @field_serializer("metrics")
    def _metrics_out(self, v: Metrics | None) -> Any:
        return {} if v is None else v.model_dump(mode="json")  # "no metrics" is {} on disk (v1 shape)
