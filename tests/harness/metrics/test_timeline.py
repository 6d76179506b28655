"""Timelines: exact bucket arithmetic on records with known times, and the report's plots."""

from __future__ import annotations

import pytest

from harness.metrics.timeline import bucket_width, timeline, timelines
from results.schema import RequestRecord

S = 1_000_000_000


def rec(i: int, send_s: float, first_s: float, last_s: float, chunks: int, tokens: int, ok: bool = True,
        repeat: int = 0) -> RequestRecord:
    send, first, last = int(send_s * S), int(first_s * S), int(last_s * S)
    step = (last - first) // max(1, chunks - 1)
    times = [first + k * step for k in range(chunks)] if ok else []
    return RequestRecord(request_id=f"r{i}", engine="e", workload="w", scheduled_ns=send, send_ns=send,
                         first_token_ns=first if ok else None, last_token_ns=times[-1] if ok else None,
                         end_ns=(times[-1] if ok else last), chunk_times_ns=times,
                         output_tokens_server=tokens if ok else None, success=ok, repeat=repeat,
                         error_class=None if ok else "http_500")


def test_buckets_are_exact() -> None:
    # r0: sent at 0, first token 0.5 s, last 1.5 s, 2 chunks of 5 tokens; r1: sent 1.0, first 1.2, ends 2.5 (1 chunk)
    # r2 fails at 2.9 s after being sent at 2.0
    records = [rec(0, 0.0, 0.5, 1.5, 2, 10), rec(1, 1.0, 1.2, 2.5, 1, 4), rec(2, 2.0, 2.9, 2.9, 0, 0, ok=False)]
    line = timeline(records)
    assert line is not None and line.bucket_s == 1.0 and len(line.in_flight) == 3
    # in flight (a request ends at its last token): [0,1): r0 the whole second = 1.0; [1,2): r0 until 1.5
    # = 0.5 and r1 from 1.0 to 1.2 (its single chunk) = 0.2; [2,3): r2 from 2.0 until it failed at 2.9 = 0.9
    assert line.in_flight == pytest.approx([1.0, 0.5 + 0.2, 0.9])
    assert line.output_tps == pytest.approx([5.0, 5.0 + 4.0, 0.0])  # 10 tokens over 2 chunks, 4 in one chunk
    assert line.ttft_p50_ms == [pytest.approx(500.0), pytest.approx(200.0), None]
    assert (line.completed, line.failed) == ([0, 2, 0], [0, 0, 1])
    assert sum(line.output_tps) * line.bucket_s == pytest.approx(14.0)  # every token counted once


def test_long_runs_use_wider_buckets_and_repeats_get_their_own() -> None:
    assert bucket_width(30.0) == 1.0 and bucket_width(601.0) == 2.0 and bucket_width(4000.0) == 10.0
    records = [rec(0, 0.0, 0.1, 0.2, 2, 2), rec(1, 100.0, 100.1, 100.3, 2, 2, repeat=1)]
    lines = timelines(records)
    assert [line.repeat for line in lines] == [0, 1] and all(len(line.in_flight) == 1 for line in lines)
    assert timeline([]) is None


def test_the_report_shows_the_run_over_time(tmp_path) -> None:
    from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run
    from harness.app.run.reporting import write_run_reports

    records = make_records("own", 12, ttft_ms=50.0, tpot_ms=20.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(records, CPU_ONLY)}, records)
    md, html = write_run_reports(run.run_dir)
    text = md.read_text()
    assert "## Over time" in text and "report-plots/timeline.png" in text and "report-plots/requests.png" in text
    assert (run.run_dir / "report-plots" / "timeline.png").stat().st_size > 1000
    assert html.read_text().count('class="plot" alt="per-request timeline"') == 1
