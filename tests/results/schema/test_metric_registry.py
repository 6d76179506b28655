"""The metric registry (results/schema/metric_registry.py): registration order, one name per
metric, and a test's registration that never outlives it."""

from __future__ import annotations

import pytest

from harness.metrics import slo_metric_names  # importing harness.metrics registers the built-in metrics
from results.schema.metric_registry import Metric, metric, metrics, register, registered, slo_metrics, stat_name


def _zero(r) -> float:
    return 0.0


BUILT_IN = ["ttft", "tpot", "itl", "e2el", "ttft_from_scheduled", "e2el_from_scheduled", "ttfat", "connect"]
"""The metrics this project ships; one added since (its module in harness/metrics/definitions/) may stand among them."""


def test_the_built_in_metrics_in_the_order_every_table_shows_them() -> None:
    assert [m.name for m in metrics() if m.name in BUILT_IN] == BUILT_IN
    assert [m.name for m in slo_metrics() if m.name in BUILT_IN] == ["ttft", "tpot", "itl", "e2el"]
    assert [m.name for m in slo_metrics()] == list(slo_metric_names())
    assert metric("e2el").field == "e2el_ms" and metric("e2el").header == "E2E" and metric("e2el").label == "E2E latency"
    assert {m.name for m in metrics() if m.failures == "inf" and m.name in BUILT_IN} == {"ttft", "e2el"}  # the error-adjusted ones


def test_a_registration_ends_with_its_block_even_on_an_error() -> None:
    before = metrics()
    extra = Metric(name="zero", label="zero", value=_zero, source="test")
    with pytest.raises(RuntimeError):
        with registered(extra):
            assert metrics()[-1] is extra
            raise RuntimeError("boom")
    assert metrics() == before


def test_a_taken_name_and_a_bad_rule_are_refused() -> None:
    register(metric("ttft"))  # the same declaration again: nothing changes
    with pytest.raises(ValueError, match="already registered"):
        register(Metric(name="ttft", label="other", value=_zero, source="test"))
    with pytest.raises(ValueError, match="failures"):
        Metric(name="x", label="x", value=_zero, source="test", failures="sometimes")


def test_stat_names_are_the_stored_ones() -> None:
    assert [stat_name(p) for p in (50.0, 90.0, 99.0, 99.9, 100.0)] == ["p50", "p90", "p99", "p99_9", "max"]


def test_the_schema_fields_of_the_built_in_metrics_are_the_declared_ones() -> None:
    # the fields stay (their place in summary.json is fixed); each is a registered metric's, and no other
    from results.schema import Distribution, ErrorAdjusted, Metrics, Samples

    built_in = [m for m in metrics() if m.name in BUILT_IN]  # a metric added since is stored after the fields
    dists = {k for k, f in Metrics.model_fields.items() if f.annotation is Distribution}
    assert dists == {m.field for m in built_in}
    assert set(ErrorAdjusted.model_fields) == {m.field for m in built_in if m.failures == "inf"}
    assert set(Samples.model_fields) == {m.name for m in built_in if m.cdf}


@pytest.mark.parametrize(("value", "decimals", "shown"), [
    (137.55, 2, "138"),  # the reference engine's TPOT p99: 138 on the console, in report.md and the weighted table
    (13.755, 2, "13.8"), (1.3755, 2, "1.38"), (1.3755, 1, "1.4"), (0.13755, 2, "0.14"),
    (99.96, 2, "100"), (9.996, 2, "10.0"), (1234.5, 1, "1,234"), (12_345.6, 1, "12,346"),
    (float("inf"), 1, "∞"),
])
def test_a_figure_has_three_significant_digits_and_at_most_the_registry_s_decimals(
        value: float, decimals: int, shown: str) -> None:
    from results.schema.metric_registry import figure

    assert figure(value, decimals) == shown


def test_an_interval_is_printed_with_its_value_s_decimals() -> None:
    from results.schema.metric_registry import figure, metric_figure, metric_of, tps_figure

    assert figure(137.55, 2, 131.04, 145.91) == "138 [131–146]"
    assert figure(13.755, 2, 12.04, 105.2) == "13.8 [12.0–105.2]"  # the value's decimals, not each bound's own
    assert figure(13.755, 2, 13.0, 13.0) == "13.8"  # no interval formed (low == high): none shown
    assert metric_of("tpot_p99_ms") is metric_of("tpot_ms.p99") is metric_of("tpot_p99") is metric("tpot")
    assert metric_of("ttft_from_scheduled_p99").name == "ttft_from_scheduled"  # not ttft's
    assert metric_figure("tpot_ms.p99", 137.55) == "138" and metric_figure("ttft_p90", 8.123) == "8.1"
    assert tps_figure(74.26) == "74.3" and tps_figure(1234.56) == "1,234.6"
    with pytest.raises(KeyError):
        metric_of("nonsense_p99")


def test_dollars_and_jobs_have_one_printed_form() -> None:
    # the review saw $0.2992 in report.md and bench recommend beside ≤ $0.299 in the capacity table, $1.672 beside
    # $1.67, and 2,109.9 jobs/h in the jobs table beside 2,110 in the capacity table
    from results.schema.metric_registry import jobs_figure, usd_figure

    assert usd_figure(0.2992) == "$0.299" and usd_figure(1.672) == "$1.67" and usd_figure(0.34) == "$0.340"
    assert usd_figure(0.2992, 0.2781, 0.3253) == "$0.299 [0.278–0.325]" and usd_figure(0.000123) == "$0.0001"
    assert jobs_figure(2109.9) == "2,110" and jobs_figure(435.5) == "436" and jobs_figure(12.34) == "12.3"
