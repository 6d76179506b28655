"""Summarise a killed run from its request records (``bench results rebuild``, and on read).

``requests.jsonl`` is appended and flushed as each request ends, while ``summary.json`` is
written when an engine's turn ends. A harness killed by SIGKILL or the OOM killer therefore
leaves records that no summary describes: all of them when it died during the first engine, or
the engine in progress otherwise. This module computes those engines' metrics from the records
with the one summary a live run uses (:func:`harness.metrics.summarise.summarise`: each repeat's
metrics, pooled over the repeats, under the condition the manifest recorded), and stores them as ``failed`` with the reason "killed while measured", so they are
shown and reported but never ranked (a partial measurement is not a measurement of the
condition). Engines the summary already holds are left as they are.

A run whose writer is still alive (``results.store.run_state`` = ``"running"``) is never
rebuilt: its summary is on its way.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from results.schema import EngineResult, EngineStatus, RequestRecord, RunSummary, WorkloadStats
from results.store import (
    MANIFEST_FILE,
    REQUESTS_FILE,
    SUMMARY_FILE,
    ResultsError,
    Run,
    UnsummarisedRun,
    load_run,
    read_records,
    run_state,
    write_model_atomic,
)

from harness.metrics import slos_of
from harness.metrics.summarise import Condition, summarise

KILLED = "the run was killed while this engine was measured (no summary was written); summarised afterwards " \
         "from its {n} stored measured requests"


def unsummarised_engines(run_dir: Path, summary: RunSummary | None, records: list[RequestRecord]) -> list[str]:
    """Engines with measured records that ``summary`` does not hold (all of them without one), in record order."""
    known = set(summary.engines) if summary is not None else set()
    seen: dict[str, None] = {}
    for record in records:
        if record.phase == "measured" and record.engine not in known:
            seen.setdefault(record.engine)
    return list(seen)


def rebuild(run_dir: Path | str) -> tuple[RunSummary, list[str]]:
    """Add every unsummarised engine of ``run_dir`` to its ``summary.json`` (written
    atomically; created when missing) and return ``(summary, rebuilt engine names)``.

    Raises :class:`results.store.ResultsError` when the folder has no records, its files are
    damaged, or its writer is still running.
    """
    run_dir = Path(run_dir)
    if not (run_dir / REQUESTS_FILE).is_file() and not (run_dir / SUMMARY_FILE).is_file():
        raise ResultsError(f"{run_dir} is not a run folder (no {REQUESTS_FILE} or {SUMMARY_FILE})")
    if run_state(run_dir) == "running":
        raise ResultsError(f"{run_dir} is still being written by a running bench; wait for it to finish")
    try:
        run: Run | None = load_run(run_dir)
        summary, records = run.summary, run.records
    except UnsummarisedRun:
        run, records = None, read_records(run_dir / REQUESTS_FILE)
        summary = RunSummary(run_id=run_dir.name, workload=_workload_name(run_dir, records))
    slos = slos_of(summary.slos)
    condition = _condition(run, slos)
    names = unsummarised_engines(run_dir, summary, records)
    for name in names:
        measured = [r for r in records if r.engine == name and r.phase == "measured"]
        summary.engines[name] = _killed_result(measured, condition)
    if names or not (run_dir / SUMMARY_FILE).is_file():
        write_model_atomic(run_dir / SUMMARY_FILE, summary)
    return summary, names


def _killed_result(measured: list[RequestRecord], condition: Condition) -> EngineResult:
    """A failed entry with metrics per repeat and pooled (the one summary a live run uses)."""
    summary = summarise(measured, condition, intervals=False)
    return EngineResult(status=EngineStatus.FAILED, reason=KILLED.format(n=len(measured)), metrics=summary.pooled,
                        repeats=summary.repeats if len(summary.repeats) > 1 else [])


def _condition(run: Run | None, slos: list) -> Condition:
    """The condition the manifest recorded; for a run from before it was kept, its offered and
    requested rates (None when not recorded: the achieved rate is then not checked against one)."""
    manifest = run.manifest if run is not None else None
    if manifest is not None and manifest.condition is not None:
        return Condition.from_facts(manifest.condition, slos)
    stats = (manifest.workload_stats if manifest is not None else None) or WorkloadStats()

    def number(value: float | str | None) -> float | None:  # "inf" (a string) and None: not recorded
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
    return Condition(tuple(slos), number(stats.offered_rate), number(stats.requested_rate))


def _workload_name(run_dir: Path, records: list[RequestRecord]) -> str:
    import json

    try:
        manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        name = (manifest.get("workload") or {}).get("name")
        if name:
            return str(name)
    except (OSError, ValueError, AttributeError):
        pass
    return records[0].workload if records else "unknown"


def load_or_rebuild(run_dir: Path | str, note: Callable[[str], None] | None = None) -> Run:
    """:func:`results.store.load_run`, summarising a killed run first (``note`` gets one line
    saying so). A run still being written loads as it is."""
    run_dir = Path(run_dir)
    if run_state(run_dir) != "running":
        needs = not (run_dir / SUMMARY_FILE).exists()
        if not needs and run_state(run_dir) == "killed":
            run = load_run(run_dir)
            needs = bool(unsummarised_engines(run_dir, run.summary, run.records))
            if not needs:
                return run
        if needs:
            _, names = rebuild(run_dir)
            if note is not None and names:
                note(f"{run_dir.name}: the run was killed before it summarised {', '.join(names)}; "
                     f"summarised now from the stored records (status failed, never ranked)")
    return load_run(run_dir)


def with_slo_metrics(run: Run, slos: list) -> Run:
    """``run`` with every metric an SLO of ``slos`` judges that its summary did not record (a
    metric registered after the run: ``summary.json`` has no key for it) computed from its stored
    request records with the metric's declared formula (:func:`summarise`, the one summary a live
    run uses; a ladder run's entry over its capacity point's steady state), so that a re-decision
    under other SLOs judges what the requests measured. A metric not recorded never reads as
    failed requests (∞). Raises :class:`ResultsError` (one line) when an engine that has metrics
    has no stored measured records to compute it from. ``run`` itself is not changed."""
    import dataclasses

    from harness.scoring.capacity.samples import judged_records
    from results.schema.metric_registry import metric

    wanted = {s.metric for s in slos}
    summary = run.summary.model_copy(deep=True)
    for name, entry in summary.engines.items():
        missing = sorted(m for m in wanted if entry.metrics is not None and not _recorded(entry.metrics, metric(m).field))
        if not missing:
            continue
        if entry.ladder_point is not None:
            measured = judged_records([r for r in run.records if r.engine == name and r.probe == entry.ladder_point])
        else:
            measured = [r for r in run.records if r.engine == name and r.phase == "measured"]
        try:
            computed = summarise(measured, Condition(tuple(slos)), intervals=False)
        except ValueError:
            labels = ", ".join(metric(m).label for m in missing)
            raise ResultsError(f"run {run.run_id} did not record {labels} for {name} and holds no measured requests "
                               f"of it to compute it from: judge it with an SLO on a metric it recorded") from None
        pairs = [(entry.metrics, computed.pooled)] + (list(zip(entry.repeats, computed.repeats))
                                                      if len(entry.repeats) == len(computed.repeats) else [])
        for stored, fresh in pairs:
            for m in missing:
                field = metric(m).field
                setattr(stored, field, getattr(fresh, field))
                if metric(m).failures == "inf":
                    setattr(stored.error_adjusted, field, getattr(fresh.error_adjusted, field))
    return dataclasses.replace(run, summary=summary)


def _recorded(metrics: object, field: str) -> bool:
    """Whether a stored :class:`results.schema.Metrics` holds ``field`` (read from its file, or set)."""
    return field in getattr(metrics, "model_fields_set", set()) or field in (getattr(metrics, "__pydantic_extra__", None) or {})
