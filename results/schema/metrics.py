"""One engine's numbers under one condition: :class:`Metrics` and its parts, the
:class:`Interval` a headline number is stored with, and :func:`metric_value` that reads a number
of a :class:`Metrics` by its dotted path.

``harness.metrics.compute_metrics`` returns a :class:`Metrics`; units are in the field names.
Nothing here computes a metric.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from pydantic import ConfigDict, Field, model_validator

from .base import Artefact
from .metric_registry import Metric, metric as registered_metric, metrics as registered_metrics


class Distribution(Artefact):
    """mean, median, std (population), p50..p99.9 (numpy linear), max of one metric, in the
    metric's unit (ms for latencies). ``None`` = no value (empty input), or infinite in an
    error-adjusted distribution."""

    mean: float | None = None
    median: float | None = None
    std: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    max: float | None = None

    def percentile(self, name: str) -> float | None:
        """The stored statistic ``name`` (``"p99"``, ``"p99_9"``, ``"max"``, ...)."""
        return getattr(self, name)


class _Registered(Artefact):
    """A model that also stores the registered metrics (:mod:`results.schema.metric_registry`)
    it has no field for, under their keys (:meth:`_key`), as extra keys after its fields: a
    metric registered later is stored, serialised and read back without a schema change. Other
    unknown keys are dropped, as in every artefact."""

    model_config = ConfigDict(extra="allow")
    _key: ClassVar[Callable[[Metric], str | None]] = staticmethod(lambda m: None)
    _read: ClassVar[Callable[[Any], Any]] = staticmethod(lambda v: v)

    @model_validator(mode="before")
    @classmethod
    def _registered_only(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        keys = {k for m in registered_metrics() if (k := cls._key(m)) is not None and k not in cls.model_fields}
        return {k: (cls._read(v) if k in keys else v) for k, v in data.items() if k in cls.model_fields or k in keys}

    def __getitem__(self, key: str) -> Any:
        if key in (self.__pydantic_extra__ or {}):
            return self.__pydantic_extra__[key]  # type: ignore[index]
        return super().__getitem__(key)


def _field(name: str) -> str:
    """The stored field of the metric ``name`` (``Metric.field``: ``"ttft_ms"``); ``name_ms`` for a
    name no metric is registered under (an AttributeError follows, as for any unknown field)."""
    try:
        return registered_metric(name).field
    except KeyError:
        return f"{name}_ms"


def _distribution(value: Any) -> Any:
    return value if isinstance(value, Distribution) else Distribution.model_validate(value or {})


class ErrorAdjusted(_Registered):
    """Distributions where every failed request counts as +inf latency (ms): one per metric
    whose failures count as +inf (``Metric.failures == "inf"``)."""

    _key = staticmethod(lambda m: m.field if m.failures == "inf" else None)
    _read = staticmethod(_distribution)

    ttft_ms: Distribution = Field(default_factory=Distribution)
    e2el_ms: Distribution = Field(default_factory=Distribution)

    def distribution(self, metric: str) -> Distribution:
        """``"ttft"`` or ``"e2el"`` → its error-adjusted distribution (its registered ``field``)."""
        return getattr(self, _field(metric))


class TokenDrift(Artefact):
    """Server usage vs one re-tokenization pass (tokens; ``*_rel_diff_mean`` a fraction)."""

    requests_compared: int = 0
    output_mismatched: int = 0
    output_abs_diff_mean: float | None = None
    output_abs_diff_max: int | None = None
    output_rel_diff_mean: float | None = None
    input_mismatched: int = 0
    input_abs_diff_mean: float | None = None
    input_abs_diff_max: int | None = None
    input_rel_diff_mean: float | None = None
    output_estimated: int = 0


class SessionMetrics(Artefact):
    """Multi-turn sessions: count, fully successful ones, their completion time (ms);
    ``aborted_turns``: turns never sent because an earlier turn of their session failed (None =
    not counted: the planned turns were not known, e.g. an older run)."""

    sessions: int = 0
    completed: int = 0
    aborted_turns: int | None = None
    requests_per_session_mean: float | None = None
    completion_time_ms: Distribution = Field(default_factory=Distribution)


class TurnMetrics(Artefact):
    """One turn index of multi-turn sessions (successful requests)."""

    requests: int = 0
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    input_tokens_mean: float | None = None
    cached_tokens_mean: float | None = None


class Goodput(Artefact):
    """Requests/s that succeed and meet every SLO (DistServe); attainment = good / all sent."""

    request_goodput: float | None = None
    good_requests: int = 0
    slo_attainment: float | None = None
    slos: dict[str, float] = Field(default_factory=dict)


class Samples(_Registered):
    """Per-request values (ms) behind the report's CDFs: successful measured requests; ITL pooled.
    Sorted; above :data:`MAX_SAMPLES` values a metric keeps that many evenly spaced quantiles.
    One list per metric declared with ``cdf`` (by its name)."""

    _key = staticmethod(lambda m: m.name if m.cdf else None)
    _read = staticmethod(lambda v: [float(x) for x in v or []])

    ttft: list[float] = Field(default_factory=list)
    tpot: list[float] = Field(default_factory=list)
    itl: list[float] = Field(default_factory=list)
    e2el: list[float] = Field(default_factory=list)


MAX_SAMPLES = 1001


class OutputShortfall(Artefact):
    """Replies that ended with ``finish_reason: "stop"`` well short of ``max_tokens`` although
    ``ignore_eos`` was sent (``harness.metrics.summary.output_shortfall``): the endpoint did not
    honour it, so its requests did less work than other engines'. ``checked``: successful
    requests sent with ``ignore_eos`` and a known output count; ``requests``: the short ones;
    ``tokens_missing``: their ``max_tokens - output_tokens`` summed (tokens)."""

    checked: int = 0
    requests: int = 0
    tokens_missing: int = 0


class RunWindow(Artefact):
    """A duration-based run's limits and what they left out of the metrics (``bench run
    --duration``): ``duration_s`` sending time and ``drain_timeout_s`` the wait after it (s);
    ``warmup_s`` / ``cooldown_s`` the windows (s) whose requests (``warmup_requests`` /
    ``cooldown_requests``, by send time) are stored but not measured; ``requests``: every
    request sent, windows included. None fields: not recorded (metrics rebuilt from records)."""

    duration_s: float | None = None
    drain_timeout_s: float | None = None
    warmup_s: float | None = None
    cooldown_s: float | None = None
    warmup_requests: int = 0
    cooldown_requests: int = 0
    requests: int = 0

    @property
    def excluded(self) -> int:
        """Requests the windows kept out of the metrics."""
        return self.warmup_requests + self.cooldown_requests

    def limits_text(self) -> str:
        """``"duration 60 s, drain bound 30 s"`` (what was recorded)."""
        parts = [f"duration {self.duration_s:g} s" if self.duration_s is not None else None,
                 f"drain bound {self.drain_timeout_s:g} s" if self.drain_timeout_s is not None else None]
        return ", ".join(p for p in parts if p) or "duration not recorded"

    def excluded_text(self) -> str | None:
        """``"metrics exclude the first 10 s and the last 5 s: 37 of 412 requests"``; None when
        the run had no window (the seconds read "a window" where they were not recorded)."""
        windows = [f"the {edge} {s:g} s" for edge, s in (("first", self.warmup_s), ("last", self.cooldown_s)) if s]
        if not windows and not self.excluded:
            return None
        where = " and ".join(windows) or "the warm-up and cool-down windows"
        return f"metrics exclude {where}: {self.excluded:,} of {self.requests:,} requests"


class Metrics(_Registered):
    """One engine's numbers under one condition (``harness.metrics`` defines each).

    Every registered metric (:mod:`results.schema.metric_registry`) has its :class:`Distribution`
    under its field (``ttft_ms``): the metrics declared before the registry are fields here (their
    place in ``summary.json`` is fixed), a metric registered since is stored after the fields.

    Units: ``*_ms`` ms, ``*_throughput`` tokens/s (``request_throughput`` requests/s),
    ``duration_s`` s, rates requests/s (sessions/s for agentic first turns).
    ``requested_rate``: the rate asked for (None = no rate limit, or a run from before it was
    recorded); ``offered_rate``: the rate the start schedule offers, which the achieved one is
    checked against (equal to the requested rate since drawn schedules are rescaled to it;
    older runs hold the raw draw's rate there); ``achieved_rate``: first sends,
    ``(n-1) / (last - first)``. ``peak_output_throughput``: tokens/s in the busiest ~1-s
    bucket of chunk arrival, tokens not chunks (``harness.metrics.summary.peak_output_throughput``).
    ``connections_opened``: requests that set up a new connection; ``connect_ms`` their set-up
    time (DNS + TCP + TLS, excluded from TTFT/E2E). ``requests_incomplete``: requests a
    duration-based run cancelled at its drain bound (:data:`INCOMPLETE`: not completed, not
    failed, in no latency); ``run_window``: that run's limits and windows (None = count-based).
    """

    requests_sent: int = 0
    requests_completed: int = 0
    requests_failed: int = 0
    requests_incomplete: int = 0
    run_window: RunWindow | None = None
    duration_s: float = 0.0
    request_throughput: float | None = None
    output_throughput: float | None = None
    input_throughput: float | None = None
    total_token_throughput: float | None = None
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    ttft_ms: Distribution = Field(default_factory=Distribution)
    ttft_from_scheduled_ms: Distribution = Field(default_factory=Distribution)
    tpot_ms: Distribution = Field(default_factory=Distribution)
    itl_ms: Distribution = Field(default_factory=Distribution)
    e2el_ms: Distribution = Field(default_factory=Distribution)
    e2el_from_scheduled_ms: Distribution = Field(default_factory=Distribution)
    ttfat_ms: Distribution = Field(default_factory=Distribution)
    connect_ms: Distribution = Field(default_factory=Distribution)
    connections_opened: int = 0
    peak_output_throughput: float | None = None
    output_shortfall: OutputShortfall = Field(default_factory=OutputShortfall)
    error_adjusted: ErrorAdjusted = Field(default_factory=ErrorAdjusted)
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    error_examples: dict[str, str] = Field(default_factory=dict)  # error class → its first message (the server's words)
    cached_tokens: int = 0
    token_drift: TokenDrift = Field(default_factory=TokenDrift)
    offered_rate: float | None = None
    achieved_rate: float | None = None
    rate_valid: bool | None = None
    requested_rate: float | None = None
    sessions: SessionMetrics | None = None
    per_turn: dict[str, TurnMetrics] | None = None
    goodput: Goodput | None = None
    samples_ms: Samples | None = None

    _key = staticmethod(lambda m: m.field)
    _read = staticmethod(_distribution)

    def distribution(self, metric: str) -> Distribution:
        """``"ttft"`` → :attr:`ttft_ms` etc. (its registered ``field``: the name alone for a unit
        other than ms). Raises AttributeError for an unknown metric."""
        return getattr(self, _field(metric))


def metric_value(metrics: Metrics, path: str) -> Any:
    """The value of ``metrics`` at the dotted attribute ``path`` (``"ttft_ms.p99"``,
    ``"goodput.request_goodput"``, ``"output_throughput"``: the keys of ``EngineResult.intervals``,
    the CSV export's headline paths, the reports' columns); None where a part is absent or None."""
    node: Any = metrics
    for part in path.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


def metric_number(metrics: Metrics, path: str) -> float | None:
    """:func:`metric_value` as a float; None where it is absent or not a number (a bool, a model)."""
    value = metric_value(metrics, path)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class Interval(Artefact):
    """A headline number with its 95 % confidence interval (``harness.metrics.intervals``).

    ``point``: the statistic (requests pooled over repeats; for rates the median over
    repeats); ``low``/``high``: the interval (equal to ``point`` when none could be formed);
    ``n``: repeats (``basis`` "repeats") or requests (``basis`` "requests"); ``method``: how
    it was formed, in words; ``cv``: coefficient of variation (over repeats when basis is
    repeats), None when undefined. Units: those of the metric (ms, tokens/s, requests/s).
    """

    point: float
    low: float
    high: float
    n: int
    confidence: float = 0.95
    method: str = ""
    basis: str = "requests"
    cv: float | None = None
