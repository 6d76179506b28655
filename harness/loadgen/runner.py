"""Load generation: replay a workload against one endpoint and produce request records.

Dispatch follows an absolute schedule: every session's first turn is due at
``t0 + start_offset_s``; a follow-up turn is due at ``completion + delay_s``. Each due time is
turned into one ``asyncio.sleep`` to that instant (never cumulative sleeps, so no drift). A
closed-loop cap (``max_concurrency``) gates the *send*: ``scheduled_ns`` is the due time,
``send_ns`` is after the gate, so client-side queueing shows up in "TTFT from scheduled".

Every finished request is handed to ``on_record`` at once (the store appends it), so an
interrupted run keeps what finished; a request in flight when the run is interrupted (its task
cancelled: Ctrl-C, SIGTERM) is handed over too, as a failure of class ``interrupted``, before
the cancellation propagates, so ``requests.jsonl`` accounts for every request that was sent
(requests still waiting for their due time or for the concurrency gate were not sent and leave
no record).

A duration-based workload (``Workload.timing``, ``bench run --duration``) is sent on its schedule
for ``duration_s`` from the first arrival, and nothing after: a turn due at or after the end, or
still queued at the concurrency gate when it comes, is not sent (no record). The runner then
drains: it waits at most ``drain_timeout_s`` for the requests in flight and cancels those left;
they are stored with ``error_class`` :data:`results.schema.INCOMPLETE` (a third outcome next to
ok and failed, which the metrics keep out of latencies and failures). A measured request whose
send falls in the first ``warmup_window_s`` or the last ``cooldown_window_s`` of the duration is
stored with phase ``warmup_window`` / ``cooldown_window``, which the metrics skip as they skip
warm-up requests. Re-tokenization (the token-count drift check) is derived
work: it runs after the measured phase (:meth:`Runner.recount`), never on the event loop
while other streams are being timed (``vllm bench serve`` does the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from results.recounts import TokenRecount, recount_of
from results.schema import INCOMPLETE, RequestRecord
from results.schema.records import STOPPED_PHASE
from workloads.base import FollowUp, Reply, RequestSpec, RunTiming, Session, Workload

from harness.loadgen.client import EndpointTarget, StreamText, new_session, stream_texts

START_LEAD_NS = 50_000_000  # first measured request is due 50 ms after the schedule is built
GC_GEN0_THRESHOLD = 20_000
"""Allocations between young-generation collections while a phase is measured (CPython's
default is 700): with 2,000 streams in flight the default collected ~470 times a phase."""


@contextmanager
def quiet_gc() -> Iterator[None]:
    """The garbage collector kept off the measured path: every object alive before the phase
    (torch, transformers, the workload: ~340,000 tracked objects) is moved to the permanent
    generation (``gc.freeze``) so the phase's full collections do not traverse it, and young
    collections run every :data:`GC_GEN0_THRESHOLD` allocations. Restored on exit. Profile of
    ``bench run`` on the null server (2,000 requests, rate inf): GC took ~1.0 s of a 2.8 s
    event loop, ~0.8 s of it the three full collections of the pre-existing heap."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@dataclass
class RunnerOptions:
    """``max_concurrency``: cap on in-flight requests (None = workload's, else unbounded);
    ``request_timeout_s``: per-request client timeout; ``keep_text``: store every reply's text;
    ``repeat``: the repeat index stamped on every record (``bench run --repeats``);
    ``max_sessions``: cap on sessions in flight (closed-loop users: a session holds its place
    from its first turn's send to its last turn's end, think times included, and the next
    session starts when one ends; its first turn is scheduled then; None = no cap);
    ``stop_when``: told of each measured record as it ends; once it answers True the phase stops
    (sessions not started are not sent, requests in flight are cancelled and stored with phase
    :data:`~results.schema.records.STOPPED_PHASE`, never in metrics): a load-ladder point whose
    SLO verdict can no longer change (:class:`harness.scoring.capacity.frontier.SloWatch`)."""

    max_concurrency: int | None = None
    request_timeout_s: float = 600.0
    keep_text: bool = False
    repeat: int = 0
    max_sessions: int | None = None
    stop_when: Callable[[RequestRecord], bool] | None = None  # told of each measured record; True: stop the phase


