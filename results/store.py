"""The results store: one folder per run, written incrementally.

Layout of ``<output_dir>/<run-id>/``::

    requests.jsonl   one RequestRecord per line, appended and flushed as each request ends,
                     so an interrupted run keeps every request that finished
    summary.json     results.schema.RunSummary: per engine an EngineResult (status
                     ok | failed | skipped | not_measured, reason, metrics)
    manifest.json    command line, versions, hardware, model, workload spec and seed, git SHA,
                     client calibration, engine configurations (results.schema.Manifest)
    recommendation.json  results.recommendation.Recommendation (written by the application)
    logs/<engine>.log  server logs
    report.md, report.html  written by ``reports``

Nothing here computes metrics; it only writes and reads.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from .errors import ResultsError
from .recommendation import Recommendation, read_recommendation
from .recounts import RECOUNTS_FILE, TokenRecount, merge_recounts, read_recounts, recount_lines
from .schema import (
    ACCURACY_FILE,
    FIDELITY_FILE,
    AccuracyCheck,
    LADDER_FILE,
    FidelityCheck,
    READABLE_MAJOR_VERSIONS,
    LadderSummary,
    SCHEMA_VERSION,
    ClientWorker,
    ClientWorkers,
    EngineFacts,
    EngineResult,
    EngineStatus,
    Manifest,
    ReplayCertificate,
    RequestRecord,
    RunSummary,
    SkipCause,
    WINNER_MAP_FILE,
    WinnerMap,
)

REQUESTS_FILE = "requests.jsonl"
SUMMARY_FILE = "summary.json"
MANIFEST_FILE = "manifest.json"
RUNNING_FILE = "running.json"  # the writing process (pid, start time) while the run is in progress



class UnsummarisedRun(ResultsError):
    """A run folder with request records but no ``summary.json``: the harness was killed
    (SIGKILL, the OOM killer) before the first engine's turn ended. ``harness.app.run.rebuild``
    summarises it from its records."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(f"{run_dir} has request records but no {SUMMARY_FILE} (the run was killed before its first "
                         f"engine finished); `bench results rebuild {run_dir}` summarises them")
        self.run_dir = run_dir


