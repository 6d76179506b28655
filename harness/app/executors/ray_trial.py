"""The node side of ``bench run --executor ray`` (harness/app/executors/ray.py): one trial.

:func:`run_remote_trial` runs on the node Ray placed it on: it starts the engine with the
plan's adapter and runs the same trial body a local run does (e.g. :func:`harness.app.trial.steps.run_trial`:
same client, same measurement step, same metrics), then stops it. Its request records go to the
driver as they are measured, through the :class:`Mailbox` actor the driver drains
(:class:`TrialWriter` is the trial's sink: it buffers records and sends them every
:data:`FLUSH_S` seconds), so a worker that dies mid-trial loses at most the last :data:`FLUSH_S`
of them. Ray is imported lazily (it is an optional extra).
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from adapters.base import EngineError
from results.recounts import TokenRecount
from results.schema import ClientWorker, EngineFacts, RequestRecord

from harness.app.trial.plan import EnginePlan
from harness.app.trial.executor import Body

FLUSH_S = 0.2  # how often a trial sends its buffered records to the driver (s)
LOG_BYTES = 4 * 2**20  # at most this much of a trial's engine log goes back to the run folder (bytes, its tail)


class Mailbox:
    """The Ray actor trials post to and the driver drains: ``(kind, key, payload)`` messages,
    kind ``node`` (where the trial runs), ``records`` (JSON lines), ``recounts`` (their token
    recounts, after the measured phase), ``client_workers`` or ``engine_facts`` (the sink's)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, tuple[str, int], Any]] = []

    def put(self, items: list[tuple[str, tuple[str, int], Any]]) -> None:
        self.items.extend(items)

    def drain(self) -> list[tuple[str, tuple[str, int], Any]]:
        out, self.items = self.items, []
        return out


class TrialWriter:
    """The sink a trial measures into, on its node (:class:`~harness.app.trial.measure.MeasurementSink`):
    records go to the driver buffered, sent every :data:`FLUSH_S` by a thread and at
    :meth:`close`; recounts, client workers and engine facts are sent at once, in order."""

    def __init__(self, mailbox: Any, key: tuple[str, int]) -> None:
        self._mailbox, self._key = mailbox, key
        self._buf: list[tuple[str, tuple[str, int], Any]] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trial-records", daemon=True)
        self._thread.start()

    def send(self, kind: str, payload: Any) -> None:
        """Send one message now (after the records buffered before it), waiting until the mailbox has it."""
        self.flush()
        import ray

        ray.get(self._mailbox.put.remote([(kind, self._key, payload)]))

    def add_record(self, record: RequestRecord) -> None:
        with self._lock:
            self._buf.append(("records", self._key, record.model_dump_json()))

    def add_recounts(self, recounts: Sequence[TokenRecount]) -> None:
        if recounts:
            self.send("recounts", [r.model_dump_json() for r in recounts])

    def add_client_workers(self, count: int, workers: Sequence[ClientWorker]) -> None:
        self.send("client_workers", (count, [w.model_dump_json() for w in workers]))

    def add_engine_facts(self, name: str, facts: EngineFacts) -> None:
        self.send("engine_facts", facts.model_dump_json())

    def flush(self) -> None:
        import ray

        with self._lock:
            batch, self._buf = self._buf, []
        if batch:
            ray.get(self._mailbox.put.remote(batch))

    def _loop(self) -> None:
        while not self._done.wait(FLUSH_S):
            self.flush()

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self.flush()


@dataclass
class TrialResult:
    """What a trial hands back: its body's outcome, the tail of its engine log, or the
    ``error`` (with ``log_tail``) that failed it."""

    outcome: Any = None
    log: bytes = b""
    error: str = ""
    log_tail: str = ""


def node_facts() -> dict[str, Any]:
    """Where this process runs: hostname, IP and Ray node id (the trial's manifest record)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    ip = next((n.get("NodeManagerAddress") for n in ray.nodes() if n.get("NodeID") == node_id), None)
    return {"hostname": socket.gethostname(), "ip": ip or ray.util.get_node_ip_address(), "node_id": node_id,
            "pid": os.getpid()}


def run_remote_trial(body: Body, plan: EnginePlan, key: tuple[str, int], mailbox: Any) -> TrialResult:
    """The body of one trial on its node: ``body(plan, starter, sink, console)`` (the same trial
    body a local run calls, e.g. :func:`harness.app.trial.steps.run_trial`) with the engine
    started here (its logs in a temporary folder, their tail sent back) and the artefacts
    streamed to the driver through ``mailbox``. An engine failure is returned as ``error``,
    never raised."""
    from rich.console import Console

    from harness.app.trial.startup import EngineStarter

    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-trial-{plan.name}-"))
    (run_dir / "logs").mkdir()
    plan = dataclasses.replace(plan, launch=dataclasses.replace(plan.launch, run_dir=run_dir))
    sink = TrialWriter(mailbox, key)
    sink.send("node", node_facts())
    console = Console(file=io.StringIO(), width=160)
    starter = EngineStarter(console, [plan.start_item()], 1)
    out = TrialResult()
    try:
        starter.begin()
        out.outcome = body(plan, starter, sink, console)
    except EngineError as exc:
        out.error, out.log_tail = str(exc), exc.log_tail
    finally:
        starter.close()
        sink.close()
        out.log = _log_tail(run_dir / "logs")
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


def _log_tail(logs: Path) -> bytes:
    """The trial's engine logs (the last :data:`LOG_BYTES` of them), concatenated."""
    data = b"".join(p.read_bytes() for p in sorted(logs.glob("*.log")))
    return data[-LOG_BYTES:]