class _Tokenizer:
    """Re-tokenization for the drift check (one pass over the whole text)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer

    def output_tokens(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False))

    def input_tokens(self, req: RequestSpec) -> int | None:
        if req.prompt_token_ids is not None:
            return len(req.prompt_token_ids)
        try:
            if req.messages is not None:
                ids = self.tok.apply_chat_template(req.messages, tokenize=True, add_generation_prompt=True)
                if isinstance(ids, dict):  # BatchEncoding
                    ids = ids["input_ids"]
                return len(ids)
            if req.prompt is not None:
                return len(self.tok.encode(req.prompt))
        except Exception:  # a model without a chat template: no estimate
            return None
        return None


@dataclass(frozen=True)
class _Clock:
    """A duration-based run's instants (``perf_counter_ns``): sends end at ``end_ns``, the drain
    at ``drain_end_ns``; sends before ``warm_end_ns`` or from ``cool_start_ns`` are windowed."""

    timing: RunTiming
    end_ns: int
    drain_end_ns: int
    warm_end_ns: int
    cool_start_ns: int

    @classmethod
    def starting(cls, start_ns: int, timing: RunTiming) -> _Clock:
        end = start_ns + int(timing.duration_s * 1e9)
        return cls(timing, end, end + int(timing.drain_timeout_s * 1e9), start_ns + int(timing.warmup_window_s * 1e9),
                   end - int(timing.cooldown_window_s * 1e9))

    def phase(self, send_ns: int | None) -> str:
        """The phase of a measured request sent at ``send_ns``."""
        if send_ns is None:
            return "measured"
        if self.timing.warmup_window_s > 0 and send_ns < self.warm_end_ns:
            return "warmup_window"
        if self.timing.cooldown_window_s > 0 and send_ns >= self.cool_start_ns:
            return "cooldown_window"
        return "measured"


class Runner:
    """Replays requests against one endpoint with one aiohttp session."""

    def __init__(
        self,
        target: EndpointTarget,
        engine: str,
        workload_name: str,
        on_record: Callable[[RequestRecord], None],
        tokenizer: Any | None = None,
        options: RunnerOptions | None = None,
        on_progress: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self.target = target
        self.engine = engine
        self.workload_name = workload_name
        self.on_record = on_record
        self.tok = _Tokenizer(tokenizer) if tokenizer is not None else None
        self.options = options or RunnerOptions()
        self.on_progress = on_progress
        self.records: list[RequestRecord] = []
        self._texts: dict[tuple[str, str], tuple[RequestSpec, str]] = {}  # kept for recount()
        self._clock: _Clock | None = None  # set by measure() for a duration-based workload
        self._drained = False  # the drain bound ran out: cancelled requests are incomplete
        self._stopped = False  # stop_when answered True: the phase stopped early
        self._stop: asyncio.Event | None = None

    def _late(self, phase: str) -> bool:
        """A measured request of a duration-based run whose time is up: not sent."""
        return self._clock is not None and phase == "measured" and time.perf_counter_ns() >= self._clock.end_ns

    def _settle(self, record: RequestRecord) -> None:
        """A duration-based run's verdicts on a measured record: its window phase, and
        ``incomplete`` for a request the drain bound cut (the client calls it interrupted)."""
        clock = self._clock
        if clock is None or record.phase != "measured":
            return
        record.phase = clock.phase(record.send_ns)
        if self._drained and record.error_class == "interrupted":
            record.error_class = INCOMPLETE
            record.error_message = (f"still in flight {clock.timing.drain_timeout_s:g} s after the "
                                    f"{clock.timing.duration_s:g} s run ended (the drain bound): cancelled after "
                                    f"{len(record.chunk_times_ns)} token-bearing chunks")

    def _new_record(self, req: RequestSpec, scheduled_ns: int, phase: str) -> RequestRecord:
        return RequestRecord(
            request_id=req.request_id,
            engine=self.engine,
            workload=self.workload_name,
            session_id=req.session_id,
            turn_id=req.turn_id,
            branch_id=req.branch_id,
            phase=phase,
            repeat=self.options.repeat,
            scheduled_ns=scheduled_ns,
            input_tokens_expected=req.input_tokens_expected,
            max_tokens=req.max_tokens,
        )

    async def _one(
        self,
        http: Any,
        req: RequestSpec,
        scheduled_ns: int,
        gate: asyncio.Semaphore | None,
        phase: str,
    ) -> tuple[RequestRecord, StreamText] | None:
        """Send ``req`` at ``scheduled_ns`` (after ``gate``); None when a duration-based run's
        time ran out before it could be sent."""
        delay = (scheduled_ns - time.perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        record = self._new_record(req, scheduled_ns, phase)
        sent = False
        try:
            if gate is not None:
                async with gate:
                    if self._late(phase):  # queued at the gate until the time was up
                        return None
                    sent = True
                    reply = await stream_texts(http, self.target, req, record)
            else:
                sent = True
                reply = await stream_texts(http, self.target, req, record)
        except asyncio.CancelledError:
            if sent:  # in flight at an interrupt or the drain bound: stored before it propagates
                self._settle(record)
                if self._stopped:  # the phase stopped early (stop_when): cut, not failed
                    record.phase = STOPPED_PHASE
                self.records.append(record)
                self.on_record(record)
            raise
        self._settle(record)
        if self.tok is not None:
            self._texts[record.request_id, record.phase] = (req, reply.text)
        if self.options.keep_text and record.output_text is None:
            record.output_text = reply.text
        self.records.append(record)
        self.on_record(record)
        if self.on_progress is not None:
            self.on_progress(record)
        stop = self.options.stop_when
        if stop is not None and self._stop is not None and record.phase == "measured" and stop(record):
            self._stop.set()
        return record, reply

    def recount(self) -> list[TokenRecount]:
        """Fill ``input_tokens_retok`` / ``output_tokens_retok`` of every record so far (one
        tokenizer pass each) and return their recounts, to be stored beside the records
        (:mod:`results.recounts`); call it after the measured phase. A runner without a
        tokenizer counts nothing."""
        if self.tok is None:
            return []
        out = []
        for record in self.records:
            kept = self._texts.pop((record.request_id, record.phase), None)
            if kept is None:
                continue
            req, text = kept
            record.output_tokens_retok = self.tok.output_tokens(text)
            record.input_tokens_retok = self.tok.input_tokens(req)
            out.append(recount_of(record))
        return out

    async def _session(self, http: Any, session: Session, t0: int, gate: asyncio.Semaphore | None,
                       users: asyncio.Semaphore | None = None) -> None:
        """Replay one session; with ``users`` (the session cap) it waits for a place first and
        its first turn is due when it has one."""
        if users is None:
            return await self._replay(http, session, t0 + int(session.start_offset_s * 1e9), gate)
        async with users:
            await self._replay(http, session, max(t0 + int(session.start_offset_s * 1e9), time.perf_counter_ns()), gate)

    async def _replay(self, http: Any, session: Session, first_ns: int, gate: asyncio.Semaphore | None) -> None:
        tasks: set[asyncio.Task] = set()

        def spawn(when: int, req: RequestSpec) -> None:
            if self._clock is not None and when >= self._clock.end_ns:
                return  # due after a duration-based run's end: not sent
            t = asyncio.create_task(turn(when, req))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        async def turn(when: int, req: RequestSpec) -> None:
            done = await self._one(http, req, when, gate, "measured")
            if done is None:
                return
            record, reply = done
            done_ns = record.end_ns or time.perf_counter_ns()
            # answer and reasoning apart: the next turn's history keeps only the answer
            follow: list[FollowUp] = session.on_complete(req, Reply(reply.answer, reply.reasoning, record.success))
            for f in follow:
                spawn(done_ns + int(f.delay_s * 1e9), f.request)

        spawn(first_ns, session.first_request())
        while tasks:
            await asyncio.gather(*list(tasks))

    async def warmup(self, requests: Sequence[RequestSpec], concurrency: int = 2) -> list[RequestRecord]:
        """Send warm-up requests (phase ``warmup``: stored, never in metrics), ``concurrency``
        at a time."""
        out: list[RequestRecord] = []
        gate = asyncio.Semaphore(max(1, concurrency))
        async with new_session(self.options.request_timeout_s) as http:
            now = time.perf_counter_ns()
            results = await asyncio.gather(*(self._one(http, r, now, gate, "warmup") for r in requests))
        out.extend(done[0] for done in results if done is not None)
        return out

    async def measure(self, workload: Workload, t0_ns: int | None = None) -> list[RequestRecord]:
        """Replay every session of ``workload`` (a duration-based one until its time is up, then
        drained within its bound: see the module docstring); returns the measured records
        (phase ``measured``; the windows' records are in :attr:`records` too). ``t0_ns``: the
        schedule's origin (perf_counter_ns; a session's first turn is due at ``t0_ns +
        start_offset_s``), given by a driver that splits one schedule over several client
        processes (:mod:`harness.loadgen.workers`); None = now + :data:`START_LEAD_NS`, less the
        first arrival's offset. A duration's clock starts at ``t0_ns +
        RunTiming.start_offset_s`` (the whole workload's first arrival)."""
        cap = self.options.max_concurrency or workload.max_concurrency
        gate = asyncio.Semaphore(cap) if cap else None
        with quiet_gc():
            async with new_session(self.options.request_timeout_s) as http:
                if t0_ns is None:
                    t0_ns = schedule_origin(workload.sessions)
                timing = workload.timing
                self._clock = None if timing is None else _Clock.starting(t0_ns + int(timing.start_offset_s * 1e9), timing)
                self._drained = False
                users = asyncio.Semaphore(self.options.max_sessions) if self.options.max_sessions else None
                self._stopped, self._stop = False, asyncio.Event()
                jobs = asyncio.gather(*(self._session(http, s, t0_ns, gate, users) for s in workload.sessions))
                if self._clock is None and self.options.stop_when is not None:
                    await self._unless_stopped(jobs)
                elif self._clock is None:
                    await jobs
                else:
                    await self._until(jobs, self._clock.drain_end_ns)
        return [r for r in self.records if r.phase == "measured"]

    async def _unless_stopped(self, jobs: asyncio.Future) -> None:
        """Await ``jobs`` unless ``stop_when`` answers True first: then cancel what is left
        (stored as stopped, not failed); an interrupt meanwhile propagates as usual."""
        assert self._stop is not None
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            done, _ = await asyncio.wait({jobs, stopper}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            jobs.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await jobs
            raise
        finally:
            stopper.cancel()
        if jobs in done:
            jobs.result()
            return
        self._stopped = True
        jobs.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await jobs

    async def _until(self, jobs: asyncio.Future, deadline_ns: int) -> None:
        """Await ``jobs`` until ``deadline_ns``, then cancel what is left as incomplete; an
        interrupt meanwhile cancels them as interrupted and propagates."""
        try:
            done, _ = await asyncio.wait({jobs}, timeout=max(0.0, (deadline_ns - time.perf_counter_ns()) / 1e9))
        except asyncio.CancelledError:
            jobs.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await jobs  # every in-flight record is stored before the interrupt propagates
            raise
        if done:
            jobs.result()
            return
        self._drained = True
        jobs.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await jobs


def schedule_origin(sessions: Sequence[Session], lead_ns: int = START_LEAD_NS) -> int:
    """The schedule's origin (perf_counter_ns) such that the first arrival is due ``lead_ns``
    from now: the clock starts at the first arrival, the idle lead-in before it is skipped (it
    is outside every metric anyway: the measured duration starts at the first send)."""
    lead = min((s.start_offset_s for s in sessions), default=0.0)
    return time.perf_counter_ns() + lead_ns - int(lead * 1e9)
