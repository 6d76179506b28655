"""The replay-fidelity certificate (harness/metrics/replay.py) on known sessions and records, by hand."""

from __future__ import annotations

import pytest

from types import SimpleNamespace

from results.schema import RequestRecord
from results.schema.records import STOPPED_PHASE
from harness.metrics.replay import certificate_rows, fair_sides, sent_statistics

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


def test_the_certificate_judges_what_was_sent_against_the_sessions_built_not_the_trace():
    sent = sent_statistics(RECORDS)
    built = {"input_tokens": [50, 100, 100, 200, 300, 400], "output_tokens": [5, 10, 10, 20, 30, 40],
             "turns_per_session": [1, 1, 4], "sub_agents_per_session": [0, 0, 1], "tool_s": [2.0, 4.4],
             "hit_rate_infinite": 0.34, "hit_rate_lru": 0.27}
    # the whole trace: longer prompts than this sample drew, and better hit rates
    trace = dict(built, input_tokens=[100, 200, 300, 400, 500, 600], hit_rate_infinite=0.30, hit_rate_lru=0.20)
    cert = certificate_rows(trace, built, sent, measurements=2)
    rows = {r.statistic: r for r in cert.rows}
    p50 = rows["input_tokens p50"]
    assert (p50.trace, p50.built, p50.sent, p50.deviation, p50.within) == (350.0, 150.0, 150.0, 0.0, True)
    assert p50.coverage == pytest.approx(150 / 350 - 1)  # the sample against the trace: shown, not judged
    # tool time p50: built 3.2 s, sent 3.0 s: -6.25 %, flagged; p99: 4.376 vs 3.98 (-9.05 %)
    assert rows["tool_s p50"].deviation == pytest.approx(3.0 / 3.2 - 1) and rows["tool_s p50"].within is False
    # theoretical hit rates: built against the trace in points (+4, +7), coverage only
    lru = rows["prefix hit rate, LRU cache"]
    assert lru.coverage == pytest.approx(0.07) and lru.within is None and lru.sent is None
    measured = rows["measured hit rate (engine's cached tokens)"]
    assert measured.within is None and measured.sent == pytest.approx(288 / 1050) and measured.built == 0.27
    assert cert.flagged == ["tool_s p50", "tool_s p90", "tool_s p99"] and cert.measurements == 2


def test_a_measurement_stopped_early_answers_for_the_sessions_it_started_and_did_not_cut():
    sessions = [SimpleNamespace(session_id=f"s{i}") for i in range(4)]
    stopped = rec("s1", 1, 0, 3.0, 3.5, 200, 20).model_copy(update={"phase": STOPPED_PHASE, "success": False})
    recs = [rec("s0", 0, 0, 0.0, 1.0, 100, 10), rec("s1", 0, 0, 0.0, 1.0, 100, 10), stopped]
    sent, kept, cut, failed = fair_sides(recs, sessions)
    # s1 cut in flight: on neither side; s2, s3 never started: not the replayer's
    assert [r.session_id for r in sent] == ["s0"] and [s.session_id for s in kept] == ["s0"] and (cut, failed) == (1, 0)
    # a measurement that was not stopped answers for every session built (one never started is dropped)
    sent, kept, cut, failed = fair_sides(recs[:2], sessions)
    assert len(sent) == 2 and len(kept) == 4 and (cut, failed) == (0, 0)


def test_a_session_with_a_request_the_engine_failed_is_on_neither_side():
    # make bench's own engine refused Mooncake prompts longer than its 4,096-token context (HTTP 400): the
    # replayer sent them as built, and a session cannot go on without the failed turn's reply. Judged on the
    # successful requests against every session built, a faithful replay read input p50 -89 % and turns -50 %
    # s3 never started: the SLO watch stopped the measurement on those errors (no request in flight to cut), so
    # it answers for the sessions it started
    sessions = [SimpleNamespace(session_id=f"s{i}") for i in range(4)]
    refused = rec("s1", 0, 0, 0.0, 0.1, None, None, ok=False).model_copy(update={"input_tokens_expected": 19_730})
    recs = [rec("s0", 0, 0, 0.0, 1.0, 100, 10), refused, rec("s2", 0, 0, 0.0, 1.0, 300, 30)]
    sent, kept, cut, failed = fair_sides(recs, sessions)
    assert [r.session_id for r in sent] == ["s0", "s2"] and [s.session_id for s in kept] == ["s0", "s2"]
    assert (cut, failed) == (0, 1)


def test_a_zero_built_value_is_within_only_when_the_sent_is_zero_too():
    sent = sent_statistics(RECORDS[:1])
    trace = {"input_tokens": [100], "output_tokens": [10], "turns_per_session": [1], "sub_agents_per_session": [1],
             "tool_s": [], "hit_rate_infinite": 0.0, "hit_rate_lru": 0.0}
    rows = {r.statistic: r for r in certificate_rows(trace, trace, sent).rows}
    assert rows["sub_agents_per_session p50"].within is False  # built 1, sent 0: -100 %
    assert rows["tool_s p50"].trace is None and rows["tool_s p50"].within is None  # nothing to compare
