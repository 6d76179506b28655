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
import math
import signal
import threading
import time
from typing import Any

import numpy as np

from results.schema import RequestRecord
from workloads.base import RequestSpec

from harness.loadgen.client import EndpointTarget, new_session, stream_request
from harness.metrics import itls_ms, ttft_ms
from harness.loadgen.nullserver import null_server


MAX_BURST = 100_000
"""Upper bound on the max-rate burst (requests): the default 300 measures the rate to a few per
cent; 100,000 is minutes of loopback traffic, far past any use (2,000,000 took 7 GB)."""
MAX_STREAMS = 1_000
"""Upper bound on the concurrent timing streams: each holds a connection (a file descriptor;
the usual soft limit is 1,024) and the ITL error is measured at far lower concurrency."""


async def _fire(http: Any, target: EndpointTarget, n: int, max_tokens: int, concurrency: int, gap_ms: float = 0.0,
                keep: bool = True) -> tuple[list[RequestRecord], int]:
    """Send ``n`` requests, at most ``concurrency`` in flight, from ``min(n, concurrency)``
    worker tasks that take the next request index in turn (never ``n`` tasks at once: a
    2,000,000-request burst used to create 2,000,000 tasks, take 7 GB and need minutes to
    cancel on Ctrl-C). Returns ``(records, successes)``; ``keep=False`` keeps no record."""
    extra = {"null_gap_ms": gap_ms} if gap_ms else None  # the null server's own field
    records: list[RequestRecord] = []
    counter = iter(range(n))
    ok = 0

    async def worker() -> None:
        nonlocal ok
        for i in counter:  # shared iterator: each index is taken by exactly one worker
            req = RequestSpec(request_id=f"cal-{i}", max_tokens=max_tokens, prompt="x")
            rec = RequestRecord(request_id=req.request_id, engine="null", workload="calibration",
                                scheduled_ns=time.perf_counter_ns())
            await stream_request(http, target, req, rec, extra_body=extra)
            ok += bool(rec.success)
            if keep:
                records.append(rec)

    await asyncio.gather(*(worker() for _ in range(max(1, min(n, concurrency)))))
    return records, ok


async def _calibrate(url: str, sequential: int, burst: int, concurrency: int, streams: int, gap_ms: float, stream_tokens: int) -> dict[str, Any]:
    target = EndpointTarget(url, "null")
    async with new_session(60) as http:
        await _fire(http, target, 5, 1, 1)  # warm the connection pool
        seq, _ = await _fire(http, target, sequential, 1, 1)
        t0 = time.perf_counter_ns()
        _, ok = await _fire(http, target, burst, 1, concurrency, keep=False)
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        stream_recs = (await _fire(http, target, streams, stream_tokens, streams, gap_ms))[0] if streams else []
    overhead = [v for r in seq if (v := ttft_ms(r)) is not None]
    errors = [abs(g - gap_ms) for r in stream_recs for g in itls_ms(r)]
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
    the defaults on a 2-core machine. Ctrl-C / SIGTERM (which ``bench`` turns into
    KeyboardInterrupt) stop it within about a second: at most ``concurrency`` (or ``streams``)
    requests are in flight to cancel, and the null server is stopped on the way out.
    Raises RuntimeError when the null server cannot start, ValueError for ``burst`` outside
    [1, :data:`MAX_BURST`] or ``streams`` outside [0, :data:`MAX_STREAMS`].
    """
    if not 1 <= burst <= MAX_BURST:
        raise ValueError(f"burst must be between 1 and {MAX_BURST:,} requests, got {burst:,}")
    if not 0 <= streams <= MAX_STREAMS:
        raise ValueError(f"streams must be between 0 and {MAX_STREAMS:,}, got {streams:,}")
    if base_url:
        return _run_interruptible(_calibrate(base_url, sequential, burst, concurrency, streams, gap_ms, stream_tokens))
    with null_server() as url:
        return _run_interruptible(_calibrate(url, sequential, burst, concurrency, streams, gap_ms, stream_tokens))


CLIENT_RATE_FRACTION = 0.5
"""The share of a client process's calibrated maximum rate it may be asked to send: the validity
gate's rule (``harness.scoring.checks.validity.CLIENT_RATE_FRACTION``, which must stay equal; the
calibration sits below scoring in the layering, so the value is repeated, and a test pins both)."""


def workers_needed(rate: float, max_rate_rps: float) -> int:
    """Client processes an offered ``rate`` (requests/s) needs so that each sends at most
    :data:`CLIENT_RATE_FRACTION` of the calibrated single-process ``max_rate_rps``:
    ``ceil(rate / (0.5 × max_rate_rps))``, at least 1. Raises ValueError for a rate that is not
    finite and positive or a maximum that is not positive."""
    if not (math.isfinite(rate) and rate > 0) or not max_rate_rps > 0:
        raise ValueError(f"need a finite positive rate and calibrated maximum, got {rate} and {max_rate_rps}")
    return max(1, math.ceil(rate / (CLIENT_RATE_FRACTION * max_rate_rps) - 1e-9))


def workers_line(rate: float | None, max_rate_rps: float | None, workers: int, unit: str = "req/s") -> str | None:
    """The one line printed before measuring: how many client processes the offered ``rate``
    needs against the calibrated single-process ``max_rate_rps`` (requests/s), and whether the
    ``workers`` asked for (``--client-workers``) are enough. None when there is nothing to say
    (no rate or calibration). At an infinite rate the line says what bounds the throughput."""
    if not max_rate_rps or rate is None:
        return None
    limit = workers * CLIENT_RATE_FRACTION * max_rate_rps
    have = f"{workers} client worker{'s' if workers > 1 else ''}"
    if not math.isfinite(rate):
        return (f"client: rate inf sends every request at once; {have} stay valid up to {limit:,.0f} req/s "
                f"({CLIENT_RATE_FRACTION:.0%} of the calibrated {max_rate_rps:,.0f} req/s per worker): "
                "a measured throughput above that is the client's limit, not the engine's")
    need = workers_needed(rate, max_rate_rps)
    verdict = ("enough" if need <= workers else
               f"the client may be the bottleneck: pass --client-workers {need}")
    return (f"client: {rate:,.4g} {unit} offered needs {need} client worker{'s' if need > 1 else ''} "
            f"(ceil(rate / ({CLIENT_RATE_FRACTION:.0%} x {max_rate_rps:,.0f} req/s calibrated per worker))); "
            f"running {have}: {verdict}")


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _run_interruptible(coro: Any) -> Any:
    """``asyncio.run(coro)``, with SIGTERM and SIGHUP handled the way asyncio handles Ctrl-C:
    the signal cancels the main task (its requests are cancelled, the loop closes cleanly),
    then the caller's own handler for that signal runs once the loop is gone (``bench``'s
    raises its SIGTERM interrupt; with none installed, the default handler ends the process).
    A handler that raised inside the loop instead left a task's exception unretrieved and a
    traceback on stderr. Outside the main thread, plain ``asyncio.run``."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)
    previous = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    received: list[int] = []

    async def main() -> Any:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in _STOP_SIGNALS:
            loop.add_signal_handler(signum, lambda s=signum: (received.append(s), task.cancel() if task else None))
        return await coro

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if not received:
            raise
    finally:
        for signum, handler in previous.items():  # asyncio resets removed handlers to SIG_DFL
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    signal.raise_signal(received[0])  # the caller's handler, now that the loop is closed
    raise KeyboardInterrupt  # pragma: no cover - only when that handler returned
