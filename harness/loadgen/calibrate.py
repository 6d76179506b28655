"""Client calibration against the local null server (harness.loadgen.nullserver).

Measures what the client itself costs, so a report can say how much of a latency is ours:

- ``overhead_ms``: median TTFT of one-token requests sent one at a time (loopback, no
  inference): the client's per-request overhead plus the null server's.
- ``max_rate_rps``: completed one-token requests per second with ``concurrency`` in flight.
- ``itl_error_ms``: |measured ITL − scripted gap| over streams with ``gap_ms`` between tokens
  at ``stream_concurrency`` concurrent streams (median, p99, max): the timing error of the
  client's per-chunk timestamps under that load (includes the null server's sleep jitter, so
  it is an upper bound on the client's own error).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from results.schema import RequestRecord
from workloads.base import RequestSpec

from harness.loadgen.client import EndpointTarget, new_session, stream_request
from harness.metrics import itls_ms, ttft_ms
from harness.loadgen.nullserver import null_server


async def _fire(http: Any, target: EndpointTarget, n: int, max_tokens: int, concurrency: int, gap_ms: float = 0.0) -> list[RequestRecord]:
    gate = asyncio.Semaphore(concurrency)
    extra = {"null_gap_ms": gap_ms} if gap_ms else None  # the null server's own field

    async def one(i: int) -> RequestRecord:
        req = RequestSpec(request_id=f"cal-{i}", max_tokens=max_tokens, prompt="x")
        rec = RequestRecord(request_id=req.request_id, engine="null", workload="calibration", scheduled_ns=time.perf_counter_ns())
        async with gate:
            await stream_request(http, target, req, rec, extra_body=extra)
        return rec

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def _calibrate(url: str, sequential: int, burst: int, concurrency: int, streams: int, gap_ms: float, stream_tokens: int) -> dict[str, Any]:
    target = EndpointTarget(url, "null")
    async with new_session(60) as http:
        await _fire(http, target, 5, 1, 1)  # warm the connection pool
        seq = await _fire(http, target, sequential, 1, 1)
        t0 = time.perf_counter_ns()
        burst_recs = await _fire(http, target, burst, 1, concurrency)
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        stream_recs = await _fire(http, target, streams, stream_tokens, streams, gap_ms) if streams else []
    overhead = [v for r in seq if (v := ttft_ms(r)) is not None]
    errors = [abs(g - gap_ms) for r in stream_recs for g in itls_ms(r)]
    ok = sum(r.success for r in burst_recs)
    out: dict[str, Any] = {
        "overhead_ms_median": float(np.median(overhead)) if overhead else None,
        "overhead_ms_p99": float(np.percentile(overhead, 99)) if overhead else None,
        "max_rate_rps": ok / elapsed if elapsed > 0 else None,
        "burst_requests": burst,
        "burst_concurrency": concurrency,
    }
    if streams:
        out.update(
            {
                "stream_concurrency": streams,
                "stream_gap_ms": gap_ms,
                "itl_error_ms_median": float(np.median(errors)) if errors else None,
                "itl_error_ms_p99": float(np.percentile(errors, 99)) if errors else None,
                "itl_error_ms_max": float(max(errors)) if errors else None,
            }
        )
    return out


def calibrate(
    sequential: int = 30,
    burst: int = 300,
    concurrency: int = 32,
    streams: int = 32,
    gap_ms: float = 20.0,
    stream_tokens: int = 10,
    base_url: str | None = None,
) -> dict[str, Any]:
    """Run the calibration (starts a null server unless ``base_url`` points at one).

    Returns the dict described in the module docstring (ms, requests/s). Takes ~2-5 s with
    the defaults on a 2-core machine. Raises RuntimeError when the null server cannot start.
    """
    if base_url:
        return asyncio.run(_calibrate(base_url, sequential, burst, concurrency, streams, gap_ms, stream_tokens))
    with null_server() as url:
        return asyncio.run(_calibrate(url, sequential, burst, concurrency, streams, gap_ms, stream_tokens))
