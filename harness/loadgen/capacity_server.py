"""An OpenAI-compatible streaming test server with a KNOWN capacity (for capacity-search tests).

Run as ``python -m harness.loadgen.capacity_server --port P --slots S --prefill-ms X
--per-token-ms Y``, or start it from a test with :func:`capacity_server`. It does no inference;
it behaves like an engine with exactly ``slots`` decode slots:

- at most ``slots`` streams are served at once (an ``asyncio.Semaphore``, which wakes its
  waiters first-in first-out); a request beyond that waits in that FIFO queue;
- a served request emits its first token ``prefill_ms`` after it got its slot, then one token
  every ``per_token_ms``, ``max_tokens`` tokens in all (token ``i``, 0-based, is due at
  ``slot + prefill_ms + i * per_token_ms`` on an absolute schedule, so sleeps do not drift),
  then the finish chunk, a usage chunk (``prompt_tokens``, ``completion_tokens``) and
  ``[DONE]`` - the null server's framing (:mod:`harness.loadgen.nullserver`), so the harness's
  client parses it unchanged. The slot is released after ``[DONE]`` (or when the client goes
  away).

So one request's service time is ``S = prefill_ms + (max_tokens - 1) * per_token_ms`` and
its TTFT is ``queue wait + prefill_ms``: with fixed ``max_tokens`` the server is a
deterministic c-server FIFO queue (M/D/c for Poisson arrivals, D/D/c for uniform ones, a
closed loop for a concurrency cap), whose TTFT-SLO capacity can be computed by hand (see
``tests/harness/app/search/test_capacity.py``).

``prompt_tokens`` in the usage chunk is the prompt's length in ids when the prompt is a list
of ids, else its whitespace-separated word count (the server has no tokenizer).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /health``,
``GET /v1/models`` and ``GET /_stats`` (``{"slots", "active", "waiting", "served"}``: the
queue length is visible, for a search that wants to see the queue grow).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager
from typing import Any, Iterator

from aiohttp import web

from harness.loadgen.nullserver import _chunk, local_server

MODEL = "capacity"


def _prompt_tokens(body: dict[str, Any]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return len(prompt)
    if isinstance(prompt, str):
        return len(prompt.split())
    messages = body.get("messages") or []
    return sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))


def create_app(slots: int, prefill_ms: float, per_token_ms: float) -> web.Application:
    """The aiohttp application: ``slots`` concurrent streams (>= 1), ``prefill_ms`` before the
    first token, ``per_token_ms`` between tokens (both >= 0, milliseconds)."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if prefill_ms < 0 or per_token_ms < 0:
        raise ValueError("prefill_ms and per_token_ms must be >= 0")
    app = web.Application()
    state = {"active": 0, "waiting": 0, "served": 0}
    app["state"] = state
    sem = asyncio.Semaphore(slots)  # binds to aiohttp's loop on first use (Python >= 3.10)
    prefill_s, per_token_s = prefill_ms / 1000.0, per_token_ms / 1000.0

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"slots": slots, **state})

    async def complete(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        model = str(body.get("model", MODEL))
        chat = request.path.endswith("/chat/completions")
        n = max(1, int(body.get("max_tokens") or 16))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)  # headers now; tokens once a slot is free
        if chat:
            role = {"id": MODEL, "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(role).encode() + b"\n\n")
        loop = asyncio.get_running_loop()
        state["waiting"] += 1
        try:
            await sem.acquire()
        finally:
            state["waiting"] -= 1
        state["active"] += 1
        try:
            start = loop.time()
            for i in range(n):
                delay = start + prefill_s + i * per_token_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await resp.write(_chunk(model, "x", None, chat))
            await resp.write(_chunk(model, None if chat else "", "length", chat))
            pt = _prompt_tokens(body)
            usage = {"id": MODEL, "choices": [], "model": model,
                     "usage": {"prompt_tokens": pt, "completion_tokens": n, "total_tokens": pt + n}}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            state["served"] += 1
        finally:
            state["active"] -= 1
            sem.release()
        return resp

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/_stats", stats)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    return app


@contextmanager
def capacity_server(
    slots: int,
    prefill_ms: float,
    per_token_ms: float,
    port: int | None = None,
    startup_timeout_s: float = 30.0,
) -> Iterator[str]:
    """Start the capacity server in a child process (own process group); yield its base URL.

    The process is terminated (killed after 5 s) on exit, whatever happened inside. Raises
    RuntimeError when it exits early or does not answer ``/health`` within
    ``startup_timeout_s`` seconds.
    """
    args = ["--slots", str(slots), "--prefill-ms", repr(float(prefill_ms)), "--per-token-ms", repr(float(per_token_ms))]
    with local_server("harness.loadgen.capacity_server", args, port, startup_timeout_s, "capacity server") as url:
        yield url


def main() -> None:
    import argparse  # an internal test entry point; users never call it

    ap = argparse.ArgumentParser(description="OpenAI-compatible test server with a known capacity (no inference).")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--slots", type=int, required=True, help="streams served at once; the rest queue (FIFO)")
    ap.add_argument("--prefill-ms", type=float, required=True, help="ms from getting a slot to the first token")
    ap.add_argument("--per-token-ms", type=float, required=True, help="ms between consecutive tokens")
    args = ap.parse_args()
    app = create_app(args.slots, args.prefill_ms, args.per_token_ms)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
