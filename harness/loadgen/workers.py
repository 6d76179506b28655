"""Several client processes for one engine (``bench run --client-workers N``).

One process's event loop tops out at about 1,000-2,000 streamed requests/s; a deployment behind
one endpoint serves more. The driver (the ``bench`` process) builds the workload once, splits
its sessions over ``N`` worker processes (multiprocessing, ``spawn`` context: no fork of a
process holding threads and torch) and each worker replays its share with the ordinary
:class:`~harness.loadgen.runner.Runner` on the **absolute** schedule:

- sessions are dealt round-robin in order of their start offset, so each worker offers about
  1/N of the rate with the same shape; a session is never split (its turns depend on its
  replies);
- the driver pings each worker over its pipe (:data:`PINGS` round trips) and keeps, per worker,
  the estimate ``worker perf_counter_ns − midpoint of the round trip`` with the shortest round
  trip, and half that round trip as its error (recorded in the manifest with the worker's host);
  on one host CLOCK_MONOTONIC is shared, so the offset applied is 0; a worker on another host
  would get the common start instant shifted by its estimate;
- then it sends every worker the same start instant (``t0``: the first arrival is due
  :data:`WORKER_LEAD_NS` later) and ``scheduled_ns`` of every record is ``t0 + start offset`` of
  the one schedule;
- records flow back as they finish (batched every :data:`FLUSH_S`, sent by a thread so the
  worker's event loop never waits on the pipe) and the driver hands each to the runner's
  ``on_record`` (the store) and ``on_progress``: one ``requests.jsonl``, the same schema, each
  record's ``worker`` set; the reply texts come too when the driver re-tokenizes afterwards.

Each worker has a pipe of its own (a worker killed mid-write corrupts only its own pipe, where a
shared ``multiprocessing.Queue`` could be left locked for the others). A worker that exits
before it reported the end of its share (killed, crashed) is noticed by its pipe's EOF: the
first request of each of its sessions that has no record is recorded as failed, error class
:data:`WORKER_LOST`, with the exit status as the reason, and the run goes on with the others
(a later turn of a session that had returned records is counted as aborted by the metrics).

Stopping: workers ignore SIGINT (the terminal's Ctrl-C reaches the whole foreground group; the
driver decides). When the driver's phase is interrupted (Ctrl-C, SIGTERM) it SIGTERMs every
worker, whose runner records its in-flight requests as ``interrupted``, stores what they send for
up to :data:`STOP_GRACE_S` seconds, SIGKILLs what is left, and re-raises. A worker also dies
with its parent: ``PR_SET_PDEATHSIG`` (SIGKILL) on Linux and a thread that exits when its parent
pid changes (the way ``adapters/runtime/watchdog.py`` watches the harness), so none is left behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from results.schema import ClientWorker, RequestRecord
from workloads.base import RequestSpec, Session, Workload

from harness.loadgen.client import EndpointTarget
from harness.loadgen.runner import Runner, RunnerOptions, schedule_origin

MAX_WORKERS = 64
"""Upper bound on ``--client-workers`` (each is a Python process of ~100 MB)."""
WORKER_LEAD_NS = 300_000_000
"""The first arrival is due 300 ms after the start instant is sent: time for every worker to
receive it and create its session's tasks."""
PINGS = 5
"""Round trips per worker for the clock-offset estimate (the shortest one is kept)."""
FLUSH_S = 0.02
"""A worker sends its finished records every 20 ms (one pipe message per batch)."""
READY_TIMEOUT_S = 120.0
"""How long a worker may take to start (import the harness, unpickle its sessions), in s."""
STOP_GRACE_S = 5.0
"""After SIGTERM, how long (s) the driver keeps storing a worker's records before SIGKILL."""
WORKER_LOST = "worker_lost"
"""``RequestRecord.error_class`` of a request whose client worker exited before its record came back."""
_PARENT_POLL_S = 0.5


class WorkersError(RuntimeError):
    """A client worker could not be started (it exited or did not report ready in time)."""


def split_sessions(sessions: Sequence[Session], n: int) -> list[list[Session]]:
    """Deal ``sessions`` round-robin, in order of start offset, into ``n`` shares (whole sessions)."""
    ordered = sorted(sessions, key=lambda s: s.start_offset_s)
    return [ordered[i::n] for i in range(n)]


