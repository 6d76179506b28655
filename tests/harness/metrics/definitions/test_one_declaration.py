"""A metric is one declaration (issue 42): a metric declared in this file alone, registered for a
test's duration, shows in every output - the per-run summary, the stored (serialised) summary,
``--slo`` parsing and the SLO judges, the console table, the report (Markdown and HTML), the
headline intervals and ``summary.csv`` - and is gone from all of them afterwards."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from harness.app.cli.summary import print_summary
from harness.metrics import SLO, SLOError, compute_metrics, meets_slos, parse_slos, slo_percentile_value
from harness.metrics.repeats import headline_intervals
from harness.scoring.formatting import slo_text
from harness.scoring.capacity.frontier import SloWatch, point_stats, slo_value
from harness.scoring.capacity.samples import Requests
from reports.context import cdf_panels, summary_columns
from reports.writer import write_reports
from results.export import headline
from results.schema import Metrics, RequestRecord
from results.schema.metric_registry import Metric, metrics, registered
from results.store import export_run
from tests.helpers import NS_PER_MS, OWN_CAPS, make_records, ok_entry, write_run


def queue_ms(r: RequestRecord) -> float | None:
    """Client-side queueing (ms): send − scheduled send; None for a request never sent."""
    return None if r.send_ns is None else (r.send_ns - r.scheduled_ns) / NS_PER_MS


QUEUE = Metric(name="queue", label="client queueing", short="Queue", value=queue_ms,
               source="send − scheduled (this test)", slo_percentiles=(90.0, 99.0), failures="inf",
               report=("p50", "p99"), console=("p99",), csv=("p99",), intervals=("p99",), cdf=True)


@pytest.fixture
def queue():
    """QUEUE registered for one test; the registry is as before afterwards."""
    before = metrics()
    with registered(QUEUE):
        assert metrics() == (*before, QUEUE)
        yield QUEUE
    assert metrics() == before


def _records(fail: int = 0) -> list[RequestRecord]:
    """40 requests whose queueing is 1, 2, 3, 4, 5 ms in turn (the last ``fail`` failed)."""
    records = make_records("x", 40, ttft_ms=100, tpot_ms=10, fail=fail)
    for i, r in enumerate(records):
        r.scheduled_ns = r.send_ns - (i % 5 + 1) * NS_PER_MS
    return records


def test_the_summary_and_the_stored_summary_carry_it(queue) -> None:
    m = compute_metrics(_records(), parse_slos("queue_p90=4.5"))
    assert m.queue_ms.p50 == 3.0 and m.queue_ms.p99 == 5.0 and m.queue_ms.max == 5.0
    assert m.samples_ms.queue == sorted([1.0, 2.0, 3.0, 4.0, 5.0] * 8)
    assert m.goodput.good_requests == 32  # 5 ms of queueing breaks the per-request SLO
    stored = json.loads(m.model_dump_json())
    assert list(stored)[-1] == "queue_ms" and stored["queue_ms"]["p99"] == 5.0  # after the fixed fields
    assert stored["error_adjusted"]["queue_ms"]["p50"] == 3.0 and stored["samples_ms"]["queue"][0] == 1.0
    assert Metrics.model_validate(stored) == m  # read back as a Distribution
    failed = compute_metrics(_records(fail=4))
    assert failed.error_adjusted.queue_ms.p99 is None  # failures count as +inf: this metric says so


def test_slo_parsing_and_every_judge_read_it(queue) -> None:
    (slo,) = parse_slos("queue_p99=4.5")
    assert slo == SLO("queue", 4.5, 99.0) and slo.key == "queue_p99"
    with pytest.raises(SLOError, match="use p90 or p99"):  # its own percentiles
        parse_slos("queue_p50=4")
    with pytest.raises(SLOError, match="write queue_p90=4 or queue_p99=4"):
        parse_slos("queue=4")
    records = _records(fail=1)
    m = compute_metrics(records, [slo])
    assert slo_percentile_value(m, slo) == m.error_adjusted.queue_ms.p99  # a failure: error-adjusted
    assert meets_slos(records[0], [slo]) and not meets_slos(records[4], [slo]) and not meets_slos(records[-1], [slo])
    assert slo_text(slo) == "p99 client queueing ≤ 4.5 ms"
    req = Requests.of(records, 10.0, steady=False)
    assert slo_value(req, SLO("queue", 4.5, 90.0)) == pytest.approx(5.0)
    judged = point_stats(1, req, [slo], max_failure_rate=0.5)
    assert judged.values == {"queue_p99": float("inf")} and judged.binding == "queue_p99" and not judged.passed
    watch = SloWatch([SLO("queue", 4.5, 90.0)], planned=len(records))
    assert any(watch(r) for r in sorted(records, key=lambda r: r.end_ns))  # 8 of 40 over: p90 cannot hold


def test_the_console_report_and_csv_show_it(queue, tmp_path) -> None:
    records = _records()
    entry = ok_entry(records, OWN_CAPS, slos="queue_p99=4.5")
    entry["intervals"] = {k: ci.model_dump(mode="json") for k, ci in headline_intervals(
        [compute_metrics(records)], records).items()}
    assert "queue_ms.p99" in entry["intervals"]
    run = write_run(tmp_path, "r1", {"x": entry}, records, slos={"queue_p99": 4.5})
    assert run.summary.engines["x"].metrics.queue_ms.p99 == 5.0

    out = io.StringIO()
    print_summary(run.summary, Console(file=out, width=300, color_system=None))
    header, row = [line for line in out.getvalue().splitlines() if "Queue p99" in line or line.startswith("│ x ")][:2]
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[[c.strip() for c in header.strip("┃").split("┃")].index("Queue p99")].startswith("5.0")

    assert ("queue_p99", "Queue p99 ms", "queue_ms.p99", "metric") in summary_columns()
    assert ("queue", "client queueing (ms)") in cdf_panels()
    (tmp_path / "report").mkdir()
    md, html = write_reports([run], None, tmp_path / "report")
    lines = md.read_text().splitlines()
    header = _cells(next(line for line in lines if "Queue p50 ms" in line))
    row = _cells(next(line for line in lines if line.startswith("| x |")))
    assert header[-3:] == ["Queue p50 ms", "Queue p99 ms", "offered / achieved rate"]  # after E2E, before the rate
    assert row[header.index("Queue p50 ms")] == "3.0" and row[header.index("Queue p99 ms")].startswith("5.0")
    assert "<th>Queue p50 ms</th><th>Queue p99 ms</th>" in html.read_text()

    assert headline()["queue_ms.p99"] == "queue_p99_ms"
    export_run(run.run_dir)
    csv = (run.run_dir / "summary.csv").read_text().splitlines()
    columns, values = csv[0].split(","), csv[1].split(",")
    assert values[columns.index("queue_p99_ms")] == "5.0"
    assert columns.index("queue_p99_ms") == columns.index("e2el_p99_ms_high") + 1  # after the built-ins


def _cells(line: str) -> list[str]:
    """The cells of one Markdown table row."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_unregistered_it_is_nowhere(tmp_path) -> None:
    with registered(QUEUE):
        pass
    with pytest.raises(SLOError, match="unknown SLO"):
        parse_slos("queue_p99=4")
    m = compute_metrics(_records())
    assert "queue_ms" not in m.model_dump() and "queue" not in m.samples_ms.model_dump()
    assert not any(k.startswith("queue") for k, *_ in summary_columns()) and "queue_ms.p99" not in headline()
    assert "queue_ms" not in Metrics.model_validate({"queue_ms": {"p99": 1.0}}).model_dump()  # unknown keys dropped
