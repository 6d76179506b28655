"""The one streaming client every engine is measured with (aiohttp + our SSE parser).

``send_ns`` is stamped by an aiohttp trace hook (:func:`timing_trace`) as the request's body is
handed to the socket (``on_request_chunk_sent``; the write that follows is synchronous and
non-blocking), after any connection set-up: TTFT and E2E exclude DNS, TCP connect and a TLS
handshake, which are recorded separately (``connect_start_ns`` / ``connect_end_ns``, from
``on_connection_create_start`` / ``_end``; ``connection_reused`` from
``on_connection_reuseconn``). Every read of the response body is stamped with
``perf_counter_ns`` as it returns from ``StreamReader.iter_any()``, so an event's time is the
arrival of the read that completed it. No sleeps, no per-chunk work beyond parsing happen on
this path.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp

from results.schema import RequestRecord
from workloads.base import RequestSpec

from harness.loadgen.sse import SSEParser, interpret


KEEPALIVE_S = 2.0  # below every server idle timeout we know of (uvicorn 5 s, aiohttp 75 s)
STALE_RETRIES = 2  # re-sends of a request whose pooled connection the server had closed (:func:`_stale`)

FAILED_FINISH_REASONS = ("error", "abort")
"""Finish reasons that end a stream without a finished reply: vLLM's v1 engine reports
``"abort"`` for a request it dropped and ``"error"`` for one that failed inside the engine."""


@dataclass
class EndpointTarget:
    """Where and how to send: ``base_url`` without ``/v1``; ``model`` = served model name;
    ``supports_ignore_eos``: the body may carry the vLLM/SGLang extension ``ignore_eos``
    (the adapter's ``Endpoint.supports_ignore_eos``, turned off by ``bench run --no-ignore-eos``)."""

    base_url: str
    model: str
    api_key: str | None = None
    supports_ignore_eos: bool = True


def build_payload(req: RequestSpec, target: EndpointTarget) -> tuple[str, dict[str, Any]]:
    """(URL, JSON body) for one request: streaming with ``stream_options.include_usage``.

    ``ignore_eos`` is sent only when the request asks for it and the engine accepts the field
    (some servers reject non-standard fields with HTTP 422). Chat requests carry the length
    twice: ``max_tokens`` (what most engines read) and ``max_completion_tokens`` (the OpenAI
    API's current chat field, which vLLM, SGLang and transformers serve prefer when given);
    both are standard OpenAI fields, so no engine rejects them.
    """
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if req.ignore_eos and target.supports_ignore_eos:
        body["ignore_eos"] = True
    base = target.base_url.rstrip("/")
    if req.messages is not None:
        body["messages"] = req.messages
        body["max_completion_tokens"] = req.max_tokens
        return f"{base}/v1/chat/completions", body
    body["prompt"] = req.prompt if req.prompt is not None else req.prompt_token_ids
    return f"{base}/v1/completions", body


def _record(ctx: SimpleNamespace) -> RequestRecord | None:
    rec = getattr(ctx, "trace_request_ctx", None)
    return rec if isinstance(rec, RequestRecord) else None


async def _connect_start(_: Any, ctx: SimpleNamespace, __: Any) -> None:
    if (rec := _record(ctx)) is not None:
        rec.connect_start_ns, rec.connect_end_ns, rec.connection_reused = time.perf_counter_ns(), None, False


async def _connect_end(_: Any, ctx: SimpleNamespace, __: Any) -> None:
    if (rec := _record(ctx)) is not None:
        rec.connect_end_ns = time.perf_counter_ns()


async def _reused(_: Any, ctx: SimpleNamespace, __: Any) -> None:
    if (rec := _record(ctx)) is not None:
        rec.connect_start_ns = rec.connect_end_ns = None
        rec.connection_reused = True


async def _written(_: Any, ctx: SimpleNamespace, __: Any) -> None:
    if (rec := _record(ctx)) is not None:
        rec.send_ns = time.perf_counter_ns()  # the last body chunk's stamp wins


def timing_trace() -> aiohttp.TraceConfig:
    """The trace hooks that stamp a request's connection set-up and its send time on the
    :class:`RequestRecord` passed as ``trace_request_ctx`` (perf_counter_ns)."""
    tc = aiohttp.TraceConfig()
    tc.on_connection_create_start.append(_connect_start)
    tc.on_connection_create_end.append(_connect_end)
    tc.on_connection_reuseconn.append(_reused)
    tc.on_request_headers_sent.append(_written)  # a body-less request: its headers are the request
    tc.on_request_chunk_sent.append(_written)
    return tc


def new_session(timeout_s: float = 600.0, resolver: aiohttp.abc.AbstractResolver | None = None) -> aiohttp.ClientSession:
    """An aiohttp session with no connection cap (the runner owns concurrency), a total
    per-request timeout of ``timeout_s`` seconds and the :func:`timing_trace` hooks.

    Pooled connections idle for more than :data:`KEEPALIVE_S` are not reused: reusing one races
    the server's idle timeout (uvicorn closes after 5 s) and fails the request with "connection
    reset by peer" - seen after agentic think times. Busy periods still reuse connections, so
    the client's own overhead stays low (``bench calibrate``). ``resolver``: aiohttp's DNS
    resolver (default: its own).
    """
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S, enable_cleanup_closed=True,
                                     resolver=resolver)
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=30)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[timing_trace()])


