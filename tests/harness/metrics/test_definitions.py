"""Metric definitions on hand-built records (a controlled clock: exact values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.metrics import (
    SLOError,
    compute_metrics,
    distribution,
    error_adjusted_distribution,
    parse_slos,
    slo_percentile_value,
)
from results.schema import RequestRecord

MS = 1_000_000
S = 1_000_000_000


def rec(i, send_ms, chunks_ms, out_tokens=None, ok=True, sched_ms=None, turn=None, retok=None, err=None, prompt=10):
    return RequestRecord(
        request_id=str(i), engine="e", workload="w", turn_id=turn,
        scheduled_ns=int((send_ms if sched_ms is None else sched_ms) * MS),
        send_ns=int(send_ms * MS),
        first_token_ns=int(chunks_ms[0] * MS) if chunks_ms else None,
        last_token_ns=int(chunks_ms[-1] * MS) if chunks_ms else None,
        end_ns=int((chunks_ms[-1] if chunks_ms else send_ms) * MS) + MS,
        chunk_times_ns=[int(c * MS) for c in chunks_ms],
        output_tokens_server=out_tokens, output_tokens_retok=retok,
        input_tokens_server=prompt, success=ok, error_class=err,
    )


def test_ttft_tpot_itl_e2el_exact():
    # request 0: sent at 0, tokens at 100, 120, 160 (3 tokens): TTFT 100, E2E 160, TPOT 30, ITL 20, 40
    # request 1: sent at 50 (scheduled 40), tokens at 250, 270 (2 tokens): TTFT 200, E2E 220, TPOT 20
    records = [rec(0, 0, [100, 120, 160], 3), rec(1, 50, [250, 270], 2, sched_ms=40)]
    m = compute_metrics(records)
    assert m["ttft_ms"]["mean"] == pytest.approx(150.0)
    assert m["ttft_from_scheduled_ms"]["max"] == pytest.approx(210.0)
    assert m["e2el_ms"]["p50"] == pytest.approx(190.0)
    assert m["tpot_ms"]["mean"] == pytest.approx(25.0)
    assert sorted(np.round([m["itl_ms"]["max"], m["itl_ms"]["p50"]], 6)) == [20.0, 40.0]
    assert m["itl_ms"]["mean"] == pytest.approx((20 + 40 + 20) / 3)
    # duration: first send (0) → last end (271 ms)
    assert m["duration_s"] == pytest.approx(0.271)
    assert m["output_throughput"] == pytest.approx(5 / 0.271)
    assert m["input_throughput"] == pytest.approx(20 / 0.271)
    assert m["total_token_throughput"] == pytest.approx(25 / 0.271)
    assert m["request_throughput"] == pytest.approx(2 / 0.271)


def test_one_token_reply_has_no_tpot_and_failures_excluded():
    records = [rec(0, 0, [10], 1), rec(1, 0, [30, 40], 2), rec(2, 0, [5], None, ok=False, err="http_500")]
    m = compute_metrics(records)
    assert m["tpot_ms"]["mean"] == pytest.approx(10.0) and m["tpot_ms"]["max"] == pytest.approx(10.0)
    assert m["ttft_ms"]["max"] == pytest.approx(30.0)  # failed request's 5 ms excluded
    assert m["failures_by_class"] == {"http_500": 1}
    assert m["requests_completed"] == 2 and m["requests_failed"] == 1


def test_percentiles_are_numpy_linear():
    vals = [1.0, 2.0, 3.0, 4.0, 10.0]
    d = distribution(vals)
    assert d["p90"] == pytest.approx(np.percentile(vals, 90))  # 7.6
    assert d["p90"] == pytest.approx(7.6)
    assert d["p99_9"] == pytest.approx(9.976)
    assert d["std"] == pytest.approx(np.std(vals))
    assert distribution([]) == {k: None for k in d}


def test_error_adjusted_percentiles_treat_failures_as_infinite():
    d = error_adjusted_distribution([10.0, 20.0, 30.0], num_failed=1)  # sorted: 10 20 30 inf
    assert d["p50"] == pytest.approx(25.0)  # pos 1.5 → between 20 and 30
    assert d["p90"] is None and d["max"] is None and d["mean"] is None
    clean = error_adjusted_distribution([10.0, 20.0], num_failed=0)
    assert clean["max"] == 20.0 and clean["mean"] == 15.0


def test_goodput_and_slo_attainment():
    records = [rec(0, 0, [100, 110], 2), rec(1, 0, [300, 310], 2), rec(2, 0, [50, 500], 2),
               rec(3, 0, [], None, ok=False, err="timeout")]
    m = compute_metrics(records, parse_slos("ttft_p99=200,tpot_p99=100"))
    # good: request 0 only (1 has TTFT 300; 2 has TPOT 450; 3 failed)
    assert m["goodput"]["good_requests"] == 1
    assert m["goodput"]["slo_attainment"] == pytest.approx(0.25)
    assert m["goodput"]["request_goodput"] == pytest.approx(1 / m["duration_s"])
    assert m["goodput"]["slos"] == {"ttft_p99": 200.0, "tpot_p99": 100.0}


def test_offered_vs_achieved_rate_flag():
    on_time = [rec(i, i * 100, [i * 100 + 5], 1, turn=0) for i in range(11)]  # 10 req/s
    assert compute_metrics(on_time, offered_rate=10.0)["rate_valid"] is True
    assert compute_metrics(on_time, offered_rate=10.0)["achieved_rate"] == pytest.approx(10.0)
    assert compute_metrics(on_time, offered_rate=12.0)["rate_valid"] is False
    assert compute_metrics(on_time, offered_rate=math.inf)["rate_valid"] is None


def test_requested_rate_is_recorded_and_a_rescaled_schedule_is_achieved_exactly():
    from workloads.arrivals import arrival_offsets

    # a client that keeps the rescaled schedule (seed 0, 32 requests, 2 req/s) to the
    # microsecond achieves the requested rate by the metrics' formula: like with like
    offsets = arrival_offsets(32, rate=2.0, seed=0)
    kept = [rec(i, round(o * 1000, 3), [round(o * 1000, 3) + 5], 1) for i, o in enumerate(offsets)]
    m = compute_metrics(kept, offered_rate=2.0)
    assert m.achieved_rate == pytest.approx(2.0, rel=1e-6) and m.rate_valid is True
    assert m.offered_rate == 2.0 and m.requested_rate == 2.0  # today's call: requested = offered
    # the raw draw (1.71 req/s) kept as faithfully would have been flagged against 2 req/s
    raw = arrival_offsets(32, rate=2.0, seed=0, rescale=False)
    drawn = [rec(i, round(o * 1000, 3), [round(o * 1000, 3) + 5], 1) for i, o in enumerate(raw)]
    assert compute_metrics(drawn, offered_rate=2.0).rate_valid is False
    # an explicit requested rate is recorded as given; no rate limit records none
    assert compute_metrics(kept, offered_rate=1.9, requested_rate=2.0).requested_rate == 2.0
    assert compute_metrics(kept, offered_rate=math.inf).requested_rate is None
    assert compute_metrics(kept).requested_rate is None


def test_token_drift_between_usage_and_retokenization():
    records = [rec(0, 0, [1, 2], 10, retok=10), rec(1, 0, [1, 2], 20, retok=18), rec(2, 0, [1, 2], None, retok=7)]
    d = compute_metrics(records)["token_drift"]
    assert d["requests_compared"] == 2 and d["output_mismatched"] == 1
    assert d["output_abs_diff_max"] == 2 and d["output_abs_diff_mean"] == pytest.approx(1.0)
    assert d["output_rel_diff_mean"] == pytest.approx((0 + 0.1) / 2)
    assert d["output_estimated"] == 1


def test_warmup_records_never_enter_metrics():
    w = rec(9, 0, [1000, 2000], 2)
    w.phase = "warmup"
    m = compute_metrics([w, rec(0, 0, [10, 20], 2)])
    assert m["requests_completed"] == 1 and m["ttft_ms"]["max"] == pytest.approx(10.0)


@pytest.mark.parametrize(
    "text,msg",
    [("ttft", "no value"), ("latency_p99=5", "unknown SLO"), ("ttft_p99=abc", "number"), ("tpot=-1", "positive")],
)
def test_bad_slo_strings_give_one_line_errors(text, msg):
    with pytest.raises(SLOError, match=msg):
        parse_slos(text)


def test_slo_percentile_value_uses_error_adjusted_when_failures():
    records = [rec(i, 0, [10 * (i + 1), 10 * (i + 1) + 1], 2) for i in range(9)]
    records.append(rec(9, 0, [], None, ok=False, err="timeout"))
    m = compute_metrics(records)
    (slo,) = parse_slos("ttft_p99=1000")
    assert slo_percentile_value(m, slo) is None  # p99 lands on the failure: infinite
    (p50,) = parse_slos("ttft_p50=1000")
    assert slo_percentile_value(m, p50) == pytest.approx(55.0)


def test_session_completion_time_and_per_turn_ttft():
    # session a: turn 0 scheduled at 0, ends 101 ms; turn 1 scheduled 150 (think time), ends 301 ms
    a0 = rec(0, 0, [50, 100], 2, turn=0)
    a1 = rec(1, 160, [250, 300], 2, turn=1, sched_ms=150)
    b0 = rec(2, 10, [40, 60], 2, turn=0)
    b1 = rec(3, 100, [], None, ok=False, turn=1, err="timeout")  # session b does not complete
    for r, sid in ((a0, "a"), (a1, "a"), (b0, "b"), (b1, "b")):
        r.session_id = sid
    m = compute_metrics([a0, a1, b0, b1])
    assert m["sessions"]["sessions"] == 2 and m["sessions"]["completed"] == 1
    assert m["sessions"]["completion_time_ms"]["max"] == pytest.approx(301.0)
    assert m["per_turn"]["0"]["requests"] == 2 and m["per_turn"]["0"]["ttft_ms_p50"] == pytest.approx(40.0)
    assert m["per_turn"]["1"]["requests"] == 1 and m["per_turn"]["1"]["ttft_ms_p99"] == pytest.approx(90.0)


def test_e2e_from_scheduled_and_shortfall_exact():
    # request 0: scheduled 0, sent 30 (queued 30 ms), last token 130: E2E 100, from scheduled 130
    # request 1: scheduled = sent = 50, last token 90: E2E 40, from scheduled 40
    a, b = rec(0, 30, [80, 130], 2, sched_ms=0), rec(1, 50, [70, 90], 2)
    m = compute_metrics([a, b])
    assert m.e2el_ms.max == pytest.approx(100.0) and m.e2el_from_scheduled_ms.max == pytest.approx(130.0)
    assert m.e2el_from_scheduled_ms.mean == pytest.approx(85.0)
    # shortfall: only "stop" replies sent with ignore_eos, more than 5 % short of max_tokens, count
    short = rec(2, 0, [10, 20], 40)
    short.max_tokens, short.finish_reason, short.ignore_eos_sent = 100, "stop", True
    near = rec(3, 0, [10, 20], 96)  # 4 % short: within the tolerance for a tokenizer estimate
    near.max_tokens, near.finish_reason, near.ignore_eos_sent = 100, "stop", True
    length = rec(4, 0, [10, 20], 40)  # stopped by length, not by an EOS
    length.max_tokens, length.finish_reason, length.ignore_eos_sent = 100, "length", True
    unsent = rec(5, 0, [10, 20], 40)  # ignore_eos not sent: a short "stop" reply is legitimate
    unsent.max_tokens, unsent.finish_reason, unsent.ignore_eos_sent = 100, "stop", False
    sf = compute_metrics([short, near, length, unsent]).output_shortfall
    assert (sf.checked, sf.requests, sf.tokens_missing) == (3, 1, 60)


def _sent(i: int, at_s: float, phase: str) -> RequestRecord:
    t = int(at_s * S)
    return RequestRecord(request_id=f"r{i}", engine="e", workload="random", phase=phase, scheduled_ns=t, send_ns=t,
                         first_token_ns=t + S // 100, last_token_ns=t + S // 50, end_ns=t + S // 50,
                         chunk_times_ns=[t + S // 100, t + S // 50], output_tokens_server=2, success=True)


def test_a_warmup_window_slice_is_judged_against_its_own_schedule() -> None:
    # the run offers 20 req/s; the slice after a 1 s warm-up window happens to be denser (24 req/s)
    # and the client sent every request exactly on schedule: it kept up
    records = [_sent(i, i * 0.05, "warmup_window") for i in range(20)]
    records += [_sent(20 + i, 1.0 + i / 24, "measured") for i in range(49)]
    m = compute_metrics(records, offered_rate=20.0)
    assert m.achieved_rate == pytest.approx(24.0) and m.offered_rate == 20.0
    assert m.rate_valid is True
    late = [r.model_copy(update={"send_ns": r.scheduled_ns + int(k * 0.01 * S)})
            for k, r in enumerate(records) if r.phase == "measured"]
    assert compute_metrics(records[:20] + late, offered_rate=20.0).rate_valid is False  # fell behind its schedule
