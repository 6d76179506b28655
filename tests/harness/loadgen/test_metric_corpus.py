"""The field's known benchmark bugs (issue 16, "Metric correctness"), each replayed against the
client with a scripted server and a known schedule.

The null server (harness.loadgen.nullserver, a child process) writes exact byte pieces after
known delays and reports the ``perf_counter_ns`` of each write (CLOCK_MONOTONIC is shared by
processes on one machine), so the client's stamps are compared with what the server did. The
ignore_eos case drives ``bench run --engine openai`` against a small in-process endpoint that
records every request body.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import aiohttp
import pytest
from aiohttp import web
from typer.testing import CliRunner

from harness.app.cli.summary import summary_table
from harness.loadgen.client import EndpointTarget, build_payload, new_session, stream_request
from harness.loadgen.nullserver import null_server
from harness.loadgen.runner import Runner
from harness.metrics import (compute_metrics, connect_ms, e2el_from_scheduled_ms, e2el_ms, peak_output_throughput,
                             ttfat_ms, ttft_ms)
from results.schema import EngineResult, EngineStatus, RequestRecord, RunSummary
from workloads.base import RequestSpec, SingleRequestSession, Workload

pytestmark = pytest.mark.serial  # scripted streams' chunk times read by the client: run alone (make test)

MS = 1_000_000


@pytest.fixture(scope="module")
def server():
    with null_server() as url:
        yield url


def ev(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat(finish: str | None = None, **delta: Any) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage(p: int, c: int) -> dict:
    return {"id": "c", "choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}}


DONE = b"data: [DONE]\n\n"


async def register(url: str, sid: str, pieces: list[tuple[float, bytes]]) -> None:
    script = {"status": 200, "pieces": [[d, base64.b64encode(b).decode()] for d, b in pieces]}
    async with aiohttp.ClientSession() as s:
        async with s.put(f"{url}/_script/{sid}", json=script) as r:
            assert r.status == 200


async def writes(url: str, sid: str) -> list[int]:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/_writes/{sid}") as r:
            return await r.json()


def chat_request(sid: str, max_tokens: int = 8) -> RequestSpec:
    return RequestSpec(request_id=sid, max_tokens=max_tokens, messages=[{"role": "user", "content": "hi"}])


def new_record(sid: str, scheduled_ns: int = 0) -> RequestRecord:
    return RequestRecord(request_id=sid, engine="null", workload="corpus", scheduled_ns=scheduled_ns)


async def play(url: str, sid: str, pieces: list[tuple[float, bytes]]) -> tuple[RequestRecord, list[int]]:
    """Register a script, stream it once through the client; (record, server write times)."""
    await register(url, sid, pieces)
    rec = new_record(sid)
    async with new_session(30) as http:
        await stream_request(http, EndpointTarget(url, f"script:{sid}"), chat_request(sid), rec)
    return rec, await writes(url, sid)


# (1) --------------------------------------------------------------------------------------
async def test_finish_without_any_token_fails_as_no_token_and_latencies_are_not_numbers(server):
    empty_stop = [(0, ev(chat(role="assistant"))), (5, ev(chat(content=""))), (5, ev(chat(content="", finish="stop"))),
                  (0, ev(usage(3, 0))), (0, DONE)]
    only_done = [(0, ev(chat(role="assistant"))), (5, ev(chat(content=""))), (0, DONE)]
    a, _ = await play(server, "notok-stop", empty_stop)
    b, _ = await play(server, "notok-done", only_done)
    for rec in (a, b):
        assert not rec.success and rec.error_class == "no_token" and rec.chunk_times_ns == []
    assert a.error_message == 'no token received: the stream ended with finish_reason "stop" but no chunk carried generated text'
    assert b.error_message == "no token received: the stream ended with [DONE] but no chunk carried generated text"
    m = compute_metrics([a, b])
    assert m.requests_sent == 2 and m.requests_completed == 0 and m.failures_by_class == {"no_token": 2}
    for dist in (m.ttft_ms, m.tpot_ms, m.itl_ms, m.e2el_ms, m.ttfat_ms, m.e2el_from_scheduled_ms,
                 m.error_adjusted.ttft_ms, m.error_adjusted.e2el_ms):
        assert all(v is None for v in dist.model_dump().values())
    assert m.output_throughput == 0.0 and m.peak_output_throughput is None
    # the console shows N/A ("–") for every latency, not a number
    table, _ = summary_table(RunSummary(run_id="r", engines={"null": EngineResult(status=EngineStatus.FAILED, metrics=m)}))
    row = [col._cells[0] for col in table.columns]
    assert row[2] == "0/2" and row[5:10] == ["–"] * 5


# (2) --------------------------------------------------------------------------------------
async def test_finish_reason_error_after_tokens_is_a_stream_error(server):
    pieces = [(0, ev(chat(content="a"))), (5, ev(chat(content="b"))), (5, ev(chat(finish="error"))), (0, DONE)]
    rec, _ = await play(server, "finerr", pieces)
    assert not rec.success and rec.error_class == "stream_error" and rec.finish_reason == "error"
    assert rec.error_message == 'the server ended the stream with finish_reason "error"'
    assert len(rec.chunk_times_ns) == 2


# (3) --------------------------------------------------------------------------------------
async def test_invalid_utf8_fails_naming_the_decoding_error(server):
    bad = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a\xff"},"finish_reason":null}]}\n\n'
    pieces = [(0, ev(chat(content="ok"))), (5, bad), (5, ev(chat(content="", finish="stop"))), (0, DONE)]
    rec, _ = await play(server, "utf8bad", pieces)
    assert not rec.success and rec.error_class == "decode_error"
    assert rec.error_message.startswith("invalid UTF-8 in stream line 3: 'utf-8' codec can't decode byte 0xff")


# (4) --------------------------------------------------------------------------------------
@contextmanager
def recording_endpoint(tokens: int) -> Iterator[tuple[str, list[dict]]]:
    """An OpenAI-compatible endpoint in a thread that records every body and always stops
    after ``tokens`` tokens with finish_reason "stop" (an endpoint that ignores ignore_eos)."""
    bodies: list[dict] = []

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bodies.append(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chat_api = request.path.endswith("/chat/completions")
        for i in range(tokens):
            choice = {"index": 0, "finish_reason": "stop" if i == tokens - 1 else None}
            choice.update({"delta": {"content": "x "}} if chat_api else {"text": "x "})
            await resp.write(ev({"id": "r", "choices": [choice]}))
        await resp.write(ev(usage(4, tokens)) + DONE)
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", bodies
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def bench_run(url: str, out: Any, run_id: str, *extra: str) -> Any:
    return CliRunner().invoke(__import__("harness.app.cli", fromlist=["app"]).app, [
        "run", "--engine", "openai", "--base-url", url, "--model", "m", "--workload", "random", "--api", "chat",
        "--num-requests", "4", "--input-len", "40", "--output-len", "6", "--warmup", "0", "--no-calibration",
        "--no-equivalence", "--no-feature-probes", "--request-rate", "inf", "-o", str(out), "--run-id", run_id, *extra,
    ])


def test_openai_random_sends_ignore_eos_and_the_chat_length_field_and_reports_the_shortfall(tmp_path):
    with recording_endpoint(tokens=2) as (url, bodies):
        res = bench_run(url, tmp_path, "eos")
        assert res.exit_code == 0, res.output
        assert len(bodies) == 4
        assert all(b["ignore_eos"] is True and b["max_tokens"] == 6 and b["max_completion_tokens"] == 6 for b in bodies)
        records = [json.loads(x) for x in (tmp_path / "eos" / "requests.jsonl").read_text().splitlines()]
        assert [r["ignore_eos_sent"] for r in records] == [True] * 4
        m = json.loads((tmp_path / "eos" / "summary.json").read_text())["engines"]["openai"]["metrics"]
        assert m["output_shortfall"] == {"checked": 4, "requests": 4, "tokens_missing": 16}
        said = " ".join(res.output.split())
        assert ('openai: 4 of 4 replies stopped (finish_reason "stop") 4 tokens short of max_tokens on average '
                "although ignore_eos was sent") in said

        bodies.clear()
        res = bench_run(url, tmp_path, "noeos", "--no-ignore-eos")
        assert res.exit_code == 0, res.output
        assert len(bodies) == 4 and not any("ignore_eos" in b for b in bodies)
        records = [json.loads(x) for x in (tmp_path / "noeos" / "requests.jsonl").read_text().splitlines()]
        assert [r["ignore_eos_sent"] for r in records] == [False] * 4
        m = json.loads((tmp_path / "noeos" / "summary.json").read_text())["engines"]["openai"]["metrics"]
        assert m["output_shortfall"] == {"checked": 0, "requests": 0, "tokens_missing": 0}
        assert "tokens short" not in res.output


def test_completions_requests_carry_no_chat_length_field():
    url, body = build_payload(RequestSpec(request_id="p", max_tokens=5, prompt="x", ignore_eos=True),
                              EndpointTarget("http://h", "m", supports_ignore_eos=False))
    assert url == "http://h/v1/completions" and body["max_tokens"] == 5
    assert "max_completion_tokens" not in body and "ignore_eos" not in body


# (5) --------------------------------------------------------------------------------------
class SlowResolver(aiohttp.abc.AbstractResolver):
    """Resolves every name to 127.0.0.1 after ``delay_s``: connection set-up with a known cost."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict]:
        await asyncio.sleep(self.delay_s)
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