def split_cap(cap: int | None, n: int) -> list[int | None]:
    """A closed-loop cap on in-flight requests split over ``n`` workers (sums to ``cap``).
    Raises ValueError when ``cap`` < ``n`` (a worker would have no request in flight)."""
    if cap is None:
        return [None] * n
    if cap < n:
        raise ValueError(f"--max-concurrency {cap} is smaller than --client-workers {n}: "
                         f"each worker needs at least one request in flight; use at most {cap} workers")
    return [cap // n + (i < cap % n) for i in range(n)]


@dataclass
class _Worker:
    index: int
    process: Any
    conn: Connection
    sessions: list[Session]
    info: ClientWorker
    done: bool = False
    closed: bool = False


class WorkerPool:
    """Measures one engine with ``workers`` client processes, in place of :meth:`Runner.measure`.

    ``runner``: the driver's runner (its target, engine, options, ``on_record``, ``on_progress``
    and tokenizer; records returned land in ``runner.records`` and their texts where
    :meth:`Runner.recount` finds them). After :meth:`measure`, ``info`` holds one
    :class:`ClientWorker` per process for the manifest, also handed to ``on_info``.
    """

    def __init__(self, runner: Runner, workers: int,
                 on_info: Callable[[list[ClientWorker]], None] | None = None) -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"--client-workers must be between 1 and {MAX_WORKERS}, got {workers}")
        self.runner = runner
        self.n = workers
        self.info: list[ClientWorker] = []
        self.on_info = on_info  # called with ``info`` once the phase ends (the manifest's record)
        self._workers: list[_Worker] = []

    async def measure(self, workload: Workload) -> list[RequestRecord]:
        """Replay ``workload`` over the workers; returns the measured records (as
        :meth:`Runner.measure`). A cap on requests in flight is split over the workers (a cap
        below the worker count starts one worker per request in flight). Raises
        :class:`WorkersError` when a worker does not start."""
        cap = self.runner.options.max_concurrency or workload.max_concurrency
        self.n = min(self.n, cap or self.n)  # a spec file's cap below the count: one worker per request in flight
        caps = split_cap(cap, self.n)
        shares = split_sessions(workload.sessions, self.n)
        t0: int | None = None
        try:
            self._start(workload, shares, caps)
            t0 = schedule_origin(workload.sessions, WORKER_LEAD_NS)
            for w in self._workers:
                applied = w.info.clock_offset_applied and w.info.clock_offset_ns is not None
                w.conn.send(("start", t0 + (w.info.clock_offset_ns if applied else 0)))  # type: ignore[operator]
            loop = asyncio.get_running_loop()
            while not all(w.closed for w in self._workers):
                ready = await loop.run_in_executor(None, wait, [w.conn for w in self._workers if not w.closed], 0.2)
                for conn in ready:
                    self._receive(next(w for w in self._workers if w.conn is conn))
        except BaseException:
            self._stop()
            raise
        finally:
            self._close(t0)
        return [r for r in self.runner.records if r.phase == "measured"]

    # -- start -------------------------------------------------------------------------
    def _start(self, workload: Workload, shares: list[list[Session]], caps: list[int | None]) -> None:
        ctx = mp.get_context("spawn")
        r = self.runner
        host = socket.gethostname()
        session_caps = split_cap(r.options.max_sessions, len(shares)) if r.options.max_sessions else [None] * len(shares)
        for i, (share, cap) in enumerate(zip(shares, caps)):
            here, there = ctx.Pipe(duplex=True)
            options = dataclasses.replace(r.options, max_concurrency=cap, max_sessions=session_caps[i])
            p = ctx.Process(target=worker_main, name=f"bench-client-worker-{i}", daemon=True,
                            args=(i, there, os.getpid(), r.target, r.engine, r.workload_name, workload.name, options,
                                  share, r.tok is not None))
            p.start()
            there.close()
            info = ClientWorker(index=i, engine=r.engine, repeat=r.options.repeat, host=host, sessions=len(share))
            self._workers.append(_Worker(i, p, here, share, info))
        for w in self._workers:
            if not w.conn.poll(READY_TIMEOUT_S):
                raise WorkersError(f"client worker {w.index} did not start within {READY_TIMEOUT_S:g} s")
            try:
                _, w.info.host, w.info.pid = w.conn.recv()
            except (EOFError, OSError) as exc:
                raise WorkersError(f"client worker {w.index} exited while starting "
                                   f"(exit status {w.process.exitcode})") from exc
            self._estimate_offset(w, host)

    def _estimate_offset(self, w: _Worker, driver_host: str) -> None:
        best: tuple[int, int] | None = None  # (round trip, offset)
        for _ in range(PINGS):
            a = time.perf_counter_ns()
            w.conn.send(("ping",))
            theirs = w.conn.recv()
            b = time.perf_counter_ns()
            if best is None or b - a < best[0]:
                best = (b - a, theirs - (a + b) // 2)
        assert best is not None
        w.info.clock_offset_ns, w.info.clock_offset_error_ns = best[1], best[0] // 2
        w.info.clock_offset_applied = w.info.host != driver_host  # one host: CLOCK_MONOTONIC is shared

    # -- records -----------------------------------------------------------------------
    def _receive(self, w: _Worker) -> None:
        try:
            msg = w.conn.recv()
        except Exception:  # EOF (the worker exited), or a message cut by a kill mid-write
            w.closed = True
            return
        if msg[0] == "records":
            for record, req, text in msg[1]:
                self._store(w, record, req, text)
        elif msg[0] == "done":
            w.done = True

    def _store(self, w: _Worker, record: RequestRecord, req: RequestSpec | None, text: str | None,
               returned: bool = True) -> None:
        r = self.runner
        record.worker = w.index
        w.info.records += returned
        if req is not None and text is not None:
            r._texts[record.request_id, record.phase] = (req, text)
        r.records.append(record)
        r.on_record(record)
        if r.on_progress is not None and record.error_class != "interrupted":
            r.on_progress(record)

    # -- stop --------------------------------------------------------------------------
    def _stop(self) -> None:
        """Interrupted: SIGTERM every worker and store what they send for :data:`STOP_GRACE_S`."""
        for w in self._workers:
            if w.process.is_alive():
                w.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        while (open_ := [w.conn for w in self._workers if not w.closed]) and time.monotonic() < deadline:
            for conn in wait(open_, max(0.0, deadline - time.monotonic())):
                self._receive(next(w for w in self._workers if w.conn is conn))

    def _close(self, t0: int | None) -> None:
        """Every worker gone (SIGKILL after the grace), lost requests recorded, ``info`` filled."""
        for w in self._workers:
            w.process.join(STOP_GRACE_S if w.done else 0.5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5)
            w.conn.close()
            w.info.exitcode = w.process.exitcode
            if not w.done and t0 is not None:
                self._record_lost(w, t0)
        self.info = [w.info for w in self._workers]
        if self.on_info is not None and self.info:
            self.on_info(self.info)

    def _record_lost(self, w: _Worker, t0: int) -> None:
        # a single-request session is named after its request (its records carry no session id)
        seen = {key for rec in self.runner.records if rec.worker == w.index for key in (rec.session_id, rec.request_id)}
        code = w.process.exitcode
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}")
        for session in w.sessions:
            if session.session_id in seen:
                continue
            req = session.first_request()
            record = self.runner._new_record(req, t0 + int(session.start_offset_s * 1e9), "measured")
            record.error_class = WORKER_LOST
            record.error_message = (f"client worker {w.index} (pid {w.info.pid}, host {w.info.host}) {how} before "
                                    "this request's record came back (it may have been sent)")
            w.info.lost += 1
            self._store(w, record, None, None, returned=False)


