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

# one test writes a probe metric module into harness/metrics/definitions/ for a moment, which every process
# importing the package then registers: run alone (make test), never beside another worker's bench processes
pytestmark = pytest.mark.serial


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
    assert "![TTFT, TPOT, ITL, E2E, Queue latency CDFs](" in md.read_text()  # the figure's text names the registered panels
    assert 'alt="TTFT, TPOT, ITL, E2E, Queue latency CDFs"' in html.read_text()
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


def test_the_slo_help_lists_it(queue) -> None:
    from harness.app.settings.shared import SLOS

    text = SLOS.help_text()
    assert text.startswith("SLOs in ms, e.g. 'ttft_p90=500,tpot_p90=50' (each a metric and its percentile: "
                           "ttft, tpot, itl or e2el at p50, p90, p95, p99, p99_9 or p100; ")
    assert "queue at p90 or p99; a bare 'ttft=500' is refused" in text  # registered last: said last


def test_requests_parquet_holds_its_per_request_value(queue) -> None:
    from results.export import frame_from_records

    records = _records()
    frame = frame_from_records(records)
    assert list(frame.columns)[-1] == "queue_ms"  # after the built-ins, as summary.csv orders it
    assert frame["queue_ms"].tolist() == [float(i % 5 + 1) for i in range(40)]


def test_a_module_in_the_definitions_package_is_the_whole_declaration() -> None:
    """One file in harness/metrics/definitions/ registers a metric: no list to edit (pkgutil)."""
    import sys
    from pathlib import Path

    import harness.metrics.definitions as definitions

    probe = Path(definitions.__file__).parent / "zz_arch_probe_metric.py"
    probe.write_text('from results.schema.metric_registry import Metric\n\nORDER = 45\n\n'
                     'METRIC = Metric(name="zzprobe", label="probe", value=lambda r: 1.0, source="this test")\n')
    try:
        found = [m.__name__.rsplit(".", 1)[1] for m in definitions.definition_modules()]
        # by ORDER: the built-ins keep their order, the new one stands where its ORDER puts it; helpers are skipped
        built_in = ["ttft", "tpot", "itl", "e2el", "ttft_from_scheduled", "e2el_from_scheduled", "ttfat", "connect"]
        shown = [n for n in found if n in built_in or n == "zz_arch_probe_metric"]
        assert shown == [*built_in[:4], "zz_arch_probe_metric", *built_in[4:]] and "units" not in found
        with registered(sys.modules["harness.metrics.definitions.zz_arch_probe_metric"].METRIC):
            assert "zzprobe" in [m.name for m in metrics()]
    finally:
        probe.unlink()
        sys.modules.pop("harness.metrics.definitions.zz_arch_probe_metric", None)
    assert "zzprobe" not in [m.name for m in metrics()]


def gen_ms(r: RequestRecord) -> float | None:
    """Generation time (ms): last token − first token; needs only the record's fields."""
    return None if r.last_token_ns is None or r.first_token_ns is None else (r.last_token_ns - r.first_token_ns) / NS_PER_MS


GEN = Metric(name="gen", label="generation time", value=gen_ms, source="last − first token (this test)",
             slo_percentiles=(90.0,), failures="inf")


def test_a_stored_run_that_did_not_record_it_is_judged_from_its_records(tmp_path) -> None:
    """bench recommend --slo on a metric registered after the run: computed from the stored records
    by the declaration (never "∞ (failed requests)": every request succeeded), or refused in one line."""
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    from harness.app.cli import app
    from results.store import read_records

    run = tmp_path / "run_v1"
    shutil.copytree(Path(__file__).parents[3] / "fixtures" / "run_v1", run)
    records = read_records(run / "requests.jsonl")
    assert all(r.success for r in records if r.phase == "measured")
    with registered(GEN):
        want = {e: compute_metrics([r for r in records if r.engine == e and r.phase == "measured"]).gen_ms.p90
                for e in ("own", "transformers")}
        assert 5 < min(want.values())
        res = CliRunner().invoke(app, ["recommend", str(run), "--slo", "gen_p90=5", "--json"])
        assert "failed requests" not in res.output
        out = json.loads(res.output[res.output.index("{"):res.output.rindex("}") + 1])
        reasons = json.dumps(out["eliminated"])  # engine → why: its computed p90, not a failure
        assert f"p90 generation time {want['own']:,.0f} ms > 5 ms" in reasons
        assert f"p90 generation time {want['transformers']:,.0f} ms > 5 ms" in reasons
        res = CliRunner().invoke(app, ["recommend", str(run), "--slo", f"gen_p90={max(want.values()) + 1:.0f}"])
        assert res.exit_code == 0 and "misses the SLO" not in res.output, res.output
        # no records to compute it from: one line saying so
        (run / "requests.jsonl").write_text("".join(line for line in (run / "requests.jsonl").read_text().splitlines(True)
                                                    if '"engine":"own"' in line))
        res = CliRunner().invoke(app, ["recommend", str(run), "--slo", "gen_p90=5"])
        assert res.exit_code == 2 and res.output.count("\n") == 1 and "run v1-fixture did not record generation time for transformers" in res.output


def test_its_declared_traits_are_read_where_a_judge_needs_them() -> None:
    """The weighted lens reads ``missing_meets_slo`` from the declaration (not a hard-coded "tpot"),
    and a stored distribution is found by the metric's ``field`` (its name alone for a unit other
    than ms), so a new metric declared so is judged as declared, never as failed requests."""
    import math
    from types import SimpleNamespace

    from harness.scoring.measured.gather import Measurement
    from results.schema.metrics import _field

    lenient = Metric(name="lenient", label="lenient wait", short="Lenient", value=queue_ms, source="this test",
                     slo_percentiles=(90.0,), failures="inf", missing_meets_slo=True)
    counted = Metric(name="counted", label="counted tokens", short="Counted", value=queue_ms, source="this test",
                     unit="tokens")
    with registered(lenient), registered(counted):
        slo = SLO("lenient", 5.0, 90.0)
        empty = Metrics.model_validate({"lenient_ms": {}})  # stored, without a value (as TPOT of 1-token replies)
        judge = lambda failed: Measurement.slo_value(SimpleNamespace(_summary_metrics=empty, requests_failed=failed), slo)  # noqa: E731
        assert judge(0) == 0.0 and judge(2) == math.inf  # no value: met unless requests failed
        assert (_field("counted"), _field("lenient"), _field("ttft"), _field("nope")) == ("counted", "lenient_ms", "ttft_ms", "nope_ms")
