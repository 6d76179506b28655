"""Versioned result schema: one :class:`RequestRecord` per measured request.

All timestamps are integers from ``time.perf_counter_ns()`` in the process that measured
them (nanoseconds, monotonic, arbitrary epoch): only differences are meaningful. The
metric module (``harness.metrics``) is the single place that turns records into
milliseconds and rates; nothing here computes a metric.

Bump :data:`SCHEMA_VERSION` whenever a field changes meaning or is removed; adding an
optional field keeps the version (old runs still load, the field reads as its default).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

SCHEMA_VERSION = "1.0"


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
    phase: str = "measured"  # "warmup" records are stored but never enter metrics

    scheduled_ns: int
    send_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    end_ns: int | None = None
    chunk_times_ns: list[int] = Field(default_factory=list)
    # Generated-token count carried by each token-bearing chunk when the server reports it
    # per chunk (in-process engines); empty for SSE where only text is known.
    chunk_token_counts: list[int] = Field(default_factory=list)

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
    error_class: str | None = None  # e.g. "http_500", "timeout", "stream_error", "connection"
    error_message: str | None = None

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
