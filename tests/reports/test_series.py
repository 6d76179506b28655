"""reports/series.py: why each capacity ended, read from the engine's own series at its failing
load, and its chart."""

from __future__ import annotations

from results.schema import CapacityAtSLO, EngineLadder, EngineStatus, LadderPoint
from results.schema.series import EngineSeries, SeriesSample

from reports.series import series_png, why_line


def ladder(samples_at_8: list[SeriesSample]) -> EngineLadder:
    calm = EngineSeries(parser="vllm", samples=[SeriesSample(t_s=1.0, kv_cache_usage=0.3, running=4, waiting=0, preemptions=0)])
    return EngineLadder(status=EngineStatus.OK, points=[
        LadderPoint(index=0, load=4, passed=True, series=[calm]),
        LadderPoint(index=1, load=8, series=[EngineSeries(parser="vllm", samples=samples_at_8)])],
        capacity=CapacityAtSLO(output_tps=100.0, load=6.0, bracket=(4, 8), binding="ttft_p90"))


def test_kv_cache_full_and_preemptions() -> None:
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.7, running=8, waiting=0, preemptions=5),
                SeriesSample(t_s=2.0, kv_cache_usage=1.0, running=6, waiting=2, preemptions=23)])
    assert why_line("vllm", e) == ("vllm: KV cache 100% and 23 preemptions and up to 2 requests waiting beside 8 running "
                                   "at 8 in flight (where ttft_p90 broke)")


def test_queueing_without_memory_pressure() -> None:
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.4, running=4, waiting=4, preemptions=0)])
    assert why_line("own", e) == "own: up to 4 requests waiting beside 4 running at 8 in flight (where ttft_p90 broke)"


def test_compute_bound_when_neither_shows() -> None:
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.2, running=8, waiting=0, preemptions=0)])
    assert why_line("own", e) == ("own: KV cache at most 20%, no preemption and no request waiting at 8 in flight "
                                  "(where ttft_p90 broke): compute-bound (every running request's steps got slower)")


def test_no_series_or_no_failing_load_says_nothing() -> None:
    assert why_line("x", ladder([])) == ""
    open_ended = ladder([SeriesSample(t_s=1.0, kv_cache_usage=1.0)])
    open_ended.capacity.bracket = (8, None)
    assert why_line("x", open_ended) == ""


def test_the_chart_is_a_png() -> None:
    png = series_png("vllm", ladder([SeriesSample(t_s=1.0, kv_cache_usage=1.0, running=8, waiting=2, preemptions=3)]))
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    assert series_png("vllm", ladder([])) is not None  # the point at 4 still has its series


def test_the_acceptance_rate_joins_the_line_and_the_chart_where_the_engine_speculates() -> None:
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.2, running=8, waiting=0, preemptions=0, spec_acceptance_rate=0.5),
                SeriesSample(t_s=2.0, kv_cache_usage=0.2, running=8, waiting=0, preemptions=0, spec_acceptance_rate=0.34)])
    assert why_line("own", e) == ("own: KV cache at most 20%, no preemption and no request waiting at 8 in flight "
                                  "(where ttft_p90 broke): compute-bound (every running request's steps got slower); "
                                  "speculative drafts 34% accepted")
    assert series_png("own", e)[:4] == b"\x89PNG"


def test_one_request_waiting_is_one_request() -> None:
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.4, running=4, waiting=1, preemptions=0)])
    assert why_line("own", e) == "own: up to 1 request waiting beside 4 running at 8 in flight (where ttft_p90 broke)"


def test_a_ladder_runs_counters_table_reads_its_series_at_the_capacity_point(tmp_path) -> None:  # noqa: ANN001
    """A ladder run leaves summary.json's ``engine_metrics`` empty: the report's "Prefix caching and
    speculative decoding" table reads the engine's series at the point its metrics were read at, and
    says so, instead of "the engine reports no counter"."""
    from reports.context import build_context
    from results.schema import LADDER_FILE, LadderSummary
    from results.store import load_run, write_model_atomic
    from tests.helpers import make_records, ok_entry, write_run

    first = EngineSeries(parser="own", samples=[SeriesSample(t_s=1.0, kv_cache_usage=0.5, preemptions=1, prefix_hit_rate=0.4),
                                                SeriesSample(t_s=2.0, kv_cache_usage=0.8, preemptions=2, prefix_hit_rate=0.62,
                                                             spec_acceptance_rate=0.71)])
    again = EngineSeries(parser="own", samples=[SeriesSample(t_s=1.0, kv_cache_usage=0.6, preemptions=3, prefix_hit_rate=0.66)])
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=1.0, prefix_hit_rate=0.1)])  # the failing point: not the one read
    e.points[0].series = [first, again]
    records = make_records("own", 8, ttft_ms=50.0, tpot_ms=10.0)
    run = write_run(tmp_path, "lad", {"own": ok_entry(records, None) | {"ladder_point": 0}}, records)
    write_model_atomic(run.run_dir / LADDER_FILE, LadderSummary(run_id="lad", workload="chat", engines={"own": e}))
    row = next(r for r in build_context([load_run(run.run_dir)], None)["engine_stats"] if r["label"].startswith("own"))
    assert (row["prefix_cache_hit_rate"], row["spec_acceptance_rate"], row["num_preemptions"], row["kv_cache_usage"]) == \
        ("66.0%", "71.0%", "5", "80.0%")  # the last measurement's hit rate; preemptions summed; KV usage its peak
    assert row["scope"].startswith("its /metrics series at its capacity point (4 in flight, 2 measurements; ladder.json)")


def test_a_load_whose_requests_failed_is_not_called_compute_bound() -> None:
    # the capacity ended on the error-rate bound (e.g. HTTP 400s), with calm memory and no queue
    e = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.2, running=8, waiting=0, preemptions=0)])
    e.capacity.binding = "errors"
    assert why_line("own", e) == ("own: KV cache at most 20%, no preemption and no request waiting at 8 in flight: its "
                                  "requests failed there (the error-rate bound broke, not a latency SLO)")
    busy = ladder([SeriesSample(t_s=1.0, kv_cache_usage=0.4, running=4, waiting=4, preemptions=0)])
    busy.capacity.binding = "errors"
    assert why_line("own", busy) == ("own: up to 4 requests waiting beside 4 running at 8 in flight: its requests "
                                     "failed there (the error-rate bound broke, not a latency SLO)")