async def test_send_is_stamped_after_connection_set_up_which_is_recorded_apart(server):
    pieces = [(0, ev(chat(content="a"))), (30, ev(chat(content="b", finish="stop"))), (0, DONE)]
    await register(server, "conn", pieces)
    port = server.rsplit(":", 1)[1]
    target = EndpointTarget(f"http://slow.test:{port}", "script:conn")
    first, second = new_record("c1"), new_record("c2")
    async with new_session(30, resolver=SlowResolver(0.08)) as http:
        await stream_request(http, target, chat_request("c1"), first)
        w1 = await writes(server, "conn")
        await stream_request(http, target, chat_request("c2"), second)
    assert first.success and second.success
    # a fresh connection: its 80 ms of set-up (the resolver's delay) is recorded, then the send
    assert first.connection_reused is False and connect_ms(first) >= 80.0
    assert first.connect_start_ns < first.connect_end_ns <= first.send_ns
    # the server wrote its first piece as the request arrived: well inside the 80 ms set-up,
    # which the old stamp (taken before connecting) put into TTFT
    assert 0 <= w1[0] - first.send_ns < 80 * MS
    assert ttft_ms(first) == pytest.approx((first.first_token_ns - first.send_ns) / MS)
    assert ttft_ms(first) < 80.0 < (first.first_token_ns - first.connect_start_ns) / MS
    # the second request reused the pooled connection: no set-up
    assert second.connection_reused is True and connect_ms(second) == 0.0 and second.connect_start_ns is None
    m = compute_metrics([first, second])
    assert m.connections_opened == 1 and m.connect_ms.max == pytest.approx(connect_ms(first))


