"""Where trials run: here (:class:`LocalExecutor`), or on a Ray cluster
(:class:`harness.app.executors.ray.RayExecutor`); both run the same
:func:`~harness.app.core.trial.run_trial`.

A job hands its executor the engine plans of one round (``begin``), asks for one trial at a
time (``trial``: an engine's turn at a repeat, its artefacts going to the sink as they are
made) and ends the round (``end``); ``close`` ends the executor. The local executor starts
engines through the one launch path (:class:`~harness.app.core.startup.EngineStarter`: as many
started ahead of their turn as the machine holds, each frozen until its turn).
"""

from __future__ import annotations

from typing import Any, Protocol

from results.schema import Manifest
from workloads.base import Workload

from harness.app.core.measure import MeasurementSink
from harness.app.core.plan import EnginePlan
from harness.app.core.startup import EngineStarter, start_slots
from harness.app.core.trial import TrialOutcome, TrialSpec, run_trial


class TrialExecutor(Protocol):
    """Runs a job's trials (module docstring)."""

    def begin(self, plans: list[EnginePlan], quiet: bool = False) -> None: ...

    def trial(self, plan: EnginePlan, repeat: int, workload: Workload, tokenizer: Any, sink: MeasurementSink,
              manifest: Manifest) -> TrialOutcome: ...

    def end(self) -> None: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Trials in this process, one after another; every round's engines are started ahead of
    their turns as the machine allows (``parallel``: start them at once, frozen until their
    turn; False = each at its turn, ``--sequential-start``)."""

    def __init__(self, spec: TrialSpec, console: Any, *, hardware_kind: str, parallel: bool = True) -> None:
        self.spec, self.console = spec, console
        self.kind, self.parallel = hardware_kind, parallel
        self.starter: EngineStarter | None = None

    def begin(self, plans: list[EnginePlan], quiet: bool = False) -> None:
        """Start the round's engines (in the background) in as many slots as fit."""
        self.starter = make_starter(self.console, plans, self.kind, self.parallel, quiet)
        self.starter.begin()

    def trial(self, plan: EnginePlan, repeat: int, workload: Workload, tokenizer: Any, sink: MeasurementSink,
              manifest: Manifest) -> TrialOutcome:
        assert self.starter is not None, "begin() first"
        return run_trial(plan, repeat, self.starter, self.spec, workload, tokenizer, sink, self.console, manifest)

    def end(self) -> None:
        """Stop every engine of the round still up (and start-ups in progress)."""
        if self.starter is not None:
            self.starter.close()
            self.starter = None

    def close(self) -> None:
        self.end()


def make_starter(console: Any, plans: list[EnginePlan], kind: str, parallel: bool, quiet: bool = False) -> EngineStarter:
    """The one launch path: as many engines started ahead of their turn as the machine holds
    (all of them on a CPU machine with the memory, else fewer); one slot = each engine starts at
    its turn (``--sequential-start``, a GPU machine)."""
    n = sum(p.starts_process for p in plans)
    slots = start_slots(n, parallel=parallel, hardware_kind=kind)
    if parallel and kind == "cpu" and 1 < n and slots < n and not quiet:
        console.print(f"[yellow]free memory holds {slots} of the {n} engines at once: "
                      f"starting at most {slots} ahead of their turn[/]")
    return EngineStarter(console, [p.start_item() for p in plans], slots)
