"""The OpenAI-compatible streaming server shared by our shims (transformers static batching,
DeepSpeed ``init_inference``, ONNX Runtime GenAI; OpenVINO GenAI's continuous batching brings
its own stepping worker, :mod:`adapters.shims.ov_server`, and uses the rest).

A shim supplies a :class:`Backend` (tokenizer + ``generate_batch``); this module supplies the
static batch collector (:class:`BatchWorker`: requests that arrive while the engine is idle are
collected for ``batch_window_ms`` into one batch of at most ``max_batch_size`` rows; requests
arriving while a batch runs wait for the next one - "the batch waits for its longest member"),
per-row stop rules (:func:`emit_token`: EOS unless ``ignore_eos``, ``stop_token_ids``,
``max_tokens``) and the
endpoints (``/health``, ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``,
``/v1/server_info``, ``/shim/stats``).

Everything OpenAI-facing is the reference engine's, so both front-ends behave alike: request
models and errors (:mod:`own_engine.server.protocol`), request checks
(:mod:`own_engine.server.validation`; ``n`` must be 1, an unknown model is HTTP 404, ``top_k``
is rejected: the backends do not implement it), incremental detokenization and stop strings
(:mod:`own_engine.server.text`), SSE framing and usage (:mod:`own_engine.server.frontend`).
Each generated token is handed to the front-end the moment the engine emits it, so per-token
timestamps are taken by the same client clock as every other engine. ``completion_tokens``
counts the generated ids including a final EOS (vLLM's convention).

This module runs inside engine venvs with the project root on ``PYTHONPATH``: it imports only
the standard library, FastAPI, pydantic, uvicorn and those torch-free ``own_engine.server``
modules (torch/transformers are imported by the backends).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import Response

from own_engine.server.frontend import Step, StreamFailure, install_error_handlers, respond
from own_engine.server.protocol import APIError, ChatCompletionRequest, CompletionRequest, model_list, parse_body, usage
from own_engine.server.text import OutputTextProcessor
from own_engine.server.validation import EngineInput, RequestValidator

logger = logging.getLogger("adapters.shims")


# ---------------------------------------------------------------------------------------------
# Requests, rows and the batch worker
# ---------------------------------------------------------------------------------------------
@dataclass
class GenRequest:
    """One request as a batch row: ``prompt_ids`` ``[prompt_len]`` token ids; ``max_tokens``
    generated tokens at most; sampling params; ``stop_token_ids`` end the row like EOS (but also
    with ``ignore_eos``); the outputs go to ``out`` on ``loop``."""

    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: frozenset[int] = frozenset()
    loop: asyncio.AbstractEventLoop | None = None
    out: asyncio.Queue | None = None
    # filled by the worker
    generated: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: bool = False

    @property
    def sampling_key(self) -> tuple:
        """Rows of one batch share this (HF ``generate`` takes one temperature/top_p per call)."""
        return (round(self.temperature, 6), round(self.top_p, 6), self.seed)

    def push(self, item: tuple) -> None:
        """Hand an output item to the request's event loop (thread-safe)."""
        if self.loop is not None and self.out is not None:
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)


def emit_token(r: GenRequest, token_id: int, eos: set[int] | frozenset[int]) -> bool:
    """Hand one new token of row ``r`` to its stream under the per-row stop rules (shared by the
    static :class:`BatchWorker` and the continuous-batching shims): an id in ``eos`` (unless
    ``ignore_eos``) or in ``stop_token_ids`` ends the row with "stop" (counted in ``generated``,
    not streamed); ``max_tokens`` reached ends it with "length". Tokens of a finished or cancelled
    row are ignored. Returns True when the row is finished (or was already)."""
    if r.finish_reason is not None or r.cancelled:
        return True
    r.generated.append(token_id)
    if (token_id in eos and not r.ignore_eos) or token_id in r.stop_token_ids:
        r.finish_reason = "stop"
        r.push(("done", "stop"))
        return True
    r.push(("token", token_id))
    if len(r.generated) >= r.max_tokens:
        r.finish_reason = "length"
        r.push(("done", "length"))
        return True
    return False


class Backend(Protocol):
    """What a shim's engine provides.

    ``tokenizer``: a Hugging Face tokenizer (chat template, decode); ``eos_token_ids``: ids that
    end a row unless it asked for ``ignore_eos``. ``generate_batch(batch, emit, done)`` runs ONE
    engine call over all rows (static batching), calling ``emit(row, token_id)`` for every new
    token of every row as soon as the engine produces it; it may stop early once ``done(row)``
    is true for all rows, and must return when the batch is finished.
    """

    tokenizer: Any
    eos_token_ids: set[int]
    model_label: str

    def generate_batch(self, batch: list[GenRequest], emit: Callable[[int, int], None],
                       done: Callable[[int], bool]) -> None: ...


