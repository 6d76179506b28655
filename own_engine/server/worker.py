"""The engine thread: one background thread owns the :class:`~own_engine.engine.LLMEngine`.

The engine is not thread-safe and its ``step()`` is a blocking PyTorch call, so it never runs
on the asyncio event loop. Request handlers talk to it only through this class:

- :meth:`EngineWorker.submit` (async) puts an ``add`` command on a thread-safe
  :class:`queue.Queue` and awaits the engine's acceptance (``add_request`` raising
  ``ValueError`` is re-raised in the handler, so bad requests become HTTP 400 before any
  byte is streamed). It returns an :class:`asyncio.Queue` that receives the request's
  :class:`RequestOutput` objects (one per engine step), delivered with
  ``loop.call_soon_threadsafe`` - the pattern of vLLM's ``AsyncLLM`` output handler.
- :meth:`EngineWorker.abort` (any thread, non-blocking) asks the thread to abort a request
  (client disconnect, stop string matched); the engine frees its KV blocks.
- :meth:`EngineWorker.stats` returns the latest ``engine.stats()`` snapshot, refreshed by the
  thread every :data:`STATS_INTERVAL_S` while busy and whenever it goes idle (a dict replaced
  atomically, never mutated after publishing).

Loop: drain commands (block while idle) → ``engine.step()`` → deliver outputs → refresh stats.
If ``step()`` raises, every in-flight request receives an :class:`EngineFailure` (its stream
ends with an SSE error event), the requests are aborted in the engine and the loop goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("own_engine.server")

# engine.stats() is read at most this often while busy (seconds), and always before idling,
# so /metrics is never more than one interval stale and reads the final state when idle.
STATS_INTERVAL_S = 0.05


class EngineNotRunning(RuntimeError):
    """The engine thread is not running (never started, stopped, or crashed)."""


@dataclass(frozen=True)
class EngineFailure:
    """Delivered instead of an output when the engine raised while the request was in flight."""

    message: str


@dataclass
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: Any
    deliver: Callable[[Any], None]
    accepted: concurrent.futures.Future


@dataclass(frozen=True)
class _Abort:
    request_id: str


_STOP = object()


class EngineWorker:
    """Runs ``engine.step()`` in one daemon thread; see the module docstring for the protocol.

    ``engine``: an object with the ``LLMEngine`` API (``add_request``, ``abort``, ``step``,
    ``has_unfinished``, ``stats``).
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._commands: queue.Queue[Any] = queue.Queue()
        # touched by the engine thread only: per request, where outputs go and how many of its
        # n samples (RequestOutput.index) are still unfinished
        self._sinks: dict[str, Callable[[Any], None]] = {}
        self._unfinished: dict[str, int] = {}
        self._stats: dict[str, Any] = self._read_stats()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # orders submit() against the thread's exit
        self._closed = False
        self.last_error: str | None = None
        self.steps = 0

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the engine thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="own-engine-step", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread after its current step; in-flight requests get an :class:`EngineFailure`."""
        if self._thread is None:
            return
        self._commands.put(_STOP)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("engine thread did not stop within %.1f s", timeout_s)

    @property
    def alive(self) -> bool:
        """True while the engine thread runs and accepts requests."""
        return self._thread is not None and self._thread.is_alive() and not self._closed

    # ---------------------------------------------------------------- handler side
    async def submit(
        self, request_id: str, prompt_token_ids: list[int], sampling_params: Any
    ) -> asyncio.Queue:
        """Add a request to the engine; return the queue its outputs arrive on.

        Raises ``ValueError`` (from ``engine.add_request``: prompt too long or empty, bad
        params), :class:`EngineNotRunning`, or whatever else ``add_request`` raised.
        """
        loop = asyncio.get_running_loop()
        out_queue: asyncio.Queue = asyncio.Queue()

        def deliver(item: Any) -> None:  # called on the engine thread
            loop.call_soon_threadsafe(out_queue.put_nowait, item)

        accepted: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed or not self.alive:
                raise EngineNotRunning(f"the engine thread is not running ({self.last_error or 'stopped'})")
            self._commands.put(_Add(request_id, prompt_token_ids, sampling_params, deliver, accepted))
        try:
            await asyncio.wrap_future(accepted)
        except asyncio.CancelledError:
            # The client left while the engine thread was adding the request.
            if accepted.done() and not accepted.cancelled() and accepted.exception() is None:
                self.abort(request_id)
            raise
        return out_queue

    def abort(self, request_id: str) -> None:
        """Ask the engine thread to abort ``request_id`` (no-op if it already finished)."""
        self._commands.put(_Abort(request_id))

    def stats(self) -> dict[str, Any]:
        """The latest ``engine.stats()`` snapshot (do not mutate)."""
        return self._stats

    # ---------------------------------------------------------------- engine thread
    def _read_stats(self) -> dict[str, Any]:
        try:
            return dict(self._engine.stats())
        except Exception:  # stats must never take the server down
            logger.exception("engine.stats() failed")
            return {}

    def _handle(self, cmd: Any) -> bool:
        """Apply one command; return False on the stop sentinel."""
        if cmd is _STOP:
            return False
        if isinstance(cmd, _Add):
            if not cmd.accepted.set_running_or_notify_cancel():
                return True  # the handler was cancelled before the engine saw the request
            try:
                self._engine.add_request(cmd.request_id, cmd.prompt_token_ids, cmd.sampling_params)
            except Exception as exc:  # ValueError → 400 in the handler; anything else → 500
                cmd.accepted.set_exception(exc)
            else:
                self._sinks[cmd.request_id] = cmd.deliver
                self._unfinished[cmd.request_id] = int(getattr(cmd.sampling_params, "n", 1) or 1)
                cmd.accepted.set_result(None)
        elif isinstance(cmd, _Abort):
            self._unfinished.pop(cmd.request_id, None)
            if self._sinks.pop(cmd.request_id, None) is not None:
                try:
                    self._engine.abort(cmd.request_id)
                except Exception:
                    logger.exception("engine.abort(%s) failed", cmd.request_id)
        return True

    def _fail_all(self, message: str) -> None:
        for rid, deliver in list(self._sinks.items()):
            self._safe_deliver(rid, deliver, EngineFailure(message))
            try:
                self._engine.abort(rid)
            except Exception:
                logger.exception("engine.abort(%s) failed after an engine error", rid)
        self._sinks.clear()
        self._unfinished.clear()

    def _safe_deliver(self, rid: str, deliver: Callable[[Any], None], item: Any) -> bool:
        try:
            deliver(item)
            return True
        except RuntimeError:  # the handler's event loop is closed (server shutting down)
            return False

    def _run(self) -> None:
        try:
            self._loop()
            reason = "the server is shutting down"
        except BaseException as exc:  # a bug outside step(): never leave a client hanging
            logger.exception("the engine thread crashed")
            self.last_error = f"{type(exc).__name__}: {exc}"
            reason = f"the engine thread crashed: {self.last_error}"
        with self._lock:
            self._closed = True
        self._fail_all(reason)
        while True:  # requests that were queued but never seen by the engine
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
            if isinstance(cmd, _Add) and cmd.accepted.set_running_or_notify_cancel():
                cmd.accepted.set_exception(EngineNotRunning(reason))
        self._stats = self._read_stats()

    def _loop(self) -> None:
        last_stats = time.monotonic()
        while True:
            idle = not self._engine.has_unfinished()
            try:
                if not self._handle(self._commands.get(block=idle)):
                    return
                while True:
                    if not self._handle(self._commands.get_nowait()):
                        return
            except queue.Empty:
                pass
            if self._engine.has_unfinished():
                try:
                    outputs = self._engine.step()
                except Exception as exc:
                    logger.exception("engine.step() failed")
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    self._fail_all(f"engine step failed: {self.last_error}")
                    outputs = []
                self.steps += 1
                for out in outputs:
                    deliver = self._sinks.get(out.request_id)
                    if deliver is None:
                        continue  # aborted by its handler meanwhile
                    done = False
                    if out.finished:
                        self._unfinished[out.request_id] -= 1
                        done = self._unfinished[out.request_id] <= 0
                    if done:
                        del self._sinks[out.request_id], self._unfinished[out.request_id]
                    if not self._safe_deliver(out.request_id, deliver, out) and not done:
                        self._sinks.pop(out.request_id, None)
                        self._unfinished.pop(out.request_id, None)
                        self._engine.abort(out.request_id)
            now = time.monotonic()
            if now - last_stats >= STATS_INTERVAL_S or not self._engine.has_unfinished():
                self._stats, last_stats = self._read_stats(), now
