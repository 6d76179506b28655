"""Where trials run: here (:class:`LocalExecutor`), or on a Ray cluster
(:class:`harness.app.executors.ray.RayExecutor`); both run the same trial bodies.

A **trial** (:class:`Trial`) is one engine's piece of a job: a body called as
``body(plan, starter, sink, console)`` that takes its engine from the starter (started, or
thawed), measures, and hands its artefacts to the sink as they are made (e.g.
:func:`harness.app.trial.steps.run_trial`: one measurement; the load ladder's climb). A job
declares every trial it will ask for (``submit``: Ray starts them all at once, side by side
as the cluster allows), then, round by round, starts the round's engines (``begin``), asks for
each trial's result in its order (``result``: here the body runs now; on Ray the driver waits
for it, writing what it streams meanwhile) and ends the round (``end``); ``close`` ends the
executor. ``Trial.keep``: the engine is frozen and held after the trial, for a later trial of
the same round (local only; a Ray trial starts its own engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from harness.app.trial.measure import MeasurementSink
from harness.app.trial.plan import EnginePlan
from harness.app.trial.startup import EngineStarter, start_slots
from rich.console import Console

Body = Callable[[EnginePlan, EngineStarter, MeasurementSink, Any], Any]
"""``body(plan, starter, sink, console) -> outcome``: a module-level function or a
``functools.partial`` of one (it is pickled to a Ray node)."""


@dataclass(frozen=True)
class Trial:
    """One trial: ``key`` (engine name, index) names it; ``plan`` its engine; ``body`` what it does."""

    key: tuple[str, int]
    plan: EnginePlan
    body: Body
    keep: bool = False


class TrialExecutor(Protocol):
    """Runs a job's trials (module docstring)."""

    def submit(self, trials: Sequence[Trial]) -> None: ...

    def begin(self, plans: list[EnginePlan], quiet: bool = False) -> None: ...

    def result(self, trial: Trial, sink: MeasurementSink) -> Any: ...

    def release(self, name: str) -> None: ...

    def hold(self, plans: list[EnginePlan]) -> None: ...

    def end(self) -> None: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Trials in this process, one after another; every round's engines are started ahead of
    their turns as the machine allows (``parallel``: start them at once, frozen until their
    turn; False = each at its turn, ``--sequential-start``)."""

    def __init__(self, console: Console, *, hardware_kind: str, parallel: bool = True) -> None:
        self.console, self.kind, self.parallel = console, hardware_kind, parallel
        self.starter: EngineStarter | None = None

    def submit(self, trials: Sequence[Trial]) -> None:
        pass  # each trial runs when its result is asked for

    def begin(self, plans: list[EnginePlan], quiet: bool = False) -> None:
        """Start the round's engines (in the background) in as many slots as fit."""
        self.starter = make_starter(self.console, plans, self.kind, self.parallel, quiet)
        self.starter.begin()

    def result(self, trial: Trial, sink: MeasurementSink) -> Any:
        assert self.starter is not None, "begin() first"
        starter = _Keeping(self.starter) if trial.keep and self.starter.fits_all else self.starter
        return trial.body(trial.plan, starter, sink, self.console)  # type: ignore[arg-type]

    def release(self, name: str) -> None:
        """Stop a kept engine now (frees its memory for the rest of the round)."""
        if self.starter is not None:
            self.starter.release(name)

    def hold(self, plans: list[EnginePlan]) -> None:
        """Make sure ``plans``' engines are up for their next trial: when the round did not keep
        them (they did not all fit at once, or ``--sequential-start``), a new round starts them
        (and stops what the old one still held)."""
        if self.starter is not None and all(self.starter.holds(p.name) for p in plans if p.starts_process):
            return
        self.end()
        self.begin(plans, quiet=True)

    def end(self) -> None:
        """Stop every engine of the round still up (and start-ups in progress)."""
        if self.starter is not None:
            self.starter.close()
            self.starter = None

    def close(self) -> None:
        self.end()


class _Keeping:
    """The round's starter, seen by a trial whose engine is held for a later trial: its
    ``take`` freezes the engine at the end instead of stopping it."""

    def __init__(self, starter: EngineStarter) -> None:
        self._starter = starter

    def take(self, name: str, keep: bool = True) -> Any:
        return self._starter.take(name, keep=True)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._starter, attr)


def make_starter(console: Console, plans: list[EnginePlan], kind: str, parallel: bool, quiet: bool = False) -> EngineStarter:
    """The one launch path: as many engines started ahead of their turn as the machine holds
    (all of them on a CPU machine with the memory, else fewer); one slot = each engine starts at
    its turn (``--sequential-start``, a GPU machine)."""
    n = sum(p.starts_process for p in plans)
    slots = start_slots(n, parallel=parallel, hardware_kind=kind)
    if parallel and kind == "cpu" and 1 < n and slots < n and not quiet:
        console.print(f"[yellow]free memory holds {slots} of the {n} engines at once: "
                      f"starting at most {slots} ahead of their turn[/]")
    return EngineStarter(console, [p.start_item() for p in plans], slots)
