"""own_engine's OpenAI server against a scripted fake engine (no model, no torch).

The fake tokenizer is byte-level (token id < 256 = that byte, like GPT-2/Llama-3 byte-level
BPE), so multi-byte UTF-8 characters split over tokens exactly as with the real model; a few
multi-character "word" tokens make stop strings span token boundaries. The fake engine emits
a scripted list of tokens per step for every request, so the expected SSE stream is known
exactly. The server runs in a real uvicorn (background thread, free port) and is driven with
aiohttp, so disconnects are real TCP disconnects.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import aiohttp
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from own_engine.server.metrics import ServerCounters, render_metrics
from own_engine.engine import RequestOutput
from own_engine.sampling_params import SamplingParams
from own_engine.server.app import create_app
from own_engine.server.text import IncrementalDetokenizer, OutputTextProcessor

EOS = 256
WORDS = ["Hel", "lo S", "TO", "P more", "ST", "ar", "Hello", " world"]  # ids 257..
WORD_ID = {w: 257 + i for i, w in enumerate(WORDS)}


def b(text: str) -> list[int]:
    """Byte tokens of ``text``."""
    return list(text.encode("utf-8"))


def w(*words: str) -> list[int]:
    """Word tokens."""
    return [WORD_ID[x] for x in words]


class FakeTokenizer:
    """Byte-level tokenizer with an EOS special token and a few word tokens."""

    eos_token_id = EOS
    chat_template = "fake"

    def __len__(self) -> int:
        return 257 + len(WORDS)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return b(text)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        out = bytearray()
        for t in ids:
            if t < 256:
                out.append(t)
            elif t == EOS:
                if not skip_special_tokens:
                    out += b"<eos>"
            else:
                out += WORDS[t - 257].encode()
        return out.decode("utf-8", errors="replace")

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


# the fake engine emits the real engine's output type, so the two cannot drift apart
FakeOutput = RequestOutput


@dataclass
class _Req:
    rid: str
    prompt: list[int]
    params: SamplingParams
    index: int = 0
    out: list[int] = field(default_factory=list)
    step: int = 0


class FakeEngine:
    """The LLMEngine API with a scripted schedule.

    Every request gets ``script[k]`` at its k-th step (``filler`` once the script is exhausted),
    truncated at ``max_tokens`` (→ "length"), ending at EOS / a stop token id (→ "stop").
    ``cached_tokens`` is reported as the prefix-cache hit of every request. ``fail_at_step``
    makes the n-th ``step()`` call raise. KV use is ceil(len / block_size) blocks per request.
    """

    def __init__(self, script, *, filler=b(".")[0], max_model_len=64, block_size=4, num_blocks=64,
                 cached_tokens=3, step_delay_s=0.0, fail_at_step=None, index_scripts=None):
        self.tokenizer = FakeTokenizer()
        self.max_model_len = max_model_len
        self.script = script
        self.index_scripts = index_scripts or {}  # sample index (n > 1) -> its own script
        self.filler = filler
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.cached_tokens = cached_tokens
        self.step_delay_s = step_delay_s
        self.fail_at_step = fail_at_step
        self.reqs: dict[str, _Req] = {}
        self.added: list[_Req] = []
        self.aborted: list[str] = []
        self.num_steps = 0
        self.queries = 0
        self.hits = 0

    def add_request(self, request_id, prompt_token_ids, sampling_params):
        if not prompt_token_ids:
            raise ValueError("empty prompt")
        if len(prompt_token_ids) + sampling_params.max_tokens > self.max_model_len:
            raise ValueError("too long")
        for i in range(sampling_params.n):  # one sequence per sample, keyed (request_id, index)
            self.reqs[(request_id, i)] = _Req(request_id, list(prompt_token_ids), sampling_params, i)
        self.added.append(self.reqs[(request_id, 0)])
        self.queries += len(prompt_token_ids)
        self.hits += self.cached_tokens

    def abort(self, request_id):
        self.aborted.append(request_id)
        for key in [k for k in self.reqs if k[0] == request_id]:
            del self.reqs[key]

    def has_unfinished(self):
        return bool(self.reqs)

    def step(self):
        self.num_steps += 1
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        if self.fail_at_step == self.num_steps:
            raise RuntimeError("boom: CUDA error (scripted)")
        outs = []
        for key, r in list(self.reqs.items()):
            script = self.index_scripts.get(r.index, self.script)
            toks = script[r.step] if r.step < len(script) else [self.filler]
            r.step += 1
            new, finished, reason = [], False, None
            stops = set(r.params.stop_token_ids or []) | (set() if r.params.ignore_eos else {EOS})
            for t in toks:
                new.append(t)
                r.out.append(t)
                if t in stops:
                    finished, reason = True, "stop"
                    break
                if len(r.out) >= r.params.max_tokens:
                    finished, reason = True, "length"
                    break
            outs.append(FakeOutput(r.rid, new, finished, reason, len(r.prompt), self.cached_tokens, len(r.out),
                                   r.index))
            if finished:
                del self.reqs[key]
        return outs

    def stats(self):
        used = sum(-(-(len(r.prompt) + len(r.out)) // self.block_size) for r in list(self.reqs.values()))
        return {
            "num_running": len(self.reqs),
            "num_waiting": 0,
            "kv_blocks_total": self.num_blocks,
            "kv_blocks_used": used,
            "prefix_cache_queries": self.queries,
            "prefix_cache_hits": self.hits,
            "num_preemptions": 2,
            "spec_num_draft_tokens": 10,
            "spec_num_accepted_tokens": 7,
            "spec_num_verify_steps": 4,
        }


@contextmanager
def serve(engine, **kw) -> Iterator[str]:
    """Run ``create_app(engine)`` in uvicorn on a free port in a background thread."""
    app = create_app(engine, served_model_name="fake-model", **kw)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "test server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


async def read_sse(resp) -> tuple[list, bytes]:
    """All ``data:`` payloads of a stream (JSON-decoded, "[DONE]" kept as a string) + raw bytes."""
    raw = await resp.read()
    events = raw.decode().split("\n\n")
    assert events[-1] == "", f"stream does not end with a blank line: {raw[-40:]!r}"
    out = []
    for ev in events[:-1]:
        assert ev.startswith("data: "), ev
        payload = ev[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out, raw


def strip_ids(chunk: dict) -> dict:
    chunk = dict(chunk)
    assert chunk.pop("id").startswith(("cmpl-", "chatcmpl-"))
    assert isinstance(chunk.pop("created"), int)
    return chunk


async def post(url, body, session):
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.json()


# --------------------------------------------------------------------------- SSE format


async def test_chat_stream_exact_sse_sequence_with_usage():
    engine = FakeEngine([b("He"), b("llo"), [EOS]])
    messages = [{"role": "user", "content": "hi"}]
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"model": "fake-model", "messages": messages, "max_tokens": 10, "stream": True,
                    "stream_options": {"include_usage": True}, "temperature": 0}
            async with s.post(f"{url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                events, _ = await read_sse(resp)
    prompt_len = len(b("<user>hi\n<assistant>"))
    ids = {e["id"] for e in events[:-1]}
    assert len(ids) == 1
    chunks = [strip_ids(e) for e in events[:-1]]

    def chunk(delta, finish):
        return {"object": "chat.completion.chunk", "model": "fake-model",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    assert chunks == [
        chunk({"role": "assistant", "content": ""}, None),
        chunk({"content": "He"}, None),
        chunk({"content": "llo"}, None),
        chunk({}, "stop"),
        {"object": "chat.completion.chunk", "model": "fake-model", "choices": [],
         "usage": {"prompt_tokens": prompt_len, "completion_tokens": 6, "total_tokens": prompt_len + 6,
                   "prompt_tokens_details": {"cached_tokens": 3}}},
    ]
    assert events[-1] == "[DONE]"
    (req,) = engine.added
    assert req.prompt == b("<user>hi\n<assistant>")
    assert req.params.max_tokens == 10 and req.params.temperature == 0


async def test_completion_stream_length_finish_without_usage_chunk():
    engine = FakeEngine([b("ab"), b("cd"), b("ef")])
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "xyz", "max_tokens": 3, "stream": True}
            async with s.post(f"{url}/v1/completions", json=body) as resp:
                events, raw = await read_sse(resp)
    texts = [(e["choices"][0]["text"], e["choices"][0]["finish_reason"]) for e in events[:-1]]
    assert texts == [("ab", None), ("c", "length")]
    assert all(e["object"] == "text_completion" and "usage" not in e for e in events[:-1])
    assert events[-1] == "[DONE]" and raw.endswith(b"data: [DONE]\n\n")
    assert engine.added[0].prompt == b("xyz")


async def test_non_streaming_responses_carry_text_and_usage():
    engine = FakeEngine([w("Hello"), w(" world"), [EOS]], cached_tokens=2)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            st, chat = await post(f"{url}/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, s)
            st2, comp = await post(f"{url}/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2}, s)
    assert st == 200 and st2 == 200
    assert chat["object"] == "chat.completion"
    assert chat["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hello world"},
                                "logprobs": None, "finish_reason": "stop"}]
    plen = len(b("<user>hi\n<assistant>"))
    assert chat["usage"] == {"prompt_tokens": plen, "completion_tokens": 3, "total_tokens": plen + 3,
                             "prompt_tokens_details": {"cached_tokens": 2}}
    # chat without max_tokens may use the rest of the context (vLLM default)
    assert engine.added[0].params.max_tokens == 64 - plen
    assert comp["choices"][0]["text"] == "Hello world" and comp["choices"][0]["finish_reason"] == "length"
    assert comp["usage"]["prompt_tokens"] == 3 and comp["usage"]["completion_tokens"] == 2
    assert engine.added[1].prompt == [1, 2, 3]


async def test_n_choices_stream_separately_and_sum_usage():
    # choice 0: "ab" then EOS; choice 1: "Hel" "lo S" "TO" "P more" with stop "STOP" -> "Hello "
    engine = FakeEngine([b("ab"), [EOS]], index_scripts={1: [w("Hel"), w("lo S"), w("TO"), w("P more")]},
                        step_delay_s=0.01, max_model_len=2000)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"messages": [{"role": "user", "content": "x"}], "n": 2, "max_tokens": 500, "stop": "STOP",
                    "stream": True, "stream_options": {"include_usage": True}, "seed": 5}
            async with s.post(f"{url}/v1/chat/completions", json=body) as resp:
                events, _ = await read_sse(resp)
            st, plain = await post(f"{url}/v1/completions", {"prompt": "x", "n": 2, "max_tokens": 500,
                                                             "stop": "STOP"}, s)
    per_choice: dict[int, list] = {0: [], 1: []}
    for e in events[:-2]:
        (c,) = e["choices"]
        per_choice[c["index"]].append((c["delta"], c["finish_reason"]))
    assert per_choice[0] == [({"role": "assistant", "content": ""}, None), ({"content": "ab"}, None), ({}, "stop")]
    assert per_choice[1] == [({"role": "assistant", "content": ""}, None), ({"content": "Hel"}, None),
                             ({"content": "lo "}, None), ({}, "stop")]
    assert events[-2]["usage"]["completion_tokens"] == 3 + 4
    assert engine.added[0].params.n == 2 and engine.added[0].params.seed == 5
    assert st == 200
    assert [(c["index"], c["text"], c["finish_reason"]) for c in plain["choices"]] == [
        (0, "ab", "stop"), (1, "Hello ", "stop")]
    assert plain["usage"]["completion_tokens"] == 7
    assert engine.aborted == [r.rid for r in engine.added]  # choice 1 ran on until the server aborted it


# --------------------------------------------------------------------------- text processing


async def test_stop_string_across_token_boundaries_truncates_and_aborts():
    # "Hel" | "lo S" | "TO" | "P more": the stop "STOP" spans three tokens.
    # The engine would go on for 1000 tokens (10 s): only the server's abort ends it early.
    engine = FakeEngine([w("Hel"), w("lo S"), w("TO"), w("P more"), b("zzz")], step_delay_s=0.01,
                        max_model_len=2000)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "p", "max_tokens": 1000, "stop": ["STOP", "never"], "stream": True,
                    "stream_options": {"include_usage": True}}
            async with s.post(f"{url}/v1/completions", json=body) as resp:
                events, _ = await read_sse(resp)
            st, plain = await post(f"{url}/v1/completions", {"prompt": "p", "max_tokens": 1000, "stop": "STOP"}, s)
    chunks = [(e["choices"][0]["text"], e["choices"][0]["finish_reason"]) for e in events[:-2]]
    # "S" and "STO" are held back until it is clear they are a stop string; never sent.
    assert chunks == [("Hel", None), ("lo ", None), ("", "stop")]
    assert events[-2]["usage"]["completion_tokens"] == 4  # up to the token that completed "STOP"
    assert plain["choices"][0]["text"] == "Hello " and plain["choices"][0]["finish_reason"] == "stop"
    assert plain["usage"]["completion_tokens"] == 4
    assert engine.aborted == [r.rid for r in engine.added]  # the engine was told to stop both


async def test_partial_utf8_never_streamed():
    emoji = "😀".encode()  # 4 bytes, split 1 + 3 over two steps, after a lone 1-byte step
    engine = FakeEngine([b("a") + [emoji[0]], [emoji[1]], [emoji[2], emoji[3]] + b("é")[:1], b("é")[1:], [EOS]])
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "p", "max_tokens": 20, "stream": True}
            async with s.post(f"{url}/v1/completions", json=body) as resp:
                events, _ = await read_sse(resp)
    texts = [e["choices"][0]["text"] for e in events[:-1]]
    assert texts == ["a", "😀", "é", ""]  # the step holding only emoji[1] produced no chunk
    assert all("\ufffd" not in t for t in texts)


def test_output_text_processor_holds_back_only_real_stop_prefixes():
    tok = FakeTokenizer()
    p = OutputTextProcessor(tok, b("p"), stop=["STOP"])
    assert p.process(w("Hello"), False).text == "Hello"
    assert p.process(w("ST"), False).text == ""  # could become "STOP"
    d = p.process(w("ar"), False)  # "STar": not a stop after all → released
    assert (d.text, d.stopped) == ("STar", False)
    d = p.process(b("x"), True, "length")
    assert (d.text, d.num_tokens, p.num_tokens) == ("x", 1, 4)


def test_output_text_processor_stop_inside_one_step_counts_tokens_up_to_match():
    p = OutputTextProcessor(FakeTokenizer(), b("p"), stop=["lo"])
    d = p.process(w("Hel", "lo S", "TO"), False)
    assert (d.text, d.num_tokens, d.stopped, p.text) == ("Hel", 2, True, "Hel")
    assert p.process(b("more"), False).text == ""  # nothing after a stop


def test_stop_token_text_dropped_but_counted():
    p = OutputTextProcessor(FakeTokenizer(), b("p"), stop_token_ids=[ord("!")])
    d = p.process(b("hi!"), True, "stop")
    assert (d.text, d.num_tokens) == ("hi", 3)
    q = OutputTextProcessor(FakeTokenizer(), b("p"))  # "!" is not a stop token here: shown
    assert q.process(b("hi!"), True, "length").text == "hi!"


def test_incremental_detokenizer_flushes_incomplete_char_at_end():
    d = IncrementalDetokenizer(FakeTokenizer(), b("p"))
    assert d.add_token(b("é")[0]) == ""
    assert d.flush() == "\ufffd"  # the stream ended mid-character: shown as U+FFFD, not dropped


# --------------------------------------------------------------------------- errors


BAD_REQUESTS = [
    ("/v1/completions", b"{not json", "not valid JSON"),
    ("/v1/completions", b"[1, 2]", "JSON object"),
    ("/v1/completions", {"max_tokens": 3}, "prompt"),
    ("/v1/chat/completions", {"max_tokens": 3}, "messages"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens must be at least 1"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -5}, "max_tokens must be at least 1"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
     "max_completion_tokens"),
    ("/v1/completions", {"prompt": "x" * 60, "max_tokens": 10}, "maximum context length is 64"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 70}]}, "maximum context length is 64"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, "'gpt-4' is not served"),
    ("/v1/completions", {"prompt": "x", "n": 17}, "n must be between 1 and 16"),
    ("/v1/completions", {"prompt": "x", "n": 2, "best_of": 3}, "best_of"),
    ("/v1/completions", {"prompt": [5, 99999]}, "outside the vocabulary"),
    ("/v1/completions", {"prompt": ["a", "b"]}, "batched prompts"),
    ("/v1/completions", {"prompt": ""}, "empty"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, "temperature"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "lots"}, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, "logprobs must be between 0 and 20, got 21"),
    ("/v1/completions", {"prompt": "x", "logprobs": 2, "echo": True}, "echo is not supported"),
]


async def test_bad_requests_get_openai_style_400():
    engine = FakeEngine([[EOS]])
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            for path, body, needle in BAD_REQUESTS:
                kw = {"data": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
                    else {"json": body}
                async with s.post(f"{url}{path}", **kw) as resp:
                    payload = await resp.json()
                    assert resp.status == 400, (body, payload)
                err = payload["error"]
                assert err["type"] == "BadRequestError" and err["code"] == 400, payload
                assert needle in err["message"], (needle, err["message"])
                assert "\n" not in err["message"]
            async with s.get(f"{url}/v1/nothing") as resp:
                assert resp.status == 404 and (await resp.json())["error"]["code"] == 404
    assert engine.added == []  # nothing bad ever reached the engine


async def test_engine_failure_mid_stream_sends_error_event_then_recovers():
    engine = FakeEngine([b("ok"), b("never")], fail_at_step=2)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "stream": True}
            async with s.post(f"{url}/v1/chat/completions", json=body) as resp:
                events, _ = await read_sse(resp)
            st, after = await post(f"{url}/v1/completions", {"prompt": "x", "max_tokens": 2}, s)
            async with s.get(f"{url}/metrics") as resp:
                metrics = _parse_metrics(await resp.text())
    assert [e["choices"][0]["delta"] for e in events[:2]] == [{"role": "assistant", "content": ""}, {"content": "ok"}]
    assert len(events) == 3 and "[DONE]" not in events
    assert events[2]["error"]["code"] == 500 and "boom" in events[2]["error"]["message"]
    assert st == 200 and after["choices"][0]["text"] == "ok"
    assert metrics[("own:request_failure_total", ())] == 1


async def test_engine_failure_without_streaming_is_a_500_error_body():
    engine = FakeEngine([b("ok")], fail_at_step=1)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            st, body = await post(f"{url}/v1/completions", {"prompt": "x", "max_tokens": 3}, s)
    assert st == 500
    assert body["error"]["type"] == "InternalServerError" and "boom" in body["error"]["message"]


class CrashingEngine(FakeEngine):
    """has_unfinished() raises after the first step: a bug outside step() kills the engine thread."""

    def has_unfinished(self):
        if self.num_steps >= 1:
            raise RuntimeError("scheduler invariant broken (scripted)")
        return super().has_unfinished()


async def test_engine_thread_crash_ends_streams_and_turns_health_503():
    engine = CrashingEngine([b("ok"), b("never")])
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "x", "max_tokens": 5, "stream": True}
            async with s.post(f"{url}/v1/completions", json=body) as resp:
                events, _ = await read_sse(resp)
            async with s.get(f"{url}/health") as resp:
                health = resp.status
            async with s.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}) as resp:
                status, after = resp.status, await resp.json()
    assert events[0]["choices"][0]["text"] == "ok"
    assert "scheduler invariant broken" in events[-1]["error"]["message"] and "[DONE]" not in events
    assert health == 503
    assert status == 503 and "not running" in after["error"]["message"]


# --------------------------------------------------------------------------- disconnect


async def _wait_metric(s, url, name, want, timeout_s=10.0):
    """Poll /metrics until ``name`` == ``want`` (or ``want(value)`` is true); return the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with s.get(f"{url}/metrics") as resp:
            value = _parse_metrics(await resp.text())[(name, ())]
        if (want(value) if callable(want) else value == want) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.02)


