"""The workload options of one run, as one validated model from the CLI to the builder.

``bench run`` and ``bench workloads stats`` turn their flags into a :class:`WorkloadOptions`
once (:func:`parse_options` gives the one-line error of a bad value); the orchestrator and
:func:`workloads.registry.build_workload` take the model as it is. Each option's applicable
workload kinds live next to its field (``kinds``), so an option that does not apply to the
chosen workload is rejected by name in one place (:func:`workloads.registry.resolve_spec`).

Every option left at None keeps the YAML spec file's value, else the kind's default.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from workloads.errors import WorkloadError

RATE_KINDS = ("agentic", "chat", "rag", "summarization", "code", "random")
MAX_SALT_CHARS = 64  # a prompt salt is a short tag, not content


# Upper bounds (issue 16): a value past them exhausted the machine instead of failing, e.g.
# ``-n 1000000000`` grew to 21 GB until the OOM killer stopped it. Chosen far above real use:
MAX_REQUESTS = 100_000
"""Requests (agentic: turns) or sessions in one workload. ShareGPT, the largest prompt set the
field benchmarks with, has ~94,000 conversations; vLLM's serving benchmark defaults to 1,000."""
MAX_LEN_TOKENS = 1_048_576
"""Tokens of one prompt or one reply (``--input-len``, ``--output-len``, a spec's prefix): 2^20,
the longest context window models offer (1M-token Qwen2.5/Llama 4 variants)."""
MAX_WORKLOAD_TOKENS = 50_000_000
"""Prompt tokens one workload holds in memory at once (requests x prompt length): about 60 bytes
each as built here (ids + text), so ~3 GB and a few minutes to build; 100,000 prompts of 500."""
MAX_CONCURRENCY = 100_000
"""``--max-concurrency``: in-flight requests; never more than the requests of a workload."""
MAX_DURATION_S = 7 * 86_400
"""``--duration``, ``--drain-timeout`` and the windows, in seconds: a week, the longest soak test
we know of; the request count a duration implies is bounded by :data:`MAX_REQUESTS` as well."""
DEFAULT_DRAIN_S = 30.0
"""``--drain-timeout`` when a duration-based run does not give one: seconds the runner waits,
after the last send, for requests still in flight before cancelling them as incomplete."""

TIME_FIELDS = ("duration_s", "drain_timeout_s", "warmup_window_s", "cooldown_window_s")
RAMP_FIELDS = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_TIME = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*$", re.IGNORECASE)


def parse_seconds(value: Any) -> Any:
    """A time span in seconds from ``60``, ``60s``, ``1.5m``, ``5m`` or ``1h`` (a number alone is
    seconds; units s, m, h in any case); numbers pass through, so pydantic checks their bounds.
    Raises ``PydanticCustomError("time_format")`` for any other text (``abc``, ``10x``, ``-5s``)."""
    if not isinstance(value, str):
        return value
    match = _TIME.match(value)
    if match is None:
        raise PydanticCustomError("time_format", "must be a time such as 60, 60s, 5m or 1h")
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def _applies(*kinds: str) -> dict[str, Any]:
    return {"json_schema_extra": {"kinds": list(kinds)}}


