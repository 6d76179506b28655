"""The replay-fidelity certificate (harness/metrics/replay.py) on a known trace with known values."""

from __future__ import annotations

import pytest

from results.schema import RequestRecord
from harness.metrics.replay import certificate_rows, sent_statistics

S = 1_000_000_000  # ns per s


def rec(sid, turn, branch, scheduled_s, end_s, n_in, n_out, cached=None, probe=0, ok=True):
    return RequestRecord(request_id=f"{sid}-{branch}-{turn}", engine="own", workload="agentic", session_id=sid, turn_id=turn,
                         branch_id=branch, probe=probe, scheduled_ns=int(scheduled_s * S), send_ns=int(scheduled_s * S),
                         end_ns=int(end_s * S), input_tokens_server=n_in, output_tokens_server=n_out,
                         cached_tokens_server=cached, success=ok)


# two sessions: s0 = 3 turns with a 2 s and a 4 s tool pause and one sub-agent (branch 1, 1 turn);
# s1 = 1 turn. The same session id in another ladder point (probe 1) is another job.
RECORDS = [rec("s0", 0, 0, 0.0, 1.0, 100, 10, cached=0), rec("s0", 1, 0, 3.0, 4.0, 200, 20, cached=96),
           rec("s0", 0, 1, 1.5, 2.0, 50, 5, cached=0), rec("s0", 2, 0, 8.0, 9.0, 300, 30, cached=192),
           rec("s1", 0, 0, 0.0, 2.0, 400, 40, cached=0), rec("s0", 0, 0, 0.0, 1.0, 100, 10, probe=1)]


def test_sent_statistics_by_hand():
    st = sent_statistics(RECORDS)
    assert sorted(st["input_tokens"]) == [50, 100, 100, 200, 300, 400]
    assert sorted(st["turns_per_session"]) == [1, 1, 4]  # (probe 0, s0), (probe 0, s1), (probe 1, s0)
    assert sorted(st["sub_agents_per_session"]) == [0, 0, 1]
    assert st["tool_s"] == pytest.approx([2.0, 4.0])  # 3.0 - 1.0 and 8.0 - 4.0; the sub-agent's start is no pause
    # (0 + 96 + 0 + 192 + 0) cached of (100 + 200 + 50 + 300 + 400) prompt tokens reporting them
    assert st["measured_hit_rate"] == pytest.approx(288 / 1050)
    assert st["sessions"] == 3 and st["requests"] == 6


def test_the_certificate_judges_each_statistic_against_the_trace():
    sent = sent_statistics(RECORDS)
    trace = {"input_tokens": [50, 100, 100, 200, 300, 400], "output_tokens": [5, 10, 10, 20, 30, 40],
             "turns_per_session": [1, 1, 4], "sub_agents_per_session": [0, 0, 1], "tool_s": [2.0, 4.4],
             "hit_rate_infinite": 0.30, "hit_rate_lru": 0.20}
    built = {"hit_rate_infinite": 0.34, "hit_rate_lru": 0.27}
    cert = certificate_rows(trace, built, sent)
    rows = {r.statistic: r for r in cert.rows}
    assert rows["input_tokens p50"].trace == rows["input_tokens p50"].sent == 150.0 and rows["input_tokens p50"].within
    # tool time p50: trace 3.2 s, sent 3.0 s: -6.25 %, flagged; p99: 4.376 vs 3.98 (-9.05 %)
    assert rows["tool_s p50"].deviation == pytest.approx(3.0 / 3.2 - 1) and rows["tool_s p50"].within is False
    # hit rates in points: +4 pt within, +7 pt flagged; the measured rate is shown, not judged
    assert rows["prefix hit rate, infinite cache"].deviation == pytest.approx(0.04)
    assert rows["prefix hit rate, infinite cache"].within is True
    assert rows["prefix hit rate, LRU cache"].within is False
    measured = rows["measured hit rate (engine's cached tokens)"]
    assert measured.within is None and measured.sent == pytest.approx(288 / 1050) and measured.trace == 0.27
    assert cert.flagged == ["tool_s p50", "tool_s p90", "tool_s p99", "prefix hit rate, LRU cache"]


def test_a_zero_trace_value_is_within_only_when_the_sent_is_zero_too():
    sent = sent_statistics(RECORDS[:1])
    trace = {"input_tokens": [100], "output_tokens": [10], "turns_per_session": [1], "sub_agents_per_session": [1],
             "tool_s": [], "hit_rate_infinite": 0.0, "hit_rate_lru": 0.0}
    rows = {r.statistic: r for r in certificate_rows(trace, trace, sent).rows}
    assert rows["sub_agents_per_session p50"].within is False  # trace 1, sent 0: -100 %
    assert rows["tool_s p50"].trace is None and rows["tool_s p50"].within is None  # nothing to compare
