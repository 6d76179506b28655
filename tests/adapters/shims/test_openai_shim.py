"""The shared OpenAI shim: static batch collection, per-row stop rules, SSE framing and usage
(with a scripted backend, no model), plus the transformers static shim with the default model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from adapters.base import LaunchConfig
from adapters.shims.openai_shim import BatchWorker, GenRequest, create_app
from own_engine.server.text import IncrementalDetokenizer


class ScriptedTokenizer:
    """ids 0..25 ↔ letters a..z; 99 = EOS (special)."""

    all_special_ids = [99]

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": self.encode(text, add_special_tokens)}

    def encode(self, text, add_special_tokens=True):
        return [ord(c) - 97 for c in text if c.isalpha()]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + i) for i in ids if i != 99)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "".join(m["content"] for m in messages)


class ScriptedBackend:
    """Emits ``script[row]`` token by token for every row of a batch (one 'step' per token)."""

    model_label = "scripted"
    eos_token_ids = {99}

    def __init__(self, script: dict[int, list[int]] | None = None, fail: bool = False) -> None:
        self.tokenizer = ScriptedTokenizer()
        self.script = script or {}
        self.fail = fail
        self.batches: list[list[int]] = []  # prompt lengths per batch
        self.steps_run: list[int] = []

    def generate_batch(self, batch, emit, done):
        self.batches.append([len(r.prompt_ids) for r in batch])
        if self.fail:
            raise RuntimeError("out of memory (scripted)")
        steps = 0
        for step in range(max(r.max_tokens for r in batch)):
            if all(done(i) for i in range(len(batch))):
                break
            steps += 1
            for i, r in enumerate(batch):
                seq = self.script.get(len(r.prompt_ids), [0, 1, 2, 99, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
                emit(i, seq[step] if step < len(seq) else 25)
        self.steps_run.append(steps)


def drain(req: GenRequest, loop: asyncio.AbstractEventLoop) -> list[tuple]:
    loop.run_until_complete(asyncio.sleep(0))
    items = []
    while not req.out.empty():
        items.append(req.out.get_nowait())
    return items


def test_batch_worker_stop_rules_and_static_batch():
    loop = asyncio.new_event_loop()
    try:
        backend = ScriptedBackend()
        worker = BatchWorker(backend, max_batch_size=4, batch_window_ms=0)
        stop_at_eos = GenRequest([1, 2], max_tokens=10, loop=loop, out=asyncio.Queue())
        ignore = GenRequest([1, 2, 3], max_tokens=6, ignore_eos=True, loop=loop, out=asyncio.Queue())
        short = GenRequest([1], max_tokens=2, loop=loop, out=asyncio.Queue())
        worker.run_batch([stop_at_eos, ignore, short])
        # EOS ends the first row (counted in completion tokens, not streamed as a token)
        assert drain(stop_at_eos, loop) == [("token", 0), ("token", 1), ("token", 2), ("done", "stop")]
        assert stop_at_eos.generated == [0, 1, 2, 99]
        # ignore_eos: the EOS id is just a token; max_tokens ends it
        items = drain(ignore, loop)
        assert items[-1] == ("done", "length") and len(ignore.generated) == 6 and ("token", 99) in items
        assert drain(short, loop) == [("token", 0), ("token", 1), ("done", "length")]
        # the batch ran until its longest member finished (6 steps), then stopped
        assert backend.steps_run == [6]
    finally:
        loop.close()


def test_batch_worker_engine_error_reaches_every_row():
    loop = asyncio.new_event_loop()
    try:
        worker = BatchWorker(ScriptedBackend(fail=True), max_batch_size=2)
        a = GenRequest([1], max_tokens=3, loop=loop, out=asyncio.Queue())
        b = GenRequest([2], max_tokens=3, loop=loop, out=asyncio.Queue())
        worker.run_batch([a, b])
        assert drain(a, loop) == [("error", "RuntimeError: out of memory (scripted)")]
        assert drain(b, loop)[0][0] == "error"
    finally:
        loop.close()


def test_collect_groups_by_sampling_params_and_respects_max_batch():
    worker = BatchWorker(ScriptedBackend(), max_batch_size=2, batch_window_ms=0)
    greedy = [GenRequest([i], max_tokens=1) for i in range(3)]
    hot = GenRequest([7], max_tokens=1, temperature=0.8)
    for r in (greedy[0], hot, greedy[1], greedy[2]):
        worker.submit(r)
    assert worker.collect() == [greedy[0], greedy[1]]  # hot deferred, max 2 rows
    assert worker.collect() == [hot]  # deferred request goes first, greedy[2] is incompatible
    assert worker.collect() == [greedy[2]]


def test_batch_worker_rejects_bad_batch_size():
    with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
        BatchWorker(ScriptedBackend(), max_batch_size=0)


def test_detokenizer_holds_back_incomplete_utf8():
    class ByteTok:
        all_special_ids = [0]

        def decode(self, ids, skip_special_tokens=True):
            return bytes(i for i in ids if i != 0).decode("utf-8", errors="replace")

    d = IncrementalDetokenizer(ByteTok(), [])  # the shims use the reference engine's detokenizer
    euro = "€".encode()  # 3 bytes
    assert d.add_token(ord("a")) == "a"
    assert d.add_token(euro[0]) == "" and d.add_token(euro[1]) == ""
    assert d.add_token(euro[2]) == "€"
    assert d.add_token(0) == ""  # special id skipped
    assert d.add_token(ord("b")) == "b"
    assert d.flush() == ""


def test_shim_front_end_imports_without_torch_or_transformers():
    """The shims run in other engines' venvs with the project on PYTHONPATH: the reference
    engine's protocol/validation/text/front-end modules they reuse must import without torch,
    transformers, numpy or the harness's own dependencies."""
    code = (
        "import importlib.abc, sys\n"
        "BLOCK = {'torch', 'transformers', 'numpy', 'prometheus_client', 'typer', 'aiohttp', 'harness'}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCK:\n"
        "            raise ImportError('not in a shim venv: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import adapters.shims.openai_shim, adapters.shims.hf_static_server, adapters.shims.ort_server\n"
        "import adapters.shims.ds_server\n"
    )
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


