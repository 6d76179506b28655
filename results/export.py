"""Run folders as data: ``requests.parquet`` and ``summary.csv`` next to the JSONL and JSON.

``requests.jsonl`` stays the durable, incremental record (appended and flushed per request, so
an interrupted run keeps what it measured); Parquet is written from it when the run closes and
by ``bench results export RUN`` for older or killed runs. Both files are replaced atomically.

``requests.parquet``: one row per :class:`results.schema.RequestRecord`, in file order, one
column per field, typed from the model (:func:`arrow_schema`): integers → ``int64`` (nullable;
``*_ns`` are ``perf_counter_ns`` values), booleans → ``bool``, text → ``string``, lists of
integers (``chunk_times_ns``) → ``list<int64>``; then one ``float64`` column per registered
metric (:func:`results.schema.metric_registry.metrics`, its :attr:`Metric.field`: ``ttft_ms``,
``tpot_ms`` …), the request's own value by the metric's declaration (``Metric.value``; null where it
has none), the same declarations ``summary.csv``'s statistics come from. The file's metadata carries
``llm_serve_bench.schema_version`` (the records' schema) and ``llm_serve_bench.run_id``. In
pandas (``pyarrow`` dtypes, so missing integers stay integers): :func:`requests_frame`.

``summary.csv``: one row per engine × condition (a run: its one condition; a repeat run: the
pooled row; a capacity search: one row per probe) with the status, the load, the request counts
and every headline metric (:func:`headline`: each registered metric's ``csv`` statistics) with its
interval (``<metric>``, ``<metric>_low``, ``<metric>_high``;
the bounds empty when no interval was formed - a rate of one repeat has none - and the value
empty when not measured). Units as in
``summary.json``: ms, tokens/s, requests/s. Values keep their full precision (data to compute
with): the one printed form the console, the reports and the verdict share
(``metric_registry.figure``: 3 significant digits, at most the metric's ``decimals``) is for reading.
"""

from __future__ import annotations

import os
import types
import typing
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .schema import SCHEMA_VERSION, EngineResult, Interval, Metrics, RequestRecord, RunSummary, metric_number
from .schema.metric_registry import metrics

PARQUET_FILE = "requests.parquet"
CSV_FILE = "summary.csv"
META_VERSION = b"llm_serve_bench.schema_version"
META_RUN = b"llm_serve_bench.run_id"

def headline() -> dict[str, str]:
    """Path in :class:`results.schema.Metrics` (and key in ``EngineResult.intervals``) → CSV
    column: the two throughputs, each registered metric's ``csv`` statistics in registry order
    (``"ttft_ms.p99"`` → ``"ttft_p99_ms"``), then goodput."""
    return {
        "request_throughput": "request_throughput",
        "output_throughput": "output_throughput",
        **{f"{m.field}.{stat}": f"{m.name}_{stat}" + ("_ms" if m.unit == "ms" else "") for m in metrics() for stat in m.csv},
        "goodput.request_goodput": "request_goodput",
    }


def _arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of one RequestRecord field annotation (``int | None`` → int64, …)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _arrow_type(args[0])
    if origin is list:
        return pa.list_(_arrow_type(args[0]))
    if annotation is bool:
        return pa.bool_()
    if annotation is int:
        return pa.int64()
    if annotation is float:
        return pa.float64()
    if annotation is str:
        return pa.string()
    raise TypeError(f"RequestRecord field type {annotation!r} has no Arrow mapping: add one in results/export.py")


def arrow_schema() -> pa.Schema:
    """The Parquet schema: one column per :class:`RequestRecord` field, in model order, then one
    ``float64`` per registered metric (:func:`derived_columns`)."""
    fields = [pa.field(name, _arrow_type(info.annotation)) for name, info in RequestRecord.model_fields.items()]
    return pa.schema(fields + [pa.field(name, pa.float64()) for name in derived_columns()])


def derived_columns() -> dict[str, Any]:
    """Column → the per-request formula of each registered metric (``"ttft_ms"`` → ``Metric.value``), in registry order."""
    return {m.field: m.value for m in metrics()}