# (6) --------------------------------------------------------------------------------------
async def test_e2e_from_scheduled_includes_queueing_behind_the_concurrency_gate(server):
    pieces = [(0, ev(chat(content="a"))), (60, ev(chat(content="b", finish="stop"))), (0, DONE)]
    await register(server, "queue", pieces)
    sessions = [SingleRequestSession(chat_request(f"q{i}"), 0.0) for i in range(2)]
    workload = Workload(name="corpus", sessions=sessions, spec={}, max_concurrency=1)
    runner = Runner(EndpointTarget(server, "script:queue"), "null", "corpus", lambda r: None)
    records = sorted(await runner.measure(workload), key=lambda r: r.send_ns)
    assert all(r.success for r in records)
    first, second = records
    assert first.scheduled_ns == second.scheduled_ns  # both due at once; one slot
    queued_ms = (second.send_ns - second.scheduled_ns) / MS
    assert queued_ms >= e2el_ms(first) >= 60.0  # the second waited for the first to finish
    assert e2el_from_scheduled_ms(second) == pytest.approx(e2el_ms(second) + queued_ms)
    m = compute_metrics(records)
    assert m.e2el_from_scheduled_ms.max == pytest.approx(e2el_from_scheduled_ms(second))
    assert m.e2el_from_scheduled_ms.max > m.e2el_ms.max


# (7) --------------------------------------------------------------------------------------
async def test_time_to_first_answer_token_follows_the_reasoning(server):
    pieces = [(0, ev(chat(role="assistant"))), (10, ev(chat(reasoning_content="let me"))), (20, ev(chat(reasoning=" think"))),
              (30, ev(chat(content="Paris"))), (10, ev(chat(content=".", finish="stop"))), (0, DONE)]
    rec, w = await play(server, "reason", pieces)
    assert rec.success and len(rec.chunk_times_ns) == 4
    # the reasoning chunk (w[1]) and the first content chunk (w[3], 50 ms later): which write each stamp
    # follows, with room for the client's own scheduling on a loaded machine
    assert w[1] <= rec.first_token_ns <= w[1] + 20 * MS and w[3] <= rec.first_answer_ns <= w[3] + 20 * MS
    assert ttfat_ms(rec) - ttft_ms(rec) == pytest.approx((rec.first_answer_ns - rec.first_token_ns) / MS)
    assert ttfat_ms(rec) - ttft_ms(rec) >= 49.0  # the scripted 20 + 30 ms of reasoning
    plain, _ = await play(server, "plain", [(0, ev(chat(content="Hi"))), (10, ev(chat(content="!", finish="stop"))), (0, DONE)])
    assert plain.first_answer_ns == plain.first_token_ns and ttfat_ms(plain) == ttft_ms(plain)
    m = compute_metrics([rec, plain])
    assert m.ttfat_ms.max == pytest.approx(ttfat_ms(rec)) and m.ttft_ms.max < m.ttfat_ms.max


