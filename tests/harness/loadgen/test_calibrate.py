"""Bounded resources (issue 16): the calibration burst runs from a bounded pool of tasks and
stops within seconds on SIGTERM / Ctrl-C; its sizes and the workload's have upper bounds."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.loadgen import calibrate as cal
from harness.loadgen.client import EndpointTarget

pytestmark = pytest.mark.serial  # the client's timing error and maximum rate measured: run alone (make test)

ROOT = Path(__file__).resolve().parents[3]


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # gone meanwhile
        return ""


def test_a_burst_keeps_at_most_concurrency_requests_as_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000,000 requests used to be 2,000,000 tasks (7 GB, minutes to cancel): now a pool of
    ``concurrency`` workers takes the next request in turn, each request sent exactly once."""
    sent: list[str] = []
    peak = 0

    async def fake_stream(http, target, req, rec, extra_body=None):  # noqa: ANN001 - the client's signature
        nonlocal peak
        peak = max(peak, len(asyncio.all_tasks()))
        sent.append(req.request_id)
        await asyncio.sleep(0)
        rec.success = True

    monkeypatch.setattr(cal, "stream_request", fake_stream)
    records, ok = asyncio.run(cal._fire(None, EndpointTarget("http://x", "null"), 5000, 1, 8, keep=False))
    assert ok == 5000 and records == []
    assert sorted(sent) == sorted(f"cal-{i}" for i in range(5000))  # each index once
    assert peak == 8 + 1  # the 8 workers and the main task, never one per request
    records, ok = asyncio.run(cal._fire(None, EndpointTarget("http://x", "null"), 3, 1, 32))
    assert ok == 3 and len(records) == 3  # fewer requests than slots: 3 workers


@pytest.mark.parametrize("kwargs,message", [
    ({"burst": 2_000_000}, "burst must be between 1 and 100,000 requests, got 2,000,000"),
    ({"burst": 0}, "burst must be between 1 and 100,000 requests, got 0"),
    ({"streams": 5000}, "streams must be between 0 and 1,000, got 5,000"),
])
def test_calibration_sizes_are_bounded(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cal.calibrate(**kwargs)


@pytest.mark.parametrize("signum,code,said", [(signal.SIGTERM, 143, "interrupted by SIGTERM"),
                                               (signal.SIGINT, 130, "interrupted by the user (Ctrl-C)")])
def test_a_signal_stops_a_long_calibration_within_seconds(signum: int, code: int, said: str) -> None:
    """``bench calibrate --burst 100000`` (minutes of loopback requests) stops cleanly on SIGTERM
    or Ctrl-C: the exit status names the signal, one line, no traceback, the null server gone.
    (A 2,000,000 burst once ignored both for 9 minutes.)"""
    proc = subprocess.Popen([sys.executable, "-m", "harness.app.cli", "calibrate", "--burst", "100000"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        servers: list[psutil.Process] = []
        while not servers and proc.poll() is None and time.monotonic() < deadline:  # the null server is up
            servers = [c for c in parent.children(recursive=True) if "nullserver" in _cmdline(c)]
            time.sleep(0.1)
        assert servers, f"the null server never started: {proc.poll()=} {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(2.0)  # warm-up and the 30 sequential requests are done: inside the burst
        assert proc.poll() is None
        proc.send_signal(signum)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=10)  # a deadline, not a measurement
        stopped_after = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, (out, err)
    assert err.strip() == said, err
    assert stopped_after < 10
    gone = psutil.wait_procs(servers, timeout=10)[1] == []
    assert gone, "the null server outlived the calibration"
