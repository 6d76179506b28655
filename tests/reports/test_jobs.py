"""An agentic run's report shows jobs as the agent user sees them: the job frontier (jobs/h per
device against jobs/h per user) beside the request-level frontier, jobs/h in the capacity table,
and each point's jobs; a single-turn run's report shows none of it (issue 40, item 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from harness.app.run.reporting import write_run_reports
from harness.loadgen.simulated import SimEngine
from reports.jobs import job_frontier_png, job_rows
from results.schema import LADDER_FILE, LadderSummary
from tests.helpers import sim_ladder_run, sim_session_ladder_run

ENGINES = {"fast": SimEngine("fast", slots=8, prefill_ms=50, tpot_ms=20, batch_slowdown=0.1),
           "slow": SimEngine("slow", slots=4, prefill_ms=80, tpot_ms=30, batch_slowdown=0.1)}


def test_the_report_shows_the_job_frontier_beside_the_request_level_one(tmp_path: Path) -> None:
    run = sim_session_ladder_run(tmp_path, "r", ENGINES, slos="ttft_p90=1000,tpot_p90=60")
    md_path, html_path = write_run_reports(run)
    md = md_path.read_text()
    chart = run / "report-plots" / "job_frontier.png"
    assert chart.stat().st_size > 10_000
    assert md.index("report-plots/frontier.png") < md.index("report-plots/job_frontier.png") < md.index("| engine | capacity")
    s = LadderSummary.model_validate_json((run / LADDER_FILE).read_text())
    header = next(line for line in md.splitlines() if line.startswith("| engine | capacity"))
    assert "jobs/h per device" in header
    row = next(line for line in md.splitlines() if line.startswith("| slow |"))
    assert f"| {s.engines['slow'].capacity.jobs_text} |" in row
    assert "### Jobs as the agent user sees them" in md and "jobs/h per user" in md
    assert html_path.read_text().count("data:image/png;base64,") >= 2
    img = np.asarray(Image.open(chart).convert("RGB")).astype(int)
    blue = (np.abs(img - np.array((31, 119, 180))).sum(axis=2) < 30).sum()
    assert blue > 300  # the first engine's curve, in the request-level frontier's colour


def test_each_point_is_a_row_of_the_jobs_table(tmp_path: Path) -> None:
    s = LadderSummary.model_validate_json((sim_session_ladder_run(tmp_path, "r", ENGINES, loads=(1, 2)) / LADDER_FILE)
                                          .read_text())
    rows = job_rows(s)
    assert [(r["engine"], r["load"], r["completed"]) for r in rows] == [("fast", "1", 3), ("fast", "2", 6),
                                                                       ("slow", "1", 3), ("slow", "2", 6)]
    job_s = 4 * 0.35 + 1.5  # fast alone: four turns of 0.35 s, three tool pauses of 0.5 s
    assert rows[0]["latency"] == f"{job_s:.1f} / {job_s:.1f}" and rows[0]["per_user"] == f"{3600 / job_s:,.0f}"  # the one form: 3 digits


def test_a_single_turn_run_has_no_job_frontier(tmp_path: Path) -> None:
    run = sim_ladder_run(tmp_path, "r", {"fast": ENGINES["fast"]}, loads=(1, 2))
    s = LadderSummary.model_validate_json((run / LADDER_FILE).read_text())
    assert job_frontier_png(s) is None and job_rows(s) == []
    md_path, _ = write_run_reports(run)
    md = md_path.read_text()
    assert "job_frontier" not in md and "jobs/h" not in md


def test_the_jobs_table_marks_the_eviction_cliff_and_counts_throughput_both_ways(tmp_path: Path) -> None:
    from harness.loadgen.simulated_sessions import AgentScript

    engine = SimEngine("lru", slots=32, prefill_ms=50, tpot_ms=20, batch_slowdown=0.0, cache_blocks=72)
    run = sim_session_ladder_run(tmp_path, "r", {"lru": engine}, AgentScript(), loads=(1, 4, 8), cache_optimal=0.6)
    md = write_run_reports(run)[0].read_text()
    assert "prefix hit rate: measured / infinite cache" in md and "reused prefix counted / computed only" in md
    row = next(line for line in md.splitlines() if line.startswith("| lru | 8 ← eviction cliff |"))
    assert "17.5% / 60.0%" in row  # 8 agents × 16 blocks in a cache of 72: the LRU rate of these prompts
    assert next(line for line in md.splitlines() if line.startswith("| lru | 4 |")).count("60.0% / 60.0%") == 1
    assert "lru's prefix cache falls away at 8 agents in flight: measured hit rate 17.5% against the infinite cache's 60.0%" in md
