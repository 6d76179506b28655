"""A :class:`ParsedImport` → a run folder in our schema (``summary.json``, ``manifest.json`` with
``imported_from``, ``requests.jsonl`` when the file had per-request data, Parquet and CSV).

Metrics are the one summary (:func:`harness.metrics.summarise.summarise`) of the rebuilt records (our definitions),
then each metric the tool's file cannot give per request is replaced by the tool's own value
(``copied``) or left empty (``blank``); every headline metric's provenance is recorded in
:class:`results.schema.ImportProvenance`.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any

from harness import __version__
from harness.metrics import compute_metrics
from harness.metrics.summarise import Condition, counted, summarise
from results.schema import EngineFacts, EngineResult, EngineStatus, ImportProvenance, Metrics
from results.store import RunWriter

from .common import ParsedImport

PROVENANCE_KEYS = ("ttft_ms", "ttft_from_scheduled_ms", "tpot_ms", "itl_ms", "e2el_ms", "e2el_from_scheduled_ms",
                   "duration_s", "request_throughput", "output_throughput", "input_throughput", "peak_output_throughput")
"""The metrics whose provenance an import states, in report order."""


def imported_metrics(parsed: ParsedImport) -> tuple[Metrics, dict[str, Any]]:
    """Our metrics of the import and their intervals: recomputed from the records, then the tool's
    ``copied`` values put in and the ``blank`` ones emptied (their intervals dropped)."""
    records = parsed.records
    ok = [r for r in records if r.phase == "measured" and r.success]
    if any(counted(r) for r in records):  # the one summary, as for a measured run (one repeat: the file's)
        summary = summarise(records, Condition(offered_rate=parsed.offered_rate), intervals=bool(ok))
        metrics, intervals = summary.pooled, dict(summary.intervals)
    else:  # a summary-only file: the tool's copied numbers fill an empty Metrics
        metrics, intervals = compute_metrics(records, offered_rate=parsed.offered_rate), {}
    update: dict[str, Any] = {}
    for name in parsed.blank:
        update[name] = Metrics.model_fields[name].get_default(call_default_factory=True)
    update.update(parsed.copied)
    if update:
        metrics = Metrics.model_validate({**metrics.model_dump(), **update})
        intervals = {k: v for k, v in intervals.items() if k.split(".")[0] not in update}
    return metrics, intervals


def provenance(parsed: ParsedImport) -> ImportProvenance:
    """Every headline metric's provenance: the tool module's text, else "recomputed" when the file
    had per-request data (our definition, nothing of the tool's left in it)."""
    per_request = bool(parsed.records)
    metrics = {k: parsed.definitions.get(k, "recomputed" if per_request else "unavailable: no per-request data")
               for k in PROVENANCE_KEYS}
    return ImportProvenance(tool=parsed.tool, label=parsed.label, file=str(parsed.file), version=parsed.version,
                            entry=parsed.entry, entries=parsed.entries, per_request=per_request, metrics=metrics,
                            tool_summary=parsed.tool_summary, caveats=parsed.caveats, config=parsed.config)


def write_import(parsed: ParsedImport, run_dir: Path, run_id: str, workload: str, spec: dict[str, Any]) -> EngineResult:
    """Write the run folder ``run_dir`` (created; the caller checked it may be) for ``parsed``
    under workload name ``workload`` and workload ``spec`` (what ``bench report`` compares with
    other runs). Returns the engine's entry. Raises OSError when the folder cannot be written."""
    import harness.metrics as metrics_module
    from results.redact import redact_credentials

    for r in parsed.records:
        r.workload = workload
    metrics, intervals = imported_metrics(parsed)
    ok = metrics.requests_completed > 0
    prov = provenance(parsed)
    where = f"{parsed.label} result {parsed.file.name}" + (f" (entry {parsed.entry} of {parsed.entries})"
                                                           if parsed.entries > 1 else "")
    entry = EngineResult(
        status=EngineStatus.OK if ok else EngineStatus.FAILED,
        reason=f"imported from {where}" if ok else f"imported from {where}: no request succeeded",
        display_name=f"{parsed.engine} (imported)", version=parsed.version, metrics=metrics, intervals=intervals)
    with RunWriter(run_dir, run_id, workload) as writer:
        for r in parsed.records:
            writer.add_record(r)
        writer.set_engine(parsed.engine, entry)
        man = writer.manifest
        man.command = [redact_credentials(a) for a in sys.argv]
        man.harness_version = __version__
        man.created_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        man.python = platform.python_version()
        man.platform = platform.platform()
        man.workload = spec
        man.engines = {parsed.engine: EngineFacts.model_validate(  # the tool's run settings: extra keys
            {"imported_from": parsed.label, "file": str(parsed.file),
             **({"model": parsed.model} if parsed.model else {}), **parsed.config})}
        man.metric_definitions = (metrics_module.__doc__ or "").strip()
        man.imported_from = prov
    return entry
