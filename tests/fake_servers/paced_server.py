"""A paced OpenAI-compatible streaming server for the Ray executor tests (aiohttp, no inference).

``python tests/fake_servers/paced_server.py --port P [--ttft-ms T] [--itl-ms I] [--stall-after N]
[--pid-file F]``

Each completion streams ``max_tokens`` one-token chunks (``"x"``): the first after ``T`` ms,
the others ``I`` ms apart, then a finish chunk, a usage chunk (``prompt_tokens`` = the prompt's
characters // 4, ``completion_tokens`` = ``max_tokens``) and ``[DONE]``: fixed latencies, so two
runs measured on different executors agree within scheduling noise. ``--stall-after N``: every
request after the N-th waits an hour before answering (a trial that is killed mid-run).
``GET /_served`` is the number of completions finished. ``--pid-file``: its pid is written there.
``--slots N``: at most N completions stream at once, the others wait first in, first out (an
engine's ``max_num_seqs``): its capacity grows with N until its TTFT, queueing included, breaks.
``--die-after N``: the process exits (code 3) once N completions were served (a crash under load).
``--fidelity FILE [--flip-every N | --flip-near-ties]``: non-streaming completions are answered
from the fidelity reference in FILE (tests/fake_servers/fidelity_server.py), wrong every N-th
token or at near-ties (the output-fidelity check's scripted engines). ``--reply TEXT``: the
first streamed token is TEXT (a scripted answer for the task-accuracy check).
"""

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from aiohttp import web


def make_app(ttft_s: float, itl_s: float, stall_after: int | None, slots: int | None = None,
             die_after: int | None = None, script=None, reply: str = "x") -> web.Application:
    app = web.Application()
    state = {"started": 0, "served": 0}
    gate = asyncio.Semaphore(slots) if slots else None  # FIFO: asyncio's waiters are woken in order

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "paced", "object": "model"}]})

    async def served(_: web.Request) -> web.Response:
        return web.json_response(state)

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if script is not None and not body.get("stream"):
            status, answer = script.answer(body)
            return web.json_response(answer, status=status)
        state["started"] += 1
        if stall_after is not None and state["started"] > stall_after:
            await asyncio.sleep(3600)
        chat = request.path.endswith("/chat/completions")
        prompt = json.dumps(body.get("messages")) if chat else str(body.get("prompt"))
        n = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if gate is not None:
            async with gate:
                return await stream(resp, chat, prompt, n)
        return await stream(resp, chat, prompt, n)

    async def stream(resp: web.StreamResponse, chat: bool, prompt: str, n: int) -> web.StreamResponse:
        for i in range(n):
            await asyncio.sleep(ttft_s if i == 0 else itl_s)
            token = reply if i == 0 else "x"
            choice = {"index": 0, "delta": {"content": token}} if chat else {"index": 0, "text": token}
            await resp.write(b"data: " + json.dumps({"id": "p", "model": "paced", "choices": [{**choice, "finish_reason": None}]}).encode() + b"\n\n")
        end = {"index": 0, "delta": {}} if chat else {"index": 0, "text": ""}
        await resp.write(b"data: " + json.dumps({"id": "p", "model": "paced", "choices": [{**end, "finish_reason": "length"}]}).encode() + b"\n\n")
        usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": n, "total_tokens": len(prompt) // 4 + n}
        await resp.write(b"data: " + json.dumps({"id": "p", "choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        state["served"] += 1
        if die_after is not None and state["served"] >= die_after:
            asyncio.get_running_loop().call_later(0.05, os._exit, 3)  # a crash: the process is gone
        return resp

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/_served", served)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    return app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=30.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--stall-after", type=int, default=None)
    ap.add_argument("--pid-file", default=None)
    ap.add_argument("--slots", type=int, default=None)
    ap.add_argument("--die-after", type=int, default=None)
    ap.add_argument("--fidelity", default=None)
    ap.add_argument("--flip-every", type=int, default=None)
    ap.add_argument("--flip-near-ties", action="store_true")
    ap.add_argument("--reply", default="x")
    args = ap.parse_args()
    script = None
    if args.fidelity:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from results.schema import FidelityReference
        from tests.fake_servers.fidelity_server import ScriptedAnswers

        reference = FidelityReference.model_validate_json(Path(args.fidelity).read_text())
        script = ScriptedAnswers(reference, flip_every=args.flip_every, flip_near_ties=args.flip_near_ties)
    if args.pid_file:
        with open(args.pid_file, "w") as fh:
            fh.write(str(os.getpid()))
    web.run_app(make_app(args.ttft_ms / 1000, args.itl_ms / 1000, args.stall_after, args.slots, args.die_after, script,
                         args.reply),
                host="127.0.0.1",
                port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
