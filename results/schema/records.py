"""``requests.jsonl``: one :class:`RequestRecord` per request, and the phase / error-class
constants the metrics sort records by.

All timestamps are integers from ``time.perf_counter_ns()`` in the process that measured
them (nanoseconds, monotonic, arbitrary epoch): only differences are meaningful.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .base import SCHEMA_VERSION

INCOMPLETE = "incomplete"
"""``RequestRecord.error_class`` of a request a duration-based run cancelled when its drain bound
ran out (``harness.loadgen.runner``): neither ok nor failed, so the metrics count it apart
(``Metrics.requests_incomplete``) and keep it out of latencies and the failure rate."""
STOPPED_PHASE = "stopped"
"""Phase of a request cut in flight when its load-ladder point stopped early, its SLO verdict
settled (``RunnerOptions.stop_when``): stored, never in metrics (cut, not failed)."""
RAMP_PHASE = "ramp"
"""Phase of a request of a fresh start's ramp (the main job's repeat of a bracket, after an
engine restart: one pass at half the boundary on the workload's own prompts before the bracket
points are measured again, ``harness.app.run.allocate``): stored, never in metrics."""
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
    # re-sends because the pooled connection the request went out on had been closed by the server
    # before any response (a stale keep-alive connection: the server never took the request);
    # the times are the last attempt's (harness.loadgen.client)
    stale_retries: int = 0
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