async def test_client_disconnect_aborts_request_and_frees_blocks():
    engine = FakeEngine([b("x")], step_delay_s=0.01, max_model_len=100_000)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "p", "max_tokens": 50_000, "stream": True}
            resp = await s.post(f"{url}/v1/completions", json=body)
            first = await resp.content.readuntil(b"\n\n")
            assert json.loads(first[len(b"data: "):])["choices"][0]["text"] == "x"
            assert await _wait_metric(s, url, "own:kv_cache_blocks_used", lambda v: v > 0) > 0
            resp.close()  # drop the connection mid-stream
            assert await _wait_metric(s, url, "own:kv_cache_blocks_used", 0) == 0
            assert await _wait_metric(s, url, "own:num_requests_running", 0) == 0
            # non-streaming: the client gives up while the request runs
            task = asyncio.ensure_future(s.post(f"{url}/v1/completions", json={**body, "stream": False}))
            while len(engine.added) < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await _wait_metric(s, url, "own:num_requests_running", 0) == 0
            async with s.get(f"{url}/metrics") as resp:
                metrics = _parse_metrics(await resp.text())
    assert engine.aborted == [r.rid for r in engine.added]
    assert metrics[("own:request_success_total", (("finished_reason", "abort"),))] == 2
    assert len(engine.added[0].out) < 50_000


