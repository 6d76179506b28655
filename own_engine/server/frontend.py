"""The HTTP side shared by the reference engine's server and the shims: OpenAI error responses,
and one request's output as an SSE stream or one JSON body.

A server hands :func:`respond` a :class:`ChoiceStream` (the engine's per-request stream, or a
shim's batch row) and gets the response back:

- Streaming: chat streams start with one ``delta.role`` chunk per choice; then one chunk per
  :class:`Step` that carries text or a finish (a step whose tokens decode to no text yet - half
  a UTF-8 character, a possible stop-string prefix - sends nothing); with
  ``stream_options.include_usage`` a usage-only chunk (``choices: []``) follows; then
  ``data: [DONE]``. A failure mid-stream (:class:`StreamFailure`) sends
  ``data: {"error": {...}}`` and ends the stream without ``[DONE]``. With logprobs, each chunk
  carries the logprobs of the tokens consumed since the previous chunk of its choice (a step
  that sent nothing passes its tokens' logprobs on to the next chunk), so every counted token's
  logprobs are sent exactly once, with the chunk that carries its text.
- Not streaming: the choices' texts are collected into one ``text_completion`` /
  ``chat.completion`` body; a client that disconnects first gets its request closed (HTTP 499).

In both cases the stream is closed when the response ends (a finished stream ignores it).

Request bodies are read with :func:`read_body`, which stops at a size limit (HTTP 413) before
the body is held in memory. An unhandled error before the response started is answered 500
without closing the keep-alive connection (:func:`install_error_handlers`).

Imports the standard library, FastAPI/Starlette and :mod:`~own_engine.server.protocol` only
(no torch): the shims import it inside other engines' venvs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from own_engine.server.protocol import (
    APIError,
    LogprobEntry,
    chat_chunk,
    chat_logprobs,
    chat_response,
    completion_chunk,
    completion_logprobs,
    completion_response,
    error_body,
    sse,
    usage_chunk,
)


class StreamFailure(Exception):
    """The engine failed while this request was in flight (the message goes to the client)."""


@dataclass(frozen=True)
class Step:
    """One chunk's worth of output for choice ``index``: ``text`` (may be "") and whether that
    choice finished (``finish_reason``); ``logprobs``: one :class:`LogprobEntry` per token this
    step consumed when the request asked for logprobs, else None."""

    index: int
    text: str
    finished: bool
    finish_reason: str | None
    logprobs: tuple[LogprobEntry, ...] | None = None


class ChoiceStream(Protocol):
    """One in-flight request with ``len(finish_reasons)`` choices, as the front-end reads it.

    ``next_step`` waits for the next output of any choice (None: nothing for the client, e.g.
    output of a choice that already ended) and raises :class:`StreamFailure` when the engine
    failed; ``finished`` turns True once every choice ended; ``usage`` is the OpenAI ``usage``
    object so far; ``close`` (idempotent) releases the request in the engine if unfinished.
    """

    request_id: str
    finished: bool
    finish_reasons: list[str | None]

    async def next_step(self) -> Step | None: ...

    def usage(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


async def respond(
    raw: Request, stream: ChoiceStream, model: str, created: int, *, chat: bool, streaming: bool, include_usage: bool
) -> Response:
    """The HTTP response for ``stream`` (see the module docstring); ``created``: Unix seconds.

    Raises :class:`~own_engine.server.protocol.APIError` (500) when a non-streamed request fails.
    """
    if streaming:
        return StreamingResponse(
            _sse(stream, model, created, chat, include_usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            background=BackgroundTask(_aclose, stream),
        )
    return await _collect(raw, stream, model, created, chat)


async def _sse(stream: ChoiceStream, model: str, created: int, chat: bool, include_usage: bool) -> AsyncIterator[str]:
    rid = stream.request_id
    n = len(stream.finish_reasons)
    pending: list[list[LogprobEntry] | None] = [None] * n  # per choice: logprobs not sent yet
    sent = [0] * n  # per choice: characters of text sent
    try:
        if chat:
            for i in range(n):
                yield sse(chat_chunk(rid, created, model, {"role": "assistant", "content": ""}, None, i))
        while not stream.finished:
            try:
                step = await stream.next_step()
            except StreamFailure as exc:
                yield sse(error_body(str(exc), 500, "InternalServerError"))
                return
            if step is None:
                continue
            i = step.index
            if step.logprobs is not None:
                pending[i] = (pending[i] or []) + list(step.logprobs)
            if not step.text and not step.finished:
                continue  # nothing decodable yet (partial character or held-back stop prefix)
            sent[i] += len(step.text)
            lps, pending[i] = pending[i], None
            if chat:
                delta = {"content": step.text} if step.text else {}
                yield sse(chat_chunk(rid, created, model, delta, step.finish_reason, i,
                                     None if lps is None else chat_logprobs(lps)))
            else:
                yield sse(completion_chunk(rid, created, model, step.text, step.finish_reason, i,
                                           None if lps is None else completion_logprobs(lps, sent[i])))
        if include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            yield sse(usage_chunk(rid, obj, created, model, stream.usage()))
        yield sse("[DONE]")
    finally:
        stream.close()


async def _collect(raw: Request, stream: ChoiceStream, model: str, created: int, chat: bool) -> Response:
    logprobs: list[list[LogprobEntry] | None] = [None for _ in stream.finish_reasons]

    async def run() -> list[str]:
        parts: list[list[str]] = [[] for _ in stream.finish_reasons]
        while not stream.finished:
            step = await stream.next_step()
            if step is not None:
                parts[step.index].append(step.text)
                if step.logprobs is not None:
                    logprobs[step.index] = (logprobs[step.index] or []) + list(step.logprobs)
        return ["".join(p) for p in parts]

    gen = asyncio.ensure_future(run())
    watcher = asyncio.ensure_future(_wait_for_disconnect(raw))
    try:
        await asyncio.wait({gen, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not gen.done():  # the client left: free the engine's resources
            gen.cancel()
            stream.close()
            return Response(status_code=499)
        try:
            texts = gen.result()
        except StreamFailure as exc:
            raise APIError(str(exc), 500, "InternalServerError") from None
    finally:
        watcher.cancel()
        stream.close()
    if chat:
        lp_objs = [None if lp is None else chat_logprobs(lp) for lp in logprobs]
    else:
        lp_objs = [None if lp is None else completion_logprobs(lp, len(t)) for lp, t in zip(logprobs, texts)]
    build = chat_response if chat else completion_response
    return JSONResponse(build(stream.request_id, created, model, texts, stream.finish_reasons, stream.usage(),
                              lp_objs if any(lp is not None for lp in lp_objs) else None))


# An oversized body up to this many times the limit is read and dropped (keep-alive kept); a
# larger one is answered at once and its connection closed.
DRAIN_FACTOR = 64


async def read_body(request: Request, max_bytes: int | None) -> bytes:
    """The request body, at most ``max_bytes`` bytes (None: no limit).

    Raises :class:`~own_engine.server.protocol.APIError` 413 when the body is larger. Nothing
    past the limit is kept: the rest of the body is read and dropped, so the client, still
    sending, reads the 413 instead of a connection reset and the connection stays usable. A body
    that declares (``Content-Length``) or sends more than :data:`DRAIN_FACTOR` times the limit is
    answered at once and its connection closed (``Connection: close``).
    """
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else None  # h11/httptools reject malformed values
    if max_bytes is None:
        return await request.body()
    if size is not None and size > DRAIN_FACTOR * max_bytes:
        raise _too_large(size, max_bytes, close=True)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > max_bytes:
            chunks.clear()
            if received > DRAIN_FACTOR * max_bytes:
                raise _too_large(size, max_bytes, close=True)
        else:
            chunks.append(chunk)
    if received > max_bytes:
        raise _too_large(size, max_bytes, close=False)
    return b"".join(chunks)


def _too_large(size: int | None, max_bytes: int, *, close: bool) -> APIError:
    what = f"is {size} bytes, over" if size is not None else "is over"
    err = APIError(
        f"the request body {what} this server's limit of {max_bytes} bytes; send a shorter prompt "
        f"(the server's --max-body-bytes sets the limit)",
        413,
        "RequestTooLargeError",
    )
    if close:
        err.headers = {"Connection": "close"}
    return err


async def _aclose(stream: ChoiceStream) -> None:
    """Close ``stream`` on the event loop (an async background task; a sync one would run in a
    thread pool and race the generator's own ``finally``)."""
    stream.close()


async def _wait_for_disconnect(request: Request) -> None:
    """Return when the client closes the connection (after the body was read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class _KeepAliveInternalErrors:
    """ASGI middleware: an exception that escapes a handler before its response started is
    answered here with a 500 JSON error body (logged to ``logger``) and not re-raised.

    Starlette's own last-resort handler (``ServerErrorMiddleware``) sends its response and then
    re-raises, on which uvicorn closes the connection: a keep-alive client's next request on it
    failed with a connection reset. An exception after the response started (a broken stream)
    still propagates: that connection cannot be reused.
    """

    def __init__(self, app: Any, logger: logging.Logger) -> None:
        self.app = app
        self.logger = logger

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:
            if started:
                raise
            self.logger.exception("unhandled error")
            await _internal_error_response(exc)(scope, receive, send)


def _internal_error_response(exc: Exception) -> JSONResponse:
    message = " ".join(f"internal error: {type(exc).__name__}: {exc}".split())  # one line
    return JSONResponse(error_body(message, 500, "InternalServerError"), status_code=500)


def install_error_handlers(app: FastAPI, logger: logging.Logger) -> None:
    """Answer :class:`APIError` (with its ``headers``), HTTP errors (404 for unknown paths...)
    and unhandled exceptions (500, logged to ``logger``, the connection kept alive: see
    :class:`_KeepAliveInternalErrors`) with an OpenAI-style ``{"error": {...}}`` body."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        err_type = "NotFoundError" if exc.status_code == 404 else "BadRequestError"
        return JSONResponse(error_body(str(exc.detail), exc.status_code, err_type), status_code=exc.status_code)

    app.add_middleware(_KeepAliveInternalErrors, logger=logger)

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:  # the middleware's own failures
        logger.exception("unhandled error")
        return _internal_error_response(exc)
