"""The streaming client against a real loopback server playing scripted SSE schedules.

The null server (harness.loadgen.nullserver, a separate process) writes exact byte pieces after known
delays and reports the ``perf_counter_ns`` of each write (CLOCK_MONOTONIC is shared across
processes). Every assertion compares what the client measured with what the server actually
did, within 4 ms (scripted gaps are >= 10 ms), and the metric values derived from the record exactly.
"""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest

from harness.loadgen.client import EndpointTarget, new_session, stream_request
from harness.metrics import compute_metrics, e2el_ms, itls_ms, parse_slos, tpot_ms, ttft_ms
from harness.loadgen.nullserver import null_server
from results.schema import RequestRecord
from workloads.base import RequestSpec

pytestmark = pytest.mark.serial  # scripted streams' chunk times read by the client: run alone (make test)

TOL_NS = 4_000_000  # 4 ms
TOL_MS = TOL_NS / 1e6  # the same, for the metrics in ms: a stamp within TOL_NS of its write passes, a wrong read (>= 10 ms off) fails
# A piece whose arrival time is compared with the server's write comes >= 10 ms after the
# response headers and after the piece before it, so the comparison measures chunk delivery, not
# aiohttp's header handling, and a stamp taken at the wrong read is off by >= 10 ms: more than
# twice TOL_NS. The bound is not tighter because it compares wall clocks of two processes on a
# loaded 2-core VM (1.03 ms delivery seen in CI with a 1 ms bound); what it checks is which read
# a chunk was stamped at, not how fast loopback is.


@pytest.fixture(scope="module")
def server():
    with null_server() as url:
        yield url


