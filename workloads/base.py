"""The contract between workloads and the runner.

A workload is a list of :class:`Session` objects. A single-shot request is a session of one
turn; an agentic session is a chain (or tree, when it branches) of turns where each turn is
built from the previous turn's *actual* reply. The runner (``harness.loadgen.runner``) owns time: it
sends each session's first turn at ``start_offset_s`` after the run start (an absolute
schedule, never cumulative sleeps) and asks the session for follow-ups when a turn completes.
Nothing here sleeps, does I/O against an engine, or computes a metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class RequestSpec:
    """One request as every engine receives it.

    Exactly one of ``prompt`` (``/v1/completions``) or ``messages`` (``/v1/chat/completions``)
    is set. ``prompt_token_ids`` is the tokenized prompt when the workload built it token-exact
    (``len(prompt_token_ids) == input_tokens_expected``); engines still receive text, which the
    generator guarantees re-tokenizes to exactly those ids.
    """

    request_id: str
    max_tokens: int
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    prompt_token_ids: list[int] | None = None
    input_tokens_expected: int | None = None
    ignore_eos: bool = False
    temperature: float = 0.0
    session_id: str | None = None
    turn_id: int | None = None
    branch_id: int | None = None
    keep_output_text: bool = False  # the runner keeps the reply text in the record

    @property
    def api(self) -> str:
        """``"chat"`` or ``"completions"``: which OpenAI endpoint this request uses."""
        return "chat" if self.messages is not None else "completions"


@dataclass
class FollowUp:
    """A turn to send ``delay_s`` seconds after the turn that produced it completed."""

    delay_s: float
    request: RequestSpec


@runtime_checkable
class Session(Protocol):
    """A chain of dependent requests.

    ``start_offset_s``: seconds after the measured phase starts at which the first turn is due
    (from the workload's arrival process, rescaled to offer the requested rate; or a trace's
    timestamp).
    """

    session_id: str
    start_offset_s: float

    def first_request(self) -> RequestSpec:
        """The first turn."""

    def on_complete(self, request: RequestSpec, reply_text: str, success: bool) -> list[FollowUp]:
        """Follow-ups after ``request`` completed with ``reply_text`` (empty list = done).

        Several follow-ups = a branch (parallel continuations of the same stem).
        """


@dataclass
class SingleRequestSession:
    """A session of one independent request (random, chat, rag, ... workloads)."""

    request: RequestSpec
    start_offset_s: float
    session_id: str = ""

    def __post_init__(self) -> None:
        if not self.session_id:
            self.session_id = self.request.request_id

    def first_request(self) -> RequestSpec:
        return self.request

    def on_complete(self, request: RequestSpec, reply_text: str, success: bool) -> list[FollowUp]:
        return []


@dataclass
class Workload:
    """A generated workload: sessions plus what the manifest needs to reproduce it.

    Rates are session starts per second (requests/s for single-turn workloads; ``inf`` = all
    at once):

    - ``requested_rate``: the rate asked for (``--request-rate`` / the spec's
      ``request_rate``); None for a trace replay, whose rate is the trace's own.
    - ``offered_rate``: the rate the schedule offers, which the metrics compare the achieved
      rate with (None = closed loop). A drawn schedule is rescaled to offer the requested
      rate exactly (:mod:`workloads.arrivals`), so for every non-trace workload this *is*
      ``requested_rate`` (the same float: conditions at one requested rate group together);
      for a trace it is ``schedule_rate``.
    - ``schedule_rate``: the generated start schedule's own rate, ``(n-1) / (last start -
      first start)`` (:func:`workloads.stats.schedule_rate`, the formula the metrics use for
      the achieved rate): equals ``requested_rate`` to float error for a drawn schedule.

    ``max_concurrency``: closed-loop cap on in-flight requests (None = open loop);
    ``spec``: the full, JSON-serialisable spec (including seed and scale) for the manifest;
    ``stats``: summary statistics (counts, length distributions, prefix-reuse ratio).
    """

    name: str
    sessions: list[Session]
    spec: dict[str, Any]
    offered_rate: float | None = float("inf")
    max_concurrency: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    requested_rate: float | None = None
    schedule_rate: float | None = None
