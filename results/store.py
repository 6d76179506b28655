"""The results store: one folder per run, written incrementally.

Layout of ``<output_dir>/<run-id>/``::

    requests.jsonl   one RequestRecord per line, appended and flushed as each request ends,
                     so an interrupted run keeps every request that finished
    summary.json     schema_version, run id, workload, SLOs, and per engine: status
                     ("ok" | "skipped" | "failed"), reason, display_name, metrics
    manifest.json    command line, versions, hardware, model, workload spec and seed, git SHA,
                     client calibration, engine configurations
    logs/<engine>.log  server logs
    report.md, report.html  written by ``reports``

Nothing here computes metrics; it only writes and reads.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .schema import SCHEMA_VERSION, RequestRecord

REQUESTS_FILE = "requests.jsonl"
SUMMARY_FILE = "summary.json"
MANIFEST_FILE = "manifest.json"

ENGINE_STATUSES = ("ok", "skipped", "failed")


class ResultsError(RuntimeError):
    """A run folder is missing, unreadable or from an incompatible schema (message = the fix)."""


def new_run_id(workload: str, now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<workload>`` in local time, e.g. ``20261129-193500-agentic``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload)
    return f"{stamp}-{safe}"


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class RunWriter:
    """Writes one run folder. Each ``add_record`` is flushed and fsync'ed before it returns.

    ``summary.json`` is rewritten after every engine (``set_engine``) so a crash between
    engines keeps the finished ones.
    """

    def __init__(self, run_dir: Path, run_id: str, workload: str) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        self._fh = open(self.run_dir / REQUESTS_FILE, "a", encoding="utf-8")
        self.summary: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "run_id": run_id,
            "workload": workload,
            "slos": {},
            "engines": {},
        }
        self.manifest: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "run_id": run_id}

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def add_record(self, record: RequestRecord) -> None:
        """Append one record and flush it to disk."""
        self._fh.write(record.model_dump_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def set_engine(
        self,
        name: str,
        status: str,
        reason: str = "",
        metrics: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        """Record one engine's outcome in ``summary.json`` (rewritten at once).

        Raises ValueError for a status outside :data:`ENGINE_STATUSES`.
        """
        if status not in ENGINE_STATUSES:
            raise ValueError(f"engine status must be one of {ENGINE_STATUSES}, got {status!r}")
        entry: dict[str, Any] = {"status": status, "reason": reason, "metrics": metrics or {}}
        entry.update(extra)
        self.summary["engines"][name] = entry
        self.write_summary()

    def order_engines(self, names: list[str]) -> None:
        """Put ``summary.json``'s engines in the order of ``names`` (others after, as they were)."""
        engines = self.summary["engines"]
        ordered = {n: engines[n] for n in names if n in engines}
        ordered.update({n: e for n, e in engines.items() if n not in ordered})
        self.summary["engines"] = ordered
        self.write_summary()

    def write_summary(self) -> None:
        _write_json_atomic(self.run_dir / SUMMARY_FILE, self.summary)

    def write_manifest(self) -> None:
        _write_json_atomic(self.run_dir / MANIFEST_FILE, self.manifest)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        self.write_summary()
        self.write_manifest()

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class Run:
    """A run loaded back from disk."""

    run_dir: Path
    summary: dict[str, Any]
    manifest: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.summary.get("run_id", self.run_dir.name)

    def records_for(self, engine: str, phase: str = "measured") -> list[RequestRecord]:
        """Records of one engine in one phase, in file order."""
        return [r for r in self.records if r.engine == engine and r.phase == phase]


def read_records(path: Path) -> list[RequestRecord]:
    """Read a ``requests.jsonl``; a truncated last line (interrupted write) is ignored.

    Raises :class:`ResultsError` naming the line for any other malformed line.
    """
    out: list[RequestRecord] = []
    if not path.exists():
        return out
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(RequestRecord.model_validate_json(line))
        except Exception as exc:
            if i == len(lines):  # a write cut short by a crash
                break
            raise ResultsError(f"{path}:{i}: not a valid request record ({str(exc).splitlines()[0]})") from exc
    return out


def load_run(run_dir: Path | str) -> Run:
    """Load ``summary.json``, ``manifest.json`` and ``requests.jsonl`` of one run folder.

    Raises :class:`ResultsError` when the folder or its summary is missing, or the schema's
    major version differs from this harness's.
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.is_file():
        raise ResultsError(f"{run_dir} is not a run folder (no {SUMMARY_FILE}); see `bench results list`")
    try:
        summary = json.loads(summary_path.read_text())
        manifest_path = run_dir / MANIFEST_FILE
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{run_dir}: corrupt JSON ({exc})") from exc
    if not isinstance(summary, dict) or not isinstance(manifest, dict):
        raise ResultsError(f"{run_dir}: summary.json or manifest.json is not a JSON object; the run folder is damaged")
    version = str(summary.get("schema_version", "0"))
    if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ResultsError(
            f"{run_dir} has result schema {version}; this harness reads {SCHEMA_VERSION.split('.')[0]}.x"
        )
    return Run(run_dir, summary, manifest, read_records(run_dir / REQUESTS_FILE))


def list_runs(output_dir: Path | str) -> list[Path]:
    """Run folders under ``output_dir`` (those with a summary.json), newest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if (p / SUMMARY_FILE).is_file()]
    return sorted(runs, key=lambda p: p.name, reverse=True)


def resolve_run(ref: str, output_dir: Path | str = "results") -> Path:
    """A run reference → its folder: a path, a run id under ``output_dir``, or ``latest``.

    Raises :class:`ResultsError` when nothing matches.
    """
    p = Path(ref)
    if (p / SUMMARY_FILE).is_file():
        return p
    if ref == "latest":
        runs = list_runs(output_dir)
        if not runs:
            raise ResultsError(f"no runs under {output_dir}; run `bench run` first")
        return runs[0]
    cand = Path(output_dir) / ref
    if (cand / SUMMARY_FILE).is_file():
        return cand
    raise ResultsError(f"no run {ref!r} (looked for {p} and {cand}); see `bench results list`")


def iter_engine_names(summary: dict[str, Any]) -> Iterable[str]:
    """Engine names in the order they were run."""
    return list(summary.get("engines", {}).keys())
