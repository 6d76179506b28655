"""The one streaming client every engine is measured with (aiohttp + our SSE parser).

``send_ns`` is taken immediately before the request is handed to aiohttp (after the runner's
concurrency gate); every read of the response body is stamped with ``perf_counter_ns`` as it
returns from ``StreamReader.iter_any()``, so an event's time is the arrival of the read that
completed it. No sleeps, no per-chunk work beyond parsing happen on this path.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from results.schema import RequestRecord
from workloads.base import RequestSpec

from harness.loadgen.sse import SSEParser, interpret


KEEPALIVE_S = 2.0  # below every server idle timeout we know of (uvicorn 5 s, aiohttp 75 s)


@dataclass
class EndpointTarget:
    """Where and how to send: ``base_url`` without ``/v1``; ``model`` = served model name."""

    base_url: str
    model: str
    api_key: str | None = None
    supports_ignore_eos: bool = True


def build_payload(req: RequestSpec, target: EndpointTarget) -> tuple[str, dict[str, Any]]:
    """(URL, JSON body) for one request: streaming with ``stream_options.include_usage``.

    ``ignore_eos`` is sent only when true and the engine accepts the field (some servers reject
    non-standard fields with HTTP 422).
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
        return f"{base}/v1/chat/completions", body
    body["prompt"] = req.prompt if req.prompt is not None else req.prompt_token_ids
    return f"{base}/v1/completions", body


def new_session(timeout_s: float = 600.0) -> aiohttp.ClientSession:
    """An aiohttp session with no connection cap (the runner owns concurrency) and a total
    per-request timeout of ``timeout_s`` seconds.

    Pooled connections idle for more than :data:`KEEPALIVE_S` are not reused: reusing one races
    the server's idle timeout (uvicorn closes after 5 s) and fails the request with "connection
    reset by peer" - seen after agentic think times. Busy periods still reuse connections, so
    the client's own overhead stays low (``bench calibrate``).
    """
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S, enable_cleanup_closed=True)
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=30)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


async def stream_request(
    session: aiohttp.ClientSession,
    target: EndpointTarget,
    req: RequestSpec,
    record: RequestRecord,
    extra_body: dict[str, Any] | None = None,
) -> str:
    """Send ``req``, fill ``record``'s times, usage, finish reason and outcome; return the text.

    Success (DESIGN.md): the stream ended with a finish reason or ``[DONE]`` and no error event.
    Error classes: ``http_<status>``, ``stream_error`` (in-stream error event),
    ``incomplete_stream`` (EOF without finish reason or ``[DONE]``), ``timeout``,
    ``connection``. Never raises for a request failure (``CancelledError`` propagates).
    ``extra_body`` adds fields to the JSON body (engine-specific options).
    """
    url, body = build_payload(req, target)
    if extra_body:
        body.update(extra_body)
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
    parser = SSEParser()
    texts: list[str] = []
    chunk_times = record.chunk_times_ns
    done = False
    clock = time.perf_counter_ns
    record.send_ns = clock()
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                detail = (await resp.text())[:500]
                record.end_ns = clock()
                record.error_class = f"http_{resp.status}"
                record.error_message = detail.strip() or resp.reason
                return ""
            async for raw in resp.content.iter_any():
                t = clock()
                for ev in parser.feed(raw, t):
                    done = _apply(ev.data, ev.t_ns, record, texts, chunk_times) or done
            t = clock()
            for ev in parser.close(t):
                done = _apply(ev.data, ev.t_ns, record, texts, chunk_times) or done
            record.end_ns = t
    except asyncio.TimeoutError:
        record.end_ns = clock()
        record.error_class = "timeout"
        record.error_message = "request exceeded the client timeout"
    except aiohttp.ClientError as exc:
        record.end_ns = clock()
        record.error_class = "connection"
        record.error_message = f"{type(exc).__name__}: {exc}"[:500]
    text = "".join(texts)
    record.output_text_len = len(text)
    if chunk_times:
        record.first_token_ns = chunk_times[0]
        record.last_token_ns = chunk_times[-1]
    if record.error_class is None:
        if record.finish_reason is None and not done:
            record.error_class = "incomplete_stream"
            record.error_message = "stream ended without a finish reason or [DONE]"
        else:
            record.success = True
    if req.keep_output_text:
        record.output_text = text
    return text


def _apply(data: str, t_ns: int, record: RequestRecord, texts: list[str], chunk_times: list[int]) -> bool:
    """Fold one event into the record; returns True for ``[DONE]``."""
    info = interpret(data)
    if info.done:
        return True
    if info.error is not None:
        if record.error_class is None:
            record.error_class = "stream_error"
            record.error_message = info.error[:500]
        return False
    if info.token_bearing:
        chunk_times.append(t_ns)
        texts.append(info.text)
    if info.finish_reason and record.finish_reason is None:
        record.finish_reason = info.finish_reason
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
