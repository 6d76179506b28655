"""Several client processes for one engine (harness.loadgen.workers, ``bench run --client-workers``):
one schedule split over worker processes, records merged, sessions whole, a killed worker's
requests recorded as lost, no worker outliving its driver; the validity gate allows N x the
calibrated single-process rate."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest

from harness.loadgen.calibrate import CLIENT_RATE_FRACTION as CALIBRATE_FRACTION, workers_line, workers_needed
from harness.loadgen.client import EndpointTarget
from harness.loadgen.nullserver import null_server
from harness.loadgen.runner import Runner, RunnerOptions
from harness.loadgen.workers import WORKER_LOST, WorkerPool, client_measurer, split_cap, split_sessions
from harness.scoring.checks.validity import CLIENT_RATE_FRACTION
from results.schema import ClientWorkers, Manifest, RequestRecord
from workloads.base import FollowUp, RequestSpec, SingleRequestSession, Workload

pytestmark = pytest.mark.serial  # client worker processes timed against the wall clock: run alone (make test)

DRIVER = Path(__file__).parents[2] / "fake_servers" / "workers_driver.py"


@pytest.fixture(scope="module")
def url():
    with null_server() as u:
        yield u


def schedule(n: int, rate: float) -> list[SingleRequestSession]:
    return [SingleRequestSession(RequestSpec(f"r{i}", max_tokens=2, prompt="x"), i / rate) for i in range(n)]


def measure(url: str, sessions: list, workers: int) -> tuple[list[RequestRecord], list[RequestRecord], Any]:
    stored: list[RequestRecord] = []
    runner = Runner(EndpointTarget(url, "null"), "null", "t", stored.append, None, RunnerOptions())
    driver = WorkerPool(runner, workers) if workers > 1 else runner
    records = asyncio.run(driver.measure(Workload("t", sessions, spec={})))
    return records, stored, driver


def test_two_workers_send_the_one_schedule_on_time_and_merge_every_record(url):
    sessions = schedule(24, rate=40.0)  # 0.575 s of arrivals, 25 ms apart
    one, _, _ = measure(url, sessions, 1)
    two, stored, driver = measure(url, sessions, 2)
    assert len(one) == len(two) == len(stored) == 24
    assert all(r.success for r in two) and {r.request_id for r in two} == {f"r{i}" for i in range(24)}
    # dealt round-robin in order of start: 12 each, worker 0 the even requests
    assert sorted(r.request_id for r in two if r.worker == 0) == sorted(f"r{i}" for i in range(0, 24, 2))
    assert [w.records for w in driver.info] == [12, 12] and [w.sessions for w in driver.info] == [12, 12]
    # the one schedule: scheduled_ns = t0 + offset, the same t0 in both processes
    by_id = {r.request_id: r for r in two}
    t0 = by_id["r0"].scheduled_ns
    for i in range(24):
        assert by_id[f"r{i}"].scheduled_ns == t0 + int(i / 40.0 * 1e9)
        assert by_id[f"r{i}"].send_ns >= by_id[f"r{i}"].scheduled_ns
    # each worker's clock offset was measured (one host: estimated, recorded, not applied)
    for w in driver.info:
        assert w.host and w.pid and w.pid != os.getpid() and w.exitcode == 0 and w.lost == 0
        assert w.clock_offset_applied is False
        assert abs(w.clock_offset_ns) <= w.clock_offset_error_ns + 1_000_000
    assert all(r.worker is None for r in one)


@dataclass
class TwoTurns:
    """A session whose second turn is built from the first reply (so it must stay in its process)."""

    session_id: str
    start_offset_s: float
    planned_turns: ClassVar[int] = 2

    def first_request(self) -> RequestSpec:
        return RequestSpec(f"{self.session_id}-0", max_tokens=3, prompt="x", session_id=self.session_id, turn_id=0)

    def on_complete(self, request: RequestSpec, reply: Any, success: bool | None = None) -> list[FollowUp]:
        if request.turn_id:
            return []
        return [FollowUp(0.0, RequestSpec(f"{self.session_id}-1", max_tokens=2, prompt="x" + reply.answer,
                                          session_id=self.session_id, turn_id=1))]


def test_a_session_stays_whole_within_one_worker(url):
    sessions = [TwoTurns(f"s{i}", i * 0.01) for i in range(8)]
    records, _, _ = measure(url, sessions, 3)
    assert len(records) == 16 and all(r.success for r in records)
    workers_of = {sid: {r.worker for r in records if r.session_id == sid} for sid in (s.session_id for s in sessions)}
    assert all(len(w) == 1 for w in workers_of.values())  # both turns from the same worker
    assert sorted(len([s for s, w in workers_of.items() if w == {k}]) for k in range(3)) == [2, 3, 3]
    assert [[s.session_id for s in share] for share in split_sessions(sessions, 3)] == [
        ["s0", "s3", "s6"], ["s1", "s4", "s7"], ["s2", "s5"]]


def test_a_worker_killed_mid_run_has_its_unfinished_requests_recorded_and_the_run_finishes(url):
    sessions = schedule(40, rate=20.0)  # 2 s of arrivals
    stored: list[RequestRecord] = []
    runner = Runner(EndpointTarget(url, "null"), "null", "t", stored.append, None, RunnerOptions())
    driver = WorkerPool(runner, 2)

    async def kill_worker_1() -> None:
        while sum(r.worker == 1 for r in stored) < 3:
            await asyncio.sleep(0.02)
        os.kill(driver._workers[1].process.pid, signal.SIGKILL)

    async def both() -> list[RequestRecord]:
        killer = asyncio.create_task(kill_worker_1())
        records = await driver.measure(Workload("t", sessions, spec={}))
        await killer
        return records

    records = asyncio.run(both())
    assert len(records) == len(stored) == 40  # every request accounted for
    assert sum(r.success for r in records if r.worker == 0) == 20  # the other worker finished its share
    lost = [r for r in records if r.error_class == WORKER_LOST]
    assert 0 < len(lost) <= 17 and all(r.worker == 1 and not r.success for r in lost)
    assert "client worker 1" in lost[0].error_message and "killed by SIGKILL" in lost[0].error_message
    assert all(r.send_ns is None and r.scheduled_ns > 0 for r in lost)
    info = driver.info[1]
    assert info.exitcode == -signal.SIGKILL and info.lost == len(lost) and info.records == 20 - len(lost)


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.1)
    return False


def _driver(url: str) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen([sys.executable, str(DRIVER), url], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("PIDS"), line
    pids = [int(p) for p in line.split()[1:]]
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    return proc, pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupting_or_killing_the_driver_leaves_no_worker(url, sig):
    proc, pids = _driver(url)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert _gone(pids), f"workers {pids} outlived the driver ({sig.name})"
    if sig == signal.SIGINT:  # what finished before Ctrl-C was kept
        stored = int(out.split("STORED")[1].split()[0])
        assert 2 <= stored < 60


def test_a_cap_is_split_and_the_recorder_keeps_count_and_workers(url, tmp_path):
    from results.store import RunWriter

    assert split_cap(None, 3) == [None, None, None]
    assert split_cap(7, 3) == [3, 2, 2]
    with pytest.raises(ValueError, match="smaller than --client-workers 3"):
        split_cap(2, 3)
    writer = RunWriter(tmp_path / "run", "run", "t")  # the run's sink records the workers in its manifest
    saved: list[int] = []
    runner = Runner(EndpointTarget(url, "null"), "null", "t", lambda r: None, None, RunnerOptions())
    assert client_measurer(runner, 1, lambda n, info: saved.append(n)) is runner
    driver = client_measurer(runner, 2, lambda n, info: (saved.append(n), writer.add_client_workers(n, info)))
    asyncio.run(driver.measure(Workload("t", schedule(4, 100.0), spec={})))
    manifest = Manifest.model_validate_json((tmp_path / "run" / "manifest.json").read_text())  # written at once
    writer.close()
    assert saved == [2] and manifest.client_workers.count == 2
    assert [w.index for w in manifest.client_workers.workers] == [0, 1]
    back = Manifest.model_validate_json(manifest.model_dump_json())
    assert back.client_workers == manifest.client_workers
    assert Manifest().client_workers is None and RequestRecord(request_id="a", engine="e", workload="w",
                                                               scheduled_ns=0).worker is None  # old runs load


def test_the_calibration_says_how_many_workers_the_offered_rate_needs():
    assert CALIBRATE_FRACTION == CLIENT_RATE_FRACTION == 0.5
    assert workers_needed(2000, 1000) == 4  # ceil(2000 / 500)
    assert workers_needed(500, 1000) == 1 and workers_needed(501, 1000) == 2
    assert workers_line(2000, 1000, 1) == (
        "client: 2,000 req/s offered needs 4 client workers (ceil(rate / (50% x 1,000 req/s calibrated per "
        "worker))); running 1 client worker: the client may be the bottleneck: pass --client-workers 4")
    assert workers_line(2000, 1000, 4).endswith("running 4 client workers: enough")
    assert "2 client workers stay valid up to 1,000 req/s" in workers_line(math.inf, 1000, 2)
    assert workers_line(100, None, 1) is None and workers_line(None, 1000, 1) is None


def test_the_validity_gate_allows_n_times_the_calibrated_rate_with_n_workers(tmp_path):
    from tests.harness.scoring.checks.test_validity import CALIBRATION, CPU, engine, manifest
    from tests.helpers import write_run
    from harness.scoring import recommend

    client = {**CALIBRATION, "max_rate_rps": 7.0}  # one worker: valid up to 3.5 req/s
    engines = {"sglang": engine("sglang", 4.0, offered=4.0), "vllm": engine("vllm", 4.0, offered=4.0)}
    records = [r for recs, _ in engines.values() for r in recs]
    entries = {name: entry for name, (_, entry) in engines.items()}
    one = write_run(tmp_path, "one", entries, records, manifest=manifest(client))
    rec = recommend([one], hardware=CPU)
    assert rec.winner is None and "above 50% of its calibrated maximum 7.00 req/s" in rec.eliminated["vllm"]
    two = write_run(tmp_path, "two", entries, records, manifest={
        **manifest(client), "client_workers": ClientWorkers(count=2).model_dump()})
    rec = recommend([two], hardware=CPU)  # 2 x 7.0 x 50% = 7.0 req/s >= 4.0: valid
    assert rec.winner is not None and not rec.eliminated
    assert any("7.00 req/s per worker x 2 client workers" in n for n in rec.notes)
    slow = write_run(tmp_path, "slow", entries, records, manifest={
        **manifest({**CALIBRATION, "max_rate_rps": 3.0}), "client_workers": {"count": 2}})
    reason = recommend([slow], hardware=CPU).eliminated["vllm"]  # 4.0 > 2 x 3.0 x 50%
    assert "above 50% of its calibrated maximum 2 workers x 3.00 req/s" in reason


def test_bench_run_with_two_client_workers_stores_one_run_and_says_what_the_rate_needs(url, tmp_path):
    import json

    from typer.testing import CliRunner

    from harness.app.cli import app

    res = CliRunner().invoke(app, [
        "run", "--engine", "openai", "--base-url", url, "--model", "null", "--workload", "random",
        "--num-requests", "12", "--input-len", "8", "--output-len", "4", "--request-rate", "inf", "--warmup", "1",
        "--no-equivalence", "--no-feature-probes", "--client-workers", "2", "-o", str(tmp_path), "--run-id", "r"])
    assert res.exit_code == 0, res.output
    assert "client: rate inf sends every request at once; 2 client workers stay valid up to" in res.output
    lines = [json.loads(x) for x in (tmp_path / "r" / "requests.jsonl").read_text().splitlines()]
    measured = [x for x in lines if x["phase"] == "measured"]
    assert len(measured) == 12 and all(x["success"] for x in measured)
    assert sorted(x["worker"] for x in measured) == [0] * 6 + [1] * 6
    assert [x["worker"] for x in lines if x["phase"] == "warmup"] == [None]  # warm-up: the driver's own client
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["client_workers"]["count"] == 2
    assert [(w["index"], w["engine"], w["records"]) for w in manifest["client_workers"]["workers"]] == [
        (0, "openai", 6), (1, "openai", 6)]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["engines"]["openai"]["metrics"]["requests_completed"] == 12


def test_a_cap_below_the_worker_count_is_a_one_line_usage_error(tmp_path):
    from typer.testing import CliRunner

    from harness.app.cli import app

    res = CliRunner().invoke(app, ["run", "--engine", "openai", "--base-url", "http://127.0.0.1:9", "--workload",
                                   "random", "--max-concurrency", "1", "--client-workers", "2", "-o", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == ("error: --max-concurrency 1 is smaller than --client-workers 2: each worker needs at "
                                  "least one request in flight; use --client-workers 1 or fewer")


def test_the_measured_phase_runs_with_the_pre_existing_heap_frozen_and_rare_young_collections(url):
    import gc

    from harness.loadgen.runner import GC_GEN0_THRESHOLD

    seen: list[tuple[int, int]] = []

    @dataclass
    class Probe:
        session_id: str = "p"
        start_offset_s: float = 0.0

        def first_request(self) -> RequestSpec:
            seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
            return RequestSpec("p0", max_tokens=2, prompt="x")

        def on_complete(self, request: RequestSpec, reply: Any, success: bool | None = None) -> list[FollowUp]:
            return []

    before = gc.get_threshold()
    records, _, _ = measure(url, [Probe()], 1)
    assert records[0].success
    assert seen[0][0] == GC_GEN0_THRESHOLD == 20_000 and seen[0][1] > 10_000  # the heap was frozen
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # restored after the phase
