"""The HTTP side shared by the reference engine's server and the shims: OpenAI error responses,
and one request's output as an SSE stream or one JSON body.

A server hands :func:`respond` a :class:`ChoiceStream` (the engine's per-request stream, or a
shim's batch row) and gets the response back:

- Streaming: chat streams start with one ``delta.role`` chunk per choice; then one chunk per
  :class:`Step` that carries text or a finish (a step whose tokens decode to no text yet - half
  a UTF-8 character, a possible stop-string prefix - sends nothing); with
  ``stream_options.include_usage`` a usage-only chunk (``choices: []``) follows; then
  ``data: [DONE]``. A failure mid-stream (:class:`StreamFailure`) sends
  ``data: {"error": {...}}`` and ends the stream without ``[DONE]``.
- Not streaming: the choices' texts are collected into one ``text_completion`` /
  ``chat.completion`` body; a client that disconnects first gets its request closed (HTTP 499).

In both cases the stream is closed when the response ends (a finished stream ignores it).
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
    chat_chunk,
    chat_response,
    completion_chunk,
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
    choice finished (``finish_reason``)."""

    index: int
    text: str
    finished: bool
    finish_reason: str | None


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
    try:
        if chat:
            for i in range(len(stream.finish_reasons)):
                yield sse(chat_chunk(rid, created, model, {"role": "assistant", "content": ""}, None, i))
        while not stream.finished:
            try:
                step = await stream.next_step()
            except StreamFailure as exc:
                yield sse(error_body(str(exc), 500, "InternalServerError"))
                return
            if step is None or (not step.text and not step.finished):
                continue  # nothing decodable yet (partial character or held-back stop prefix)
            if chat:
                delta = {"content": step.text} if step.text else {}
                yield sse(chat_chunk(rid, created, model, delta, step.finish_reason, step.index))
            else:
                yield sse(completion_chunk(rid, created, model, step.text, step.finish_reason, step.index))
        if include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            yield sse(usage_chunk(rid, obj, created, model, stream.usage()))
        yield sse("[DONE]")
    finally:
        stream.close()


async def _collect(raw: Request, stream: ChoiceStream, model: str, created: int, chat: bool) -> Response:
    async def run() -> list[str]:
        parts: list[list[str]] = [[] for _ in stream.finish_reasons]
        while not stream.finished:
            step = await stream.next_step()
            if step is not None:
                parts[step.index].append(step.text)
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
    build = chat_response if chat else completion_response
    return JSONResponse(build(stream.request_id, created, model, texts, stream.finish_reasons, stream.usage()))


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


def install_error_handlers(app: FastAPI, logger: logging.Logger) -> None:
    """Answer :class:`APIError`, HTTP errors (404 for unknown paths...) and unhandled exceptions
    (500, logged to ``logger``) with an OpenAI-style ``{"error": {...}}`` body."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        err_type = "NotFoundError" if exc.status_code == 404 else "BadRequestError"
        return JSONResponse(error_body(str(exc.detail), exc.status_code, err_type), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        return JSONResponse(
            error_body(f"internal error: {type(exc).__name__}: {exc}", 500, "InternalServerError"), status_code=500
        )