async def _serve_scripted(backend, window_ms=300.0):
    import uvicorn

    from adapters.runtime.process import find_free_port

    worker = BatchWorker(backend, max_batch_size=4, batch_window_ms=window_ms)
    worker.start()
    app = create_app(backend, worker, "scripted-model")
    port = find_free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task, worker, f"http://127.0.0.1:{port}"


async def _stream(session, url, body):
    chunks, usage, finish = [], None, None
    async with session.post(url, json=body) as resp:
        assert resp.status == 200
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                chunks.append("[DONE]")
                break
            obj = json.loads(data)
            if obj.get("usage"):
                usage = obj["usage"]
            for c in obj["choices"]:
                text = c.get("text") if "text" in c else c["delta"].get("content")
                if text:
                    chunks.append(text)
                finish = c.get("finish_reason") or finish
    return chunks, usage, finish


async def test_sse_stream_completions_and_chat_in_one_batch():
    backend = ScriptedBackend(script={2: [7, 4, 11, 11, 14, 99], 3: [1, 24, 4, 99]})
    server, task, worker, base = await _serve_scripted(backend)
    try:
        async with aiohttp.ClientSession() as s:
            comp = {"model": "scripted-model", "prompt": "ab", "max_tokens": 10, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            chat = {"model": "scripted-model", "messages": [{"role": "user", "content": "xyz"}], "max_tokens": 10,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            (c1, u1, f1), (c2, u2, f2) = await asyncio.gather(
                _stream(s, base + "/v1/completions", comp), _stream(s, base + "/v1/chat/completions", chat))
            assert c1 == ["h", "e", "l", "l", "o", "[DONE]"] and f1 == "stop"
            assert u1 == {"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8}
            assert c2 == ["b", "y", "e", "[DONE]"] and f2 == "stop" and u2["completion_tokens"] == 4
            assert backend.batches == [[2, 3]] or backend.batches == [[3, 2]]  # one static batch of two rows
            # non-streaming, wrong model, bad n
            async with s.post(base + "/v1/completions", json={**comp, "stream": False, "max_tokens": 3}) as r:
                body = await r.json()
                assert body["choices"][0]["text"] == "hel" and body["choices"][0]["finish_reason"] == "length"
                assert body["usage"]["completion_tokens"] == 3
            async with s.post(base + "/v1/completions", json={**comp, "model": "other"}) as r:
                assert r.status == 404 and "scripted-model" in (await r.json())["error"]["message"]
            async with s.post(base + "/v1/completions", json={**comp, "n": 2}) as r:
                assert r.status == 400
            async with s.get(base + "/v1/models") as r:
                assert (await r.json())["data"][0]["id"] == "scripted-model"
    finally:
        server.should_exit = True
        await task
        worker.stop()


@pytest.mark.slow
def test_transformers_static_shim_streams_a_two_request_batch(tmp_path):
    """Real model: two requests collected into ONE generate; greedy text equals HF generate."""
    from harness.app.core.model import resolve_model

    from adapters.engines.hf import TransformersStaticAdapter
    from adapters.runtime.process import port_is_free

    model_dir = resolve_model(None)
    cfg = LaunchConfig(model_dir=model_dir, run_dir=tmp_path, threads=1, startup_timeout_s=240,
                       engine_args={"batch_window_ms": "1500", "max_batch_size": "4"})
    bodies = [
        {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "ignore_eos": True},
        {"prompt": "One, two, three,", "max_tokens": 5, "temperature": 0, "ignore_eos": True},
    ]

    async def run(ep):
        async with aiohttp.ClientSession() as s:
            tasks = [_stream(s, ep.base_url + "/v1/completions",
                             {**b, "model": ep.model_name, "stream": True, "stream_options": {"include_usage": True}})
                     for b in bodies]
            res = await asyncio.gather(*tasks)
            async with s.get(ep.base_url + "/shim/stats") as r:
                stats = await r.json()
        return res, stats

    with TransformersStaticAdapter(hardware="cpu").launch(cfg) as ep:
        assert ep.display_name == "transformers (static batching, generate)"
        (r1, r2), stats = asyncio.run(run(ep))
        port = ep.effective_config["port"]
    assert stats["batch_sizes"] == [2]
    (c1, u1, f1), (c2, u2, f2) = r1, r2
    assert u1["completion_tokens"] == 8 and f1 == "length" and c1[-1] == "[DONE]"
    assert u2["completion_tokens"] == 5 and f2 == "length"
    assert "".join(c1[:-1]).startswith(" Paris")
    assert len(c1) - 1 >= 6  # streamed token by token, not as one block
    assert port_is_free(port)
    assert (tmp_path / "logs" / "transformers.log").is_file()
