"""A pooled keep-alive connection the server has already closed is not the engine's failure: the
client sends the request again and stamps the new attempt (harness/loadgen/client.py ``_stale``).
The server here answers one request per connection and then hangs up on the next one without a
byte of response, the way a server's idle timeout or per-connection request limit races a client
pool (llama-server failed an agentic turn so, and one failed request of nine excluded it)."""

from __future__ import annotations

import asyncio
import json

from harness.loadgen.client import EndpointTarget, new_session, stream_request
from results.schema import RequestRecord
from workloads.base import RequestSpec

BODY = (b'data: ' + json.dumps({"id": "c", "object": "text_completion",
                                "choices": [{"index": 0, "text": "hi", "finish_reason": "length"}]}).encode()
        + b"\n\ndata: [DONE]\n\n")


async def _one_request_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                      served: list[int]) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    await reader.readexactly(length)
    served.append(1)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
    await writer.drain()
    try:  # the next request on this connection: hang up without answering (keep-alive advertised all along)
        await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


async def _send(session, url: str, i: int) -> RequestRecord:
    rec = RequestRecord(request_id=str(i), engine="x", workload="w", scheduled_ns=0)
    await stream_request(session, EndpointTarget(url, "m"), RequestSpec(request_id=str(i), prompt="p", max_tokens=1), rec)
    return rec


async def test_a_request_on_a_connection_the_server_closed_is_sent_again() -> None:
    served: list[int] = []
    server = await asyncio.start_server(lambda r, w: _one_request_per_connection(r, w, served), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        async with new_session() as session:
            first = await _send(session, url, 0)
            second = await _send(session, url, 1)  # goes out on the pooled connection the server will drop
    assert first.success and first.stale_retries == 0 and first.connection_reused is False
    assert second.success, (second.error_class, second.error_message)
    assert second.stale_retries == 1 and second.connection_reused is False  # the new attempt's fresh connection
    assert second.connect_start_ns is not None and second.send_ns is not None and second.send_ns >= second.connect_end_ns
    assert len(served) == 2  # the server took each request once


async def test_a_fresh_connection_that_fails_is_a_failure_not_a_retry() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        async with new_session() as session:
            rec = await _send(session, url, 0)
    assert not rec.success and rec.error_class == "connection" and rec.stale_retries == 0
    assert "ServerDisconnected" in rec.error_message