class RecordingSession(SingleRequestSession):
    """A one-turn session that keeps what the runner handed to ``on_complete``."""

    def on_complete(self, request, reply, success=None):  # type: ignore[override]
        self.got = (reply, success)
        return []


async def test_the_runner_hands_sessions_the_answer_apart_from_the_reasoning(server):
    pieces = [(0, ev(chat(reasoning_content="think: "))), (5, ev(chat(content="Paris", finish="stop"))), (0, DONE)]
    await register(server, "reply", pieces)
    session = RecordingSession(chat_request("r0"), 0.0)
    runner = Runner(EndpointTarget(server, "script:reply"), "null", "corpus", lambda r: None)
    await runner.measure(Workload(name="corpus", sessions=[session], spec={}))
    reply, success = session.got
    assert success is None and (reply.answer, reply.reasoning, reply.success) == ("Paris", "think: ", True)


# (8) --------------------------------------------------------------------------------------
async def test_peak_output_throughput_counts_tokens_not_chunks(server):
    # 10 chunks of 4 tokens each (usage: 40), 230 ms apart: 2.1 s of output, two ~1-s buckets
    pieces = [(0 if i == 0 else 230, ev(chat(content="abcd"))) for i in range(10)]
    pieces += [(0, ev(chat(finish="stop"))), (0, ev(usage(3, 40))), (0, DONE)]
    rec, _ = await play(server, "peak", pieces)
    assert rec.success and len(rec.chunk_times_ns) == 10 and rec.output_tokens == 40
    m = compute_metrics([rec])
    assert m.peak_output_throughput >= m.output_throughput
    # vLLM's convention (one per chunk in 1-s buckets) lands below the average with 4-token chunks
    chunks_per_s = max(sum(1 for t in rec.chunk_times_ns if k <= (t - rec.send_ns) / 1e9 < k + 1) for k in range(3))
    assert chunks_per_s < m.output_throughput <= m.peak_output_throughput


def test_peak_output_throughput_on_a_controlled_clock():
    s = 1_000_000_000
    # span 0 .. 2.5 s: 2 buckets of 1.25 s. Request a: 3 chunks in bucket 0 carrying 2, 2 and
    # 8 tokens (per-chunk counts; usage 12); request b: usage 6 spread evenly over 3 chunks,
    # two in bucket 0 and one in bucket 1.
    a = RequestRecord(request_id="a", engine="e", workload="w", scheduled_ns=0, send_ns=0, end_ns=s,
                      chunk_times_ns=[s // 10, s // 2, s], chunk_token_counts=[2, 2, 8], output_tokens_server=12,
                      success=True)
    b = RequestRecord(request_id="b", engine="e", workload="w", scheduled_ns=0, send_ns=0, end_ns=5 * s // 2,
                      chunk_times_ns=[s // 5, s, 2 * s], output_tokens_server=6, success=True)
    # bucket 0 (0-1.25 s): 12 + 4 tokens; bucket 1: 2 tokens
    assert peak_output_throughput([a, b], 0, 5 * s // 2) == pytest.approx(16 / 1.25)
    assert compute_metrics([a, b]).peak_output_throughput == pytest.approx(16 / 1.25)
    assert peak_output_throughput([a], 0, s // 2) == pytest.approx(12 / 0.5)  # under 1 s: one bucket, the span
    assert peak_output_throughput([a], 0, 0) is None


# (9) --------------------------------------------------------------------------------------
async def test_requests_in_flight_at_an_interrupt_are_stored_as_interrupted(server):
    pieces = [(0, ev(chat(content="a"))), (20_000, ev(chat(content="b", finish="stop"))), (0, DONE)]
    await register(server, "intr", pieces)
    sessions = [SingleRequestSession(chat_request(f"i{i}"), 0.0) for i in range(3)]
    workload = Workload(name="corpus", sessions=sessions, spec={}, max_concurrency=2)
    stored: list[RequestRecord] = []
    runner = Runner(EndpointTarget(server, "script:intr"), "null", "corpus", stored.append)
    task = asyncio.create_task(runner.measure(workload))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while len(await writes(server, "intr")) < 2:  # both slots' first tokens are on the wire
        assert loop.time() < deadline, "the scripted server never streamed"
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the two in flight are stored; the third, waiting for a slot, was never sent
    assert len(stored) == 2 and runner.records == stored
    for rec in stored:
        assert not rec.success and rec.error_class == "interrupted" and rec.send_ns is not None
        assert rec.end_ns >= rec.send_ns and rec.error_message.startswith("the run was interrupted while this request")
    m = compute_metrics(stored)
    assert m.failures_by_class == {"interrupted": 2} and m.requests_sent == 2
