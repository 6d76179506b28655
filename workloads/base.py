"""The contract between workloads and the runner.

A workload is a list of :class:`Session` objects. A single-shot request is a session of one
turn; an agentic session is a chain (or tree, when it branches) of turns where each turn is
built from the previous turn's *actual* reply. The runner (``harness.loadgen.runner``) owns time: it
sends each session's first turn at ``start_offset_s`` after the run start (an absolute
schedule, never cumulative sleeps) and asks the session for follow-ups when a turn completes.
Nothing here sleeps, does I/O against an engine, or computes a metric.

What a turn's reply carries into the next turn is a :class:`Reply`: the answer (``content``,
plus any tool-call text) and, apart, the reasoning, which chat templates keep out of the
history. A plain reply string is still accepted (:func:`as_reply`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

THINK_END = "</think>"


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


@dataclass(frozen=True)
class Reply:
    """One turn's reply as the next turn's history needs it.

    ``answer``: the text a chat history keeps: the streamed ``delta.content`` (and the
    completions API's ``text``), plus any tool-call text (``delta.tool_calls[].function`` name
    and arguments); ``reasoning``: the streamed ``delta.reasoning_content`` /
    ``delta.reasoning``, which reasoning models' chat templates (Qwen3, DeepSeek-R1) drop
    from earlier assistant turns, so it never enters the next prompt; ``success``: the
    request succeeded (a failed turn ends its path: see :meth:`Session.on_complete`).
    """

    answer: str
    reasoning: str = ""
    success: bool = True


def strip_reasoning(text: str) -> str:
    """``text`` without a leading reasoning block: everything up to the last ``</think>``
    removed, with the newlines after it (Qwen3's chat template, ``content.split('</think>')[-1]
    .lstrip('\\n')``; DeepSeek-R1's does the same split). Text without ``</think>`` is
    returned unchanged."""
    if THINK_END not in text:
        return text
    return text.rsplit(THINK_END, 1)[1].lstrip("\n")


def as_reply(reply: Reply | str | None, success: bool | None = None) -> Reply:
    """The :class:`Reply` for what a runner passed to :meth:`Session.on_complete`.

    A :class:`Reply` passes through (its own ``success`` counts; ``success`` must be None or
    agree). A plain string (the older interface) is the whole streamed text: its reasoning
    can only be told apart when it is tagged (``<think>…</think>``, stripped as the chat
    templates do); untagged reasoning concatenated into the text stays in, which is why
    runners should pass a :class:`Reply`. Raises ``TypeError`` for a string without
    ``success`` and ``ValueError`` when ``success`` contradicts ``reply.success``.
    """
    if isinstance(reply, Reply):
        if success is not None and bool(success) != reply.success:
            raise ValueError(f"on_complete: success={success} contradicts the Reply's success={reply.success}")
        return reply
    if success is None:
        raise TypeError("on_complete(request, text, success): a plain reply string needs success=True/False")
    return Reply(answer=reply or "", success=bool(success))


def count_aborted(planned: Mapping[str, int], outcomes: Iterable[tuple[str | None, bool]]) -> int:
    """Turns never sent because an earlier turn of their session failed, from one replay's
    records: ``outcomes`` holds ``(session_id, success)`` per sent request and ``planned``
    the turns each session sends when every turn succeeds (:meth:`Workload.planned_turns`).
    A session with a failed request and ``s`` sent requests aborted ``planned - s`` turns (a
    path stops only at a failure, so on a run that was not interrupted this is exact);
    sessions without a failure abort none. Requests without a session id are ignored."""
    sent: dict[str, int] = {}
    failed: set[str] = set()
    for sid, ok in outcomes:
        if sid is None:
            continue
        sent[sid] = sent.get(sid, 0) + 1
        if not ok:
            failed.add(sid)
    return sum(max(0, planned.get(sid, sent[sid]) - sent[sid]) for sid in failed)


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

    def on_complete(self, request: RequestSpec, reply: Reply | str, success: bool | None = None) -> list[FollowUp]:
        """Follow-ups after ``request`` completed with ``reply`` (empty list = done).

        ``reply``: a :class:`Reply` (answer and reasoning apart, its own success), or the
        older ``(text, success)`` pair (see :func:`as_reply`). Several follow-ups = a branch
        (parallel continuations of the same stem). Sessions may also expose
        ``planned_turns`` (requests when every turn succeeds) and ``aborted_turns`` (turns of
        the latest replay never sent because an earlier turn failed); a session without them
        counts as one turn, never aborted.
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

    planned_turns: ClassVar[int] = 1  # one request; a failure aborts nothing
    aborted_turns: ClassVar[int] = 0

    def first_request(self) -> RequestSpec:
        return self.request

    def on_complete(self, request: RequestSpec, reply: Reply | str, success: bool | None = None) -> list[FollowUp]:
        return []


@dataclass(frozen=True)
class RunTiming:
    """A duration-based run's clock, in seconds (``bench run --duration``): the runner sends on
    the schedule for ``duration_s`` from the first arrival, then waits at most
    ``drain_timeout_s`` for requests in flight and cancels the rest as incomplete; requests
    sent in the first ``warmup_window_s`` or the last ``cooldown_window_s`` of the duration are
    stored but left out of the metrics. ``start_offset_s``: the first arrival's offset, where the
    clock starts (the same for every part of a workload split over client processes)."""

    duration_s: float
    drain_timeout_s: float
    warmup_window_s: float = 0.0
    cooldown_window_s: float = 0.0
    start_offset_s: float = 0.0


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
    ``stats``: summary statistics (counts, length distributions, prefix-reuse ratio);
    ``timing``: the clock of a duration-based run (None = count-based: every session is replayed).
    """

    name: str
    sessions: list[Session]
    spec: dict[str, Any]
    offered_rate: float | None = float("inf")
    max_concurrency: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    requested_rate: float | None = None
    schedule_rate: float | None = None
    timing: RunTiming | None = None

    def planned_turns(self) -> dict[str, int]:
        """Requests each session sends when every turn succeeds, by session id (branches
        included): with the records of one replay, :func:`count_aborted` gives the turns that
        failures aborted."""
        return {s.session_id: int(getattr(s, "planned_turns", 1)) for s in self.sessions}

    def aborted_turns(self) -> int:
        """Turns of the latest replay never sent because an earlier turn of their session
        failed (sessions reset their count when their first turn is taken again)."""
        return sum(int(getattr(s, "aborted_turns", 0)) for s in self.sessions)
