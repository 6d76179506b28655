"""Versioned result schema: the typed artefacts of a run folder.

One :class:`RequestRecord` per request (``requests.jsonl``), the :class:`RunSummary`
(``summary.json``: one :class:`EngineResult` per engine, each with its :class:`Metrics`) and the
:class:`Manifest` (``manifest.json``). The recommendation's models live in
``results.recommendation``. Stages hand these models to each other; nobody digs through dicts.

All timestamps are integers from ``time.perf_counter_ns()`` in the process that measured
them (nanoseconds, monotonic, arbitrary epoch): only differences are meaningful. The
metric module (``harness.metrics``) is the single place that turns records into
milliseconds and rates; nothing here computes a metric.

Bump :data:`SCHEMA_VERSION` whenever a field changes meaning or is removed; adding an
optional field keeps the version (old runs still load, the field reads as its default).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

SCHEMA_VERSION = "2.0"
"""2.0: typed summary/manifest/recommendation; engine status ``not_measured`` instead of a
"not measured:" prose prefix on ``skipped``; metrics carry ``samples_ms`` for the report's CDFs.
Version-1 run folders still load (``results.store.load_run`` upgrades them in memory)."""
READABLE_MAJOR_VERSIONS = ("1", "2")

INCOMPLETE = "incomplete"
"""``RequestRecord.error_class`` of a request a duration-based run cancelled when its drain bound
ran out (``harness.loadgen.runner``): neither ok nor failed, so the metrics count it apart
(``Metrics.requests_incomplete``) and keep it out of latencies and the failure rate."""
WINDOW_PHASES = ("warmup_window", "cooldown_window")
"""Phases of measured requests sent in a duration-based run's warm-up / cool-down window: stored,
never in metrics (like ``"warmup"``), counted in ``Metrics.run_window``."""


class RequestRecord(BaseModel):
    """What the client observed for one request (DESIGN.md, "Metric definitions").

    Times (``*_ns``) are ``perf_counter_ns`` values:

    - ``scheduled_ns``: when the arrival process wanted the request sent.
    - ``send_ns``: when the request was written (after the concurrency gate).
    - ``first_token_ns``: arrival of the first chunk carrying >= 1 generated token.
    - ``last_token_ns``: arrival of the last token-bearing chunk.
    - ``end_ns``: when the stream ended (``[DONE]``, EOF or error).
    - ``chunk_times_ns``: arrival of every token-bearing chunk, in order
      (``chunk_times_ns[0] == first_token_ns``, ``chunk_times_ns[-1] == last_token_ns``).
    - ``first_answer_ns``: arrival of the first chunk carrying answer text (content or tool
      calls, not ``reasoning_content``): equal to ``first_token_ns`` for a reply without
      reasoning text; None when no answer text came (or an older record).
    - ``connect_start_ns`` / ``connect_end_ns``: the new connection's set-up (DNS, TCP, TLS)
      before the request was written; both None when a pooled connection was reused
      (``connection_reused`` True) or for older records (``connection_reused`` None).

    ``send_ns`` is stamped when aiohttp has handed the request's last byte to the socket (a
    trace hook), so TTFT and E2E exclude connection set-up. ``ignore_eos_sent``: whether the
    body carried ``ignore_eos: true`` (None = older record).

    Token counts: ``*_tokens_server`` come from the server's ``usage`` object (None when the
    server sent none); ``*_tokens_retok`` from one tokenizer pass over the prompt / the whole
    generated text (None when no tokenizer was available).
    """

    schema_version: str = SCHEMA_VERSION
    request_id: str
    engine: str
    workload: str
    session_id: str | None = None
    turn_id: int | None = None
    branch_id: int | None = None
    phase: str = "measured"  # "warmup" and WINDOW_PHASES records are stored but never enter metrics
    repeat: int = 0  # which repeat of the run (``bench run --repeats N``: 0 … N-1) the request belongs to
    probe: int | None = None  # which probe point of a capacity search (``bench search``: 0, 1, …); None = not a search
    worker: int | None = None  # which client process sent it (``bench run --client-workers N``: 0 … N-1); None = the in-process client

    scheduled_ns: int
    send_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    end_ns: int | None = None
    chunk_times_ns: list[int] = Field(default_factory=list)
    # Generated-token count carried by each token-bearing chunk when the server reports it
    # per chunk (in-process engines); empty for SSE where only text is known.
    chunk_token_counts: list[int] = Field(default_factory=list)
    first_answer_ns: int | None = None
    connect_start_ns: int | None = None
    connect_end_ns: int | None = None
    connection_reused: bool | None = None
    ignore_eos_sent: bool | None = None

    input_tokens_expected: int | None = None  # what the workload asked for
    input_tokens_server: int | None = None
    cached_tokens_server: int | None = None
    output_tokens_server: int | None = None
    input_tokens_retok: int | None = None
    output_tokens_retok: int | None = None
    max_tokens: int | None = None

    output_text_len: int = 0  # characters of generated text (content + reasoning + tool calls)
    output_text: str | None = None  # kept only when the workload needs it (agentic replies)
    finish_reason: str | None = None
    success: bool = False
    # e.g. "http_500", "timeout", "stream_error", "connection", "no_token", "decode_error",
    # "incomplete_stream", "interrupted" (harness.loadgen.client lists them all); INCOMPLETE = cut by
    # a duration-based run's drain bound (neither ok nor failed)
    error_class: str | None = None
    error_message: str | None = None
    # the tool a record was read from by ``bench import`` ("vllm bench serve", ...): its times are
    # reconstructed from that tool's per-request numbers (results.schema.ImportProvenance); None = measured here
    imported_from: str | None = None

    @property
    def output_tokens(self) -> int | None:
        """Output tokens per DESIGN.md: server usage, else the re-tokenized estimate."""
        if self.output_tokens_server is not None:
            return self.output_tokens_server
        return self.output_tokens_retok

    @property
    def output_tokens_estimated(self) -> bool:
        """True when :attr:`output_tokens` is the tokenizer fallback, not server usage."""
        return self.output_tokens_server is None and self.output_tokens_retok is not None

    @property
    def input_tokens(self) -> int | None:
        """Input tokens: server usage, else re-tokenized, else what the workload asked for."""
        for v in (self.input_tokens_server, self.input_tokens_retok, self.input_tokens_expected):
            if v is not None:
                return v
        return None


# ------------------------------------------------------------------------------------------
# metrics (harness.metrics.compute_metrics returns a Metrics; units in the field names)


class Artefact(BaseModel):
    """Base of the stored models: attribute access in code; ``model["field"]`` reads a field by
    its JSON name too (the way the artefact reads on disk), raising KeyError for an unknown one."""

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)


# ------------------------------------------------------------------------------------------
# engine-configuration parity (adapters.effective reads, harness.scoring.parity compares)


EFFECTIVE_FIELDS: tuple[str, ...] = (
    "kv_capacity_tokens", "kv_capacity_bytes", "block_size", "prefix_caching", "chunked_prefill",
    "chunked_prefill_tokens", "max_num_seqs", "max_num_batched_tokens", "dtype", "threads", "cuda_graphs",
    "speculative", "max_model_len",
)
"""The settings :class:`EffectiveSettings` holds, in table order."""

FLAG_SOURCE = "flag we passed (engine did not report it)"
"""The source of a value read from our own command line because the engine did not report it."""


class EffectiveSettings(Artefact):
    """What one engine says it is running with (``adapters.effective``), read once per run after
    health and before the measured phase: from the engine's own startup log, its ``/metrics``,
    its server-info route, or - marked with :data:`FLAG_SOURCE` - the flag we passed.

    ``kv_capacity_tokens``: KV-cache slots (tokens) the engine allocated; ``kv_capacity_bytes``:
    their memory (bytes; from a log rounded to 0.01 GiB where the engine logs GiB);
    ``block_size``: tokens per KV block/page; ``prefix_caching``: cross-request KV reuse on
    (SGLang's radix cache counts); ``chunked_prefill`` and ``chunked_prefill_tokens`` (the largest
    prefill chunk, tokens); ``max_num_seqs``: most sequences scheduled at once (SGLang's
    max_running_requests, a shim's static batch size); ``max_num_batched_tokens``: per-step
    token budget; ``dtype``: the model's compute dtype ("float32", "bfloat16"); ``threads``: CPU
    threads the engine computes with; ``cuda_graphs``: True = CUDA graphs, False = eager;
    ``speculative``: "off" or the method; ``max_model_len``: context limit (tokens).

    None = not reported, never a guessed value. ``sources``: field → where its value came from
    ("log: CPU KV cache size: 23,296 tokens", "/metrics vllm:cache_config_info", ...); a field may
    have a source and stay None when the engine says it has no such thing (a shim has no shared
    KV budget). ``hardware``: "cpu" / "nvidia" / "amd" (CUDA graphs only matter on a GPU);
    ``notes``: what could not be read and why.
    """

    kv_capacity_tokens: int | None = None
    kv_capacity_bytes: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    chunked_prefill_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    dtype: str | None = None
    threads: int | None = None
    cuda_graphs: bool | None = None
    speculative: str | None = None
    max_model_len: int | None = None
    hardware: str | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class ParityFlag(Artefact):
    """One unfair difference between engines (``harness.scoring.parity``): ``setting`` (an
    :data:`EFFECTIVE_FIELDS` name), the ``engines`` it concerns and the ``reason`` in words (what
    differs and why it changes what is measured)."""

    setting: str
    engines: list[str] = Field(default_factory=list)
    reason: str


class ParityRow(Artefact):
    """One setting across the audited engines: ``values`` engine → shown text (None = not
    reported), ``sources`` engine → where it came from; ``differs``: the reported values are not
    all equal; ``unfair``: a :class:`ParityFlag` was raised for it."""

    setting: str
    label: str
    values: dict[str, str | None] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    differs: bool = False
    unfair: bool = False


class ParityStrict(Artefact):
    """What ``bench run --parity strict`` did (``adapters.parity``): ``target`` the one value
    of each setting it aimed for; ``applied`` engine → the engine args it added; ``could_not``:
    one line per setting an engine could not be set to, with why; ``user_kept``: the
    ``--engine-arg`` values that won over the target (the user's word wins)."""

    target: dict[str, Any] = Field(default_factory=dict)
    applied: dict[str, dict[str, str]] = Field(default_factory=dict)
    could_not: list[str] = Field(default_factory=list)
    user_kept: list[str] = Field(default_factory=list)


class ParityAudit(Artefact):
    """The engine-configuration parity audit of one run (``summary.json``'s ``parity``):
    ``mode`` "report" (audit only) or "strict" (see ``strict``); ``hardware`` the run's kind;
    ``engines`` the measured engines compared; ``rows`` one per setting; ``flags`` the unfair
    differences; ``not_reported`` engine → settings it did not report (never flagged); ``notes``
    what a reader needs besides (the shared CPU KV budget, CUDA graphs not compared on a CPU)."""

    mode: str = "report"
    hardware: str | None = None
    engines: list[str] = Field(default_factory=list)
    rows: list[ParityRow] = Field(default_factory=list)
    flags: list[ParityFlag] = Field(default_factory=list)
    not_reported: dict[str, list[str]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    strict: ParityStrict | None = None


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


class ErrorAdjusted(Artefact):
    """Distributions where every failed request counts as +inf latency (ms)."""

    ttft_ms: Distribution = Field(default_factory=Distribution)
    e2el_ms: Distribution = Field(default_factory=Distribution)

    def distribution(self, metric: str) -> Distribution:
        """``"ttft"`` or ``"e2el"`` → its error-adjusted distribution."""
        return getattr(self, f"{metric}_ms")


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


class Samples(Artefact):
    """Per-request values (ms) behind the report's CDFs: successful measured requests; ITL pooled.
    Sorted; above :data:`MAX_SAMPLES` values a metric keeps that many evenly spaced quantiles."""

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


class Metrics(Artefact):
    """One engine's numbers under one condition (``harness.metrics`` defines each).

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

    def distribution(self, metric: str) -> Distribution:
        """``"ttft"`` → :attr:`ttft_ms` etc. Raises AttributeError for an unknown metric."""
        return getattr(self, f"{metric}_ms")


# ------------------------------------------------------------------------------------------
# summary.json


class EngineStatus(str, Enum):
    """How an engine's turn in a run ended."""

    OK = "ok"  # measured, at least one request succeeded
    FAILED = "failed"  # failed to install/start/stay up, interrupted, or no request succeeded
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
    the engine's first measured phase and outside it (``harness.app.feature_phase``).

    ``feature``: one of :data:`FEATURE_PROBES`; ``detail``: one line - what was verified, what
    was wrong, or the server's message; ``elapsed_ms``: the probe's wall time in ms (all of its
    requests)."""

    feature: str
    status: FeatureStatus
    detail: str = ""
    elapsed_ms: float | None = None


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


class ResourceUse(Artefact):
    """What an engine's process group used during its measured phase (``adapters.resources``).

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
    repeats: list["ResourceUse"] = Field(default_factory=list)


class Cost(Artefact):
    """What one engine's measured output costs on the hardware it ran on.

    ``usd_per_1m_output_tokens = usd_per_hour / (output tok/s × 3600) × 1e6``
    (``adapters.hardware.cost_per_million_tokens``) from the measured output throughput;
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


class EquivalenceResult(Artefact):
    """Greedy output agreement of one engine with the reference engine, token by token."""

    token_agreement: float | None = None
    exact_matches: int = 0
    prompts: int = 0
    first_divergence: list[int | None] = Field(default_factory=list)


class Equivalence(Artefact):
    """The greedy-equivalence check of a run (harness.loadgen.equivalence)."""

    reference: str
    prompts: list[str] = Field(default_factory=list)
    max_tokens: int = 0
    engines: dict[str, EquivalenceResult] = Field(default_factory=dict)


class RunSummary(Artefact):
    """``summary.json``: what each engine measured in one run."""

    schema_version: str = SCHEMA_VERSION
    run_id: str
    workload: str = "unknown"
    slos: dict[str, float] = Field(default_factory=dict)
    repeats: int = 1  # ``--repeats``: rounds of every engine, interleaved (A B C, A B C)
    engines: dict[str, EngineResult] = Field(default_factory=dict)
    equivalence: Equivalence | None = None
    parity: ParityAudit | None = None  # engine-configuration parity audit (None = an older run)

    def ok_engines(self) -> list[str]:
        """Names of the engines with status ok, in run order."""
        return [n for n, e in self.engines.items() if e.status is EngineStatus.OK]


# ------------------------------------------------------------------------------------------
# manifest.json


class ModelSummary(Artefact):
    """The served model's architecture facts, read once from ``config.json``
    (``results.model_geometry.read_model_summary``)."""

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


class Manifest(Artefact):
    """``manifest.json``: everything needed to reproduce and judge a run. Every field is
    optional so partial and old runs load; ``engines`` holds each engine's effective
    configuration as its adapter reported it (command line, env, options)."""

    model_config = ConfigDict(protected_namespaces=(), extra="allow")

    schema_version: str = SCHEMA_VERSION
    run_id: str | None = None
    command: list[str] | None = None
    harness_version: str | None = None
    git_sha: str | None = None
    created_at: str | None = None
    python: str | None = None
    platform: str | None = None
    hardware: dict[str, Any] | None = None  # adapters.hardware.HardwareProfile.to_dict()
    model: ModelSummary | None = None
    workload: dict[str, Any] | None = None  # the workload spec, seed and scale included
    workload_stats: dict[str, Any] | None = None
    seed: int | None = None
    slos: dict[str, float] = Field(default_factory=dict)
    threads: dict[str, int] = Field(default_factory=dict)
    engines: dict[str, dict[str, Any]] = Field(default_factory=dict)
    validity: dict[str, Validity] = Field(default_factory=dict)
    client_calibration: dict[str, Any] | None = None
    client_workers: ClientWorkers | None = None  # ``--client-workers N`` > 1 (None = one in-process client)
    metric_definitions: str | None = None
    imported_from: ImportProvenance | None = None  # set by ``bench import`` (None = measured by bench run)

    @field_validator("model", mode="before")
    @classmethod
    def _empty_model(cls, v: Any) -> Any:
        return None if v == {} else v


# ------------------------------------------------------------------------------------------
# search.json (``bench search``: capacity under SLOs)

SEARCH_FILE = "search.json"


class LoadProbe(Artefact):
    """One probe point of a capacity search (``harness.app.capacity.search_capacity``).

    ``load``: the offered load (the caller's unit: req/s, sessions/s or concurrency);
    ``meets_slo``: every SLO held at its percentile; ``saturated``: the achieved arrival rate
    fell short of the offered one beyond the validity band (counts as a fail); ``achieved``:
    the achieved arrival rate (req/s; None = not measured); ``values``: the judged value of
    each SLO in ms by its key (``{"ttft_p99": 21.3}``; None = infinite: the percentile landed
    on a failed request, or no value); ``reason``: a human sentence; ``duration_s``: the
    probe's wall time by the search's clock (filled in by :func:`search_capacity`).
    """

    load: float
    meets_slo: bool
    saturated: bool = False
    achieved: float | None = None
    values: dict[str, float | None] = Field(default_factory=dict)
    reason: str = ""
    duration_s: float | None = None

    @property
    def passed(self) -> bool:
        """Meets every SLO and is not saturated."""
        return self.meets_slo and not self.saturated


class SearchProbe(LoadProbe):
    """One stored probe point of ``bench search``: a :class:`LoadProbe` plus its index, the
    workload seed it was drawn with and the probe's full :class:`Metrics` (None when it
    measured nothing).

    With ``--repeats N`` (N > 1) the probe is N measurements back to back: ``metrics`` are
    pooled over them (the verdict is judged on these), ``repeats`` holds each repeat's own
    metrics, ``repeat_passed`` each repeat's own verdict, ``seeds`` each repeat's workload seed
    (``seed`` is the first's). ``intervals``: the headline numbers' 95 % intervals (over
    repeats, or over the requests of the one repeat). All empty in files from before repeats.
    """

    index: int
    seed: int | None = None
    metrics: Metrics | None = None
    seeds: list[int] = Field(default_factory=list)  # per repeat; empty for one repeat
    repeats: list[Metrics] = Field(default_factory=list)  # per repeat; empty for one repeat
    repeat_passed: list[bool] = Field(default_factory=list)  # each repeat's own verdict
    intervals: dict[str, Interval] = Field(default_factory=dict)


class EngineSearch(Artefact):
    """One engine's capacity search: the fields of ``harness.app.capacity.CapacityResult``
    (``capacity`` in ``unit``, 0 = no probe passed; ``stopped``: converged | budget | max_probes
    | never_met | high_reached, or ``interrupted`` / ``failed``; ``bracket``: highest passing,
    lowest failing load; ``elapsed_s``, ``budget_s`` s) with :class:`SearchProbe` probes, and the
    engine's status (``ok``: searched; ``failed``: crashed or interrupted, probes kept;
    ``skipped``: cannot run here) with its reason."""

    status: EngineStatus = EngineStatus.OK
    reason: str = ""
    display_name: str | None = None
    version: str | None = None
    startup_s: float | None = None
    capacity: float = 0.0
    stopped: str | None = None
    bracket: tuple[float | None, float | None] = (None, None)
    probes: list[SearchProbe] = Field(default_factory=list)
    message: str = ""
    elapsed_s: float = 0.0
    low: float | None = None
    high: float | None = None
    tolerance: float | None = None
    budget_s: float | None = None
    max_probes: int | None = None
    integer: bool = False
    unit: str = ""


class CapacityRank(Artefact):
    """One engine's place in the capacity ranking (``harness.scoring.capacity_ranking``):
    ``rank`` 1 = highest capacity (tied engines share a rank); ``tied_with``: engines whose
    capacity bracket overlaps this one's; ``reference``: the yardstick engine (never
    recommended); ``at_least``: the search stopped before a failing load above the capacity
    was found (budget, probe limit, ``--high``), so the capacity is a lower bound."""

    engine: str
    rank: int
    capacity: float
    bracket: tuple[float | None, float | None] = (None, None)
    tied_with: list[str] = Field(default_factory=list)
    reference: bool = False
    at_least: bool = False


class CapacityRecommendation(Artefact):
    """Engines ranked by their capacity under the SLOs, and the deciding sentence.

    ``recommended``: the highest-capacity production engine with a capacity above 0 (None when
    none); ``sentence``: e.g. "sglang sustains 3.1 sessions/s at p99 TTFT ≤ 500 ms and p99 TPOT
    ≤ 50 ms; vllm 2.4; own 2.2 (yardstick)"; ``tie_groups``: engines tied by overlapping
    brackets; ``excluded``: engine → why it is not ranked (failed, skipped)."""

    recommended: str | None = None
    sentence: str = ""
    unit: str = ""
    ranking: list[CapacityRank] = Field(default_factory=list)
    tie_groups: list[list[str]] = Field(default_factory=list)
    excluded: dict[str, str] = Field(default_factory=dict)
    method: str = ""


class SearchSummary(Artefact):
    """``search.json``: a ``bench search`` run (capacity under SLOs per engine).

    ``search_var``: ``rate`` (requests/s; agentic: session starts/s) or ``concurrency``
    (in-flight requests, open rate); ``unit``: the load's unit; ``slos``: key → threshold ms
    (``slos_default``: the defaults were used, no ``--slo``); ``budget_s``: the whole search's
    budget (s), ``budget_per_engine_s`` its even share per engine; ``requests_per_probe``: the
    workload's request count per measurement; ``repeats``: measurements per probe (``--repeats
    N``); ``seed``: the base seed (repeat ``k`` of probe ``i`` uses seed + i * N + k);
    ``wall_s``: the command's wall time (s), engine start-ups included."""

    schema_version: str = SCHEMA_VERSION
    run_id: str
    workload: str
    search_var: str
    unit: str
    slos: dict[str, float] = Field(default_factory=dict)
    slos_default: bool = False
    low: float
    high: float | None = None
    tolerance: float
    budget_s: float
    budget_per_engine_s: float
    max_probes: int
    requests_per_probe: int | None = None  # per measurement: a probe takes ``repeats`` of them
    repeats: int = 1  # ``--repeats``: measurements per probe, back to back; the verdict is on their pooled metrics
    seed: int = 0
    wall_s: float = 0.0
    engines: dict[str, EngineSearch] = Field(default_factory=dict)
    capacity_recommendation: CapacityRecommendation | None = None


# ------------------------------------------------------------------------------------------
# timelines (derived from the request records when a report is written; not stored)


class Timeline(Artefact):
    """One engine's measured phase (one repeat) over time, in buckets of ``bucket_s`` seconds
    from its first send (``harness.metrics.timeline``). Per bucket ``i`` (``[i·b, (i+1)·b)``):
    ``in_flight``: time-averaged requests in flight (sent, not yet ended); ``output_tps``:
    output tokens whose chunk arrived in it, per second; ``ttft_p50_ms``: median TTFT of the
    requests whose first token arrived in it (None: none did); ``completed`` / ``failed``:
    requests that ended in it."""

    bucket_s: float
    repeat: int = 0
    in_flight: list[float] = Field(default_factory=list)
    output_tps: list[float] = Field(default_factory=list)
    ttft_p50_ms: list[float | None] = Field(default_factory=list)
    completed: list[int] = Field(default_factory=list)
    failed: list[int] = Field(default_factory=list)
