"""Parallel engine start-up: the engines of a run start together, then wait frozen.

Why: on the 2-core reference machine, start-up (Python imports, weight load, KV cache
allocation) takes vLLM-CPU and SGLang ~45 s each, and one start after another was about a
quarter of a default ``bench run --engine all``. Start-up is not measured, so the engines may
compete for the CPU while they start. Each engine starts in its own thread; the moment it
answers health its whole process group is frozen (SIGSTOP, :meth:`Endpoint.pause`), so an
idle server never takes CPU from the engine being measured. :meth:`ParallelStarter.take`
thaws one (SIGCONT, then health again) for its turn and stops it when the turn ends.

The cost is memory: every started engine stays resident until its turn.
:func:`parallel_start_fits` checks the machine's available memory first; the orchestrator
falls back to one start after another when it does not fit (or on ``--sequential-start``).
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any, Iterator

from rich.markup import escape

from adapters.base import Endpoint, EngineError, LaunchConfig

# Mean resident memory (USS) of one started, idle CPU engine with the 1 GiB KV budget of
# adapters/server.py: 10.5 GiB for all 7 CPU engines on the reference machine (0.3 GiB for
# the transformers shim .. 3.6 GiB for SGLang's 3 processes), rounded up.
ENGINE_RESIDENT_GIB = 2.0
# Memory left free for the client, the measured engine's growth (a KV cache that grows to its
# 1 GiB budget, activations of a static batch) and the OS (GiB).
HEADROOM_GIB = 3.0


def parallel_start_fits(n_engines: int, available_bytes: int | None = None) -> bool:
    """True when ``n_engines`` started engines fit in the available memory with headroom.

    ``available_bytes``: defaults to ``psutil.virtual_memory().available``.
    """
    if available_bytes is None:
        import psutil

        available_bytes = psutil.virtual_memory().available
    return available_bytes >= (n_engines * ENGINE_RESIDENT_GIB + HEADROOM_GIB) * 2**30


class ParallelStarter:
    """Starts several engines at once and holds each one, frozen, until its turn.

    ``console``: a rich Console for progress. Use :meth:`begin` and :meth:`wait` (or
    :meth:`start`, both at once), then :meth:`take` per engine, and always :meth:`close` (it
    stops every engine not yet taken).
    """

    def __init__(self, console: Any) -> None:
        self.console = console
        self.cancel = threading.Event()
        self._lock = threading.Lock()
        self._stacks: dict[str, ExitStack] = {}
        self._ready: dict[str, tuple[Endpoint, float]] = {}
        self._errors: dict[str, EngineError] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list[Future] = []

    def _start_one(self, name: str, adapter: Any, config: LaunchConfig, t0: float) -> None:
        """Thread body: launch, freeze once healthy, report; a failure is kept for :meth:`take`."""
        stack = ExitStack()
        try:
            ep = stack.enter_context(adapter.launch(replace(config, cancel=self.cancel)))
            elapsed = time.monotonic() - t0
            if ep.pause is not None:
                ep.pause()
        except Exception as exc:  # any failure of one start fails that engine, not the run
            stack.close()
            err = exc if isinstance(exc, EngineError) else EngineError(f"{name}: start-up failed: {type(exc).__name__}: {exc}")
            with self._lock:
                self._errors[name] = err
            if not self.cancel.is_set():
                self.console.print(f"  [red]{escape(name)}[/]: failed to start — {escape(str(err))}")
            return
        except BaseException:
            stack.close()
            raise
        with self._lock:
            self._stacks[name] = stack
            self._ready[name] = (ep, elapsed)
        self.console.print(f"  {escape(name)}: ready in {elapsed:.1f} s (frozen until its turn)")

    def begin(self, items: list[tuple[str, Any, LaunchConfig]]) -> None:
        """Start every ``(name, adapter, launch config)`` at once, each in its own thread, and
        return at once: the caller may do other work, then :meth:`wait`."""
        if not items:
            return
        names = ", ".join(n for n, _, _ in items)
        self.console.print(f"Starting {len(items)} engines in parallel ({escape(names)}); "
                           "each is frozen once ready until its turn …")
        t0 = time.monotonic()
        self._pool = ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="engine-start")
        self._futures = [self._pool.submit(self._start_one, name, adapter, cfg, t0) for name, adapter, cfg in items]

    def wait(self) -> None:
        """Block until every engine of :meth:`begin` is healthy (and frozen) or has failed.
        A failure is kept and raised by :meth:`take`.

        On KeyboardInterrupt: abandons the start-ups in progress, stops what had started, re-raises.
        """
        pending = set(self._futures)
        try:
            while pending:
                # short waits: a Ctrl-C is seen within 0.5 s whatever the platform's lock semantics
                _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        except BaseException:
            self.close()
            raise

    def start(self, items: list[tuple[str, Any, LaunchConfig]]) -> None:
        """:meth:`begin` then :meth:`wait`."""
        self.begin(items)
        self.wait()

    def holds(self, name: str) -> bool:
        """True when ``name`` was started here (ready or failed) and not yet taken."""
        with self._lock:
            return name in self._ready or name in self._errors

    @contextmanager
    def take(self, name: str) -> Iterator[tuple[Endpoint, float]]:
        """Thaw engine ``name`` and yield ``(endpoint, start-up seconds)``; stop it on exit.

        Raises the :class:`EngineError` of a failed start, or one when the engine died or
        stopped answering while it waited; KeyError for an engine that was never started.
        """
        with self._lock:
            if name in self._errors:
                raise self._errors.pop(name)
            ep, startup_s = self._ready.pop(name)
            stack = self._stacks.pop(name)
        with stack:
            if ep.resume is not None:
                ep.resume()
            yield ep, startup_s

    def close(self) -> None:
        """Abandon start-ups still in progress and stop every engine still held (thawed
        first, so it can shut down cleanly). Ctrl-C and SIGTERM are held off meanwhile (in
        the main thread): a second Ctrl-C must not leave a half-stopped engine behind."""
        with _signals_held():
            pending = [f for f in self._futures if not f.done()]
            with self._lock:
                held = len(self._stacks)
            if pending or held:
                self.console.print(f"Stopping {len(pending) + held} engine(s) …")
            if self._pool is not None:
                if pending:
                    self.cancel.set()
                self._pool.shutdown(wait=True, cancel_futures=True)
            with self._lock:
                stacks = list(self._stacks.values())
                self._stacks.clear()
                self._ready.clear()
                self._errors.clear()
            for stack in stacks:
                stack.close()

    def failed(self, name: str) -> bool:
        """True when ``name``'s start failed (its error is raised by :meth:`take`)."""
        with self._lock:
            return name in self._errors


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for the duration (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in saved:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