def ev(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat(content=None, role=None, finish=None, **delta_extra):
    delta = dict(delta_extra)
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def comp(text, finish=None):
    return {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def usage(p, c, cached=None):
    u = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "c", "choices": [], "usage": u}


DONE = b"data: [DONE]\n\n"


async def play_once(url: str, sid: str, pieces: list[tuple[float, bytes]], api: str, status: int):
    script = {"status": status, "pieces": [[d, base64.b64encode(b).decode()] for d, b in pieces]}
    async with aiohttp.ClientSession() as s:
        async with s.put(f"{url}/_script/{sid}", json=script) as r:
            assert r.status == 200
    req = RequestSpec(request_id=sid, max_tokens=8)
    if api == "chat":
        req.messages = [{"role": "user", "content": "hi"}]
    else:
        req.prompt = "hi"
    rec = RequestRecord(request_id=sid, engine="null", workload="scripted", scheduled_ns=0)
    async with new_session(30) as http:
        text = await stream_request(http, EndpointTarget(url, f"script:{sid}"), req, rec)
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/_writes/{sid}") as r:
            writes = await r.json()
    return rec, text, writes


def delivered_within_tolerance(rec: RequestRecord, writes: list[int]) -> bool:
    """Every token-bearing chunk was stamped within TOL_NS after the last server write before it."""
    def lag(t: int) -> int | None:
        before = [w for w in writes if w <= t]
        return t - max(before) if before else None

    return all(lag(t) is not None and lag(t) <= TOL_NS for t in rec.chunk_times_ns)


async def play(url: str, sid: str, pieces: list[tuple[float, bytes]], api: str = "chat", status: int = 200):
    """Register a script, stream it through the client, return (record, text, server write times).

    On a shared 2-core VM the client process is occasionally scheduled a few ms late (3 ms
    seen in CI), which says nothing about the parser; such an attempt is replayed, at most 3
    times. A parser that stamps the wrong read is off by a whole scripted delay (>= 10 ms) in
    every attempt, so the assertions that follow still catch it.
    """
    for _ in range(3):
        rec, text, writes = await play_once(url, sid, pieces, api, status)
        if delivered_within_tolerance(rec, writes):
            break
    return rec, text, writes


def close(a: int, b: int) -> bool:
    return abs(a - b) <= TOL_NS


async def test_role_chunk_keepalive_empty_content_and_trailing_usage(server):
    pieces = [
        (0, ev(chat(role="assistant"))),  # role-only: not a token
        (20, b": keep-alive\n\n"),
        (20, ev(chat(content=""))),  # empty content: not a token
        (20, ev(chat(content="Hel"))),  # first token: write #3
        (30, ev(chat(content="lo"))),  # write #4
        (30, ev(chat(content="!", finish="stop"))),  # write #5
        (40, ev(usage(11, 3, cached=4))),  # trailing usage: must not extend E2E
        (0, DONE),
    ]
    rec, text, w = await play(server, "basic", pieces)
    assert text == "Hello!" and rec.success and rec.finish_reason == "stop"
    assert len(rec.chunk_times_ns) == 3
    for got, want in zip(rec.chunk_times_ns, [w[3], w[4], w[5]]):
        assert close(got, want)
    assert rec.input_tokens_server == 11 and rec.output_tokens_server == 3 and rec.cached_tokens_server == 4
    assert ttft_ms(rec) == pytest.approx((w[3] - rec.send_ns) / 1e6, abs=TOL_MS)
    assert e2el_ms(rec) == pytest.approx((w[5] - rec.send_ns) / 1e6, abs=TOL_MS)
    assert e2el_ms(rec) < (w[6] - rec.send_ns) / 1e6  # usage chunk 40 ms later did not count
    assert itls_ms(rec) == pytest.approx([(w[4] - w[3]) / 1e6, (w[5] - w[4]) / 1e6], abs=TOL_MS)
    assert tpot_ms(rec) == pytest.approx((w[5] - w[3]) / 1e6 / 2, abs=TOL_MS)
    assert ttft_ms(rec) >= 59.0  # three scripted 20 ms delays before the first token


async def test_data_without_space_crlf_and_completions(server):
    pieces = [
        (10, b'data:' + json.dumps(comp("a")).encode() + b"\r\n\r\n"),
        (25, b"data: " + json.dumps(comp("b", finish="length")).encode() + b"\r\n\r\n"),
        (0, b"data: " + json.dumps(usage(2, 2)).encode() + b"\r\n\r\ndata: [DONE]\r\n\r\n"),
    ]
    rec, text, w = await play(server, "crlf", pieces, api="completions")
    assert text == "ab" and rec.success and rec.output_tokens_server == 2
    assert close(rec.chunk_times_ns[0], w[0]) and close(rec.chunk_times_ns[1], w[1])
    # the gap the server really left between the two writes (its 25 ms sleep plus its own scheduling)
    assert itls_ms(rec)[0] == pytest.approx((w[1] - w[0]) / 1e6, abs=TOL_NS / 1e6) and itls_ms(rec)[0] >= 24.0


async def test_event_split_across_reads_stamped_at_completion(server):
    raw = ev(chat(content="split"))
    pieces = [(0, raw[:9]), (40, raw[9:]), (0, ev(chat(content="", finish="stop"))), (0, DONE)]
    rec, text, w = await play(server, "split", pieces)
    assert text == "split" and rec.success
    assert close(rec.first_token_ns, w[1])  # the read that completed the event, 40 ms later
    assert rec.first_token_ns - w[0] >= 39_000_000


async def test_several_events_in_one_read_share_a_timestamp(server):
    pieces = [(0, ev(chat(content="a")) + ev(chat(content="b")) + ev(chat(content="c", finish="stop")) + DONE)]
    rec, text, w = await play(server, "many", pieces)
    assert text == "abc" and rec.success
    assert len(set(rec.chunk_times_ns)) == 1 and itls_ms(rec) == [0.0, 0.0]


async def test_multibyte_utf8_split_across_reads(server):
    raw = ev(chat(content="日本語")).replace(b"\\u65e5\\u672c\\u8a9e", "日本語".encode())
    cut = raw.index("本".encode()) + 2
    pieces = [(0, raw[:cut]), (15, raw[cut:]), (0, ev(chat(finish="stop"))), (0, DONE)]
    rec, text, w = await play(server, "utf8", pieces)
    assert text == "日本語" and rec.success and close(rec.first_token_ns, w[1])


async def test_single_line_over_one_mebibyte(server):
    big = "z" * (1 << 20 | 77)
    pieces = [(0, ev(chat(content=big))), (10, ev(chat(content="!", finish="stop"))), (0, DONE)]
    rec, text, w = await play(server, "big", pieces)
    assert rec.success and text == big + "!" and rec.output_text_len == len(big) + 1


async def test_missing_done_with_finish_reason_is_success(server):
    pieces = [(0, ev(comp("x"))), (10, ev(comp("", finish="stop")))]
    rec, _, _ = await play(server, "nodone", pieces, api="completions")
    assert rec.success and rec.finish_reason == "stop" and rec.output_tokens_server is None


async def test_stream_cut_without_finish_or_done_is_incomplete(server):
    rec, _, _ = await play(server, "cut", [(0, ev(comp("x"))), (5, ev(comp("y")))], api="completions")
    assert not rec.success and rec.error_class == "incomplete_stream" and len(rec.chunk_times_ns) == 2


async def test_in_stream_error_after_tokens_fails_the_request(server):
    pieces = [(0, ev(chat(content="a"))), (5, ev(chat(content="b"))),
              (5, ev({"error": {"message": "engine died", "code": 500}})), (0, DONE)]
    rec, text, _ = await play(server, "err", pieces)
    assert not rec.success and rec.error_class == "stream_error" and rec.error_message == "engine died"
    assert text == "ab"


async def test_reasoning_and_tool_call_deltas_are_tokens(server):
    tool = [{"index": 0, "id": "t", "type": "function", "function": {"name": "grep", "arguments": ""}}]
    pieces = [
        (10, ev(chat(reasoning_content="let me think"))),
        (10, ev(chat(reasoning="more"))),
        (10, ev(chat(tool_calls=tool))),
        (10, ev(chat(tool_calls=[{"index": 0, "function": {"arguments": '{"q":1}'}}], finish="tool_calls"))),
        (0, DONE),
    ]
    rec, text, w = await play(server, "reason", pieces)
    assert rec.success and rec.finish_reason == "tool_calls"
    assert text == 'let me thinkmoregrep{"q":1}' and len(rec.chunk_times_ns) == 4
    assert close(rec.first_token_ns, w[0]) and close(rec.last_token_ns, w[3])
    assert close(rec.first_answer_ns, w[2])  # the tool call is the first answer after the reasoning


async def test_http_error_status_is_classed(server):
    rec, _, _ = await play(server, "h500", [(0, b'{"error": "overloaded"}')], status=500)
    assert not rec.success and rec.error_class == "http_500" and "overloaded" in rec.error_message


async def test_failure_accounting_goodput_and_percentiles_over_scripted_requests(server):
    """Three scripted requests: fast, slow, failed. Goodput counts only the fast one."""
    fast = [(0, ev(comp("a"))), (10, ev(comp("b", finish="stop"))), (0, ev(usage(3, 2))), (0, DONE)]
    slow = [(120, ev(comp("a"))), (10, ev(comp("b", finish="stop"))), (0, ev(usage(3, 2))), (0, DONE)]
    bad = [(0, ev(comp("a"))), (0, ev({"error": "oom"}))]
    r1, _, _ = await play(server, "g-fast", fast, api="completions")
    r2, _, _ = await play(server, "g-slow", slow, api="completions")
    r3, _, _ = await play(server, "g-bad", bad, api="completions")
    m = compute_metrics([r1, r2, r3], parse_slos("ttft_p99=60"))
    assert m["requests_completed"] == 2 and m["requests_failed"] == 1
    assert m["failures_by_class"] == {"stream_error": 1}
    assert m["goodput"]["good_requests"] == 1
    assert m["goodput"]["slo_attainment"] == pytest.approx(1 / 3)
    t1, t2 = ttft_ms(r1), ttft_ms(r2)
    assert t2 - t1 >= 110
    assert m["ttft_ms"]["p50"] == pytest.approx((t1 + t2) / 2)
    assert m["ttft_ms"]["max"] == pytest.approx(t2)
    assert m["error_adjusted"]["ttft_ms"]["max"] is None  # a failure is +inf
    assert m["total_output_tokens"] == 4


async def test_reply_text_keeps_answer_and_reasoning_apart(server):
    from harness.loadgen.client import stream_texts

    pieces = [(0, ev(chat(reasoning_content="hmm, "))), (5, ev(chat(content="Paris"))), (5, ev(chat(content=".", finish="stop"))), (0, DONE)]
    script = {"status": 200, "pieces": [[d, base64.b64encode(b).decode()] for d, b in pieces]}
    async with aiohttp.ClientSession() as s:
        async with s.put(f"{server}/_script/parts", json=script) as r:
            assert r.status == 200
    rec = RequestRecord(request_id="parts", engine="null", workload="scripted", scheduled_ns=0)
    req = RequestSpec(request_id="parts", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    async with new_session(30) as http:
        out = await stream_texts(http, EndpointTarget(server, "script:parts"), req, rec)
    assert rec.success and (out.text, out.answer, out.reasoning) == ("hmm, Paris.", "Paris.", "hmm, ")
