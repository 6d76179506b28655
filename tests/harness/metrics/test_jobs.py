"""Jobs as the agent user sees them (issue 40, item 4), on scripted agent sessions whose times are
known: job latency, jobs per hour per device and per user, per-turn interactivity with tool time
excluded."""

from __future__ import annotations

import pytest

from harness.loadgen.simulated import SimEngine
from harness.loadgen.simulated_sessions import AgentScript, simulate_sessions
from harness.metrics.jobs import job_figures, job_latencies_s, turn_tps

ENGINE = SimEngine("e", slots=8, prefill_ms=50, tpot_ms=20, batch_slowdown=0.0)
SCRIPT = AgentScript(turns=4, output_tokens=16, tool_ms=500)
TURN_S = (50 + 15 * 20) / 1000  # prefill, then 15 more tokens at 20 ms: 0.35 s a turn
JOB_S = 4 * TURN_S + 3 * 0.5  # four turns and three tool pauses: 2.9 s


def test_a_job_is_its_turns_and_the_tool_time_between_them() -> None:
    records, duration, _ = simulate_sessions(ENGINE, SCRIPT, concurrency=2, sessions=4)
    assert job_latencies_s(records) == pytest.approx([JOB_S] * 4)
    assert turn_tps(records) == pytest.approx([16 / TURN_S] * 16)  # the tool time is in no turn's interactivity
    figures = job_figures(records, sessions_per_s=4 / duration, devices=2)
    assert duration == pytest.approx(2 * JOB_S)  # two agents, two jobs each, back to back
    assert figures.completed == 4
    assert figures.per_hour_per_device == pytest.approx(4 / (2 * JOB_S) * 3600 / 2)
    assert figures.per_hour_per_user == pytest.approx(3600 / JOB_S)
    assert (figures.latency_s_p50, figures.latency_s_p90) == pytest.approx((JOB_S, JOB_S))
    assert (figures.turn_tps_p50, figures.turn_tps_p10) == pytest.approx((16 / TURN_S, 16 / TURN_S))
    # Little's law: jobs/h × devices = agents in flight × jobs/h per user
    assert figures.per_hour_per_device * 2 == pytest.approx(2 * figures.per_hour_per_user)


def test_a_failed_or_cut_session_is_no_finished_job() -> None:
    records, _, _ = simulate_sessions(ENGINE, SCRIPT, concurrency=2, sessions=4)
    failed = next(r for r in records if r.session_id == "s1" and r.turn_id == 2)
    failed.success, failed.error_class = False, "http_500"
    assert len(job_latencies_s(records)) == 3
    assert len(job_latencies_s(records, cut=[(0, None, "s2")])) == 2  # a session cut when its point stopped early
    assert len(turn_tps(records)) == 15  # the failed turn has no interactivity


def test_queued_turns_lengthen_the_job_and_slow_the_turn() -> None:
    """One slot, two agents: a turn can wait for the other agent's turn, so jobs take longer than
    alone, and that wait (before the first token) counts in the turn's interactivity."""
    one = SimEngine("one", slots=1, prefill_ms=50, tpot_ms=20, batch_slowdown=0.0)
    records, _, _ = simulate_sessions(one, AgentScript(turns=2, tool_ms=100), concurrency=2, sessions=2)
    # s0: 0–0.35, its tool to 0.45, waits for s1's first turn (0.35–0.70), runs 0.70–1.05;
    # s1: waits 0.35, runs to 0.70, its tool to 0.80, waits for s0 (to 1.05), runs to 1.40
    assert sorted(job_latencies_s(records)) == pytest.approx([3 * TURN_S, 4 * TURN_S])  # alone: 2 × 0.35 + 0.1
    assert min(turn_tps(records)) == pytest.approx(16 / (2 * TURN_S))  # s1's first turn: a turn's wait, then its own


def test_no_finished_job_gives_no_figures() -> None:
    figures = job_figures([], sessions_per_s=None)
    assert figures.completed == 0 and figures.per_hour_per_user is None and figures.latency_s_p50 is None
    with pytest.raises(ValueError, match="devices must be >= 1"):
        job_figures([], sessions_per_s=1.0, devices=0)
