"""The judge fills each agentic ladder point's jobs and each capacity's jobs per hour, and the
verdict of an agentic run says how many agents the winner sustained (issue 40, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.loadgen.simulated import SimEngine
from results.schema import LADDER_FILE, LadderSummary
from tests.helpers import sim_ladder_run, sim_session_ladder_run

FAST = SimEngine("fast", slots=8, prefill_ms=50, tpot_ms=20, batch_slowdown=0.1)
SLOW = SimEngine("slow", slots=4, prefill_ms=80, tpot_ms=30, batch_slowdown=0.1)


def _ladder(run: Path) -> LadderSummary:
    return LadderSummary.model_validate_json((run / LADDER_FILE).read_text())


def test_each_point_counts_its_jobs_and_the_capacity_its_jobs_per_hour(tmp_path: Path) -> None:
    s = _ladder(sim_session_ladder_run(tmp_path, "r", {"fast": FAST, "slow": SLOW}, slos="ttft_p90=1000,tpot_p90=60",
                                       devices=2))
    slow = s.engines["slow"]
    lowest = slow.points[0]
    # one agent, three jobs back to back: four turns of 80 + 15 × 30 ms and three tool pauses of 0.5 s each
    job_s = 4 * (80 + 15 * 30) / 1000 + 3 * 0.5
    assert lowest.jobs is not None and lowest.jobs.completed == 3
    assert lowest.jobs.latency_s_p50 == pytest.approx(job_s)
    assert lowest.request_rate == pytest.approx(3 / (3 * job_s))
    assert lowest.jobs.per_hour_per_device == pytest.approx(3600 / job_s / 2)  # two devices
    assert lowest.jobs.turn_tps_p50 == pytest.approx(16 / 0.53)
    assert all(p.jobs is not None and p.jobs.completed == 3 * p.load for p in slow.points)
    cap = slow.capacity
    assert cap is not None and not cap.open and cap.bracket == (8, 16)  # its TPOT breaks past its 4 slots' worth
    assert cap.jobs_per_hour == pytest.approx(cap.request_rate * 3600 / 2)


def test_the_verdict_says_how_many_agents_the_winner_sustains(tmp_path: Path) -> None:
    s = _ladder(sim_session_ladder_run(tmp_path, "r", {"fast": FAST, "slow": SLOW}, slos="ttft_p90=1000,tpot_p90=60",
                                       loads=(1, 2, 4, 8, 16, 32)))
    cap = s.engines["fast"].capacity
    assert s.decision is not None and s.decision.winner == "fast" and cap is not None
    assert s.decision.sentence.startswith(f"fast: {cap.load_text} agents sustained ({cap.tps_text} output tok/s and "
                                          f"{cap.jobs_text} jobs/h per device")
    assert cap.jobs_text == f"{cap.jobs_per_hour:,.0f}" and len(s.decision.sentence) <= 320


def test_a_single_turn_run_counts_no_jobs(tmp_path: Path) -> None:
    s = _ladder(sim_ladder_run(tmp_path, "r", {"fast": FAST}, loads=(1, 2)))
    assert all(p.jobs is None for p in s.engines["fast"].points)
    assert s.engines["fast"].capacity.jobs_per_hour is None and s.engines["fast"].capacity.jobs_text == ""
    assert "agents sustained" not in s.decision.sentence


def test_the_eviction_cliff_lands_where_the_agents_context_outgrows_the_cache(tmp_path: Path) -> None:
    """An LRU of 72 blocks; each job's prompts grow to 16 blocks (64 + 64 t tokens, t < 4, 16 a
    block): 4 agents × 16 = 64 blocks fit, 8 × 16 = 128 do not. Below, the measured rate is the
    infinite cache's 60 % (4 + 8 + 12 of 40 blocks reused); at 8 agents it falls away: the cliff."""
    from harness.loadgen.simulated_sessions import AgentScript

    script = AgentScript(turns=4, first_prompt=64, growth=64, output_tokens=16, tool_ms=500)
    engine = SimEngine("lru", slots=32, prefill_ms=50, tpot_ms=20, batch_slowdown=0.0, cache_blocks=72)
    s = _ladder(sim_session_ladder_run(tmp_path, "r", {"lru": engine}, script, loads=(1, 2, 4, 8, 16), cache_optimal=0.6))
    ladder = s.engines["lru"]
    rates = {p.load: p.cache.measured_hit_rate for p in ladder.points}
    assert [rates[n] for n in (1, 2, 4)] == pytest.approx([0.6] * 3)
    assert rates[8] < 0.5 and rates[16] < rates[8]
    assert ladder.eviction_cliff == 8
    for p in ladder.points:
        assert p.cache.optimal_hit_rate == 0.6
        # the two throughputs differ by the reused tokens per second (one measurement: its span is its wall time)
        assert p.cache.total_tps_reused - p.cache.total_tps_computed == pytest.approx(p.cache.cached_tokens / p.wall_s)
    low = ladder.points[0].cache
    assert low.total_tps_reused / low.total_tps_computed > 2  # reused prefix tokens more than double the count here


def test_a_cache_that_fits_every_load_has_no_cliff(tmp_path: Path) -> None:
    engine = SimEngine("big", slots=32, prefill_ms=50, tpot_ms=20, batch_slowdown=0.0, cache_blocks=10_000)
    s = _ladder(sim_session_ladder_run(tmp_path, "r", {"big": engine}, loads=(1, 4, 16), cache_optimal=0.6))
    assert s.engines["big"].eviction_cliff is None
    assert all(p.cache.measured_hit_rate == pytest.approx(0.6) for p in s.engines["big"].points)
