"""A local OpenAI-compatible "null" server for client calibration and scripted-stream tests.

Run as ``python -m harness.loadgen.nullserver --port P``. It does no inference:

- ``POST /v1/completions`` and ``/v1/chat/completions`` stream ``max_tokens`` one-token chunks
  (``"x"``), ``null_gap_ms`` apart (a non-standard body field, default 0), then a finish
  chunk, a usage-only chunk and ``[DONE]`` - the cheapest possible server, so what the client
  measures against it is the client's own overhead.
- When the request's ``model`` is ``script:<id>``, it instead plays a script registered with
  ``PUT /_script/<id>`` (JSON ``{"pieces": [[delay_ms, "<base64 bytes>"], ...], "status": 200}``):
  after each delay it writes those exact bytes. The ``perf_counter_ns`` taken right before each
  write is kept and served at ``GET /_writes/<id>`` (CLOCK_MONOTONIC is shared by processes on
  one machine, so tests compare the client's timestamps with the server's writes directly).
  A script ``{"sequence": [script, ...]}`` plays its scripts one per request, in arrival order
  (cycling), so one run can mix streams that finish with streams that never do.
- ``GET /health`` and ``GET /v1/models``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

from aiohttp import web


def _chunk(model: str, text: str | None, finish: str | None, chat: bool) -> bytes:
    if chat:
        delta = {} if text is None else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        obj = {"id": "null", "object": "chat.completion.chunk", "model": model, "choices": [choice]}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
        obj = {"id": "null", "object": "text_completion", "model": model, "choices": [choice]}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def create_app() -> web.Application:
    """The aiohttp application (no global state: scripts live in ``app``)."""
    app = web.Application(client_max_size=64 * 2**20)  # scripts may carry >1 MiB lines
    app["scripts"] = {}
    app["writes"] = {}

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "null", "object": "model"}]})

    async def put_script(request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        request.app["scripts"][sid] = await request.json()
        request.app["writes"][sid] = []
        return web.json_response({"ok": True})

    async def get_writes(request: web.Request) -> web.Response:
        return web.json_response(request.app["writes"].get(request.match_info["sid"], []))

    async def play_script(request: web.Request, sid: str) -> web.StreamResponse:
        script = request.app["scripts"].get(sid)
        if script is None:
            return web.json_response({"error": {"message": f"no script {sid}"}}, status=404)
        if "sequence" in script:  # one script per request, in arrival order
            played = request.app.setdefault("played", {})
            played[sid] = played.get(sid, -1) + 1
            script = script["sequence"][played[sid] % len(script["sequence"])]
        status = int(script.get("status", 200))
        resp = web.StreamResponse(status=status, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        writes = request.app["writes"].setdefault(sid, [])
        for delay_ms, b64 in script["pieces"]:
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000.0)
            payload = base64.b64decode(b64)
            writes.append(time.perf_counter_ns())
            await resp.write(payload)
        await resp.write_eof()
        return resp

    async def complete(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        model = str(body.get("model", "null"))
        if model.startswith("script:"):
            return await play_script(request, model.split(":", 1)[1])
        chat = request.path.endswith("/chat/completions")
        n = int(body.get("max_tokens") or 16)
        gap = float(body.get("null_gap_ms") or 0) / 1000.0
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if chat:
            role = {"id": "null", "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(role).encode() + b"\n\n")
        for i in range(n):
            if gap and i:
                await asyncio.sleep(gap)
            await resp.write(_chunk(model, "x", None, chat))
        await resp.write(_chunk(model, None if chat else "", "length", chat))
        usage = {"id": "null", "choices": [], "model": model,
                 "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_put("/_script/{sid}", put_script)
    app.router.add_get("/_writes/{sid}", get_writes)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_server(module: str, args: list[str], port: int | None = None, startup_timeout_s: float = 30.0,
                 name: str = "server") -> Iterator[str]:
    """Run ``python -m module --port P *args`` in a child process (own process group) and yield
    its base URL once ``/health`` answers 200.

    The process is terminated (and killed after 5 s) on exit, whatever happened inside; a
    watchdog (``adapters.runtime.process.watch_group``) ends it when this process is killed outright.
    Raises RuntimeError naming ``name`` when it exits early or does not answer ``/health``
    within ``startup_timeout_s`` seconds.
    """
    import urllib.request

    from adapters.runtime.process import watch_group

    port = port or _free_port()
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    watchdog = watch_group(proc.pid, 2.0)  # it dies with us even when we are SIGKILLed (issue 16)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
                raise RuntimeError(f"{name} exited with code {proc.returncode}: {err}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not become healthy in time")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        if watchdog.poll() is None:
            watchdog.kill()
        watchdog.wait()


@contextmanager
def null_server(port: int | None = None, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Start the null server in a child process (own process group); yield its base URL.

    The process is terminated (and killed after 5 s) on exit, whatever happened inside; a
    watchdog (``adapters.runtime.process.watch_group``) ends it when this process is killed outright.
    Raises RuntimeError when it does not answer ``/health`` within ``startup_timeout_s``.
    """
    with local_server("harness.loadgen.nullserver", [], port, startup_timeout_s, "null server") as url:
        yield url


def main() -> None:
    import argparse  # a two-flag internal entry point; users never call it

    ap = argparse.ArgumentParser(description="OpenAI-compatible null server (no inference).")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    web.run_app(create_app(), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