class WorkloadOptions(BaseModel):
    """What a run asks of its workload; None = the spec file's value, else the kind's default.

    ``request_rate`` is in requests/s (agentic: session starts/s), ``inf`` = all at once;
    ``burstiness`` is the gamma shape of the gaps (1 = Poisson; ``inf``, spelled ``inf``,
    ``Infinity``, ``+inf`` or ``∞`` in any case = constant gaps of ``1/rate``, vLLM's
    convention); ``scale`` shrinks trace prompt lengths (bounds per kind: the spec checks
    them); ``time_scale`` divides a trace's timestamps. Lengths are in tokens.
    ``prompt_salt``: a short text put at the very start of every session's first prompt so no
    prompt matches a prefix an engine cached in an earlier run (``auto`` or ``run``: a random
    salt drawn per run and recorded in the manifest; ``none``: no salt; default: no salt).
    Duration-based runs (all in seconds; ``60``, ``60s``, ``5m``, ``1h`` as text): ``duration_s``
    sends on the schedule until the time is up, then waits at most ``drain_timeout_s``
    (default :data:`DEFAULT_DRAIN_S`) for requests in flight, which are then cancelled and
    counted incomplete; requests sent in the first ``warmup_window_s`` / last
    ``cooldown_window_s`` are stored but left out of the metrics. ``ramp_up_*``: the rate goes
    from ``ramp_up_start_rps`` to ``ramp_up_end_rps`` over the run (vLLM's ``--ramp-up-*``,
    :func:`workloads.arrivals.ramp_offsets`). :func:`check_timing` checks how they combine.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "agentic"
    spec_file: Path | None = None
    seed: int | None = Field(None, ge=0)
    num_requests: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    scale: float | None = Field(None, gt=0, allow_inf_nan=False)
    request_rate: float | None = Field(None, gt=0, **_applies(*RATE_KINDS))
    burstiness: float | None = Field(None, gt=0, **_applies(*RATE_KINDS))
    max_concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)
    api: Literal["chat", "completions"] | None = None
    input_len: int | None = Field(None, gt=0, le=MAX_LEN_TOKENS, **_applies("random"))
    output_len: int | None = Field(None, gt=0, le=MAX_LEN_TOKENS, **_applies("random"))
    range_ratio: float | None = Field(None, ge=0, lt=1, **_applies("random"))
    trace: str | None = Field(None, **_applies("trace", "agentic"))
    trace_format: Literal["auto", "agent", "swe-agent", "mooncake", "otel", "chat-log"] | None = Field(None, **_applies("agentic"))
    time_scale: float | None = Field(None, gt=0, allow_inf_nan=False, **_applies("trace", "agentic"))
    prompt_salt: str | None = Field(None, min_length=1, max_length=MAX_SALT_CHARS)
    fresh_tasks: bool | None = Field(None, **_applies("agentic"))  # no option of its own: a spec field the fidelity check sets
    duration_s: float | None = Field(None, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    drain_timeout_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, allow_inf_nan=False)
    ramp_up_strategy: Literal["linear", "exponential"] | None = Field(None, **_applies(*RATE_KINDS))
    # bounded so a schedule stays finite: 0.001 req/s is one arrival per ~17 minutes, 1,000,000 req/s
    # beyond any client (an extreme ramp used to overflow the schedule mid-run)
    ramp_up_start_rps: float | None = Field(None, ge=0.001, le=1_000_000, allow_inf_nan=False, **_applies(*RATE_KINDS))
    ramp_up_end_rps: float | None = Field(None, ge=0.001, le=1_000_000, allow_inf_nan=False, **_applies(*RATE_KINDS))
    warmup_window_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, allow_inf_nan=False)
    cooldown_window_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, allow_inf_nan=False)

    @field_validator(*TIME_FIELDS, mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return parse_seconds(value)

    @field_validator("burstiness", mode="before")
    @classmethod
    def _burstiness(cls, value: Any) -> Any:
        """``∞`` (and ``inf`` spelled any way ``float()`` reads) → ``inf``; NaN refused."""
        if isinstance(value, str) and value.strip().lstrip("+") == "∞":
            return math.inf
        try:
            nan = math.isnan(float(value))
        except (TypeError, ValueError):
            return value  # not a number: pydantic's own error names it
        if nan:
            raise PydanticCustomError("burstiness_nan", "must be a number > 0 or inf (constant spacing)")
        return value

    @field_validator("prompt_salt")
    @classmethod
    def _salt(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or not value.isprintable()):
            raise PydanticCustomError("salt_chars", "must be printable text without leading/trailing spaces or newlines")
        return value

    def overrides(self) -> dict[str, Any]:
        """The options given (not None), by field name, without ``name`` and ``spec_file``."""
        return {k: v for k, v in self.model_dump(exclude={"name", "spec_file"}).items() if v is not None}

    @staticmethod
    def kinds(field: str) -> tuple[str, ...] | None:
        """The workload kinds option ``field`` applies to; None = every kind."""
        extra = WorkloadOptions.model_fields[field].json_schema_extra
        return tuple(extra["kinds"]) if isinstance(extra, dict) else None  # type: ignore[arg-type]


def flag(field: str) -> str:
    """The CLI spelling of option ``field`` (``num_requests`` → ``--num-requests``, ``duration_s``
    → ``--duration``)."""
    special = {"spec_file": "workload-spec", "name": "workload"}
    return "--" + special.get(field, field.removesuffix("_s") if field in TIME_FIELDS else field).replace("_", "-")


_BOUNDS = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
           "less_than_equal": "<= {le}"}


_UPPER_WHY = {
    "num_requests": " (the bound a workload is built in memory under; split a larger benchmark into runs)",
    "max_concurrency": " (more in flight than any workload has requests)",
    "input_len": " tokens (2^20, the longest context window models offer)",
    "output_len": " tokens (2^20, the longest context window models offer)",
    **{name: " s (a week)" for name in TIME_FIELDS},
}


def check_spec_bounds(spec: Any) -> None:
    """The upper bounds on a resolved spec, whatever set its values (flags are checked by
    :class:`WorkloadOptions`; a YAML spec file is checked here): ``num_requests`` and
    ``num_sessions`` <= :data:`MAX_REQUESTS`, ``input_len``/``output_len``/``prefix_len`` <=
    :data:`MAX_LEN_TOKENS`, and for the random workload requests x the longest prompt <=
    :data:`MAX_WORKLOAD_TOKENS`. Raises :class:`WorkloadError` naming the field and the bound."""
    def value(name: str) -> Any:
        return getattr(spec, name, None)

    for name in ("num_requests", "num_sessions"):
        if isinstance(value(name), int) and value(name) > MAX_REQUESTS:
            raise WorkloadError(f"{name} must be <= {MAX_REQUESTS:,}, got {value(name):,} (the bound a workload "
                                "is built in memory under; split a larger benchmark into runs)")
    for name in ("input_len", "output_len", "prefix_len"):
        if isinstance(value(name), int) and value(name) > MAX_LEN_TOKENS:
            raise WorkloadError(f"{name} must be <= {MAX_LEN_TOKENS:,} tokens, got {value(name):,} "
                                "(2^20, the longest context window models offer)")
    if getattr(spec, "kind", None) == "random" and isinstance(value("input_len"), int):
        scale = float(value("scale") or 1.0)
        longest = math.ceil(value("input_len") * scale * (1 + float(value("range_ratio") or 0.0)))
        total = int(value("num_requests") or 0) * longest
        if total > MAX_WORKLOAD_TOKENS:
            raise WorkloadError(
                f"the random workload would hold up to {total:,} prompt tokens ({value('num_requests'):,} requests x "
                f"{longest:,}); at most {MAX_WORKLOAD_TOKENS:,} fit in memory: lower --num-requests or --input-len")


def check_timing(spec: Any) -> None:
    """How a resolved spec's duration, drain bound, windows and ramp combine, whatever set them
    (flags or a YAML spec file). Raises :class:`WorkloadError` naming the flags for: a window or
    ``--drain-timeout`` without ``--duration``; windows lasting together as long as the duration
    or longer (nothing left to measure); a ramp missing one of its three flags, on a trace, with a
    start above its end (vLLM's ``bench serve`` refuses that too), or with a finite
    ``--request-rate`` (vLLM: "When using ramp-up, do not specify --request-rate"); a duration at
    an unlimited rate without an explicit pool size (``-n``; agentic: ``num_sessions`` too); and
    a duration whose schedule would exceed :data:`MAX_REQUESTS` (duration x rate, the ramp's end
    rate for a ramp: the same bound ``-n`` has)."""
    def value(name: str) -> Any:
        return getattr(spec, name, None)

    kind, given = getattr(spec, "kind", None), getattr(spec, "model_fields_set", set())
    duration = value("duration_s")
    for name in ("drain_timeout_s", "warmup_window_s", "cooldown_window_s"):
        if value(name) is not None and duration is None:
            raise WorkloadError(f"{flag(name)} applies to a duration-based run: add --duration (e.g. --duration 60s)")
    warm, cool = value("warmup_window_s") or 0.0, value("cooldown_window_s") or 0.0
    if duration is not None and warm + cool >= duration:
        raise WorkloadError(f"--warmup-window {warm:g} s + --cooldown-window {cool:g} s leave nothing of --duration "
                            f"{duration:g} s to measure: shorten the windows or lengthen the run")
    strategy, start, end = (value(name) for name in RAMP_FIELDS)
    ramp = any(x is not None for x in (strategy, start, end))
    if ramp:
        if kind == "trace":
            raise WorkloadError("--ramp-up-strategy does not apply to the trace workload: a trace replays its own arrival times")
        missing = [flag(name) for name in RAMP_FIELDS if value(name) is None]
        if missing:
            raise WorkloadError("a ramp needs --ramp-up-strategy (linear or exponential), --ramp-up-start-rps and "
                                f"--ramp-up-end-rps: add {', '.join(missing)}")
        if start > end:
            raise WorkloadError(f"--ramp-up-start-rps {start:g} is above --ramp-up-end-rps {end:g}: the rate ramps up "
                                "from the start to the end rate (vLLM's convention); swap them")
        if "request_rate" in given and math.isfinite(value("request_rate")):
            raise WorkloadError("--ramp-up-* sets the request rate over the run: drop --request-rate (vLLM's bench serve "
                                "refuses both too)")
    if duration is None or kind == "trace":
        return
    rate = end if ramp else value("request_rate")
    if not math.isfinite(rate):
        pools = ("num_requests", "num_sessions") if kind == "agentic" else ("num_requests",)
        if not any(name in given for name in pools):
            raise WorkloadError("--duration at an unlimited --request-rate sends from a pool of requests until the time is "
                                "up: give the pool's size with -n N (or a finite --request-rate)")
        return
    if duration * rate > MAX_REQUESTS:
        unit = "sessions" if kind == "agentic" else "requests"
        raise WorkloadError(f"--duration {duration:g} s at {rate:g} {unit}/s schedules about {duration * rate:,.0f} {unit}; "
                            f"at most {MAX_REQUESTS:,} are built in memory: shorten --duration or lower the rate")


def _describe(err: dict[str, Any]) -> str:
    """One line for one pydantic error of :class:`WorkloadOptions`, naming the CLI flag."""
    field = str(err["loc"][0]) if err.get("loc") else "?"
    value = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown workload option {field!r}"
    if kind in _BOUNDS:
        bounds = {k: f"{v:,}" if isinstance(v, int) else (f"{int(v):,}" if v.is_integer() and abs(v) >= 1000 else f"{v:g}")
                  if isinstance(v, float) else v for k, v in err.get("ctx", {}).items()}
        why = _UPPER_WHY.get(field, "") if kind in ("less_than", "less_than_equal") else ""
        return f"{flag(field)} must be {_BOUNDS[kind].format(**bounds)}, got {value}{why}"
    if kind == "finite_number":
        return f"{flag(field)} must be a finite number, got {value}"
    if kind in ("burstiness_nan", "salt_chars", "time_format"):
        return f"{flag(field)} {err.get('msg')}, got {value!r}"
    if kind in ("string_too_short", "string_too_long") and field == "prompt_salt":
        return f"{flag(field)} must be 1 to {MAX_SALT_CHARS} characters ('auto' draws one per run), got {len(str(value))}"
    if kind == "literal_error":
        return f"{flag(field)} must be one of {err.get('ctx', {}).get('expected', '?')}, got {value!r}"
    return f"{flag(field)}: {err.get('msg', 'invalid value')} (got {value!r})"


def parse_options(**values: Any) -> WorkloadOptions:
    """:class:`WorkloadOptions` from keyword values; raises :class:`WorkloadError` with one line
    naming the first bad flag and its bound (e.g. ``--num-requests must be > 0, got 0``)."""
    try:
        return WorkloadOptions(**values)
    except ValidationError as exc:
        raise WorkloadError(_describe(exc.errors()[0])) from None


def is_neutral(field: str, value: Any) -> bool:
    """True for the documented neutral value of an option (``request_rate=inf``,
    ``burstiness=1``, ``range_ratio=0``, ``time_scale=1``): callers may pass it for every
    workload, so it is ignored where the option does not apply rather than rejected."""
    neutral = {"request_rate": math.inf, "burstiness": 1.0, "range_ratio": 0.0, "time_scale": 1.0}
    return field in neutral and value == neutral[field]