# -- the worker process ------------------------------------------------------------------
class _KeepText:
    """Stands in for a tokenizer in a worker: the runner then keeps each reply's text (for the
    driver's re-tokenization) without tokenizing anything here."""


def worker_main(index: int, conn: Connection, parent_pid: int, target: EndpointTarget, engine: str,
                workload_name: str, name: str, options: RunnerOptions, sessions: list[Session],
                send_texts: bool) -> None:
    """A client worker: report ready, answer pings, replay ``sessions`` from the start instant."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops us (SIGTERM), not the terminal
    conn.send(("ready", socket.gethostname(), os.getpid()))
    while True:
        msg = conn.recv()
        if msg[0] == "ping":
            conn.send(time.perf_counter_ns())
        elif msg[0] == "start":
            t0 = msg[1]
            break
    out: queue.SimpleQueue = queue.SimpleQueue()
    sender = threading.Thread(target=_send_loop, args=(out, conn), name="records-sender", daemon=True)
    sender.start()
    try:
        asyncio.run(_replay(out, target, engine, workload_name, name, options, sessions, send_texts, t0))
    except asyncio.CancelledError:
        pass  # SIGTERM: in-flight requests were recorded as interrupted and sent
    finally:
        out.put(None)
        sender.join()
        try:
            conn.send(("done",))
        except OSError:
            pass
        conn.close()


async def _replay(out: queue.SimpleQueue, target: EndpointTarget, engine: str, workload_name: str, name: str,
                  options: RunnerOptions, sessions: list[Session], send_texts: bool, t0: int) -> None:
    batch: list[tuple[RequestRecord, RequestSpec | None, str | None]] = []
    runner: Runner

    def on_record(record: RequestRecord) -> None:
        kept = runner._texts.pop((record.request_id, record.phase), None) if send_texts else None
        batch.append((record, kept[0] if kept else None, kept[1] if kept else None))

    runner = Runner(target, engine, workload_name, on_record, None, options)
    if send_texts:
        runner.tok = _KeepText()  # type: ignore[assignment]
    task = asyncio.current_task()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: task.cancel() if task else None)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            if batch:
                out.put(batch[:])
                batch.clear()

    flush = asyncio.create_task(flusher())
    try:
        await runner.measure(Workload(name, list(sessions), spec={}, max_concurrency=options.max_concurrency), t0)
    finally:
        flush.cancel()
        if batch:
            out.put(batch[:])


def _send_loop(out: queue.SimpleQueue, conn: Connection) -> None:
    while (batch := out.get()) is not None:
        try:
            conn.send(("records", batch))
        except OSError:  # the driver is gone
            return


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the driver dies: PR_SET_PDEATHSIG on Linux, and a thread that
    exits the process when the parent pid changes (reparented: the driver is gone)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(1)


def client_measurer(runner: Runner, workers: int,
                    on_info: Callable[[int, list[ClientWorker]], None]) -> Runner | WorkerPool:
    """What measures a phase: ``runner`` itself for one worker, else a :class:`WorkerPool`
    whose processes are handed to ``on_info(workers, info)`` once the phase ends, interrupted or
    not (the run's sink records them in the manifest's ``client_workers``: ``count`` for the
    validity gate, one entry per process and phase)."""
    if workers == 1:
        return runner
    return WorkerPool(runner, workers, on_info=lambda info: on_info(workers, info))
