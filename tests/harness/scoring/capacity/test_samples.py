"""The decision's per-measurement arithmetic (harness/scoring/capacity/samples.py, harness/scoring/capacity/frontier.py):
the steady-state window, the error bound's interval, each engine's own random stream, sessions
resampled as clusters, throughput draws, and the figures a point is read by. Records are built by
hand on a controlled clock (ms → ns), so every expected value is exact."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.loadgen.simulated import SimEngine, simulate
from harness.metrics import parse_slos
from harness.scoring.capacity.frontier import PointSample, capacity_from, capacity_of, point_stats
from harness.scoring.capacity.samples import (Requests, engine_stream, failure_lower_bound, judged_records, steady_window,
                                     too_many_failures)
from harness.scoring.verdict.verdict import ratio_interval
from results.schema import RequestRecord

MS = 1_000_000


def rec(i: int, send: float, first: float, end: float, tokens: int = 4, session: str | None = None,
        ok: bool = True) -> RequestRecord:
    """A request sent at ``send`` ms, first token at ``first``, last at ``end``; ``tokens`` chunks evenly spaced."""
    chunks = [int((first + k * (end - first) / max(tokens - 1, 1)) * MS) for k in range(tokens)]
    r = RequestRecord(request_id=f"r{i}", engine="e", workload="w", session_id=session, send_ns=int(send * MS),
                      scheduled_ns=int(send * MS), max_tokens=tokens)
    if ok:
        r.success, r.first_token_ns, r.last_token_ns, r.end_ns = True, chunks[0], chunks[-1], chunks[-1]
        r.chunk_times_ns, r.output_tokens_server = chunks, tokens
    else:
        r.success, r.error_class, r.end_ns = False, "http_500", int((send + 5) * MS)
    return r


def closed_loop(clients: int, per_client: int, service_ms: float = 100.0, first_extra_ms: float = 0.0) -> list[RequestRecord]:
    """``clients`` closed-loop clients each sending ``per_client`` requests back to back, starting at once
    (the first request of each takes ``first_extra_ms`` longer to its first token), offset by 10 ms per client."""
    out, i = [], 0
    for c in range(clients):
        t = c * 10.0
        for k in range(per_client):
            extra = first_extra_ms if k == 0 else 0.0
            out.append(rec(i, t if k else 0.0, (t if k else 0.0) + 20 + extra, (t if k else 0.0) + service_ms + extra))
            t = out[-1].end_ns / MS
            i += 1
    return out


def test_the_steady_window_drops_the_synchronised_start_and_the_drain() -> None:
    records = closed_loop(clients=4, per_client=5)
    lo, hi = steady_window(records)  # type: ignore[misc]
    assert lo == min(r.end_ns for r in records)  # opens at the first completion
    # closes at the first (single-turn) session to end after the last one was admitted
    last_admitted = max(r.send_ns for r in records)
    assert hi == min(r.end_ns for r in records if r.end_ns >= last_admitted)
    req = Requests.of(records, 1.0)
    judged = ~np.isnan(req.ttft)
    assert req.steady and judged.sum() == sum(lo <= r.send_ns <= hi for r in records)
    assert not any(judged[i] for i, r in enumerate(records) if r.send_ns == 0)  # the burst at t=0 is not judged
    assert req.duration_s == pytest.approx((hi - lo) / 1e9)


def test_a_burst_only_on_the_synchronised_start_leaves_the_judged_ttft_alone() -> None:
    calm, bursty = closed_loop(4, 6), closed_loop(4, 6, first_extra_ms=900.0)
    slo = parse_slos("ttft_p90=100")
    # whole measurements: the four first requests (1/6 of them) set p90 TTFT; the steady state never sees them
    assert point_stats(4, Requests.of(bursty, 1.0, steady=False), slo, 0.05).values["ttft_p90"] > 900
    steady = point_stats(4, Requests.of(bursty, 1.0), slo, 0.05)
    assert steady.values["ttft_p90"] == pytest.approx(20.0) and steady.passed
    assert point_stats(4, Requests.of(calm, 1.0), slo, 0.05).values["ttft_p90"] == pytest.approx(20.0)


def test_the_judged_records_summarise_to_the_judges_percentiles() -> None:
    from harness.metrics import compute_metrics

    first, second = closed_loop(4, 6, first_extra_ms=900.0), closed_loop(4, 5, service_ms=120.0)
    for r in second:
        r.repeat, r.request_id = 1, "b" + r.request_id
    failed = rec(99, 5.0, 0.0, 0.0, ok=False)  # a failure in the synchronised start still counts
    records = first + [failed] + second
    kept = judged_records(records)
    assert failed in kept and len(kept) < len(records)
    slos = parse_slos("ttft_p90=5000,tpot_p90=500")
    judged = point_stats(4, pool_of(first + [failed], second), slos, 0.5)
    m = compute_metrics(kept, slos)
    assert m.error_adjusted.distribution("ttft").percentile("p90") == pytest.approx(judged.values["ttft_p90"])
    assert m.tpot_ms.p90 == pytest.approx(judged.values["tpot_p90"])


def pool_of(*measurements: list[RequestRecord]) -> Requests:
    from harness.scoring.capacity.samples import pool

    return pool([Requests.of(m, 1.0) for m in measurements])


def test_a_measurement_too_short_for_a_steady_state_is_judged_whole() -> None:
    records = closed_loop(clients=4, per_client=1)  # every request in the burst: nothing left to judge
    assert steady_window(records) is None
    req = Requests.of(records, 0.25)
    assert not req.steady and (~np.isnan(req.ttft)).sum() == 4 and req.duration_s == 0.25


def test_the_error_bound_is_judged_with_a_wilson_lower_bound() -> None:
    # one failure in 12 (8 %) is not shown to exceed a 5 % bound; 4 in 12 is
    assert failure_lower_bound(0, 12) == 0.0
    assert 0.0 < float(failure_lower_bound(1, 12)) < 0.05 and not too_many_failures(1, 12, 0.05)
    assert float(failure_lower_bound(4, 12)) > 0.05 and too_many_failures(4, 12, 0.05)
    assert float(failure_lower_bound(0, 0)) == 1.0  # nothing answered: nothing served
    # the one-sided 95 % Wilson bound, by hand for 3 of 20: (p + z²/2n − z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n)
    z, n, p = 1.6448536269514722, 20, 0.15
    hand = (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    assert float(failure_lower_bound(3, 20)) == pytest.approx(hand)
    point = point_stats(1, Requests.of([rec(i, i * 100.0, i * 100 + 20, i * 100 + 90, ok=i != 5) for i in range(12)], 1.2,
                                       steady=False), parse_slos("tpot_p90=1000"), 0.05)
    assert point.failure_rate == pytest.approx(1 / 12) and point.passed


def test_each_engine_draws_from_its_own_stream() -> None:
    assert engine_stream(0, "vllm") != engine_stream(0, "sglang")
    assert engine_stream(0, "vllm") == engine_stream(0, "vllm") != engine_stream(1, "vllm")
    # two engines measured identically (the same records): a shared seed gives a ratio interval of one point
    slos = parse_slos("ttft_p90=100000,tpot_p90=100000")
    records, duration = simulate(SimEngine("a", slots=8, jitter=0.2), 4, 36, 16, seed=3)
    pts = [PointSample(4.0, (Requests.of(records, duration),))]
    a, b = capacity_of(pts, slos, seed=7), capacity_of(pts, slos, seed=7)
    assert ratio_interval(a, b) == (1.0, 1.0)
    a, b = capacity_of(pts, slos, seed=engine_stream(7, "a")), capacity_of(pts, slos, seed=engine_stream(7, "b"))
    lo, hi = ratio_interval(a, b)  # type: ignore[misc]
    assert lo < 0.99 and hi > 1.01


def test_sessions_are_resampled_as_clusters() -> None:
    # 6 sessions of 4 turns, each session's turns sharing its TTFT (100, 200, ... 600 ms): the turns of a
    # session are not independent, so the p50 TTFT drawn by whole sessions (6 clusters) spreads wider than
    # the same requests drawn one by one (24), about √4 = 2 times as wide
    recs = []
    for s in range(6):
        ttft = 100.0 * (s + 1)
        for k in range(4):
            t = s * 10_000.0 + k * 2000.0
            recs.append(rec(len(recs), t, t + ttft, t + ttft + 100, session=f"s{s}"))
    slos = parse_slos("ttft_p50=1000")
    clustered = Requests.of(recs, 60.0, steady=False)
    independent = Requests.of([r.model_copy(update={"session_id": None}) for r in recs], 60.0, steady=False)
    assert len(clustered.clusters()) == 6 and len(independent.clusters()) == 24

    def spread(req: Requests) -> float:
        from harness.scoring.capacity.frontier import _point_draws
        draws = _point_draws(PointSample(1.0, (req,)), slos, 0.05, 2000, np.random.default_rng(0))
        return float(np.std([d.margin for d in draws]))

    assert spread(clustered) > 1.6 * spread(independent)


def test_the_capacity_is_never_below_what_the_passing_point_sustained() -> None:
    slos = parse_slos("tpot_p90=100")
    a = point_stats(1, Requests.of([rec(i, i * 1000.0, i * 1000 + 10, i * 1000 + 300) for i in range(12)], 12.0,
                                   steady=False), slos, 0.05)
    b = point_stats(2, Requests.of([rec(i, i * 1000.0, i * 1000 + 10, i * 1000 + 600) for i in range(12)], 24.0,
                                   steady=False), slos, 0.05)
    assert a.passed and not b.passed and b.output_tps < a.output_tps  # past saturation: less throughput at 2
    cap = capacity_from([a, b])
    assert cap.output_tps == pytest.approx(a.output_tps) and 1.0 <= cap.load <= 2.0


def test_the_interactivity_axis_is_the_tpot_percentile_the_slo_judges() -> None:
    # TPOTs of 10, 20, ..., 100 ms: 1000 / p90 (91 ms), not 1000 / median (55 ms)
    recs = [rec(i, i * 2000.0, i * 2000 + 10, i * 2000 + 10 + 3 * 10 * (i + 1), tokens=4) for i in range(10)]
    req = Requests.of(recs, 20.0, steady=False)
    st = point_stats(1, req, parse_slos("tpot_p90=1000"), 0.05)
    assert st.per_user_tps == pytest.approx(1000 / 91.0)
    assert point_stats(1, req, parse_slos("ttft_p90=1000"), 0.05).per_user_tps == pytest.approx(1000 / 55.0)


def test_throughput_draws_follow_the_service_rate_not_the_requests_sizes() -> None:
    # a closed loop whose window cuts requests at both ends: requests' tokens inside it differ, yet every
    # request is served at one rate, so the throughput has no resampling noise
    records = closed_loop(clients=3, per_client=8)
    from harness.scoring.capacity.frontier import capacity_draws
    draws = capacity_draws([PointSample(3.0, (Requests.of(records, 1.0),))], parse_slos("tpot_p90=1000"), 0.05,
                           resamples=200, seed=1)
    assert np.ptp(draws) == pytest.approx(0.0, abs=1e-6 * draws.mean())


def test_no_slo_broke_is_claimed_only_when_no_measurement_broke_one() -> None:
    from harness.scoring.verdict.decision import judge
    from results.schema import EngineLadder, EngineStatus, LadderPoint, LadderSummary

    def measurement(repeat: int, slow: int) -> list[RequestRecord]:
        out = []
        for i in range(12):  # one in flight; requests 4.. (4 + slow) decode at 250 ms a token, the rest at 50
            t, per = i * 1000.0, 250.0 if 4 <= i < 4 + slow else 50.0
            r = rec(i, t, t + 10, t + 10 + 3 * per)
            r.request_id, r.engine, r.probe, r.repeat = f"m{repeat}-{i}", "solo", 0, repeat
            out.append(r)
        return out

    slos = parse_slos("tpot_p90=200")
    records = measurement(0, 0) + measurement(1, 0) + measurement(2, 3)  # the third, alone, breaks p90 TPOT
    summary = LadderSummary(run_id="r", workload="random", slos={s.key: s.threshold_ms for s in slos})
    summary.engines["solo"] = EngineLadder(status=EngineStatus.OK, stopped="budget",
                                           points=[LadderPoint(index=0, load=1, seeds=[0, 1, 2], wall_s=36.0)])
    judge(summary, records, slos)
    d = summary.decision
    assert d is not None and d.winner == "solo" and summary.engines["solo"].capacity.open
    assert "the pooled SLOs held up to 1 in flight (a lower bound); 1 of 3 measurements up to there broke p90 TPOT" \
        in d.sentence
    assert "no SLO broke" not in d.sentence
    summary.engines["solo"].points[0].seeds = [0, 1]  # only the two calm measurements: the plain claim is true
    judge(summary, [r for r in records if r.repeat < 2], slos)
    assert "no SLO broke up to 1 in flight (a lower bound)" in summary.decision.sentence


def test_a_ladder_whose_slo_broke_never_reads_stopped_by_budget() -> None:
    from reports.frontier import _stopped
    from results.schema import CapacityAtSLO, EngineLadder, EngineStatus

    closed = CapacityAtSLO(output_tps=30.0, request_rate=1.0, load=6.5, bracket=(4.0, 8.0), open=False)
    assert _stopped(EngineLadder(status=EngineStatus.OK, stopped="budget", capacity=closed)) == \
        "slo (bisection cut by budget)"
    lower = CapacityAtSLO(output_tps=30.0, request_rate=1.0, load=4.0, bracket=(4.0, None), open=True)
    assert _stopped(EngineLadder(status=EngineStatus.OK, stopped="budget", capacity=lower)) == "budget"


def test_start_up_time_breaks_a_tie_only_between_starts_made_alone() -> None:
    from harness.scoring.verdict.verdict import Candidate, break_tie

    a = Candidate("a", startup_s=76.0, processes=1)  # its first start, beside six other engines, with an IR export
    b = Candidate("b", startup_s=40.0, processes=2)
    assert break_tie(a, b)[0].name == "b"  # both alone: the faster start
    a.startup_alone = False
    chosen, why = break_tie(a, b)
    assert chosen.name == "a" and why.startswith("fewer server processes")  # the crowded start is not compared


def test_devices_come_from_the_launch_and_divide_throughput_and_cost() -> None:
    from adapters.base import LaunchConfig, devices_of
    from harness.scoring.verdict.decision import judge
    from results.schema import EngineLadder, EngineStatus, LadderPoint, LadderSummary
    from pathlib import Path

    assert devices_of({}) == 1 and devices_of({"tensor_parallel_size": "4", "pipeline_parallel_size": "2"}) == 8
    assert devices_of({"tp": "2", "dp": "3"}) == 6
    with pytest.raises(ValueError, match="whole number of devices"):
        devices_of({"tp": "0"})
    launch = LaunchConfig(model_dir=Path("."), run_dir=Path("."), engine_args={"tp": "4"})
    assert launch.deployment_devices == 4
    assert LaunchConfig(model_dir=Path("."), run_dir=Path("."), devices=8).deployment_devices == 8  # --devices NAME=8

    slos = parse_slos("tpot_p90=1000")
    records = []
    for name in ("one", "four"):
        for i in range(12):
            r = rec(i, i * 1000.0, i * 1000 + 10, i * 1000 + 310)
            r.request_id, r.engine, r.probe = f"{name}-{i}", name, 0
            records.append(r)
    summary = LadderSummary(run_id="r", workload="random", slos={s.key: s.threshold_ms for s in slos})
    for name, devices in (("one", 1), ("four", 4)):
        summary.engines[name] = EngineLadder(status=EngineStatus.OK, stopped="max_load", devices=devices,
                                             points=[LadderPoint(index=0, load=1, seeds=[0], wall_s=12.0)])
    judge(summary, records, slos, price_per_hour=2.0, target_tps=100.0)
    one, four = summary.engines["one"].capacity, summary.engines["four"].capacity
    assert four.output_tps == pytest.approx(one.output_tps / 4)  # the same serving, on four devices: per device
    assert four.usd_per_1m_output_tokens == pytest.approx(4 * one.usd_per_1m_output_tokens)  # $2 per device-hour
    assert one.usd_per_1m_output_tokens == pytest.approx(2.0 / (one.output_tps * 3600) * 1e6)
    assert four.devices_needed % 4 == 0  # whole deployments of four


def test_an_interval_reaching_zero_says_the_lowest_load_fails_in_some_resamples() -> None:
    from reports.frontier import _interval

    # load 1 passes p90 TTFT <= 1000 ms by 1 %, load 2 fails: many resamples fail load 1 (capacity 0)
    ttfts = [100.0] * 9 + [980.0, 1000.0, 1600.0]  # p90 = 998 ms
    low = [rec(i, i * 3000.0, i * 3000 + t, i * 3000 + t + 200) for i, t in enumerate(ttfts)]
    high = [rec(i, i * 3000.0, i * 3000 + 2000, i * 3000 + 2200) for i in range(12)]
    pts = [PointSample(1.0, (Requests.of(low, 36.0, steady=False),)),
           PointSample(2.0, (Requests.of(high, 36.0, steady=False),))]
    cap = capacity_of(pts, parse_slos("ttft_p90=1000"), seed=0)
    assert not cap.never_met and cap.interval is not None and cap.interval[0] == 0.0
    assert 0.025 <= cap.lowest_fails < 1.0
    assert _interval(cap).endswith(f"(1 run) (its lowest load fails in {cap.lowest_fails:.0%} of resamples)")


def test_pooling_and_taking_keep_every_field_in_its_place() -> None:
    from harness.scoring.capacity.samples import pool

    a = Requests.of(closed_loop(clients=3, per_client=6), 2.0)
    b = Requests.of(closed_loop(clients=3, per_client=6, service_ms=120.0), 2.5)
    both = pool([a, b])
    assert both.span == pytest.approx(4.5) and both.duration_s == pytest.approx(a.duration_s + b.duration_s)
    assert both.steady and both.n == a.n + b.n
    assert np.array_equal(both.tokens_out(), np.concatenate([a.tokens_out(), b.tokens_out()]))
    assert np.array_equal(both.completions(), np.concatenate([a.completions(), b.completions()]))
    taken = both.take(np.array([0, 1, a.n]))
    assert taken.span == both.span and taken.steady and np.array_equal(taken.tokens_out(), both.tokens_out()[[0, 1, a.n]])
    # an agentic point's sessions/s counts over the whole measured phases (s), not the window
    st = point_stats(3, both, parse_slos("tpot_p90=1000"), 0.05, sessions=18)
    assert st.request_rate == pytest.approx(18 / 4.5)