@dataclass(frozen=True)
class StreamText:
    """A reply's generated text: ``text`` all of it, in stream order (what is re-tokenized);
    ``answer`` the content and tool-call text; ``reasoning`` the ``reasoning_content`` /
    ``reasoning`` text, which chat templates keep out of the next turn's history."""

    text: str = ""
    answer: str = ""
    reasoning: str = ""


@dataclass
class _Stream:
    """What one response stream has delivered so far."""

    record: RequestRecord
    parser: SSEParser = field(default_factory=SSEParser)
    texts: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    done: bool = False
    answered: bool = False  # response headers came back (a failure after them is never re-sent)

    def apply(self, events: list[Any]) -> None:
        for ev in events:
            self.done = _apply(ev.data, ev.t_ns, self) or self.done


async def stream_request(
    session: aiohttp.ClientSession,
    target: EndpointTarget,
    req: RequestSpec,
    record: RequestRecord,
    extra_body: dict[str, Any] | None = None,
) -> str:
    """:func:`stream_texts`, returning the whole generated text."""
    return (await stream_texts(session, target, req, record, extra_body)).text


async def stream_texts(
    session: aiohttp.ClientSession,
    target: EndpointTarget,
    req: RequestSpec,
    record: RequestRecord,
    extra_body: dict[str, Any] | None = None,
) -> StreamText:
    """Send ``req``, fill ``record``'s times, usage, finish reason and outcome; return the
    reply's text (:class:`StreamText`: all of it, the answer and the reasoning apart).

    Success (DESIGN.md): the stream ended with a finish reason or ``[DONE]``, no error event,
    and at least one chunk carried generated text. Error classes: ``http_<status>``,
    ``stream_error`` (an in-stream error event, or a finish reason in
    :data:`FAILED_FINISH_REASONS`), ``decode_error`` (invalid UTF-8 in the stream),
    ``incomplete_stream`` (EOF without finish reason or ``[DONE]``), ``no_token`` (a finished
    stream that never carried a token), ``timeout``, ``connection``, ``interrupted`` (the task
    was cancelled before the stream ended: the record is filled, then ``CancelledError``
    propagates; a stream that had already ended keeps its own outcome).
    Never raises for a request failure. ``extra_body`` adds fields to the JSON body
    (engine-specific options). A session made without :func:`timing_trace` gets ``send_ns``
    from just before the request was handed to aiohttp (connection set-up included).
    """
    url, body = build_payload(req, target)
    if extra_body:
        body.update(extra_body)
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
    record.ignore_eos_sent = body.get("ignore_eos") is True
    st = _Stream(record)
    clock = time.perf_counter_ns
    while True:  # once more per stale pooled connection (:func:`_stale`), at most STALE_RETRIES times
        record.send_ns = None
        handed_ns = clock()
        try:
            return await _post(session, url, body, headers, st, clock, handed_ns, req)
        except aiohttp.ClientError as exc:
            if record.stale_retries < STALE_RETRIES and _stale(exc, st):
                record.stale_retries += 1
                continue
            _connection_failed(exc, record, clock)
        except asyncio.CancelledError:
            if record.end_ns is None:
                record.end_ns = clock()
            if record.send_ns is None:
                record.send_ns = handed_ns
            _finish(st, req)
            if record.error_class == "incomplete_stream":  # cut by us, not by the server
                record.error_class = "interrupted"
                record.error_message = (f"the run was interrupted while this request was in flight "
                                        f"({len(record.chunk_times_ns)} token-bearing chunks received)")
            raise
        if record.send_ns is None:  # never reached the wire (refused, timed out while connecting)
            record.send_ns = handed_ns
        return _finish(st, req)


def _connection_failed(exc: Exception, record: RequestRecord, clock: Any) -> None:
    """A connection failure recorded on ``record`` (``connection``, with the exception's line)."""
    record.end_ns = clock()
    record.error_class = "connection"
    record.error_message = f"{type(exc).__name__}: {exc}"[:500]