class BatchWorker:
    """Static batching on one background thread (see module docstring).

    ``max_batch_size``: rows per engine call; ``batch_window_ms``: collection window (ms)
    after the first request of an idle period. Rows with a different sampling key than the
    batch's first row are deferred to a later batch.
    """

    def __init__(self, backend: Backend, max_batch_size: int = 8, batch_window_ms: float = 10.0) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 (got {max_batch_size})")
        self.backend = backend
        self.max_batch_size = max_batch_size
        self.window_s = max(batch_window_ms, 0.0) / 1000.0
        self.q: "queue.Queue[GenRequest | None]" = queue.Queue()
        self._deferred: list[GenRequest] = []
        self._thread = threading.Thread(target=self._run, name="batch-worker", daemon=True)
        self.batches_run = 0
        self.batch_sizes: list[int] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.q.put(None)

    def submit(self, req: GenRequest) -> None:
        """Queue a request for the next batch."""
        self.q.put(req)

    def _next(self, timeout: float | None) -> GenRequest | None:
        if self._deferred:
            return self._deferred.pop(0)
        return self.q.get(timeout=timeout) if timeout is None or timeout > 0 else self.q.get_nowait()

    def _key(self, req: GenRequest) -> tuple:
        """Rows of one batch must agree on this: the sampling key, plus whatever the backend's
        optional ``batch_key(req)`` adds (e.g. ONNX Runtime GenAI cannot mix ``ignore_eos`` rows)."""
        extra = getattr(self.backend, "batch_key", None)
        return req.sampling_key + (tuple(extra(req)) if extra else ())

    def collect(self) -> list[GenRequest] | None:
        """Block for the first request, then gather more for the window (None = shut down)."""
        first = self._next(None)
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + self.window_s
        skipped: list[GenRequest] = []
        while len(batch) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                nxt = self._next(remaining if remaining > 0 else 0)
            except queue.Empty:
                break
            if nxt is None:
                self.q.put(None)
                break
            if nxt.cancelled:
                continue
            if self._key(nxt) != self._key(first):
                skipped.append(nxt)
                continue
            batch.append(nxt)
        self._deferred = skipped + self._deferred
        return batch

    def _run(self) -> None:
        while True:
            batch = self.collect()
            if batch is None:
                return
            batch = [r for r in batch if not r.cancelled]
            if not batch:
                continue
            self.run_batch(batch)

    def run_batch(self, batch: list[GenRequest]) -> None:
        """One engine call over ``batch``; applies stop rules and reports every row's end."""
        eos = self.backend.eos_token_ids

        def done(i: int) -> bool:
            r = batch[i]
            return r.finish_reason is not None or r.cancelled

        def emit(i: int, token_id: int) -> None:
            emit_token(batch[i], token_id, eos)

        self.batches_run += 1
        self.batch_sizes.append(len(batch))
        try:
            self.backend.generate_batch(batch, emit, done)
        except Exception as exc:  # report to every unfinished row, keep serving
            for r in batch:
                if r.finish_reason is None:
                    r.finish_reason = "error"
                    r.push(("error", f"{type(exc).__name__}: {exc}"))
            return
        for r in batch:
            if r.finish_reason is None:  # the engine ended the row (e.g. its own max length)
                r.finish_reason = "length"
                r.push(("done", "length"))


# ---------------------------------------------------------------------------------------------
# The OpenAI front-end over the batch worker
# ---------------------------------------------------------------------------------------------
class _RowStream:
    """One batch row as the front-end's :class:`~own_engine.server.frontend.ChoiceStream` (one
    choice): the worker's ``("token", id)`` / ``("done", reason)`` / ``("error", message)`` items
    become text steps through ``text``. A row ended by a stop string, or whose client left, is
    cancelled, so the batch stops waiting for it."""

    def __init__(self, request_id: str, row: GenRequest, text: OutputTextProcessor) -> None:
        self.request_id = request_id
        self.finished = False
        self.finish_reasons: list[str | None] = [None]
        self._row = row
        self._text = text

    async def next_step(self) -> Step:
        """The row's next item as text; raises :class:`StreamFailure` when the engine failed."""
        kind, val = await self._row.out.get()
        if kind == "error":
            self.close()
            raise StreamFailure(val)
        if kind == "token":
            delta = self._text.process([val], False)
            finished = delta.stopped
        else:  # the row ended; on "stop" its last token (EOS or a stop token id) is counted, not shown
            delta = self._text.process(self._row.generated[-1:] if val == "stop" else [], True, val)
            finished = True
        reason = "stop" if delta.stopped else (val if finished else None)
        if finished:
            self.finish_reasons[0] = reason
            self.close()
        return Step(0, delta.text, finished, reason)

    def usage(self) -> dict[str, Any]:
        """Prompt and generated tokens (up to a stop-string match); no prefix cache to report."""
        return usage(len(self._row.prompt_ids), self._text.num_tokens)

    def close(self) -> None:
        """End the stream; the worker stops generating for the row (idempotent)."""
        self.finished = True
        self._row.cancelled = True