# --------------------------------------------------------------------------- other endpoints


def _parse_metrics(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model_name"))
            assert sample.labels["model_name"] == "fake-model"
            out[(sample.name, labels)] = sample.value
    return out


async def test_models_health_and_metrics_values():
    engine = FakeEngine([b("ab"), [EOS]], cached_tokens=1)
    with serve(engine) as url:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/health") as resp:
                assert resp.status == 200
            async with s.get(f"{url}/v1/models") as resp:
                models = await resp.json()
            await post(f"{url}/v1/completions", {"prompt": "abcd", "max_tokens": 5}, s)
            await post(f"{url}/v1/completions", {"prompt": "abcdef", "max_tokens": 1}, s)
            async with s.get(f"{url}/metrics") as resp:
                assert resp.headers["content-type"].startswith("text/plain")
                text = await resp.text()
    assert [m["id"] for m in models["data"]] == ["fake-model"] and models["data"][0]["max_model_len"] == 64
    m = _parse_metrics(text)
    assert m[("own:kv_cache_blocks_total", ())] == 64
    assert m[("own:kv_cache_blocks_used", ())] == 0 and m[("own:kv_cache_usage_perc", ())] == 0
    assert m[("own:prefix_cache_queries_total", ())] == 10
    assert m[("own:prefix_cache_hits_total", ())] == 2
    assert m[("own:prefix_cache_hit_rate", ())] == pytest.approx(0.2)
    assert m[("own:num_preemptions_total", ())] == 2
    assert m[("own:spec_decode_acceptance_rate", ())] == pytest.approx(0.7)
    assert m[("own:spec_decode_mean_acceptance_length", ())] == pytest.approx(2.75)
    assert m[("own:prompt_tokens_total", ())] == 10
    assert m[("own:generation_tokens_total", ())] == 3 + 1  # "a","b",EOS + "a" (max_tokens=1)
    assert m[("own:request_success_total", (("finished_reason", "stop"),))] == 1
    assert m[("own:request_success_total", (("finished_reason", "length"),))] == 1
    assert m[("own:num_requests_running", ())] == 0


def test_metrics_text_omits_unreported_and_uses_nan_without_data():
    text = render_metrics({"kv_blocks_used": 3, "kv_blocks_total": 12, "prefix_cache_queries": 0,
                           "prefix_cache_hits": 0}, ServerCounters(), "fake-model").decode()
    m = _parse_metrics(text)
    assert m[("own:kv_cache_usage_perc", ())] == 0.25
    assert math.isnan(m[("own:prefix_cache_hit_rate", ())])
    assert not any(name.startswith("own:spec_decode") for name, _ in m)
    assert "# TYPE own:prefix_cache_hits_total counter" in text or "# TYPE own:prefix_cache_hits counter" in text


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--bogus"], "No such option: --bogus"),
        ([], "Missing option '--model'"),
        (["--model", "/nonexistent/model"], "does not exist"),
        (["--model", ".", "--port", "70000"], "--port"),
        (["--model", ".", "--batching", "dynamic"], "--batching"),
        (["--model", ".", "--num-kv-blocks", "8", "--kv-cache-bytes", "4096"], "alternatives"),
        (["--model", ".", "--max-num-seqs", "0"], "--max-num-seqs"),
    ],
)
def test_cli_bad_flags_one_line_error_exit_2(argv, needle, capsys):
    from own_engine.__main__ import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err