def _stale(exc: Exception, st: "_Stream") -> bool:
    """Whether ``exc`` is a pooled keep-alive connection the server had already closed: it went
    out on a reused connection and the server hung up before any byte of a response
    (``ServerDisconnectedError``, or a reset), so the server never took the request: it is sent
    again, as HTTP clients do on a stale pooled connection (the race is the server's idle timeout
    or per-connection request limit against the pool; llama-server closed one within the
    client's 2 s keep-alive and failed an agentic turn). The times are the new attempt's."""
    early = isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))
    return bool(early and st.record.connection_reused and not st.answered)


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str] | None,
                st: "_Stream", clock: Any, handed_ns: int, req: RequestSpec) -> StreamText:
    """One attempt of :func:`stream_texts`: the request, its stream folded into ``st.record``; an
    ``aiohttp.ClientError`` (connection) or ``CancelledError`` propagates."""
    record = st.record
    try:
        async with session.post(url, json=body, headers=headers, trace_request_ctx=record) as resp:
            st.answered = True
            if record.send_ns is None:
                record.send_ns = handed_ns
            if resp.status != 200:
                detail = (await resp.text())[:500]
                record.end_ns = clock()
                record.error_class = f"http_{resp.status}"
                record.error_message = _http_message(detail.strip() or resp.reason or "", record.ignore_eos_sent)
                return StreamText()
            async for raw in resp.content.iter_any():
                st.apply(st.parser.feed(raw, clock()))
            t = clock()
            st.apply(st.parser.close(t))
            record.end_ns = t
    except asyncio.TimeoutError:
        record.end_ns = clock()
        record.error_class = "timeout"
        record.error_message = "request exceeded the client timeout"
    if record.send_ns is None:  # never reached the wire (refused, timed out while connecting)
        record.send_ns = handed_ns
    return _finish(st, req)


def _http_message(detail: str, ignore_eos_sent: bool) -> str:
    if ignore_eos_sent and "ignore_eos" in detail:
        return f"{detail} (the endpoint rejects ignore_eos: rerun with --no-ignore-eos)"
    return detail


def _finish(st: _Stream, req: RequestSpec) -> StreamText:
    """Fill the record's derived fields and outcome from the stream; return its text."""
    record = st.record
    text = "".join(st.texts)
    record.output_text_len = len(text)
    chunk_times = record.chunk_times_ns
    if chunk_times:
        record.first_token_ns = chunk_times[0]
        record.last_token_ns = chunk_times[-1]
    if st.parser.decode_error and record.error_class in (None, "stream_error"):
        record.error_class = "decode_error"  # the root cause of any malformed chunk after it
        record.error_message = st.parser.decode_error[:500]
    if record.error_class is None:
        if record.finish_reason is None and not st.done:
            record.error_class = "incomplete_stream"
            record.error_message = "stream ended without a finish reason or [DONE]"
        elif not chunk_times:
            ended = f'finish_reason "{record.finish_reason}"' if record.finish_reason else "[DONE]"
            record.error_class = "no_token"
            record.error_message = f"no token received: the stream ended with {ended} but no chunk carried generated text"
        else:
            record.success = True
    if req.keep_output_text:
        record.output_text = text
    return StreamText(text, "".join(st.answer), "".join(st.reasoning))


def _apply(data: str, t_ns: int, st: _Stream) -> bool:
    """Fold one event into the stream's record and texts; returns True for ``[DONE]``."""
    record = st.record
    info = interpret(data)
    if info.done:
        return True
    if info.error is not None:
        if record.error_class is None:
            record.error_class = "stream_error"
            record.error_message = info.error[:500]
        return False
    if info.token_bearing:
        record.chunk_times_ns.append(t_ns)
        st.texts.append(info.text)
        st.answer.append(info.answer)
        st.reasoning.append(info.reasoning)
    if info.answer_bearing and record.first_answer_ns is None:
        record.first_answer_ns = t_ns
    if info.finish_reason and record.finish_reason is None:
        record.finish_reason = info.finish_reason
        if info.finish_reason in FAILED_FINISH_REASONS and record.error_class is None:
            record.error_class = "stream_error"
            record.error_message = f'the server ended the stream with finish_reason "{info.finish_reason}"'
    if info.usage:
        u = info.usage
        if isinstance(u.get("prompt_tokens"), int):
            record.input_tokens_server = u["prompt_tokens"]
        if isinstance(u.get("completion_tokens"), int):
            record.output_tokens_server = u["completion_tokens"]
        details = u.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            record.cached_tokens_server = details["cached_tokens"]
    return False