def records_table(records: list[RequestRecord], run_id: str = "") -> pa.Table:
    """The records as an Arrow table with :func:`arrow_schema` and the schema version in its metadata."""
    schema = arrow_schema()
    derived = derived_columns()
    columns = {name: [derived[name](r) if name in derived else getattr(r, name) for r in records] for name in schema.names}
    table = pa.table(columns, schema=schema)
    version = (records[0].schema_version if records else SCHEMA_VERSION).encode()
    return table.replace_schema_metadata({META_VERSION: version, META_RUN: run_id.encode()})


def write_parquet(run_dir: Path, records: list[RequestRecord], run_id: str = "") -> Path:
    """Write ``requests.parquet`` (atomically) and return its path."""
    path = Path(run_dir) / PARQUET_FILE
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(records_table(records, run_id), tmp)
    os.replace(tmp, path)
    return path


def requests_frame(path: Path) -> pd.DataFrame:
    """``requests.parquet`` as a pandas DataFrame with Arrow-backed dtypes (``int64[pyarrow]``,
    ``bool[pyarrow]``, ``string[pyarrow]``, ``list<element: int64>[pyarrow]``): a missing integer
    stays missing instead of turning the column into floats."""
    return pq.read_table(path).to_pandas(types_mapper=pd.ArrowDtype)


def frame_from_records(records: list[RequestRecord]) -> pd.DataFrame:
    """The same DataFrame as :func:`requests_frame`, built from records in memory."""
    return records_table(records).to_pandas(types_mapper=pd.ArrowDtype)


def _metric_cells(metrics: Metrics | None, intervals: dict[str, Interval]) -> dict[str, float | None]:
    cells: dict[str, float | None] = {}
    for path, column in headline().items():
        value = metric_number(metrics, path) if metrics is not None else None
        ci = intervals.get(path)
        formed = ci is not None and value is not None and ci.high > ci.low  # a point is not an interval
        cells[column] = value
        cells[f"{column}_low"] = ci.low if formed else None
        cells[f"{column}_high"] = ci.high if formed else None
    return cells


def summary_rows(summary: RunSummary, probes: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    """The rows of ``summary.csv`` (module docstring). ``probes``: engine → its capacity-search
    probes (``results.schema.SearchProbe``), each a row of its own."""
    rows = []
    for name, entry in summary.engines.items():
        engine_probes = (probes or {}).get(name) or []
        if engine_probes:
            for probe in engine_probes:
                rows.append(_row(summary, name, entry, probe.metrics, probe.intervals, probe=probe.index,
                                 passed=probe.passed))
        else:
            rows.append(_row(summary, name, entry, entry.metrics, entry.intervals))
    return rows


def _row(summary: RunSummary, name: str, entry: EngineResult, metrics: Metrics | None,
         intervals: dict[str, Interval], probe: int | None = None, passed: bool | None = None) -> dict[str, Any]:
    m = metrics
    return {
        "run_id": summary.run_id, "engine": name, "status": entry.shown_status, "workload": summary.workload,
        "probe": probe, "passed": passed, "repeats": summary.repeats,
        "requested_rate": m.requested_rate if m else None, "offered_rate": m.offered_rate if m else None,
        "achieved_rate": m.achieved_rate if m else None,
        "requests_completed": m.requests_completed if m else None, "requests_failed": m.requests_failed if m else None,
        "duration_s": m.duration_s if m else None,
        **_metric_cells(m, intervals),
        "reason": entry.reason,
    }


def write_summary_csv(run_dir: Path, summary: RunSummary, probes: dict[str, list[Any]] | None = None) -> Path:
    """Write ``summary.csv`` (atomically) and return its path."""
    path = Path(run_dir) / CSV_FILE
    tmp = path.with_name(path.name + ".tmp")
    pd.DataFrame(summary_rows(summary, probes)).to_csv(tmp, index=False)
    os.replace(tmp, path)
    return path