def _process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (s since the epoch, psutil), None when it is gone."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def run_state(run_dir: Path) -> str:
    """``"running"`` while the process that writes ``run_dir`` is alive (its ``running.json``
    names it: pid and start time, so a reused pid does not count); ``"killed"`` when that
    process is gone without closing the run (SIGKILL, OOM killer, power loss); ``"closed"``
    when the run was closed (or was written before the marker existed)."""
    marker = Path(run_dir) / RUNNING_FILE
    if not marker.is_file():
        return "closed"
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
        pid, started = int(info["pid"]), float(info["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return "killed"
    alive = _process_start(pid)
    return "running" if alive is not None and abs(alive - started) < 1.0 else "killed"


def blocked_run_id(run_dir: Path) -> str | None:
    """Why ``--run-id`` may not reuse the existing folder ``run_dir``, or None when it may.

    A folder may be reused when it holds nothing a user could lose and nobody writes it: no
    request record, no summary, search or report, no engine log, and no live ``bench`` (its
    ``running.json``, :func:`run_state`) — what a run SIGKILLed during calibration leaves
    (``running.json``, an empty ``requests.jsonl``, maybe ``manifest.json`` and ``logs/``).
    The caller removes it (:func:`shutil.rmtree`) and starts afresh. The reason says how to
    proceed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return f"{run_dir} is a file: choose another --run-id or remove the file"
    if run_state(run_dir) == "running":
        return f"run folder {run_dir} is being written by a running bench: choose another --run-id"
    disposable = {RUNNING_FILE, MANIFEST_FILE, REQUESTS_FILE, MANIFEST_FILE + ".tmp", "logs"}
    logs = run_dir / "logs"
    try:
        kept = sorted(p.name for p in run_dir.iterdir() if p.name not in disposable)
        if logs.is_dir() and any(logs.iterdir()):
            kept.append("logs/")
    except OSError as exc:
        return f"run folder {run_dir} cannot be read ({exc.strerror or exc}): choose another --run-id"
    records = run_dir / REQUESTS_FILE
    try:
        has_records = records.is_file() and bool(records.read_bytes().strip())
    except OSError:
        has_records = True
    if has_records:
        kept.append(REQUESTS_FILE)
    if kept:
        return (f"run folder {run_dir} already exists and holds {', '.join(kept)}: choose another --run-id, or "
                f"delete the folder (rm -r {run_dir}) to run again under this id")
    return None


def new_run_id(workload: str, now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<workload>`` in local time, e.g. ``20261129-193500-agentic``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload)
    return f"{stamp}-{safe}"


def write_model_atomic(path: Path, model: BaseModel) -> None:
    """Write a pydantic model as indented JSON through a temporary file (never half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(model.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


SYNC_INTERVAL_S = 1.0
"""How often (s) the writer's background thread fsyncs ``requests.jsonl`` while records arrive."""


class RunWriter:
    """Writes one run folder. Each ``add_record`` is written and flushed to the operating system
    before it returns, so a harness killed by SIGKILL or the OOM killer keeps every record that
    finished (the kernel holds them); a background thread fsyncs the file every
    :data:`SYNC_INTERVAL_S` while records arrive, and :meth:`close` once more, so a power loss or
    kernel crash loses at most the last second. An fsync per record cost about 28 % of the event
    loop at 665 req/s (issue 15's profile) and delayed the sends and chunk timestamps it shares
    the loop with; ``benchmarks/bench_store.py`` measures both ways side by side.

    ``summary.json`` is rewritten after every engine (``set_engine``) so a crash between
    engines keeps the finished ones. ``summary`` and ``manifest`` are the typed models.
    """

    def __init__(self, run_dir: Path, run_id: str, workload: str) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        self._fh = open(self.run_dir / REQUESTS_FILE, "a", encoding="utf-8")
        self._lock = threading.Lock()  # the file handle: the event loop appends, the syncer fsyncs
        self._dirty = threading.Event()
        self._closed = threading.Event()
        self._syncer = threading.Thread(target=self._sync_loop, name="requests-fsync", daemon=True)
        self._syncer.start()
        self.summary = RunSummary(run_id=run_id, workload=workload)
        self.manifest = Manifest(run_id=run_id)
        started = _process_start(os.getpid())
        (self.run_dir / RUNNING_FILE).write_text(json.dumps({"pid": os.getpid(), "started": started}) + "\n")

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def add_record(self, record: RequestRecord) -> None:
        """Append one record and flush it to the operating system (fsync'ed within
        :data:`SYNC_INTERVAL_S` by the background thread)."""
        line = record.model_dump_json() + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
        self._dirty.set()

    def _sync(self) -> None:
        """fsync what was written so far, through a duplicate of the descriptor (the lock is
        held only to duplicate it, never during the fsync)."""
        with self._lock:
            if self._fh.closed:
                return
            fd = os.dup(self._fh.fileno())
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_loop(self) -> None:
        while not self._closed.is_set():
            if self._dirty.wait(timeout=SYNC_INTERVAL_S) and not self._closed.is_set():
                self._dirty.clear()
                self._sync()
                self._closed.wait(SYNC_INTERVAL_S)  # at most one fsync per interval

    def add_recounts(self, recounts: Iterable[TokenRecount]) -> None:
        """Append token recounts (derived after a measured phase) to ``token_recounts.jsonl``;
        ``requests.jsonl`` is never rewritten (:mod:`results.recounts`)."""
        text = recount_lines(recounts)
        if not text:
            return
        with self._lock:
            with open(self.run_dir / RECOUNTS_FILE, "a", encoding="utf-8") as fh:
                fh.write(text)

    def add_client_workers(self, count: int, workers: Iterable[ClientWorker]) -> None:
        """Record the client processes of a phase measured by ``count`` of them (the manifest's
        ``client_workers``: ``count`` for the validity gate, one entry per process and phase)."""
        self.manifest.client_workers = self.manifest.client_workers or ClientWorkers(count=count)
        self.manifest.client_workers.workers.extend(workers)
        self.write_manifest()

    def add_engine_facts(self, name: str, facts: EngineFacts) -> None:
        """Record what an engine's session learnt of it (display name, start-up, effective
        configuration) in the manifest's entry for it, at once (a crash keeps it): the keys
        ``facts`` holds replace the entry's, the others stay."""
        self.manifest.engines[name] = (self.manifest.engines.get(name) or EngineFacts()).merged(facts)
        self.write_manifest()

    def set_engine(self, name: str, result: EngineResult) -> None:
        """Record one engine's outcome in ``summary.json`` (rewritten at once)."""
        self.summary.engines[name] = result
        self.write_summary()

    def order_engines(self, names: list[str]) -> None:
        """Put ``summary.json``'s engines in the order of ``names`` (others after, as they were)."""
        engines = self.summary.engines
        ordered = {n: engines[n] for n in names if n in engines}
        ordered.update({n: e for n, e in engines.items() if n not in ordered})
        self.summary.engines = ordered
        self.write_summary()

    def write_summary(self) -> None:
        write_model_atomic(self.run_dir / SUMMARY_FILE, self.summary)

    def write_manifest(self) -> None:
        write_model_atomic(self.run_dir / MANIFEST_FILE, self.manifest)

    def write_fidelity(self, check: FidelityCheck) -> None:
        """``fidelity.json``: the output-fidelity check of every engine that ran it."""
        write_model_atomic(self.run_dir / FIDELITY_FILE, check)

    def write_replay(self, certificate: Any) -> None:
        """``replay.json``: the agentic run's replay-fidelity certificate (``ReplayCertificate``)."""
        from .schema.replay import REPLAY_FILE

        write_model_atomic(self.run_dir / REPLAY_FILE, certificate)

    def write_accuracy(self, check: AccuracyCheck) -> None:
        """``accuracy.json``: the user's task-accuracy set, per engine."""
        write_model_atomic(self.run_dir / ACCURACY_FILE, check)

    def close(self) -> None:
        """Write the summary and manifest, then ``requests.parquet`` and ``summary.csv``
        (:mod:`results.export`, from the stored records), and clear the running marker. An
        export that fails is recorded in the manifest (``export_error``) and never loses the run."""
        self._closed.set()
        self._dirty.set()
        self._syncer.join(timeout=5)
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
        self.write_summary()
        self.write_manifest()
        try:
            export_run(self.run_dir, self.summary)
        except Exception as exc:  # the JSONL and summary are safe; the data files can be rebuilt
            self.manifest.export_error = f"{type(exc).__name__}: {exc}"
            self.write_manifest()
        (self.run_dir / RUNNING_FILE).unlink(missing_ok=True)

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class Run:
    """A run loaded back from disk: the typed artefacts plus every request record.

    ``recommendation`` is the stored ``recommendation.json`` (None for runs without one, e.g.
    version-1 folders: the application scores those again). ``upgraded_from`` is the schema
    version the folder was written with when it was not the current one.
    """

    run_dir: Path
    summary: RunSummary
    manifest: Manifest
    records: list[RequestRecord] = field(default_factory=list)
    recommendation: Recommendation | None = None
    upgraded_from: str | None = None
    ladder: LadderSummary | None = None  # ``ladder.json``: the load ladders and the decision (None: one load point)
    fidelity: FidelityCheck | None = None  # ``fidelity.json``: outputs against the reference (None: not checked)
    accuracy: AccuracyCheck | None = None  # ``accuracy.json``: the user's task-accuracy set (None: none given)
    winner_map: WinnerMap | None = None  # ``winner_map.json``: the verdict over a grid of SLOs (None: not made)
    replay: ReplayCertificate | None = None  # ``replay.json``: the agentic replay's certificate (None: not agentic)

    @property
    def run_id(self) -> str:
        return self.summary.run_id or self.run_dir.name

    @property
    def requests(self) -> Any:
        """Every request record as a pandas DataFrame (``results.export.requests_frame`` dtypes):
        read from ``requests.parquet`` when it is as new as ``requests.jsonl``, else built from
        the loaded records."""
        from .export import PARQUET_FILE, frame_from_records, requests_frame

        parquet, jsonl = self.run_dir / PARQUET_FILE, self.run_dir / REQUESTS_FILE
        if parquet.is_file() and (not jsonl.is_file() or parquet.stat().st_mtime >= jsonl.stat().st_mtime):
            return requests_frame(parquet)
        return frame_from_records(self.records)

    def records_for(self, engine: str, phase: str = "measured") -> list[RequestRecord]:
        """Records of one engine in one phase, in file order."""
        return [r for r in self.records if r.engine == engine and r.phase == phase]


def read_records(path: Path) -> list[RequestRecord]:
    """Read a ``requests.jsonl``, with the token recounts stored beside it merged in
    (:mod:`results.recounts`); a truncated last line (interrupted write) is ignored.

    Raises :class:`ResultsError` naming the line for any other malformed line.
    """
    out: list[RequestRecord] = []
    if not path.exists():
        return out
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); the run folder is damaged") from exc
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror or exc}); the run folder is damaged") from exc
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(RequestRecord.model_validate_json(line))
        except Exception as exc:
            if i == len(lines):  # a write cut short by a crash
                break
            raise ResultsError(f"{path}:{i}: not a valid request record ({str(exc).splitlines()[0]})") from exc
    return merge_recounts(out, read_recounts(path.with_name(RECOUNTS_FILE)))


_V1_NOT_MEASURED = "not measured"
_V1_HARDWARE_HINTS = ("needs an NVIDIA GPU", "needs an AMD GPU", "unsupported hardware")
_V1_NOT_INSTALLED_HINTS = ("not installed", "bench engines setup")


def upgrade_v1_summary(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 ``summary.json`` dict → the version-2 shape (only status words change).

    Version 1 carried "not measured" and the skip cause in prose; this is the one place that
    still reads that prose, so stored runs keep loading.
    """
    engines = {}
    stored = data.get("engines") or {}
    if not isinstance(stored, dict):
        return data  # not upgradable: the validation names the field
    for name, entry in stored.items():
        if not isinstance(entry, dict):
            engines[name] = entry
            continue
        entry = dict(entry)
        reason = str(entry.get("reason") or "")
        if entry.get("status") == "skipped":
            if reason.startswith(_V1_NOT_MEASURED):
                entry["status"] = EngineStatus.NOT_MEASURED.value
            elif any(h in reason for h in _V1_HARDWARE_HINTS):
                entry["skip_cause"] = SkipCause.HARDWARE.value
            elif any(h in reason for h in _V1_NOT_INSTALLED_HINTS):
                entry["skip_cause"] = SkipCause.NOT_INSTALLED.value
            else:
                entry["skip_cause"] = SkipCause.UNAVAILABLE.value
        engines[name] = entry
    return {**data, "engines": engines, "schema_version": SCHEMA_VERSION}


def _read_json(path: Path, run_dir: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); the run folder is damaged") from exc
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{run_dir}: corrupt JSON in {path.name} ({exc})") from exc
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror})") from exc


def _validate(model: type[BaseModel], data: Any, path: Path) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise ResultsError(f"{path}: field {where}: {err['msg']}; the run folder is damaged") from exc


def load_run(run_dir: Path | str) -> Run:
    """Load ``summary.json``, ``manifest.json``, ``requests.jsonl`` and (when present)
    ``recommendation.json`` of one run folder, validated against their models.

    Version-1 folders are upgraded in memory (:func:`upgrade_v1_summary`); nothing on disk is
    rewritten. Raises :class:`ResultsError` (naming the file and field) when the folder or its
    summary is missing, a file is damaged, or the schema's major version is unknown.
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / SUMMARY_FILE
    if summary_path.exists() and not summary_path.is_file():
        raise ResultsError(f"{summary_path} is not a file; the run folder is damaged")
    if not summary_path.is_file():
        if (run_dir / REQUESTS_FILE).is_file():
            raise UnsummarisedRun(run_dir)
        raise ResultsError(f"{run_dir} is not a run folder (no {SUMMARY_FILE}); see `bench results list`")
    summary_data = _read_json(summary_path, run_dir)
    manifest_path = run_dir / MANIFEST_FILE
    if manifest_path.exists() and not manifest_path.is_file():
        raise ResultsError(f"{manifest_path} is not a file; the run folder is damaged")
    manifest_data = _read_json(manifest_path, run_dir) if manifest_path.is_file() else {}
    if not isinstance(summary_data, dict) or not isinstance(manifest_data, dict):
        raise ResultsError(f"{run_dir}: summary.json or manifest.json is not a JSON object; the run folder is damaged")
    version = str(summary_data.get("schema_version", "0"))
    major = version.split(".")[0]
    if major not in READABLE_MAJOR_VERSIONS:
        raise ResultsError(
            f"{run_dir} has result schema {version}; this harness reads {', '.join(m + '.x' for m in READABLE_MAJOR_VERSIONS)}"
        )
    upgraded = None
    if major == "1":
        summary_data, upgraded = upgrade_v1_summary(summary_data), version
    summary_data.setdefault("run_id", run_dir.name)
    summary = _validate(RunSummary, summary_data, summary_path)
    manifest = _validate(Manifest, manifest_data, manifest_path)
    ladder_path = run_dir / LADDER_FILE
    ladder = _validate(LadderSummary, _read_json(ladder_path, run_dir), ladder_path) if ladder_path.is_file() else None
    fidelity_path = run_dir / FIDELITY_FILE
    fidelity = _validate(FidelityCheck, _read_json(fidelity_path, run_dir), fidelity_path) if fidelity_path.is_file() else None
    accuracy_path = run_dir / ACCURACY_FILE
    accuracy = _validate(AccuracyCheck, _read_json(accuracy_path, run_dir), accuracy_path) if accuracy_path.is_file() else None
    map_path = run_dir / WINNER_MAP_FILE
    winners = _validate(WinnerMap, _read_json(map_path, run_dir), map_path) if map_path.is_file() else None
    return Run(run_dir, summary, manifest, read_records(run_dir / REQUESTS_FILE),
               recommendation=read_recommendation(run_dir), upgraded_from=upgraded, ladder=ladder, fidelity=fidelity,
               accuracy=accuracy, winner_map=winners, replay=read_replay(run_dir))


def read_replay(run_dir: Path) -> ReplayCertificate | None:
    """``replay.json`` of ``run_dir`` (None when the run has none). Raises ResultsError when
    it is not a certificate."""
    from .schema.replay import REPLAY_FILE

    path = run_dir / REPLAY_FILE
    return _validate(ReplayCertificate, _read_json(path, run_dir), path) if path.is_file() else None


def is_run_folder(path: Path) -> bool:
    """A folder with a ``summary.json``, or with request records only (a killed run)."""
    return (path / SUMMARY_FILE).exists() or (path / REQUESTS_FILE).is_file()


def list_runs(output_dir: Path | str) -> list[Path]:
    """Run folders under ``output_dir`` (:func:`is_run_folder`), newest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and is_run_folder(p)]
    return sorted(runs, key=lambda p: (created_at(p), p.name), reverse=True)


def created_at(run_dir: Path) -> float:
    """When the run was created, in seconds since the epoch: its manifest's ``created_at``
    (ISO 8601, written by ``bench run``), else the modification time of its oldest artefact
    (``manifest.json``, ``summary.json``, ``requests.jsonl``), else 0. Newest-first listings and
    ``latest`` sort by it: a ``--run-id`` name says nothing about time."""
    from datetime import datetime

    manifest = Path(run_dir) / MANIFEST_FILE
    try:
        stamp = json.loads(manifest.read_text(encoding="utf-8")).get("created_at")
        return datetime.fromisoformat(str(stamp)).timestamp()
    except (OSError, ValueError, TypeError, AttributeError):
        pass  # no, damaged or an old manifest: the files' times
    times = []
    for name in (MANIFEST_FILE, SUMMARY_FILE, REQUESTS_FILE):
        try:
            times.append((Path(run_dir) / name).stat().st_mtime)
        except OSError:
            continue
    return min(times) if times else 0.0


def resolve_run(ref: str, output_dir: Path | str = "results") -> Path:
    """A run reference → its folder: a path, a run id under ``output_dir``, or ``latest``.

    Raises :class:`ResultsError` when nothing matches.
    """
    p = Path(ref)
    if is_run_folder(p):
        return p
    if ref == "latest":
        runs = list_runs(output_dir)
        if not runs:
            raise ResultsError(f"no runs under {output_dir}; run `bench run` first")
        return runs[0]
    cand = Path(output_dir) / ref
    if is_run_folder(cand):
        return cand
    places = [str(p)] + ([str(cand)] if cand.absolute() != p.absolute() else [])  # an absolute ref, or -o .: one place
    raise ResultsError(f"no run {ref!r} (looked for {' and '.join(places)}); see `bench results list`")


def export_run(run_dir: Path, summary: RunSummary | None = None) -> list[Path]:
    """Write ``requests.parquet`` and ``summary.csv`` of ``run_dir`` from its stored files
    (``bench results export``; :class:`RunWriter` does it when a run closes). A capacity
    search's ``search.json`` gives one CSV row per probe. Returns the paths written.
    Raises :class:`ResultsError` for a damaged folder."""
    from .export import write_parquet, write_summary_csv

    run_dir = Path(run_dir)
    records = read_records(run_dir / REQUESTS_FILE)
    if summary is None:
        summary = load_run(run_dir).summary
    probes = None
    search = run_dir / "search.json"
    if search.is_file():
        from .schema import SearchSummary

        probes = {name: entry.probes for name, entry in
                  _validate(SearchSummary, _read_json(search, run_dir), search).engines.items()}
    return [write_parquet(run_dir, records, summary.run_id), write_summary_csv(run_dir, summary, probes)]


def iter_engine_names(summary: RunSummary) -> Iterable[str]:
    """Engine names in the order they were run."""
    return list(summary.engines)
