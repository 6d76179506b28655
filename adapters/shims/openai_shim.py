"""The OpenAI-compatible streaming server shared by our shims (transformers static batching,
DeepSpeed ``init_inference``, ONNX Runtime GenAI).

A shim supplies a :class:`Backend` (tokenizer + ``generate_batch``); this module supplies the
rest: FastAPI endpoints (``/health``, ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, streaming and not), the static batch collector (:class:`BatchWorker`:
requests that arrive while the engine is idle are collected for ``batch_window_ms`` into one
batch of at most ``max_batch_size`` rows; requests arriving while a batch runs wait for the
next one - "the batch waits for its longest member"), per-row stop rules (EOS unless
``ignore_eos``; ``max_tokens``), incremental detokenization, SSE framing and usage.

Each generated token is streamed as its own SSE chunk the moment the engine emits it, so
per-token timestamps are taken by the same client clock as every other engine.
``completion_tokens`` counts the generated ids including a final EOS (vLLM's convention).

This module runs inside engine venvs: it imports only the standard library, FastAPI, pydantic
and uvicorn (torch/transformers are imported by the backends).
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field


# ---------------------------------------------------------------------------------------------
# Requests, rows and the batch worker
# ---------------------------------------------------------------------------------------------
@dataclass
class GenRequest:
    """One request as a batch row: ``prompt_ids`` ``[prompt_len]`` token ids; ``max_tokens``
    generated tokens at most; sampling params; the outputs go to ``out`` on ``loop``."""

    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
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
            r = batch[i]
            if r.finish_reason is not None or r.cancelled:
                return
            r.generated.append(token_id)
            if token_id in eos and not r.ignore_eos:
                r.finish_reason = "stop"
                r.push(("done", "stop"))
                return
            r.push(("token", token_id))
            if len(r.generated) >= r.max_tokens:
                r.finish_reason = "length"
                r.push(("done", "length"))

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
# Incremental detokenization
# ---------------------------------------------------------------------------------------------
class Detokenizer:
    """Turns token ids into text deltas, holding back incomplete UTF-8 (a trailing U+FFFD).

    Windowed like vLLM's ``detokenize_incrementally``: decodes ``ids[prefix:]`` against
    ``ids[prefix:read]`` so each step costs O(window), not O(length).
    """

    def __init__(self, tokenizer: Any, skip_ids: set[int]) -> None:
        self.tok = tokenizer
        self.skip = skip_ids
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        """Append one id; return the newly completed text ("" while bytes are incomplete)."""
        if token_id in self.skip:
            return ""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self.prefix:self.read])
        full = self._decode(self.ids[self.prefix:])
        if full.endswith("\ufffd") or len(full) <= len(prefix_text):
            return ""
        delta = full[len(prefix_text):]
        self.prefix = self.read
        self.read = len(self.ids)
        return delta

    def flush(self) -> str:
        """Whatever is still held back at the end (may contain U+FFFD)."""
        prefix_text = self._decode(self.ids[self.prefix:self.read])
        full = self._decode(self.ids[self.prefix:])
        self.prefix = self.read = len(self.ids)
        return full[len(prefix_text):] if len(full) > len(prefix_text) else ""


# ---------------------------------------------------------------------------------------------
# OpenAI request bodies
# ---------------------------------------------------------------------------------------------
class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    n: int = 1


class CompletionBody(_Common):
    prompt: str | list[int] | list[str]


class ChatBody(_Common):
    messages: list[dict[str, Any]]


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": status}})


# ---------------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------------
def create_app(backend: Backend, worker: BatchWorker, served_model_name: str, max_model_len: int | None = None,
               default_max_tokens: int = 16) -> FastAPI:
    """The FastAPI app serving ``backend`` through ``worker`` under ``served_model_name``."""
    app = FastAPI(title=f"shim: {backend.model_label}")
    tok = backend.tokenizer
    special = set(getattr(tok, "all_special_ids", []) or [])

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": served_model_name, "object": "model", "owned_by": "llm-serve-bench"}]}

    def _prompt_ids(body: CompletionBody | ChatBody) -> list[int]:
        if isinstance(body, ChatBody):
            text = tok.apply_chat_template(body.messages, add_generation_prompt=True, tokenize=False)
            return list(tok(text, add_special_tokens=False)["input_ids"])
        p = body.prompt
        if isinstance(p, list) and p and all(isinstance(x, int) for x in p):
            return list(p)
        if isinstance(p, list):
            if len(p) != 1:
                raise ValueError("batched prompts are not supported: send one prompt per request")
            p = p[0]
        return list(tok(p)["input_ids"])

    async def _handle(body: CompletionBody | ChatBody, chat: bool):
        if body.n != 1:
            return _error(400, "n must be 1")
        if body.model not in (None, served_model_name):
            return _error(404, f"model {body.model!r} not served here; use {served_model_name!r}", "not_found_error")
        try:
            ids = _prompt_ids(body)
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        if not ids:
            return _error(400, "empty prompt")
        max_tokens = body.max_completion_tokens or body.max_tokens or default_max_tokens
        if max_model_len is not None and len(ids) + max_tokens > max_model_len:
            return _error(400, f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds max_model_len {max_model_len}")
        loop = asyncio.get_running_loop()
        req = GenRequest(prompt_ids=ids, max_tokens=max_tokens, ignore_eos=body.ignore_eos,
                         temperature=body.temperature, top_p=body.top_p, seed=body.seed, loop=loop, out=asyncio.Queue())
        worker.submit(req)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        detok = Detokenizer(tok, special)

        def usage() -> dict:
            return {"prompt_tokens": len(ids), "completion_tokens": len(req.generated),
                    "total_tokens": len(ids) + len(req.generated)}

        def chunk(text: str | None, finish: str | None, role: bool = False) -> str:
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
                obj = "chat.completion.chunk"
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
                obj = "text_completion"
            return "data: " + json.dumps({"id": rid, "object": obj, "created": created, "model": served_model_name,
                                          "choices": [choice]}) + "\n\n"

        if body.stream:
            async def events():
                try:
                    if chat:
                        yield chunk("", None, role=True)
                    while True:
                        kind, val = await req.out.get()
                        if kind == "token":
                            text = detok.add(val)
                            if text:
                                yield chunk(text, None)
                            continue
                        if kind == "error":
                            yield "data: " + json.dumps({"error": {"message": val, "type": "engine_error", "code": 500}}) + "\n\n"
                            return
                        rest = detok.flush()
                        yield chunk(rest if rest else ("" if not chat else None), val)
                        if include_usage:
                            yield "data: " + json.dumps({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                                                         "created": created, "model": served_model_name, "choices": [],
                                                         "usage": usage()}) + "\n\n"
                        yield "data: [DONE]\n\n"
                        return
                finally:
                    req.cancelled = True  # client left or stream ended: the worker stops this row

            return StreamingResponse(events(), media_type="text/event-stream")

        parts: list[str] = []
        while True:
            kind, val = await req.out.get()
            if kind == "token":
                parts.append(detok.add(val))
            elif kind == "error":
                return _error(500, val, "engine_error")
            else:
                parts.append(detok.flush())
                finish = val
                break
        text = "".join(parts)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        return {"id": rid, "object": obj, "created": created, "model": served_model_name, "choices": [choice],
                "usage": usage()}

    @app.post("/v1/completions")
    async def completions(body: CompletionBody):
        return await _handle(body, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody):
        return await _handle(body, chat=True)

    @app.get("/shim/stats")
    async def stats(_: Request) -> dict:
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
    app = create_app(backend, worker, name, max_model_len=args.max_model_len)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    worker.stop()
