"""Runs as data: requests.parquet equals requests.jsonl record for record; summary.csv; the API."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import results
from harness.app.cli import app
from harness.loadgen.nullserver import null_server
from results.export import META_VERSION, arrow_schema
from results.schema.metric_registry import metric, metrics
from results.schema import SCHEMA_VERSION, Distribution, Goodput, Metrics, RequestRecord, metric_number, metric_value
from results.store import read_records

from tests.helpers import CPU_ONLY, make_records, ok_entry, write_run

ARGS = ["--workload", "random", "--num-requests", "6", "--input-len", "8", "--output-len", "4",
        "--warmup", "1", "--no-calibration", "--no-equivalence", "--repeats", "2", "--request-rate", "inf"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    with null_server() as url:
        res = CliRunner().invoke(app, ["run", "--engine", "openai", "--base-url", url, *ARGS, "-o", str(out),
                                       "--run-id", "data"])
    assert res.exit_code == 0, res.output
    return out / "data"


def _row_to_record(row: dict) -> RequestRecord:
    clean = {k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v) for k, v in row.items()
             if k in RequestRecord.model_fields}
    clean["chunk_times_ns"] = list(clean["chunk_times_ns"] or [])
    clean["chunk_token_counts"] = list(clean.get("chunk_token_counts") or [])
    return RequestRecord.model_validate(clean)


def test_the_parquet_equals_the_jsonl_record_for_record(run_dir) -> None:
    stored = read_records(run_dir / "requests.jsonl")
    assert len(stored) == 2 * (6 + 1)  # 2 repeats of 6 measured + 1 warm-up
    table = pq.read_table(run_dir / "requests.parquet")
    assert table.schema.metadata[META_VERSION] == SCHEMA_VERSION.encode()
    assert table.schema.equals(arrow_schema(), check_metadata=False)
    frame = results.load_run(run_dir).requests
    # the record's fields, then each registered metric's per-request value (the CSV's declarations)
    assert list(frame.columns) == [*RequestRecord.model_fields, *(m.field for m in metrics())]
    assert "ttft_ms" in frame.columns and str(frame["ttft_ms"].dtype) == "double[pyarrow]"
    for row, record in zip(frame.to_dict("records"), stored, strict=True):  # file order (ids repeat across repeats)
        want = metric("tpot").value(record)
        assert (row["tpot_ms"] is pd.NA and want is None) or row["tpot_ms"] == pytest.approx(want)
    assert str(frame["send_ns"].dtype) == "int64[pyarrow]" and str(frame["success"].dtype) == "bool[pyarrow]"
    assert str(frame["error_class"].dtype) == "string[pyarrow]"
    assert str(frame["chunk_times_ns"].dtype) in ("list<element: int64>[pyarrow]", "list<item: int64>[pyarrow]")
    assert frame["phase"].tolist().count("measured") == 12
    again = [_row_to_record(row) for row in frame.to_dict("records")]
    assert again == stored


def test_summary_csv_has_one_row_per_engine_with_intervals(run_dir) -> None:
    csv = pd.read_csv(run_dir / "summary.csv")
    assert csv["engine"].tolist() == ["openai"]
    row = csv.iloc[0]
    summary = json.loads((run_dir / "summary.json").read_text())["engines"]["openai"]
    assert row["requests_completed"] == summary["metrics"]["requests_completed"] == 12
    assert row["ttft_p99_ms"] == pytest.approx(summary["metrics"]["ttft_ms"]["p99"])
    # p90 too: the default SLOs' percentile, printed by the console and the report
    assert row["ttft_p90_ms"] == pytest.approx(summary["metrics"]["ttft_ms"]["p90"])
    assert row["tpot_p90_ms"] == pytest.approx(summary["metrics"]["tpot_ms"]["p90"])
    ci = summary["intervals"]["ttft_ms.p99"]
    assert (row["ttft_p99_ms_low"], row["ttft_p99_ms_high"]) == (pytest.approx(ci["low"]), pytest.approx(ci["high"]))
    assert row["repeats"] == 2 and row["status"] == "ok"


def test_bench_results_export_writes_both_files_for_an_older_run(run_dir, tmp_path) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    (old / "requests.parquet").unlink()
    (old / "summary.csv").unlink()
    res = CliRunner().invoke(app, ["results", "export", str(old)])
    assert res.exit_code == 0, res.output
    assert (old / "requests.parquet").is_file() and (old / "summary.csv").is_file()
    assert len(pq.read_table(old / "requests.parquet")) == 14
    stale = results.load_run(old)
    (old / "requests.jsonl").write_text((old / "requests.jsonl").read_text())  # newer than the parquet now
    assert len(stale.requests) == 14  # built from the records, not the older parquet


def test_a_metric_is_read_by_its_dotted_path() -> None:
    m = Metrics(ttft_ms=Distribution(p99=12.5), output_throughput=40, total_output_tokens=7, rate_valid=True,
                goodput=Goodput(request_goodput=None))
    assert metric_value(m, "ttft_ms.p99") == 12.5 and metric_value(m, "ttft_ms") == Distribution(p99=12.5)
    assert metric_value(m, "ttft_ms.p50") is None  # a statistic not formed
    assert metric_value(m, "goodput.request_goodput") is None and metric_value(m, "sessions.completed") is None
    assert metric_value(m, "no_such.path") is None
    assert metric_number(m, "output_throughput") == 40.0 and isinstance(metric_number(m, "total_output_tokens"), float)
    assert metric_number(m, "rate_valid") is None and metric_number(m, "ttft_ms") is None  # a bool, a model


def test_summary_csv_leaves_bounds_empty_where_no_interval_was_formed(tmp_path: Path) -> None:
    from results.export import write_summary_csv

    records = make_records("own", 4, ttft_ms=50.0, tpot_ms=10.0)
    run = write_run(tmp_path, "r", {"own": ok_entry(records, CPU_ONLY)}, records)
    row = pd.read_csv(write_summary_csv(run.run_dir, run.summary)).iloc[0]
    assert row["request_throughput"] > 0  # a rate of one repeat: a value, no interval
    assert pd.isna(row["request_throughput_low"]) and pd.isna(row["request_throughput_high"])
