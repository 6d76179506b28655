"""The prefix cache accounted for (issue 40, item 3): the measured hit rate from the records'
cached tokens, throughput with and without reused prefix tokens, and where the eviction cliff is."""

from __future__ import annotations

import pytest

from harness.metrics.cache import cache_figures, eviction_cliff
from results.schema import RequestRecord


def _rec(i: int, prompt: int, cached: int | None, out: int = 10, ok: bool = True) -> RequestRecord:
    return RequestRecord(request_id=str(i), engine="e", workload="agentic", scheduled_ns=0, success=ok,
                         input_tokens_server=prompt, cached_tokens_server=cached, output_tokens_server=out)


def test_the_hit_rate_and_both_throughputs_come_from_the_records() -> None:
    records = [_rec(0, 100, 0), _rec(1, 200, 100), _rec(2, 300, 200), _rec(3, 1000, 1000, ok=False)]
    f = cache_figures(records, span_s=2.0, devices=2, optimal=0.6)
    assert (f.prompt_tokens, f.cached_tokens) == (600, 300)
    assert f.measured_hit_rate == pytest.approx(0.5)  # the failed request counts nowhere
    assert f.total_tps_reused == pytest.approx((600 + 30) / 2.0 / 2)  # reused prefix tokens counted
    assert f.total_tps_computed == pytest.approx((300 + 30) / 2.0 / 2)  # only the tokens the engine computed
    assert f.optimal_hit_rate == 0.6


def test_an_engine_that_reports_no_cached_tokens_has_no_measured_rate() -> None:
    f = cache_figures([_rec(0, 100, None), _rec(1, 200, None)], span_s=1.0)
    assert f.measured_hit_rate is None and f.cached_tokens is None and f.total_tps_computed is None
    assert f.total_tps_reused == pytest.approx(320.0)
    assert cache_figures([], span_s=0.0).total_tps_reused is None


@pytest.mark.parametrize(("points", "cliff"), [
    ([(1, 0.60, 0.6), (2, 0.58, 0.6), (4, 0.55, 0.6), (8, 0.20, 0.6), (16, 0.02, 0.6)], 8),
    ([(1, 0.60, 0.6), (2, 0.49, 0.6)], 2),  # 11 points below: fallen
    ([(1, 0.60, 0.6), (2, 0.51, 0.6)], None),  # 9 points below: within
    ([(1, 0.10, 0.6), (2, 0.05, 0.6)], None),  # low from the lowest load: never held, no cliff
    ([(4, None, 0.6), (1, 0.6, 0.6), (8, 0.1, 0.6)], 8),  # unordered, a point without a rate passed over
    ([(1, 0.6, None), (2, 0.1, None)], None),  # no optimal to fall from
])
def test_the_cliff_is_the_first_load_that_falls_away_after_the_cache_held(points: list, cliff: int | None) -> None:
    assert eviction_cliff(points) == cliff
