"""Repeats of one engine → pooled metrics (rates over the summed measured time) and headline
intervals (two-stage bootstrap over repeats, else over requests), on records with known times."""

from __future__ import annotations

import pytest

from harness.metrics import SLO, compute_metrics
from harness.metrics.repeats import by_repeat, headline_intervals, pooled_metrics
from results.schema import RequestRecord

MS = 1_000_000


def rec(i: int, repeat: int, t0_ms: float, ttft: float, tokens: int = 5, gap: float = 10.0) -> RequestRecord:
    chunks = [t0_ms + ttft + k * gap for k in range(tokens)]
    return RequestRecord(
        request_id=f"{repeat}-{i}", engine="e", workload="w", repeat=repeat, turn_id=None,
        scheduled_ns=int(t0_ms * MS), send_ns=int(t0_ms * MS), first_token_ns=int(chunks[0] * MS),
        last_token_ns=int(chunks[-1] * MS), end_ns=int(chunks[-1] * MS), chunk_times_ns=[int(c * MS) for c in chunks],
        output_tokens_server=tokens, input_tokens_server=10, success=True)


def repeat_records(repeat: int, start_ms: float, ttft: float, n: int = 20) -> list[RequestRecord]:
    # one request every 100 ms; each lasts ttft + 40 ms
    return [rec(i, repeat, start_ms + 100 * i, ttft + (i % 5)) for i in range(n)]


def test_pooled_rates_use_the_summed_measured_time_not_the_span_between_repeats():
    a = repeat_records(0, 0.0, 50.0)
    b = repeat_records(1, 60_000.0, 50.0)  # a minute later: other engines' turns in between
    per = [compute_metrics(a), compute_metrics(b)]
    pooled = pooled_metrics(per, a + b)
    # each repeat: first send 0 → last end 1900 + 54 + 40 = 1994 ms
    assert per[0].duration_s == pytest.approx(1.994) and per[1].duration_s == pytest.approx(1.994)
    assert pooled.duration_s == pytest.approx(3.988)
    assert pooled.requests_completed == 40
    assert pooled.request_throughput == pytest.approx(40 / 3.988)
    assert pooled.output_throughput == pytest.approx(200 / 3.988)
    # distributions over every request of both repeats
    assert pooled.ttft_ms.p50 == pytest.approx(52.0)
    assert pooled_metrics(per[:1], a) is per[0]
    with pytest.raises(ValueError, match="at least one repeat"):
        pooled_metrics([], [])


def test_headline_intervals_over_repeats_widen_when_repeats_disagree():
    same = repeat_records(0, 0.0, 50.0) + repeat_records(1, 10_000.0, 50.0)
    apart = repeat_records(0, 0.0, 50.0) + repeat_records(1, 10_000.0, 80.0)
    same_ci = headline_intervals([compute_metrics(g) for g in by_repeat(same)], same)
    apart_ci = headline_intervals([compute_metrics(g) for g in by_repeat(apart)], apart)
    ttft_same, ttft_apart = same_ci["ttft_ms.p50"], apart_ci["ttft_ms.p50"]
    assert ttft_same.basis == "repeats" and ttft_same.n == 2
    assert ttft_same.low >= 50.0 and ttft_same.high <= 54.0  # both repeats: 50..54 ms
    # a 30 ms slower second repeat: the interval reaches both repeats' medians (52 and 82 ms)
    assert ttft_apart.low <= 52.0 + 1e-9 and ttft_apart.high >= 82.0 - 1e-9
    assert "output_throughput" in same_ci and same_ci["output_throughput"].n == 2
    # a rate over 2 repeats is about their range: labelled with the 50 % it covers, not 95 %
    assert same_ci["output_throughput"].confidence == pytest.approx(0.5)
    assert "holds the median with probability 50%, not 95%" in same_ci["output_throughput"].method


def test_one_repeat_intervals_are_over_requests_and_rates_have_none():
    records = repeat_records(0, 0.0, 50.0, n=40)
    m = compute_metrics(records, [SLO("ttft", 52.5)])
    ci = headline_intervals([m], records, [SLO("ttft", 52.5)])
    assert ci["ttft_ms.p50"].basis == "requests" and ci["ttft_ms.p50"].n == 40
    assert ci["ttft_ms.p50"].low <= 52.0 <= ci["ttft_ms.p50"].high
    tp = ci["output_throughput"]
    assert tp.low == tp.high == tp.point == pytest.approx(m.output_throughput)  # no interval for a rate
    # 50, 51, 52 of every 5 meet 52.5 ms: attainment 0.6, over requests
    assert ci["goodput.slo_attainment"].point == pytest.approx(0.6)
    assert "tpot_ms.p50" in ci and ci["tpot_ms.p50"].point == pytest.approx(10.0)
