"""OpenAI-compatible HTTP server for the reference engine (FastAPI; run it with ``python -m own_engine``).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streaming SSE and plain
JSON), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text, see
:mod:`own_engine.server.metrics`).

Architecture (the shape of vLLM's ``AsyncLLM`` + ``OpenAIServing*``, minus multiprocessing):

- One :class:`~own_engine.server.worker.EngineWorker` thread owns the engine and calls
  ``engine.step()`` in a loop; handlers hand it requests through a thread-safe queue and get
  each step's ``RequestOutput`` back on an ``asyncio.Queue`` (``loop.call_soon_threadsafe``).
- Each handler owns one :class:`~own_engine.server.text.OutputTextProcessor` per choice: incremental
  detokenization (no partial UTF-8 characters) and stop strings (which the engine does not
  know about: on a match the handler truncates the text and aborts the request in the engine).
- ``n > 1`` (up to ``max_num_seqs``) gives ``n`` choices sampled by the engine from one prompt
  (forked sequences sharing the prompt's KV blocks); each streamed chunk carries one choice.
- Streaming sends one SSE chunk per engine step per request as soon as the step's tokens exist
  (a step whose tokens decode to no text yet - half a UTF-8 character, a possible stop-string
  prefix - sends nothing; its text goes out with the next chunk).
  Chat streams start with a ``delta.role`` chunk; the last content chunk carries
  ``finish_reason``; with ``stream_options.include_usage`` a usage-only chunk (``choices: []``,
  ``usage.prompt_tokens_details.cached_tokens``) follows; then ``data: [DONE]``. An engine
  failure mid-stream sends ``data: {"error": {...}}`` and ends the stream without ``[DONE]``.
- A client that disconnects (streaming or not) has its request aborted in the engine, which
  frees its KV blocks.
- Bad requests (bad JSON, missing ``prompt``/``messages``, ``max_tokens`` < 1, prompt +
  ``max_tokens`` > ``max_model_len``, unknown model, unsupported options such as ``logprobs``)
  get HTTP 400 with an OpenAI-style ``{"error": {"message", "type", "param", "code"}}`` body.

No module-level mutable state: everything lives in the app built by :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from own_engine.server.metrics import CONTENT_TYPE, ServerCounters, render_metrics
from own_engine.server.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    chat_chunk,
    chat_messages,
    chat_response,
    completion_chunk,
    completion_response,
    error_body,
    parse_body,
    sse,
    usage,
    usage_chunk,
)
from own_engine.server.text import OutputTextProcessor
from own_engine.server.worker import EngineFailure, EngineNotRunning, EngineWorker

logger = logging.getLogger("own_engine.server")

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class _StreamFailure(Exception):
    """The engine failed while this request was in flight."""


@dataclass(frozen=True)
class _Step:
    """One chunk's worth of output for choice ``index``: ``text`` (may be "") and whether that
    choice finished (``finish_reason``)."""

    index: int
    text: str
    finished: bool
    finish_reason: str | None


class _RequestStream:
    """The handler side of one in-flight request with ``n`` choices: engine outputs → text
    steps, and cleanup.

    Each choice (``RequestOutput.index``) has its own :class:`OutputTextProcessor`. Every
    choice is counted in ``counters`` exactly once when it ends (its finish reason, or
    ``abort`` when the client left first), like vLLM v1 which fans ``n > 1`` out into child
    requests. A choice ended by a stop string ignores the engine's further tokens for it (the
    engine aborts whole requests only); once every choice is done the request is aborted in the
    engine if still running. :meth:`close` aborts it if unfinished.
    """

    def __init__(
        self,
        request_id: str,
        out_queue: asyncio.Queue,
        texts: list[OutputTextProcessor],
        worker: EngineWorker,
        counters: ServerCounters,
        num_prompt_tokens: int,
    ) -> None:
        self.request_id = request_id
        self._queue = out_queue
        self._texts = texts
        self._worker = worker
        self._counters = counters
        self.num_prompt_tokens = num_prompt_tokens
        self.num_cached_tokens = 0
        self.finish_reasons: list[str | None] = [None] * len(texts)
        self._done = [False] * len(texts)
        self._engine_done = [False] * len(texts)
        self.finished = False

    @property
    def num_output_tokens(self) -> int:
        """Generated tokens of all choices up to their finish (tokens after a stop-string match
        excluded)."""
        return sum(t.num_tokens for t in self._texts)

    def usage(self) -> dict[str, Any]:
        """The OpenAI ``usage`` object for this request so far."""
        return usage(self.num_prompt_tokens, self.num_output_tokens, self.num_cached_tokens)

    async def next_step(self) -> _Step | None:
        """Wait for this request's next engine output (one per engine step and choice) and turn
        it into text; None when the output belongs to a choice that already ended.

        Raises :class:`_StreamFailure` when the engine failed instead.
        """
        out = await self._queue.get()
        if isinstance(out, EngineFailure):
            self.finished = True
            self._counters.request_failure += self._done.count(False)
            raise _StreamFailure(out.message)
        if getattr(out, "num_cached_tokens", None) is not None:
            self.num_cached_tokens = out.num_cached_tokens
        i = int(getattr(out, "index", 0) or 0)
        finished, reason = bool(out.finished), out.finish_reason
        self._engine_done[i] = self._engine_done[i] or finished
        if self._done[i]:
            return None
        delta = self._texts[i].process(list(out.new_token_ids), finished, reason)
        self._counters.generation_tokens += delta.num_tokens
        if delta.stopped:
            finished, reason = True, "stop"
        if finished:
            self._done[i], self.finish_reasons[i] = True, reason
            self._counters.record_finished(reason or "stop")
            if all(self._done):
                self.finished = True
                if not all(self._engine_done):  # a stop string ended it before the engine did
                    self._worker.abort(self.request_id)
        return _Step(i, delta.text, finished, reason)

    def close(self) -> None:
        """Abort the request in the engine unless it already finished (idempotent)."""
        if not self.finished:
            self.finished = True
            self._worker.abort(self.request_id)
            for i, done in enumerate(self._done):
                if not done:
                    self._done[i], self.finish_reasons[i] = True, "abort"
                    self._counters.record_finished("abort")


async def _aclose(stream: _RequestStream) -> None:
    """Close ``stream`` on the event loop (an async background task; a sync one would run in a
    thread pool and race the generator's own ``finally``)."""
    stream.close()


async def _wait_for_disconnect(request: Request) -> None:
    """Return when the client closes the connection (after the body was read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class OpenAIServing:
    """Request handling for both generation endpoints, bound to one engine + worker.

    ``engine``: ``LLMEngine`` API (``tokenizer``, ``max_model_len``; the rest is used through
    the worker). ``sampling_params_cls``: builds the engine's sampling parameters (default
    :class:`own_engine.sampling_params.SamplingParams`); it must raise ``ValueError`` on
    invalid values.
    """

    def __init__(
        self,
        engine: Any,
        worker: EngineWorker,
        counters: ServerCounters,
        model_name: str,
        sampling_params_cls: Callable[..., Any],
    ) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.max_model_len = int(engine.max_model_len)
        self.worker = worker
        self.counters = counters
        self.model_name = model_name
        self._sampling_params_cls = sampling_params_cls
        model_config = getattr(engine, "model_config", None)
        self._vocab_size = int(getattr(model_config, "vocab_size", 0) or len(self.tokenizer))
        # EOS ids the engine stops on (generation_config + tokenizer): their text is never shown.
        self._eos_ids = sorted(getattr(engine, "eos_token_ids", None) or ())
        self._max_n = int(getattr(getattr(engine, "config", None), "max_num_seqs", 0) or 16)

    # ------------------------------------------------------------------ validation
    def _check_common(self, req: Any) -> None:
        if req.model is not None and req.model != self.model_name:
            raise APIError(
                f"the model '{req.model}' is not served here; use '{self.model_name}' (see GET /v1/models)",
                param="model",
            )
        if not 1 <= req.n <= self._max_n:
            raise APIError(f"n must be between 1 and {self._max_n} (max_num_seqs), got {req.n}", param="n")
        if req.best_of not in (None, req.n):
            raise APIError("best_of is not supported; omit it or send best_of equal to n", param="best_of")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(req, name) not in (None, 0, 0.0):
                raise APIError(f"{name} is not supported; omit it or send 0", param=name)
        if req.repetition_penalty not in (None, 1, 1.0):
            raise APIError("repetition_penalty is not supported; omit it or send 1", param="repetition_penalty")
        if req.stop_token_ids:
            self._check_token_ids(req.stop_token_ids, "stop_token_ids")

    def _check_token_ids(self, ids: list[int], what: str) -> None:
        bad = [t for t in ids if not 0 <= t < self._vocab_size]
        if bad:
            raise APIError(
                f"{what} has token id {bad[0]} outside the vocabulary [0, {self._vocab_size})", param=what
            )

    def _completion_prompt_ids(self, req: CompletionRequest) -> list[int]:
        prompt = req.prompt
        if prompt is None:
            raise APIError("missing required field 'prompt' (a string or a list of token ids)", param="prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            ids = list(self.tokenizer.encode(prompt, add_special_tokens=True))
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
            self._check_token_ids(ids, "prompt")
        elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise APIError(
                f"batched prompts ({len(prompt)}) are not supported; send one prompt per request", param="prompt"
            )
        else:
            raise APIError("'prompt' must be a string or a list of token ids", param="prompt")
        if not ids:
            raise APIError("the prompt is empty; send at least one token", param="prompt")
        return ids

    def _chat_prompt_ids(self, req: ChatCompletionRequest) -> list[int]:
        messages = chat_messages(req)
        if req.tools:
            raise APIError("tools are not supported by this server; omit 'tools'", param="tools")
        if getattr(self.tokenizer, "chat_template", "present") is None:
            raise APIError("this model has no chat template; use /v1/completions", param="messages")
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as exc:  # a Jinja error in the template (e.g. bad role order)
            raise APIError(f"the chat template rejected the messages: {exc}", param="messages") from None
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if not ids:
            raise APIError("the chat prompt is empty", param="messages")
        return ids

    def _max_tokens(self, requested: int | None, default: int | None, num_prompt: int, what: str) -> int:
        if requested is not None and requested < 1:
            raise APIError(f"{what} must be at least 1, got {requested}", param=what)
        room = self.max_model_len - num_prompt
        if requested is None and default is None:  # chat: the rest of the context (vLLM)
            if room < 1:
                raise APIError(
                    f"This model's maximum context length is {self.max_model_len} tokens, and the prompt has "
                    f"{num_prompt} tokens, leaving no room for a completion. Please shorten the prompt.",
                    param="messages",
                )
            return room
        max_tokens = requested if requested is not None else default
        if num_prompt + max_tokens > self.max_model_len:
            raise APIError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{num_prompt + max_tokens} tokens ({num_prompt} in the prompt, {max_tokens} in the completion). "
                f"Please reduce the length of the prompt or {what}.",
                param=what,
            )
        return max_tokens

    def _sampling_params(self, req: Any, max_tokens: int) -> Any:
        kwargs: dict[str, Any] = {
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "top_k": -1 if req.top_k in (None, 0) else req.top_k,
            "seed": req.seed,
            "max_tokens": max_tokens,
            "stop": req.stop_list() or None,
            "stop_token_ids": req.stop_token_ids or None,
            "ignore_eos": req.ignore_eos,
            "n": req.n,
        }
        try:
            return self._sampling_params_cls(**kwargs)
        except (ValueError, TypeError) as exc:
            raise APIError(f"invalid sampling parameters: {exc}") from None

    # ------------------------------------------------------------------ endpoints
    async def completions(self, raw: Request) -> Response:
        """``POST /v1/completions``."""
        req = parse_body(await raw.body(), CompletionRequest)
        self._check_common(req)
        if req.echo:
            raise APIError("echo is not supported; omit it or send false", param="echo")
        if req.suffix:
            raise APIError("suffix is not supported; omit it", param="suffix")
        if req.logprobs:
            raise APIError("logprobs are not supported; omit 'logprobs'", param="logprobs")
        ids = self._completion_prompt_ids(req)
        max_tokens = self._max_tokens(req.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS, len(ids), "max_tokens")
        return await self._generate(raw, req, ids, max_tokens, chat=False)

    async def chat_completions(self, raw: Request) -> Response:
        """``POST /v1/chat/completions``."""
        req = parse_body(await raw.body(), ChatCompletionRequest)
        self._check_common(req)
        if req.logprobs or req.top_logprobs:
            raise APIError("logprobs are not supported; omit 'logprobs'", param="logprobs")
        ids = self._chat_prompt_ids(req)
        if req.max_completion_tokens is not None:
            requested, what = req.max_completion_tokens, "max_completion_tokens"
        else:
            requested, what = req.max_tokens, "max_tokens"
        max_tokens = self._max_tokens(requested, None, len(ids), what)
        return await self._generate(raw, req, ids, max_tokens, chat=True)

    async def _generate(self, raw: Request, req: Any, ids: list[int], max_tokens: int, chat: bool) -> Response:
        params = self._sampling_params(req, max_tokens)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            out_queue = await self.worker.submit(rid, ids, params)
        except ValueError as exc:
            raise APIError(str(exc)) from None
        except EngineNotRunning as exc:
            raise APIError(str(exc), 503, "ServiceUnavailableError") from None
        self.counters.prompt_tokens += len(ids)
        stop_ids = [*(req.stop_token_ids or ()), *self._eos_ids]
        texts = [OutputTextProcessor(self.tokenizer, ids, req.stop_list(), stop_ids) for _ in range(req.n)]
        stream = _RequestStream(rid, out_queue, texts, self.worker, self.counters, len(ids))
        created = int(time.time())
        if req.stream:
            return StreamingResponse(
                self._sse(stream, created, chat, req.include_usage, req.n),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                background=BackgroundTask(_aclose, stream),
            )
        return await self._collect(raw, stream, created, chat)

    async def _sse(
        self, stream: _RequestStream, created: int, chat: bool, include_usage: bool, n: int
    ) -> AsyncIterator[str]:
        rid, model = stream.request_id, self.model_name
        try:
            if chat:
                for i in range(n):
                    yield sse(chat_chunk(rid, created, model, {"role": "assistant", "content": ""}, None, i))
            while not stream.finished:
                try:
                    step = await stream.next_step()
                except _StreamFailure as exc:
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

    async def _collect(self, raw: Request, stream: _RequestStream, created: int, chat: bool) -> Response:
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
            except _StreamFailure as exc:
                raise APIError(str(exc), 500, "InternalServerError") from None
        finally:
            watcher.cancel()
            stream.close()
        build = chat_response if chat else completion_response
        return JSONResponse(
            build(stream.request_id, created, self.model_name, texts, stream.finish_reasons, stream.usage())
        )

    # ------------------------------------------------------------------ other endpoints
    def models(self) -> dict[str, Any]:
        """``GET /v1/models``."""
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "own_engine",
                    "max_model_len": self.max_model_len,
                }
            ],
        }


def _default_model_name(engine: Any) -> str:
    model_dir = getattr(getattr(engine, "config", None), "model_dir", None)
    return Path(model_dir).name if model_dir else "own_engine"


def create_app(
    engine: Any,
    served_model_name: str | None = None,
    sampling_params_cls: Callable[..., Any] | None = None,
) -> FastAPI:
    """Build the FastAPI app serving ``engine`` (an ``LLMEngine`` or an object with its API).

    The engine thread starts with the app's lifespan and stops with it. ``served_model_name``
    defaults to the model folder's name (``engine.config.model_dir``). Nothing is shared
    between two apps.
    """
    if sampling_params_cls is None:
        from own_engine.sampling_params import SamplingParams

        sampling_params_cls = SamplingParams
    model_name = served_model_name or _default_model_name(engine)
    worker = EngineWorker(engine)
    counters = ServerCounters()
    serving = OpenAIServing(engine, worker, counters, model_name, sampling_params_cls)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(title="own_engine OpenAI-compatible server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.serving = serving
    app.state.worker = worker
    app.state.counters = counters

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

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serving.completions(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serving.chat_completions(request)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return serving.models()

    @app.get("/health")
    async def health() -> Response:
        if not worker.alive:
            return JSONResponse(error_body("the engine thread is not running", 503, "ServiceUnavailableError"), 503)
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(render_metrics(worker.stats(), counters, model_name), media_type=CONTENT_TYPE)

    return app
