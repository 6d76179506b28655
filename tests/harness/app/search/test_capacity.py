"""Capacity search (harness.app.search.capacity) against fakes with a known threshold, and end to end
against the capacity server (harness.loadgen.capacity_server), whose capacity is known.

The capacity server serves ``slots`` streams at once, FIFO-queues the rest, and streams
``T = max_tokens`` tokens per request: first after ``prefill_ms``, then one per
``per_token_ms``. One request's service time is therefore

    S = prefill_ms + (T - 1) * per_token_ms,        TTFT = queue wait + prefill_ms.

Its TTFT-SLO capacity, by hand:

- **Concurrency (closed loop, the end-to-end test).** With the client capped at ``c``
  in-flight requests and every request due at once: for ``c <= slots`` every request finds a
  free slot, TTFT = prefill_ms (+ client/HTTP overhead). For ``c > slots`` there are always
  ``c - slots`` requests queued, and a newly sent request waits for a completion, about one
  whole service time: TTFT ~ S + prefill_ms. A TTFT p99 SLO between the two (here
  3 x prefill = 60 ms, against 20 ms below and ~190 ms above) has capacity exactly
  ``c = slots``; concurrency is an integer, so the search bisects on integers and must find
  it exactly.
- **Request rate, uniform arrivals (D/D/c, FIFO).** Arrivals every ``g = 1/lambda``; request
  ``i`` starts at ``max(a_i, start_{i-c} + S)`` (with FIFO the slot it gets is the one
  request ``i - c`` frees). No request waits iff ``c * g >= S``, i.e. ``lambda <= c / S``;
  above that the wait grows by ``S - c/lambda`` every ``c`` requests without bound, so over
  a long run any TTFT p99 SLO a little above prefill_ms has capacity ``c / S`` req/s.
  :func:`_fifo_waits` is that queue as a tiny simulation (it takes Poisson arrivals too:
  M/D/c); ``test_search_finds_the_dd_c_rate_capacity`` checks the search against ``c / S``.
"""

from __future__ import annotations

import asyncio
import heapq
import math

import pytest

import numpy as np

from harness.app.search.capacity import CapacityResult, LoadProbe, judge_probe, probe_capacity, search_capacity
from harness.metrics import SLO, compute_metrics
from harness.scoring.capacity.samples import Requests, measured_span_s
from results.schema import Metrics

pytestmark = pytest.mark.serial  # searches that find paced servers' slots from wall-clock latencies: run alone (make test)


