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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workloads.errors import WorkloadError

RATE_KINDS = ("agentic", "chat", "rag", "summarization", "code", "random")


def _applies(*kinds: str) -> dict[str, Any]:
    return {"json_schema_extra": {"kinds": list(kinds)}}


class WorkloadOptions(BaseModel):
    """What a run asks of its workload; None = the spec file's value, else the kind's default.

    ``request_rate`` is in requests/s (agentic: session starts/s), ``inf`` = all at once;
    ``burstiness`` is the gamma shape of the gaps (1 = Poisson); ``scale`` shrinks trace prompt
    lengths (bounds per kind: the spec checks them); ``time_scale`` divides a trace's timestamps. Lengths are in tokens.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "agentic"
    spec_file: Path | None = None
    seed: int | None = Field(None, ge=0)
    num_requests: int | None = Field(None, gt=0)
    scale: float | None = Field(None, gt=0, allow_inf_nan=False)
    request_rate: float | None = Field(None, gt=0, **_applies(*RATE_KINDS))
    burstiness: float | None = Field(None, gt=0, allow_inf_nan=False, **_applies(*RATE_KINDS))
    max_concurrency: int | None = Field(None, gt=0)
    api: Literal["chat", "completions"] | None = None
    input_len: int | None = Field(None, gt=0, **_applies("random"))
    output_len: int | None = Field(None, gt=0, **_applies("random"))
    range_ratio: float | None = Field(None, ge=0, lt=1, **_applies("random"))
    trace: str | None = Field(None, **_applies("trace"))
    time_scale: float | None = Field(None, gt=0, allow_inf_nan=False, **_applies("trace"))

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


def _describe(err: dict[str, Any]) -> str:
    """One line for one pydantic error of :class:`WorkloadOptions`, naming the CLI flag."""
    field = str(err["loc"][0]) if err.get("loc") else "?"
    value = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown workload option {field!r}"
    if kind in _BOUNDS:
        bounds = {k: f"{v:g}" if isinstance(v, (int, float)) else v for k, v in err.get("ctx", {}).items()}
        return f"{flag(field)} must be {_BOUNDS[kind].format(**bounds)}, got {value}"
    if kind == "finite_number":
        return f"{flag(field)} must be a finite number, got {value}"
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
