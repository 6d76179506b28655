"""OpenAI-compatible HTTP server for the reference engine (FastAPI; run it with ``python -m own_engine``).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streaming SSE and plain
JSON), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text, see
:mod:`own_engine.server.metrics`), ``GET /v1/server_info`` (the effective settings, :func:`server_info`).

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
  prefix - sends nothing; its text goes out with the next chunk). The framing (role chunk,
  ``finish_reason`` on the last content chunk, usage chunk with
  ``usage.prompt_tokens_details.cached_tokens``, ``[DONE]``, the error event of an engine
  failure) is :mod:`own_engine.server.frontend`'s, shared with the shims.
- Logprobs (``logprobs`` on completions, ``logprobs`` + ``top_logprobs`` on chat, up to
  :data:`~own_engine.sampling_params.MAX_LOGPROBS`): the engine computes them for the requests
  that ask (raw log_softmax of the model's logits, before temperature / top-k / top-p: vLLM's
  default), hands them over in ``RequestOutput.new_logprobs``, and each choice's tokens get
  their text from ``tokenizer.decode([id])``; streamed chunks carry the logprobs of the tokens
  whose text they carry (:mod:`own_engine.server.frontend`). ``echo`` (prompt logprobs) is
  rejected.
- A client that disconnects (streaming or not) has its request aborted in the engine, which
  frees its KV blocks.
- Bad requests (bad JSON, missing ``prompt``/``messages``, a value of the wrong type such as
  ``"stream": "yes"``, ``max_tokens`` < 1, prompt + ``max_tokens`` > ``max_model_len``, unknown
  model, ``logprobs`` beyond 20, unsupported options such as ``echo``) get HTTP 400 with an
  OpenAI-style ``{"error": {"message", "type", "param", "code"}}`` body (checks:
  :mod:`own_engine.server.protocol`, :mod:`own_engine.server.validation`). A body over
  ``max_body_bytes`` gets 413 before it is parsed, and a prompt text too long to fit the
  context by its character count alone is rejected before it is tokenized.

No module-level mutable state: everything lives in the app built by :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from own_engine.sampling_params import MAX_LOGPROBS
from own_engine.server.frontend import Step, StreamFailure, install_error_handlers, read_body, respond
from own_engine.server.metrics import CONTENT_TYPE, ServerCounters, render_metrics
from own_engine.server.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    LogprobEntry,
    error_body,
    model_list,
    parse_body,
    usage,
)
from own_engine.server.text import OutputTextProcessor
from own_engine.server.validation import EngineInput, RequestValidator, default_max_body_bytes
from own_engine.server.worker import EngineFailure, EngineNotRunning, EngineWorker

logger = logging.getLogger("own_engine.server")


class _RequestStream:
    """The handler side of one in-flight request with ``n`` choices: engine outputs → text
    steps, and cleanup.

    Each choice (``RequestOutput.index``) has its own :class:`OutputTextProcessor`. Every
    choice is counted in ``counters`` exactly once when it ends (its finish reason, or
    ``abort`` when the client left first), like vLLM v1 which fans ``n > 1`` out into child
    requests. A choice ended by a stop string ignores the engine's further tokens for it (the
    engine aborts whole requests only); once every choice is done the request is aborted in the
    engine if still running. :meth:`close` aborts it if unfinished. ``logprob_entry``: turns an
    engine ``TokenLogprobs`` and its text offset into a
    :class:`~own_engine.server.protocol.LogprobEntry` when the request asked for logprobs (None:
    it did not).
    """

    def __init__(
        self,
        request_id: str,
        out_queue: asyncio.Queue,
        texts: list[OutputTextProcessor],
        worker: EngineWorker,
        counters: ServerCounters,
        num_prompt_tokens: int,
        logprob_entry: Callable[[Any, int], LogprobEntry] | None = None,
    ) -> None:
        self.request_id = request_id
        self._logprob_entry = logprob_entry
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

    async def next_step(self) -> Step | None:
        """Wait for this request's next engine output (one per engine step and choice) and turn
        it into text; None when the output belongs to a choice that already ended.

        Raises :class:`~own_engine.server.frontend.StreamFailure` when the engine failed instead.
        """
        out = await self._queue.get()
        if isinstance(out, EngineFailure):
            self.finished = True
            self._counters.request_failure += self._done.count(False)
            raise StreamFailure(out.message)
        if getattr(out, "num_cached_tokens", None) is not None:
            self.num_cached_tokens = out.num_cached_tokens
        i = int(getattr(out, "index", 0) or 0)
        finished, reason = bool(out.finished), out.finish_reason
        self._engine_done[i] = self._engine_done[i] or finished
        if self._done[i]:
            return None
        delta = self._texts[i].process(list(out.new_token_ids), finished, reason)
        self._counters.generation_tokens += delta.num_tokens
        entries = None
        new_logprobs = getattr(out, "new_logprobs", None)
        if self._logprob_entry is not None and new_logprobs is not None:
            # tokens after a stop-string match are not counted: neither are their logprobs
            entries = tuple(self._logprob_entry(lp, off) for lp, off in zip(new_logprobs[:delta.num_tokens],
                                                                             delta.offsets))
        if delta.stopped:
            finished, reason = True, "stop"
        if finished:
            self._done[i], self.finish_reasons[i] = True, reason
            self._counters.record_finished(reason or "stop")
            if all(self._done):
                self.finished = True
                if not all(self._engine_done):  # a stop string ended it before the engine did
                    self._worker.abort(self.request_id)
        return Step(i, delta.text, finished, reason, entries)

    def close(self) -> None:
        """Abort the request in the engine unless it already finished (idempotent)."""
        if not self.finished:
            self.finished = True
            self._worker.abort(self.request_id)
            for i, done in enumerate(self._done):
                if not done:
                    self._done[i], self.finish_reasons[i] = True, "abort"
                    self._counters.record_finished("abort")


class OpenAIServing:
    """Request handling for both generation endpoints, bound to one engine + worker.

    ``engine``: ``LLMEngine`` API (``tokenizer``, ``max_model_len``; the rest is used through
    the worker). ``sampling_params_cls``: builds the engine's sampling parameters (default
    :class:`own_engine.sampling_params.SamplingParams`); it must raise ``ValueError`` on
    invalid values. Requests are checked by a
    :class:`~own_engine.server.validation.RequestValidator` (``n`` up to ``max_num_seqs``, chat
    ``max_tokens`` defaulting to the rest of the context). ``max_body_bytes``: the request body
    limit in bytes (None: :func:`~own_engine.server.validation.default_max_body_bytes`, the
    largest body whose prompt can fit ``max_model_len``).
    """

    def __init__(
        self,
        engine: Any,
        worker: EngineWorker,
        counters: ServerCounters,
        model_name: str,
        sampling_params_cls: Callable[..., Any],
        max_body_bytes: int | None = None,
    ) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.max_model_len = int(engine.max_model_len)
        self.worker = worker
        self.counters = counters
        self.model_name = model_name
        model_config = getattr(engine, "model_config", None)
        self.validator = RequestValidator(
            self.tokenizer,
            model_name,
            self.max_model_len,
            max_n=int(getattr(engine, "max_num_seqs", None) or getattr(getattr(engine, "config", None), "max_num_seqs", 0)
                      or 16),
            max_n_why=" (max_num_seqs)",
            vocab_size=int(getattr(model_config, "vocab_size", 0) or len(self.tokenizer)),
            sampling_params_cls=sampling_params_cls,
            max_logprobs=MAX_LOGPROBS,
        )
        self.max_body_bytes = max_body_bytes or default_max_body_bytes(self.max_model_len, self.validator.token_chars)
        # EOS ids the engine stops on (generation_config + tokenizer): their text is never shown.
        self._eos_ids = sorted(getattr(engine, "eos_token_ids", None) or ())
        self._token_texts: dict[int, str] = {}  # token id -> tokenizer.decode([id]), for logprobs

    def _token_text(self, token_id: int) -> str:
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.tokenizer.decode([token_id])
        return text

    def _logprob_entry(self, lp: Any, offset: int) -> LogprobEntry:
        """An engine :class:`~own_engine.outputs.TokenLogprobs` as the server returns it."""
        return LogprobEntry(self._token_text(lp.token_id), lp.logprob,
                            tuple((self._token_text(t), v) for t, v in zip(lp.top_token_ids, lp.top_logprobs)),
                            offset)

    # ------------------------------------------------------------------ endpoints
    async def completions(self, raw: Request) -> Response:
        """``POST /v1/completions``."""
        req = parse_body(await read_body(raw, self.max_body_bytes), CompletionRequest)
        return await self._generate(raw, req, self.validator.completion(req), chat=False)

    async def chat_completions(self, raw: Request) -> Response:
        """``POST /v1/chat/completions``."""
        req = parse_body(await read_body(raw, self.max_body_bytes), ChatCompletionRequest)
        return await self._generate(raw, req, self.validator.chat(req), chat=True)

    async def _generate(self, raw: Request, req: Any, inp: EngineInput, chat: bool) -> Response:
        ids = inp.prompt_token_ids
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            out_queue = await self.worker.submit(rid, ids, inp.sampling_params)
        except ValueError as exc:
            raise APIError(str(exc)) from None
        except EngineNotRunning as exc:
            raise APIError(str(exc), 503, "ServiceUnavailableError") from None
        self.counters.prompt_tokens += len(ids)
        stop_ids = self.validator.stop_token_ids(req, self._eos_ids)
        texts = [OutputTextProcessor(self.tokenizer, ids, req.stop_list(), stop_ids) for _ in range(req.n)]
        wants_logprobs = getattr(inp.sampling_params, "logprobs", None) is not None
        stream = _RequestStream(rid, out_queue, texts, self.worker, self.counters, len(ids),
                                self._logprob_entry if wants_logprobs else None)
        return await respond(raw, stream, self.model_name, int(time.time()), chat=chat, streaming=req.stream,
                             include_usage=req.include_usage)

    # ------------------------------------------------------------------ other endpoints
    def models(self) -> dict[str, Any]:
        """``GET /v1/models``."""
        return model_list(self.model_name, "own_engine", self.max_model_len)


def server_info(engine: Any) -> dict[str, Any]:
    """The settings the engine really runs with (``GET /v1/server_info``; read by
    ``adapters.telemetry.effective`` for the parity audit): ``kv_capacity_tokens`` = KV blocks × block
    size (tokens), ``kv_capacity_bytes`` = bytes of the allocated K/V tensors (draft model's
    included), ``prefix_caching`` as the block manager applies it (off under naive allocation),
    ``chunked_prefill_tokens`` = the per-step budget a prefill chunk fits in, ``dtype`` of the
    KV cache (= the weights' dtype), ``cuda_graphs`` whether decode steps replay CUDA graphs
    (``engine.cuda_graphs_active``; False on CPU and when the capture check failed). A key is None where the
    engine object lacks the attribute (a test's fake engine)."""
    cfg = getattr(engine, "config", None)
    bm, sched = getattr(engine, "block_manager", None), getattr(engine, "scheduler", None)
    block_size = getattr(cfg, "block_size", None)
    blocks = getattr(engine, "num_kv_blocks", None)
    tensors = [t for runner in (getattr(engine, "runner", None), getattr(engine, "draft_runner", None)) if runner
               for pair in runner.kv_caches for t in pair]
    chunked = getattr(sched, "enable_chunked_prefill", getattr(cfg, "enable_chunked_prefill", None))
    spec = getattr(cfg, "speculative", None)
    if spec not in (None, "none"):
        draft = ""
        if spec == "draft":
            sm = getattr(cfg, "speculative_model", None)
            draft = f", draft model {Path(sm).name}" if sm else f", {cfg.draft_num_layers}-layer draft"
        adaptive = ", adaptive k" if getattr(cfg, "adaptive_speculation", False) else ""
        spec = f"{spec}, up to {cfg.num_speculative_tokens} tokens{draft}{adaptive}"
    return {
        "engine": "own_engine",
        "kv_capacity_tokens": blocks * block_size if blocks and block_size else None,
        "kv_capacity_bytes": sum(t.numel() * t.element_size() for t in tensors) or None,
        "num_kv_blocks": blocks, "block_size": block_size,
        "prefix_caching": getattr(bm, "enable_prefix_caching", getattr(cfg, "enable_prefix_caching", None)),
        "chunked_prefill": chunked,
        "chunked_prefill_tokens": getattr(cfg, "max_num_batched_tokens", None) if chunked else None,
        "max_num_seqs": getattr(engine, "max_num_seqs", None) or getattr(cfg, "max_num_seqs", None),
        "max_num_batched_tokens": getattr(cfg, "max_num_batched_tokens", None),
        "dtype": str(tensors[0].dtype).removeprefix("torch.") if tensors else None,
        "threads": getattr(cfg, "threads", None),
        "cuda_graphs": bool(getattr(engine, "cuda_graphs_active", False)) if cfg is not None else None,
        "speculative": None if spec is None else ("off" if spec == "none" else spec),
        "max_model_len": getattr(engine, "max_model_len", None),
        "device": str(getattr(engine, "device", "")) or None,
        "batching": getattr(cfg, "batching", None), "kv_allocation": getattr(cfg, "kv_allocation", None),
        "attention_backend": getattr(engine, "attention_backend", None),
        "linear_kernels": getattr(getattr(getattr(engine, "runner", None), "model", None), "linear_kernels", None),
    }


def _default_model_name(engine: Any) -> str:
    model_dir = getattr(getattr(engine, "config", None), "model_dir", None)
    return Path(model_dir).name if model_dir else "own_engine"


def create_app(
    engine: Any,
    served_model_name: str | None = None,
    sampling_params_cls: Callable[..., Any] | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """Build the FastAPI app serving ``engine`` (an ``LLMEngine`` or an object with its API).

    The engine thread starts with the app's lifespan and stops with it. ``served_model_name``
    defaults to the model folder's name (``engine.config.model_dir``); ``max_body_bytes``: the
    request body limit in bytes (None: derived from ``max_model_len``, see
    :class:`OpenAIServing`). Nothing is shared between two apps.
    """
    if sampling_params_cls is None:
        from own_engine.sampling_params import SamplingParams

        sampling_params_cls = SamplingParams
    model_name = served_model_name or _default_model_name(engine)
    worker = EngineWorker(engine)
    counters = ServerCounters()
    serving = OpenAIServing(engine, worker, counters, model_name, sampling_params_cls, max_body_bytes)

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

    install_error_handlers(app, logger)

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

    @app.get("/v1/server_info")
    async def server_info_route() -> dict[str, Any]:
        return server_info(engine)

    return app
