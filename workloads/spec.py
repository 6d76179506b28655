"""Workload specs: one pydantic model per workload kind, loadable from YAML.

A spec holds *every* parameter that shapes a workload (seed and scale included); the
generated :class:`workloads.base.Workload` carries ``spec.manifest()`` so a run can be
reproduced from its manifest alone. ``scale`` multiplies the token lengths taken from the
real traces (the traces come from GPU fleets with prompts of thousands of tokens; the
defaults shrink them so the default run fits a 2-core CPU with the 135M default model);
time is scaled separately (``time_scale``, ``think_time_scale``).

YAML example (``bench run --workload-spec my.yaml``)::

    kind: agentic
    seed: 3
    num_sessions: 16
    scale: 0.2
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workloads.errors import WorkloadError
from workloads.options import RAMP_FIELDS, TIME_FIELDS, parse_seconds

Api = Literal["chat", "completions"]
Process = Literal["gamma", "poisson", "constant"]


class WorkloadSpec(BaseModel):
    """Fields every workload kind has.

    ``request_rate``: offered arrival rate (requests/s; sessions/s for agentic), ``inf`` =
    all at once. ``burstiness``: gamma shape (1 = Poisson; CV of gaps = 1/sqrt(burstiness)).
    ``max_concurrency``: closed-loop cap on in-flight requests (None = open loop).
    ``ignore_eos``: ask engines to generate exactly ``max_tokens`` (same work on every engine).
    ``prompt_salt``: text put at the very start of every session's first prompt
    (:mod:`workloads.salt`); ``auto``/``run`` = a random salt drawn when the workload is
    built (the built workload's manifest holds the drawn one); None (or ``none``) = no salt,
    the default.

    Duration-based runs (seconds; YAML may write ``60s``, ``5m``, ``1h``; None = not set, and
    left out of :meth:`manifest`, so a count-based run's spec reads as before): ``duration_s``
    (send on the schedule until the time is up; the request or session count is then derived
    from it, ``workloads.registry``), ``drain_timeout_s`` (the wait for requests in flight
    after it, default 30 s), ``warmup_window_s`` / ``cooldown_window_s`` (requests sent in the
    first / last seconds are stored but not measured). ``ramp_up_strategy`` (``linear`` or
    ``exponential``) with ``ramp_up_start_rps`` and ``ramp_up_end_rps``: the rate ramps from
    start to end over the run, vLLM's ``--ramp-up-*`` (:func:`workloads.arrivals.ramp_offsets`).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kind: str
    seed: int = Field(default=0, ge=0)
    num_requests: int | None = Field(default=None, ge=1)
    scale: float = Field(default=1.0, gt=0, le=1000)
    request_rate: float = Field(default=math.inf, gt=0)
    burstiness: float = Field(default=1.0, gt=0)
    arrival: Process = "gamma"
    max_concurrency: int | None = Field(default=None, ge=1)
    api: Api = "completions"
    ignore_eos: bool = True
    temperature: float = Field(default=0.0, ge=0)
    prompt_salt: str | None = Field(default=None, min_length=1, max_length=64)
    duration_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    drain_timeout_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    warmup_window_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cooldown_window_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    ramp_up_end_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @field_validator(*TIME_FIELDS, mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return parse_seconds(value)

    @property
    def ramp(self) -> tuple[str, float, float] | None:
        """``(strategy, start rps, end rps)`` of a ramp, None without one (or an incomplete one,
        which ``workloads.options.check_timing`` refuses)."""
        parts = (self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps)
        return None if any(x is None for x in parts) else parts  # type: ignore[return-value]

    @field_validator("prompt_salt")
    @classmethod
    def _salt(cls, value: str | None) -> str | None:
        if value is None or value.strip().lower() in ("none", "off"):
            return None
        if value != value.strip() or not value.isprintable():
            raise ValueError("prompt_salt must be printable text without leading/trailing spaces or newlines")
        return value

    def manifest(self) -> dict[str, Any]:
        """JSON-serialisable dict of every field (``inf`` written as the string ``"inf"``; the
        duration and ramp fields only when set)."""
        out = self.model_dump(mode="python")
        timing = set(TIME_FIELDS) | set(RAMP_FIELDS)
        return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in out.items()
                if not (k in timing and v is None)}


class AgenticSpec(WorkloadSpec):
    """Multi-turn tool-using sessions replayed from the SWE-agent trajectories.

    ``num_sessions``: sessions (ignored when ``num_requests`` is set: then sessions are added
    until the total number of *turns*, branches included, equals ``num_requests``).
    ``scale``: every trace message (system prompt, task, demonstration, tool observation)
    is cut to ``ceil(tokens * scale)`` tokens (at least ``min_message_tokens``).
    ``max_turns``: turns per path (stem + one branch). ``branch_fraction`` of the sessions
    fork after ``branch_after`` turns into ``branch_factor`` parallel continuations.
    ``think_time_scale`` multiplies the tool/think times drawn from the traces.
    ``output_scale``: a turn's max_tokens = the recorded reply's tokens × output_scale,
    clipped to [min_output_tokens, max_output_tokens].
    ``request_rate`` is the session-start rate (sessions/s).
    ``trace``: replay this agent trace instead of the shipped trajectories (a file, or
    ``swe-agent``), read by the ``trace_format`` importer (:mod:`workloads.trace_import`),
    replayed as :mod:`workloads.agent_replay` says (``scale`` then defaults to 1; tool times
    and sub-agent starts ÷ ``time_scale``; ``max_turns``, ``branch_*``, ``output_scale``,
    ``think_time_scale`` and ``trajectories`` do not apply; every session of the trace once
    unless ``num_sessions`` / ``num_requests`` say otherwise). ``cache_blocks`` ×
    ``cache_block_tokens``: the LRU prefix cache the replay-fidelity certificate's theoretical
    hit rate assumes. ``fresh_tasks``: each session's task (its first user message) starts with
    a tag of its workload's seed and its index (:func:`workloads.salt.task_tag`), so no
    measurement (each draws its own seed: ladder points, repeats) and no
    session cycled through the trajectories twice is served another's task from a prefix cache;
    the system prompt, shared by every agent as in production, is not tagged. A hash-id trace
    turn (its whole prompt synthetic blocks) takes the measurement's tag only, which keeps the
    sharing its hash ids describe within the measurement. False: the tasks verbatim (shared
    across measurements; the fidelity check's prompts: its distinct first turns are distinct tasks).
    """

    kind: Literal["agentic"] = "agentic"
    api: Api = "chat"
    scale: float = Field(default=0.1, gt=0, le=1)
    request_rate: float = Field(default=0.5, gt=0)
    num_sessions: int = Field(default=4, ge=1)
    max_turns: int = Field(default=3, ge=1)
    branch_fraction: float = Field(default=0.34, ge=0, le=1)
    branch_factor: int = Field(default=2, ge=2)
    branch_after: int = Field(default=2, ge=1)
    think_time_scale: float = Field(default=0.25, ge=0)
    output_scale: float = Field(default=0.5, gt=0)
    min_output_tokens: int = Field(default=16, ge=1)
    max_output_tokens: int = Field(default=32, ge=1)
    min_message_tokens: int = Field(default=8, ge=1)
    trajectories: list[str] | None = None  # substrings of trajectory names to use (default: all 22)
    # a trace of the user's own agents (workloads.agent_trace, workloads.agent_replay); None = the shipped set
    trace: str | None = None
    trace_format: Literal["auto", "agent", "swe-agent", "mooncake", "otel", "chat-log"] = "auto"
    time_scale: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    cache_blocks: int = Field(default=1024, ge=1)  # the LRU cache of the fidelity certificate's theoretical hit rate
    cache_block_tokens: int = Field(default=16, ge=1)
    fresh_tasks: bool = True

    @model_validator(mode="after")
    def _check(self) -> AgenticSpec:
        if self.trace is not None and "scale" not in self.model_fields_set:
            self.__dict__["scale"] = 1.0  # a user's own trace replays at its own lengths unless --scale says otherwise
        if self.min_output_tokens > self.max_output_tokens:
            raise ValueError("min_output_tokens must be <= max_output_tokens")
        if self.branch_fraction > 0 and self.branch_after >= self.max_turns:
            raise ValueError("branch_after must be < max_turns when branch_fraction > 0")
        return self


class ChatSpec(WorkloadSpec):
    """Single-turn chat: real ShareGPT first-turn prompts; output lengths sampled from the
    ShareGPT decode-length statistics (Sarathi-Serve), both × ``scale`` (prompts cut to
    ``ceil(tokens * scale)`` tokens when scale < 1)."""

    kind: Literal["chat"] = "chat"
    api: Api = "chat"
    num_requests: int | None = Field(default=32, ge=1)
    scale: float = Field(default=0.25, gt=0, le=1)
    min_output_tokens: int = Field(default=2, ge=1)


class RagSpec(WorkloadSpec):
    """Long shared document prefixes + unique questions.

    ``source="gsp"``: SGLang's generated-shared-prefix layout: ``num_groups`` documents of
    ``document_tokens`` tokens (default: LongBench multi-doc QA mean, 9,151 words × 1.3
    tokens/word, × scale), each followed by ``num_requests / num_groups`` unique questions
    of ``question_tokens``; ``output_tokens`` default 32 (LongBench's max_new_tokens for
    multi-doc QA). ``source="mooncake"``: requests (lengths and prefix block hashes) from the
    Mooncake conversation trace, each hash id → one identical block of
    ``round(512 × scale)`` tokens; arrivals from the arrival process, not the trace.
    """

    kind: Literal["rag"] = "rag"
    source: Literal["gsp", "mooncake"] = "gsp"
    num_requests: int | None = Field(default=32, ge=1)
    scale: float = Field(default=0.05, gt=0, le=1)
    num_groups: int = Field(default=4, ge=1)
    document_tokens: int | None = Field(default=None, ge=1)
    question_tokens: int = Field(default=32, ge=1)
    output_tokens: int = Field(default=32, ge=1)
    shuffle: bool = True  # interleave groups (SGLang shuffles; False = group by group)


class SummarizationSpec(WorkloadSpec):
    """Long prompt, short output: (article, abstract) token lengths sampled from the arXiv
    summarization statistics (Vidur), × ``scale``; synthetic document text + an instruction."""

    kind: Literal["summarization"] = "summarization"
    num_requests: int | None = Field(default=16, ge=1)
    scale: float = Field(default=0.2, gt=0, le=1)
    min_output_tokens: int = Field(default=2, ge=1)


class CodeSpec(WorkloadSpec):
    """Code completion: (context, generated) token lengths sampled from the Azure 2023 code
    trace, × ``scale`` (outputs at least ``min_output_tokens``); arrivals from the process."""

    kind: Literal["code"] = "code"
    num_requests: int | None = Field(default=32, ge=1)
    scale: float = Field(default=0.1, gt=0, le=1)
    min_output_tokens: int = Field(default=2, ge=1)


class RandomSpec(WorkloadSpec):
    """vLLM-compatible random dataset.

    Input lengths are drawn uniformly from the integers in
    ``[floor(input_len·(1-r)), ceil(input_len·(1+r))]`` with ``r = range_ratio`` (vLLM's
    ``--random-range-ratio``; r = 0 → fixed), likewise output lengths; ``prefix_len``
    shared random tokens precede every prompt (vLLM's ``--random-prefix-len``) and count
    toward the input length here. ``scale`` multiplies input_len/output_len/prefix_len.
    """

    kind: Literal["random"] = "random"
    num_requests: int | None = Field(default=32, ge=1)
    input_len: int = Field(default=256, ge=1)
    output_len: int = Field(default=32, ge=1)
    range_ratio: float = Field(default=0.0, ge=0, lt=1)
    prefix_len: int = Field(default=0, ge=0)


class TraceSpec(WorkloadSpec):
    """Replay of a production trace with its own arrival times.

    ``trace``: ``azure-code``, ``azure-conv``, ``mooncake``, ``servegen-language``,
    ``servegen-reason``, or a path to a file in one of those formats (``.csv`` Azure,
    ``.jsonl`` Mooncake). Lengths × ``scale``. Azure/Mooncake timestamps are divided by
    ``time_scale`` (2 = twice as fast). Mooncake hash ids → identical token blocks of
    ``round(512 × scale)`` tokens. ServeGen: per-window rate × ``rate_scale`` and CV, windows
    of ``600 / time_scale`` s, lengths from the first 6-hour PMF; replay starts at the first
    active window at or after ``start_window``.
    """

    kind: Literal["trace"] = "trace"
    trace: str = "mooncake"
    num_requests: int | None = Field(default=64, ge=1)
    scale: float | None = Field(default=None, gt=0, le=1)
    time_scale: float | None = Field(default=None, gt=0)
    rate_scale: float | None = Field(default=None, gt=0)
    start_window: int = Field(default=0, ge=0)
    min_output_tokens: int = Field(default=2, ge=1)

    @model_validator(mode="after")
    def _defaults(self) -> TraceSpec:
        # None → this trace's default (TRACE_DEFAULTS), so the manifest shows the value used.
        scale, time_scale, rate_scale = TRACE_DEFAULTS.get(self.trace, TRACE_DEFAULTS["file"])
        for name, value in (("scale", scale), ("time_scale", time_scale), ("rate_scale", rate_scale)):
            if getattr(self, name) is None:
                self.__dict__[name] = value
        return self


# trace name → default (scale, time_scale, rate_scale), chosen so the default replay of 64
# requests runs in about a minute on a 2-core CPU with the 135M model:
# Mooncake prompts average 12k tokens (→ ~240), Azure code 2k (→ ~200), Azure conv 1.2k
# (→ ~290); ServeGen windows of 600 s are shortened to 10 s (time_scale 60) and their rates
# scaled to ~2 requests/s (m-large client: ~87 rps at the start; DeepSeek-R1 client: ~4.6 rps).
TRACE_DEFAULTS: dict[str, tuple[float, float, float]] = {
    "mooncake": (0.02, 1.0, 1.0),
    "azure-code": (0.1, 1.0, 1.0),
    "azure-conv": (0.25, 1.0, 1.0),
    "servegen-language": (0.25, 60.0, 0.02),
    "servegen-reason": (0.1, 60.0, 0.5),
    "file": (0.05, 1.0, 1.0),
}


SPEC_TYPES: dict[str, type[WorkloadSpec]] = {
    "agentic": AgenticSpec,
    "chat": ChatSpec,
    "rag": RagSpec,
    "summarization": SummarizationSpec,
    "code": CodeSpec,
    "random": RandomSpec,
    "trace": TraceSpec,
}


def _one_line(exc: ValidationError) -> str:
    from results.messages import plain_error

    return "; ".join(plain_error(err, ".".join(str(x) for x in err.get("loc", ())) or "spec") for err in exc.errors())


def make_spec(kind: str, values: dict[str, Any]) -> WorkloadSpec:
    """Validate ``values`` as the spec of ``kind``. Raises :class:`WorkloadError` (one line)."""
    cls = SPEC_TYPES.get(kind)
    if cls is None:
        raise WorkloadError(f"unknown workload {kind!r}: choose one of {', '.join(SPEC_TYPES)}")
    try:
        return cls(**{**values, "kind": kind})
    except ValidationError as exc:
        raise WorkloadError(f"invalid {kind} workload spec: {_one_line(exc)}") from None


def load_spec_file(path: Path) -> dict[str, Any]:
    """Raw values from a YAML spec file (a mapping with a ``kind`` key).

    Raises :class:`WorkloadError` for a missing file, invalid YAML (with its line) or a
    non-mapping document.
    """
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"workload spec file {path} does not exist: check the path")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise WorkloadError(f"{path} is not UTF-8 text: a workload spec is a YAML file (see workloads/specs/)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise WorkloadError(f"{path}{where}: {problem}: fix the YAML") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: expected a YAML mapping with a 'kind' key (e.g. 'kind: agentic')")
    return data