def create_app(backend: Backend, worker: Any, served_model_name: str, max_model_len: int | None = None,
               default_max_tokens: int = 16, settings: dict[str, Any] | None = None,
               info: Callable[[], dict[str, Any]] | None = None,
               stats: Callable[[], dict[str, Any]] | None = None) -> FastAPI:
    """The FastAPI app serving ``backend`` through ``worker`` under ``served_model_name``.

    ``worker``: anything with ``submit(GenRequest)`` (the static :class:`BatchWorker`, or a
    continuous-batching shim's stepping worker); ``max_model_len``: prompt + ``max_tokens`` limit
    in tokens (None: not checked); ``default_max_tokens``: for a request without ``max_tokens``
    (completions and chat); ``settings``: what the shim was started with (``threads``, ``dtype``,
    ``device``), reported by ``GET /v1/server_info`` next to the batch limits for the parity
    audit. ``info`` / ``stats``: what ``GET /v1/server_info`` / ``GET /shim/stats`` answer instead
    of the static batch's description (a shim whose engine schedules its own batches).
    """
    app = FastAPI(title=f"shim: {backend.model_label}", docs_url=None, redoc_url=None)
    install_error_handlers(app, logger)
    tok = backend.tokenizer
    validator = RequestValidator(
        tok, served_model_name, max_model_len, max_n=1, max_n_why=" (a shim samples one choice per request)",
        vocab_size=len(tok) if hasattr(tok, "__len__") else None, chat_default_max_tokens=default_max_tokens,
        unknown_model_status=404)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return model_list(served_model_name, "llm-serve-bench", max_model_len)

    async def _generate(raw: Request, req: Any, inp: EngineInput, chat: bool) -> Response:
        params = inp.sampling_params
        if params.top_k != -1:
            raise APIError("top_k is not supported by this engine's shim; omit it", param="top_k")
        row = GenRequest(prompt_ids=inp.prompt_token_ids, max_tokens=inp.max_tokens, ignore_eos=params.ignore_eos,
                         temperature=params.temperature, top_p=params.top_p, seed=params.seed,
                         stop_token_ids=frozenset(params.stop_token_ids or ()), loop=asyncio.get_running_loop(),
                         out=asyncio.Queue())
        text = OutputTextProcessor(tok, row.prompt_ids, req.stop_list(),
                                   validator.stop_token_ids(req, backend.eos_token_ids))
        worker.submit(row)
        stream = _RowStream(f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", row, text)
        return await respond(raw, stream, served_model_name, int(time.time()), chat=chat, streaming=req.stream,
                             include_usage=req.include_usage)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = parse_body(await request.body(), CompletionRequest)
        return await _generate(request, req, validator.completion(req), chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = parse_body(await request.body(), ChatCompletionRequest)
        return await _generate(request, req, validator.chat(req), chat=True)

    @app.get("/v1/server_info")
    async def server_info() -> dict:
        if info is not None:
            return info()
        # static batches over Hugging Face generate / the ORT Generator: each row has its own
        # cache for one call, so no shared KV budget, no prefix reuse, no chunked prefill
        return {"engine": backend.model_label, "batching": "static", "max_batch_size": worker.max_batch_size,
                "batch_window_ms": worker.window_s * 1000.0, "max_model_len": max_model_len,
                "kv_cache": "per-request cache for one batch (no shared KV budget)", "prefix_caching": False,
                "chunked_prefill": False, **(settings or {})}

    @app.get("/shim/stats")
    async def shim_stats(_: Request) -> dict:
        if stats is not None:
            return stats()
        return {"batches_run": worker.batches_run, "batch_sizes": worker.batch_sizes[-1000:]}

    return app


def add_common_args(parser: Any) -> None:
    """The flags every shim takes (argparse; shims run in engine venvs without typer)."""
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--threads", type=int, default=1, help="intra-op CPU threads")
    parser.add_argument("--max-batch-size", type=int, default=8, help="rows per engine call")
    parser.add_argument("--batch-window-ms", type=float, default=10.0, help="collection window of an idle server (ms)")
    parser.add_argument("--max-model-len", type=int, default=None)


def serve(backend: Backend, args: Any) -> None:
    """Start the batch worker and uvicorn on ``args.host:args.port`` (blocks until SIGTERM)."""
    import uvicorn

    worker = BatchWorker(backend, args.max_batch_size, args.batch_window_ms)
    worker.start()
    name = args.served_model_name or args.model.rstrip("/").split("/")[-1]
    settings = {"threads": args.threads, "dtype": getattr(args, "dtype", None) or getattr(args, "precision", None),
                "device": getattr(args, "device", None) or getattr(args, "provider", None)}
    app = create_app(backend, worker, name, max_model_len=args.max_model_len, settings=settings)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    worker.stop()
