"""A scripted OpenAI-compatible endpoint in a background thread, for `bench run --engine openai`
tests that need a server to misbehave in one precise way (no inference, loopback only).

``ScriptedEndpoint(mode)`` serves ``GET /v1/models`` (one model, ``m``) and streams one token
per request on ``/v1/completions`` and ``/v1/chat/completions``, except:

- ``mode="http_400"``: every generation request gets HTTP 400 with an OpenAI error body
  (``{"error": {"message": MESSAGE_400}}``);
- ``mode="stall_equivalence"``: a request whose prompt is one of the greedy-equivalence prompts
  never answers (until the client gives up), every other request is served.

``seen_auth`` keeps each request's Authorization header, ``cancelled`` counts requests whose
client went away before an answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

from aiohttp import web

MESSAGE_400 = "This model's maximum context length is 4096 tokens"
EQUIVALENCE_STARTS = ("The capital of France is", "def fibonacci(n):", "List three primary colors:")


def _chunk(text: str | None, finish: str | None) -> bytes:
    choice = {"index": 0, "text": text or "", "finish_reason": finish}
    return b"data: " + json.dumps({"id": "s", "object": "text_completion", "choices": [choice]}).encode() + b"\n\n"


class ScriptedEndpoint:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.seen_auth: list[str | None] = []
        self.cancelled = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _models(self, request: web.Request) -> web.Response:
        self.seen_auth.append(request.headers.get("Authorization"))
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        self.seen_auth.append(request.headers.get("Authorization"))
        body: dict[str, Any] = await request.json()
        prompt = body.get("prompt") or json.dumps(body.get("messages"))
        if self.mode == "http_400":
            return web.json_response({"error": {"message": MESSAGE_400, "type": "invalid_request_error"}}, status=400)
        if self.mode == "stall_equivalence" and str(prompt).startswith(EQUIVALENCE_STARTS):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk("x", None))
        await resp.write(_chunk("", "length"))
        usage = {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
        await resp.write(b"data: " + json.dumps({"id": "s", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def __enter__(self) -> "ScriptedEndpoint":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
