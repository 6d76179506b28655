"""The real server (``python -m own_engine``) on the default model, as a child process.

Small KV pool and few tokens so the whole file stays within seconds of model time. The streams
are read with the harness's own SSE interpreter (``harness.loadgen.sse.interpret``) so the server is
checked against the client contract that measures it (DESIGN.md, "Metric definitions").
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.app.core.model import resolve_model
from harness.loadgen.sse import interpret
from own_engine.server.text import OutputTextProcessor

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
READY = re.compile(r"own_engine ready: (http://\S+)")


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return resolve_model(None)


def test_real_tokenizer_emoji_split_over_tokens_is_never_half_sent(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = tok.encode("Hi 😀 ok", add_special_tokens=False)
    assert any("\ufffd" in tok.decode([t]) for t in ids)  # the emoji really is split over tokens
    p = OutputTextProcessor(tok, tok.encode("Say:", add_special_tokens=False), stop=["ok"])
    pieces = [p.process([t], False).text for t in ids]
    assert "".join(pieces) == "Hi 😀 " and all("\ufffd" not in x for x in pieces)
    assert p.stopped


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """Start ``python -m own_engine`` on a free port; yield (base_url, process, log path)."""
    log_path = tmp_path_factory.mktemp("own_server") / "server.log"
    cmd = [sys.executable, "-m", "own_engine", "--model", str(model_dir), "--port", "0",
           "--served-model-name", "smol", "--num-kv-blocks", "48", "--block-size", "16",
           "--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "256", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                start_new_session=True)
    url = None
    deadline = time.monotonic() + 240
    while url is None:
        text = log_path.read_text(errors="replace")
        m = READY.search(text)
        if m:
            url = m.group(1)
        elif proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"own_engine did not become ready (rc={proc.poll()}):\n{text[-3000:]}")
        else:
            time.sleep(0.1)
    try:
        yield url, proc, log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _stream(session, url, path, body):
    """POST a streaming request; return the list of ``interpret``-ed chunks."""
    async with session.post(f"{url}{path}", json={**body, "stream": True}) as resp:
        assert resp.status == 200, await resp.text()
        raw = (await resp.read()).decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and all(e.startswith("data: ") for e in events[:-1]), raw[-300:]
    return [interpret(e[len("data: "):]) for e in events[:-1]], [e[len("data: "):] for e in events[:-1]]


def _metrics(text: str) -> dict[str, float]:
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if not s.labels.get("finished_reason")}


async def _scenario(url: str, model_dir: Path, proc: subprocess.Popen) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = "Write a short poem about the sea. " * 4  # > 2 full KV blocks, so a repeat hits the prefix cache
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/health") as resp:
            assert resp.status == 200
        body = {"model": "smol", "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        chunks, _ = await _stream(s, url, "/v1/completions", body)
        assert chunks[-1].done and not any(c.error for c in chunks)
        usage = chunks[-2].usage
        n_prompt = len(tok.encode(prompt))
        assert usage["prompt_tokens"] == n_prompt and usage["completion_tokens"] == 6
        assert usage["total_tokens"] == n_prompt + 6
        assert [c.finish_reason for c in chunks[:-2]][-1] == "length"
        streamed = "".join(c.text for c in chunks)
        assert streamed.strip()
        # the same greedy request, not streamed: same text; its prompt is now in the prefix cache
        async with s.post(f"{url}/v1/completions", json=body) as resp:
            plain = await resp.json()
        assert plain["choices"][0]["text"] == streamed
        assert plain["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16

        messages = [{"role": "user", "content": "What is the capital of France?"}]
        chunks, raw = await _stream(s, url, "/v1/chat/completions", {
            "model": "smol", "messages": messages, "max_tokens": 8, "temperature": 0,
            "stream_options": {"include_usage": True}})
        first = json.loads(raw[0])
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert not chunks[0].token_bearing and chunks[1].token_bearing
        assert chunks[-1].done and chunks[-2].usage is not None and chunks[-2].finish_reason is None
        assert chunks[-3].finish_reason in ("stop", "length")
        chat_prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert chunks[-2].usage["prompt_tokens"] == len(tok.encode(chat_prompt, add_special_tokens=False))
        assert 1 <= chunks[-2].usage["completion_tokens"] <= 8
        assert "Paris" in "".join(c.text for c in chunks)

        # a client that leaves mid-stream: its KV blocks come back
        long_body = {"model": "smol", "prompt": prompt, "max_tokens": 150, "ignore_eos": True, "stream": True}
        resp = await s.post(f"{url}/v1/completions", json=long_body)
        line = await resp.content.readuntil(b"\n\n")
        assert interpret(line.decode()[len("data: "):]).text is not None
        resp.close()
        deadline = time.monotonic() + 60
        while True:
            async with s.get(f"{url}/metrics") as r:
                m = _metrics(await r.text())
            if m["own:kv_cache_blocks_used"] == 0 and m["own:num_requests_running"] == 0:
                break
            assert time.monotonic() < deadline, m
            await asyncio.sleep(0.05)
        assert m["own:kv_cache_blocks_total"] == 48
        assert m["own:prefix_cache_hits_total"] >= 16
        assert m["own:generation_tokens_total"] < 6 + 6 + 8 + 150

        # SIGTERM while a stream is open: the stream ends at once with an error event
        resp = await s.post(f"{url}/v1/completions", json=long_body)
        await resp.content.readuntil(b"\n\n")
        proc.send_signal(signal.SIGTERM)
        rest = (await resp.read()).decode().strip().split("\n\n")
        assert interpret(rest[-1][len("data: "):]).error == "the server is shutting down"


def test_real_server_streams_completion_and_chat_and_stops_cleanly_on_sigterm(server, model_dir):
    url, proc, log_path = server
    asyncio.run(_scenario(url, model_dir, proc))  # ends by sending SIGTERM
    assert proc.wait(timeout=60) == 0, log_path.read_text()[-2000:]
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of the process group is left
    log = log_path.read_text()
    assert "Traceback" not in log
    # a requested stop is reported at INFO with its signal, not as a warning
    assert "INFO own_engine: own_engine stopped (SIGTERM)" in log and "WARNING own_engine: own_engine stopped" not in log
