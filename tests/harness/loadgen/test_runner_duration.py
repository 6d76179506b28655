"""Duration-based runs, ramps and warm-up/cool-down windows (issue 17), on a controlled clock.

The runner's schedule tests run on a virtual-time event loop (:class:`VirtualLoop`): sleeps and
timeouts advance a fake clock instantly, the runner reads the same clock, and the stream is a
scripted coroutine with a known service time, so every count and phase below is exact. The
drain bound is also checked against the scripted null server (real sockets, a stream that
never ends), and a short real ``bench run --engine openai --duration 3s`` end to end.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import selectors
import types
import urllib.request

import pytest
from typer.testing import CliRunner

import harness.loadgen.runner as runner_mod
from harness.app.cli import app
from harness.loadgen.client import EndpointTarget
from harness.loadgen.nullserver import null_server
from harness.loadgen.runner import START_LEAD_NS, Runner, RunnerOptions
from harness.metrics import compute_metrics
from harness.metrics.failures import failure_rate
from results.schema import INCOMPLETE, WINDOW_PHASES
from workloads.arrivals import count_within, ramp_count_within, ramp_offsets
from workloads.errors import WorkloadError
from workloads.registry import build_workload, resolve_spec
from workloads.tokens import TokenKit

pytestmark = pytest.mark.serial  # scripted servers' schedules timed by the client: run alone (make test)


@pytest.fixture(scope="module")
def kit():
    from transformers import AutoTokenizer

    from harness.app.core.model import resolve_model

    return TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))


# --- a virtual-time event loop ---------------------------------------------------------------------
class _JumpSelector(selectors.DefaultSelector):
    """A selector that, with nothing ready, jumps the loop's virtual clock to the next timer
    instead of waiting for it (no real I/O happens in these tests but the loop's self-pipe)."""

    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None):  # type: ignore[override]
        ready = super().select(0)
        if not ready and timeout:
            self.loop.now += timeout
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    """``loop.time()`` is a virtual clock in seconds that only moves when every task waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(selector=_JumpSelector(self))

    def time(self) -> float:
        return self.now

    def ns(self) -> int:
        return int(round(self.now * 1e9))


def _scripted_stream(loop: VirtualLoop, service_s, hang=lambda req: False):
    """A stand-in for ``client.stream_texts``: sent at once, one token chunk, done after
    ``service_s(req)`` virtual seconds; a request with ``hang(req)`` never finishes (cancelled, it
    is marked interrupted like the real client does)."""

    async def stream(http, target, req, record):
        record.send_ns = loop.ns()
        try:
            if hang(req):
                record.chunk_times_ns.append(loop.ns())
                await asyncio.Event().wait()
            await asyncio.sleep(service_s(req))
        except asyncio.CancelledError:
            record.end_ns = loop.ns()
            record.error_class = "interrupted"
            raise
        t = loop.ns()
        record.chunk_times_ns.append(t)
        record.first_token_ns = record.last_token_ns = record.end_ns = t
        record.output_tokens_server, record.finish_reason, record.success = 1, "length", True
        return runner_mod.StreamText("x", "x", "")

    return stream


def _replay(monkeypatch, workload, service_s=lambda req: 0.1, hang=lambda req: False, **options):
    """Run ``workload`` through a real :class:`Runner` on the virtual clock; returns (runner, start ns)."""
    loop = VirtualLoop()
    monkeypatch.setattr(runner_mod, "time", types.SimpleNamespace(perf_counter_ns=loop.ns))
    monkeypatch.setattr(runner_mod, "stream_texts", _scripted_stream(loop, service_s, hang))
    runner = Runner(EndpointTarget("http://unused", "m"), "e", workload.name, lambda r: None, None,
                    RunnerOptions(**options))
    start = loop.ns() + START_LEAD_NS
    try:
        loop.run_until_complete(runner.measure(workload))
    finally:
        loop.close()
    return runner, start


# --- the schedule ------------------------------------------------------------------------------------
def test_duration_at_a_constant_rate_sends_exactly_the_schedules_count(kit, monkeypatch):
    w = build_workload("random", kit, duration_s="10s", request_rate=4.0, burstiness=math.inf,
                       input_len=4, output_len=1, with_stats=False)
    assert len(w.sessions) == 40 == count_within(10, 4)  # 0.25 s apart: the 40th is 9.75 s after the first
    offsets = [s.start_offset_s for s in w.sessions]
    assert offsets == [pytest.approx(k / 4) for k in range(1, 41)]
    assert w.timing.duration_s == 10 and w.timing.drain_timeout_s == 30  # the documented default drain
    assert w.spec["duration_s"] == 10.0 and w.spec["num_requests"] == 40 and w.spec["drain_timeout_s"] == 30.0
    runner, start = _replay(monkeypatch, w)
    sends = sorted(r.send_ns for r in runner.records)
    assert len(sends) == 40 and all(r.success and r.phase == "measured" for r in runner.records)
    assert sends == [start + k * 250_000_000 for k in range(40)]  # on the schedule, all before start + 10 s
    m = compute_metrics(runner.records, timing=w.timing)
    assert m.requests_sent == 40 and m.requests_incomplete == 0 and m.run_window.duration_s == 10


def test_a_drawn_schedule_is_sized_and_rescaled_to_the_duration(kit):
    w = build_workload("random", kit, duration_s=10, request_rate=4.0, seed=5, input_len=4,
                       output_len=1, with_stats=False)
    offsets = [s.start_offset_s for s in w.sessions]
    assert len(offsets) == 40
    assert offsets[-1] - offsets[0] == pytest.approx(39 / 4)  # offers exactly 4 req/s, inside the 10 s
    assert w.offered_rate == 4.0 == w.requested_rate


def test_a_count_given_with_the_duration_caps_it_whichever_ends_first():
    assert resolve_spec("random", duration_s=10, request_rate=4.0, num_requests=12).num_requests == 12
    assert resolve_spec("random", duration_s=10, request_rate=4.0, num_requests=500).num_requests == 40
    assert resolve_spec("agentic", duration_s="1m").num_sessions == 30  # 0.5 sessions/s for 60 s


def test_a_count_based_runs_spec_is_unchanged():
    spec = resolve_spec("random", num_requests=8).manifest()
    assert not {"duration_s", "drain_timeout_s", "warmup_window_s", "cooldown_window_s",
                "ramp_up_strategy"} & set(spec)


# --- ramps -------------------------------------------------------------------------------------------
def _linear_ramp_by_hand(duration_s: float, start: float, end: float) -> list[float]:
    """vLLM's definition written out: request i of n waits 1 / (start + (end - start) · i / (n - 1))
    (constant spacing); n is the most requests whose last arrival is < duration after the first."""
    def offsets(n: int) -> list[float]:
        out, t = [], 0.0
        for i in range(n):
            t += 1.0 / (start + (end - start) * i / max(n - 1, 1))
            out.append(t)
        return out

    n = 1
    while offsets(n + 1)[-1] - offsets(n + 1)[0] < duration_s:
        n += 1
    return offsets(n)


def test_a_linear_ramp_from_1_to_5_rps_over_10_s_gives_the_formulas_arrival_times(kit):
    w = build_workload("random", kit, duration_s=10, ramp_up_strategy="linear", ramp_up_start_rps=1,
                       ramp_up_end_rps=5, burstiness=math.inf, input_len=4, output_len=1, with_stats=False)
    got = [s.start_offset_s for s in w.sessions]
    expected = _linear_ramp_by_hand(10, 1, 5)
    assert len(got) == len(expected) == 26
    assert got == pytest.approx(expected, rel=1e-12)
    # the first gap is at the start rate, the last at the end rate: 1/1 s, then 1/(1 + 4/25) s ...
    assert got[0] == 1.0 and got[1] - got[0] == pytest.approx(1 / (1 + 4 / 25))
    assert got[-1] - got[-2] == pytest.approx(1 / 5)
    assert got[-1] - got[0] < 10 <= _linear_ramp_by_hand(10.5, 1, 5)[-1] - 1.0
    assert w.requested_rate is None and w.offered_rate == pytest.approx(25 / (got[-1] - got[0]))
    assert w.spec["ramp_up_strategy"] == "linear" and w.spec["ramp_up_end_rps"] == 5


def test_ramps_are_deterministic_with_the_seed_and_exponential_follows_vllm():
    kw = dict(strategy="exponential", start_rps=2.0, end_rps=8.0, burstiness=1.0, process="gamma")
    a, b, c = ramp_offsets(30, seed=1, **kw), ramp_offsets(30, seed=1, **kw), ramp_offsets(30, seed=2, **kw)
    assert a == b and a != c
    const = ramp_offsets(3, strategy="exponential", start_rps=2.0, end_rps=8.0, seed=0, process="constant")
    assert const == pytest.approx([1 / 2, 1 / 2 + 1 / 4, 1 / 2 + 1 / 4 + 1 / 8])  # 2 · 4^(i/2): 2, 4, 8 rps
    n = ramp_count_within(10, seed=1, limit=10_000, **kw)
    fits, longer = ramp_offsets(n, seed=1, **kw), ramp_offsets(n + 1, seed=1, **kw)
    assert fits[-1] - fits[0] < 10 <= longer[-1] - longer[0]


def test_a_ramp_without_a_duration_ramps_over_the_requests_like_vllm(kit):
    w = build_workload("random", kit, num_requests=5, ramp_up_strategy="linear", ramp_up_start_rps=1,
                       ramp_up_end_rps=3, burstiness=math.inf, input_len=4, output_len=1, with_stats=False)
    got = [s.start_offset_s for s in w.sessions]
    rates = [1, 1.5, 2, 2.5, 3]  # progress i / 4
    assert got == pytest.approx([sum(1 / r for r in rates[: i + 1]) for i in range(5)])
    assert w.timing is None


# --- the drain bound and incomplete requests ----------------------------------------------------------
def test_streams_still_open_at_the_drain_bound_are_incomplete_not_failed(kit, monkeypatch):
    w = build_workload("random", kit, duration_s=2, drain_timeout_s=0.5, request_rate=4.0,
                       burstiness=math.inf, input_len=4, output_len=1, with_stats=False)
    hung = {s.request.request_id for s in w.sessions[1::3]}  # requests 1, 4, 7 never finish
    runner, start = _replay(monkeypatch, w, hang=lambda req: req.request_id in hung)
    assert len(runner.records) == 8
    cut = [r for r in runner.records if r.error_class == INCOMPLETE]
    assert {r.request_id for r in cut} == hung and not any(r.success for r in cut)
    assert all(r.end_ns == start + 2_500_000_000 for r in cut)  # cancelled at the end + the drain bound
    assert "drain bound" in cut[0].error_message
    m = compute_metrics(runner.records, timing=w.timing)
    assert (m.requests_sent, m.requests_completed, m.requests_failed, m.requests_incomplete) == (8, 5, 0, 3)
    assert m.failures_by_class == {} and failure_rate([m]) == 0.0
    assert len(m.samples_ms.ttft) == len(m.samples_ms.e2el) == 5  # only the 5 finished requests
    assert m.ttft_ms.max == pytest.approx(100.0)  # each finished one took 0.1 s; the cut ones are in no latency
    assert m.error_adjusted.ttft_ms.max == pytest.approx(100.0)  # nor counted as +inf failures
    # the duration ends at the last completion (request 6, sent at 1.5 s), not at the cut at 2.5 s
    assert m.duration_s == pytest.approx(1.6)


def test_the_drain_waits_for_requests_that_finish_within_its_bound(kit, monkeypatch):
    w = build_workload("random", kit, duration_s=1, drain_timeout_s=3, request_rate=2.0,
                       burstiness=math.inf, input_len=4, output_len=1, with_stats=False)
    runner, start = _replay(monkeypatch, w, service_s=lambda req: 2.5)  # the last ends 2 s after the run
    assert [r.success for r in runner.records] == [True, True]
    assert max(r.end_ns for r in runner.records) == start + 3_000_000_000


def test_a_closed_loop_keeps_sending_from_its_pool_until_the_time_is_up(kit, monkeypatch):
    w = build_workload("random", kit, duration_s=1, drain_timeout_s=5, num_requests=100,
                       max_concurrency=2, input_len=4, output_len=1, with_stats=False)
    runner, start = _replay(monkeypatch, w, service_s=lambda req: 0.3)
    # 2 streams of 0.3 s requests sent at 0, 0.3, 0.6, 0.9 s: the 5th of each stream is due at 1.2 s
    assert len(runner.records) == 8 and all(r.success for r in runner.records)
    assert max(r.send_ns for r in runner.records) < start + 1_000_000_000


def test_agentic_turns_due_after_the_end_are_not_sent(monkeypatch, kit):
    w = build_workload("agentic", kit, duration_s=4, request_rate=1.0, burstiness=math.inf, with_stats=False)
    assert len(w.sessions) == 4
    runner, start = _replay(monkeypatch, w, service_s=lambda req: 0.5)
    end = start + 4_000_000_000
    assert all(r.send_ns < end for r in runner.records)
    assert 4 <= len(runner.records) < sum(w.planned_turns().values())
    m = compute_metrics(runner.records, timing=w.timing, planned_turns=w.planned_turns())
    assert m.sessions.aborted_turns == 0  # cut by the clock, not by a failure


def test_a_scripted_server_that_never_finishes_some_streams(kit):
    """Real sockets: the null server plays a script per request in arrival order; every second
    request's stream never ends, and the drain bound cuts it."""
    token = b'data: {"choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'
    done = (b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
            b'"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\ndata: [DONE]\n\n')
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    finish = {"pieces": [[0, b64(token)], [50, b64(done)]]}
    hang = {"pieces": [[0, b64(token)], [600_000, b64(done)]]}
    w = build_workload("random", kit, duration_s=2, drain_timeout_s=0.5, request_rate=2.0, burstiness=math.inf,
                       input_len=8, output_len=1, with_stats=False)
    with null_server() as url:
        body = json.dumps({"sequence": [finish, hang]}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{url}/_script/d", data=body, method="PUT"), timeout=10).read()
        runner = Runner(EndpointTarget(url, "script:d"), "null", w.name, lambda r: None, None, RunnerOptions())
        asyncio.run(runner.measure(w))
    by_id = {r.request_id: r for r in runner.records}
    ordered = [by_id[s.request.request_id] for s in w.sessions]
    assert [r.success for r in ordered] == [True, False, True, False]
    assert [r.error_class for r in ordered] == [None, INCOMPLETE, None, INCOMPLETE]
    m = compute_metrics(runner.records, timing=w.timing)
    assert (m.requests_completed, m.requests_failed, m.requests_incomplete) == (2, 0, 2)
    assert len(m.samples_ms.ttft) == 2 and len(m.samples_ms.e2el) == 2


# --- warm-up and cool-down windows --------------------------------------------------------------------
def test_windows_exclude_exactly_the_requests_sent_inside_them(kit, monkeypatch):
    w = build_workload("random", kit, duration_s=10, warmup_window_s="2s", cooldown_window_s=1.5,
                       request_rate=4.0, burstiness=math.inf, input_len=4, output_len=1, with_stats=False)
    runner, start = _replay(monkeypatch, w)
    phase = {r.send_ns - start: r.phase for r in runner.records}
    # sends every 0.25 s from 0 to 9.75 s: [0, 2) is the warm-up window, [8.5, 10) the cool-down
    assert sorted(k for k, p in phase.items() if p == WINDOW_PHASES[0]) == [k * 250_000_000 for k in range(8)]
    assert sorted(k for k, p in phase.items() if p == WINDOW_PHASES[1]) == [k * 250_000_000 for k in range(34, 40)]
    assert sum(p == "measured" for p in phase.values()) == 26
    m = compute_metrics(runner.records, timing=w.timing)
    assert m.requests_sent == m.requests_completed == 26
    rw = m.run_window
    assert (rw.warmup_requests, rw.cooldown_requests, rw.requests, rw.excluded) == (8, 6, 40, 14)
    assert (rw.warmup_s, rw.cooldown_s) == (2.0, 1.5)
    assert len(m.samples_ms.ttft) == 26


# --- bad values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, fragment", [
    ({"duration_s": "0"}, "--duration must be > 0"),
    ({"duration_s": "abc"}, "--duration must be a time such as 60, 60s, 5m or 1h, got 'abc'"),
    ({"duration_s": "-5s"}, "--duration must be a time such as"),
    ({"duration_s": "10", "request_rate": 1, "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": -1}, "--ramp-up-end-rps must be >= 0.001, got -1"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 5, "ramp_up_end_rps": 1}, "is above --ramp-up-end-rps"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1}, "add --ramp-up-end-rps"),
    ({"ramp_up_strategy": "sine", "ramp_up_start_rps": 1, "ramp_up_end_rps": 2}, "--ramp-up-strategy must be one of"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 2, "request_rate": 3},
     "drop --request-rate"),
    ({"duration_s": 10, "request_rate": 1, "warmup_window_s": "6s", "cooldown_window_s": "4s"},
     "leave nothing of --duration 10 s to measure"),
    ({"duration_s": 10, "request_rate": 1, "warmup_window_s": "1m"}, "leave nothing of --duration 10 s"),
    ({"warmup_window_s": 5}, "--warmup-window applies to a duration-based run: add --duration"),
    ({"drain_timeout_s": 5}, "--drain-timeout applies to a duration-based run"),
    ({"duration_s": 10}, "give the pool's size with -n N"),
    ({"duration_s": "2h", "request_rate": 100}, "at most 100,000 are built in memory"),
    ({"duration_s": "8d"}, "--duration must be a time such as"),
    ({"duration_s": 10**9, "request_rate": 1}, "--duration must be <= 604,800"),
])
def test_bad_duration_ramp_and_window_values_are_one_line_errors(kwargs, fragment):
    with pytest.raises(WorkloadError) as err:
        resolve_spec("random", **kwargs)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_time_values_accept_seconds_minutes_and_hours():
    for text, seconds in (("60", 60), ("60s", 60), ("5m", 300), ("1h", 3600), ("1.5M", 90), (45, 45)):
        assert resolve_spec("random", duration_s=text, request_rate=0.1).duration_s == seconds


