"""``bench run --parity report|strict`` inside one run (the orchestrator makes a few calls).

- :meth:`ParityRun.plan`: under ``strict``, each engine's args get the parity target's values
  (``adapters.parity.strict_engine_args``; the user's ``--engine-arg`` wins), printed once;
- :meth:`ParityRun.keep`: once per engine, its effective settings as the engine reported them
  after health and before its first measured phase (read in its first session,
  :func:`harness.app.trial.steps.open_session`, with ``adapters.telemetry.effective.read_effective``);
- :meth:`ParityRun.attach`: stored on the engine's ``EngineResult.effective``;
- :meth:`ParityRun.audit`: at the end, the audit over the measured engines
  (``harness.scoring.checks.parity``), stored as ``summary.parity``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from results.schema import EffectiveSettings, EngineResult, ParityAudit, ParityStrict, RunSummary

from harness.scoring.checks.parity import audit_summary
from harness.app.settings.run import RunSettings
from rich.console import Console


class ParityRun:
    """The parity side of one run of ``cfg`` (a ``RunSettings``: ``engine.parity``, ``engine.args``)."""

    def __init__(self, cfg: RunSettings, console: Console | None = None) -> None:
        self.mode: str = cfg.engine.parity
        self.user_args: dict[str, dict[str, str]] = cfg.engine.args
        self.console = console
        self.args: dict[str, dict[str, str]] | None = None  # None = not planned: the user's args as given
        self.strict: ParityStrict | None = None
        self.hardware: str | None = None
        self.settings: dict[str, EffectiveSettings] = {}

    def plan(self, adapters: Sequence[Any], model_dir: Path | None, hardware: str) -> None:
        """Fix every engine's args for the run (``strict``: the target's values under the user's)."""
        self.hardware = hardware
        if self.mode != "strict":
            return
        from adapters.parity import ParityTarget, strict_engine_args

        target = ParityTarget(model_dir=Path(model_dir) if model_dir else Path("."), hardware=hardware)
        self.args, self.strict = strict_engine_args(adapters, self.user_args, target)
        if self.console is not None:
            for name, added in self.strict.applied.items():
                self.console.print(f"[bold]{name}[/]: --parity strict adds "
                                   + ", ".join(f"{k}={v}" for k, v in added.items()), highlight=False)
            for line in self.strict.could_not + self.strict.user_kept:
                self.console.print(f"[yellow]--parity strict:[/] {line}", highlight=False)

    def engine_args(self, name: str) -> dict[str, str]:
        """The engine args ``name`` is launched with."""
        return (self.args or {}).get(name, self.user_args.get(name, {}))

    def keep(self, name: str, settings: EffectiveSettings) -> None:
        """Keep ``name``'s effective settings as its first session read them (later readings,
        of later repeats, are ignored)."""
        self.settings.setdefault(name, settings)

    def attach(self, name: str, result: EngineResult) -> None:
        """Put the settings read for ``name`` on its result (before it is stored)."""
        if name in self.settings:
            result.effective = self.settings[name]

    def audit(self, summary: RunSummary) -> ParityAudit | None:
        """The run's parity audit (None when no measured engine has settings)."""
        return audit_summary(summary, self.hardware, self.mode, self.strict)
