"""The node side of ``bench run --executor ray`` (harness/app/executors/ray.py): one trial.

:func:`run_trial` runs on the node Ray placed it on: it starts the engine with the plan's
adapter, measures one repeat with the orchestrator's own ``_measure_engine`` (same client,
same metrics) and stops it. Its request records go to the driver as they are measured,
through the :class:`Mailbox` actor the driver drains (:class:`TrialWriter` buffers them and
sends every :data:`FLUSH_S` seconds), so a worker that dies mid-trial loses at most the last
:data:`FLUSH_S` of them. Ray is imported lazily (it is an optional extra).
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.base import EngineError
from results.schema import Manifest, RequestRecord

from harness.app.run.engine_turns import EngineTurns
from harness.app.run.orchestrator import Orchestrator
from harness.app.core.plan import EnginePlan
from harness.app.core.settings import RunSettings as RunConfig  # the body still says RunConfig

FLUSH_S = 0.2  # how often a trial sends its buffered records to the driver (s)
LOG_BYTES = 4 * 2**20  # at most this much of a trial's engine log goes back to the run folder (bytes, its tail)


class Mailbox:
    """The Ray actor trials post to and the driver drains: ``(kind, key, payload)`` messages,
    kind ``node`` (where the trial runs), ``records`` (JSON lines) or ``replace`` (records
    whose derived fields were filled after the measured phase)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, tuple[str, int], Any]] = []

    def put(self, items: list[tuple[str, tuple[str, int], Any]]) -> None:
        self.items.extend(items)

    def drain(self) -> list[tuple[str, tuple[str, int], Any]]:
        out, self.items = self.items, []
        return out


class TrialWriter:
    """The ``RunWriter`` a trial measures into, on its node: records go to the driver (buffered,
    sent every :data:`FLUSH_S` by a thread and at :meth:`close`); the engine's manifest entry
    stays here for the trial's outcome."""

    def __init__(self, run_dir: Path, mailbox: Any, key: tuple[str, int], manifest: Manifest) -> None:
        self.run_dir = run_dir
        self.manifest = manifest
        self._mailbox, self._key = mailbox, key
        self._buf: list[tuple[str, tuple[str, int], Any]] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trial-records", daemon=True)
        self._thread.start()

    def send(self, kind: str, payload: Any) -> None:
        """Send one message now, waiting until the mailbox has it."""
        self.flush()
        import ray

        ray.get(self._mailbox.put.remote([(kind, self._key, payload)]))

    def add_record(self, record: RequestRecord) -> None:
        with self._lock:
            self._buf.append(("records", self._key, record.model_dump_json()))

    def replace_records(self, records: Any) -> None:
        self.flush()
        self.send("replace", [r.model_dump_json() for r in records])

    def write_manifest(self) -> None:  # the driver writes the manifest from the trial's outcome
        pass

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
class TrialOutcome:
    """What a trial hands back: its :class:`EngineTurns` (one repeat), the equivalence texts,
    the engine's manifest entry and effective settings, the tail of its engine log, or the
    ``error`` (with ``log_tail``) that failed it."""

    turns: EngineTurns | None = None
    equivalence: list[str] | None = None
    manifest_entry: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
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


def run_trial(cfg: RunConfig, plan: EnginePlan, workload: Any, tokenizer: Any, repeat: int, manifest: Manifest,
              mailbox: Any) -> TrialOutcome:
    """The body of one trial on its node: start ``plan``'s engine, measure repeat ``repeat`` of
    ``workload`` with the orchestrator's own ``_measure_engine``, stop the engine. An engine
    failure is returned as ``error``, never raised."""
    from rich.console import Console

    from harness.app.core.startup import EngineStarter

    name = plan.name
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-trial-{name}-"))
    (run_dir / "logs").mkdir()
    plan = dataclasses.replace(plan, launch=dataclasses.replace(plan.launch, run_dir=run_dir))
    writer = TrialWriter(run_dir, mailbox, (name, repeat), manifest.model_copy(update={"engines": {}}))
    writer.send("node", node_facts())
    console = Console(file=io.StringIO(), width=160)
    orch = Orchestrator(cfg, console)
    parity = getattr(orch, "parity", None)  # --parity's effective settings, read once per engine
    if parity is not None:
        parity.hardware = plan.hardware_kind
    turns = EngineTurns(plan)
    starter = EngineStarter(console, [plan.start_item()], 1)
    out = TrialOutcome()
    try:
        starter.begin()
        out.equivalence = orch._measure_engine(turns, starter, writer, workload, tokenizer, repeat)
        out.turns, out.settings = turns, dict(parity.settings) if parity is not None else {}
        out.manifest_entry = writer.manifest.engines.get(name, {})
    except EngineError as exc:
        out.error, out.log_tail = str(exc), exc.log_tail
    finally:
        starter.close()
        writer.close()
        out.log = _log_tail(run_dir / "logs")
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


def _log_tail(logs: Path) -> bytes:
    """The trial's engine logs (the last :data:`LOG_BYTES` of them), concatenated."""
    data = b"".join(p.read_bytes() for p in sorted(logs.glob("*.log")))
    return data[-LOG_BYTES:]
