"""The measuring modes of ``bench run``: strategies the run orchestrator hands its typed context
(:class:`harness.app.run.context.RunContext`) and its planned engines.

- :class:`harness.app.run.point_mode.PointMode`: one load point per engine and repeat, when the
  command line or the workload spec asks for one (a request count, a rate, a concurrency, a
  duration, a ramp-up, or a trace replayed at its own times);
- :class:`harness.app.run.ladder_mode.LadderMode`: the main job (every engine's load ladder,
  the allocation within ``--time-budget``, the decision);
- :class:`harness.app.run.ladder_mode.TunedLadderMode`: ``--tune``, each engine's configuration
  searched first, then the main job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from harness.app.trial.plan import EnginePlan
from harness.app.run.context import RunContext

if TYPE_CHECKING:
    from harness.app.settings.run import RunSettings


class Mode(Protocol):
    """A way of measuring the planned engines over the run's context."""

    name: str

    def run(self, ctx: RunContext, plans: list[EnginePlan]) -> str:
        """Measure ``plans``, every result written through ``ctx.state.writer`` as it comes;
        returns who interrupted the run ("the user (Ctrl-C)", "SIGTERM"; "" = nobody)."""
        ...


def mode_for(cfg: "RunSettings") -> Mode:
    """The mode ``cfg`` asks for (module docstring)."""
    if not cfg.ladder:
        from harness.app.run.point_mode import PointMode

        return PointMode()
    from harness.app.run.ladder_mode import LadderMode, TunedLadderMode

    return TunedLadderMode() if cfg.tune.seconds > 0 else LadderMode()