# --- the CLI -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--duration", "abc"], "--duration must be a time such as 60, 60s, 5m or 1h, got 'abc'"),
    (["--duration", "0"], "--duration must be > 0"),
    (["--duration", "10s", "--warmup-window", "8s", "--cooldown-window", "2s", "-r", "1"], "leave nothing"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "-2"],
     "--ramp-up-end-rps must be >= 0.001, got -2"),
])
def test_bench_run_refuses_bad_duration_values_in_one_line(args, needle, tmp_path):
    res = CliRunner().invoke(app, ["run", "--engine", "openai", "--base-url", "http://127.0.0.1:9", "--model", "m",
                                   "--workload", "random", "-o", str(tmp_path), *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert len([line for line in res.output.splitlines() if line.startswith("error:")]) == 1


def test_bench_run_duration_end_to_end(tmp_path):
    with null_server() as url:
        res = CliRunner().invoke(app, [
            "run", "--engine", "openai", "--base-url", url, "--model", "null", "--workload", "random",
            "--input-len", "8", "--output-len", "2", "--duration", "3s", "--request-rate", "4", "--burstiness", "inf",
            "--warmup-window", "1s", "--cooldown-window", "0.5s", "--drain-timeout", "5s", "--warmup", "0",
            "--no-calibration", "--no-equivalence", "--no-feature-probes", "-o", str(tmp_path), "--run-id", "d1"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "d1"
    m = json.loads((run / "summary.json").read_text())["engines"]["openai"]["metrics"]
    # 12 sends 0.25 s apart: 4 in the first second, 2 in the last half second, 6 measured
    assert m["run_window"]["requests"] == 12
    assert (m["run_window"]["warmup_requests"], m["run_window"]["cooldown_requests"]) == (4, 2)
    assert m["requests_sent"] == 6 and m["requests_incomplete"] == 0
    spec = json.loads((run / "manifest.json").read_text())["workload"]
    assert (spec["duration_s"], spec["drain_timeout_s"], spec["warmup_window_s"], spec["cooldown_window_s"]) == \
        (3.0, 5.0, 1.0, 0.5)
    phases = [json.loads(x)["phase"] for x in (run / "requests.jsonl").read_text().splitlines()]
    assert phases.count("measured") == 6 and phases.count("warmup_window") == 4
    out = " ".join(res.output.split())
    assert "metrics exclude the first 1 s and the last 0.5 s: 6 of 12 requests" in out
    report = (run / "report.md").read_text()
    assert "duration 3 s, drain bound 5 s" in report and "6 of 12 requests" in report
