"""The reliability gate: an engine that fails more than the bound of its requests is never ranked."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.app.search.capacity import judge_probe
from harness.scoring.capacity.samples import Requests, measured_span_s
from harness.metrics import compute_metrics, parse_slos
from harness.metrics.failures import failure_rate, failure_text
from harness.scoring import ScorerError, recommend
from results.hardware import GiB, HardwareProfile

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run

CPU = HardwareProfile("CPU", "cpu", 64 * GiB)
DIED = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def half_dead(engine: str = "vllm", n: int = 20, fail: int = 18, ttft_ms: float = 5.0):
    """``n`` requests, the last ``fail`` failing with HTTP 500 and vLLM's engine-core message;
    the survivors are very fast (what a front end answers before its engine core died)."""
    records = make_records(engine, n, ttft_ms=ttft_ms, tpot_ms=1.0, fail=fail)
    for record in records:
        if not record.success:
            record.error_message = DIED
    return records


def run_with(tmp_path: Path, records_a, records_b, run_id: str = "r"):
    engines = {"vllm": ok_entry(records_a, CPU_ONLY), "sglang": ok_entry(records_b, CPU_ONLY)}
    return write_run(tmp_path, run_id, engines, records_a + records_b)


def test_failure_text_counts_and_quotes_the_server() -> None:
    metrics = compute_metrics(half_dead(), offered_rate=4.0)
    assert metrics.error_examples == {"http_500": DIED}
    assert failure_rate([metrics]) == pytest.approx(0.9)
    assert failure_text([metrics], bound=0.05) == (
        '18 of 20 requests failed (90%, above the 5% bound): http_500 ×18 ("EngineCore encountered an issue. '
        'See stack trace (above) for the root cause.")')


@pytest.mark.parametrize("slos", [None, "ttft_p99=1000"])
def test_a_mostly_failing_engine_is_eliminated_with_or_without_slos(tmp_path: Path, slos) -> None:
    healthy = make_records("sglang", 20, ttft_ms=80.0, tpot_ms=20.0)
    run = run_with(tmp_path, half_dead(), healthy)
    rec = recommend([run], hardware=CPU, slos=parse_slos(slos) if slos else [])
    assert rec.winner == "sglang"
    assert [row.engine for row in rec.ranking] == ["sglang"]
    assert rec.elimination_stage["vllm"] == "reliability"
    assert rec.eliminated["vllm"].startswith("18 of 20 requests failed (90%, above the 5% bound): http_500 ×18 "
                                             '("EngineCore encountered')
    assert "at chat at 4.00 req/s requested" in rec.eliminated["vllm"]
    assert "vllm excluded: 18 of 20 requests failed" in rec.deciding_constraint


def test_the_bound_is_configurable_and_checked(tmp_path: Path) -> None:
    healthy = make_records("sglang", 20, ttft_ms=80.0, tpot_ms=20.0)
    run = run_with(tmp_path, half_dead(fail=1), healthy)  # 1 of 20 = 5%: at the bound, not above it
    assert "vllm" in {row.engine for row in recommend([run], hardware=CPU).ranking}
    strict = recommend([run], hardware=CPU, max_failure_rate=0.0)
    assert strict.elimination_stage["vllm"] == "reliability"
    assert "(5%, where none may fail)" in strict.eliminated["vllm"]
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ScorerError, match="max_failure_rate must be in"):
            recommend([run], hardware=CPU, max_failure_rate=bad)


def test_every_engine_failing_leaves_no_winner(tmp_path: Path) -> None:
    run = run_with(tmp_path, half_dead("vllm"), half_dead("sglang", fail=10))
    rec = recommend([run], hardware=CPU)
    assert rec.winner is None and rec.ranking == []
    assert rec.elimination_stage == {"vllm": "reliability", "sglang": "reliability"}
    assert rec.eliminated["sglang"].startswith("10 of 20 requests failed (50%")


def test_a_capacity_probe_that_fails_requests_does_not_pass() -> None:
    def judged(records, bound=0.05):
        metrics = compute_metrics(records, offered_rate=4.0)
        return judge_probe(1.0, [Requests.of(records, measured_span_s(records))], parse_slos("ttft_p99=5000"), metrics,
                           max_failure_rate=bound)

    pr = judged(half_dead(n=20, fail=4))  # 20 %: the Wilson lower bound (8 %) is above 5 %
    assert (pr.meets_slo, pr.saturated) == (False, False)
    assert pr.reason.startswith("4 of 20 requests failed (20%, above the 5% bound)")
    assert judged(half_dead(n=20, fail=4), bound=0.25).meets_slo is False  # the error-adjusted p99 lands on a failure
    assert judged(half_dead(n=20, fail=0)).meets_slo is True