def test_cli_flags_map_onto_engine_config(monkeypatch, tmp_path):
    import own_engine.server.cli as cli_main
    from own_engine.config import EngineConfig

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # main() sets it from --threads
    seen = {}

    def fake_load(options):
        seen.update(options)
        raise cli_main._Exit("stop here", 3)

    monkeypatch.setattr(cli_main, "_load_engine", fake_load)
    rc = cli_main.main(["--model", str(tmp_path), "--threads", "2", "--block-size", "8", "--num-kv-blocks", "100",
                        "--max-num-seqs", "4", "--max-num-batched-tokens", "128", "--max-model-len", "300",
                        "--no-prefix-caching", "--chunked-prefill", "--batching", "static", "--kv-allocation", "naive",
                        "--speculative", "ngram", "--num-speculative-tokens", "3", "--seed", "7"])
    assert rc == 3
    config = EngineConfig(**seen)
    config.validate()
    assert (config.model_dir, config.threads, config.block_size, config.num_kv_blocks) == (tmp_path, 2, 8, 100)
    assert (config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len) == (4, 128, 300)
    assert (config.enable_prefix_caching, config.enable_chunked_prefill) == (False, True)
    assert (config.batching, config.kv_allocation, config.speculative) == ("static", "naive", "ngram")
    assert (config.num_speculative_tokens, config.seed, config.kv_cache_bytes) == (3, 7, 256 * 2**20)