class FakeClock:
    """Seconds that pass only when a fake probe says so."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def threshold_measure(threshold: float, clock: FakeClock | None = None, probe_s: float = 0.0,
                      saturate_above: float | None = None):
    """A measure that passes iff load <= threshold (and saturates above ``saturate_above``),
    each probe advancing ``clock`` by ``probe_s``."""

    def measure(load: float) -> LoadProbe:
        if clock is not None:
            clock.t += probe_s
        sat = saturate_above is not None and load > saturate_above
        return LoadProbe(load=load, meets_slo=load <= threshold, saturated=sat,
                           achieved=load * (0.5 if sat else 1.0), values={"ttft_p99": 10.0 * load}, reason="fake")

    return measure


# ------------------------------------------------------------------------------------------
# the algorithm


def test_finds_a_known_threshold_within_tolerance():
    clock = FakeClock()
    res = search_capacity(threshold_measure(3.1, clock, 1.0), low=0.5, high=None, tolerance=0.05,
                          budget_s=100, clock=clock)
    assert res.stopped == "converged"
    assert 3.1 * 0.95 <= res.capacity <= 3.1
    p, f = res.bracket
    assert p == res.capacity and f is not None and f > 3.1 and (f - p) / p <= 0.05
    loads = [pr.load for pr in res.probes]
    assert loads[:4] == [0.5, 1.0, 2.0, 4.0]  # doubling until the first fail
    assert loads == [0.5, 1.0, 2.0, 4.0, 3.0, 3.5, 3.25, 3.125]  # (3.125 - 3) / 3 = 4.2 % <= 5 %
    assert res.capacity == 3.0 and res.bracket == (3.0, 3.125)
    assert [pr.passed for pr in res.probes] == [pr.load <= 3.1 for pr in res.probes]
    assert all(pr.duration_s == 1.0 for pr in res.probes)
    assert res.elapsed_s == 8.0


def test_stops_on_budget_without_starting_a_probe_that_cannot_finish():
    clock = FakeClock()
    # each probe takes 4 s of a 10 s budget: after two (8 s) the next one would end at 12 s
    res = search_capacity(threshold_measure(3.1, clock, 4.0), low=0.5, high=None, budget_s=10, clock=clock)
    assert res.stopped == "budget"
    assert len(res.probes) == 2 and res.elapsed_s == 8.0 <= res.budget_s
    assert res.capacity == 1.0 and res.bracket == (1.0, None)
    assert "budget" in res.message and "at least 1" in res.message


def test_first_estimate_keeps_an_impossible_first_probe_from_starting():
    clock = FakeClock()
    res = search_capacity(threshold_measure(3.1, clock, 30.0), low=1, high=None, budget_s=10, clock=clock,
                          first_estimate_s=30.0)
    assert res.stopped == "budget" and res.probes == [] and res.capacity == 0.0 and res.elapsed_s == 0.0


def test_a_failing_first_load_is_halved_until_a_probe_passes():
    clock = FakeClock()
    res = search_capacity(threshold_measure(0.1, clock, 2.0), low=0.5, high=None, budget_s=60, clock=clock)
    # 0.5, 0.25, 0.125 fail; 0.0625 passes; then bisection between 0.0625 and 0.125
    assert [round(p.load, 6) for p in res.probes[:4]] == [0.5, 0.25, 0.125, 0.0625]
    assert res.stopped == "converged" and 0.095 <= res.capacity <= 0.1


def test_never_met_down_to_a_sixteenth_of_the_lowest_load_stops_within_budget():
    clock = FakeClock()
    res = search_capacity(threshold_measure(0.01, clock, 2.0), low=0.5, high=None, budget_s=600, clock=clock)
    assert res.stopped == "never_met"
    assert [p.load for p in res.probes] == [0.5, 0.25, 0.125, 0.0625, 0.03125]
    assert res.capacity == 0.0 and res.bracket == (None, 0.03125)
    assert "never meets the SLO down to 0.03125 (searched from 0.5)" in res.message
    # a budget that allows one probe (each "takes" 2 s here; halving doubles the estimate) stops the halving
    clock = FakeClock()
    res = search_capacity(threshold_measure(0.01, clock, 2.0), low=0.5, high=None, budget_s=3, clock=clock)
    assert res.stopped == "budget" and len(res.probes) == 1 and res.capacity == 0.0


def test_saturation_counts_as_a_fail():
    clock = FakeClock()
    # every probe meets the latency SLOs, but above 2.5 the offered load is not achieved
    res = search_capacity(threshold_measure(math.inf, clock, 1.0, saturate_above=2.5), low=0.5, high=None,
                          budget_s=100, clock=clock)
    assert res.stopped == "converged"
    assert 2.5 * 0.95 <= res.capacity <= 2.5
    assert all(pr.meets_slo for pr in res.probes)
    assert [pr.passed for pr in res.probes] == [pr.load <= 2.5 for pr in res.probes]


def test_high_reached_and_max_probes():
    clock = FakeClock()
    res = search_capacity(threshold_measure(100.0, clock, 1.0), low=0.5, high=5.0, budget_s=100, clock=clock)
    assert res.stopped == "high_reached" and res.capacity == 5.0
    assert [pr.load for pr in res.probes] == [0.5, 1.0, 2.0, 4.0, 5.0]
    res = search_capacity(threshold_measure(3.1, clock, 1.0), low=0.5, high=None, budget_s=100, clock=clock,
                          max_probes=5)
    assert res.stopped == "max_probes" and len(res.probes) == 5
    assert res.capacity == 3.0 and res.bracket == (3.0, 4.0)


def test_integer_search_is_exact():
    clock = FakeClock()
    res = search_capacity(threshold_measure(4.0, clock, 1.0), low=1, high=64, budget_s=100, clock=clock,
                          integer=True, unit="concurrent requests")
    assert res.stopped == "converged" and res.capacity == 4.0 and res.bracket == (4.0, 5.0)
    assert [pr.load for pr in res.probes] == [1, 2, 4, 8, 6, 5]
    assert "capacity 4 concurrent requests" in res.message


def test_result_round_trips_as_json():
    clock = FakeClock()
    res = search_capacity(threshold_measure(3.1, clock, 1.0), low=0.5, high=None, budget_s=100, clock=clock)
    again = CapacityResult.model_validate_json(res.model_dump_json())
    assert again == res and again["stopped"] == "converged"


def test_bad_parameters_are_refused():
    m = threshold_measure(1.0)
    for kw in ({"low": 0, "high": None}, {"low": 2, "high": 1}, {"low": 1, "high": None, "tolerance": 0},
               {"low": 0.2, "high": None, "integer": True}, {"low": 1, "high": None, "max_probes": 0}):
        with pytest.raises(ValueError):
            search_capacity(m, budget_s=10, **kw)


# ------------------------------------------------------------------------------------------
# D/D/c by hand, M/D/c by simulation


def _fifo_waits(arrivals: list[float], c: int, service_s: float) -> list[float]:
    """Queue waits (s) of a c-server FIFO queue with deterministic service time."""
    free = [0.0] * c  # when each server is next free (a heap)
    waits = []
    for a in arrivals:
        t = heapq.heappop(free)
        start = max(a, t)
        waits.append(start - a)
        heapq.heappush(free, start + service_s)
    return waits


def test_search_finds_the_dd_c_rate_capacity():
    slots, prefill_ms, per_token_ms, T = 4, 20.0, 10.0, 16
    S = (prefill_ms + (T - 1) * per_token_ms) / 1000.0  # 0.17 s
    expected = slots / S  # 23.53 req/s
    slo_ms = prefill_ms + 5.0

    def measure(rate: float) -> LoadProbe:
        arrivals = [i / rate for i in range(1, 801)]  # uniform arrivals
        ttfts = sorted(w * 1000.0 + prefill_ms for w in _fifo_waits(arrivals, slots, S))
        p99 = ttfts[int(0.99 * (len(ttfts) - 1))]
        return LoadProbe(load=rate, meets_slo=p99 <= slo_ms, values={"ttft_p99": p99})

    res = search_capacity(measure, low=1.0, high=None, budget_s=1e9, clock=FakeClock())
    assert res.stopped == "converged"
    assert expected * 0.95 <= res.capacity <= expected * 1.0005
    # Poisson arrivals at the same mean rate queue well below c/S (M/D/c): the capacity drops
    rng = __import__("numpy").random.default_rng(0)
    arrivals = list(rng.exponential(1 / (0.9 * expected), size=800).cumsum())
    waits = sorted(_fifo_waits(arrivals, slots, S))
    assert waits[int(0.99 * 799)] * 1000.0 > 5.0


# ------------------------------------------------------------------------------------------
# judging a probe from Metrics


def _requests(ttft: list[float], tpot: float = 8.0, failed: int = 0) -> Requests:
    """Requests with these TTFTs (ms), one TPOT, and ``failed`` failures, over 1 s."""
    n = len(ttft) + failed
    nan = [math.nan] * failed
    return Requests(ok=np.array([True] * len(ttft) + [False] * failed, dtype=bool), ttft=np.array(ttft + nan),
                    tpot=np.array([tpot] * len(ttft) + nan), e2el=np.array([t + 100 for t in ttft] + nan),
                    tokens=np.array([10.0] * len(ttft) + [0.0] * failed), itl=tuple(np.empty(0) for _ in range(n)),
                    duration_s=1.0)


def _metrics(*, completed: int = 10, failed: int = 0, achieved: float | None = None) -> Metrics:
    return Metrics(requests_sent=completed + failed, requests_completed=completed, requests_failed=failed,
                   duration_s=1.0, failures_by_class={"timeout": failed} if failed else {}, achieved_rate=achieved)


def test_a_probe_is_judged_by_the_decision_cores_judge_of_a_point():
    slos = [SLO("ttft", 60.0), SLO("tpot", 10.0)]
    fast = [30.0 + i for i in range(11)]  # p99 by numpy's linear rule: 39.9 ms
    pr = judge_probe(2.0, [_requests(fast)], slos, _metrics(achieved=2.0), offered=2.0)
    assert (pr.meets_slo, pr.saturated, pr.passed) == (True, False, True)
    assert pr.reason == "ttft_p99 39.9 ms <= 60.0 ms; tpot_p99 8.0 ms <= 10.0 ms"
    assert pr.values == pytest.approx({"ttft_p99": 39.9, "tpot_p99": 8.0}) and pr.margin == pytest.approx(0.8)
    assert pr.binding == "tpot_p99" and pr.achieved == 2.0
    slow = judge_probe(2.0, [_requests([t + 40 for t in fast])], slos, _metrics(achieved=2.0), offered=2.0)
    assert not slow.meets_slo and "ttft_p99 79.9 ms > 60.0 ms" in slow.reason and slow.binding == "ttft_p99"
    # achieved 1.85 < 2 * 0.95 = 1.9: saturated (a fail, not interpolated); 1.95 is inside the band
    sat = judge_probe(2.0, [_requests(fast)], slos, _metrics(achieved=1.85), offered=2.0)
    assert (sat.meets_slo, sat.saturated, sat.passed, sat.binding) == (True, True, False, "saturated")
    assert judge_probe(2.0, [_requests(fast)], slos, _metrics(achieved=1.95), offered=2.0).saturated is False
    # a concurrency probe has no rate target: no saturation check
    assert judge_probe(2.0, [_requests(fast)], slos, _metrics(achieved=0.1)).saturated is False
    # a failed request the p99 lands on is infinite latency (error-adjusted)
    lands = judge_probe(2.0, [_requests(fast, failed=1)], slos, _metrics(failed=1))
    assert not lands.meets_slo and "infinite" in lands.reason and lands.margin is None
    assert lands.values["ttft_p99"] is None
    assert not judge_probe(2.0, [_requests([])], slos, _metrics(completed=0)).meets_slo
    # two repeats are pooled: a p99 over both
    pooled = judge_probe(2.0, [_requests(fast), _requests([t + 40 for t in fast])], slos, _metrics(achieved=2.0))
    assert not pooled.meets_slo and pooled.values["ttft_p99"] == pytest.approx(79.79)  # 22 values: 79 + 0.79


def test_the_capacity_is_read_where_the_margin_crosses_one():
    probes = [LoadProbe(load=1, meets_slo=True, margin=0.2), LoadProbe(load=2, meets_slo=True, margin=0.6),
              LoadProbe(load=4, meets_slo=False, margin=1.4, binding="ttft_p99")]
    cap = probe_capacity(probes)
    assert cap.load == pytest.approx(3.0) and cap.bracket == (2, 4) and not cap.open  # 2 + 2 x (0.4 / 0.8)
    # a failure by saturation or errors is not interpolated: the boundary is the passing load
    for why in ("saturated", "errors"):
        probes[-1] = LoadProbe(load=4, meets_slo=why != "errors", saturated=why == "saturated", margin=0.9, binding=why)
        assert probe_capacity(probes).load == 2.0
    # an older stored probe (no margin): the passing load
    assert probe_capacity([LoadProbe(load=1, meets_slo=True), LoadProbe(load=2, meets_slo=False)]).load == 1.0
    # the search reports it, and says where it was read
    margins = {1: 0.2, 2: 0.6, 4: 1.4, 3: 1.1}
    res = search_capacity(lambda load: LoadProbe(load=load, meets_slo=margins[load] <= 1, margin=margins[load],
                                                 binding="ttft_p99"), low=1, high=None, budget_s=1e9, integer=True,
                          clock=FakeClock())
    assert res.bracket == (2.0, 3.0) and res.capacity == pytest.approx(2 + 0.4 / 0.5)
    assert res.message.startswith("capacity 2.8: passes at 2, fails at 3")


# ------------------------------------------------------------------------------------------
# end to end: the real runner and metrics against the capacity server


@pytest.fixture(scope="module")
def kit():
    from transformers import AutoTokenizer

    from harness.app.core.model import resolve_model
    from workloads.tokens import TokenKit

    return TokenKit(AutoTokenizer.from_pretrained(str(resolve_model(None))))


def test_concurrency_search_finds_the_servers_slots(kit):
    from harness.loadgen.capacity_server import capacity_server
    from harness.loadgen.client import EndpointTarget
    from harness.loadgen.runner import Runner, RunnerOptions
    from workloads.registry import build_workload

    slots, prefill_ms, per_token_ms, T, N = 4, 20.0, 10.0, 16, 16
    slos = [SLO("ttft", 3 * prefill_ms)]  # 60 ms: ~20 ms at c <= 4, ~190 ms (S + prefill) above
    seen: list[tuple[int, float | None]] = []

    with capacity_server(slots=slots, prefill_ms=prefill_ms, per_token_ms=per_token_ms) as url:

        def measure(load: float) -> LoadProbe:
            c = int(load)
            w = build_workload("random", kit, num_requests=N, input_len=8, output_len=T,
                               request_rate=math.inf, seed=0, with_stats=False)
            runner = Runner(EndpointTarget(url, "capacity"), "capacity", w.name, lambda rec: None, None,
                            RunnerOptions(max_concurrency=c, request_timeout_s=30.0))
            records = asyncio.run(runner.measure(w))
            assert len(records) == N and all(r.success for r in records)
            assert all(r.output_tokens == T for r in records)
            metrics = compute_metrics(records, slos, offered_rate=None)
            pr = judge_probe(c, [Requests.of(records, measured_span_s(records))], slos, metrics)
            seen.append((c, pr.values["ttft_p99"]))
            return pr

        res = search_capacity(measure, low=1, high=32, budget_s=120, integer=True, unit="concurrent requests")

    assert res.stopped == "converged", res.message
    assert slots <= res.capacity < slots + 1 and res.bracket == (4.0, 5.0), seen
    assert [pr.load for pr in res.probes] == [1, 2, 4, 8, 6, 5]
    service_ms = prefill_ms + (T - 1) * per_token_ms  # S = 170 ms
    for pr in res.probes:  # lower bounds only: a slow machine can only add to them
        v = pr.values["ttft_p99"]
        assert v is not None and v >= prefill_ms  # no answer before the prefill time
        if pr.load > slots:  # queued for about one whole service time
            assert v >= service_ms


def test_a_probe_whose_completions_fall_behind_the_offered_rate_is_saturated():
    from harness.metrics import completion_rate
    from results.schema import RequestRecord

    ms = 1_000_000
    # 8 requests sent exactly at 4 req/s (250 ms apart) but served one at a time in 1 s each:
    # completions 1 s apart, 1 req/s, although the client kept the schedule
    records = [RequestRecord(request_id=str(i), engine="e", workload="w", scheduled_ns=i * 250 * ms,
                             send_ns=i * 250 * ms, first_token_ns=(i + 1) * 1000 * ms - 10 * ms,
                             last_token_ns=(i + 1) * 1000 * ms, end_ns=(i + 1) * 1000 * ms,
                             chunk_times_ns=[(i + 1) * 1000 * ms - 10 * ms, (i + 1) * 1000 * ms], success=True)
               for i in range(8)]
    assert completion_rate(records) == pytest.approx(1.0)
    metrics = compute_metrics(records, [], 4.0)
    assert metrics.achieved_rate == pytest.approx(4.0)  # the client kept the schedule
    pr = judge_probe(4.0, [Requests.of(records, measured_span_s(records))], [], metrics, offered=4.0,
                     completed=completion_rate(records))
    assert pr.meets_slo and pr.saturated and "the engine completed 1 req/s of the 4 offered" in pr.reason
    # a stable probe: completions keep pace within 10 %
    assert not judge_probe(4.0, [Requests.of(records, measured_span_s(records))], [], metrics, offered=4.0,
                           completed=3.7).saturated
