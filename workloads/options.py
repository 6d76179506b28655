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
    trace: str | None = Field(None, **_applies("trace"))
    time_scale: float | None = Field(None, gt=0, allow_inf_nan=False, **_applies("trace"))
    prompt_salt: str | None = Field(None, min_length=1, max_length=MAX_SALT_CHARS)

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
    """The CLI spelling of option ``field`` (``num_requests`` → ``--num-requests``)."""
    return "--" + {"spec_file": "workload-spec", "name": "workload"}.get(field, field.replace("_", "-"))


_BOUNDS = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
           "less_than_equal": "<= {le}"}


_UPPER_WHY = {
    "num_requests": " (the bound a workload is built in memory under; split a larger benchmark into runs)",
    "max_concurrency": " (more in flight than any workload has requests)",
    "input_len": " tokens (2^20, the longest context window models offer)",
    "output_len": " tokens (2^20, the longest context window models offer)",
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


def _describe(err: dict[str, Any]) -> str:
    """One line for one pydantic error of :class:`WorkloadOptions`, naming the CLI flag."""
    field = str(err["loc"][0]) if err.get("loc") else "?"
    value = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown workload option {field!r}"
    if kind in _BOUNDS:
        bounds = {k: f"{v:,}" if isinstance(v, int) else f"{v:g}" if isinstance(v, float) else v
                  for k, v in err.get("ctx", {}).items()}
        why = _UPPER_WHY.get(field, "") if kind in ("less_than", "less_than_equal") else ""
        return f"{flag(field)} must be {_BOUNDS[kind].format(**bounds)}, got {value}{why}"
    if kind == "finite_number":
        return f"{flag(field)} must be a finite number, got {value}"
    if kind in ("burstiness_nan", "salt_chars"):
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
